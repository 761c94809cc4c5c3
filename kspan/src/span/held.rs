// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Spans whose parent may still be refused.
//!
//! A probe with filters decides at a call's exit whether the call is a
//! span, and the calls it made have exited (and become spans) before that.
//! The kernel marks such a span's record "parent pending"; the span waits
//! here, under its parent's id, until the parent's fate arrives: its own
//! span (the parent stands: the children go as they are) or a reparent
//! record (the parent was refused: they go under its parent instead, maybe
//! to wait again). A parent whose exit never comes (a lost exit, counted by
//! the kernel) gets a reparent record when the kernel forgets its frame, at
//! a later call of its task; one whose task makes none would keep its
//! children forever: they go as they are after [`MAX_WAIT`], or when
//! [`MAX_HELD`] spans wait, counted as unresolved.
//! Pure bookkeeping: no clock of its own, no tracer.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use opentelemetry::trace::SpanId;

use crate::annotation::KernelSpan;

/// How long a span waits for its parent's fate. Longer than any outer call
/// a service makes with filtered probes inside: a span that waited this
/// long goes with a parent that may never be exported.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(30);

/// Spans waiting at once, at most; past it the oldest go unresolved.
pub(crate) const MAX_HELD: usize = 65_536;

/// Spans waiting for their parents, by parent.
#[derive(Debug, Default)]
pub(crate) struct HeldSpans {
    by_parent: HashMap<SpanId, Vec<(Instant, KernelSpan)>>,
    /// Parents in the order their first child arrived, for expiry.
    order: VecDeque<(Instant, SpanId)>,
    held: usize,
}

impl HeldSpans {
    /// Keeps `span` until `parent`'s fate is known.
    pub(crate) fn hold(&mut self, parent: SpanId, span: KernelSpan, now: Instant) {
        let waiting = self.by_parent.entry(parent).or_default();
        if waiting.is_empty() {
            self.order.push_back((now, parent));
        }
        waiting.push((now, span));
        self.held += 1;
    }

    /// `parent` stands: the spans waiting for it, to export as they are.
    pub(crate) fn parent_stands(&mut self, parent: SpanId) -> Vec<KernelSpan> {
        self.take(parent).into_iter().map(|(_, s)| s).collect()
    }

    /// `refused` was not made a span: its children go under `parent` (or
    /// become roots when it is `None`). Returns those to export now; with
    /// `parent_pending` they wait for `parent` instead.
    pub(crate) fn parent_refused(
        &mut self,
        refused: SpanId,
        parent: Option<SpanId>,
        parent_pending: bool,
        now: Instant,
    ) -> Vec<KernelSpan> {
        let children = self.take(refused);
        let mut ready = Vec::new();
        for (since, mut span) in children {
            span.set_parent_span_id(parent);
            match parent {
                Some(p) if parent_pending => {
                    // The wait counts from the first arrival.
                    let waiting = self.by_parent.entry(p).or_default();
                    if waiting.is_empty() {
                        self.order.push_back((now, p));
                    }
                    waiting.push((since, span));
                    self.held += 1;
                }
                _ => ready.push(span),
            }
        }
        ready
    }

    /// Spans that waited longer than `max_wait`, or beyond [`MAX_HELD`]:
    /// they go with the parent they have.
    pub(crate) fn expired(&mut self, now: Instant, max_wait: Duration) -> Vec<KernelSpan> {
        let mut out = Vec::new();
        while let Some(&(since, parent)) = self.order.front() {
            let stale = now.saturating_duration_since(since) >= max_wait;
            if !stale && self.held <= MAX_HELD {
                break;
            }
            self.order.pop_front();
            out.extend(self.take(parent).into_iter().map(|(_, s)| s));
        }
        out
    }

    /// Every waiting span (at shutdown).
    pub(crate) fn drain(&mut self) -> Vec<KernelSpan> {
        self.order.clear();
        self.held = 0;
        self.by_parent
            .drain()
            .flat_map(|(_, spans)| spans.into_iter().map(|(_, s)| s))
            .collect()
    }

