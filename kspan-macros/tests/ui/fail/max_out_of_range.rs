#[kspan::kernel_span("vfs_read")]
fn vfs_read(#[capture(max = 5000)] buf: &str) {}

fn main() {}
