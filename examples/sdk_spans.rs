// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The baseline of the consumer's cost per span (issue 53): `sdk_spans N`
//! makes N empty spans with the OpenTelemetry SDK's tracer (a start and an
//! end each, no attributes) through the same pipeline the `span_workers`
//! example exports kernel spans through (`with_kspan`, the SDK's batch
//! processor, an exporter that discards), then flushes. Run under
//! `valgrind --tool=callgrind`, the instructions of `make_spans` over N
//! are what the SDK itself costs a span, beside what kspan's worker costs
//! a kernel span (BENCHMARKS.md, "Span workers").

use std::process::ExitCode;

use kspan_examples::hot::discard;
use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};

fn main() -> ExitCode {
    let Some(n) = std::env::args().nth(1).and_then(|n| n.parse::<u64>().ok()) else {
        eprintln!("usage: sdk_spans N");
        return ExitCode::FAILURE;
    };
    let discarding = discard::provider(n as usize + 1);
    let tracer = discarding.provider.tracer("sdk_spans");
    make_spans(&tracer, n);
    if let Err(e) = discarding.provider.shutdown() {
        eprintln!("sdk_spans: {e}");
        return ExitCode::FAILURE;
    }
    let received = discarding.exporter.received();
    println!("sdk_spans: {n} spans made, {received} exported");
    if received == n {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[inline(never)]
fn make_spans(tracer: &opentelemetry_sdk::trace::SdkTracer, n: u64) {
    for _ in 0..n {
        tracer.start("span").end();
    }
}
