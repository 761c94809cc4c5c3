// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A span processor that holds kspan's consumer, so that a test can fill
//! the ring buffer as if the consumer had stalled.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};

/// Holds kspan's consumer inside the first kernel span it hands to the
/// pipeline while closed (the application's own spans pass: their ends run
/// on the application's threads).
#[derive(Debug, Default)]
pub struct ConsumerGate {
    /// (closed, holding)
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl ConsumerGate {
    /// Closes or opens the gate; opening lets a held consumer go.
    pub fn set_closed(&self, closed: bool) {
        self.state.lock().unwrap().0 = closed;
        self.changed.notify_all();
    }

    /// Waits (up to 10 s) until the consumer is held at the gate.
    pub fn wait_holding(&self) {
        let state = self.state.lock().unwrap();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, Duration::from_secs(10), |s| !s.1)
            .unwrap();
        assert!(state.1, "the consumer reached the gate");
    }
}

/// The processor of a [`ConsumerGate`], first among the provider's.
#[derive(Debug)]
pub struct GateProcessor(pub std::sync::Arc<ConsumerGate>);

impl SpanProcessor for GateProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if span.instrumentation_scope.name() != "kspan" {
            return;
        }
        let mut state = self.0.state.lock().unwrap();
        if state.0 {
            state.1 = true;
            self.0.changed.notify_all();
            while state.0 {
                state = self.0.changed.wait(state).unwrap();
            }
            state.1 = false;
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}
