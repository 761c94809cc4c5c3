#[kspan::kernel_span("vfs_read", filter = "count >= 1 && (ret < 0)")]
fn vfs_read(count: usize) {}

fn main() {}
