#[kspan::kernel_span("vfs_read")]
fn vfs_read(#[capture(user)] count: usize) {}

fn main() {}
