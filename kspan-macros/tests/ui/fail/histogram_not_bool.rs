#[kspan::kernel_span("vfs_read", histogram = "log2")]
fn vfs_read(ret: isize) {}

fn main() {}
