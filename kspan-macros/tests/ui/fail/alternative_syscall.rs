#[kspan::kernel_span(syscall = "openat" | "open")]
fn open(flags: i32) {}

fn main() {}