    /// Spans waiting now.
    pub(crate) fn len(&self) -> usize {
        self.held
    }

    fn take(&mut self, parent: SpanId) -> Vec<(Instant, KernelSpan)> {
        // `order` keeps a stale entry for a parent taken here; `expired`
        // skips it (nothing waits under it any more).
        let spans = self.by_parent.remove(&parent).unwrap_or_default();
        self.held -= spans.len();
        spans
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotation::KernelSpanParts;
    use opentelemetry::trace::{SpanBuilder, Status, TraceId};
    use std::time::SystemTime;

    fn span(id: u64, parent: u64) -> KernelSpan {
        KernelSpan::new(KernelSpanParts {
            builder: SpanBuilder::from_name("f"),
            trace_id: TraceId::from(1u128),
            span_id: SpanId::from(id),
            parent_span_id: Some(SpanId::from(parent)),
            end_time: SystemTime::UNIX_EPOCH,
            status: Status::Unset,
        })
    }

    fn ids(spans: &[KernelSpan]) -> Vec<(u64, Option<u64>)> {
        spans
            .iter()
            .map(|s| {
                (
                    u64::from_be_bytes(s.span_id().to_bytes()),
                    s.parent_span_id().map(|p| u64::from_be_bytes(p.to_bytes())),
                )
            })
            .collect()
    }

    #[test]
    fn children_follow_their_parents_fate() {
        let t = Instant::now();
        let mut held = HeldSpans::default();
        // 10 (refused) > 20 (refused) > 30, 31; 11 > 40
        held.hold(SpanId::from(20), span(30, 20), t);
        held.hold(SpanId::from(20), span(31, 20), t);
        held.hold(SpanId::from(11), span(40, 11), t);
        assert_eq!(held.len(), 3);
        // 20 refused under 10, which may be refused too: they wait again.
        assert!(held
            .parent_refused(SpanId::from(20), Some(SpanId::from(10)), true, t)
            .is_empty());
        // 10 refused under the application span 5, which stands.
        let ready = held.parent_refused(SpanId::from(10), Some(SpanId::from(5)), false, t);
        assert_eq!(ids(&ready), [(30, Some(5)), (31, Some(5))]);
        // 11 stands: 40 goes as it is.
        assert_eq!(ids(&held.parent_stands(SpanId::from(11))), [(40, Some(11))]);
        assert_eq!(held.len(), 0);
        // A refused outermost call with no application span: roots.
        held.hold(SpanId::from(50), span(60, 50), t);
        assert_eq!(
            ids(&held.parent_refused(SpanId::from(50), None, false, t)),
            [(60, None)]
        );
        assert!(held.parent_stands(SpanId::from(99)).is_empty());
    }

    #[test]
    fn spans_whose_parent_never_ends_go_after_the_wait() {
        let t = Instant::now();
        let mut held = HeldSpans::default();
        held.hold(SpanId::from(1), span(2, 1), t);
        held.hold(SpanId::from(3), span(4, 3), t + Duration::from_secs(5));
        assert!(held
            .expired(t + Duration::from_secs(1), MAX_WAIT)
            .is_empty());
        let gone = held.expired(t + MAX_WAIT, MAX_WAIT);
        assert_eq!(ids(&gone), [(2, Some(1))]);
        assert_eq!(held.len(), 1);
        assert_eq!(ids(&held.drain()), [(4, Some(3))]);
        assert_eq!(held.len(), 0);
    }

    #[test]
    fn too_many_waiting_spans_go_oldest_first() {
        let t = Instant::now();
        let mut held = HeldSpans::default();
        for i in 0..=MAX_HELD as u64 {
            held.hold(SpanId::from(i + 1_000_000), span(i + 1, i + 1_000_000), t);
        }
        let gone = held.expired(t, MAX_WAIT);
        assert_eq!(ids(&gone), [(1, Some(1_000_000))]);
        assert_eq!(held.len(), MAX_HELD);
    }
}
