#[kspan::kernel_span("vfs_read")]
fn vfs_read(#[capture(max = 4)] ret: isize) {}

fn main() {}
