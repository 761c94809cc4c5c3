// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Property tests of wait records (issue 52): any bytes at all, in every
//! state and waker kind the programs write, become a wait span or are
//! refused as too short, never a panic.
//!
//! `PROPTEST_CASES=10000 cargo test -p kspan --lib sched::wait::properties`
//! runs more than the default 256 cases.

use std::mem::{offset_of, size_of};

use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use proptest::prelude::*;
use proptest::test_runner::Config;

use super::*;
use crate::span::ClockOffset;

fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}

thread_local! {
    /// One for every case: it reads the kernel's symbols once.
    static SPANS: WaitSpans = WaitSpans {
        symbols: WaitSymbols::default(),
        causes: true,
    };
}

/// A wait record's bytes: `bytes`, with the state, waker kind and frame
/// counts set to `choices` (values the programs write, or any).
fn record(mut bytes: Vec<u8>, choices: (u32, u32, u64, u64)) -> Vec<u8> {
    let (state, waker_kind, nframes, waker_nframes) = choices;
    let mut put = |at: usize, value: &[u8]| bytes[at..at + value.len()].copy_from_slice(value);
    put(offset_of!(kspan_wait_record, state), &state.to_ne_bytes());
    put(
        offset_of!(kspan_wait_record, waker_kind),
        &waker_kind.to_ne_bytes(),
    );
    put(
        offset_of!(kspan_wait_record, nframes),
        &nframes.to_ne_bytes(),
    );
    put(
        offset_of!(kspan_wait_record, waker_nframes),
        &waker_nframes.to_ne_bytes(),
    );
    bytes
}

fn choices() -> impl Strategy<Value = (u32, u32, u64, u64)> {
    let some = |max: u32| prop_oneof![0..=max, any::<u32>()];
    let frames = prop_oneof![0u64..20, any::<u64>()];
    (
        some(c::KSPAN_SCHED_LOCK as u32 + 1),
        some(c::KSPAN_WAKER_UNKNOWN as u32 + 1),
        frames.clone(),
        frames,
    )
}

/// Spans made of `bytes`, and whether they held a whole wait record.
fn process(bytes: &[u8]) -> (bool, Vec<opentelemetry_sdk::trace::SpanData>) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .with_id_generator(crate::span::KernelSpanIds::default())
        .build();
    let factory = SpanFactory::new(
        provider.tracer("kspan-test"),
        ClockOffset::from_offset_ns(0),
    );
    let whole = SPANS.with(|spans| spans.process(&factory, bytes));
    factory.release_waiting();
    (whole, exporter.get_finished_spans().unwrap())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_wait_record_becomes_a_span_without_a_panic(
        bytes in prop::collection::vec(any::<u8>(), size_of::<kspan_wait_record>()),
        choices in choices(),
    ) {
        let bytes = record(bytes, choices);
        let w = parse_wait(&bytes).expect("a whole record");
        let (whole, spans) = process(&bytes);
        prop_assert!(whole);
        for span in spans {
            prop_assert_eq!(span.span_context.trace_id(), TraceId::from_bytes(w.rec.trace_id));
            prop_assert_eq!(span.span_context.span_id(), SpanId::from(w.rec.span_id));
            prop_assert!(span.end_time >= span.start_time);
        }
    }

    #[test]
    fn wait_records_too_short_are_refused(len in 0..size_of::<kspan_wait_record>()) {
        let (whole, spans) = process(&vec![0x5a; len]);
        prop_assert!(!whole && spans.is_empty());
    }
}
