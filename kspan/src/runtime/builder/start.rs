// SPDX-License-Identifier: Apache-2.0 OR MIT
//! [`KspanBuilder::start`]: the stages in the order data flows (plan,
//! attach, consume, record), each stopping the start at its first failure
//! with what was loaded so far released.

use std::sync::Arc;

use opentelemetry::trace::TracerProvider as _;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};

use crate::annotation::Mode;
use crate::attach::{
    attach_scheduler, multi_links_take_all, registration_skips, AttachDecision, Attached, Attacher,
    CauseChecks, Links,
};
use crate::bpf::config::{
    ring_buffer_size_problem, HistogramSizes, RuntimeSettings, ThreadContextSettings,
};
use crate::bpf::{Feature, KernelCapabilities, KernelSymbol, Orphans};
use crate::consume::{self, Consumer};
use crate::context::obi::{self, ObiTracesMap};
use crate::error::{Error, Result};
use crate::kernel::btf::Btf;
use crate::kernel::{self, privileges, tracefs, KernelError, KERNEL_BTF};
use crate::latency::{HistogramSource, Latency};
use crate::plan::{self, plan_all, NotTraced, PlanInputs, PlanSet, Traceable};
use crate::span::{ClockOffset, SpanFactory, WaitSymbols, SCOPE_NAME};
use crate::telemetry::FigureSource;

use super::super::figures::{Counters, Figures};
use super::super::processor::Processor;
use super::super::records::Registrar;
use super::super::{lock, setup, Kspan, ThreadContextReads};
use super::{checks, orphans, KspanBuilder};
use orphans::OrphanWatch;

impl KspanBuilder {
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

        // The account's causes: which of their tracepoints this kernel has.
        let cause_checks = CauseChecks::of(self.scheduler.as_ref(), &btf);
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
                    &cause_checks,
                    Some(&attached.maps),
                    &mut attached.links,
                )?;
                (attached, Some(sched))
            }
            (None, Some(account)) => {
                let mut links = Links::default();
                let mut sched =
                    attach_scheduler(&settings, &account, &cause_checks, None, &mut links)?;
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
                .with_sched_causes(self.scheduler.is_some_and(|a| a.causes()))
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
        let mut causes = Vec::new();
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
                sums.connect_scheduler(table, open, sched.causes_on)
                    .map_err(|reason| Error::InvalidSetting {
                        setting: "KspanBuilder::kernel_sums",
                        reason: reason.to_owned(),
                    })?;
                crate::context::current_time::start(sched.causes_on);
                // A cause asked for that this kernel does not give: said
                // once, where the user sees it, not only in
                // `Kspan::scheduler_causes()`.
                for cause in &sched.causes {
                    if let Err(why) = &cause.how {
                        crate::diagnostics::warn_user!(
                            cause = cause.cause,
                            reason = why.as_str(),
                            "kspan's scheduler account does not read one of the causes asked for \
                             on this kernel: its figures stay 0 and its time is in the remainders"
                        );
                    }
                }
                causes = sched.causes;
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
            causes,
            setup,
            _obi: obi,
        })
    }
}
