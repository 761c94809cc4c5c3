// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A hot kernel function at production rates: `hot_reads N M` reads
//! `/dev/zero` N times with a 1-byte buffer and M times with a 65,536-byte
//! buffer, inside one application span `hot_loop`.
//!
//! `vfs_read` is traced with a filter in the kernel: only the calls asking
//! for 64 KiB or more become spans (M of them, children of `hot_loop`); the
//! N small ones cost a few instructions each in the kernel and add up on
//! `hot_loop` itself (`sum`): `kernel.vfs_read.calls`,
//! `kernel.vfs_read.duration_ns`, `kernel.vfs_read.errors`. Every call, kept
//! or not, is counted in the kernel's latency histogram, published as the
//! OpenTelemetry histogram `kernel.vfs_read.duration` (ns). Traces and
//! metrics go over OTLP/gRPC to `OTEL_EXPORTER_OTLP_ENDPOINT` (the standard
//! `OTEL_*` variables apply).

use std::io::Read;
use std::process::ExitCode;

/// `vfs_read`: spans for the large reads only, the others summed onto the
/// application span; every call in the latency histogram.
#[kspan::kernel_span("vfs_read", filter = "count >= 65536", sum, histogram)]
fn vfs_read(count: usize, ret: isize) {}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("hot_reads: {err}");
            ExitCode::FAILURE
        }
    }
}

/// `N M` from the command line.
fn counts() -> Result<(u64, u64), String> {
    let usage = "usage: hot_reads N M (N 1-byte reads, M 65536-byte reads)";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [n, m] = args.as_slice() else {
        return Err(usage.to_owned());
    };
    let parse = |s: &str| {
        s.parse::<u64>()
            .map_err(|_| format!("`{s}` is not a whole number; {usage}"))
    };
    Ok((parse(n)?, parse(m)?))
}

async fn run() -> Result<(), kspan_examples::BoxError> {
    let (small, large) = counts()?;
    let telemetry = kspan_examples::init_telemetry("kspan-examples")?;
    let meters = kspan_examples::init_metrics()?;
    let kspan = kspan::Kspan::builder(&telemetry.provider)
        .pipeline(&telemetry.pipeline)
        .probe(&vfs_read)
        .meter_provider(&meters)
        .start()?;

    {
        let span = tracing::info_span!("hot_loop", small, large);
        let _entered = span.enter();
        let mut zero = std::fs::File::open("/dev/zero")?;
        let mut byte = [0u8; 1];
        let mut block = vec![0u8; 65536];
        for _ in 0..small {
            zero.read_exact(&mut byte)?;
        }
        for _ in 0..large {
            zero.read_exact(&mut block)?;
        }
    }

    let filtered = kspan
        .probe_stats()?
        .iter()
        .find(|p| p.function == "vfs_read")
        .map_or(0, |p| p.filtered);
    // kspan first: its shutdown records the histogram's last calls, which
    // the meter provider's shutdown then exports.
    let settled = telemetry.shut_down(kspan).await?;
    println!(
        "hot_reads: {small} small and {large} large reads; vfs_read calls filtered in the \
         kernel {filtered}; kspan: {}",
        settled.stats
    );
    let metered = meters.shutdown();
    settled.result()?;
    metered?;
    Ok(())
}
