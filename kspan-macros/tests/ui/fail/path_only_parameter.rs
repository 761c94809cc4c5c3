#[kspan::kernel_span("vfs_read")]
fn vfs_read(#[capture(path = "file")] f: u64) {}

fn main() {}
