// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The first steps of [`KspanBuilder::start`]: what the builder's settings
//! need before anything is read, what the kernel offers, and the probes'
//! plans against it. Nothing is loaded here.

use std::path::Path;

use crate::annotation::Mode;
use crate::attach::multi_links_take_all;
use crate::bpf::config::ThreadContextSettings;
use crate::bpf::config::{
    ring_buffer_size_problem, HistogramSizes, KernelFeatureBits, RuntimeSettings,
};
use crate::bpf::{Feature, KernelCapabilities, KernelSymbol};
use crate::error::{Error, Result};
use crate::kernel::btf::Btf;
use crate::kernel::{self, privileges, tracefs, KernelError, KERNEL_BTF};
use crate::plan::{
    self, plan_all, NotAttached, NotTraced, PlanInputs, PlanSet, ProbePlan, Traceable,
};

use super::super::ThreadContextReads;
use super::{checks, KspanBuilder};

/// The kernel as start reads it: its BTF and what it offers, probed with
/// that BTF.
pub(super) struct KernelFacts {
    pub btf: Btf,
    /// Probed for a BTF other than the running kernel's (else the
    /// process's cached probe is used).
    probed: Option<KernelCapabilities>,
}

impl KernelFacts {
    /// What the kernel offers: the mechanisms planning and attaching read.
    pub fn capabilities(&self) -> &KernelCapabilities {
        match &self.probed {
            Some(probed) => probed,
            None => KernelCapabilities::cached(|| Ok::<_, String>(&self.btf)),
        }
    }
}

/// The probes' plans, and what planning left out.
pub(super) struct Planned {
    pub plans: Vec<ProbePlan>,
    /// `(function, why)` for each match left out.
    pub skipped: Vec<(String, String)>,
    /// Optional probes this kernel can trace none of the functions of.
    pub not_attached: Vec<NotAttached>,
    /// The plans were made on the kernel's list of traceable functions.
    pub traceable_listed: bool,
}

/// The settings every program reads, and where thread contexts are read
/// from so far.
pub(super) struct Settings {
    pub runtime: RuntimeSettings,
    pub context_reads: ThreadContextReads,
    /// The probes that sum their calls onto application spans, by id.
    pub summed: Vec<(u32, &'static str)>,
}

impl KspanBuilder {
    /// The settings refused before anything is read: the ring buffer's
    /// size, the provider's id generator, the privileges each part needs.
    pub(super) fn check_settings(&self, provider_debug: &str) -> Result<()> {
        if let Some(reason) = ring_buffer_size_problem(self.ring_buffer_bytes) {
            return Err(Error::InvalidSetting {
                setting: "KspanBuilder::ring_buffer_size",
                reason,
            });
        }
        if self.span_workers == Some(0) {
            return Err(Error::InvalidSetting {
                setting: "KspanBuilder::span_workers",
                reason: "0 threads would turn no record into a span: give at least 1 \
                         (or leave it out for one a CPU, at most 8)"
                    .to_owned(),
            });
        }
        if !crate::span::provider_has_kernel_ids(provider_debug) {
            return Err(Error::NoKernelSpanIds);
        }
        if self.thread_context && self.context_observer {
            crate::context::register_observer()?;
        }
        if self.thread_context && self.process_context {
            crate::context::publish_process_context()?;
        }
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
        Ok(())
    }

    /// The kernel's BTF, and what the kernel offers, probed with it.
    pub(super) fn read_kernel(&self) -> Result<KernelFacts> {
        let btf = kernel::read_btf(&self.btf_path)?;
        let probed = (self.btf_path != Path::new(KERNEL_BTF))
            .then(|| KernelCapabilities::probe_with(Ok(&btf)));
        Ok(KernelFacts { btf, probed })
    }

    /// Plans every probe against the kernel (none when only the account
    /// runs), saying what was left out and why.
    pub(super) fn plan_probes(&self, kernel: &KernelFacts) -> Result<Planned> {
        let syscalls: Vec<&'static str> = self
            .probes
            .iter()
            .filter(|p| p.spec.mode == Mode::Syscall)
            .map(|p| p.spec.function)
            .collect();
        let inputs = PlanInputs {
            syscalls: tracefs::read_syscall_formats(&syscalls)?,
            traceable: self.traceable(&kernel.btf, kernel.capabilities()),
        };
        let traceable_listed = inputs.traceable.is_listed();
        let PlanSet {
            plans,
            skipped,
            not_attached,
        } = if self.probes.is_empty() && self.scheduler.is_some() {
            PlanSet {
                plans: Vec::new(),
                skipped: Vec::new(),
                not_attached: Vec::new(),
            }
        } else {
            plan_all(&kernel.btf, &self.probes, &inputs)?
        };
        say_left_out(&plans, &skipped, &not_attached);
        Ok(Planned {
            plans,
            skipped,
            not_attached,
            traceable_listed,
        })
    }

    /// The settings the programs read, checked against what the pipeline
    /// and the account need.
    pub(super) fn settings(&self, kernel: &KernelFacts, planned: &Planned) -> Result<Settings> {
        let plans = &planned.plans;
        let mut thread_context = ThreadContextSettings::new(
            &kernel.btf,
            self.thread_context,
            self.orphans,
            self.keep_unsampled,
        );
        let context_reads = if thread_context.task_tp_offset == 0 {
            ThreadContextReads::NotRead
        } else {
            match &kernel.capabilities().context_records {
                Feature::Available => {
                    thread_context.registered_records = true;
                    ThreadContextReads::Registered
                }
                Feature::Unavailable { reason, .. } => ThreadContextReads::UserMemory {
                    why: reason.clone(),
                },
            }
        };
        let runtime = RuntimeSettings {
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
            histograms: HistogramSizes::of(plans),
            kernel: KernelFeatureBits::of(kernel.capabilities()),
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
            && (!self.thread_context || runtime.thread_context.task_tp_offset == 0)
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
        if plans.is_empty() && self.scheduler.is_none() {
            return Err(plan::PlanError::NoProbes.into());
        }
        Ok(Settings {
            runtime,
            context_reads,
            summed,
        })
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
}

/// Says what planning left out: matches skipped, optional probes not
/// attached (a warning the user sees), alternatives taken.
fn say_left_out(plans: &[ProbePlan], skipped: &[(String, String)], not_attached: &[NotAttached]) {
    for (function, why) in skipped {
        tracing::info!(
            function = function.as_str(),
            reason = why.as_str(),
            "kspan skips a match"
        );
    }
    for left_out in not_attached {
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
}
