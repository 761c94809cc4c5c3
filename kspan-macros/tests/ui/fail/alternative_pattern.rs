#[kspan::kernel_span("do_unlinkat" | "filename_*")]
fn unlink(dfd: i32) {}

fn main() {}
