// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A handler that panics on every call never reaches the process's panic
//! hook (kspan logs its first panic itself); every panic is counted and
//! every span exported, and the application's own panics still reach its
//! hook. Checked on the host with a syscall source.

use std::sync::atomic::{AtomicUsize, Ordering};

#[kspan::kernel_span(syscall = "getppid")]
fn getppid(ret: i64) {
    panic!("this handler always panics");
}

extern "C" {
    #[link_name = "getppid"]
    fn libc_getppid() -> i32;
}

static HOOK_CALLS: AtomicUsize = AtomicUsize::new(0);

#[test]
fn a_handler_panicking_on_every_call_is_counted_always_and_kept_from_the_hook() {
    // The application's hook, set before kspan starts: kspan keeps it.
    std::panic::set_hook(Box::new(|info| {
        HOOK_CALLS.fetch_add(1, Ordering::SeqCst);
        eprintln!("application hook: {info}");
    }));
    let (provider, exporter) = kspan_tests::in_memory_provider();
    let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&getppid)
        .start()
        .expect("syscall sources start on the host");
    for _ in 0..50 {
        // SAFETY: getppid has no arguments and cannot fail.
        unsafe { libc_getppid() };
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let stats = runtime
        .block_on(kspan.shutdown())
        .expect("kspan shuts down");
    assert_eq!(stats.handler_panics, 50, "{stats:?}");
    assert_eq!(HOOK_CALLS.load(Ordering::SeqCst), 0, "{stats:?}");
    let spans = exporter.get_finished_spans().unwrap();
    let marked = spans
        .iter()
        .filter(|s| {
            s.name == "getppid"
                && s.attributes
                    .iter()
                    .any(|kv| kv.key.as_str() == "kspan.handler.panicked")
        })
        .count();
    assert_eq!(marked, 50);
    // Other panics still reach the application's hook.
    let _ = std::panic::catch_unwind(|| panic!("an application panic"));
    assert_eq!(HOOK_CALLS.load(Ordering::SeqCst), 1);
}
