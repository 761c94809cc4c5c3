// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What every example service does the same way: kspan's OpenTelemetry
//! pipeline (`with_kspan`) exporting over OTLP/gRPC, configured by the
//! standard `OTEL_*` variables (`OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `OTEL_SERVICE_NAME`, ...), with `tracing` spans bridged into it; the
//! settled figures at the end ([`shut_down`]); and a small argument reader.
//! What only some examples share has a module of its own: [`noting`], the
//! exporter of those that print what reached it, [`hot`], for the
//! hot-function benchmarks, and [`io_limit`], a cgroup's read limit on a
//! disk for an example to throttle its own reads with.

pub mod hot;
pub mod io_limit;
pub mod noting;

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;

use kspan::TracerProviderBuilderExt as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanExporter};
use opentelemetry_sdk::Resource;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer as _;

/// The whole of an example service: telemetry up, kspan started with
/// `probes`, the file read inside an application span `read_file`, kspan and
/// the tracer provider shut down (drained and flushed), a one-line summary
/// on stdout with kspan's settled figures. Errors go to stderr, prefixed
/// with `program`, and make the exit status 1.
pub async fn run_reads(program: &str, probes: Probes<'_>) -> ExitCode {
    match try_run_reads(program, probes).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("{program}: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn try_run_reads(program: &str, probes: Probes<'_>) -> Result<(), BoxError> {
    let args = ReadArgs::parse(std::env::args().skip(1))?;
    let telemetry = init_telemetry("kspan-examples")?;
    let builder = kspan::Kspan::builder(&telemetry.provider).pipeline(&telemetry.pipeline);
    let builder = match probes {
        Probes::List(list) => builder.probes(list.iter().copied()),
        Probes::All => builder.all_probes(),
    };
    let kspan = builder.start()?;

    let (calls, bytes) = {
        let span =
            tracing::info_span!("read_file", path = %args.path.display(), times = args.times);
        let _entered = span.enter();
        read_file(&args)?
    };

    let settled = telemetry.shut_down(kspan).await?;
    println!(
        "{program}: {} read {} times: {calls} read calls, {bytes} bytes; kspan: {}",
        args.path.display(),
        args.times,
        settled.stats
    );
    settled.result()
}

/// kspan's figures once kspan and the tracer provider are shut down, and
/// the first failure of the two shutdowns.
#[derive(Debug)]
pub struct Settled {
    /// Made final by the pipeline's ledger
    /// ([`kspan::ExportLedger::final_figures`]): every span handed to the
    /// pipeline is acknowledged by the collector or counted lost under its
    /// reason (with the collector down, `export_failed`); its `Display` is
    /// what the examples print.
    pub stats: kspan::Stats,
    /// The failure to report after the figures: kspan's flush (an export
    /// failed, or did not finish in time), else the provider's shutdown.
    pub failure: Option<BoxError>,
}

impl Settled {
    /// `Err` with the failure, if there was one.
    pub fn result(self) -> Result<(), BoxError> {
        self.failure.map_or(Ok(()), Err)
    }
}

/// Shuts `kspan` down (detached, drained, the provider flushed), then
/// `provider`, and returns kspan's figures made final by `pipeline`'s
/// ledger, read after the provider's own shutdown: nothing is left "not
/// known yet", and what the collector did not take shows as lost. A failed
/// flush still has figures (`kspan::Error::Shutdown`); it is returned as
/// [`Settled::failure`], for the caller to report after them.
pub async fn shut_down(
    kspan: kspan::Kspan,
    provider: &SdkTracerProvider,
    pipeline: &kspan::Pipeline,
) -> Result<Settled, BoxError> {
    let (stats, failure): (kspan::Stats, Option<BoxError>) = match kspan.shutdown().await {
        Ok(stats) => (stats, None),
        Err(kspan::Error::Shutdown { stats, source }) => (*stats, Some(source)),
        Err(e) => {
            let _ = provider.shutdown();
            return Err(e.into());
        }
    };
    let shut = provider.shutdown();
    let stats = pipeline.ledger().final_figures(&stats);
    let failure = failure.or_else(|| shut.err().map(Into::into));
    Ok(Settled { stats, failure })
}

/// Which probes an example starts.
#[derive(Debug, Clone, Copy)]
pub enum Probes<'a> {
    /// These.
    List(&'a [&'static kspan::Probe]),
    /// Every `#[kernel_span]` of the program.
    All,
}

/// A boxed error for `main`.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// An example's telemetry: the tracer provider, built with kspan's
/// pipeline (`.with_kspan(&pipeline, exporter)`), and that pipeline, for
/// `Kspan::builder(&provider).pipeline(&pipeline)` and the settled figures
/// at the end ([`Telemetry::shut_down`]).
#[derive(Debug)]
pub struct Telemetry {
    /// Handed to kspan, shut down at exit.
    pub provider: SdkTracerProvider,
    /// What kspan is given with `.pipeline(..)`.
    pub pipeline: kspan::Pipeline,
}

impl Telemetry {
    /// [`shut_down`] with this provider and pipeline.
    pub async fn shut_down(&self, kspan: kspan::Kspan) -> Result<Settled, BoxError> {
        shut_down(kspan, &self.provider, &self.pipeline).await
    }
}

/// Sets up tracing and OpenTelemetry, exporting over OTLP/gRPC through
/// kspan's pipeline.
pub fn init_telemetry(scope: &'static str) -> Result<Telemetry, BoxError> {
    init_telemetry_with(scope, kspan::Pipeline::new(), otlp_exporter()?)
}

