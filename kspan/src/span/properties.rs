// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Property tests of the span factory (issue 52): any ring-buffer record,
//! written by `consume::properties`' generator, becomes a span or is held
//! or discarded, never a panic.

use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use proptest::prelude::*;

use super::{ClockOffset, KernelSpanIds, SpanFactory};
use crate::consume::parse_record;
use crate::consume::properties::{config, encode, fields, probe_plan};

proptest! {
    #![proptest_config(config())]

    /// Any bytes long enough for a header, whatever their fields say and
    /// however short their data area, become a span or are held or
    /// discarded: never a panic. A span made of them has the record's ids.
    #[test]
    fn garbled_records_never_panic(
        f in fields(),
        data in prop::collection::vec(any::<u8>(), 0..24),
    ) {
        let plan = probe_plan();
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .with_id_generator(KernelSpanIds::default())
            .build();
        let factory = SpanFactory::new(provider.tracer("kspan-test"), ClockOffset::from_offset_ns(0));
        let bytes = encode(&f, &data);
        let view = parse_record(&bytes).unwrap();
        factory.process(&plan, &view);
        factory.release_waiting();
        for span in exporter.get_finished_spans().unwrap() {
            prop_assert_eq!(span.span_context.trace_id(), TraceId::from_bytes(f.trace_id));
            prop_assert_eq!(span.span_context.span_id(), SpanId::from(f.span_id));
            prop_assert!(span.end_time >= span.start_time);
        }
    }
}
