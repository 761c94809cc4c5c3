#[kspan::kernel_span("vfs_read")]
fn vfs_read(#[capture(path = "file->f_pos")] #[capture(user)] pos: i64) {}

fn main() {}
