#[kspan::kernel_span("vfs_read")]
fn vfs_read(ret: &str) {}

fn main() {}
