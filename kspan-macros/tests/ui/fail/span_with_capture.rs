#[kspan::kernel_span("vfs_read")]
fn vfs_read(#[capture(user)] span: &mut kspan::KernelSpan) {}

fn main() {}
