// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A handler that panics does so on every call: the process's panic hook
//! would print its message (and backtrace) thousands of times a second. The
//! first panic of each probe goes to the hook as any panic would; later ones
//! of the same probe are counted ([`Stats::handler_panics`](crate::Stats))
//! and not printed.
//!
//! Rust has one panic hook per process. kspan wraps the hook in place when
//! the first handler runs (once per process) and asks the wrapped hook to
//! stay silent only on a consumer thread while it runs a handler that has
//! panicked before; every other panic, and any hook the application sets
//! later, is untouched.

use std::cell::Cell;
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Set while a handler that panicked before runs on this thread.
    static SILENT: Cell<bool> = const { Cell::new(false) };
}

/// Wraps the process's panic hook, once.
fn wrap_hook() {
    static WRAPPED: Once = Once::new();
    WRAPPED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !SILENT.with(Cell::get) {
                previous(info);
            }
        }));
    });
}

/// The probes whose handler panicked, so far.
#[derive(Debug, Default)]
pub(super) struct HandlerPanics {
    seen: HashSet<u32>,
}

impl HandlerPanics {
    /// Runs `handler` for probe `probe`: `Err` with the panic's message
    /// when it panicked. Only the first panic of each probe reaches the
    /// panic hook; kspan logs it once.
    pub(super) fn run(
        &mut self,
        probe: u32,
        function: &str,
        handler: impl FnOnce(),
    ) -> Result<(), ()> {
        wrap_hook();
        let again = self.seen.contains(&probe);
        SILENT.with(|s| s.set(again));
        let ran = catch_unwind(AssertUnwindSafe(handler));
        SILENT.with(|s| s.set(false));
        let Err(panic) = ran else { return Ok(()) };
        if !again {
            self.seen.insert(probe);
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::warn!(
                function,
                message,
                "the handler of a kernel span panicked: its span is exported as it was, marked \
                 `kspan.handler.panicked`; further panics of this handler are counted in \
                 Stats::handler_panics and not printed"
            );
        }
        Err(())
    }
}
