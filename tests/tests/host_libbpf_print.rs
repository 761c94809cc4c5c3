// SPDX-License-Identifier: Apache-2.0 OR MIT
//! libbpf's print callback is process-wide and belongs to the application:
//! kspan captures verifier logs through per-program buffers instead, so an
//! application's own hook keeps receiving libbpf's messages while kspan
//! loads, and is still installed afterwards.

use std::sync::Mutex;

use libbpf_rs::PrintLevel;

static SEEN: Mutex<String> = Mutex::new(String::new());

fn the_applications_hook(_level: PrintLevel, message: String) {
    SEEN.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push_str(&message);
}

#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn vfs_read(count: usize, ret: isize) {}

#[tokio::test]
async fn the_applications_libbpf_print_hook_keeps_working() {
    libbpf_rs::set_print(Some((PrintLevel::Info, the_applications_hook)));
    let (provider, _spans) = kspan_tests::in_memory_provider();
    // KERNEL-LAB.md: the host kernel refuses trampolines with EPERM, so the
    // load fails inside libbpf, which says so through the print callback.
    let err = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&vfs_read)
        .start()
        .expect_err("the host refuses fexit");
    assert!(err.to_string().contains("EPERM"), "{err}");
    let seen = SEEN.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(
        seen.contains("BPF program load failed: -EPERM"),
        "libbpf's own lines about the refusal reach the application's hook: {seen:?}"
    );
    let (level, hook) = libbpf_rs::get_print().expect("a print hook is installed");
    assert!(
        level == PrintLevel::Info && hook as *const () == the_applications_hook as *const (),
        "the application's hook is still the one installed"
    );
}
