// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The `tracing` layers (feature `tracing`): what publishes the thread
//! context where kspan's context observer cannot see a switch, that is
//! `tracing` spans under tracing-opentelemetry with context activation off,
//! and every switch in a process whose observer is someone else's.

use std::cell::{Cell, RefCell};
use std::sync::OnceLock;

use opentelemetry::trace::{SpanContext, TraceContextExt as _};
use tracing::dispatcher::WeakDispatch;
use tracing::{span, Dispatch};
use tracing_subscriber::layer::Context as LayerContext;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::{publish, publish_current};

/// A `tracing` layer that republishes OpenTelemetry's current context
/// after every span enter and exit. With kspan's context observer, which
/// [`KspanBuilder::start`](crate::KspanBuilder::start) registers by default,
/// it adds nothing: the observer publishes every context switch, those of
/// tracing-opentelemetry's enters included. For a process whose observer is
/// someone else's ([`ObserverTaken`](super::ObserverTaken)), [`EnteredSpanLayer`] does its work,
/// with context activation on or off.
#[deprecated(
    note = "does nothing with kspan's context observer, which `KspanBuilder::start` registers \
            by default: remove it; where the process's observer is someone else's \
            (`kspan::context::ObserverTaken`), add `kspan::context::EnteredSpanLayer::new()` \
            instead"
)]
#[derive(Debug, Default, Clone, Copy)]
pub struct ThreadContextLayer;

#[allow(deprecated)] // Kept working for the programs that still add it.
impl<S> Layer<S> for ThreadContextLayer
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_enter(&self, _id: &span::Id, _ctx: LayerContext<'_, S>) {
        publish_current();
    }

    fn on_exit(&self, _id: &span::Id, _ctx: LayerContext<'_, S>) {
        publish_current();
    }
}

/// A `tracing` layer for tracing-opentelemetry with context activation
/// turned off (`with_context_activation(false)`), where entering a span does
/// not make its context current. After every span enter and exit it
/// publishes the OpenTelemetry span of the innermost entered `tracing` span
/// (starting it if tracing-opentelemetry has not yet; the nearest ancestor's
/// when the OpenTelemetry layer filtered the span out), and OpenTelemetry's
/// current context when no span is entered. Each span is resolved once; an
/// enter then costs a span lookup under the shared lock, an exit none.
///
/// It finds the spans through the subscriber it is registered with, so it
/// works for global and scoped subscribers alike, on any thread. It needs
/// the same tracing-opentelemetry version as kspan (0.34): the span data of
/// another version is not recognised, and the record then says "none".
#[derive(Debug, Default)]
pub struct EnteredSpanLayer {
    dispatch: OnceLock<WeakDispatch>,
}

impl EnteredSpanLayer {
    /// A layer not yet registered with a subscriber.
    pub fn new() -> Self {
        Self::default()
    }

    /// The OpenTelemetry span context that span `id` stands for: its own
    /// OpenTelemetry span, or its nearest ancestor's when it has none (the
    /// OpenTelemetry layer filtered it out), or `None`. Resolved once per
    /// span and kept in its extensions; later calls take only the shared
    /// lock.
    fn resolve<S>(&self, id: &span::Id, ctx: &LayerContext<'_, S>) -> Option<SpanContext>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        let span = ctx.span(id)?;
        if let Some(ResolvedSpan(sc)) = span.extensions().get::<ResolvedSpan>() {
            return sc.clone();
        }
        let own = {
            let dispatch = self.dispatch.get()?.upgrade()?;
            // It takes the span's extensions itself: none may be held here.
            tracing_opentelemetry::get_otel_context(id, &dispatch)
                .map(|cx| cx.span().span_context().clone())
                .filter(SpanContext::is_valid)
        };
        let sc = own.or_else(|| self.resolve(&span.parent()?.id(), ctx));
        span.extensions_mut().insert(ResolvedSpan(sc.clone()));
        sc
    }

    /// The key of this layer's entries in [`ENTERED`].
    fn key(&self) -> usize {
        self as *const Self as usize
    }
}

thread_local! {
    /// Spans entered on this thread through an [`EnteredSpanLayer`], innermost
    /// last, with what each stands for: an exit publishes the new innermost
    /// without looking anything up.
    static ENTERED: RefCell<Vec<(usize, span::Id, Option<SpanContext>)>> =
        const { RefCell::new(Vec::new()) };

    /// Set while this thread resolves a span: starting an OpenTelemetry span
    /// runs samplers and processors, which may enter spans of their own;
    /// those must not take the span's lock again.
    static RESOLVING: Cell<bool> = const { Cell::new(false) };
}

/// The OpenTelemetry span of the innermost span entered on this thread
/// through an [`EnteredSpanLayer`], if any.
pub(super) fn innermost_entered() -> Option<SpanContext> {
    ENTERED
        .try_with(|e| {
            e.try_borrow()
                .ok()
                .and_then(|entered| entered.last().and_then(|(_, _, sc)| sc.clone()))
        })
        .ok()
        .flatten()
}

/// A `tracing` span's OpenTelemetry span context as [`EnteredSpanLayer`]
/// resolved it, kept in the span's extensions.
struct ResolvedSpan(Option<SpanContext>);

/// Publishes `sc`, or OpenTelemetry's current context when it is `None`.
fn publish_or_current(sc: Option<&SpanContext>) {
    match sc {
        Some(sc) => publish(sc),
        None => publish_current(),
    }
}

