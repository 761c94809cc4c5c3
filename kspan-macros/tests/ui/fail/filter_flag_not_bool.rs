#[kspan::kernel_span("vfs_read", errors_only = "yes")]
fn vfs_read(count: usize) {}

fn main() {}
