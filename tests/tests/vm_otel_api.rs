// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A service on the OpenTelemetry API alone (the `otel_api` example, no
//! `tracing`) on a real kernel: its `vfs_read` calls, caught by fexit
//! trampolines and received over OTLP/gRPC, are children of the span they
//! were made in: on the main thread (`tracer.in_span`), on a thread that
//! attached the main thread's context (`Context::attach`), and in a span
//! that thread started. Run in the VM by `cargo xtask test`.

use kspan_tests::{example, hex, run_with_receiver, ReceivedSpan};

const FILE_SIZE: usize = 10_000;

/// The number after `key` in `text` (`main 4 read calls` -> 4 for "main ").
fn number_after(text: &str, key: &str) -> i64 {
    let rest = text
        .split_once(key)
        .unwrap_or_else(|| panic!("`{key}` in {text}"))
        .1;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a number after `{key}` in {text}"))
}

/// The `vfs_read` spans of thread `tid` that start in `[from, to]`.
fn reads_of(spans: &[ReceivedSpan], tid: i64, from: u64, to: u64) -> Vec<&ReceivedSpan> {
    spans
        .iter()
        .filter(|s| s.name == "vfs_read" && s.int("thread.id") == Some(tid))
        .filter(|s| s.start_ns >= from && s.start_ns <= to)
        .collect()
}

/// Checks that each of `reads` is a child of `parent`, in its trace,
/// inside it in time.
fn assert_children(reads: &[&ReceivedSpan], parent: &ReceivedSpan) {
    for r in reads {
        assert_eq!(
            (hex(&r.parent_span_id), hex(&r.trace_id)),
            (hex(&parent.span_id), hex(&parent.trace_id)),
            "a child of {}: {r:?}",
            parent.name
        );
        assert!(r.end_ns <= parent.end_ns, "inside {}: {r:?}", parent.name);
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a kernel with BPF trampolines; run by `cargo xtask test` in the VM"]
async fn opentelemetry_api_spans_are_parents_of_kernel_spans() {
    let dir = std::env::temp_dir().join(format!("kspan-otel-api-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("data.bin");
    std::fs::write(&path, vec![7u8; FILE_SIZE]).unwrap();
    let run = run_with_receiver(
        &example("otel_api"),
        &[path.to_str().unwrap(), "2", "--buf", "4096"],
        "otel-api-test",
    )
    .await;
    let stdout = run.stdout();
    assert!(run.output.status.success(), "{stdout}\n{}", run.stderr());
    assert!(stdout.contains(", lost 0"), "{stdout}");
    let main_calls = number_after(&stdout, "main ");
    let worker_tid = number_after(&stdout, "worker ");
    let attached_calls = number_after(&stdout, &format!("worker {worker_tid}: "));
    let worker_calls = number_after(&stdout, "attached read calls, ");

    let one = |name: &str| -> &ReceivedSpan {
        let found: Vec<_> = run.spans.iter().filter(|s| s.name == name).collect();
        assert_eq!(found.len(), 1, "one {name}: {:?}", run.spans);
        found[0]
    };
    let (read_file, worker_read) = (one("read_file"), one("worker_read"));
    assert!(read_file.parent_span_id.is_empty(), "a root");
    assert_eq!(read_file.service_name.as_deref(), Some("otel-api-test"));
    assert_eq!(
        (hex(&worker_read.parent_span_id), hex(&worker_read.trace_id)),
        (hex(&read_file.span_id), hex(&read_file.trace_id)),
        "the worker's span is a child of read_file"
    );

    // The main thread's reads, the worker's under read_file's attached
    // context alone (before worker_read), and the worker's in worker_read.
    let pid = i64::from(run.pid);
    let main_reads = reads_of(&run.spans, pid, read_file.start_ns, read_file.end_ns);
    assert_children(&main_reads, read_file);
    let attached_reads = reads_of(
        &run.spans,
        worker_tid,
        read_file.start_ns,
        worker_read.start_ns,
    );
    assert_children(&attached_reads, read_file);
    let worker_reads = reads_of(
        &run.spans,
        worker_tid,
        worker_read.start_ns,
        worker_read.end_ns,
    );
    assert_children(&worker_reads, worker_read);
    for (reads, calls) in [
        (&main_reads, main_calls),
        (&attached_reads, attached_calls),
        (&worker_reads, worker_calls),
    ] {
        assert_eq!(
            reads.len() as i64,
            calls,
            "one span per read call: {reads:?}"
        );
        let bytes: i64 = reads
            .iter()
            .map(|r| r.int("kernel.return_value").unwrap())
            .sum();
        assert_eq!(bytes, 2 * FILE_SIZE as i64, "the file, read twice");
        assert!(reads
            .iter()
            .all(|r| r.int("kernel.arg.count") == Some(4096)));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
