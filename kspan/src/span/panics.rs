// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A handler's panic is caught, counted
//! ([`Stats::handler_panics`](crate::Stats)) and its span exported, marked.
//! It does not reach the process's panic hook: a handler that panics does
//! so on every call, which the hook would print thousands of times a
//! second, and with `RUST_BACKTRACE` set std's hook captures a backtrace
//! and symbolizes it, which the first time parses the binary's debug
//! information and keeps it for the life of the process (a debug test
//! binary: 88 MB of RSS and 83 ms on the consumer thread, while records
//! wait in the ring buffer). kspan logs the first panic of each probe
//! instead, with its message and where it panicked.
//!
//! Rust has one panic hook per process. kspan wraps the hook in place when
//! the first handler runs (once per process); the wrapper passes a panic
//! on to the wrapped hook unless it happens on a consumer thread while a
//! handler runs, where it only notes, for a probe's first panic, the
//! location. Every other panic, and any hook the application sets later,
//! is untouched.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, Once};

/// What the hook does with a panic on this thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InHandler {
    /// No handler runs: the wrapped hook's.
    No,
    /// A handler that has not panicked before runs: note the location.
    First,
    /// A handler that has panicked before runs: nothing.
    Again,
}

thread_local! {
    static IN_HANDLER: Cell<InHandler> = const { Cell::new(InHandler::No) };
    /// Where the handler noted as [`InHandler::First`] panicked last.
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Wraps the process's panic hook, once.
fn wrap_hook() {
    static WRAPPED: Once = Once::new();
    WRAPPED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            match IN_HANDLER.try_with(Cell::get).unwrap_or(InHandler::No) {
                InHandler::No => previous(info),
                InHandler::First => {
                    let at = info.location().map(ToString::to_string);
                    let _ = LOCATION.try_with(|l| *l.borrow_mut() = at);
                }
                InHandler::Again => {}
            }
        }));
    });
}

/// The probes whose handler panicked, so far; shared by the span workers
/// of a runtime, so that each probe's first panic is logged once.
#[derive(Debug, Default, Clone)]
pub(super) struct HandlerPanics {
    seen: Arc<Mutex<HashSet<u32>>>,
}

impl HandlerPanics {
    /// Runs `handler` for probe `probe`: `Err` when it panicked. The first
    /// panic of each probe is logged, with its message and location; none
    /// reaches the panic hook.
    pub(super) fn run(&self, probe: u32, function: &str, handler: impl FnOnce()) -> Result<(), ()> {
        wrap_hook();
        let again = self.seen().contains(&probe);
        IN_HANDLER.with(|s| {
            s.set(if again {
                InHandler::Again
            } else {
                InHandler::First
            })
        });
        let ran = catch_unwind(AssertUnwindSafe(handler));
        IN_HANDLER.with(|s| s.set(InHandler::No));
        let Err(panic) = ran else { return Ok(()) };
        // Another worker may have logged this probe's first panic meanwhile.
        if !again && self.seen().insert(probe) {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let location = LOCATION.with(|l| l.borrow_mut().take()).unwrap_or_default();
            crate::diagnostics::warn_user!(
                function,
                panic = message,
                location,
                "the handler of a kernel span panicked: its span is exported as it was, marked \
                 `kspan.handler.panicked`; further panics of this handler are counted in \
                 Stats::handler_panics and not logged"
            );
        }
        Err(())
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, HashSet<u32>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `probe`'s handler has panicked.
    #[cfg(test)]
    pub(super) fn has_panicked(&self, probe: u32) -> bool {
        self.seen().contains(&probe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt as _;

    /// The fields of every event, as `name=value`.
    #[derive(Clone, Default)]
    struct Events(Arc<Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            struct Fields(String);
            impl tracing::field::Visit for Fields {
                fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                    self.0 += &format!("{}={v:?} ", f.name());
                }
            }
            let mut fields = Fields(String::new());
            event.record(&mut fields);
            self.0.lock().unwrap().push(fields.0);
        }
    }

    #[test]
    fn a_probe_s_first_panic_is_logged_with_where_it_happened_and_no_more() {
        let events = Events::default();
        let subscriber = tracing_subscriber::registry().with(events.clone());
        tracing::subscriber::with_default(subscriber, || {
            let panics = HandlerPanics::default();
            assert_eq!(panics.run(3, "vfs_read", || {}), Ok(()));
            assert!(!panics.has_panicked(3));
            let line = line!() + 1;
            assert_eq!(panics.run(3, "vfs_read", || panic!("first")), Err(()));
            assert!(panics.has_panicked(3));
            assert_eq!(panics.run(3, "vfs_read", || panic!("again")), Err(()));
            assert_eq!(
                panics.run(4, "vfs_write", || panic!("another probe")),
                Err(())
            );
            let logged = events.0.lock().unwrap().clone();
            assert_eq!(logged.len(), 2, "{logged:?}");
            assert!(logged[0].contains("function=\"vfs_read\""), "{logged:?}");
            assert!(logged[0].contains("panic=\"first\""), "{logged:?}");
            let at = format!("location=\"{}:{line}:", file!());
            assert!(logged[0].contains(&at), "{logged:?} (expected {at})");
            assert!(logged[1].contains("panic=\"another probe\""), "{logged:?}");
        });
        // Nothing is kept per panic, and the thread is out of the handler.
        assert_eq!(LOCATION.with(|l| l.borrow().clone()), None);
        assert_eq!(IN_HANDLER.with(Cell::get), InHandler::No);
    }

    #[test]
    fn a_probe_s_first_panic_is_logged_once_whichever_worker_sees_it() {
        let events = Events::default();
        let subscriber = tracing_subscriber::registry().with(events.clone());
        tracing::subscriber::with_default(subscriber, || {
            let one = HandlerPanics::default();
            let other = one.clone();
            assert_eq!(one.run(3, "vfs_read", || panic!("first")), Err(()));
            assert_eq!(
                other.run(3, "vfs_read", || panic!("on another worker")),
                Err(())
            );
            let logged = events.0.lock().unwrap().clone();
            assert_eq!(logged.len(), 1, "{logged:?}");
            assert!(logged[0].contains("panic=\"first\""), "{logged:?}");
        });
    }
}
