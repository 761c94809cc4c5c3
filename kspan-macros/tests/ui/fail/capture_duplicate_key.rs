#[kspan::kernel_span("vfs_read")]
fn vfs_read(#[capture(path = "file->f_pos", path = "file->f_flags")] pos: i64) {}

fn main() {}