impl<S> Layer<S> for EnteredSpanLayer
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        // A layer belongs to one subscriber; a second registration keeps
        // the first.
        let _ = self.dispatch.set(subscriber.downgrade());
    }

    fn on_enter(&self, id: &span::Id, ctx: LayerContext<'_, S>) {
        if RESOLVING.with(|r| r.replace(true)) {
            return;
        }
        let sc = self.resolve(id, &ctx);
        RESOLVING.with(|r| r.set(false));
        publish_or_current(sc.as_ref());
        ENTERED.with(|e| e.borrow_mut().push((self.key(), id.clone(), sc)));
    }

    fn on_exit(&self, id: &span::Id, _ctx: LayerContext<'_, S>) {
        // Spans may exit out of order: the latest entry of this span goes.
        let innermost = ENTERED.with(|e| {
            let mut entered = e.borrow_mut();
            let key = self.key();
            if let Some(at) = entered.iter().rposition(|(k, i, _)| *k == key && i == id) {
                entered.remove(at);
            }
            entered.last().map(|(_, _, sc)| sc.clone())
        });
        publish_or_current(innermost.flatten().as_ref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::current_record;

    /// `(valid, trace id, span id)` of the calling thread's record.
    fn published() -> (u8, [u8; 16], [u8; 8]) {
        let r = current_record().expect("published");
        (r.valid, r.trace_id, r.span_id)
    }

    /// `(1, trace id, span id)` of a `tracing` span's OpenTelemetry span.
    fn ids_of(span: &tracing::Span) -> (u8, [u8; 16], [u8; 8]) {
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        (1, sc.trace_id().to_bytes(), sc.span_id().to_bytes())
    }

    /// A subscriber with tracing-opentelemetry (context activation as
    /// given, spans below INFO not made OpenTelemetry spans) and, after
    /// it, `layer`.
    macro_rules! subscriber {
        ($activation:expr, $layer:expr) => {{
            use opentelemetry::trace::TracerProvider as _;
            use tracing_subscriber::layer::SubscriberExt as _;

            let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
            tracing_subscriber::registry()
                .with(
                    tracing_opentelemetry::layer()
                        .with_tracer(provider.tracer("test"))
                        .with_context_activation($activation)
                        .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
                )
                .with($layer)
        }};
    }

    /// Nested spans: the record holds the innermost, then the outer again,
    /// then "none".
    fn nested_spans_are_published(subscriber: impl tracing::Subscriber + Send + Sync + 'static) {
        std::thread::spawn(move || {
            tracing::subscriber::with_default(subscriber, || {
                let outer = tracing::info_span!("outer");
                let inner = tracing::info_span!(parent: &outer, "inner");
                {
                    let _o = outer.enter();
                    assert_eq!(published(), ids_of(&outer), "outer entered");
                    {
                        let _i = inner.enter();
                        assert_eq!(published(), ids_of(&inner), "inner entered");
                        assert_eq!(ids_of(&inner).1, ids_of(&outer).1, "one trace");
                    }
                    assert_eq!(published(), ids_of(&outer), "back in outer");
                }
                assert_eq!(published().0, 0, "no span entered");
            });
        })
        .join()
        .unwrap();
    }

    #[test]
    #[allow(deprecated)] // Still works for the programs that add it.
    fn thread_context_layer_publishes_entered_spans_with_context_activation() {
        nested_spans_are_published(subscriber!(true, ThreadContextLayer));
    }

    #[test]
    fn entered_span_layer_publishes_entered_spans_with_context_activation() {
        nested_spans_are_published(subscriber!(true, EnteredSpanLayer::new()));
    }

    #[test]
    fn entered_span_layer_publishes_entered_spans_without_context_activation() {
        nested_spans_are_published(subscriber!(false, EnteredSpanLayer::new()));
    }

    #[test]
    #[allow(deprecated)]
    fn thread_context_layer_sees_nothing_without_context_activation() {
        let subscriber = subscriber!(false, ThreadContextLayer);
        std::thread::spawn(move || {
            tracing::subscriber::with_default(subscriber, || {
                let _e = tracing::info_span!("span").entered();
                assert_eq!(published().0, 0, "nothing made the span current");
            });
        })
        .join()
        .unwrap();
    }

    #[test]
    fn entered_span_layer_finds_spans_entered_on_other_threads_and_skips_filtered_ones() {
        let subscriber = subscriber!(false, EnteredSpanLayer::new());
        std::thread::spawn(move || {
            // A scoped subscriber: only this thread has it as its default.
            tracing::subscriber::with_default(subscriber, || {
                let request = tracing::info_span!("request");
                // Below INFO: no OpenTelemetry span; its parent is published.
                let detail = tracing::debug_span!(parent: &request, "detail");
                assert!(!detail.is_disabled(), "kspan's layer takes every span");
                let request_ids = ids_of(&request);
                // Entered on a thread with no default subscriber at all.
                std::thread::spawn(move || {
                    let _r = request.enter();
                    assert_eq!(published(), request_ids, "entered on the worker");
                    let _d = detail.enter();
                    assert_eq!(published(), request_ids, "inside an unexported span");
                })
                .join()
                .unwrap();
            });
        })
        .join()
        .unwrap();
    }
}
