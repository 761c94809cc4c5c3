#[kspan::kernel_span("vfs_read", mode = "fentry", sum)]
fn vfs_read(count: usize) {}

fn main() {}
