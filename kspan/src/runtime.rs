// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The runtime: plan, load and attach, consume, detach.
//!
//! [`KspanBuilder::start`] runs the stages in the order data flows, and
//! stops at the first failure with everything loaded so far released:
//!
//! 1. read the kernel's BTF and what tracefs says, and plan every probe
//!    ([`crate::plan`]; nothing touched yet);
//! 2. check privileges and probe what the kernel offers, with the same BTF;
//! 3. attach every function ([`crate::attach`]), the exit program first;
//! 4. start the consumer thread ([`crate::consume`]) that turns records into
//!    spans ([`crate::span`]), then switch recording on.
//!
//! Dropping [`Kspan`] detaches everything; [`Kspan::shutdown`] also drains
//! the ring buffer and flushes the tracer provider.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use opentelemetry::metrics::{Meter, MeterProvider};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use std::sync::Mutex;
use std::time::Duration;

use crate::annotation::{Mechanism, Mode, Probe};
use crate::attach::{multi_links_take_all, AttachDecision, Attacher, Links, Programs};
use crate::bpf::config::{
    ring_buffer_size_problem, HistogramSizes, RuntimeSettings, ThreadContextSettings,
    DEFAULT_RING_BUFFER_BYTES,
};
use crate::bpf::object::SharedMaps;
use crate::bpf::{Feature, KernelCapabilities, KernelSymbol, Orphans};
use crate::consume::{self, parse_record, Consumer};
use crate::error::{Error, Result};
use crate::export::ExportLedger;
use crate::kernel::btf::Btf;
use crate::kernel::{self, privileges, tracefs, KernelError, KERNEL_BTF};
use crate::latency::{Counts, HistogramSource, Latency, ProbeCounts};
use crate::plan::{self, plan_all, NotTraced, PlanInputs, PlanSet, ProbePlan, Traceable};
use crate::span::{ClockOffset, Outcome, SpanFactory, SCOPE_NAME};
use crate::stats::{ProbeStats, Stats};
use crate::sums::KernelSums;
use crate::telemetry::FigureSource;

mod records;

use records::Registrar;
pub use records::ThreadContextReads;

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
    shutdown_timeout: Duration,
    ring_buffer_bytes: u32,
    ledger: Option<ExportLedger>,
    meter: Option<Meter>,
    sums: Option<KernelSums>,
}

impl KspanBuilder {
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
    /// [`Stats::unsampled`]).
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

    /// Traces calls made by every process, not only this one (the default is
    /// this process only).
    pub fn trace_all_processes(mut self, all: bool) -> Self {
        self.all_processes = all;
        self
    }

    /// Bytes of the ring buffer that carries finished spans to the consumer
    /// (a power of two of at least a page; 4 MiB by default, see
    /// [`DEFAULT_RING_BUFFER_BYTES`]). Records that find it full are
    /// dropped and counted in [`Stats::dropped_ring_buffer_full`].
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

