// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A service on the OpenTelemetry API alone (the `otel_api` example, no
//! `tracing`) on a real kernel: its `vfs_read` calls, caught by fexit
//! trampolines and received over OTLP/gRPC, are children of the span they
//! were made in: on the main thread (`tracer.in_span`), on a thread that
//! attached the main thread's context (`Context::attach`), and in a span
//! that thread started. Run in the VM by `cargo xtask test`.

use kspan_tests::{
    assert_children_of, example, hex, returned_sum, run_with_receiver, spans_of_thread, the_span,
};

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
    kspan_tests::assert_all_acknowledged(&stdout);
    let main_calls = number_after(&stdout, "main ");
    let worker_tid = number_after(&stdout, "worker ");
    let attached_calls = number_after(&stdout, &format!("worker {worker_tid}: "));
    let worker_calls = number_after(&stdout, "attached read calls, ");

    let (read_file, worker_read) = (
        the_span(&run.spans, "read_file"),
        the_span(&run.spans, "worker_read"),
    );
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
    let main_reads = spans_of_thread(
        &run.spans,
        "vfs_read",
        pid,
        read_file.start_ns,
        read_file.end_ns,
    );
    assert_children_of(&main_reads, read_file);
    let attached_reads = spans_of_thread(
        &run.spans,
        "vfs_read",
        worker_tid,
        read_file.start_ns,
        worker_read.start_ns,
    );
    assert_children_of(&attached_reads, read_file);
    let worker_reads = spans_of_thread(
        &run.spans,
        "vfs_read",
        worker_tid,
        worker_read.start_ns,
        worker_read.end_ns,
    );
    assert_children_of(&worker_reads, worker_read);
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
        assert_eq!(
            returned_sum(reads),
            2 * FILE_SIZE as i64,
            "the file, read twice"
        );
        assert!(reads
            .iter()
            .all(|r| r.int("kernel.arg.count") == Some(4096)));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
