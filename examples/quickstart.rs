// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Quickstart: every `vfs_read` this service makes becomes a span.
//!
//! `quickstart [PATH] [TIMES] [--buf BYTES]` reads PATH (default
//! `/etc/os-release`) TIMES times (default 3) inside an application span
//! `read_file`, with `vfs_read` traced in fexit mode capturing `count` and
//! the return value, and exports everything over OTLP/gRPC to
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (default `http://localhost:4317`).

use std::process::ExitCode;

use kspan_examples::{init_telemetry, read_file, BoxError, ReadArgs};

/// Every `vfs_read` call: the buffer size asked for and the bytes read.
#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn vfs_read(count: usize, ret: isize) {}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("quickstart: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), BoxError> {
    let args = ReadArgs::parse(std::env::args().skip(1))?;
    let provider = init_telemetry("quickstart")?;
    let kspan = kspan::Kspan::builder(&provider).probe(&vfs_read).start()?;

    let (calls, bytes) = {
        let span =
            tracing::info_span!("read_file", path = %args.path.display(), times = args.times);
        let _entered = span.enter();
        read_file(&args)?
    };

    let stats = kspan.shutdown().await?;
    println!(
        "quickstart: {} read {} times: {calls} read calls, {bytes} bytes; kspan exported {} spans, lost {}",
        args.path.display(),
        args.times,
        stats.spans_exported,
        stats.lost()
    );
    provider.shutdown()?;
    Ok(())
}
