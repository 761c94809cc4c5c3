#[kspan::kernel_span("vfs_read")]
fn vfs_read<T>(count: usize) {}

fn main() {}
