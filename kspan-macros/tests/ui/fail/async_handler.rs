#[kspan::kernel_span("vfs_read")]
async fn vfs_read(count: usize) {}

fn main() {}
