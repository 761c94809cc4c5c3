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
//! 4. start the consumer thread ([`crate::consume`]) that reads the ring,
//!    and the span workers it shares records out to, which turn them into
//!    spans ([`crate::span`]), then switch recording on.
//!
//! Dropping [`Kspan`] detaches everything; [`Kspan::shutdown`] also drains
//! the ring buffer and flushes the tracer provider, and
//! [`Kspan::shutdown_with_provider`] shuts the provider down too, within
//! the same budget.

use std::sync::Arc;

use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use opentelemetry_sdk::error::OTelSdkError;

use crate::attach::AttachDecision;
use crate::bpf::links::Links;
use crate::consume::Consumer;
use crate::context::obi::ObiTracesWriter;
use crate::error::{Error, Result};
use crate::latency::Latency;
use crate::sched::{AccountAttached, CauseMechanism, SchedMechanism};
use crate::stats::{ProbeStats, Stats};

mod builder;
mod figures;
mod flush;
mod processor;
mod records;
mod setup;

pub use builder::{default_span_workers, KspanBuilder};
use figures::Figures;
use flush::{bounded, flush, unfold};
#[cfg(feature = "fuzzing")]
pub(crate) use processor::FuzzProcessor;
use records::Registrar;
pub use records::ThreadContextReads;
pub use setup::SetupGap;

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
    /// The scheduler's account, when on: its mechanism, why BTF
    /// tracepoints are not it, and with its causes how each is read.
    account: Option<AccountAttached>,
    /// What the set-up left out, said at start.
    setup: Vec<SetupGap>,
    /// Writes each thread's span to OBI's traces map, when asked to; its
    /// drop removes the process's entries.
    _obi: Option<ObiTracesWriter>,
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
        KspanBuilder::new(provider)
    }

    /// Functions a pattern matched that are not traced, each with why
    /// (deny list, inlined or notrace).
    pub fn skipped(&self) -> &[(String, String)] {
        &self.skipped
    }

    /// The scheduler's account's mechanism, when it is on
    /// ([`KspanBuilder::scheduler_account`]).
    pub fn scheduler_account(&self) -> Option<SchedMechanism> {
        self.account.as_ref().map(|account| account.mechanism)
    }

    /// With the account's causes on
    /// ([`SchedulerAccount::with_causes`](crate::SchedulerAccount::with_causes)),
    /// how each cause is read on this kernel, or why it is not: the
    /// account's own plan, as [`Self::attach_plan`] is the probes'. Empty
    /// with the causes off.
    pub fn scheduler_causes(&self) -> &[CauseMechanism] {
        self.account
            .as_ref()
            .map_or(&[], |account| account.causes.as_slice())
    }

    /// How the scheduler's account counts interrupt time on this kernel,
    /// when it is on: out of `kspan.sched.on_cpu_ns` (and in
    /// `kspan.sched.interrupts_ns`) where the kernel leaves it out of a
    /// thread's CPU time (CONFIG_IRQ_TIME_ACCOUNTING), else in it, as in
    /// the kernel's own CPU time of the thread.
    pub fn scheduler_interrupt_time(&self) -> Option<&'static str> {
        self.account.as_ref().map(|account| account.interrupts)
    }

    /// Why the scheduler's account does not use BTF tracepoints, when it
    /// is on and does not.
    pub fn scheduler_btf_passed_over(&self) -> Option<&str> {
        self.account
            .as_ref()
            .and_then(|account| account.btf_passed_over.as_deref())
    }

    /// What the set-up leaves out, and what each omission costs (said once,
    /// as a warning, at start): empty when the tracer provider was built
    /// with `.with_kspan(&pipeline, exporter)`
    /// ([`crate::TracerProviderBuilderExt`]), the builder given
    /// `.pipeline(&pipeline)`, and the executable exports the thread
    /// context's symbol (README's `build.rs`).
    pub fn setup(&self) -> &[SetupGap] {
        &self.setup
    }

    /// How each probe was attached, and why other mechanisms were not used.
    pub fn attach_plan(&self) -> &[AttachDecision] {
        &self.decisions
    }

    /// Where the programs read each thread's application context from
    /// now: registered records where the kernel can pin them (Linux
    /// 6.13+) and registering costs no calls (not where a registration
    /// preempted inside its map update would make the kernel skip kspan's
    /// kprobe or tracepoint programs), else the thread's memory, with why.
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
    /// flushes the tracer provider and returns the final figures; the
    /// provider stays usable (for the application's own spans, or another
    /// runtime). A service that is stopping wants
    /// [`Self::shutdown_with_provider`], which shuts the provider down too
    /// within the same budget.
    ///
    /// [`KspanBuilder::shutdown_timeout`] bounds it all (20 s by default),
    /// whatever the SDK's own limit (its batch processor stops waiting for
    /// a flush after 5 s; kspan asks again). What a user gets:
    /// - the flush finished: `Ok`, every span acknowledged or counted
    ///   under its loss, what never reached the exporter as dropped before
    ///   it ([`Stats::unsettled`] is 0);
    /// - an export failed: [`Error::Shutdown`] with [`Error::Flush`], the
    ///   same complete figures;
    /// - the flush did not finish in time: [`Error::Shutdown`] with
    ///   [`Error::FlushTimeout`]; what is still queued or in an export is
    ///   [`Stats::unsettled`], not counted as lost, since the SDK may yet
    ///   deliver it. Shut the provider down, then
    ///   [`ExportLedger::final_figures`](crate::ExportLedger::final_figures)
    ///   says what became of it.
    ///
    /// Losses and other troubles are said once: by the error's message
    /// when it fails, else as a warning (`kspan shut down with ...`).
    pub async fn shutdown(self) -> Result<Stats> {
        self.shut_down(false).await
    }

    /// [`Self::shutdown`], then the tracer provider's own shutdown (the
    /// SDK's `shutdown_with_timeout`), all within
    /// [`KspanBuilder::shutdown_timeout`] (20 s by default: Kubernetes
    /// gives a pod 30 s between SIGTERM and SIGKILL by default; see the
    /// guide's deployment page), and the figures made final: nothing is
    /// left unsettled, since nothing waits for the pipeline any more.
    ///
    /// The flush gets the budget less a part kept for the provider's
    /// shutdown (a quarter, at most 5 s), which exports the application's
    /// spans still queued and shuts the exporter down; the provider's
    /// shutdown gets what remains. With an export ledger (the pipeline of
    /// `.with_kspan(&pipeline, exporter)`), the figures are then
    /// [`ExportLedger::final_figures`](crate::ExportLedger::final_figures):
    /// what the collector did not take by then is counted as lost.
    ///
    /// Errors are those of [`Self::shutdown`], and
    /// [`Error::ProviderShutdown`] when the flush finished but the
    /// provider's shutdown failed; a provider shutdown that did not finish
    /// in time is [`Error::FlushTimeout`]. Calling the provider's
    /// `shutdown` afterwards returns the SDK's `AlreadyShutdown`.
    pub async fn shutdown_with_provider(self) -> Result<Stats> {
        self.shut_down(true).await
    }

    /// Both shutdowns; `with_provider`: the provider's too.
    async fn shut_down(mut self, with_provider: bool) -> Result<Stats> {
        let budget = self.shutdown_timeout;
        let deadline = Instant::now() + budget;
        let left = || deadline.saturating_duration_since(Instant::now());
        // No new records once the links are gone.
        {
            let _quiet = crate::context::suppress();
            lock(&self.links).detach_all();
        }
        if self.account.is_some() {
            crate::sched::time::stop();
        }
        // The calls counted since the last collection, for the meter
        // provider's next export.
        if let Some(latency) = &self.latency {
            latency.publish();
        }
        let consumer = self.consumer.stop().map_err(Error::Consumer);
        // The part of the budget kept for the provider's own shutdown.
        let kept = if with_provider {
            (budget / 4).min(Duration::from_secs(5))
        } else {
            Duration::ZERO
        };
        let flushed = match consumer {
            Ok(()) => flush(self.provider.clone(), left().saturating_sub(kept))
                .await
                // The budget is what the user set; the flush's part of it
                // is kspan's business.
                .map_err(|e| match e {
                    Error::FlushTimeout(_) => Error::FlushTimeout(budget),
                    e => e,
                }),
            Err(e) => Err(e),
        };
        let finished = matches!(flushed, Ok(()) | Err(Error::Flush(_)));
        let provider_shut = if with_provider {
            let provider = self.provider.clone();
            let timeout = left();
            bounded("kspan-provider-shutdown", timeout, move || {
                provider.shutdown_with_timeout(timeout)
            })
            .await
        } else {
            None
        };
        // After the flush: what the exporter made of the last spans counts.
        let mut stats = self.stats()?;
        match &self.figures.ledger {
            Some(ledger) if with_provider => stats = ledger.final_figures(&stats),
            _ if stats.pipeline_accounted && finished => {
                // A flush that finished left nothing queued: what never
                // reached the exporter was dropped on the way.
                stats.spans_dropped_before_export += stats.spans_in_pipeline;
                stats.spans_in_pipeline = 0;
            }
            _ => {}
        }
        let result = match (flushed, with_provider, provider_shut) {
            (Err(e), _, _) => Err(e),
            (Ok(()), false, _) => Ok(()),
            (Ok(()), true, Some(Ok(()))) => Ok(()),
            (Ok(()), true, Some(Err(e))) => match unfold(e) {
                OTelSdkError::Timeout(_) => Err(Error::FlushTimeout(budget)),
                e => Err(Error::ProviderShutdown(e)),
            },
            (Ok(()), true, None) => Err(Error::FlushTimeout(budget)),
        };
        match result {
            Ok(()) => {
                // Said here only when nothing failed: a failure's message
                // says it all, once.
                let troubles = stats.troubles();
                // Exports failed before the last flush (or inside one the
                // SDK cut and kspan asked again): the same words as a
                // failed flush's, with the exporter's last error.
                let failed_export = self
                    .figures
                    .ledger
                    .as_ref()
                    .and_then(crate::export::ExportLedger::last_error)
                    .filter(|_| stats.lost_after_kspan() > 0);
                match failed_export {
                    Some(said) => {
                        // The ledger keeps the error's `Display`, which
                        // `InternalFailure` would prefix again.
                        let said = said
                            .strip_prefix("Operation failed: ")
                            .map_or(said.clone(), str::to_owned);
                        crate::diagnostics::warn_user!(
                            "{}",
                            crate::error::shutdown_message(
                                &Error::Flush(OTelSdkError::InternalFailure(said)),
                                &stats
                            )
                        )
                    }
                    None if !troubles.is_empty() => crate::diagnostics::warn_user!(
                        figures = %stats,
                        "kspan shut down with {}",
                        troubles.join(", ")
                    ),
                    None => {}
                }
                Ok(stats)
            }
            Err(source) => Err(Error::Shutdown {
                stats: Box::new(stats),
                source: Box::new(source),
            }),
        }
    }
}

impl Drop for Kspan {
    fn drop(&mut self) {
        let _quiet = crate::context::suppress();
        lock(&self.links).detach_all();
        if self.account.is_some() {
            crate::sched::time::stop();
        }
        // Dropped without `shutdown`: the last histogram counts still
        // reach the meter provider (again a no-op after `shutdown`).
        if let Some(latency) = &self.latency {
            latency.publish();
        }
        // The consumer stops when it is dropped, after this.
    }
}
