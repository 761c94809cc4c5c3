// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Configuring kspan: the builder and its settings ([`KspanBuilder::start`]'s
//! stages are in `start`).

use std::path::PathBuf;
use std::time::Duration;

use opentelemetry::metrics::{Meter, MeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::annotation::{Mechanism, Probe};
use crate::bpf::config::DEFAULT_RING_BUFFER_BYTES;
use crate::bpf::Orphans;
use crate::context::obi::ObiTracesMap;
use crate::export::ExportLedger;
use crate::kernel::KERNEL_BTF;
use crate::pipeline::Pipeline;
use crate::sched::SchedulerAccount;
use crate::span::SCOPE_NAME;
use crate::sums::KernelSums;

mod checks;
mod kernel;
mod load;
mod orphans;
mod record;

pub use record::default_span_workers;
mod start;

/// [`KspanBuilder::shutdown_timeout`]'s default: with the provider's own
/// shutdown inside it, a stopping service's exporter is cut well before
/// Kubernetes' default 30 s grace ends in SIGKILL.
const DEFAULT_SHUTDOWN_BUDGET: Duration = Duration::from_secs(20);

/// Configures and starts kspan.
#[derive(Debug)]
pub struct KspanBuilder {
    provider: SdkTracerProvider,
    probes: Vec<&'static Probe>,
    btf_path: PathBuf,
    all_processes: bool,
    disabled: Vec<Mechanism>,
    orphans: Orphans,
    keep_unsampled: bool,
    thread_context: bool,
    context_observer: bool,
    process_context: bool,
    shutdown_timeout: Duration,
    ring_buffer_bytes: u32,
    span_workers: Option<usize>,
    ledger: Option<ExportLedger>,
    meter: Option<Meter>,
    sums: Option<KernelSums>,
    scheduler: Option<SchedulerAccount>,
    obi: Option<ObiTracesMap>,
    pipeline: Option<Pipeline>,
}

impl KspanBuilder {
    /// The defaults [`Kspan::builder`] documents.
    pub(super) fn new(provider: &SdkTracerProvider) -> Self {
        KspanBuilder {
            provider: provider.clone(),
            probes: Vec::new(),
            btf_path: PathBuf::from(KERNEL_BTF),
            all_processes: false,
            disabled: Vec::new(),
            orphans: Orphans::default(),
            keep_unsampled: false,
            thread_context: true,
            context_observer: true,
            process_context: true,
            shutdown_timeout: DEFAULT_SHUTDOWN_BUDGET,
            ring_buffer_bytes: DEFAULT_RING_BUFFER_BYTES,
            span_workers: None,
            ledger: None,
            meter: None,
            sums: None,
            scheduler: None,
            obi: None,
            pipeline: None,
        }
    }

    /// Adds a probe (a `static` made by `#[kernel_span]`).
    pub fn probe(mut self, probe: &'static Probe) -> Self {
        self.probes.push(probe);
        self
    }

    /// Adds several probes.
    pub fn probes(mut self, probes: impl IntoIterator<Item = &'static Probe>) -> Self {
        self.probes.extend(probes);
        self
    }

    /// Adds every `#[kernel_span]` probe linked into the program, in no
    /// particular order (two on the same kernel function are refused at
    /// start, naming both).
    pub fn all_probes(mut self) -> Self {
        self.probes
            .extend(crate::annotation::PROBES.iter().copied());
        self
    }

    /// Never uses `mechanism`: `auto` skips it (saying so in the attach
    /// plan), and a probe whose mode needs it fails to start.
    pub fn disable(mut self, mechanism: Mechanism) -> Self {
        self.disabled.push(mechanism);
        self
    }

    /// Reads BTF from `path` instead of [`KERNEL_BTF`].
    pub fn btf_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.btf_path = path.into();
        self
    }

    /// What happens to kernel calls made with no application span active on
    /// their thread: [`Orphans::Drop`] (the default, counted; see
    /// [`Orphans`] for why) or [`Orphans::NewTrace`]. Calls of other
    /// processes ([`Self::trace_all_processes`]) have no application span
    /// kspan can read: they always start traces of their own.
    pub fn orphans(mut self, orphans: Orphans) -> Self {
        self.orphans = orphans;
        self
    }

    /// Records kernel calls made under an application span that is not
    /// sampled too (the default drops them in the kernel, counted in
    /// [`Stats::unsampled`](crate::Stats::unsampled)).
    pub fn keep_unsampled(mut self, keep: bool) -> Self {
        self.keep_unsampled = keep;
        self
    }

    /// Whether kernel spans are parented under the application span active
    /// on their thread (OTEP 4947 thread context, published by kspan's
    /// context observer, see [`Self::context_observer`]); on by default.
    /// Off: every outermost call starts a trace of its own (none is an
    /// orphan, whatever [`Self::orphans`] says).
    pub fn thread_context(mut self, on: bool) -> Self {
        self.thread_context = on;
        self
    }

    /// Whether [`Self::start`] registers kspan's OpenTelemetry context
    /// observer ([`crate::context::register_observer`]), which publishes
    /// every context switch; on by default, and `start` fails when the
    /// process already has another observer. Off: the thread context comes
    /// only from the `tracing` layers of [`crate::context`].
    pub fn context_observer(mut self, on: bool) -> Self {
        self.context_observer = on;
        self
    }

    /// Whether [`Self::start`] publishes the OTEP 4719 process context
    /// ([`crate::context::publish_process_context`]): the service's
    /// resource and the `threadlocal.*` attributes that tell OTEP 4947
    /// readers (the OpenTelemetry eBPF profiler) to read the thread
    /// records; on by default (with [`Self::thread_context`]). `start`
    /// fails when the process already has one that kspan did not publish
    /// (another SDK's), since a process has one: turn this off then, and
    /// add the `threadlocal.*` attributes to that one.
    pub fn process_context(mut self, on: bool) -> Self {
        self.process_context = on;
        self
    }

    /// Traces calls made by every process, not only this one (the default is
    /// this process only).
    pub fn trace_all_processes(mut self, all: bool) -> Self {
        self.all_processes = all;
        self
    }

    /// Bytes of the ring buffer that carries finished spans to the consumer
    /// (a power of two of at least a page; 4 MiB by default, see
    /// [`DEFAULT_RING_BUFFER_BYTES`]). Records that find it full are
    /// dropped and counted in [`Stats::dropped_ring_buffer_full`](crate::Stats::dropped_ring_buffer_full).
    ///
    /// What it costs, from [`Self::start`] until the runtime is gone: the
    /// kernel allocates `bytes` at once (kernel memory, never swapped,
    /// charged to the process's memory cgroup), and the process's RSS grows
    /// by twice `bytes`. The kernel maps the data pages twice in a row, so
    /// that a record wrapping past the end reads as one piece, and the
    /// consumer's mapping of both copies is filled in when it is made; RSS
    /// counts each mapping of a page, the memory is there once. Measured on
    /// the host (6.18): 1 GiB gave 1.0 GiB of kernel memory and 2.0 GiB of
    /// RSS (256 MiB: 258 MiB and 514 MiB). The OOM killer scores by RSS,
    /// so it sees the double.
    pub fn ring_buffer_size(mut self, bytes: u32) -> Self {
        self.ring_buffer_bytes = bytes;
        self
    }

    /// At most `threads` threads turn records into spans (at least 1; by
    /// default the CPUs this process may run on, see
    /// [`default_span_workers`]). With one,
    /// the thread that reads the ring buffer builds every span; with more,
    /// it shares the records out by the thread that made them (a thread's
    /// spans stay on one worker, in order), and the workers build spans
    /// and hand them to the application's processors side by side.
    ///
    /// More workers keep up with more calls a second, as long as there are
    /// CPUs for them: each is a thread competing with the service's own.
    /// Fewer leave the service more CPU and, past what they keep up with,
    /// have the kernel decline calls (counted in
    /// [`Stats::dropped_ring_buffer_full`](crate::Stats::dropped_ring_buffer_full)).
    /// The guide's performance page has the measured rates.
    #[doc(alias = "consumer_threads")]
    pub fn span_workers(mut self, threads: usize) -> Self {
        self.span_workers = Some(threads);
        self
    }

    /// The shutdown's budget (20 s by default): how long
    /// [`Kspan::shutdown`](crate::Kspan::shutdown) takes at most to detach,
    /// drain and flush the tracer provider, and
    /// [`Kspan::shutdown_with_provider`](crate::Kspan::shutdown_with_provider)
    /// to do that and shut the provider down. Past it, they return the
    /// final figures with [`Error::FlushTimeout`](crate::Error::FlushTimeout).
    ///
    /// It must fit the time the service is given to stop, with the
    /// service's own shutdown beside it: the default leaves 10 s of
    /// Kubernetes' default 30 s grace (`terminationGracePeriodSeconds`);
    /// `docker stop` gives 10 s unless told otherwise (`--stop-timeout`,
    /// Compose's `stop_grace_period`). The guide's deployment page says
    /// how to fit each.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Takes the export ledger and the sums' handle from `pipeline`, the
    /// one the tracer provider was built with
    /// (`.with_kspan(&pipeline, exporter)`, see [`Pipeline`]): every
    /// figure and feature then works with no other set-up. [`Self::start`]
    /// fails when `pipeline` is in no provider, or in more than one.
    pub fn pipeline(mut self, pipeline: &Pipeline) -> Self {
        self.ledger = Some(pipeline.ledger());
        self.sums = Some(pipeline.kernel_sums());
        self.pipeline = Some(pipeline.clone());
        self
    }

    /// Accounts for kernel spans after kspan too: `ledger` is that of the
    /// [`AccountedExporter`](crate::AccountedExporter) wrapping the
    /// application's exporter, and [`Stats`](crate::Stats) then says how many spans the
    /// collector acknowledged, how many failed in export and why, and how
    /// many the pipeline dropped before the exporter (one ledger per
    /// runtime).
    pub fn export_ledger(mut self, ledger: ExportLedger) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// Where the totals of probes with `sum` go: the handle whose
    /// [`KernelSumsProcessor`](crate::KernelSumsProcessor) wraps the
    /// application's span processor. Required when a probe sums.
    pub fn kernel_sums(mut self, sums: KernelSums) -> Self {
        self.sums = Some(sums);
        self
    }

    /// The scheduler's account of every application span of the process
    /// (see [`crate::sched`]): on-CPU, run-queue, blocked and sleeping
    /// time and context switches as attributes of each span, and long
    /// waits as child spans. Needs no probe; needs a
    /// [`KernelSums`] processor in front of the exporter, passed with
    /// [`Self::kernel_sums`], which puts the figures on the spans.
    pub fn scheduler_account(mut self, account: SchedulerAccount) -> Self {
        self.scheduler = Some(account);
        self
    }

    /// Also writes each thread's span to the map that OpenTelemetry eBPF
    /// Instrumentation (OBI) and the OpenTelemetry eBPF profiler share
    /// (OTEP 4855, `<pin root>/otel/traces_ctx_v1`; the pin root is
    /// `/sys/fs/bpf` unless [`ObiTracesMap::pin_root`] says otherwise, and
    /// must be OBI's and the profiler's), so that the profiler attributes
    /// its samples of this process's threads to their spans; off by
    /// default.
    ///
    /// [`Self::start`] opens the pinned map, or creates and pins it where
    /// there is none, before it attaches anything, and fails with
    /// [`Error::ObiTracesMap`](crate::Error::ObiTracesMap) when the pin root is not on a BPF file
    /// system, the map there has another layout (saying what it found) or
    /// the process may not open or create it. From then until the runtime
    /// is shut down or dropped, a publication of a thread's context that
    /// changes its span writes the thread's entry (key: its `pid_tgid`;
    /// value: trace id, span id), or removes it when the thread has no
    /// span or suppresses telemetry; a thread's exit removes its entry, and
    /// the runtime's end every entry of the process (unless a writer of the
    /// application's own, [`ObiTracesMap::start`], still writes). The thread that calls
    /// `start` gets its entry at once; other threads that published their
    /// span before `start` get theirs at their next publication.
    ///
    /// Each write or removal is a `bpf()` system call (about 0.4 us on the
    /// machine of `BENCHMARKS.md`) where the thread-context record alone
    /// costs a copy, hence opt-in. Refused writes are counted in
    /// [`Stats::obi_map_failures`](crate::Stats::obi_map_failures), not
    /// logged. See [`crate::context::obi`].
    pub fn obi_traces_map(mut self, map: ObiTracesMap) -> Self {
        self.obi = Some(map);
        self
    }

    /// The meter provider kspan reports its figures through (`kspan.*`
    /// metrics, see [`crate::telemetry`]) and the latency histograms of
    /// `histogram` probes (`kernel.<function>.duration`, see
    /// [`crate::latency`]); the global one
    /// (`opentelemetry::global::meter_provider()`) by default, which records
    /// nothing until the application sets one.
    pub fn meter_provider(mut self, provider: &impl MeterProvider) -> Self {
        self.meter = Some(provider.meter(SCOPE_NAME));
        self
    }
}
