#[kspan::kernel_span("vfs_read", mode = "fentry")]
fn vfs_read(#[capture(user, len = "ret")] buf: &[u8]) {}

fn main() {}
