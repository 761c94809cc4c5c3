// SPDX-License-Identifier: Apache-2.0 OR MIT
//! How much of the ring a burst may fill before kspan declines calls, on
//! the host with a syscall source: with the consumer held, a burst of 7/8
//! of the ring's records is taken whole (the room kept is for the exits of
//! open calls and a margin of 1/32, not half the ring), and past the ring's
//! room calls are declined and counted, none lost to a full ring. With
//! several span workers, the reader's batches for a held worker are room
//! too, bounded: past them, the same.

use std::sync::Arc;

use kspan::Kspan;
use kspan_tests::gate::{ConsumerGate, GateProcessor};
use opentelemetry_sdk::trace::SdkTracerProvider;

#[kspan::kernel_span(syscall = "getppid")]
fn getppid(ret: i64) {}

extern "C" {
    #[link_name = "getppid"]
    fn libc_getppid() -> i32;
}

fn calls(n: u64) {
    for _ in 0..n {
        // SAFETY: getppid has no arguments and cannot fail.
        unsafe { libc_getppid() };
    }
}

/// A process runs one kspan runtime at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A runtime tracing `getppid` into a 1 MiB ring with `workers` span
/// workers, its spans behind a gate the test holds.
fn held_runtime(
    workers: usize,
) -> (
    Arc<ConsumerGate>,
    opentelemetry_sdk::trace::InMemorySpanExporter,
    SdkTracerProvider,
    Kspan,
) {
    let gate = Arc::new(ConsumerGate::default());
    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(GateProcessor(gate.clone()))
        .with_simple_exporter(exporter.clone())
        .with_id_generator(kspan::KernelSpanIds::default())
        .build();
    let kspan = Kspan::builder(&provider)
        .probe(&getppid)
        .orphans(kspan::Orphans::NewTrace)
        .ring_buffer_size(RING)
        .span_workers(workers)
        .start()
        .expect("syscall sources start on the host");
    (gate, exporter, provider, kspan)
}

/// A ring of 1 MiB; a `getppid` record takes 160 bytes of it.
const RING: u32 = 1 << 20;
const SLOT: u64 = 160;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_fills_the_ring_but_for_its_margin_and_then_is_declined() {
    let _one = ONE_AT_A_TIME.lock().await;
    // The reader builds the spans: with the consumer held, the ring is the
    // only room (workers have their batches too: below).
    let (gate, exporter, provider, kspan) = held_runtime(1);
    let capacity = u64::from(RING) / SLOT;
    gate.set_closed(true);
    calls(1);
    gate.wait_holding();
    // 7/8 of the ring: under a fixed half-full threshold 3/8 of it would
    // be declined.
    let burst = capacity * 7 / 8;
    calls(burst);
    let held = kspan.stats().expect("live figures");
    // Past the ring's room: declined and counted, none finds it full.
    calls(capacity / 4);
    let over = kspan.stats().expect("live figures");
    // Opened before any assertion: a failing one must not leave the
    // consumer held.
    gate.set_closed(false);
    assert_eq!(held.dropped_overload, 0, "{held:?}");
    assert!(over.dropped_overload > 0, "{over:?}");
    let taken = capacity / 4 - over.dropped_overload;
    assert!(
        burst + taken <= capacity * 31 / 32,
        "at most 31/32 of the ring: {taken} more taken: {over:?}"
    );
    let stats = kspan.shutdown().await.expect("kspan shuts down");
    assert_eq!(stats.dropped_ring_buffer_full, 0, "{stats:?}");
    assert_eq!(
        stats.spans_to_pipeline + stats.dropped_overload,
        1 + burst + capacity / 4,
        "{stats:?}"
    );
    assert_eq!(stats.lost(), stats.dropped_overload, "{stats:?}");
    let exported = exporter.get_finished_spans().unwrap().len() as u64;
    assert_eq!(exported, stats.spans_to_pipeline);
    provider.shutdown().unwrap();
}

/// What the reader may hold for one worker besides the ring: four batches
/// on their way and one gathering, of 64 KiB each (`consume::fanout`).
const WORKER_ROOM: u64 = 5 * 64 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_span_workers_a_held_worker_s_calls_are_declined_past_its_room_and_counted() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (gate, exporter, provider, kspan) = held_runtime(3);
    let capacity = u64::from(RING) / SLOT;
    gate.set_closed(true);
    calls(1);
    gate.wait_holding();
    // One thread's calls go to one worker, held in the gate: the reader
    // fills that worker's batches, then waits, and the ring fills.
    let burst = capacity * 7 / 8;
    calls(burst);
    let held = kspan.stats().expect("live figures");
    calls(capacity / 2);
    let over = kspan.stats().expect("live figures");
    gate.set_closed(false);
    assert_eq!(held.dropped_overload, 0, "{held:?}");
    assert!(over.dropped_overload > 0, "{over:?}");
    let taken = capacity / 2 - over.dropped_overload;
    assert!(
        burst + taken <= capacity * 31 / 32 + WORKER_ROOM / SLOT + 1,
        "at most 31/32 of the ring and the worker's batches: {taken} more taken: {over:?}"
    );
    let stats = kspan.shutdown().await.expect("kspan shuts down");
    assert_eq!(stats.dropped_ring_buffer_full, 0, "{stats:?}");
    assert_eq!(
        stats.spans_to_pipeline + stats.dropped_overload,
        1 + burst + capacity / 2,
        "{stats:?}"
    );
    assert_eq!(stats.lost(), stats.dropped_overload, "{stats:?}");
    let exported = exporter.get_finished_spans().unwrap().len() as u64;
    assert_eq!(exported, stats.spans_to_pipeline);
    provider.shutdown().unwrap();
}
