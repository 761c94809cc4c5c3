//! kspan's warnings as a test reads them: a subscriber of this process
//! that keeps every WARN event, its message and its fields.

use std::sync::Mutex;

use tracing_subscriber::layer::SubscriberExt as _;

/// Every warning logged in this process since [`capture`], as
/// `message; field=value; ...`.
static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Warnings;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Said(String, Vec<String>);
        impl tracing::field::Visit for Said {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "message" {
                    self.0 = value.to_string();
                } else {
                    self.1.push(format!("{}={value}", field.name()));
                }
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                } else {
                    self.1.push(format!("{}={value:?}", field.name()));
                }
            }
        }
        if *event.metadata().level() == tracing::Level::WARN {
            let mut said = Said(String::new(), Vec::new());
            event.record(&mut said);
            let mut line = said.0;
            for field in said.1 {
                line += "; ";
                line += &field;
            }
            WARNINGS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(line);
        }
    }
}

/// Makes this process's subscriber one that keeps every warning, before
/// any other (a process has one global subscriber); again, it does
/// nothing.
pub fn capture() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Warnings))
            .expect("the first subscriber of this process");
    });
}

/// The warnings so far whose message or fields contain `text`.
pub fn said(text: &str) -> Vec<String> {
    WARNINGS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|w| w.contains(text))
        .cloned()
        .collect()
}
