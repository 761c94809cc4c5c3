// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Many concurrent tokio tasks on a multi-threaded runtime, each reading its
//! own file inside its own span: every kernel span must land under the span
//! of the task that made the call, never a neighbour's (run in the VM by
//! `cargo xtask test`). On a kernel that preempts inside BPF programs (7.x,
//! or 6.x with `preempt=full`) the kernel skips some of kspan's program runs
//! here, in every run: no span may be lost or misplaced but for those (see
//! `assert_lost_only_to_kernel_skips`). Where fsession is used, the test
//! runs again on an fentry + fexit pair, whose two programs the kernel skips
//! apart: an entry without its exit, an exit without its entry. A test
//! binary of its own: it installs a global subscriber.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use kspan::{Attachment, Mechanism};
use kspan_tests::span_attr;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tracing::Instrument;

#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn vfs_read(#[capture(path = "file->f_path.dentry->d_name.name")] name: &str, ret: isize) {}

const TASKS: usize = 120;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a kernel with BPF trampolines; run by `cargo xtask test` in the VM"]
async fn concurrent_tasks_get_their_own_kernel_spans() {
    let (provider, exporter) = kspan_tests::install_global_context_subscriber();
    let dir = std::env::temp_dir().join(format!("kspan-tasks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..TASKS {
        std::fs::write(dir.join(format!("task-{i}.txt")), vec![b't'; 200]).unwrap();
    }
    let attachment = tasks_read(&provider, &exporter, &dir, None).await;
    if matches!(attachment, Attachment::Fsession | Attachment::FsessionMulti) {
        exporter.reset();
        let pair = tasks_read(&provider, &exporter, &dir, Some(Mechanism::Sessions)).await;
        assert_eq!(pair, Attachment::FentryFexit);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every task reads its file under its own span while `vfs_read` is traced
/// (without `disabled`); checks the spans, and says how it was attached.
async fn tasks_read(
    provider: &SdkTracerProvider,
    exporter: &InMemorySpanExporter,
    dir: &Path,
    disabled: Option<Mechanism>,
) -> Attachment {
    let mut builder = kspan::Kspan::builder(provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&vfs_read);
    if let Some(mechanism) = disabled {
        builder = builder.disable(mechanism);
    }
    let kspan = builder
        .start()
        .expect("needs a kernel with BPF trampolines");
    let attachment = kspan.attach_plan()[0].attachment;
    eprintln!("vfs_read attached through {attachment:?}");

    let mut handles = Vec::new();
    for i in 0..TASKS {
        let path = dir.join(format!("task-{i}.txt"));
        let span = tracing::info_span!("task", task = i);
        handles.push(tokio::spawn(
            async move {
                let mut reads = 0;
                for _ in 0..3 {
                    let mut f = std::fs::File::open(&path).unwrap();
                    let mut buf = [0u8; 64];
                    while f.read(&mut buf).unwrap() > 0 {
                        reads += 1;
                        // The record carries the span's `task` attribute
                        // (key index, length, the decimal digits).
                        let record = kspan::context::current_record().unwrap();
                        assert_eq!(
                            usize::from(record.attrs_data_size),
                            2 + i.to_string().len(),
                            "task {i}'s record attributes"
                        );
                        // Hand the thread to other tasks between reads: the
                        // task may come back on another worker.
                        tokio::task::yield_now().await;
                    }
                    reads += 1;
                }
                // A blocking-pool thread, inside the same span.
                let blocking_path = path.clone();
                let span = tracing::Span::current();
                tokio::task::spawn_blocking(move || {
                    let _entered = span.enter();
                    std::fs::read(blocking_path).unwrap();
                })
                .await
                .unwrap();
                reads
            }
            .instrument(span),
        ));
    }
    let mut reads_per_task = Vec::new();
    for h in handles {
        reads_per_task.push(h.await.unwrap());
    }
    let stats = kspan.shutdown().await.unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let tasks: HashMap<_, _> = spans
        .iter()
        .filter(|s| s.name == "task")
        .map(|s| {
            // tracing-opentelemetry exports the `usize` field as its decimal string.
            let i: usize = match span_attr(s, "task") {
                Some(v) => v.as_str().parse().unwrap(),
                None => panic!("no task attribute: {s:?}"),
            };
            (s.span_context.span_id(), (i, s))
        })
        .collect();
    assert_eq!(tasks.len(), TASKS);
    let mut children = vec![0usize; TASKS];
    let mut misattributed = Vec::new();
    for k in spans.iter().filter(|s| s.name == "vfs_read") {
        let Some((i, task)) = tasks.get(&k.parent_span_id) else {
            continue; // a read of the runtime itself, or of the test
        };
        let file = span_attr(k, "kernel.arg.name").map(|v| v.as_str().into_owned());
        if file.as_deref() != Some(format!("task-{i}.txt").as_str())
            || k.span_context.trace_id() != task.span_context.trace_id()
        {
            misattributed.push((i, file));
        }
        children[*i] += 1;
    }
    assert!(misattributed.is_empty(), "misattributed: {misattributed:?}");
    // Every read of the task's loop, and the one of `std::fs::read` on the
    // blocking thread (it may read more than once).
    let missing: Vec<_> = children
        .iter()
        .zip(&reads_per_task)
        .enumerate()
        .filter(|(_, (&n, &reads))| n <= reads)
        .map(|(i, (&n, &reads))| (i, n, reads))
        .collect();
    let short: usize = missing.iter().map(|(_, n, reads)| reads + 1 - n).sum();
    if stats.skipped_by_kernel == 0 {
        assert!(
            missing.is_empty(),
            "(task, kernel spans, reads): {missing:?}"
        );
    }
    kspan_tests::assert_lost_only_to_kernel_skips(&stats, short as u64);
    attachment
}
