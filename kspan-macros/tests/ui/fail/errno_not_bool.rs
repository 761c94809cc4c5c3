#[kspan::kernel_span("vfs_read", errno = "no")]
fn vfs_read(ret: isize) {}

fn main() {}
