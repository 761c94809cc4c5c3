// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What publishing the thread context (OTEP 4947) costs, against what the
//! tracing-opentelemetry layer itself adds to a `tracing` span's enter/exit
//! pair.
//!
//! `cargo bench -p kspan --bench thread_ctx --features tracing`, in two phases, since the
//! SDK's context observer is set once per process and never removed.
//!
//! Phase 1, no observer: three subscribers, the registry alone, with the
//! tracing-opentelemetry layer, and with that layer and kspan's
//! [`ThreadContextLayer`]; one span entered and exited in a loop under each;
//! two more for context activation off (tracing-opentelemetry without it,
//! and with kspan's [`EnteredSpanLayer`]); and an OpenTelemetry context
//! attached and detached (`Context::attach`, guard dropped) with nothing
//! observing. Many short rounds in rotating order; medians.
//!
//! Phase 2, kspan's [`ThreadContextObserver`] registered: the same context
//! attach/detach, now published, and the registry alone again as a control
//! for drift between the phases. The observer's added cost per
//! attach/detach pair over the OpenTelemetry layer's added cost per
//! enter/exit pair is the figure (target <= 0.25x). Making a context
//! (`with_remote_span_context`) is timed in both phases too: the observer
//! prepares the context's record then.
//!
//! Phase 2 also times OBI's traces map (`kspan::context::obi`, OTEP 4855)
//! on: the attach/detach pair, now a write of the thread's entry and its
//! removal (two `bpf()` system calls), and the attach/detach of the span
//! that is current already (no change, no system call). The map is pinned
//! under a root of the bench's own on the bpffs at `/sys/fs/bpf`, removed
//! at the end; each round turns writing on and off around its timing, so
//! that these cases rotate with the others. Without bpffs there or root,
//! they are skipped, saying why.

// `ThreadContextLayer` is deprecated; its cost is still measured for the
// programs that keep it.
#![allow(deprecated)]

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Instant;

use kspan::context::obi::{ObiTracesMap, ObiTracesWriter};
use kspan::context::{EnteredSpanLayer, ThreadContextLayer, ThreadContextObserver};
use libbpf_rs::{MapCore as _, MapFlags, MapHandle};
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::Context;
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

/// A context with one sampled span, as a request handler would attach.
fn span_context() -> Context {
    Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from(0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c),
        SpanId::from(0xb7ad_6b71_6920_3331),
        TraceFlags::SAMPLED,
        false,
        TraceState::NONE,
    ))
}

/// ns per `cx.attach()` + guard drop.
fn attach_detach(cx: &Context, calls: u32) -> f64 {
    let started = Instant::now();
    for _ in 0..calls {
        let guard = black_box(cx).clone().attach();
        black_box(&guard);
        drop(guard);
    }
    started.elapsed().as_nanos() as f64 / f64::from(calls)
}

/// ns per context made with a span (and dropped).
fn make_context(calls: u32) -> f64 {
    let started = Instant::now();
    for _ in 0..calls {
        black_box(span_context());
    }
    started.elapsed().as_nanos() as f64 / f64::from(calls)
}

/// ns per `cx.attach()` + guard drop with OBI's traces map written, from
/// `map`; with `inside`, under `cx` already attached (the span does not
/// change).
fn attach_detach_obi(map: &ObiTracesMap, cx: &Context, inside: bool, calls: u32) -> f64 {
    let writer = map.start().expect("the map opened before");
    let outer = inside.then(|| cx.clone().attach());
    let ns = attach_detach(cx, calls);
    drop(outer);
    drop(writer);
    ns
}

