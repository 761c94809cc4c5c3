// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Values the kernel really had (run in the VM by `cargo xtask test`):
//! `do_unlinkat` (`filename_unlinkat` on 7.x) drops its `struct filename`
//! (`putname`) before it returns,
//! so at exit the name's reference count is already 0; a capture read
//! `at = "entry"` carries what the call was given to the span that ends at
//! exit.

use kspan_tests::span_attr;

/// Kernels where `filename.refcnt` is an `atomic_t` (6.12).
#[kspan::kernel_span("do_unlinkat", mode = "fexit")]
fn unlink_atomic(
    #[capture(path = "name->name", at = "entry")] name: &str,
    #[capture(path = "name->refcnt.counter", at = "entry")] refs_at_entry: i32,
    #[capture(path = "name->refcnt.counter")] refs_at_exit: i32,
    ret: i64,
) {
}

/// Kernels where `filename.refcnt` is an `int` (5.10, 6.1). `ret` is an
/// `int` on 6.x, a `long` on 5.10: an `i64` reads either.
#[kspan::kernel_span("do_unlinkat", mode = "fexit")]
fn unlink_int(
    #[capture(path = "name->name", at = "entry")] name: &str,
    #[capture(path = "name->refcnt", at = "entry")] refs_at_entry: i32,
    #[capture(path = "name->refcnt")] refs_at_exit: i32,
    ret: i64,
) {
}

/// 7.x: `do_unlinkat` became `filename_unlinkat` (same parameters).
#[kspan::kernel_span("filename_unlinkat", mode = "fexit")]
fn filename_unlink_atomic(
    #[capture(path = "name->name", at = "entry")] name: &str,
    #[capture(path = "name->refcnt.counter", at = "entry")] refs_at_entry: i32,
    #[capture(path = "name->refcnt.counter")] refs_at_exit: i32,
    ret: i64,
) {
}

#[kspan::kernel_span("filename_unlinkat", mode = "fexit")]
fn filename_unlink_int(
    #[capture(path = "name->name", at = "entry")] name: &str,
    #[capture(path = "name->refcnt", at = "entry")] refs_at_entry: i32,
    #[capture(path = "name->refcnt")] refs_at_exit: i32,
    ret: i64,
) {
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines (fentry/fexit); run by `cargo xtask test` in the VM"]
async fn a_name_read_at_entry_is_the_one_the_call_was_given() {
    let (provider, exporter) = kspan_tests::in_memory_provider();
    // The first of the functions and layouts this kernel has.
    let mut kspan = None;
    let mut refused = Vec::new();
    for probe in [
        &unlink_atomic,
        &unlink_int,
        &filename_unlink_atomic,
        &filename_unlink_int,
    ] {
        match kspan::Kspan::builder(&provider)
            .orphans(kspan::Orphans::NewTrace)
            .probe(probe)
            .start()
        {
            Ok(started) => {
                kspan = Some((started, probe.spec.function));
                break;
            }
            Err(kspan::Error::Plan(e)) => refused.push(e.to_string()),
            Err(e) => panic!("kspan starts: {e}"),
        }
    }
    let (kspan, function) =
        kspan.unwrap_or_else(|| panic!("no unlink function or layout plans: {refused:#?}"));
    let dir = std::env::temp_dir();
    let paths: Vec<String> = (0..5)
        .map(|i| {
            dir.join(format!("kspan-unlink-{}-{i}", std::process::id()))
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    for path in &paths {
        std::fs::write(path, b"x").expect("creates the file");
        std::fs::remove_file(path).expect("unlinks it");
    }
    let stats = kspan.shutdown().await.expect("kspan shuts down");
    assert_eq!(stats.lost(), 0, "{stats:?}");
    let tid = kspan_tests::gettid();
    let spans: Vec<_> = exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| s.name == function && span_attr(s, "kspan.tid") == Some(tid.into()))
        .collect();
    assert_eq!(spans.len(), paths.len(), "one span per unlink: {spans:#?}");
    for (span, path) in spans.iter().zip(&paths) {
        assert_eq!(
            span_attr(span, "kernel.arg.name"),
            Some(path.clone().into()),
            "{span:#?}"
        );
        assert_eq!(span_attr(span, "kernel.return_value"), Some(0i64.into()));
        // At entry the caller holds the name. `do_unlinkat` drops the last
        // reference (`putname`) before it returns: what a capture at exit
        // reads through `name` is memory the kernel already released. On
        // 7.x the caller of `filename_unlinkat` keeps it across the call.
        let at_entry = span_attr(span, "kernel.arg.refs_at_entry");
        assert!(
            matches!(at_entry, Some(opentelemetry::Value::I64(n)) if n >= 1),
            "{span:#?}"
        );
        let at_exit = if function == "do_unlinkat" {
            Some(0i64.into())
        } else {
            at_entry
        };
        assert_eq!(
            span_attr(span, "kernel.arg.refs_at_exit"),
            at_exit,
            "{span:#?}"
        );
    }
}
