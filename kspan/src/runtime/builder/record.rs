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
use crate::consume::{self, Claim, Consumer, Fanout};
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
    /// Starts the consumer thread (within `runtime`, if any), and the span
    /// workers it shares records out to when there are several: records
    /// to spans through the application's tracer, the account's wait
    /// records through its [`WaitSpans`].
    pub(super) fn start_consumer(
        &self,
        plans: Vec<ProbePlan>,
        maps: &SharedMaps,
        links: &Arc<Mutex<Links>>,
        claim: Claim,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Result<Consuming> {
        let counters = Arc::new(Counters::default());
        let plans: Arc<[ProbePlan]> = plans.into();
        let clock = ClockOffset::measure();
        let waits = self
            .scheduler
            .as_ref()
            .map(WaitSpans::new)
            .unwrap_or_default();
        let factory = SpanFactory::new(self.provider.tracer(SCOPE_NAME), clock)
            .with_process_pid(self.all_processes)
            .numbered(self.ledger.is_some());
        let processor = |stream: u32| Processor {
            plans: plans.clone(),
            factory: factory.sibling(stream),
            stats: counters.clone(),
            waits: waits.clone(),
            reported: Default::default(),
        };
        let workers = self.span_workers.unwrap_or_else(default_span_workers);
        let (ring, on_drained, on_consumed): (_, DrainedHook, ConsumedHook) = if workers <= 1 {
            // One thread reads and builds: no copy of the records.
            // Shared with the consumer's last act (the spans still
            // waiting for their parents); the lock is never contended.
            let processor = Arc::new(Mutex::new(processor(0)));
            let ring = consume::ring_buffer(maps, {
                let processor = processor.clone();
                move |bytes| lock(&processor).process(bytes)
            })?;
            (
                ring,
                Box::new(move || lock(&processor).release_waiting()),
                Box::new(|| {}),
            )
        } else {
            let fanout = start_workers(workers, processor, runtime.clone())?;
            let fanout = Arc::new(Mutex::new(fanout));
            let ring = consume::ring_buffer(maps, {
                let fanout = fanout.clone();
                move |bytes| lock(&fanout).push(bytes)
            })?;
            let finish = fanout.clone();
            (
                ring,
                // A worker's panic is the consumer's: said by `stop`.
                Box::new(move || {
                    if let Err(died) = lock(&finish).finish() {
                        std::panic::panic_any(died.0);
                    }
                }),
                Box::new(move || {
                    if let Err(died) = lock(&fanout).flush() {
                        std::panic::panic_any(died.0);
                    }
                }),
            )
        };
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
        let on_death = {
            let links = links.clone();
            // A consumer that dies stops the recording it can no longer
            // turn into spans.
            move || {
                crate::diagnostics::error_user!(
                    "kspan's consumer died: kspan detaches every probe"
                );
                lock(&links).detach_all();
            }
        };
        let hooks = consume::Hooks {
            on_death,
            on_drained,
            on_tick,
            on_consumed,
        };
        let consumer = Consumer::start(ring, claim, runtime, hooks)
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

/// What the consumer runs once the ring is drained at a stop.
type DrainedHook = Box<dyn FnOnce() + Send>;
/// What the consumer runs each time it has read the ring to its end.
type ConsumedHook = Box<dyn FnMut() + Send>;

/// The span workers' default: the CPUs this process may run on (its
/// affinity and its cgroup's CPU quota, as the standard library reads
/// them), at most 8.
pub fn default_span_workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(MAX_DEFAULT_SPAN_WORKERS)
}

/// The most workers the default starts: past this, a worker of its own
/// for each CPU of a large machine costs threads and memory for services
/// with fewer busy threads than that (a thread's records go to one
/// worker). [`KspanBuilder::span_workers`] sets more.
const MAX_DEFAULT_SPAN_WORKERS: usize = 8;

/// `workers` span workers, each with its own processor (`processor(i)`),
/// entering `runtime` if given.
fn start_workers(
    workers: usize,
    processor: impl Fn(u32) -> Processor,
    runtime: Option<tokio::runtime::Handle>,
) -> Result<Fanout> {
    Fanout::start(workers, |i, end| {
        let mut processor = processor(i as u32);
        let runtime = runtime.clone();
        std::thread::Builder::new()
            .name(format!("kspan-spans-{i}"))
            .spawn(move || {
                let _in_runtime = runtime.as_ref().map(tokio::runtime::Handle::enter);
                // kspan's own calls (the processors' exports) make no
                // kernel spans.
                let _quiet = crate::context::suppress();
                end.run(|record| processor.process(record));
                // The reader is done: what still waits for a parent goes.
                processor.release_waiting();
            })
    })
    .map_err(|e| Error::Consumer(format!("cannot start a span worker thread: {e}")))
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
