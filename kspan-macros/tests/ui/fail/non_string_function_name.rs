#[kspan::kernel_span(vfs_read, mode = "fexit")]
fn vfs_read(count: usize) {}

fn main() {}
