// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Configuring kspan, and [`KspanBuilder::start`]'s stages.

use std::path::PathBuf;
use std::sync::Arc;

use opentelemetry::metrics::{Meter, MeterProvider};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::annotation::{Mechanism, Mode, Probe};
use crate::attach::{
    attach_scheduler, multi_links_take_all, registration_skips, AttachDecision, Attached, Attacher,
    Links,
};
use crate::bpf::config::{
    ring_buffer_size_problem, HistogramSizes, RuntimeSettings, ThreadContextSettings,
    DEFAULT_RING_BUFFER_BYTES,
};
use crate::bpf::{Feature, KernelCapabilities, KernelSymbol, Orphans};
use crate::consume::{self, Consumer};
use crate::context::obi::{self, ObiTracesMap};
use crate::error::{Error, Result};
use crate::export::ExportLedger;
use crate::kernel::btf::Btf;
use crate::kernel::{self, privileges, tracefs, KernelError, KERNEL_BTF};
use crate::latency::{HistogramSource, Latency};
use crate::pipeline::Pipeline;
use crate::plan::{self, plan_all, NotTraced, PlanInputs, PlanSet, Traceable};
use crate::sched::SchedulerAccount;
use crate::span::{ClockOffset, SpanFactory, WaitSymbols, SCOPE_NAME};
use crate::sums::KernelSums;
use crate::telemetry::FigureSource;

use super::figures::{Counters, Figures};
use super::processor::Processor;
use super::records::Registrar;
use super::{lock, setup, Kspan, ThreadContextReads};
use orphans::OrphanWatch;

