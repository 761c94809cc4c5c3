#[kspan::kernel_span("vfs_read", min_duration = "5 min")]
fn vfs_read(count: usize) {}

fn main() {}
