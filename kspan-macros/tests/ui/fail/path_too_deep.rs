#[kspan::kernel_span("vfs_read")]
fn vfs_read(#[capture(path = "file->a.b.c.d.e.f.g.h.i")] x: u64) {}

fn main() {}
