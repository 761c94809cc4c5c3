// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A span processor that can hold whoever ends a span: `consumer_kspan`
//! closes it to keep kspan's consumer still while the ring buffer fills.
//! `consumer_bare spans` puts the same processor, never closed, first in
//! its pipeline, so that both sides pay the same (the SDK clones a span's
//! data for every processor but the last).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};

/// Holds whoever ends a span while it is closed.
#[derive(Debug, Default)]
pub struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
    /// Spans that reached the gate.
    pub ended: AtomicU64,
}

#[derive(Debug, Default)]
struct GateState {
    closed: bool,
    holding: bool,
}

impl Gate {
    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// From now on, whoever ends a span waits in it until [`Gate::open`].
    pub fn close(&self) {
        self.lock().closed = true;
    }

    /// Waits until the gate holds someone (at most `limit`).
    pub fn wait_holding(&self, limit: Duration) -> bool {
        let state = self.lock();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, limit, |s| !s.holding)
            .unwrap_or_else(|p| p.into_inner());
        state.holding
    }

    /// Lets whoever waits go on, and the next ones through.
    pub fn open(&self) {
        self.lock().closed = false;
        self.changed.notify_all();
    }
}

/// The span processor of a [`Gate`]: counts every span that ends, and
/// holds its caller while the gate is closed.
#[derive(Debug)]
pub struct GateProcessor(pub Arc<Gate>);

impl SpanProcessor for GateProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, _span: SpanData) {
        self.0.ended.fetch_add(1, Ordering::Relaxed);
        let mut state = self.0.lock();
        if state.closed {
            state.holding = true;
            self.0.changed.notify_all();
            while state.closed {
                state = self
                    .0
                    .changed
                    .wait(state)
                    .unwrap_or_else(|p| p.into_inner());
            }
            state.holding = false;
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        self.0.open();
        Ok(())
    }
}
