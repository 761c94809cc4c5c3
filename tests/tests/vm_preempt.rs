// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `auto` keeps every promise on a kernel that preempts inside BPF programs
//! (sid's 7.2 runs `lazy`; run in the VM by `cargo xtask test`): 120 tokio
//! tasks on 4 workers and 6 threads, on 2 vCPUs, each making traced calls
//! (`fsync` of its own tmpfs file: `__x64_sys_fsync`, and under it
//! `noop_fsync`) inside its own application span. Every call is exported or
//! counted under its reason, exactly; no exported span names a parent that
//! was never exported; every outermost kernel span is a child of the
//! application span its call was made in. With trampolines (the choice of
//! `auto` before it read the preemption model) the kernel skips some of
//! their runs here and a call that loses its entry and its exit is counted
//! nowhere. A test binary of its own: it installs a global subscriber.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use kspan::{Hook, KernelCapabilities};
use kspan_tests::span_attr;
use opentelemetry::trace::SpanId;
use opentelemetry_sdk::trace::SpanData;
use tracing::Instrument;

#[kspan::kernel_span("__x64_sys_fsync" | "__arm64_sys_fsync", mode = "auto")]
fn sys_fsync(ret: i64) {}

/// The system call's entry point on this architecture, which names its span.
const SYS_FSYNC: &str = if cfg!(target_arch = "aarch64") {
    "__arm64_sys_fsync"
} else {
    "__x64_sys_fsync"
};

