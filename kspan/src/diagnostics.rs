// SPDX-License-Identifier: Apache-2.0 OR MIT
//! kspan's warnings, where the user sees them.
//!
//! kspan says what it does through `tracing` events (target `kspan::…`), so
//! that a service with a subscriber routes them like its own. A service on
//! the OpenTelemetry API alone often has none, and `tracing` then drops
//! every event: the warnings that say a span was lost, a probe left out or
//! a piece of the pipeline missing would never be shown. So when the
//! calling thread has no subscriber, `warn_user!` and `error_user!` hand the same
//! event to a small subscriber of kspan's own that writes it to stderr as
//! one line, `kspan: warning: <message> (<field>=<value>, …)`, once per
//! distinct line. `KSPAN_LOG=off` silences that fallback (a subscriber
//! filters its own events as it likes).
//!
//! Beside the stages: every stage may warn, and this module imports from
//! none of them.

use std::collections::HashSet;
use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::sync::{Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::{Interest, NoSubscriber};
use tracing::{Dispatch, Event, Level, Metadata, Subscriber};

/// A `tracing::warn!` that reaches stderr when no subscriber would see it.
macro_rules! warn_user {
    ($($event:tt)+) => {
        $crate::diagnostics::emit(|| ::tracing::warn!($($event)+))
    };
}

/// A `tracing::error!` that reaches stderr when no subscriber would see it.
macro_rules! error_user {
    ($($event:tt)+) => {
        $crate::diagnostics::emit(|| ::tracing::error!($($event)+))
    };
}

pub(crate) use {error_user, warn_user};

/// Runs `event` (a `tracing` macro) under the calling thread's subscriber,
/// or under kspan's stderr writer when it has none.
pub(crate) fn emit(event: impl FnOnce()) {
    if has_subscriber() {
        event();
    } else if let Some(stderr) = stderr_dispatch() {
        tracing::dispatcher::with_default(stderr, event);
    }
}

/// Whether the calling thread's events reach a subscriber (a global
/// default, or a scoped one).
pub(crate) fn has_subscriber() -> bool {
    !tracing::dispatcher::get_default(|d| d.is::<NoSubscriber>())
}

/// The fallback writer, unless `KSPAN_LOG=off`.
fn stderr_dispatch() -> Option<&'static Dispatch> {
    static DISPATCH: OnceLock<Option<Dispatch>> = OnceLock::new();
    DISPATCH
        .get_or_init(|| {
            let off = log_off(std::env::var_os("KSPAN_LOG").as_deref());
            (!off).then(|| Dispatch::new(StderrWarnings::default()))
        })
        .as_ref()
}

/// Whether `KSPAN_LOG`'s value (`None`: unset) turns the fallback writer
/// off: `off`, in any case.
pub(crate) fn log_off(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| v.eq_ignore_ascii_case("off"))
}

/// Writes kspan's own warnings and errors to stderr, each distinct line
/// once.
#[derive(Default)]
struct StderrWarnings {
    said: Mutex<HashSet<String>>,
}

impl StderrWarnings {
    /// Whether `line` is new (and now said).
    fn first_time(&self, line: &str) -> bool {
        self.said
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(line.to_owned())
    }
}

/// Whether an event is one of kspan's warnings or errors.
fn is_kspans(metadata: &Metadata<'_>) -> bool {
    *metadata.level() <= Level::WARN
        && (metadata.target() == "kspan" || metadata.target().starts_with("kspan::"))
}

/// One event as a line: `kspan: warning: message (key=value, …)`.
fn render(level: &Level, event: &Event<'_>) -> String {
    let mut fields = Fields::default();
    event.record(&mut fields);
    let kind = if *level == Level::ERROR {
        "error"
    } else {
        "warning"
    };
    let mut line = format!("kspan: {kind}: {}", fields.message);
    if !fields.rest.is_empty() {
        let _ = write!(line, " ({})", fields.rest.join(", "));
    }
    line
}

/// An event's message and its other fields, rendered.
#[derive(Default)]
struct Fields {
    message: String,
    rest: Vec<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.rest.push(format!("{}={value}", field.name()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.rest.push(format!("{}={value:?}", field.name()));
        }
    }
}

impl Subscriber for StderrWarnings {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if is_kspans(metadata) {
            Interest::sometimes()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        is_kspans(metadata)
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::WARN)
    }

    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let line = render(event.metadata().level(), event);
        if self.first_time(&line) {
            // Nowhere else to say it when stderr is gone.
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        }
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Collects what a subscriber of kspan's fallback would render.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<String>>>);

    impl Subscriber for Lines {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            is_kspans(metadata)
        }
        fn new_span(&self, _span: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _span: &Id, _values: &Record<'_>) {}
        fn record_follows_from(&self, _span: &Id, _follows: &Id) {}
        fn event(&self, event: &Event<'_>) {
            self.0
                .lock()
                .unwrap()
                .push(render(event.metadata().level(), event));
        }
        fn enter(&self, _span: &Id) {}
        fn exit(&self, _span: &Id) {}
    }

    #[test]
    fn an_event_is_one_line_with_its_fields() {
        let lines = Lines::default();
        tracing::subscriber::with_default(lines.clone(), || {
            tracing::warn!(function = "vfs_read", orphans = 3, "kspan left a probe out");
            tracing::error!("kspan's consumer died");
            tracing::info!("not a warning");
        });
        assert_eq!(
            *lines.0.lock().unwrap(),
            [
                "kspan: warning: kspan left a probe out (function=vfs_read, orphans=3)",
                "kspan: error: kspan's consumer died",
            ]
        );
    }

    #[test]
    fn a_subscriber_is_seen_where_it_is_set() {
        assert!(!has_subscriber(), "the test binary sets none globally");
        tracing::subscriber::with_default(Lines::default(), || assert!(has_subscriber()));
    }

    #[test]
    fn the_fallback_says_each_line_once_and_only_kspans_events() {
        let fallback = StderrWarnings::default();
        assert!(fallback.first_time("kspan: warning: a"));
        assert!(!fallback.first_time("kspan: warning: a"));
        assert!(fallback.first_time("kspan: warning: b"));
        let lines = Lines::default();
        tracing::subscriber::with_default(lines.clone(), || {
            emit(|| tracing::warn!("through the subscriber"));
        });
        assert_eq!(
            *lines.0.lock().unwrap(),
            ["kspan: warning: through the subscriber"]
        );
    }
}
