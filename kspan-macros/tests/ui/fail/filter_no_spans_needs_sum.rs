#[kspan::kernel_span("vfs_read", spans = false)]
fn vfs_read(count: usize) {}

fn main() {}
