#[kspan::kernel_span("do_unlinkat" | "", mode = "fexit")]
fn unlink(dfd: i32) {}

fn main() {}
