// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Whole trees under overload, with nested probes and several threads (run
//! in the VM by `cargo xtask test`, on every kernel of the matrix): four
//! worker threads, each under its own application span, run a seeded file
//! workload (files created, written and read back in chunks of random
//! sizes) traced by four probes in `auto` mode with mixed captures
//! (`ksys_read` around `vfs_read`, `vfs_write`, `do_sys_openat2` with the
//! file name), through a ring buffer far too small for it.
//!
//! What the kernel does is known from the workload itself: every `read(2)`
//! on an open file is one `ksys_read` that calls `vfs_read` exactly once.
//! So the test fails on
//! - an exported `ksys_read` span that lacks its `vfs_read` child without
//!   saying so (`kspan.descendants_dropped`),
//! - an exported kernel span whose parent was not exported (a dangling
//!   parent),
//! - a call of the workload neither exported nor counted in `Stats::lost`
//!   (beyond the program runs the kernel says it skipped).
//!
//! `KSPAN_TREES_RING=BYTES`, `KSPAN_TREES_OPS=N` and `KSPAN_TREES_RATE=CALLS`
//! change the ring's size, the operations per thread and the calls a second
//! of all threads together (paced; unpaced by default): with the default
//! ring (4 MiB) at 3,600 calls a second for 10 s, the same run is the
//! benchmark of BENCHMARKS.md ("Declines under a file workload").
//! `KSPAN_TREES_WORKERS=N` sets `KspanBuilder::span_workers` (the default:
//! one a CPU), for the table of "Span workers" there.

use std::collections::{HashMap, HashSet};

use opentelemetry_otlp::WithExportConfig as _;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Instant;

use kspan_tests::gate::{ConsumerGate, GateProcessor};
use kspan_tests::span_int;
use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, Tracer, TracerProvider as _};

#[kspan::kernel_span("ksys_read")]
fn ksys_read(fd: u32, count: usize, ret: isize) {}

#[kspan::kernel_span("vfs_read")]
fn vfs_read(count: usize, ret: isize) {}

#[kspan::kernel_span("vfs_write")]
fn vfs_write(count: usize, ret: isize) {}