#[kspan::kernel_span("noop_fsync", mode = "auto")]
fn noop_fsync(#[capture(path = "file->f_path.dentry->d_name.name")] name: &str, ret: i32) {}

const TASKS: usize = 120;
const THREADS: usize = 6;
/// `fsync` calls of each task and of each thread.
const TASK_SYNCS: usize = 20;
const THREAD_SYNCS: usize = 150;
/// Traced calls per `fsync`: the system call and the file system's fsync.
const CALLS_PER_SYNC: u64 = 2;

/// File `who` syncs: tasks are `0..TASKS`, threads after them.
fn file_of(dir: &Path, who: usize) -> PathBuf {
    dir.join(format!("f-{who}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a kernel with BPF trampolines; run by `cargo xtask test` in the VM"]
async fn every_call_is_exported_or_counted_and_every_tree_is_whole() {
    let (provider, exporter) = kspan_tests::install_global_context_subscriber();
    let dir = std::env::temp_dir().join(format!("kspan-preempt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for who in 0..TASKS + THREADS {
        std::fs::write(file_of(&dir, who), b"x").unwrap();
    }
    let kspan = kspan::Kspan::builder(&provider)
        .probe(&sys_fsync)
        .probe(&noop_fsync)
        .start()
        .expect("needs a kernel with BPF trampolines");
    let caps = KernelCapabilities::get();
    let decisions = kspan.attach_plan().to_vec();
    for d in &decisions {
        eprintln!(
            "{} through {} ({:?}); rejected: {}",
            d.function,
            d.attachment,
            d.chosen,
            d.rejected_summary()
        );
    }
    eprintln!("preemption: {}", caps.preemption);
    // Registering a thread's record is a map update, during which the
    // kernel skips kprobe programs on its CPU; preempted there, it cost 64
    // to 201 runs at once of the calls threads made meanwhile. On such a
    // kernel, with kprobes, the records are read from user memory.
    if caps.preemption.preempts_programs() && decisions.iter().any(|d| d.chosen.is_kprobe()) {
        let reads = kspan.thread_context_reads();
        assert!(
            matches!(&reads, kspan::ThreadContextReads::UserMemory { why } if why.contains("BPF map update")),
            "{reads:?}"
        );
    }
    // Where the kernel preempts inside trampoline programs, `auto` says why
    // it took kprobes.
    for d in &decisions {
        if caps.preemption.preempts_programs() {
            assert_eq!(d.chosen, Hook::Kretprobe, "{d:?}");
            let (hook, why) = &d.rejected[0];
            assert_eq!(*hook, Hook::Fexit);
            assert!(why.contains("preemption is"), "{why}");
        } else {
            assert_eq!(d.chosen, Hook::Fexit, "{d:?}");
        }
    }

    let sync = |who: usize, times: usize, dir: &Path| {
        let file = File::options().write(true).open(file_of(dir, who)).unwrap();
        for _ in 0..times {
            file.sync_all().unwrap();
        }
    };
    let mut threads = Vec::new();
    for t in 0..THREADS {
        let dir = dir.clone();
        threads.push(std::thread::spawn(move || {
            let who = TASKS + t;
            let _entered = tracing::info_span!("app", who).entered();
            for _ in 0..THREAD_SYNCS / 10 {
                sync(who, 10, &dir);
                std::thread::yield_now();
            }
        }));
    }
    let mut tasks = Vec::new();
    for who in 0..TASKS {
        let dir = dir.clone();
        tasks.push(tokio::spawn(
            async move {
                for _ in 0..TASK_SYNCS {
                    sync(who, 1, &dir);
                    // The task may come back on another worker.
                    tokio::task::yield_now().await;
                }
            }
            .instrument(tracing::info_span!("app", who)),
        ));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for t in threads {
        t.join().unwrap();
    }
    let stats = kspan.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let calls = CALLS_PER_SYNC * (TASKS * TASK_SYNCS + THREADS * THREAD_SYNCS) as u64;

    let spans = exporter.get_finished_spans().unwrap();
    let apps: HashMap<SpanId, (usize, &SpanData)> = spans
        .iter()
        .filter(|s| s.name == "app")
        .map(|s| {
            let who = span_attr(s, "who").expect("a `who` attribute");
            (s.span_context.span_id(), (who.as_str().parse().unwrap(), s))
        })
        .collect();
    assert_eq!(apps.len(), TASKS + THREADS);
    let kernel: HashMap<SpanId, &SpanData> = spans
        .iter()
        .filter(|s| s.name == SYS_FSYNC || s.name == "noop_fsync")
        .map(|s| (s.span_context.span_id(), s))
        .collect();

    // Every call exported or counted under its reason, exactly.
    let counted: u64 = stats
        .losses()
        .iter()
        .chain(&stats.skips())
        .map(|(_, n)| n)
        .sum();
    eprintln!(
        "{calls} calls: {} spans exported, {counted} counted ({stats}); the kernel skipped {} \
         program runs",
        kernel.len(),
        stats.skipped_by_kernel
    );
    assert_eq!(
        kernel.len() as u64 + counted,
        calls,
        "exported + counted against the calls made: {stats:?}"
    );

    // Whole trees: each parent exported; each outermost kernel span under
    // the application span its call was made in (the file it synced names
    // it; a system call span takes its child's file).
    let who_of = |s: &SpanData| -> Option<usize> {
        let name = span_attr(s, "kernel.arg.name")?;
        name.as_str().strip_prefix("f-")?.parse().ok()
    };
    let mut child_file: HashMap<SpanId, usize> = HashMap::new();
    for s in kernel.values().filter(|s| s.name == "noop_fsync") {
        if let Some(who) = who_of(s) {
            child_file.insert(s.parent_span_id, who);
        }
    }
    let mut broken = Vec::new();
    for (id, s) in &kernel {
        let parent = s.parent_span_id;
        let who = who_of(s).or_else(|| child_file.get(id).copied());
        if let Some(outer) = kernel.get(&parent) {
            let sound = s.name == "noop_fsync"
                && outer.name == SYS_FSYNC
                && outer.span_context.trace_id() == s.span_context.trace_id();
            if !sound {
                broken.push(format!("{} under {}", s.name, outer.name));
            }
            continue;
        }
        match apps.get(&parent) {
            None => broken.push(format!("{} under a parent never exported", s.name)),
            Some((app, span)) => {
                if span.span_context.trace_id() != s.span_context.trace_id()
                    || who.is_some_and(|w| w != *app)
                {
                    broken.push(format!("{} of {who:?} under the span of {app}", s.name));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "{} broken of {} kernel spans: {:?}",
        broken.len(),
        kernel.len(),
        &broken[..broken.len().min(20)]
    );
}