/// The OTLP/gRPC span exporter, configured by the `OTEL_*` variables.
pub fn otlp_exporter() -> Result<opentelemetry_otlp::SpanExporter, BoxError> {
    Ok(opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()?)
}

/// [`init_telemetry`] with `pipeline` (its batch settings or context
/// publisher) and `exporter`: the OTLP one wrapped by one of the
/// example's own, say.
pub fn init_telemetry_with(
    scope: &'static str,
    pipeline: kspan::Pipeline,
    exporter: impl SpanExporter + 'static,
) -> Result<Telemetry, BoxError> {
    let provider = SdkTracerProvider::builder()
        // The default detectors read OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
        .with_resource(Resource::builder().build())
        // Kernel span ids, the process context's publisher, the kernel's
        // sums, and the batch processor over an exporter whose outcome
        // kspan's figures follow.
        .with_kspan(&pipeline, exporter)
        .build();
    // The exporter's own libraries have spans too (h2's connection span at
    // debug level): made OpenTelemetry spans, the exporter's sends would
    // become their children and be exported by more sends.
    let otel_layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(scope))
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            !is_exporter_internal(meta.target())
        }));
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with(otel_layer)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .try_init()?;
    // kspan's start registers its context observer, which publishes each
    // thread's current span (OTEP 4947), so that kernel spans become
    // children of the application's spans.
    Ok(Telemetry { provider, pipeline })
}

/// A meter provider exporting over OTLP/gRPC (the same `OTEL_*`
/// variables), read every `OTEL_METRIC_EXPORT_INTERVAL` (60 s by default)
/// and at shutdown.
pub fn init_metrics() -> Result<SdkMeterProvider, BoxError> {
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_tonic()
        .build()?;
    Ok(SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter).build())
        .with_resource(Resource::builder().build())
        .build())
}

/// Whether `target` belongs to the OTLP exporter's stack (gRPC, HTTP/2,
/// OpenTelemetry itself).
fn is_exporter_internal(target: &str) -> bool {
    ["h2", "hyper", "tonic", "tower", "opentelemetry"]
        .iter()
        .any(|crate_name| {
            target
                .strip_prefix(crate_name)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['_', ':']))
        })
}

/// The kernel's id of the calling thread (what kspan's `kspan.tid` holds).
pub fn gettid() -> i64 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .unwrap_or(-1)
}

/// `[PATH] [TIMES] [--buf BYTES]`, with defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadArgs {
    /// The file to read.
    pub path: PathBuf,
    /// How many times to read it.
    pub times: u32,
    /// The read buffer size (the `count` of every read).
    pub buf: usize,
}

impl ReadArgs {
    /// Parses the arguments after the program name.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let mut positional = Vec::new();
        let mut buf = 4096;
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            if arg == "--buf" {
                let v = args.next().ok_or("--buf needs a size in bytes")?;
                buf = v
                    .parse()
                    .ok()
                    .filter(|b| *b > 0)
                    .ok_or(format!("--buf: `{v}` is not a positive number of bytes"))?;
            } else if arg.starts_with("--") {
                return Err(format!(
                    "unknown option `{arg}`; usage: [PATH] [TIMES] [--buf BYTES]"
                ));
            } else {
                positional.push(arg);
            }
        }
        if positional.len() > 2 {
            return Err("too many arguments; usage: [PATH] [TIMES] [--buf BYTES]".into());
        }
        let path = positional
            .first()
            .map_or_else(|| PathBuf::from("/etc/os-release"), PathBuf::from);
        let times = match positional.get(1) {
            Some(t) => t
                .parse()
                .map_err(|_| format!("TIMES: `{t}` is not a whole number"))?,
            None => 3,
        };
        Ok(ReadArgs { path, times, buf })
    }
}

/// Reads `path` to its end `times` times with a `buf`-byte buffer; returns
/// the number of `read` calls made and the bytes read.
pub fn read_file(args: &ReadArgs) -> std::io::Result<(u64, u64)> {
    use std::io::Read;
    let mut buffer = vec![0u8; args.buf];
    let (mut calls, mut bytes) = (0, 0);
    for _ in 0..args.times {
        let mut file = std::fs::File::open(&args.path)?;
        loop {
            let n = file.read(&mut buffer)?;
            calls += 1;
            bytes += n as u64;
            if n == 0 {
                break;
            }
        }
    }
    Ok((calls, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &[&str]) -> Result<ReadArgs, String> {
        ReadArgs::parse(s.iter().map(|s| s.to_string()))
    }

    #[test]
    fn exporter_targets() {
        for t in [
            "h2",
            "h2::proto",
            "hyper_util::client",
            "tonic",
            "opentelemetry_sdk",
        ] {
            assert!(is_exporter_internal(t), "{t}");
        }
        for t in ["file_service", "kspan_examples", "h2o", "towers"] {
            assert!(!is_exporter_internal(t), "{t}");
        }
    }

    #[test]
    fn defaults_and_options() {
        assert_eq!(
            parse(&[]).unwrap(),
            ReadArgs {
                path: "/etc/os-release".into(),
                times: 3,
                buf: 4096
            }
        );
        assert_eq!(
            parse(&["/tmp/x", "5", "--buf", "100"]).unwrap(),
            ReadArgs {
                path: "/tmp/x".into(),
                times: 5,
                buf: 100
            }
        );
        assert!(parse(&["a", "b"]).unwrap_err().contains("TIMES"));
        assert!(parse(&["--buf", "0"]).unwrap_err().contains("--buf"));
        assert!(parse(&["--nope"]).unwrap_err().contains("unknown option"));
    }
}
