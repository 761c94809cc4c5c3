#[kspan::kernel_span("do_unlinkat", mode = "fentry")]
fn do_unlinkat(#[capture(path = "name->name", at = "entry")] name: &str) {}

fn main() {}
