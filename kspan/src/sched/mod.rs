// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Where a request's time went: the scheduler's account of every
//! application span.
//!
//! With [`KspanBuilder::scheduler_account`](crate::KspanBuilder::scheduler_account)
//! every application span of the process says, when it ends, how long it
//! was on a CPU, runnable but waiting for one, blocked (`D`: disk and file
//! I/O, page faults, some kernel locks) and sleeping (`S`: futexes and user
//! locks, poll and epoll, sleeps, sockets), and how many voluntary and
//! involuntary context switches it went through ([`attributes`]); each
//! off-CPU interval longer than a threshold is a child span of its own (a
//! *wait span*, [`wait_attributes`]) from the switch-out to the switch-in,
//! with the kernel stack it left on and who woke it: a link to the waker's
//! application span when the waker is a thread of the process inside one
//! (the lock holder, the thread that finished the work).
//!
//! # What the figures mean
//!
//! A span's figures are those of the time it was a thread's *current*
//! context (the innermost span a thread has entered or attached), on every
//! thread where it was: a span entered by a `spawn_blocking` closure adds
//! that thread's time to the request's. A child span's time is its own,
//! not its parent's. For async code this is the time the task was being
//! polled under the span: a task parked in the executor, waiting for its
//! future to be woken, is not current anywhere and is not "off CPU" for its
//! span; a poll that blocks its worker thread (a synchronous read, a
//! contended `std` mutex) is. So for a request handled by a tokio task, on
//! CPU + run queue + blocked + sleeping is the time its polls took, and the
//! span's duration less that is the time it waited in the executor.
//!
//! # How
//!
//! The kernel half attaches `sched_switch`, `sched_waking` and
//! `sched_wakeup`. At a switch-out the program runs on the thread leaving
//! the CPU: it reads the thread's OTEP 4947 record (the span it leaves in)
//! and keeps, by tid, when and in which state it left. At a waking it runs
//! on the waker, whose record names the span that released the wait, or
//! in an interrupt (a timer, a device, a softirq), which wakes for no task:
//! with BTF tracepoints the program tells by the stack it runs on (an
//! interrupt's, not the task's kernel stack; an interrupt x86-64 takes in
//! user space runs on the task's, and there the waker's kernel stack
//! tells), with classic ones user space tells by the waker's kernel stack,
//! read at each wake-up. The waiting ends at the wake-up, when the thread
//! is queued (a remote wake-up's IPI is waiting, not queued): by the run
//! queue's clock, from the reading where the switch-out stopped the
//! thread's CPU time to the reading of its enqueue, as the kernel counts
//! it. The run-queue time is the scheduler's own (`run_delay`, which
//! schedstat and taskstats report), read at the switch-in: the thread's
//! run queue's clock less when it was queued, plus what a move between run
//! queues added. The scheduler reads that clock once a switch, and not at
//! all at a switch a wake-up asked for by preempting (of an idle CPU, or of
//! a task the thread outranks): there it reuses the wake-up's reading, so
//! the way out of the interrupt and of the idle loop is the woken thread's
//! CPU time to the kernel, and so to the account, and the preempted
//! thread is queued from that reading. Where the kernel accounts interrupt
//! time apart (CONFIG_IRQ_TIME_ACCOUNTING) the interrupts served while a
//! thread ran are out of its time on a CPU, as the kernel leaves them out
//! of its CPU time ([`crate::Kspan::scheduler_interrupt_time`] says which).
//! At the switch-in the interval is added
//! to the span's totals (a table user space maps, by span id) and, when
//! long, emitted as a wait record into the ring buffer like any span:
//! overload, a full ring, an unsampled or suppressed span are counted as
//! for every other record; the wait span keeps the times as they passed. The time a span was current is measured in
//! user space at every context switch ([`crate::context`]); its time on a
//! CPU is that less its off-CPU time. Threads of other processes return at
//! the first check of every program.

//!
//! # The room
//!
//! The account is one of kspan's two sources (the probes are the other),
//! plugged into the core the probes use too: the shared maps, the ring
//! buffer, the consumer, span building, the pipeline and the figures. What
//! is the account's own is here: its settings ([`SchedulerAccount`], this
//! file); what this kernel gives each cause (`causes`); its programs' load
//! and attach (`attach`) and how they are refused ([`AccountError`]); the
//! totals per span, read through the generated `struct kspan_sched_sum`,
//! and the attributes they make (`totals`), handed to
//! [`KernelSums`](crate::KernelSums) as a hook; its attribute keys
//! ([`attributes`], [`cause_attributes`], [`wait_attributes`]); its wait
//! spans (`wait`), handed to the consumer; and its time base (`time`),
//! which the thread context calls through a hook it was handed. A new
//! cause of waiting goes in `causes` (what the kernel must have), its C
//! unit, `totals` and `keys` (its figures), and `wait` if its waits say
//! it. Its on/off state is the [`SchedulerAccount`] the builder holds: the
//! rest is made from it at start.

use std::time::Duration;

mod attach;
pub(crate) mod causes;
mod error;
mod keys;
pub(crate) mod time;
mod totals;
mod wait;

