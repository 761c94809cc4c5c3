// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The whole path on a real kernel: the example services, their `vfs_read`
//! and `ksys_read` calls caught by BPF trampolines, spans received by a real
//! OTLP/gRPC receiver. These need a kernel that allows fentry/fexit, so they
//! are `#[ignore]`d on the host and run in the VM by `cargo xtask test`.

use std::path::PathBuf;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use kspan_tests::{example, gettid, run_with_receiver, ReceivedSpan, Run};

const FILE_SIZE: usize = 10_000;
const BUF: usize = 4096;
const TIMES: usize = 3;

/// A file of known size in a fresh directory.
fn test_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kspan-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("data.bin");
    let content: Vec<u8> = (0..FILE_SIZE).map(|i| (i % 251) as u8).collect();
    std::fs::write(&path, content).unwrap();
    path
}

/// What each `read` returns when the file is read to its end once.
fn expected_rets() -> Vec<i64> {
    let mut rets = Vec::new();
    let mut left = FILE_SIZE;
    while left > 0 {
        let n = left.min(BUF);
        rets.push(n as i64);
        left -= n;
    }
    rets.push(0);
    rets
}

/// Another process's reads while the example runs: a thread of this test
/// process reading a file in a loop.
struct ForeignReads {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(i64, u64)>,
}

impl ForeignReads {
    fn start(path: PathBuf) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut reads = 0u64;
            while !flag.load(Ordering::Relaxed) {
                std::fs::read(&path).unwrap();
                reads += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            (gettid(), reads)
        });
        ForeignReads { stop, thread }
    }

    /// The reading thread's id and how many times it read the file.
    fn stop(self) -> (i64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

async fn run_example(name: &str, service: &str) -> (Run, ReceivedSpan) {
    let path = test_file(name);
    let foreign = ForeignReads::start(path.clone());
    let run = run_with_receiver(
        &example(name),
        &[
            path.to_str().unwrap(),
            &TIMES.to_string(),
            "--buf",
            &BUF.to_string(),
        ],
        service,
    )
    .await;
    let (foreign_tid, foreign_reads) = foreign.stop();
    assert!(
        foreign_reads > 0,
        "the other process read while the example ran"
    );
    assert!(
        run.output.status.success(),
        "{name} failed: {}\nstdout:\n{}\nstderr:\n{}",
        run.output.status,
        run.stdout(),
        run.stderr()
    );
    let app: Vec<&ReceivedSpan> = run.spans.iter().filter(|s| s.name == "read_file").collect();
    assert_eq!(app.len(), 1, "one application span: {:#?}", run.spans);
    let app = app[0].clone();
    assert_only_this_process(&run, foreign_tid);
    (run, app)
}

/// Kernel spans named `name` made by the example's main thread while its
/// application span was open, in start order.
fn kernel_spans<'a>(run: &'a Run, app: &ReceivedSpan, name: &str) -> Vec<&'a ReceivedSpan> {
    let pid = i64::from(run.pid);
    let mut spans: Vec<&ReceivedSpan> = run
        .spans
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| s.int("kspan.tid") == Some(pid))
        .filter(|s| s.start_ns >= app.start_ns && s.end_ns <= app.end_ns)
        .collect();
    spans.sort_by_key(|s| s.start_ns);
    spans
}

fn assert_ids_valid_and_unique(spans: &[ReceivedSpan]) {
    let mut seen = std::collections::HashSet::new();
    for s in spans {
        assert_eq!(s.trace_id.len(), 16, "{s:?}");
        assert_eq!(s.span_id.len(), 8, "{s:?}");
        assert!(s.trace_id.iter().any(|b| *b != 0), "zero trace id: {s:?}");
        assert!(s.span_id.iter().any(|b| *b != 0), "zero span id: {s:?}");
        assert!(seen.insert(s.span_id.clone()), "duplicate span id: {s:?}");
    }
}

/// No kernel span of the other process's reads (kspan traces the process
/// that starts it, by default), and no `process.pid` on the spans of the
/// process's own calls.
fn assert_only_this_process(run: &Run, foreign_tid: i64) {
    for s in run.spans.iter().filter(|s| s.scope == "kspan") {
        assert_ne!(
            s.int("kspan.tid"),
            Some(foreign_tid),
            "a span from another process: {s:?}"
        );
        assert_eq!(s.int("process.pid"), None, "{s:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a kernel with BPF trampolines (fentry/fexit); run by `cargo xtask test` in the VM"]
async fn quickstart_vfs_read_spans_match_the_reads() {
    let (run, app) = run_example("quickstart", "kspan-quickstart-test").await;
    let reads = kernel_spans(&run, &app, "vfs_read");

    let expected: Vec<i64> = (0..TIMES).flat_map(|_| expected_rets()).collect();
    let rets: Vec<i64> = reads
        .iter()
        .map(|s| s.int("kernel.return_value").unwrap())
        .collect();
    assert_eq!(rets, expected, "every read's return value, in order");
    assert!(
        run.stdout().contains(&format!(
            "{} read calls, {} bytes",
            expected.len(),
            FILE_SIZE * TIMES
        )),
        "the example made the reads the test expects: {}",
        run.stdout()
    );
    for s in &reads {
        assert_eq!(
            (&s.parent_span_id, &s.trace_id),
            (&app.span_id, &app.trace_id),
            "a child of the application span, over OTLP: {s:?}"
        );
        assert_eq!(s.int("kernel.arg.count"), Some(BUF as i64), "{s:?}");
        assert!(s.start_ns < s.end_ns, "start before end: {s:?}");
        assert_eq!(s.service_name.as_deref(), Some("kspan-quickstart-test"));
    }
    assert_eq!(app.service_name.as_deref(), Some("kspan-quickstart-test"));
    assert_ids_valid_and_unique(&run.spans);
    kspan_tests::assert_all_acknowledged(&run.stdout());
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a kernel with BPF trampolines (fentry/fexit); run by `cargo xtask test` in the VM"]
async fn nested_ksys_read_contains_vfs_read() {
    let (run, app) = run_example("nested", "kspan-nested-test").await;
    let outer = kernel_spans(&run, &app, "ksys_read");
    let inner = kernel_spans(&run, &app, "vfs_read");
    let expected: Vec<i64> = (0..TIMES).flat_map(|_| expected_rets()).collect();
    assert_eq!(outer.len(), expected.len(), "one ksys_read span per read");
    assert_eq!(inner.len(), expected.len(), "one vfs_read span per read");
    for ((o, i), want) in outer.iter().zip(&inner).zip(&expected) {
        assert_eq!(
            i.parent_span_id, o.span_id,
            "vfs_read is the child of its ksys_read"
        );
        assert_eq!(i.trace_id, o.trace_id);
        assert_eq!(
            (&o.parent_span_id, &o.trace_id),
            (&app.span_id, &app.trace_id),
            "ksys_read is a child of the application span, in its trace: {o:?}"
        );
        assert!(
            o.start_ns <= i.start_ns && i.end_ns <= o.end_ns,
            "inner inside outer: {o:?} {i:?}"
        );
        assert!(o.start_ns < o.end_ns && i.start_ns < i.end_ns);
        assert_eq!(o.int("kernel.return_value"), Some(*want));
        assert_eq!(i.int("kernel.return_value"), Some(*want));
        assert_eq!(o.int("kernel.arg.count"), Some(BUF as i64));
        assert!(
            o.int("kernel.arg.fd").unwrap() >= 3,
            "a file descriptor: {o:?}"
        );
    }
    assert_ids_valid_and_unique(&run.spans);
}