mod checks;
mod orphans;

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
            shutdown_timeout: Duration::from_secs(30),
            ring_buffer_bytes: DEFAULT_RING_BUFFER_BYTES,
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

    /// How long [`Kspan::shutdown`] waits for the tracer provider's flush
    /// (30 s by default); past it, `shutdown` returns the final figures with
    /// an error saying the flush did not finish.
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
    /// [`Error::ObiTracesMap`] when the pin root is not on a BPF file
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

    /// What planning knows of which functions the kernel can trace. Where
    /// every function goes to fsession.multi first and there are few enough
    /// of them, only what the kernel's symbol table rules out (`__init`, no
    /// symbol: a lookup per name), and a refused link reads the rest;
    /// otherwise the kernel's whole list (`available_filter_functions`, a
    /// quarter of a second or more to read), when it is readable.
    fn traceable(&self, btf: &Btf, capabilities: &KernelCapabilities) -> Traceable {
        let listed = || {
            tracefs::traceable_functions()
                .map(Traceable::Listed)
                .unwrap_or_default()
        };
        // A probe with alternatives, or optional, is planned on the
        // kernel's own list: which function it traces, or whether it is left
        // out, is decided before attaching.
        let chooses = self
            .probes
            .iter()
            .any(|p| p.spec.optional || !p.spec.alternatives.is_empty());
        if chooses || !multi_links_take_all(&self.probes, capabilities, &self.disabled) {
            return listed();
        }
        let names = plan::kernel_functions(btf, &self.probes);
        match crate::bpf::kernel_symbols(&names) {
            Ok(symbols) => Traceable::Excluded(
                names
                    .iter()
                    .zip(symbols)
                    .filter_map(|(name, symbol)| {
                        let why = match symbol {
                            KernelSymbol::Init => NotTraced::FreedInit,
                            KernelSymbol::Missing => NotTraced::NoSymbol,
                            KernelSymbol::Text | KernelSymbol::Unknown => return None,
                        };
                        Some(((*name).to_owned(), why))
                    })
                    .collect(),
            ),
            Err(e) => {
                tracing::debug!(
                    error = %e,
                    "kspan reads available_filter_functions instead of the symbol table"
                );
                listed()
            }
        }
    }

    /// Plans, loads and attaches every probe and starts consuming spans on a
    /// thread of kspan's own (within the current tokio runtime, if any, for
    /// exporters that need it).
    ///
    /// A process runs one runtime at a time: while one runs (until it is
    /// shut down or dropped), `start` fails with [`Error::RuntimeRunning`],
    /// naming where the first was started. Every runtime would record
    /// every call of the process, whoever's application span it is made
    /// under, and export it again.
    #[track_caller]
    pub fn start(self) -> Result<Kspan> {
        let caller = std::panic::Location::caller();
        if let Some(reason) = ring_buffer_size_problem(self.ring_buffer_bytes) {
            return Err(Error::InvalidSetting {
                setting: "KspanBuilder::ring_buffer_size",
                reason,
            });
        }
        let runtime = tokio::runtime::Handle::try_current().ok();
        // The SDK renders its configuration, id generator included, only
        // through `Debug`.
        let provider_debug = format!("{:?}", self.provider);
        if !crate::span::provider_has_kernel_ids(&provider_debug) {
            return Err(Error::NoKernelSpanIds);
        }
        if self.thread_context && self.context_observer {
            crate::context::register_observer()?;
        }
        if self.thread_context && self.process_context {
            crate::context::publish_process_context()?;
        }
        let started = std::time::Instant::now();
        // Privileges first: without them, reading tracefs or loading would
        // fail with errors that point elsewhere.
        privileges::check_start(&self.probes).map_err(KernelError::MissingPrivileges)?;
        if self.scheduler.is_some() {
            // The account's tracepoints load like any tracing program.
            privileges::check_tracing_caps(privileges::effective()).map_err(|why| {
                Error::InvalidSetting {
                    setting: "KspanBuilder::scheduler_account",
                    reason: format!("the scheduler's tracepoints cannot be loaded: {why}"),
                }
            })?;
        }
        // Before anything is loaded: a map that cannot be shared fails the
        // start at once.
        let obi = self.obi.as_ref().map(ObiTracesMap::start).transpose()?;
        let obi_failures_before = obi.as_ref().map(|_| obi::failures());

        // 1. Plan.
        let btf = kernel::read_btf(&self.btf_path)?;
        let syscalls: Vec<&'static str> = self
            .probes
            .iter()
            .filter(|p| p.spec.mode == Mode::Syscall)
            .map(|p| p.spec.function)
            .collect();
        // The kernel's mechanisms, probed with this BTF: they decide what
        // planning reads of the kernel.
        let probed;
        let capabilities = if self.btf_path == std::path::Path::new(KERNEL_BTF) {
            KernelCapabilities::cached(|| Ok::<_, String>(&btf))
        } else {
            probed = KernelCapabilities::probe_with(Ok(&btf));
            &probed
        };
        let inputs = PlanInputs {
            syscalls: tracefs::read_syscall_formats(&syscalls)?,
            traceable: self.traceable(&btf, capabilities),
        };
        let PlanSet {
            plans,
            mut skipped,
            not_attached,
        } = if self.probes.is_empty() && self.scheduler.is_some() {
            PlanSet {
                plans: Vec::new(),
                skipped: Vec::new(),
                not_attached: Vec::new(),
            }
        } else {
            plan_all(&btf, &self.probes, &inputs)?
        };
        for (function, why) in &skipped {
            tracing::info!(
                function = function.as_str(),
                reason = why.as_str(),
                "kspan skips a match"
            );
        }
        for left_out in &not_attached {
            crate::diagnostics::warn_user!(
                function = left_out.probe.spec.function,
                location = left_out.probe.spec.location,
                reason = left_out.reason().as_str(),
                "kspan starts without an optional probe: this kernel can trace none of its functions"
            );
        }
        for plan in plans.iter().filter(|p| !p.passed_over.is_empty()) {
            let passed_over: Vec<String> = plan
                .passed_over
                .iter()
                .map(|(f, why)| format!("`{f}`: {why}"))
                .collect();
            tracing::info!(
                function = plan.function,
                instead_of = plan.probe.spec.function,
                reason = passed_over.join("; ").as_str(),
                "kspan traces an alternative"
            );
        }
        let mut thread_context = ThreadContextSettings::new(
            &btf,
            self.thread_context,
            self.orphans,
            self.keep_unsampled,
        );
        let mut context_reads = if thread_context.task_tp_offset == 0 {
            ThreadContextReads::NotRead
        } else {
            match &capabilities.context_records {
                Feature::Available => {
                    thread_context.registered_records = true;
                    ThreadContextReads::Registered
                }
                Feature::Unavailable { reason, .. } => ThreadContextReads::UserMemory {
                    why: reason.clone(),
                },
            }
        };
        let mut settings = RuntimeSettings {
            target_tgid: if self.all_processes {
                0
            } else {
                std::process::id()
            },
            thread_context,
            ring_buffer_bytes: self.ring_buffer_bytes,
            entry_values: plans
                .iter()
                .any(|p| p.captures.iter().any(|c| c.bpf.at_entry != 0)),
            probes: plans.len() as u32,
            sums: plans.iter().any(|p| p.filter.sum),
            histograms: HistogramSizes::of(&plans),
        };
        let summed: Vec<(u32, &'static str)> = plans
            .iter()
            .enumerate()
            .filter(|(_, p)| p.filter.sum)
            .map(|(id, p)| (id as u32, p.function))
            .collect();
        checks::pipeline_pieces(&checks::Needs {
            summing: summed.first().map(|&(_, function)| function),
            scheduler: self.scheduler.is_some(),
            pipeline: self.pipeline.as_ref(),
            sums: self.sums.as_ref(),
        })?;
        if self.scheduler.is_some()
            && (!self.thread_context || settings.thread_context.task_tp_offset == 0)
        {
            return Err(Error::InvalidSetting {
                setting: "KspanBuilder::scheduler_account",
                reason: if self.thread_context {
                    "the account finds the span a thread is in through its thread context, \
                     which cannot be read here (see the warning above): nothing would be \
                     accounted"
                        .to_owned()
                } else {
                    "the account finds the span a thread is in through its thread context, and \
                     `KspanBuilder::thread_context(false)` turns reading it off: remove one of \
                     the two"
                        .to_owned()
                },
            });
        }
        tracing::debug!(functions = plans.len(), elapsed = ?started.elapsed(), "kspan planned");

        drop(btf);

        // 2. Attach.
        kernel::sys::raise_open_files_limit();
        let attach = |settings: &RuntimeSettings| {
            let mut attacher = Attacher::new(settings, capabilities, &self.disabled);
            if !inputs.traceable.is_listed() {
                attacher = attacher.planned_without_traceable_list();
            }
            attacher.attach_all(&plans)
        };
        let attached = if plans.is_empty() {
            None
        } else {
            Some(match attach(&settings) {
                // The kernel said it has uptrs and then refused the map or its
                // reads: the programs read user memory instead.
                Err(refused) if settings.thread_context.registered_records => {
                    tracing::info!(
                        error = %refused,
                        "kspan attaches again, reading thread contexts from user memory"
                    );
                    settings.thread_context.registered_records = false;
                    context_reads = ThreadContextReads::UserMemory {
                        why: format!(
                            "loading the programs with registered records failed: {refused}"
                        ),
                    };
                    attach(&settings)?
                }
                attached => attached?,
            })
        };
        let wait_spans = self
            .scheduler
            .as_ref()
            .is_some_and(|account| account.wait_min_ns() > 0);
        // The scheduler's account: its own load, sharing the probes' maps
        // (or making them, without probes).
        let (mut attached, scheduler) = match (attached, self.scheduler) {
            (Some(mut attached), Some(account)) => {
                let sched = attach_scheduler(
                    &settings,
                    &account,
                    Some(&attached.maps),
                    &mut attached.links,
                )?;
                (attached, Some(sched))
            }
            (None, Some(account)) => {
                let mut links = Links::default();
                let mut sched = attach_scheduler(&settings, &account, None, &mut links)?;
                let maps = sched.maps.take().ok_or_else(|| {
                    Error::Consumer("the scheduler's load made no ring buffer".to_owned())
                })?;
                let attached = Attached {
                    decisions: Vec::new(),
                    links,
                    maps,
                    skipped: Vec::new(),
                };
                (attached, Some(sched))
            }
            (Some(attached), None) => (attached, None),
            (None, None) => return Err(plan::PlanError::NoProbes.into()),
        };
        if let Some(sched) = &scheduler {
            tracing::info!(
                mechanism = sched.mechanism.as_str(),
                passed_over = sched.btf_passed_over.as_deref().unwrap_or("-"),
                "kspan's scheduler account attached"
            );
        }
        skipped.append(&mut attached.skipped);
        attached
            .decisions
            .extend(not_attached.iter().map(AttachDecision::left_out));
        tracing::debug!(functions = attached.decisions.len(), elapsed = ?started.elapsed(), "kspan attached");

        // 3. Consume, then record: one runtime per process, claimed before
        // its recording is switched on.
        let claim = consume::PROCESS
            .take(caller)
            .map_err(|first| Error::RuntimeRunning { first })?;
        let histogram_probes = plans
            .iter()
            .enumerate()
            .filter(|(_, p)| p.probe.spec.histogram)
            .map(|(id, p)| (id as u32, p.function))
            .collect();
        let stats = Arc::new(Counters::default());
        let functions: Vec<&'static str> = plans.iter().map(|p| p.function).collect();
        // Shared with the consumer's last act (the spans still waiting for
        // their parents); the lock is never contended.
        let processor = Arc::new(Mutex::new(Processor {
            plans,
            factory: SpanFactory::new(self.provider.tracer(SCOPE_NAME), ClockOffset::measure())
                .with_process_pid(self.all_processes)
                .numbered(self.ledger.is_some()),
            stats: stats.clone(),
            symbols: if wait_spans {
                WaitSymbols::loaded()
            } else {
                WaitSymbols::default()
            },
        }));
        let ring = consume::ring_buffer(&attached.maps, {
            let processor = processor.clone();
            move |bytes| lock(&processor).process(bytes)
        })?;
        let links = Arc::new(Mutex::new(attached.links));
        // The figures are made once recording is on; the tick finds them here.
        let figures_made: Arc<OnceLock<Arc<Figures>>> = Arc::default();
        let on_tick = {
            let figures = figures_made.clone();
            let mut watch = OrphanWatch::new(self.orphans == Orphans::Drop && self.thread_context);
            move || {
                let Some(f) = figures.get() else { return };
                let spans = f.counters.spans.load(Ordering::Relaxed);
                if let Some(n) = watch.check(spans, || Some(f.maps.counters().orphans)) {
                    orphans::warn(n);
                }
            }
        };
        let consumer = Consumer::start(
            ring,
            claim,
            runtime,
            {
                let links = links.clone();
                // A consumer that dies stops the recording it can no longer
                // turn into spans.
                move || {
                    crate::diagnostics::error_user!(
                        "kspan's consumer died: kspan detaches every probe"
                    );
                    lock(&links).detach_all();
                }
            },
            move || lock(&processor).release_waiting(),
            on_tick,
        )
        .map_err(|e| Error::Consumer(format!("cannot start the consumer thread: {e}")))?;
        if let Some(sums) = &self.sums {
            if !summed.is_empty() {
                let table = attached.maps.sums_table()?;
                sums.connect(table, summed)
                    .map_err(|reason| Error::InvalidSetting {
                        setting: "KspanBuilder::kernel_sums",
                        reason: reason.to_owned(),
                    })?;
            }
        }
        let scheduler = match (scheduler, &self.sums) {
            (Some(sched), Some(sums)) => {
                let table = crate::bpf::span_table::SpanTable::new(
                    &sched.maps_read.spans,
                    kspan_bpf::names::SCHED_SPANS_MAP,
                )?;
                let open = crate::bpf::counters::MappedCounters::new(
                    &sched.maps_read.open,
                    kspan_bpf::names::SCHED_OPEN_MAP,
                )?;
                sums.connect_scheduler(table, open)
                    .map_err(|reason| Error::InvalidSetting {
                        setting: "KspanBuilder::kernel_sums",
                        reason: reason.to_owned(),
                    })?;
                crate::context::current_time::start();
                Some((sched.mechanism, sched.btf_passed_over))
            }
            _ => None,
        };
        // Before recording starts, so that the first spans read registered
        // records where they can.
        let registration_skips = registration_skips(
            capabilities,
            &attached.decisions,
            scheduler.as_ref().map(|&(mechanism, _)| mechanism),
        );
        let registrar = match (attached.maps.context_records(), registration_skips) {
            // Registering would cost other threads' calls: the maps keep
            // the doubt they were made with, and the programs read user
            // memory.
            (Some(Ok(_)), Some(why)) => {
                tracing::info!(
                    reason = why.as_str(),
                    "kspan reads thread contexts from user memory"
                );
                context_reads = ThreadContextReads::UserMemory { why };
                None
            }
            (Some(Ok(maps)), None) => {
                // Its system calls are kspan's own (another runtime may be
                // recording).
                let (registrar, outcome) = {
                    let _quiet = crate::context::suppress();
                    Registrar::start(maps)
                };
                if let Err(why) = outcome {
                    tracing::info!(
                        reason = why.as_str(),
                        "kspan reads the thread contexts of threads without a registered record \
                         from user memory"
                    );
                }
                Some(registrar)
            }
            // The maps keep the doubt they were made with: the programs
            // read user memory.
            (Some(Err(e)), _) => {
                crate::diagnostics::warn_user!(error = %e, "kspan reads thread contexts from user memory");
                context_reads = ThreadContextReads::UserMemory {
                    why: format!("the map of registered records is unusable: {e}"),
                };
                None
            }
            (None, _) => None,
        };
        if let (None, ThreadContextReads::Registered) = (&registrar, &context_reads) {
            context_reads = ThreadContextReads::UserMemory {
                why: "the programs were loaded without the map of registered records".into(),
            };
        }
        attached.maps.set_enabled(true)?;
        let histogram_probes: Vec<(u32, &'static str)> = histogram_probes;
        let figures = Arc::new(Figures {
            functions,
            maps: attached.maps,
            histogram_probes: histogram_probes.iter().map(|&(id, _)| id).collect(),
            counters: stats,
            ledger: self.ledger,
            pipeline_capacity: crate::export::batch_capacity(&provider_debug),
            programs: lock(&links).programs(),
            probes_not_attached: not_attached.len() as u64,
            obi_failures_before,
        });
        let _ = figures_made.set(figures.clone());
        let process_context = self.thread_context && self.process_context;
        let setup = setup::find(&setup::SetupFacts {
            ledger: figures.ledger.is_some(),
            process_context,
            provider_resource: crate::context::has_provider_resource(),
            symbol_exported: !process_context || crate::context::thread_context_symbol_exported(),
        });
        setup::warn(&setup);
        let meter = self
            .meter
            .unwrap_or_else(|| opentelemetry::global::meter(SCOPE_NAME));
        let source: Arc<dyn FigureSource> = figures.clone();
        crate::telemetry::register(&meter, Arc::downgrade(&source));
        let histograms: Arc<dyn HistogramSource> = figures.clone();
        let latency = Latency::register(&meter, &histogram_probes, Arc::downgrade(&histograms));
        Ok(Kspan {
            latency,
            decisions: attached.decisions,
            skipped,
            links,
            figures,
            provider: self.provider,
            consumer,
            shutdown_timeout: self.shutdown_timeout,
            registrar,
            context_reads,
            scheduler,
            setup,
            _obi: obi,
        })
    }
}
