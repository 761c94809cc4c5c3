#[kspan::kernel_span("vfs_read")]
fn vfs_read((a, b): (u32, u32)) {}

fn main() {}
