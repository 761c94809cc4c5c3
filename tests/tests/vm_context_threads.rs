// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Threads that come and go (run in the VM by `cargo xtask test`): kernel
//! spans of short-lived threads and of a thread pool land under the span the
//! thread had entered, and a thread started after another one exited with
//! its span still published does not inherit that span: its calls are
//! orphans. (glibc gives the new thread the dead one's cached stack but
//! initialises its TLS afresh, so this checks that kspan's reader follows
//! each task's own slot, not that the record was unhooked at exit; that is
//! a unit test in `kspan::context`.) A thread that published its span
//! before kspan started gets it too. Where the kernel pins records for
//! kspan (Linux 6.13+), every one of these threads is read through its
//! registered record, and the runtime says so to the end. A test binary of
//! its own: it installs a global subscriber, which threads it did not make
//! use too.

use std::collections::HashMap;
use std::sync::mpsc;

use kspan_tests::span_attr;
use opentelemetry::trace::{SpanId, TraceContextExt as _, TraceId};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn vfs_read(#[capture(path = "file->f_path.dentry->d_name.name")] name: &str, ret: isize) {}

/// Short-lived threads per phase, and jobs for the pool.
const THREADS: usize = 30;
const JOBS: usize = 60;
const POOL: usize = 4;

/// Threads that read at their exit, after their record is gone.
const LATE: usize = 10;

/// A file to read when the thread's thread-locals are destroyed.
struct LateRead(std::cell::RefCell<Option<std::path::PathBuf>>);

impl Drop for LateRead {
    fn drop(&mut self) {
        let Some(path) = self.0.borrow_mut().take() else {
            return;
        };
        // First another thread takes the record's memory (records are
        // reused, last freed first) and publishes a span in it, so that
        // this read would find that span where the reader took memory for
        // the record of the thread it runs on.
        let (ready_tx, ready_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let taker = std::thread::spawn(move || {
            let span = tracing::info_span!("taker");
            let _entered = span.enter();
            ready_tx.send(()).unwrap();
            let _ = done_rx.recv();
        });
        ready_rx.recv().unwrap();
        std::fs::read(path).unwrap();
        drop(done_tx);
        taker.join().unwrap();
    }
}

thread_local! {
    static LATE_READ: LateRead = const { LateRead(std::cell::RefCell::new(None)) };
}

/// The OpenTelemetry ids of the current tracing span.
fn ids() -> (TraceId, SpanId) {
    let cx = tracing::Span::current().context();
    let sc = cx.span().span_context().clone();
    (sc.trace_id(), sc.span_id())
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines; run by `cargo xtask test` in the VM"]
async fn threads_that_exit_and_pooled_threads_keep_their_own_parents() {
    let (provider, exporter) = kspan_tests::install_global_context_subscriber();
    let dir = std::env::temp_dir().join(format!("kspan-threads-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: String| {
        let path = dir.join(&name);
        std::fs::write(&path, vec![b'x'; 100]).unwrap();
        (name, path)
    };
    // A thread whose record exists before kspan starts: it enters its span
    // (published), then reads once kspan runs.
    let (early_name, early_path) = file("early.txt".to_owned());
    let (ready_tx, ready_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let early = std::thread::spawn(move || {
        let span = tracing::info_span!("early");
        let _entered = span.enter();
        ready_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        std::fs::read(&early_path).unwrap();
        ids()
    });
    ready_rx.recv().unwrap();

    let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&vfs_read)
        .start()
        .expect("needs a kernel with BPF trampolines");
    let registered = kspan::KernelCapabilities::get()
        .context_records
        .is_available();
    let reads = || kspan_tests::settled_context_reads(&kspan);
    if registered {
        assert_eq!(reads(), kspan::ThreadContextReads::Registered);
    } else {
        assert!(
            matches!(reads(), kspan::ThreadContextReads::UserMemory { .. }),
            "{:?}",
            reads()
        );
    }

    // Which span each file's reads belong to (None: no span at all).
    let mut expected: HashMap<String, Option<(TraceId, SpanId)>> = HashMap::new();
    go_tx.send(()).unwrap();
    expected.insert(early_name, Some(early.join().unwrap()));

    // Threads that exit with their span still entered and published: the
    // guard is leaked, so nothing unpublishes it before the thread's TLS
    // goes away. Each is followed by a thread with no span at all, which
    // glibc starts on the stack the first one left.
    for i in 0..THREADS {
        let (name, path) = file(format!("exiting-{i}.txt"));
        let ids = std::thread::spawn(move || {
            let span = tracing::info_span!("exiting", i);
            std::mem::forget(span.enter());
            std::fs::read(&path).unwrap();
            ids()
        })
        .join()
        .unwrap();
        expected.insert(name, Some(ids));

        let (name, path) = file(format!("after-{i}.txt"));
        std::thread::spawn(move || std::fs::read(path).unwrap())
            .join()
            .unwrap();
        expected.insert(name, None);
    }

    // Threads that read after their record is gone but before they exit:
    // a thread-local made before the record is dropped after it (glibc runs
    // thread-local destructors last made, first run) and reads then, while
    // another thread has the record's memory. The thread still has its
    // registration, but the slot is another thread's: its calls are
    // orphans.
    for i in 0..LATE {
        let (name, path) = file(format!("late-{i}.txt"));
        std::thread::spawn(move || {
            LATE_READ.with(|late| *late.0.borrow_mut() = Some(path));
            let span = tracing::info_span!("late", i);
            std::mem::forget(span.enter());
        })
        .join()
        .unwrap();
        expected.insert(name, None);
    }

    // A pool of long-lived threads, each job in its own span.
    let (jobs_tx, jobs_rx) = mpsc::channel::<(String, std::path::PathBuf)>();
    let jobs_rx = std::sync::Arc::new(std::sync::Mutex::new(jobs_rx));
    let (done_tx, done_rx) = mpsc::channel();
    let pool: Vec<_> = (0..POOL)
        .map(|_| {
            let (jobs_rx, done_tx) = (jobs_rx.clone(), done_tx.clone());
            std::thread::spawn(move || loop {
                let job = jobs_rx.lock().unwrap().recv();
                let Ok((name, path)) = job else { return };
                let ids = tracing::info_span!("job").in_scope(|| {
                    std::fs::read(path).unwrap();
                    ids()
                });
                done_tx.send((name, ids)).unwrap();
            })
        })
        .collect();
    for j in 0..JOBS {
        jobs_tx.send(file(format!("job-{j}.txt"))).unwrap();
    }
    drop(jobs_tx);
    for t in pool {
        t.join().unwrap();
    }
    drop(done_tx);
    for (name, ids) in done_rx {
        expected.insert(name, Some(ids));
    }
    assert_eq!(expected.len(), 2 * THREADS + LATE + JOBS + 1);
    if registered {
        // Every thread made since the start was registered too.
        assert_eq!(reads(), kspan::ThreadContextReads::Registered);
    }

    let stats = kspan.shutdown().await.unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let app_traces: Vec<TraceId> = expected.values().flatten().map(|(t, _)| *t).collect();

    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut wrong = Vec::new();
    let mut unresolved = 0u64;
    for k in spans.iter().filter(|s| s.name == "vfs_read") {
        let Some(name) = span_attr(k, "kernel.arg.name") else {
            continue;
        };
        let name = name.as_str();
        let Some((key, want)) = expected.get_key_value(name.as_ref()) else {
            continue; // a read of the runtime or the loader, not of the test
        };
        *seen.entry(key).or_default() += 1;
        let got = (k.span_context.trace_id(), k.parent_span_id);
        let right = match want {
            Some(ids) => got == *ids,
            // An orphan starts a trace of its own, unrelated to any span.
            None => got.1 == SpanId::INVALID && !app_traces.contains(&got.0),
        };
        // In its trace under a kernel span instead: a call the kernel
        // skipped the exit of, which the task made no later call to forget
        // (7.x), so that the span waited for it and went unresolved.
        if !right && want.is_some_and(|(trace, _)| got.0 == trace && got.1 != SpanId::INVALID) {
            unresolved += 1;
        } else if !right {
            wrong.push((key.clone(), got, *want));
        }
    }
    assert!(wrong.is_empty(), "misattributed: {wrong:#?}\n{stats:?}");
    assert!(
        unresolved <= stats.spans_parent_unresolved,
        "{unresolved} spans under a kernel span that never came: {stats:?}"
    );
    // `std::fs::read` of a 100-byte file: a read, then one that ends it.
    // Where the kernel skipped program runs (7.x), as many may be missing.
    let short: usize = expected
        .keys()
        .map(|name| 2usize.saturating_sub(seen.get(name.as_str()).copied().unwrap_or(0)))
        .sum();
    if stats.skipped_by_kernel == 0 {
        assert_eq!(short, 0, "{seen:?}");
    }
    kspan_tests::assert_lost_only_to_kernel_skips(&stats, short as u64);
    let _ = std::fs::remove_dir_all(&dir);
}
