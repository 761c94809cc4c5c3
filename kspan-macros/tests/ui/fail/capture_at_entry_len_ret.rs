#[kspan::kernel_span("vfs_read")]
fn vfs_read(#[capture(user, len = "ret", at = "entry")] buf: &[u8]) {}

fn main() {}
