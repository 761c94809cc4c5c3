#[kspan::kernel_span("vfs_read", mode = "fentry")]
fn vfs_read(count: usize, ret: isize) {}

fn main() {}
