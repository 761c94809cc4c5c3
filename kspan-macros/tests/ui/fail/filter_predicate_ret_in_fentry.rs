#[kspan::kernel_span("vfs_read", mode = "fentry", filter = "ret < 0")]
fn vfs_read(count: usize) {}

fn main() {}
