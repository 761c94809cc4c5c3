// SPDX-License-Identifier: Apache-2.0 OR MIT
//! [`KspanBuilder::start`]: the steps in the order data flows, each a
//! function of its own returning what the next needs (`kernel`: the
//! settings, the kernel, the probes' plans; `load`: the shared maps and
//! each source attached over them; `record`: the consumer, the pipeline,
//! thread-context registration). The first failure stops the start, with
//! what was loaded so far released as it drops.

use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::latency::{HistogramSource, Latency};
use crate::span::SCOPE_NAME;
use crate::telemetry::FigureSource;

use super::super::figures::Figures;
use super::super::{lock, setup, Kspan};
use super::load::{attach_account, make_maps, AccountPlan};
use super::record::register_contexts;
use super::KspanBuilder;

impl KspanBuilder {
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
        let started = std::time::Instant::now();
        let runtime = tokio::runtime::Handle::try_current().ok();
        // The SDK renders its configuration, id generator included, only
        // through `Debug`.
        let provider_debug = format!("{:?}", self.provider);
        self.check_settings(&provider_debug)?;
        // Before anything is loaded: a map that cannot be shared fails the
        // start at once.
        let obi = self
            .obi
            .as_ref()
            .map(crate::context::obi::ObiTracesMap::start)
            .transpose()?;
        let obi_failures_before = obi.as_ref().map(|_| crate::context::obi::failures());

        // Read the kernel, plan the probes, settle the settings.
        let kernel = self.read_kernel()?;
        let mut planned = self.plan_probes(&kernel)?;
        let mut settings = self.settings(&kernel, &planned)?;
        let account = self
            .scheduler
            .map(|account| AccountPlan::new(account, &kernel.btf));
        let capabilities = kernel.capabilities();
        tracing::debug!(functions = planned.plans.len(), elapsed = ?started.elapsed(), "kspan planned");

        // Make the maps, attach the probes, attach the account.
        let mut maps = make_maps(&mut settings, account.is_some())?;
        let mut probes =
            self.attach_probes(&mut planned, &mut settings, capabilities, &mut maps)?;
        let account = account
            .map(|plan| attach_account(&plan, &settings, &maps, &mut probes.links))
            .transpose()?;
        tracing::debug!(functions = probes.decisions.len(), elapsed = ?started.elapsed(), "kspan attached");

        // Start the consumer: one runtime per process, claimed before its
        // recording is switched on.
        let claim = crate::consume::PROCESS
            .take(caller)
            .map_err(|first| Error::RuntimeRunning { first })?;
        let functions: Vec<&'static str> = planned.plans.iter().map(|p| p.function).collect();
        let histogram_probes: Vec<(u32, &'static str)> = planned
            .plans
            .iter()
            .enumerate()
            .filter(|(_, p)| p.probe.spec.histogram)
            .map(|(id, p)| (id as u32, p.function))
            .collect();
        let links = Arc::new(Mutex::new(std::mem::take(&mut probes.links)));
        let consuming = self.start_consumer(planned.plans, &maps, &links, claim, runtime)?;

        // Connect the pipeline, register thread contexts, record.
        self.connect_pipeline(&maps, settings.summed, account.as_ref())?;
        let registrar = register_contexts(
            capabilities,
            &probes.decisions,
            account.as_ref(),
            &maps,
            &mut settings.context_reads,
        );
        maps.set_enabled(true)?;

        // The figures, and what the set-up leaves out.
        let figures = Arc::new(Figures {
            functions,
            maps,
            histogram_probes: histogram_probes.iter().map(|&(id, _)| id).collect(),
            counters: consuming.counters,
            ledger: self.ledger,
            pipeline_capacity: crate::export::batch_capacity(&provider_debug),
            programs: lock(&links).programs(),
            // Planning's and attaching's (an optional probe no mechanism
            // of this kernel can trace).
            probes_not_attached: probes
                .decisions
                .iter()
                .filter(|d| d.not_attached.is_some())
                .count() as u64,
            obi_failures_before,
        });
        let _ = consuming.figures.set(figures.clone());
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
            decisions: probes.decisions,
            skipped: probes.skipped,
            links,
            figures,
            provider: self.provider,
            consumer: consuming.consumer,
            shutdown_timeout: self.shutdown_timeout,
            registrar,
            context_reads: settings.context_reads,
            account,
            setup,
            _obi: obi,
        })
    }
}
