// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What publishing the thread context (OTEP 4947) adds to a `tracing` span's
//! enter/exit pair, against what the tracing-opentelemetry layer itself adds.
//!
//! `cargo bench -p kspan --bench thread_ctx`. Three subscribers: the registry
//! alone; with the tracing-opentelemetry layer; with that layer and kspan's
//! [`ThreadContextLayer`]. One span is entered and exited in a loop under
//! each, in many short rounds in rotating order; the two added costs are
//! differences of medians, and their ratio is the figure (target <= 0.25x).
//!
//! Two more subscribers give the same figure for context activation off:
//! tracing-opentelemetry without it, and with kspan's [`EnteredSpanLayer`]
//! after it.

use std::hint::black_box;
use std::time::Instant;

use kspan::context::{EnteredSpanLayer, ThreadContextLayer};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Dispatch;
use tracing_subscriber::layer::SubscriberExt;

fn enter_exit(dispatch: &Dispatch, calls: u32) -> f64 {
    tracing::dispatcher::with_default(dispatch, || {
        let span = tracing::info_span!("request");
        // The first enter starts the OpenTelemetry span; time the steady state.
        drop(span.enter());
        let started = Instant::now();
        for _ in 0..calls {
            let entered = span.enter();
            black_box(&entered);
            drop(entered);
        }
        started.elapsed().as_nanos() as f64 / f64::from(calls)
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let provider = SdkTracerProvider::builder().build();
    let registry = Dispatch::new(tracing_subscriber::registry());
    let otel = Dispatch::new(
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("bench"))),
    );
    let kspan = Dispatch::new(
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("bench")))
            .with(ThreadContextLayer),
    );
    // Check once that the layer publishes what the bench claims.
    tracing::dispatcher::with_default(&kspan, || {
        let span = tracing::info_span!("check");
        let entered = span.enter();
        let record = kspan::context::current_record().expect("published");
        assert_eq!(record.valid, 1);
        drop(entered);
        assert_eq!(kspan::context::current_record().map(|r| r.valid), Some(0));
    });

    let otel_off = || {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("bench"))
            .with_context_activation(false)
    };
    let off = Dispatch::new(tracing_subscriber::registry().with(otel_off()));
    let entered = Dispatch::new(
        tracing_subscriber::registry()
            .with(otel_off())
            .with(EnteredSpanLayer::new()),
    );
    tracing::dispatcher::with_default(&entered, || {
        let span = tracing::info_span!("check");
        let _entered = span.enter();
        let record = kspan::context::current_record().expect("published");
        assert_eq!(
            record.valid, 1,
            "EnteredSpanLayer publishes without activation"
        );
    });

    let cases = [&registry, &otel, &kspan, &off, &entered];
    let (rounds, calls) = (101usize, 20_000u32);
    let mut times: [Vec<f64>; 5] = Default::default();
    for round in 0..rounds {
        for k in 0..cases.len() {
            let case = (round + k) % cases.len();
            times[case].push(enter_exit(cases[case], calls));
        }
    }
    let [registry, otel, kspan, off, entered] = times.map(median);
    let otel_added = otel - registry;
    let kspan_added = kspan - otel;
    let off_added = off - registry;
    let entered_added = entered - off;
    println!("thread_ctx: {rounds} rounds x {calls} enter/exit pairs; medians");
    println!("  registry alone                                  {registry:7.1} ns/pair");
    println!(
        "  + tracing-opentelemetry layer                   {otel:7.1} ns/pair ({otel_added:+.1})"
    );
    println!(
        "  + kspan ThreadContextLayer                      {kspan:7.1} ns/pair ({kspan_added:+.1})"
    );
    println!(
        "  ratio     kspan's added cost / the OpenTelemetry layer's: {:.2}x (target <= 0.25x)",
        kspan_added / otel_added
    );
    println!("context activation off:");
    println!(
        "  + tracing-opentelemetry layer                   {off:7.1} ns/pair ({off_added:+.1})"
    );
    println!(
        "  + kspan EnteredSpanLayer                        {entered:7.1} ns/pair ({entered_added:+.1})"
    );
    println!(
        "  ratio     kspan's added cost / the OpenTelemetry layer's: {:.2}x",
        entered_added / off_added
    );
}
