#[kspan::kernel_span("do_unlinkat")]
fn do_unlinkat(#[capture(path = "name->name", at = "start")] name: &str) {}

fn main() {}
