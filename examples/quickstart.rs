// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Quickstart: every `vfs_read` this service makes becomes a span.
//!
//! `quickstart [PATH] [TIMES] [--buf BYTES]` reads PATH (default
//! `/etc/os-release`) TIMES times (default 3) inside an application span
//! `read_file`, with `vfs_read` traced (mode `auto`: the best mechanism this kernel offers) capturing `count` and
//! the return value, and exports everything over OTLP/gRPC to
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (default `http://localhost:4317`).
//! The service itself is `kspan_examples::run_reads`
//! (`examples/common/lib.rs`): telemetry, `Kspan::builder(..).start()`, the
//! reads, `shutdown().await`.

use std::process::ExitCode;

/// Every `vfs_read` call: the buffer size asked for and the bytes read.
#[kspan::kernel_span("vfs_read")]
fn vfs_read(count: usize, ret: isize) {}

#[tokio::main]
async fn main() -> ExitCode {
    kspan_examples::run_reads("quickstart", kspan_examples::Probes::List(&[&vfs_read])).await
}