    /// Accounts for kernel spans after kspan too: `ledger` is that of the
    /// [`AccountedExporter`](crate::AccountedExporter) wrapping the
    /// application's exporter, and [`Stats`] then says how many spans the
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
        if !multi_links_take_all(&self.probes, capabilities, &self.disabled) {
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
    pub fn start(self) -> Result<Kspan> {
        if let Some(reason) = ring_buffer_size_problem(self.ring_buffer_bytes) {
            return Err(Error::InvalidSetting {
                setting: "KspanBuilder::ring_buffer_size",
                reason,
            });
        }
        let runtime = tokio::runtime::Handle::try_current().ok();
        // The SDK renders its configuration, id generator included, only
        // through `Debug`.
        if !crate::span::provider_has_kernel_ids(&format!("{:?}", self.provider)) {
            return Err(Error::NoKernelSpanIds);
        }
        if self.thread_context && self.context_observer {
            crate::context::register_observer()?;
        }
        let started = std::time::Instant::now();
        // Privileges first: without them, reading tracefs or loading would
        // fail with errors that point elsewhere.
        privileges::check_start(&self.probes).map_err(KernelError::MissingPrivileges)?;

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
        let PlanSet { plans, mut skipped } = plan_all(&btf, &self.probes, &inputs)?;
        for (function, why) in &skipped {
            tracing::info!(
                function = function.as_str(),
                reason = why.as_str(),
                "kspan skips a match"
            );
        }
        let mut thread_context = ThreadContextSettings::new(
            &btf,
            self.thread_context,
            self.orphans,
            self.keep_unsampled,
        );
        let mut context_reads = if thread_context.task_fsbase_offset == 0 {
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
        if let (Some((_, function)), None) = (summed.first(), &self.sums) {
            return Err(Error::InvalidSetting {
                setting: "KspanBuilder::kernel_sums",
                reason: format!(
                    "the probe of `{function}` sums its calls onto application spans (`sum`), \
                     and nothing puts the sums there: make a `kspan::KernelSums`, wrap the \
                     tracer provider's span processor with `sums.processor(...)`, and pass \
                     `.kernel_sums(sums)` to the builder"
                ),
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
        let mut attached = match attach(&settings) {
            // The kernel said it has uptrs and then refused the map or its
            // reads: the programs read user memory instead.
            Err(refused) if settings.thread_context.registered_records => {
                tracing::info!(
                    error = %refused,
                    "kspan attaches again, reading thread contexts from user memory"
                );
                settings.thread_context.registered_records = false;
                context_reads = ThreadContextReads::UserMemory {
                    why: format!("loading the programs with registered records failed: {refused}"),
                };
                attach(&settings)?
            }
            attached => attached?,
        };
        skipped.append(&mut attached.skipped);
        tracing::debug!(functions = attached.decisions.len(), elapsed = ?started.elapsed(), "kspan attached");

        // 3. Consume, then record.
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
        }));
        let ring = consume::ring_buffer(&attached.maps, {
            let processor = processor.clone();
            move |bytes| lock(&processor).process(bytes)
        })?;
        let links = Arc::new(Mutex::new(attached.links));
        let consumer = Consumer::start(
            ring,
            runtime,
            {
                let links = links.clone();
                // A consumer that dies stops the recording it can no longer
                // turn into spans.
                move || {
                    tracing::error!("kspan's consumer died: kspan detaches every probe");
                    lock(&links).detach_all();
                }
            },
            move || lock(&processor).release_waiting(),
        )
        .map_err(|e| Error::Consumer(format!("cannot start the consumer thread: {e}")))?;
        if let Some(sums) = &self.sums {
            if !summed.is_empty() {
                let map = attached.maps.sums_handle()?;
                sums.connect(map, summed)
                    .map_err(|reason| Error::InvalidSetting {
                        setting: "KspanBuilder::kernel_sums",
                        reason: reason.to_owned(),
                    })?;
            }
        }
        // Before recording starts, so that the first spans read registered
        // records where they can.
        let registrar = match attached.maps.context_records() {
            Some(Ok(maps)) => {
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
            Some(Err(e)) => {
                tracing::warn!(error = %e, "kspan reads thread contexts from user memory");
                context_reads = ThreadContextReads::UserMemory {
                    why: format!("the map of registered records is unusable: {e}"),
                };
                None
            }
            None => None,
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
            programs: lock(&links).programs(),
        });
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
        })
    }
}

/// Counters kept in user space.
#[derive(Debug, Default)]
struct Counters {
    spans: AtomicU64,
    decode_errors: AtomicU64,
    unknown_probe: AtomicU64,
    handler_panics: AtomicU64,
    discarded: AtomicU64,
    unresolved: AtomicU64,
    waiting: AtomicU64,
}

/// Where the figures come from: the kernel's counters, the consumer's, and
/// the export ledger's; shared with the metrics callbacks, which hold it
/// weakly (they outlive the runtime in the meter provider).
struct Figures {
    /// The kernel function of each probe id.
    functions: Vec<&'static str>,
    maps: SharedMaps,
    /// The probe ids with a latency histogram.
    histogram_probes: Vec<u32>,
    counters: Arc<Counters>,
    ledger: Option<ExportLedger>,
    programs: Arc<Programs>,
}

impl Figures {
    /// Every figure now.
    fn read(&self) -> Result<Stats> {
        let (k, probes, skipped_by_kernel) = {
            let _quiet = crate::context::suppress();
            (
                self.maps.counters()?,
                self.probe_stats()?,
                self.programs.skipped(),
            )
        };
        let total = |pick: fn(&ProbeStats) -> u64| probes.iter().map(pick).sum::<u64>();
        let s = &self.counters;
        let spans_to_pipeline = s.spans.load(Ordering::Relaxed);
        let export = self
            .ledger
            .as_ref()
            .map(ExportLedger::figures)
            .unwrap_or_default();
        Ok(Stats {
            spans_to_pipeline,
            pipeline_accounted: self.ledger.is_some(),
            spans_acknowledged: export.acknowledged,
            spans_export_failed: export.failed,
            spans_export_timed_out: export.timed_out,
            spans_dropped_before_export: export.dropped_before_export,
            spans_in_pipeline: if self.ledger.is_some() {
                spans_to_pipeline.saturating_sub(export.received + export.dropped_before_export)
            } else {
                0
            },
            records_emitted: k.emitted,
            dropped_ring_buffer_full: k.ring_buffer_full,
            dropped_stack_depth: k.stack_depth,
            dropped_lost_exit: k.lost_exit,
            unmatched_exits: k.unmatched_exit,
            dropped_no_storage: k.no_storage,
            skipped_by_kernel,
            decode_errors: s.decode_errors.load(Ordering::Relaxed),
            unknown_probe: s.unknown_probe.load(Ordering::Relaxed),
            handler_panics: s.handler_panics.load(Ordering::Relaxed),
            discarded_by_handler: s.discarded.load(Ordering::Relaxed),
            unsampled: k.unsampled,
            orphans_dropped: k.orphans,
            dropped_overload: k.overload,
            suppressed: k.suppressed,
            filtered: total(|p| p.filtered),
            rate_limited: total(|p| p.rate_limited),
            summary_only: total(|p| p.summary_only),
            sums_failed: k.sum_failed,
            spans_parent_unresolved: s.unresolved.load(Ordering::Relaxed),
            spans_waiting_for_parent: s.waiting.load(Ordering::Relaxed),
        })
    }

