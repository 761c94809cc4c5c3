// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Property tests of the OTEP 4947 thread-context record kspan writes
//! (issue 52): any span context and attributes, published on the calling
//! thread, read back from its `otel_thread_ctx_v1` as the OTEP tells a
//! reader to (the 28-byte record at the slot's address, then
//! `attrs-data-size` bytes of key, length and value entries), with no
//! kspan code in the reading.
//!
//! `PROPTEST_CASES=10000 cargo test -p kspan --lib context::properties`
//! runs more than the default 256 cases.

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
use proptest::prelude::*;
use proptest::test_runner::Config;

use super::publisher::AttrBytes;
use super::{kspan_otel_thread_ctx_slot, publish_record, ThreadContextRecord, ATTRS_CAPACITY};

fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}

/// The record as an outside reader finds it: its fields at the OTEP's
/// offsets, and the attribute entries after it.
#[derive(Debug, PartialEq, Eq)]
struct Read {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    valid: u8,
    trace_flags: u8,
    attrs: Vec<(u8, Vec<u8>)>,
}

/// Reads the calling thread's record through its `otel_thread_ctx_v1`.
fn read_own_record() -> Option<Read> {
    // SAFETY: this thread's slot, and the record it points at, live as
    // long as the thread; only this thread writes them.
    let record = unsafe { *kspan_otel_thread_ctx_slot() }.cast::<u8>();
    if record.is_null() {
        return None;
    }
    let mut header = [0u8; 28];
    // SAFETY: the record's 28 bytes, read as bytes.
    unsafe { record.copy_to_nonoverlapping(header.as_mut_ptr(), 28) };
    let size = usize::from(u16::from_ne_bytes([header[26], header[27]]));
    assert!(size <= ATTRS_CAPACITY, "attrs-data-size {size}");
    let mut data = vec![0u8; size];
    // SAFETY: the slot holds ATTRS_CAPACITY bytes after the record.
    unsafe {
        record
            .add(28)
            .copy_to_nonoverlapping(data.as_mut_ptr(), size)
    };
    let mut attrs = Vec::new();
    let mut rest = &data[..];
    while let [key, len, tail @ ..] = rest {
        let len = usize::from(*len);
        assert!(tail.len() >= len, "an entry past attrs-data-size: {data:?}");
        attrs.push((*key, tail[..len].to_vec()));
        rest = &tail[len..];
    }
    assert!(rest.is_empty(), "a partial entry at the end: {data:?}");
    Some(Read {
        trace_id: header[..16].try_into().unwrap(),
        span_id: header[16..24].try_into().unwrap(),
        valid: header[24],
        trace_flags: header[25],
        attrs,
    })
}

fn entries() -> impl Strategy<Value = Vec<(u8, String)>> {
    prop::collection::vec((any::<u8>(), "\\PC{0,40}"), 0..6)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn published_records_read_back_as_written(
        trace in any::<u128>(),
        span in any::<u64>(),
        flags in any::<u8>(),
        written in entries(),
    ) {
        let sc = SpanContext::new(
            TraceId::from(trace),
            SpanId::from(span),
            TraceFlags::new(flags),
            false,
            TraceState::NONE,
        );
        let (attrs, cut) = AttrBytes::encode(written.iter().map(|(k, v)| (*k, v.as_bytes())));
        publish_record(&ThreadContextRecord::of(&sc), &attrs);
        let read = read_own_record().expect("a record once published");
        if !sc.is_valid() {
            // No active span: nothing else is for a reader to take.
            prop_assert_eq!(read.valid, 0);
            return Ok(());
        }
        prop_assert_eq!(read.valid, 1);
        prop_assert_eq!(read.trace_id, trace.to_be_bytes());
        prop_assert_eq!(read.span_id, span.to_be_bytes());
        prop_assert_eq!(read.trace_flags, flags);
        // The entries are those written, in order, each whole or cut at a
        // character boundary (never to nothing); one left out or cut did
        // not fit whole at its turn, and each is counted.
        let mut reads = read.attrs.iter().peekable();
        let (mut used, mut whole) = (0usize, 0u64);
        for (key, value) in &written {
            let matched = reads.next_if(|(k, v)| {
                k == key && value.as_bytes().starts_with(v) && (!v.is_empty() || value.is_empty())
            });
            let kept = matched.map_or(0, |(_, v)| v.len());
            if matched.is_some() && kept == value.len() {
                whole += 1;
            } else {
                prop_assert!(
                    used + 2 + value.len() > ATTRS_CAPACITY,
                    "{value:?} left out or cut with {used} bytes used: {read:?}"
                );
            }
            if let Some((_, v)) = matched {
                prop_assert!(std::str::from_utf8(v).is_ok(), "cut inside a character: {v:?}");
                used += 2 + v.len();
            }
        }
        prop_assert!(reads.next().is_none(), "an entry never written: {read:?}");
        prop_assert_eq!(cut, written.len() as u64 - whole);
        prop_assert!(used <= ATTRS_CAPACITY);
    }
}
