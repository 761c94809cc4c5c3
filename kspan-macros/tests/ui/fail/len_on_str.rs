#[kspan::kernel_span("vfs_read")]
fn vfs_read(#[capture(len = "count")] buf: &str) {}

fn main() {}
