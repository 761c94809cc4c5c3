#[kspan::kernel_span("vfs_read", rate_limit = 0)]
fn vfs_read(count: usize) {}

fn main() {}
