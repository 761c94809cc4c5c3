#[kspan::kernel_span("do_unlinkat", filter = "refs > 1")]
fn do_unlinkat(#[capture(path = "name->refcnt", at = "entry")] refs: i32) {}

fn main() {}
