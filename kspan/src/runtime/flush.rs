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

/// The error `error` (of the provider's `force_flush` or
/// `shutdown_with_timeout`) stands for, in its processors' own words: the
/// provider folds its processors' results into the `Debug` of a list
/// (`errs: [Ok(()), Err(InternalFailure("..."))]`, `Shutdown errors:
/// [Timeout(5s)]`), which is noise to a reader. Unfolded, a single timeout
/// is a `Timeout` again and failures are one `InternalFailure` holding the
/// exporters' words; anything else is left as it came.
pub(super) fn unfold(error: OTelSdkError) -> OTelSdkError {
    let OTelSdkError::InternalFailure(message) = &error else {
        return error;
    };
    let Some(list) = ["errs: [", "Shutdown errors: ["]
        .iter()
        .find_map(|prefix| message.strip_prefix(prefix))
    else {
        return error;
    };
    let mut said = Vec::new();
    let mut timeouts = Vec::new();
    let mut rest = list;
    while let Some(at) = rest.find(['I', 'T', 'A']) {
        rest = &rest[at..];
        if let Some(quoted) = rest.strip_prefix("InternalFailure(\"") {
            let Some((words, after)) = debug_string(quoted) else {
                return error;
            };
            said.push(words);
            rest = after;
        } else if let Some(after) = rest.strip_prefix("Timeout(") {
            let Some((duration, after)) = after.split_once(')') else {
                return error;
            };
            timeouts.push(duration.to_owned());
            said.push(format!("timed out after {duration}"));
            rest = after;
        } else if let Some(after) = rest.strip_prefix("AlreadyShutdown") {
            said.push("already shut down".to_owned());
            rest = after;
        } else {
            rest = &rest[1..];
        }
    }
    match (said.len(), timeouts.len()) {
        (0, _) => error,
        (1, 1) => humantime_secs(&timeouts[0]).map_or_else(
            || OTelSdkError::InternalFailure(said.join("; ")),
            OTelSdkError::Timeout,
        ),
        _ => OTelSdkError::InternalFailure(said.join("; ")),
    }
}

/// A `Duration`'s `Debug` in whole or fractional seconds (`5s`, `1.5s`),
/// as the SDK's timeouts print; other units are left to the words.
fn humantime_secs(debug: &str) -> Option<Duration> {
    let secs: f64 = debug.strip_suffix('s')?.parse().ok()?;
    Duration::try_from_secs_f64(secs).ok()
}

/// The string a Rust `Debug` string literal holds, from just after its
/// opening quote: `(the string, what follows the closing quote)`.
fn debug_string(quoted: &str) -> Option<(String, &str)> {
    let mut words = String::new();
    let mut chars = quoted.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Some((words, &quoted[at + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => words.push('\n'),
                't' => words.push('\t'),
                'r' => words.push('\r'),
                '0' => words.push('\0'),
                'u' => {
                    // `\u{..}`
                    let (_, open) = chars.next()?;
                    if open != '{' {
                        return None;
                    }
                    let mut hex = String::new();
                    for (_, c) in chars.by_ref() {
                        if c == '}' {
                            break;
                        }
                        hex.push(c);
                    }
                    words.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                other => words.push(other),
            },
            c => words.push(c),
        }
    }
    None
}

/// Runs `work` on a thread of its own (named `name`) and waits for it at
/// most `timeout`, under any executor: `None` when it did not finish, or
/// the thread could not be started.
pub(super) async fn bounded<T: Send + 'static>(
    name: &str,
    timeout: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let (result_tx, result_rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let _quiet = crate::context::suppress();
            let _ = result_tx.send(work());
        })
        .and_then(|_| {
            std::thread::Builder::new()
                .name(format!("{name}-wait"))
                .spawn(move || {
                    let _ = done_tx.send(result_rx.recv_timeout(timeout).ok());
                })
        });
    spawned.ok()?;
    done_rx.await.ok().flatten()
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
        Ok(Ok(Err(e))) => Err(Error::Flush(unfold(e))),
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

    fn debug(e: OTelSdkError) -> String {
        format!("{e:?}")
    }

    #[test]
    fn the_providers_fold_is_unfolded_into_the_exporters_words() {
        // What README's service got with the collector down.
        let said =
            "TonicTracesClient export failed with gRPC code: Unavailable: \"quoted\" \\ \u{1b}";
        let folded = OTelSdkError::InternalFailure(format!(
            "errs: {:?}",
            [
                Ok(()),
                Err::<(), _>(OTelSdkError::InternalFailure(said.into()))
            ]
        ));
        assert_eq!(
            debug(unfold(folded)),
            debug(OTelSdkError::InternalFailure(said.into())),
            "the exporter's words, unescaped"
        );
        // The provider's shutdown, timed out.
        let shut = OTelSdkError::InternalFailure(format!(
            "Shutdown errors: {:?}",
            [OTelSdkError::Timeout(Duration::from_secs(5))]
        ));
        assert_eq!(
            debug(unfold(shut)),
            debug(OTelSdkError::Timeout(Duration::from_secs(5)))
        );
        // Several, in one line.
        let two = OTelSdkError::InternalFailure(format!(
            "errs: {:?}",
            [
                Err::<(), _>(OTelSdkError::AlreadyShutdown),
                Err(OTelSdkError::InternalFailure("refused".into())),
            ]
        ));
        assert_eq!(
            debug(unfold(two)),
            debug(OTelSdkError::InternalFailure(
                "already shut down; refused".into()
            ))
        );
        // Not a fold: as it came.
        let plain = || OTelSdkError::InternalFailure("the exporter hung up".into());
        assert_eq!(debug(unfold(plain())), debug(plain()));
        assert_eq!(
            debug(unfold(OTelSdkError::AlreadyShutdown)),
            debug(OTelSdkError::AlreadyShutdown)
        );
    }
}
