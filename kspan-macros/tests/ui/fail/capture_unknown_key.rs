#[kspan::kernel_span("vfs_read")]
fn vfs_read(#[capture(pth = "file->f_pos")] pos: i64) {}

fn main() {}
