// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Flushing the application's tracer provider within kspan's own time
//! limit.
//!
//! The SDK's batch processor gives up waiting for its own flush after 5 s,
//! a limit no setting changes, and says so as an ordinary error while its
//! export goes on. A cut like that is not a finished flush: the flush is
//! asked again until it finishes or
//! [`KspanBuilder::shutdown_timeout`](crate::KspanBuilder::shutdown_timeout)
//! has passed, so that limit is the one that bounds
//! [`Kspan::shutdown`](crate::Kspan::shutdown).

use std::time::{Duration, Instant};

use opentelemetry_sdk::error::OTelSdkError;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::error::{Error, Result};

/// Whether `error` (of `SdkTracerProvider::force_flush`) is a processor's
/// own wait that ran out, not what the export returned. The provider folds
/// its processors' results into one message, `errs: [Err(Timeout(5s))]`,
/// where an exporter's words would be quoted inside another variant.
pub(super) fn is_sdk_cut(error: &OTelSdkError) -> bool {
    match error {
        OTelSdkError::Timeout(_) => true,
        OTelSdkError::InternalFailure(message) => folds_a_cut(message),
        _ => false,
    }
}

/// Whether the provider's folded `message` holds an `Err(Timeout(..))` of
/// its own, outside the quoted words of another error.
fn folds_a_cut(message: &str) -> bool {
    let (mut quoted, mut escaped) = (false, false);
    for (at, c) in message.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            'E' if !quoted && message[at..].starts_with("Err(Timeout(") => return true,
            _ => {}
        }
    }
    false
}

/// Flushes `provider` on a thread of its own (a flush blocks on the
/// exporter), asking again after each cut of the SDK's, for at most
/// `timeout` in all; works under any executor. `Ok` and [`Error::Flush`]:
/// the flush finished (every queued span reached the exporter and its export
/// returned); [`Error::FlushTimeout`]: it did not.
pub(super) async fn flush(provider: SdkTracerProvider, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let (result_tx, result_rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("kspan-flush".to_owned())
        .spawn(move || {
            let _quiet = crate::context::suppress();
            let result = loop {
                match provider.force_flush() {
                    Err(e) if is_sdk_cut(&e) && Instant::now() < deadline => continue,
                    result => break result,
                }
            };
            let _ = result_tx.send(result);
        })
        .and_then(|_| {
            std::thread::Builder::new()
                .name("kspan-flush-wait".to_owned())
                .spawn(move || {
                    let _quiet = crate::context::suppress();
                    let _ = done_tx.send(result_rx.recv_timeout(timeout));
                })
        });
    if let Err(e) = spawned {
        return Err(Error::Consumer(format!(
            "cannot start the flush thread: {e}"
        )));
    }
    match done_rx.await {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(e))) if is_sdk_cut(&e) => Err(Error::FlushTimeout(timeout)),
        Ok(Ok(Err(e))) => Err(Error::Flush(e)),
        Ok(Err(_)) | Err(_) => Err(Error::FlushTimeout(timeout)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_sdks_own_wait_is_a_cut() {
        assert!(is_sdk_cut(&OTelSdkError::Timeout(Duration::from_secs(5))));
        // What `SdkTracerProvider::force_flush` makes of a batch
        // processor's cut.
        let folded = format!(
            "errs: {:?}",
            [Err::<(), _>(OTelSdkError::Timeout(Duration::from_secs(5)))]
        );
        assert!(is_sdk_cut(&OTelSdkError::InternalFailure(folded)));
        // An export that failed, in the exporter's words.
        let failed = format!(
            "errs: {:?}",
            [Err::<(), _>(OTelSdkError::InternalFailure(
                "export error: Timeout expired (Err(Timeout(x)))".into()
            ))]
        );
        assert!(!is_sdk_cut(&OTelSdkError::InternalFailure(failed)));
        assert!(!is_sdk_cut(&OTelSdkError::AlreadyShutdown));
    }
}
