#[kspan::kernel_span("vfs_read", spans = false, sum, rate_limit = 100)]
fn vfs_read(count: usize) {}

fn main() {}
