#[kspan::kernel_span("vfs_read", filter = "buf == 0")]
fn vfs_read(#[capture(user, len = "count")] buf: &[u8], count: usize) {}

fn main() {}
