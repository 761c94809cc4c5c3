#[kspan::kernel_span("do_unlinkat" | filename_unlinkat)]
fn unlink(dfd: i32) {}

fn main() {}
