// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The last steps of [`KspanBuilder::start`], once everything is
//! attached: the consumer that turns records into spans, the pipeline's
//! pieces connected to the kernel's tables, thread-context registration,
//! and the figures.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

use opentelemetry::trace::TracerProvider as _;

use crate::attach::{registration_skips, AttachDecision};
use crate::bpf::links::Links;
use crate::bpf::maps::SharedMaps;
use crate::bpf::{KernelCapabilities, Orphans};
use crate::consume::{self, Claim, Consumer};
use crate::error::{Error, Result};
use crate::plan::ProbePlan;
use crate::sched::time::FaultCounts;
use crate::sched::{AccountAttached, SpanFigures, WaitSpans};
use crate::span::{ClockOffset, SpanFactory, SCOPE_NAME};

use super::super::figures::{Counters, Figures};
use super::super::processor::Processor;
use super::super::records::Registrar;
use super::super::{lock, ThreadContextReads};
use super::orphans::{self, OrphanWatch};
use super::KspanBuilder;

/// The consumer running, and what it shares with the runtime.
pub(super) struct Consuming {
    pub consumer: Consumer,
    pub counters: Arc<Counters>,
    /// The figures, once made: the consumer's tick reads them.
    pub figures: Arc<OnceLock<Arc<Figures>>>,
}

impl KspanBuilder {
    /// Starts the consumer thread (within `runtime`, if any): records to
    /// spans through the application's tracer, the account's wait records
    /// through its [`WaitSpans`].
    pub(super) fn start_consumer(
        &self,
        plans: Vec<ProbePlan>,
        maps: &SharedMaps,
        links: &Arc<Mutex<Links>>,
        claim: Claim,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Result<Consuming> {
        let counters = Arc::new(Counters::default());
        // Shared with the consumer's last act (the spans still waiting for
        // their parents); the lock is never contended.
        let processor = Arc::new(Mutex::new(Processor {
            plans,
            factory: SpanFactory::new(self.provider.tracer(SCOPE_NAME), ClockOffset::measure())
                .with_process_pid(self.all_processes)
                .numbered(self.ledger.is_some()),
            stats: counters.clone(),
            waits: self
                .scheduler
                .as_ref()
                .map(WaitSpans::new)
                .unwrap_or_default(),
        }));
        let ring = consume::ring_buffer(maps, {
            let processor = processor.clone();
            move |bytes| lock(&processor).process(bytes)
        })?;
        let figures: Arc<OnceLock<Arc<Figures>>> = Arc::default();
        let on_tick = {
            let figures = figures.clone();
            let mut watch = OrphanWatch::new(self.orphans == Orphans::Drop && self.thread_context);
            move || {
                let Some(f) = figures.get() else { return };
                let spans = f.counters.spans.load(Ordering::Relaxed);
                if let Some(dropped) = watch.check(spans, || Some(f.maps.counters().orphans)) {
                    orphans::warn(dropped);
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
        Ok(Consuming {
            consumer,
            counters,
            figures,
        })
    }

    /// Connects the pipeline's [`KernelSums`](crate::KernelSums) to the
    /// kernel's tables: the probes' sums, and the account's figures with
    /// its time base started. A cause asked for that this kernel does not
    /// give is said here, once, where the user sees it.
    pub(super) fn connect_pipeline(
        &self,
        maps: &SharedMaps,
        summed: Vec<(u32, &'static str)>,
        account: Option<&AccountAttached>,
    ) -> Result<()> {
        let Some(sums) = &self.sums else {
            return Ok(());
        };
        let refused = |reason: &str| Error::InvalidSetting {
            setting: "KspanBuilder::kernel_sums",
            reason: reason.to_owned(),
        };
        if !summed.is_empty() {
            sums.connect(maps.sums_table()?, summed).map_err(refused)?;
        }
        let (Some(attached), Some(settings), Some(tables)) =
            (account, self.scheduler.as_ref(), maps.account())
        else {
            return Ok(());
        };
        let figures = SpanFigures::new(tables, settings.causes())?;
        let faults = if !settings.causes() {
            FaultCounts::Off
        } else if attached.faults_hooked {
            FaultCounts::AfterFaults(figures.open_slots())
        } else {
            FaultCounts::EachStamp
        };
        sums.connect_scheduler(Box::new(figures)).map_err(refused)?;
        crate::sched::time::start(faults);
        warn_causes_not_read(attached);
        Ok(())
    }
}

/// A cause asked for that this kernel does not give, said once at start,
/// not only in `Kspan::scheduler_causes()`.
fn warn_causes_not_read(attached: &AccountAttached) {
    for cause in &attached.causes {
        if let Err(why) = &cause.how {
            crate::diagnostics::warn_user!(
                cause = cause.cause,
                reason = why.as_str(),
                "kspan's scheduler account does not read one of the causes asked for \
                 on this kernel: its figures stay 0 and its time is in the remainders"
            );
        }
    }
}

/// Registers this process's thread-context records with the kernel, where
/// that costs no other thread's calls; before recording starts, so that
/// the first spans read registered records where they can. Updates
/// `context_reads` to where contexts are read from.
pub(super) fn register_contexts(
    capabilities: &KernelCapabilities,
    decisions: &[AttachDecision],
    account: Option<&AccountAttached>,
    maps: &SharedMaps,
    context_reads: &mut ThreadContextReads,
) -> Option<Registrar> {
    let skips = registration_skips(
        capabilities,
        decisions,
        account.and_then(AccountAttached::map_call_guard),
    );
    let registrar = match (maps.context_records(), skips) {
        // Registering would cost other threads' calls: the maps keep
        // the doubt they were made with, and the programs read user
        // memory.
        (Some(Ok(_)), Some(why)) => {
            tracing::info!(
                reason = why.as_str(),
                "kspan reads thread contexts from user memory"
            );
            *context_reads = ThreadContextReads::UserMemory { why };
            None
        }
        (Some(Ok(records)), None) => {
            // Its system calls are kspan's own (another runtime may be
            // recording).
            let (registrar, outcome) = {
                let _quiet = crate::context::suppress();
                Registrar::start(records)
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
            *context_reads = ThreadContextReads::UserMemory {
                why: format!("the map of registered records is unusable: {e}"),
            };
            None
        }
        (None, _) => None,
    };
    if let (None, ThreadContextReads::Registered) = (&registrar, &*context_reads) {
        *context_reads = ThreadContextReads::UserMemory {
            why: "the programs were loaded without the map of registered records".into(),
        };
    }
    registrar
}
