#[kspan::kernel_span("vfs_read", mode = "fentry", min_duration = "1ms")]
fn vfs_read(count: usize) {}

fn main() {}
