#[kspan::kernel_span("vfs_read")]
fn vfs_read(#[capture(path = "file->")] pos: i64) {}

fn main() {}
