#[kspan::kernel_span("vfs_read", histogram, histogram = false)]
fn vfs_read(ret: isize) {}

fn main() {}
