// SPDX-License-Identifier: Apache-2.0 OR MIT
//! How much of the ring a burst may fill before kspan declines calls, on
//! the host with a syscall source: with the consumer held, a burst of 7/8
//! of the ring's records is taken whole (the room kept is for the exits of
//! open calls and a margin of 1/32, not half the ring), and past the ring's
//! room calls are declined and counted, none lost to a full ring.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use kspan::Kspan;
use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, Span, SpanData, SpanProcessor};

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

/// Holds kspan's consumer inside its first span until opened.
#[derive(Debug, Default)]
struct Gate {
    /// (closed, holding)
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl Gate {
    fn set_closed(&self, closed: bool) {
        self.state.lock().unwrap().0 = closed;
        self.changed.notify_all();
    }

    fn wait_holding(&self) {
        let state = self.state.lock().unwrap();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, Duration::from_secs(10), |s| !s.1)
            .unwrap();
        assert!(state.1, "the consumer reached the gate");
    }
}

#[derive(Debug)]
struct GateProcessor(Arc<Gate>);

impl SpanProcessor for GateProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, _span: SpanData) {
        let mut state = self.0.state.lock().unwrap();
        if state.0 {
            state.1 = true;
            self.0.changed.notify_all();
            while state.0 {
                state = self.0.changed.wait(state).unwrap();
            }
            state.1 = false;
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// A ring of 1 MiB; a `getppid` record takes 160 bytes of it.
const RING: u32 = 1 << 20;
const SLOT: u64 = 160;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_fills_the_ring_but_for_its_margin_and_then_is_declined() {
    let gate = Arc::new(Gate::default());
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
        .start()
        .expect("syscall sources start on the host");
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
