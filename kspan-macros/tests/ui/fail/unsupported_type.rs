#[kspan::kernel_span("vfs_read")]
fn vfs_read(count: String) {}

fn main() {}
