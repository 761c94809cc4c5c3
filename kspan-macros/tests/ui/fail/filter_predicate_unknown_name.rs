#[kspan::kernel_span("vfs_read", filter = "size >= 65536")]
fn vfs_read(count: usize, ret: isize) {}

fn main() {}