#[kspan::kernel_span("do_sys_openat2")]
fn do_sys_openat2(#[capture(user)] filename: &str, ret: i64) {}

/// A directory read (`getdents64`): one call of `filldir64` per entry it
/// hands out, `.` and `..` included.
#[kspan::kernel_span("iterate_dir")]
fn iterate_dir(ret: i32) {}

#[kspan::kernel_span("filldir64")]
fn filldir64(namlen: i32) {}

const THREADS: u64 = 4;
/// Operations per thread by default: a file written or read back whole.
const OPS: u64 = 120;
/// Files per thread, reused.
const FILES: u64 = 12;

/// The calls one thread made, by kind.
#[derive(Debug, Default, Clone, Copy)]
struct Calls {
    opens: u64,
    reads: u64,
    writes: u64,
}

impl Calls {
    /// Kernel calls the probes see: a read is `ksys_read` + `vfs_read`.
    fn traced(&self) -> u64 {
        self.opens + 2 * self.reads + self.writes
    }
}

/// SplitMix64: a seeded sequence, the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One thread's workload in `dir`: `ops` times, a file written (small or
/// large, in chunks of random size) or one written before read back in
/// chunks of random size to its end.
fn workload(dir: &std::path::Path, seed: u64, ops: u64, pace: Option<u64>) -> Calls {
    let mut rng = Rng(seed);
    let began = Instant::now();
    let mut calls = Calls::default();
    let mut sizes = vec![0u64; FILES as usize];
    let chunk = vec![0x5au8; 64 * 1024];
    let mut buf = vec![0u8; 64 * 1024];
    for _ in 0..ops {
        if let Some(per_second) = pace {
            // Ahead of the pace: wait until the calls made are due.
            let due = std::time::Duration::from_secs_f64(calls.traced() as f64 / per_second as f64);
            if let Some(wait) = due.checked_sub(began.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        let f = rng.below(FILES);
        let path = dir.join(format!("f{f}"));
        if sizes[f as usize] == 0 || rng.below(3) == 0 {
            // Mostly small files, now and then a large one.
            let size = if rng.below(8) == 0 {
                64 * 1024 + rng.below(192 * 1024)
            } else {
                1 + rng.below(8 * 1024)
            };
            let mut file = std::fs::File::create(&path).expect("creates a file");
            calls.opens += 1;
            let mut left = size;
            while left > 0 {
                let n = left.min(1 + rng.below(16 * 1024));
                let written = file.write(&chunk[..n as usize]).expect("writes");
                calls.writes += 1;
                left -= written as u64;
            }
            sizes[f as usize] = size;
        } else {
            let mut file = std::fs::File::open(&path).expect("opens a file");
            calls.opens += 1;
            loop {
                let n = 1 + rng.below(16 * 1024);
                let got = file.read(&mut buf[..n as usize]).expect("reads");
                calls.reads += 1;
                if got == 0 {
                    break;
                }
            }
        }
    }
    calls
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v}: expected a number")),
    )
}

/// An exported kernel span, from the in-memory exporter or the OTLP
/// receiver alike.
#[derive(Debug)]
struct Exported {
    name: String,
    trace: TraceId,
    span: SpanId,
    parent: SpanId,
    /// `kspan.descendants_dropped`, 0 when absent.
    dropped: u64,
}

fn span_id(bytes: &[u8]) -> SpanId {
    bytes
        .try_into()
        .map(SpanId::from_bytes)
        .unwrap_or(SpanId::INVALID)
}

/// Where the spans go: kspan's test pipeline (synchronous, in memory), or
/// a service's (`KSPAN_TREES_OTLP=1`: the SDK's batch processor, OTLP/gRPC
/// to a receiver in this process, kspan's export ledger around the
/// exporter).
enum Pipeline {
    Memory(opentelemetry_sdk::trace::InMemorySpanExporter),
    Otlp(kspan_tests::Receiver),
}

impl Pipeline {
    fn kernel_spans(&self) -> Vec<Exported> {
        match self {
            Pipeline::Memory(exporter) => exporter
                .get_finished_spans()
                .expect("the exporter's spans")
                .into_iter()
                .filter(|s| s.instrumentation_scope.name() == "kspan")
                .map(|s| Exported {
                    dropped: span_int(&s, kspan::attributes::DESCENDANTS_DROPPED).unwrap_or(0)
                        as u64,
                    name: s.name.into_owned(),
                    trace: s.span_context.trace_id(),
                    span: s.span_context.span_id(),
                    parent: s.parent_span_id,
                })
                .collect(),
            Pipeline::Otlp(receiver) => receiver
                .spans()
                .into_iter()
                .filter(|s| s.scope == "kspan")
                .map(|s| Exported {
                    dropped: s.int(kspan::attributes::DESCENDANTS_DROPPED).unwrap_or(0) as u64,
                    trace: s
                        .trace_id
                        .as_slice()
                        .try_into()
                        .map(TraceId::from_bytes)
                        .unwrap_or(TraceId::INVALID),
                    span: span_id(&s.span_id),
                    parent: span_id(&s.parent_span_id),
                    name: s.name,
                })
                .collect(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a kernel with BPF trampolines or kprobes; run by `cargo xtask test` in the VM"]
async fn nested_probes_under_overload_keep_whole_trees_and_count_every_call() {
    let ring = env_u64("KSPAN_TREES_RING").unwrap_or(64 * 1024);
    let ops = env_u64("KSPAN_TREES_OPS").unwrap_or(OPS);
    // Calls a second of the whole workload (every thread): none by default.
    let pace = env_u64("KSPAN_TREES_RATE").map(|r| r.div_ceil(THREADS).max(1));
    let builder = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_id_generator(kspan::KernelSpanIds::default());
    let (provider, pipeline, ledger) = if env_u64("KSPAN_TREES_OTLP") == Some(1) {
        let receiver = kspan_tests::Receiver::start()
            .await
            .expect("an OTLP receiver starts");
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(receiver.endpoint())
            .build()
            .expect("an OTLP exporter");
        let accounted = kspan::AccountedExporter::new(exporter);
        let ledger = accounted.ledger();
        (
            builder.with_batch_exporter(accounted).build(),
            Pipeline::Otlp(receiver),
            Some(ledger),
        )
    } else {
        let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
        (
            builder.with_simple_exporter(exporter.clone()).build(),
            Pipeline::Memory(exporter),
            None,
        )
    };
    let tracer = provider.tracer("app");
    let mut kspan = kspan::Kspan::builder(&provider)
        .probes([&ksys_read, &vfs_read, &vfs_write, &do_sys_openat2])
        .ring_buffer_size(u32::try_from(ring).expect("KSPAN_TREES_RING fits in 32 bits"));
    if let Some(ledger) = ledger {
        kspan = kspan.export_ledger(ledger);
    }
    if let Some(workers) = env_u64("KSPAN_TREES_WORKERS") {
        kspan = kspan.span_workers(workers as usize);
    }
    let kspan = kspan.start().expect("the probes attach");
    for a in kspan.attach_plan() {
        eprintln!("vm_trees: {} by {:?}", a.function, a.attachment);
    }
    let dir = std::env::temp_dir().join(format!("kspan-trees-{}", std::process::id()));
    let began = Instant::now();
    let results: Vec<(TraceId, SpanId, Calls)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let tracer = &tracer;
                let dir = dir.join(format!("t{t}"));
                s.spawn(move || {
                    std::fs::create_dir_all(&dir).expect("makes the thread's directory");
                    tracer.in_span(format!("worker-{t}"), |cx| {
                        let calls = workload(&dir, 0x6b73_7061_6e00 + t, ops, pace);
                        let sc = cx.span().span_context().clone();
                        (sc.trace_id(), sc.span_id(), calls)
                    })
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a worker finishes"))
            .collect()
    });
    let elapsed = began.elapsed();
    let consumed = kspan.stats().expect("live figures").spans_to_pipeline;
    let stats = kspan.shutdown().await.expect("kspan shuts down");
    // Everything handed is exported (or counted by the ledger) before the
    // spans are read; a shutdown would empty the in-memory exporter.
    provider.force_flush().expect("the provider flushes");
    let _ = std::fs::remove_dir_all(&dir);

    let made: u64 = results.iter().map(|(_, _, c)| c.traced()).sum();
    let app_traces: HashSet<TraceId> = results.iter().map(|(t, _, _)| *t).collect();
    let kernel: Vec<Exported> = pipeline
        .kernel_spans()
        .into_iter()
        .filter(|s| app_traces.contains(&s.trace))
        .collect();
    let mut exported: HashSet<SpanId> = kernel.iter().map(|s| s.span).collect();
    exported.extend(results.iter().map(|(_, s, _)| *s));

    // Children per parent, and what each span says it lacks.
    let mut reads_under: HashMap<SpanId, u64> = HashMap::new();
    let mut dangling = Vec::new();
    for span in &kernel {
        if !exported.contains(&span.parent) {
            dangling.push(format!(
                "{} {:?} parent {}",
                span.name, span.span, span.parent
            ));
        }
        if span.name == "vfs_read" {
            *reads_under.entry(span.parent).or_default() += 1;
        }
    }
    let said: u64 = kernel.iter().map(|s| s.dropped).sum();
    let ksys: Vec<_> = kernel.iter().filter(|s| s.name == "ksys_read").collect();
    let mut silent = Vec::new();
    for span in &ksys {
        let children = reads_under.get(&span.span).copied().unwrap_or(0);
        if children + span.dropped != 1 {
            silent.push(format!(
                "ksys_read {:?}: {children} vfs_read children, descendants_dropped {}",
                span.span, span.dropped
            ));
        }
    }
    let marked = ksys.iter().filter(|s| s.dropped > 0).count();
    let seconds = elapsed.as_secs_f64();
    eprintln!(
        "vm_trees: ring {ring} bytes, {made} calls in {seconds:.2} s ({:.0} calls/s), \
         {consumed} spans made by the consumer meanwhile ({:.0} a second): {} exported, \
         {} declined (overload, {:.1}%), {} lost in all; {} ksys_read spans, {marked} marked \
         with dropped descendants ({said} in the attributes, {} counted), {} missing a child \
         silently, {} dangling parents; {stats}",
        made as f64 / seconds,
        consumed as f64 / seconds,
        kernel.len(),
        stats.dropped_overload,
        100.0 * stats.dropped_overload as f64 / made as f64,
        stats.lost(),
        ksys.len(),
        stats.descendants_dropped,
        silent.len(),
        dangling.len(),
    );

    // Spans the pipeline lost after kspan (a batch processor's full queue,
    // counted by the ledger) may leave a tree short at the collector: only
    // kspan's own declines must never.
    let after_kspan = stats.lost_after_kspan();
    assert!(
        dangling.len() as u64 <= after_kspan,
        "dangling parents: {dangling:#?}"
    );
    assert!(
        silent.len() as u64 <= after_kspan,
        "ksys_read spans missing a vfs_read child without saying so: {silent:#?}"
    );
    assert!(
        said <= stats.descendants_dropped,
        "spans say {said} descendants dropped, the kernel counted {}: {stats:?}",
        stats.descendants_dropped
    );
    if ring < 1024 * 1024 {
        assert!(
            stats.dropped_overload > 0,
            "a {ring}-byte ring overloads: {stats:?}"
        );
    }
    // Every call exported or counted: the workload's calls are all under
    // the workers' spans, and nothing else of the process is (other calls
    // are orphans, not losses). A program run the kernel skipped may take a
    // call with it uncounted (see Stats::skipped_by_kernel).
    let accounted = kernel.len() as u64 + stats.lost();
    assert!(
        accounted <= made && made - accounted <= stats.skipped_by_kernel,
        "{made} calls made, {} exported and {} counted lost: {stats:?}",
        kernel.len(),
        stats.lost()
    );
}

/// Entries of the directory read in one tree: far more `filldir64`
/// records than the ring holds.
const ENTRIES: u64 = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a kernel with BPF trampolines or kprobes; run by `cargo xtask test` in the VM"]
async fn a_tree_larger_than_the_ring_says_how_many_descendants_it_lacks() {
    let dir = std::env::temp_dir().join(format!("kspan-tree-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("makes the directory");
    for i in 0..ENTRIES {
        std::fs::File::create(dir.join(format!("e{i:04}"))).expect("makes an entry");
    }
    let gate = Arc::new(ConsumerGate::default());
    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_span_processor(GateProcessor(gate.clone()))
        .with_simple_exporter(exporter.clone())
        .with_id_generator(kspan::KernelSpanIds::default())
        .build();
    let tracer = provider.tracer("app");
    let kspan = kspan::Kspan::builder(&provider)
        .probes([&iterate_dir, &filldir64])
        // Four pages: about a hundred `filldir64` records.
        .ring_buffer_size(16 * 1024)
        // The reader builds the spans: with the consumer held, the ring
        // is the only room, and the tree is larger than it.
        .span_workers(1)
        .start()
        .expect("the probes attach");
    gate.set_closed(true);
    let (trace, app) = tracer.in_span("list", |cx| {
        let n = std::fs::read_dir(&dir)
            .expect("lists the directory")
            .count() as u64;
        assert_eq!(n, ENTRIES);
        let sc = cx.span().span_context().clone();
        (sc.trace_id(), sc.span_id())
    });
    gate.set_closed(false);
    let stats = kspan.shutdown().await.expect("kspan shuts down");
    let _ = std::fs::remove_dir_all(&dir);

    let spans = exporter.get_finished_spans().expect("the exporter's spans");
    let kernel: Vec<_> = spans
        .iter()
        .filter(|s| s.instrumentation_scope.name() == "kspan")
        .filter(|s| s.span_context.trace_id() == trace)
        .collect();
    let roots: Vec<_> = kernel
        .iter()
        .filter(|s| s.name == "iterate_dir" && s.parent_span_id == app)
        .collect();
    let ids: HashSet<SpanId> = roots.iter().map(|s| s.span_context.span_id()).collect();
    let children = kernel
        .iter()
        .filter(|s| s.name == "filldir64" && ids.contains(&s.parent_span_id))
        .count() as u64;
    let said: u64 = roots
        .iter()
        .filter_map(|s| span_int(s, kspan::attributes::DESCENDANTS_DROPPED))
        .map(|n| n as u64)
        .sum();
    eprintln!(
        "vm_trees: {} iterate_dir spans, {children} filldir64 children, {said} said dropped; {stats}",
        roots.len()
    );
    // The first directory read is admitted (the ring is empty then), and
    // hands out every entry, `.` and `..`: each is a child or counted on it.
    assert!(
        !roots.is_empty(),
        "the directory read is exported: {stats:?}"
    );
    assert_eq!(
        children + said,
        ENTRIES + 2,
        "every entry is a child or counted on its parent: {stats:?}"
    );
    assert!(
        said > 0,
        "a 16 KiB ring cannot hold the whole tree: {stats:?}"
    );
    assert_eq!(said, stats.descendants_dropped, "{stats:?}");
    // Its children were declined, never lost to a full ring: their parent's
    // record found its room.
    assert_eq!(stats.dropped_ring_buffer_full, 0, "{stats:?}");
    for span in &kernel {
        assert!(
            span.parent_span_id == app || ids.contains(&span.parent_span_id),
            "{} names a parent that was not exported: {stats:?}",
            span.name
        );
    }
}
