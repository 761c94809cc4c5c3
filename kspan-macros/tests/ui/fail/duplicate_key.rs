#[kspan::kernel_span("vfs_read", mode = "fexit", mode = "fentry")]
fn vfs_read(count: usize) {}

fn main() {}