    /// The calls each probe recorded but did not make into spans.
    fn probe_stats(&self) -> Result<Vec<ProbeStats>> {
        let counters = self.maps.probe_counters(self.functions.len())?;
        Ok(self
            .functions
            .iter()
            .zip(counters)
            .map(|(&function, c)| ProbeStats {
                function,
                filtered: c.filtered,
                rate_limited: c.rate_limited,
                summary_only: c.no_spans,
            })
            .collect())
    }
}

impl HistogramSource for Figures {
    fn histograms(&self) -> Option<Vec<(u32, ProbeCounts)>> {
        let read = {
            let _quiet = crate::context::suppress();
            self.maps.histograms(&self.histogram_probes)
        };
        let counts = |row: &crate::bpf::object::HistogramRow| {
            let mut c = Counts::default();
            c.buckets.copy_from_slice(&row[..crate::latency::BUCKETS]);
            c.sum_ns = row[crate::latency::BUCKETS];
            c
        };
        match read {
            Ok(rows) => Some(
                self.histogram_probes
                    .iter()
                    .zip(rows)
                    .map(|(&id, h)| {
                        (
                            id,
                            ProbeCounts {
                                succeeded: counts(&h.succeeded),
                                failed: counts(&h.failed),
                                by_errno: h.by_errno.iter().map(|(e, r)| (*e, counts(r))).collect(),
                            },
                        )
                    })
                    .collect(),
            ),
            Err(e) => {
                tracing::debug!(error = %e, "kspan cannot read the latency histograms now");
                None
            }
        }
    }
}

impl FigureSource for Figures {
    fn figures(&self) -> Option<Stats> {
        self.read().ok()
    }

    fn probe_figures(&self) -> Option<Vec<ProbeStats>> {
        let _quiet = crate::context::suppress();
        self.probe_stats().ok()
    }
}

/// Running kspan. Dropping it detaches every probe.
///
/// Spans reach the application's pipeline in batches: the kernel wakes the
/// consumer once 256 KiB of records wait, and the consumer also collects
/// whatever is there every 50 ms, so a span is handed to the tracer at most
/// about 50 ms after its call returned. [`Kspan::shutdown`] collects the rest.
///
/// The consumer is a thread of kspan's own (`kspan-consumer`), which builds
/// the spans and runs the application's span processors: any tokio runtime
/// (or none) works, a processor that blocks on its export blocks that thread
/// only, and kspan keeps working when the runtime it was started in is
/// dropped. A consumer that dies detaches every probe and says so.
pub struct Kspan {
    /// The latency histograms, when some probe has one.
    latency: Option<Arc<Latency>>,
    decisions: Vec<AttachDecision>,
    skipped: Vec<(String, String)>,
    links: Arc<Mutex<Links>>,
    figures: Arc<Figures>,
    provider: SdkTracerProvider,
    consumer: Consumer,
    shutdown_timeout: Duration,
    /// Registers thread-context records with the kernel, where it can.
    registrar: Option<Registrar>,
    /// Where contexts are read from when there is no registrar.
    context_reads: ThreadContextReads,
}

fn lock<T>(shared: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

impl std::fmt::Debug for Kspan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kspan")
            .field("functions", &self.decisions.len())
            .field("links", &lock(&self.links).len())
            .finish()
    }
}

