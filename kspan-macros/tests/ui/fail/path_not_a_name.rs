#[kspan::kernel_span("vfs_read")]
fn vfs_read(#[capture(path = "->f_pos")] pos: i64) {}

fn main() {}
