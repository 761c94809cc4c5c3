// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The `hot_reads` example over OTLP (run in the VM by `cargo xtask test`):
//! inside `hot_loop`, N one-byte reads and M 64 KiB reads of /dev/zero;
//! `vfs_read` keeps the large ones as spans and sums the rest onto
//! `hot_loop`, and counts every call in its latency histogram. A real
//! OTLP/gRPC receiver gets exactly M `vfs_read` spans, children of
//! `hot_loop`; `hot_loop` carries calls = N; the histogram
//! `kernel.vfs_read.duration` counts at least N + M calls.

use kspan_tests::{example, run_with_receiver};

const SMALL: u64 = 5000;
const LARGE: u64 = 12;

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines or kprobes; run by `cargo xtask test` in the VM"]
async fn large_reads_are_spans_and_small_ones_add_up_on_the_loop() {
    let run = run_with_receiver(
        &example("hot_reads"),
        &[&SMALL.to_string(), &LARGE.to_string()],
        "hot-reads",
    )
    .await;
    assert!(run.output.status.success(), "{}", run.stderr());
    let hot_loop = kspan_tests::the_span(&run.spans, "hot_loop");
    let reads: Vec<_> = run.spans.iter().filter(|s| s.name == "vfs_read").collect();
    assert_eq!(reads.len() as u64, LARGE, "{}", run.stdout());
    for read in &reads {
        assert_eq!(read.parent_span_id, hot_loop.span_id);
        assert_eq!(read.int("kernel.arg.count"), Some(65536));
        assert_eq!(read.int("kernel.return_value"), Some(65536));
    }
    assert_eq!(hot_loop.int("kernel.vfs_read.calls"), Some(SMALL as i64));
    assert_eq!(hot_loop.int("kernel.vfs_read.errors"), Some(0));
    let summed = hot_loop
        .int("kernel.vfs_read.duration_ns")
        .expect("summed time");
    let loop_ns = (hot_loop.end_ns - hot_loop.start_ns) as i64;
    assert!(summed > 0 && summed < loop_ns, "{summed} ns of {loop_ns}");
    let stdout = run.stdout();
    // The filter runs before the thread's context is read: the process's
    // small reads outside `hot_loop` (its start-up) are refused too.
    let filtered: u64 = stdout
        .split("filtered in the kernel ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no filtered count in {stdout}"));
    assert!(filtered >= SMALL, "{stdout}");
    kspan_tests::assert_all_acknowledged(&stdout);

    let points = kspan_tests::latest_histogram(&run.metrics, "kernel.vfs_read.duration");
    let ok: Vec<_> = points
        .iter()
        .filter(|p| p.str("error.type").is_none())
        .collect();
    assert_eq!(ok.len(), 1, "{points:?}");
    kspan_tests::latency::check_shape(ok[0]);
    assert!(
        ok[0].count >= SMALL + LARGE,
        "{} calls in the histogram, {} made in hot_loop",
        ok[0].count,
        SMALL + LARGE
    );
    // The loop's summed time is part of the histogram's.
    let total = ok[0].sum.expect("a sum") as i64;
    assert!(total >= summed, "{total} < {summed}");
}