pub(crate) use attach::{attach, AccountAttached};
pub(crate) use causes::CauseChecks;
pub use error::AccountError;
pub use keys::{attributes, cause_attributes, wait_attributes};
pub(crate) use totals::SpanFigures;
pub(crate) use wait::{is_wait, WaitSpans};

/// The scheduler's account: one builder line,
/// `.scheduler_account(SchedulerAccount::default())`, with a
/// [`KernelSums`](crate::KernelSums) processor in front of the exporter
/// (which puts the figures on the spans as they end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerAccount {
    wait_min: Option<Duration>,
    mechanism: Option<SchedMechanism>,
    causes: bool,
}

/// The default shortest wait span: shorter waits are in the totals only.
pub const DEFAULT_WAIT_SPAN_MIN: Duration = Duration::from_millis(1);

impl Default for SchedulerAccount {
    fn default() -> Self {
        SchedulerAccount {
            wait_min: Some(DEFAULT_WAIT_SPAN_MIN),
            mechanism: None,
            causes: false,
        }
    }
}

impl SchedulerAccount {
    /// The account with wait spans of 1 ms and longer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Off-CPU intervals at least `min` long become wait spans (0 is taken
    /// as 1 ns: every interval).
    pub fn wait_spans_from(mut self, min: Duration) -> Self {
        self.wait_min = Some(min.max(Duration::from_nanos(1)));
        self
    }

    /// No wait spans: the totals on each application span only (nothing
    /// goes through the ring buffer).
    pub fn without_wait_spans(mut self) -> Self {
        self.wait_min = None;
        self
    }

    /// Attaches with `mechanism` only (start fails where it cannot), not
    /// the cheapest that works: to compare them, or to keep to the perf
    /// events a kernel's policy allows.
    pub fn mechanism(mut self, mechanism: SchedMechanism) -> Self {
        self.mechanism = Some(mechanism);
        self
    }

    /// Says why each wait happened: blocked time split by cause (I/O,
    /// memory, kernel locks), sleeping time by cause (kernel locks,
    /// futexes, polling, timers, receiving), kernel lock contention per
    /// span by kind, and a wait span for each long contention naming the
    /// lock and its owner ([`cause_attributes`]). Each cause's mechanism on
    /// this kernel is in [`Kspan::scheduler_causes`](crate::Kspan::scheduler_causes).
    /// Off (the default), none of it is read: the programs skip it with
    /// one compare.
    pub fn with_causes(mut self) -> Self {
        self.causes = true;
        self
    }

    /// Whether the causes are read ([`Self::with_causes`]).
    pub fn causes(&self) -> bool {
        self.causes
    }

    /// The mechanism asked for, if one is.
    pub(crate) fn only_mechanism(&self) -> Option<SchedMechanism> {
        self.mechanism
    }

    /// The shortest wait span in ns, 0 for none.
    pub(crate) fn wait_min_ns(&self) -> u64 {
        self.wait_min
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// How one of the account's causes ([`SchedulerAccount::with_causes`]) is
/// read on this kernel ([`Kspan::scheduler_causes`](crate::Kspan::scheduler_causes)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CauseMechanism {
    /// What it tells (`blocked: io, memory`, `kernel locks`, ...).
    pub cause: &'static str,
    /// How it is read, or why it is not on this kernel (its attributes
    /// are then absent, as 0, and the time is in the remainders).
    pub how: Result<String, String>,
}

impl std::fmt::Display for CauseMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.how {
            Ok(how) => write!(f, "{}: {how}", self.cause),
            Err(why) => write!(f, "{}: not read ({why})", self.cause),
        }
    }
}

/// How the account's programs are attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchedMechanism {
    /// `tp_btf/sched_switch`, `sched_waking` and `sched_wakeup`: raw tracepoints
    /// whose arguments are the tasks (cheapest for other processes; a long
    /// wait's stack is read once, at its end).
    BtfTracepoints,
    /// `sched:sched_switch`, `sched_waking` and `sched_wakeup` through perf events:
    /// where BTF tracepoints cannot be loaded.
    Tracepoints,
}

impl SchedMechanism {
    /// Whether the kernel skips these programs on a CPU while another task
    /// there is inside a BPF map system call (as
    /// [`crate::Attachment::skipped_during_map_calls`]): classic
    /// tracepoints do, BTF tracepoints have a guard of their own.
    #[doc(alias = "bpf_prog_active")]
    pub fn skipped_during_map_calls(self) -> bool {
        self == SchedMechanism::Tracepoints
    }

    /// A short name (`tp_btf`, `tracepoint`).
    pub fn as_str(self) -> &'static str {
        match self {
            SchedMechanism::BtfTracepoints => "tp_btf",
            SchedMechanism::Tracepoints => "tracepoint",
        }
    }
}

impl std::fmt::Display for SchedMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_is_in_ns_and_off_is_zero() {
        assert_eq!(SchedulerAccount::default().wait_min_ns(), 1_000_000);
        assert_eq!(
            SchedulerAccount::new().without_wait_spans().wait_min_ns(),
            0
        );
        assert_eq!(
            SchedulerAccount::new()
                .wait_spans_from(Duration::ZERO)
                .wait_min_ns(),
            1
        );
    }
}
