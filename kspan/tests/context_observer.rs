// SPDX-License-Identifier: Apache-2.0 OR MIT
//! kspan's OpenTelemetry context observer, in a process of its own (the
//! observer is process-wide and set once): what it publishes for the
//! OpenTelemetry API and for `tracing` spans, with no kspan layer anywhere.

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
    TracerProvider as _,
};
use opentelemetry::Context;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt as _;

/// `(valid, trace id, span id)` of the calling thread's record.
fn published() -> (u8, [u8; 16], [u8; 8]) {
    let r = kspan::context::current_record().expect("published");
    (r.valid, r.trace_id, r.span_id)
}

fn ids(sc: &SpanContext) -> (u8, [u8; 16], [u8; 8]) {
    (1, sc.trace_id().to_bytes(), sc.span_id().to_bytes())
}

fn remote(trace: u128, span: u64) -> Context {
    Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from(trace),
        SpanId::from(span),
        TraceFlags::SAMPLED,
        false,
        TraceState::NONE,
    ))
}

/// One test, so that what happens before registration happens first.
#[test]
fn the_observer_publishes_every_context_switch() {
    // Made before the observer exists: it carries no prepared record.
    let early = remote(0xe, 0xe1);
    {
        let _g = early.clone().attach();
        assert_eq!(
            kspan::context::current_record(),
            None,
            "nothing publishes before registration"
        );
        kspan::context::register_observer().expect("the process's first observer");
        assert_eq!(
            published(),
            (1, 0xe_u128.to_be_bytes(), 0xe1_u64.to_be_bytes()),
            "registering publishes the context already current"
        );
    }
    assert_eq!(published().0, 0, "the guard's drop is seen");
    kspan::context::register_observer().expect("registering again is fine");

    std::thread::spawn(move || {
        // Plain OpenTelemetry API: in_span, nested, and back out.
        let provider = SdkTracerProvider::builder().build();
        let tracer = provider.tracer("app");
        tracer.in_span("outer", |outer_cx| {
            let outer = outer_cx.span().span_context().clone();
            assert_eq!(published(), ids(&outer), "outer is current");
            tracer.in_span("inner", |inner_cx| {
                let inner = inner_cx.span().span_context().clone();
                assert_eq!(published(), ids(&inner), "inner is current");
                assert_eq!(inner.trace_id(), outer.trace_id());
            });
            assert_eq!(published(), ids(&outer), "back in outer");
        });
        assert_eq!(published().0, 0, "no span is current");

        // Context::attach of a context made before registration: read on
        // the spot.
        {
            let _g = early.attach();
            assert_eq!(
                published(),
                (1, 0xe_u128.to_be_bytes(), 0xe1_u64.to_be_bytes())
            );
        }
        assert_eq!(published().0, 0);

        // An unsampled span is published with its flags: the BPF side drops
        // its kernel calls.
        let unsampled = Context::new().with_remote_span_context(SpanContext::new(
            TraceId::from(7),
            SpanId::from(8),
            TraceFlags::default(),
            false,
            TraceState::NONE,
        ));
        {
            let _g = unsampled.attach();
            let r = kspan::context::current_record().unwrap();
            assert_eq!((r.valid, r.trace_flags), (1, 0));
        }

        // tracing-opentelemetry with context activation (its default), no
        // kspan layer: the contexts it attaches on enter are seen.
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("tracing")));
        tracing::subscriber::with_default(subscriber, || {
            use tracing_opentelemetry::OpenTelemetrySpanExt as _;
            let request = tracing::info_span!("request");
            let step = tracing::info_span!(parent: &request, "step");
            {
                let _r = request.enter();
                assert_eq!(published(), ids(request.context().span().span_context()));
                {
                    let _s = step.enter();
                    assert_eq!(published(), ids(step.context().span().span_context()));
                }
                assert_eq!(published(), ids(request.context().span().span_context()));
            }
            assert_eq!(published().0, 0, "no span entered");
        });

        // Context activation off: EnteredSpanLayer publishes entered spans,
        // and an OpenTelemetry context attached and detached meanwhile does
        // not leave the record empty.
        let subscriber = tracing_subscriber::registry()
            .with(
                tracing_opentelemetry::layer()
                    .with_tracer(provider.tracer("tracing"))
                    .with_context_activation(false),
            )
            .with(kspan::context::EnteredSpanLayer::new());
        tracing::subscriber::with_default(subscriber, || {
            use tracing_opentelemetry::OpenTelemetrySpanExt as _;
            let request = tracing::info_span!("request");
            let _r = request.enter();
            let request_ids = ids(request.context().span().span_context());
            assert_eq!(published(), request_ids, "entered, no activation");
            tracer.in_span("api", |cx| {
                assert_eq!(published(), ids(cx.span().span_context()), "attached");
            });
            assert_eq!(published(), request_ids, "back to the entered span");
            drop(Context::new().attach());
            assert_eq!(published(), request_ids, "an empty context changes nothing");
        });
        assert_eq!(published().0, 0, "nothing entered");
    })
    .join()
    .unwrap();
}
