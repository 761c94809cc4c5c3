#[kspan::kernel_span("")]
fn vfs_read(count: usize) {}

fn main() {}
