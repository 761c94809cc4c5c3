#[kspan::kernel_span("do_unlinkat" | "filename_unlinkat", optional = "yes")]
fn unlink(dfd: i32) {}

fn main() {}