impl Kspan {
    /// Starts configuring kspan; spans go through `provider`, the application's
    /// own tracer provider, which must take its ids from
    /// [`KernelSpanIds`](crate::KernelSpanIds)
    /// (`.with_id_generator(kspan::KernelSpanIds::default())`; `start` fails
    /// otherwise).
    pub fn builder(provider: &SdkTracerProvider) -> KspanBuilder {
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
            shutdown_timeout: Duration::from_secs(30),
            ring_buffer_bytes: DEFAULT_RING_BUFFER_BYTES,
            ledger: None,
            meter: None,
            sums: None,
        }
    }

    /// Functions a pattern matched that are not traced, each with why
    /// (deny list, inlined or notrace).
    pub fn skipped(&self) -> &[(String, String)] {
        &self.skipped
    }

    /// How each probe was attached, and why other mechanisms were not used.
    pub fn attach_plan(&self) -> &[AttachDecision] {
        &self.decisions
    }

    /// Where the programs read each thread's application context from
    /// now: registered records where the kernel can pin them (Linux
    /// 6.13+), else the thread's memory, with why.
    pub fn thread_context_reads(&self) -> ThreadContextReads {
        match &self.registrar {
            Some(registrar) => registrar.reads(),
            None => self.context_reads.clone(),
        }
    }

    /// Current figures, live: those of the pipeline are exact up to the
    /// last batch the exporter got, and final after [`Self::shutdown`].
    pub fn stats(&self) -> Result<Stats> {
        self.figures.read()
    }

    /// Per probe (kernel function), the calls recorded but not made into
    /// spans: filtered, over the rate limit, or of a probe that makes no
    /// spans. [`Kspan::stats`] has the totals.
    pub fn probe_stats(&self) -> Result<Vec<ProbeStats>> {
        let _quiet = crate::context::suppress();
        self.figures.probe_stats()
    }

    /// Detaches every probe, exports every span still in the ring buffer,
    /// flushes the tracer provider (waiting at most
    /// [`KspanBuilder::shutdown_timeout`]) and returns the final figures. When
    /// something fails, the error is [`Error::Shutdown`], which carries the
    /// final figures too.
    pub async fn shutdown(mut self) -> Result<Stats> {
        // No new records once the links are gone.
        {
            let _quiet = crate::context::suppress();
            lock(&self.links).detach_all();
        }
        // The calls counted since the last collection, for the meter
        // provider's next export.
        if let Some(latency) = &self.latency {
            latency.publish();
        }
        let consumer = self.consumer.stop().map_err(Error::Consumer);
        let flushed = match consumer {
            Ok(()) => flush(self.provider.clone(), self.shutdown_timeout).await,
            Err(e) => Err(e),
        };
        // After the flush: what the exporter made of the last spans counts.
        let mut stats = self.stats()?;
        if stats.pipeline_accounted && matches!(flushed, Ok(()) | Err(Error::Flush(_))) {
            // A flush that finished left nothing queued: what never reached
            // the exporter was dropped on the way.
            stats.spans_dropped_before_export += stats.spans_in_pipeline;
            stats.spans_in_pipeline = 0;
        }
        if stats.lost() > 0 || stats.skipped_by_kernel > 0 || stats.handler_panics > 0 {
            tracing::warn!(
                ?stats,
                "kspan lost spans, the kernel skipped its programs, or handlers panicked"
            );
        }
        flushed.map(|()| stats).map_err(|source| Error::Shutdown {
            stats: Box::new(stats),
            source: Box::new(source),
        })
    }
}

/// Flushes `provider` on a thread of its own (a flush blocks on the
/// exporter), waiting at most `timeout`; works under any executor.
async fn flush(provider: SdkTracerProvider, timeout: Duration) -> Result<()> {
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

impl Drop for Kspan {
    fn drop(&mut self) {
        let _quiet = crate::context::suppress();
        lock(&self.links).detach_all();
        // Dropped without `shutdown`: the last histogram counts still
        // reach the meter provider (again a no-op after `shutdown`).
        if let Some(latency) = &self.latency {
            latency.publish();
        }
        // The consumer stops when it is dropped, after this.
    }
}

/// Turns records into spans, inside the ring buffer's callback.
struct Processor {
    plans: Vec<ProbePlan>,
    factory: SpanFactory<SdkTracer>,
    stats: Arc<Counters>,
}

impl Processor {
    fn process(&mut self, bytes: &[u8]) {
        let view = match parse_record(bytes) {
            Ok(view) => view,
            Err(_) => {
                self.stats.decode_errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let Some(plan) = self.plans.get(view.header.probe_id as usize) else {
            self.stats.unknown_probe.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let handed = self.factory.handed();
        match self.factory.process(plan, &view) {
            Outcome::Exported | Outcome::Reparented => {}
            Outcome::Discarded => {
                self.stats.discarded.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::HandlerPanicked => {
                self.stats.handler_panics.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count_handed(handed);
    }

    /// Hands the spans still waiting for their parents to the tracer.
    fn release_waiting(&mut self) {
        let handed = self.factory.handed();
        self.factory.release_waiting();
        self.count_handed(handed);
    }

    fn count_handed(&self, before: u64) {
        let s = &self.stats;
        s.spans
            .fetch_add(self.factory.handed() - before, Ordering::Relaxed);
        s.unresolved
            .store(self.factory.unresolved(), Ordering::Relaxed);
        s.waiting
            .store(self.factory.waiting() as u64, Ordering::Relaxed);
    }
}
