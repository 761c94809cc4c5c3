#[kspan::kernel_span("vfs_read")]
fn vfs_read(#[capture(max = 10)] count: usize) {}

fn main() {}
