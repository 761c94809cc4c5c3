#[kspan::kernel_span("vfs_read", mode = "kprobe", errors_only)]
fn vfs_read(count: usize) {}

fn main() {}