/// A pin root of the bench's own on the bpffs at `/sys/fs/bpf`, with the
/// map opened there once and checked, or why not.
fn obi_map(cx: &Context) -> Result<(ObiTracesMap, PathBuf), String> {
    let root = PathBuf::from(format!("/sys/fs/bpf/kspan-bench-{}", std::process::id()));
    std::fs::create_dir(&root).map_err(|e| format!("cannot make {}: {e}", root.display()))?;
    let map = ObiTracesMap::default().pin_root(&root);
    let check = |writer: ObiTracesWriter| -> Result<(), String> {
        let reader = MapHandle::from_pinned_path(writer.path()).map_err(|e| e.to_string())?;
        let tid: u64 = std::fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|p| p.file_name()?.to_str()?.parse().ok())
            .ok_or("no /proc/thread-self")?;
        let key = ((u64::from(std::process::id()) << 32) | tid).to_ne_bytes();
        let guard = cx.clone().attach();
        let entry = reader
            .lookup(&key, MapFlags::ANY)
            .map_err(|e| e.to_string())?;
        assert_eq!(
            entry.as_deref().map(|e| &e[16..]),
            Some(&0xb7ad_6b71_6920_3331_u64.to_be_bytes()[..]),
            "the attach wrote the thread's entry"
        );
        drop(guard);
        let entry = reader
            .lookup(&key, MapFlags::ANY)
            .map_err(|e| e.to_string())?;
        assert_eq!(entry, None, "the detach removed it");
        Ok(())
    };
    match map.start().map_err(|e| e.to_string()).and_then(check) {
        Ok(()) => Ok((map, root)),
        Err(e) => {
            remove_pin(&root);
            Err(e)
        }
    }
}

/// Removes the pin root `obi_map` made, and what is in it.
fn remove_pin(root: &Path) {
    let map = ObiTracesMap::default().pin_root(root).path();
    let _ = std::fs::remove_file(&map);
    let _ = std::fs::remove_dir(root.join("otel"));
    let _ = std::fs::remove_dir(root);
}

