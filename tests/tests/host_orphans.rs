// SPDX-License-Identifier: Apache-2.0 OR MIT
//! With `Orphans::Drop` (the default), calls made outside application
//! spans are dropped: kspan says so once per runtime, with the count and
//! the fix, whether no kernel span was exported (a program whose calls are
//! all made so exports nothing) or some were beside them; the figures show
//! the orphans.
//! Checked on the host with a syscall source and kspan's context observer.

use std::time::Duration;

use opentelemetry::trace::{Tracer as _, TracerProvider as _};

#[kspan::kernel_span(syscall = "getppid")]
fn getppid(ret: i64) {}

extern "C" {
    #[link_name = "getppid"]
    fn libc_getppid() -> i32;
}

fn calls(n: usize) {
    for _ in 0..n {
        // SAFETY: getppid has no arguments and cannot fail.
        unsafe { libc_getppid() };
    }
}

/// The warnings about orphans so far.
fn orphan_warnings() -> Vec<String> {
    kspan_tests::warnings::said("no application span")
}

/// Longer than the consumer's tick (a second).
const PAST_A_TICK: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread")]
async fn orphans_dropped_are_said_once_per_runtime_with_the_count_and_the_fix() {
    kspan_tests::warnings::capture();
    let (provider, exporter) = kspan_tests::in_memory_provider();
    let builder = || kspan::Kspan::builder(&provider).probe(&getppid);

    // Every call outside an application span: said on the consumer's tick.
    let kspan = builder()
        .start()
        .expect("syscall sources start on the host");
    calls(100);
    std::thread::sleep(PAST_A_TICK);
    let said = orphan_warnings();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains(".orphans(kspan::Orphans::NewTrace)"),
        "{}",
        said[0]
    );
    assert!(said[0].contains("context observer"), "{}", said[0]);
    // Once per runtime.
    calls(100);
    std::thread::sleep(PAST_A_TICK);
    let stats = kspan.shutdown().await.expect("kspan shuts down");
    assert_eq!(stats.orphans_dropped, 200, "{stats:?}");
    assert_eq!(stats.spans_to_pipeline, 0, "{stats:?}");
    assert_eq!(orphan_warnings().len(), 1);

    // A runtime shut down before its first tick says it at shutdown.
    let kspan = builder()
        .start()
        .expect("syscall sources start on the host");
    calls(10);
    let stats = kspan.shutdown().await.expect("kspan shuts down");
    assert_eq!(stats.orphans_dropped, 10, "{stats:?}");
    assert_eq!(orphan_warnings().len(), 2);

    // Calls inside an application span became kernel spans; the 100 made
    // outside any, beside them, are said all the same (once, with the
    // count and the fix), and the figures show them.
    let kspan = builder()
        .start()
        .expect("syscall sources start on the host");
    provider.tracer("app").in_span("request", |_| calls(5));
    std::thread::sleep(PAST_A_TICK);
    assert_eq!(orphan_warnings().len(), 2, "no orphan yet: nothing to say");
    calls(100);
    std::thread::sleep(PAST_A_TICK);
    let said = orphan_warnings();
    assert_eq!(said.len(), 3, "said beside exported spans: {said:?}");
    // The count when the consumer's tick found them: all 100, unless the
    // tick fell inside the loop of calls.
    let counted: u64 = said[2]
        .split_once("dropped ")
        .and_then(|(_, rest)| rest.split_once(" kernel calls"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("the warning gives the count: {}", said[2]));
    assert!((1..=100).contains(&counted), "{}", said[2]);
    assert!(
        said[2].contains("beside the 5 kernel spans")
            && said[2].contains(".orphans(kspan::Orphans::NewTrace)"),
        "the count and the fix: {}",
        said[2]
    );
    calls(100);
    let stats = kspan.shutdown().await.expect("kspan shuts down");
    assert_eq!(stats.orphans_dropped, 200, "{stats:?}");
    assert_eq!(stats.spans_to_pipeline, 5, "{stats:?}");
    assert_eq!(orphan_warnings().len(), 3, "once: {:?}", orphan_warnings());
    assert!(
        stats
            .to_string()
            .contains("; 200 calls dropped as orphans (no application span active)"),
        "the figures show the orphans: {stats}"
    );
    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(spans.iter().filter(|s| s.name == "getppid").count(), 5);

    // `Orphans::NewTrace`: nothing is dropped, nothing said.
    let kspan = builder()
        .orphans(kspan::Orphans::NewTrace)
        .start()
        .expect("syscall sources start on the host");
    calls(10);
    let stats = kspan.shutdown().await.expect("kspan shuts down");
    assert_eq!(stats.orphans_dropped, 0, "{stats:?}");
    assert_eq!(orphan_warnings().len(), 3);
}
