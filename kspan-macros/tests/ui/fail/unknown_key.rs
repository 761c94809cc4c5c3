#[kspan::kernel_span("vfs_read", mdoe = "fexit")]
fn vfs_read(count: usize) {}

fn main() {}
