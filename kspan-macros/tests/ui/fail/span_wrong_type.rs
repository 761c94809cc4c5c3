#[kspan::kernel_span("vfs_read")]
fn vfs_read(span: u64) {}

fn main() {}
