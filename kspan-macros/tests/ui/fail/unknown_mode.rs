#[kspan::kernel_span("vfs_read", mode = "fexitt")]
fn vfs_read(count: usize) {}

fn main() {}
