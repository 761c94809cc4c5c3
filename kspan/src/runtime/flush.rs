// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Flushing the application's tracer provider within a time limit.

use opentelemetry_sdk::trace::SdkTracerProvider;
use std::time::Duration;

use crate::error::{Error, Result};

/// Flushes `provider` on a thread of its own (a flush blocks on the
/// exporter), waiting at most `timeout`; works under any executor.
pub(super) async fn flush(provider: SdkTracerProvider, timeout: Duration) -> Result<()> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let (result_tx, result_rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("kspan-flush".to_owned())
        .spawn(move || {
            let _quiet = crate::context::suppress();
            let _ = result_tx.send(provider.force_flush());
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
        Ok(Ok(flushed)) => flushed.map_err(Error::Flush),
        Ok(Err(_)) | Err(_) => Err(Error::FlushTimeout(timeout)),
    }
}