/// Runs `cases` in `rounds` rounds in rotating order; the median of each.
fn rotate(cases: &[&dyn Fn() -> f64], rounds: usize) -> Vec<f64> {
    let mut times = vec![Vec::new(); cases.len()];
    for round in 0..rounds {
        for k in 0..cases.len() {
            let case = (round + k) % cases.len();
            times[case].push(cases[case]());
        }
    }
    times.into_iter().map(median).collect()
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

    let (rounds, calls) = (101usize, 20_000u32);
    let cx_plain = span_context();
    let phase1 = rotate(
        &[
            &|| enter_exit(&registry, calls),
            &|| enter_exit(&otel, calls),
            &|| enter_exit(&kspan, calls),
            &|| enter_exit(&off, calls),
            &|| enter_exit(&entered, calls),
            &|| attach_detach(&cx_plain, calls),
            &|| make_context(calls),
        ],
        rounds,
    );
    let [registry_1, otel, kspan, off, entered, attach_1, make_1] = phase1[..] else {
        unreachable!("seven cases")
    };

    opentelemetry::context::GlobalContextObserver::set(std::sync::Arc::new(ThreadContextObserver));
    let cx_prepared = span_context();
    assert!(
        cx_prepared.observer_view().is_some(),
        "the record is prepared"
    );
    {
        let _g = cx_prepared.clone().attach();
        let record = kspan::context::current_record().expect("published");
        assert_eq!(record.span_id, 0xb7ad_6b71_6920_3331_u64.to_be_bytes());
    }
    let obi = obi_map(&cx_prepared);
    let (control, published, made) = (
        || enter_exit(&registry, calls),
        || attach_detach(&cx_prepared, calls),
        || make_context(calls),
    );
    let mut cases: Vec<&dyn Fn() -> f64> = vec![&control, &published, &made];
    let obi_cases = obi.as_ref().ok().map(|(map, _)| {
        let cx = &cx_prepared;
        (
            move || attach_detach_obi(map, cx, false, calls),
            move || attach_detach_obi(map, cx, true, calls),
        )
    });
    if let Some((changes, same)) = &obi_cases {
        cases.push(changes);
        cases.push(same);
    }
    let phase2 = rotate(&cases, rounds);
    let [registry_2, attach_2, make_2] = phase2[..3] else {
        unreachable!("three cases")
    };

    // Phase 3: record attributes chosen (a ContextPublisher with two keys).
    let publisher = kspan::context::ContextPublisher::new()
        .record_attributes(["http.route", "http.request.method"])
        .expect("two keys");
    let with_publisher = SdkTracerProvider::builder()
        .with_span_processor(publisher)
        .build();
    let tracer_with = with_publisher.tracer("bench");
    let tracer_without = provider.tracer("bench");
    let attributes = || {
        [
            opentelemetry::KeyValue::new("http.route", "/users/{id}/orders"),
            opentelemetry::KeyValue::new("http.request.method", "GET"),
        ]
    };
    let request = tracer_with
        .span_builder("GET /users/{id}/orders")
        .with_attributes(attributes())
        .start(&tracer_with);
    let cx_attributes = Context::new().with_span(request);
    {
        let _g = cx_attributes.clone().attach();
        let record = kspan::context::current_record().expect("published");
        assert_eq!(record.attrs_data_size, 2 + 18 + 2 + 3, "both attributes");
    }
    let start_end = |tracer: &opentelemetry_sdk::trace::SdkTracer, calls: u32| {
        use opentelemetry::trace::{Span as _, Tracer as _};
        let started = Instant::now();
        for _ in 0..calls {
            let mut span = tracer
                .span_builder("GET /users/{id}/orders")
                .with_attributes(attributes())
                .start(tracer);
            span.end();
        }
        started.elapsed().as_nanos() as f64 / f64::from(calls)
    };
    let phase3 = rotate(
        &[
            &|| attach_detach(&cx_prepared, calls),
            &|| attach_detach(&cx_attributes, calls),
            &|| make_context(calls),
            &|| start_end(&tracer_without, calls / 10),
            &|| start_end(&tracer_with, calls / 10),
        ],
        rounds,
    );
    let [attach_3, attach_attrs, make_3, span_without, span_with] = phase3[..] else {
        unreachable!("five cases")
    };

    let otel_added = otel - registry_1;
    let kspan_added = kspan - otel;
    let off_added = off - registry_1;
    let entered_added = entered - off;
    let observer_added = attach_2 - attach_1;
    println!("thread_ctx: {rounds} rounds x {calls} pairs per case; medians");
    println!("phase 1, no context observer:");
    println!("  registry alone, span enter/exit                 {registry_1:7.1} ns/pair");
    println!(
        "  + tracing-opentelemetry layer                   {otel:7.1} ns/pair ({otel_added:+.1})"
    );
    println!(
        "  + kspan ThreadContextLayer                      {kspan:7.1} ns/pair ({kspan_added:+.1})"
    );
    println!("  Context::attach + drop, nothing observing       {attach_1:7.1} ns/pair");
    println!("  a context made with a span                      {make_1:7.1} ns");
    println!("phase 2, kspan's ThreadContextObserver registered:");
    println!(
        "  registry alone, span enter/exit (control)       {registry_2:7.1} ns/pair ({:.2}x phase 1)",
        registry_2 / registry_1
    );
    println!(
        "  Context::attach + drop, published               {attach_2:7.1} ns/pair ({observer_added:+.1})"
    );
    println!(
        "  a context made with a span, record prepared     {make_2:7.1} ns ({:+.1})",
        make_2 - make_1
    );
    match (&obi, &phase2[3..]) {
        (Ok((map, root)), [changes, same]) => {
            println!("  OBI's traces map on ({}):", map.path().display());
            println!(
                "  Context::attach + drop, entry written, removed  {changes:7.1} ns/pair ({:+.1})",
                changes - attach_2
            );
            println!(
                "  Context::attach + drop of the current span      {same:7.1} ns/pair ({:+.1})",
                same - attach_2
            );
            remove_pin(root);
        }
        (Err(why), _) => println!("  OBI's traces map: skipped ({why})"),
        _ => unreachable!("two cases with the map"),
    }
    println!(
        "  ratio     the observer's added cost per attach/detach / the OpenTelemetry layer's per enter/exit: {:.2}x (target <= 0.25x)",
        observer_added / otel_added
    );
    println!(
        "  ratio     ThreadContextLayer's added cost / the OpenTelemetry layer's: {:.2}x",
        kspan_added / otel_added
    );
    println!("phase 3, record attributes chosen (two keys):");
    println!(
        "  Context::attach + drop, no attributes           {attach_3:7.1} ns/pair ({:.2}x phase 2)",
        attach_3 / attach_2
    );
    println!(
        "  Context::attach + drop, 2 attributes, 25 bytes  {attach_attrs:7.1} ns/pair ({:+.1})",
        attach_attrs - attach_3
    );
    println!(
        "  a context made with a span, record prepared     {make_3:7.1} ns ({:+.1} over phase 2)",
        make_3 - make_2
    );
    println!("  span start + end, 2 attributes, no publisher    {span_without:7.1} ns");
    println!(
        "  span start + end, 2 attributes, ContextPublisher {span_with:6.1} ns ({:+.1})",
        span_with - span_without
    );
    println!(
        "  ratio     a switch with attributes / without: {:.2}x",
        attach_attrs / attach_3
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
