#[kspan::kernel_span("vfs_read", mode = "fentry", histogram)]
fn vfs_read(count: usize) {}

fn main() {}
