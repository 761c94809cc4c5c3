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
//! is queued (a remote wake-up's IPI is waiting, not queued). The run-queue
//! time is the scheduler's own (`run_delay`, which schedstat and taskstats
//! report), read at the switch-in: the thread's run queue's clock less
//! when it was queued, plus what a move between run queues added. The
//! scheduler reads that clock once a switch, and not at all at a switch a
//! wake-up asked for by preempting (of an idle CPU, or of a task the
//! thread outranks): there it reuses the wake-up's reading, so the way out
//! of the interrupt and of the idle loop is the thread's CPU time to the
//! kernel, and so to the account. At the switch-in the interval is added
//! to the span's totals (a table user space maps, by span id) and, when
//! long, emitted as a wait record into the ring buffer like any span:
//! overload, a full ring, an unsampled or suppressed span are counted as
//! for every other record; the wait span keeps the times as they passed. The time a span was current is measured in
//! user space at every context switch ([`crate::context`]); its time on a
//! CPU is that less its off-CPU time. Threads of other processes return at
//! the first check of every program.

use std::time::Duration;

use opentelemetry::KeyValue;

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
    /// then stay 0 and the time is in the remainders).
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

/// The attribute keys of the account, on each application span.
pub mod attributes {
    /// Nanoseconds on a CPU while the span was current.
    pub const ON_CPU_NS: &str = "kspan.sched.on_cpu_ns";
    /// Nanoseconds runnable, waiting for a CPU (run-queue latency: from a
    /// wake-up or a preemption to the switch-in), as the scheduler counts
    /// it (`run_delay`; see the module's documentation).
    pub const RUN_QUEUE_NS: &str = "kspan.sched.run_queue_ns";
    /// Nanoseconds blocked uninterruptibly (`D`).
    pub const BLOCKED_NS: &str = "kspan.sched.blocked_ns";
    /// Nanoseconds sleeping interruptibly (`S`).
    pub const SLEEPING_NS: &str = "kspan.sched.sleeping_ns";
    /// Nanoseconds off CPU in any other state (stopped, traced, idle).
    pub const OTHER_OFF_CPU_NS: &str = "kspan.sched.other_off_cpu_ns";
    /// Nanoseconds the span was a thread's current context, on all of
    /// them: the sum of the four above and `other_off_cpu_ns`.
    pub const CURRENT_NS: &str = "kspan.sched.current_ns";
    /// Context switches of kind `voluntary` (the thread blocked or slept),
    /// named after the semantic conventions' `process.context_switch.type`.
    pub const VOLUNTARY_SWITCHES: &str = "kspan.sched.context_switches.voluntary";
    /// Context switches of kind `involuntary` (preempted).
    pub const INVOLUNTARY_SWITCHES: &str = "kspan.sched.context_switches.involuntary";
    /// Off-CPU intervals at least the wait-span threshold long.
    pub const WAITS: &str = "kspan.sched.waits";
    /// Off-CPU intervals of the span whose switch-in the kernel did not
    /// report (the thread's next switch-out found them open): each was
    /// counted as time on a CPU, and its context switch not at all. Set
    /// only when not 0. Its figures are then bounds: `on_cpu_ns` may be
    /// too high and the off-CPU figures too low by up to [`MISSED_NS`]
    /// together, and the switch counts short by up to this many. A miss is
    /// found at the thread's next switch-out, or, when the span ends on
    /// that thread first, by the thread itself as it ends the span; one
    /// of a thread where the span does not end that switches out only
    /// after the span ended is in
    /// [`Stats::sched_intervals_missed`](crate::Stats::sched_intervals_missed)
    /// alone (every miss is counted there).
    pub const INTERVALS_MISSED: &str = "kspan.sched.intervals_missed";
    /// With [`INTERVALS_MISSED`]: the time from each such interval's
    /// switch-out to the switch-out that found it open (or to the span's
    /// end), summed; the most the figures can be off by.
    pub const MISSED_NS: &str = "kspan.sched.missed_ns";
}

/// The attribute keys of the causes, on each application span, with
/// [`SchedulerAccount::with_causes`]. Each split closes: its parts plus its
/// `unattributed_ns` equal the whole.
pub mod cause_attributes {
    /// Of [`super::attributes::BLOCKED_NS`], waiting on I/O: the thread
    /// blocked through `io_schedule` (the kernel's `in_iowait`, what delay
    /// accounting's block-I/O delay counts): its own block I/O, or a page
    /// or buffer whose I/O is in flight.
    pub const BLOCKED_IO_NS: &str = "kspan.sched.blocked.io_ns";
    /// Of `blocked_ns`, stalled on memory: blocked while the kernel marked
    /// the thread in a memory stall or thrashing (`in_memstall`,
    /// `in_thrashing`: direct reclaim, compaction, a refault's wait,
    /// `memory.high`'s throttle). Off CPU only: the reclaim work itself is
    /// time on a CPU.
    pub const BLOCKED_MEMORY_NS: &str = "kspan.sched.blocked.memory_ns";
    /// Of `blocked_ns`, inside a kernel lock's contention (a mutex, an
    /// rwsem; `lock:contention_begin` to `_end`).
    pub const BLOCKED_LOCK_NS: &str = "kspan.sched.blocked.lock_ns";
    /// Of `blocked_ns`, the rest (a network file system's reply, a
    /// completion, ...): `io_ns + memory_ns + lock_ns + unattributed_ns =
    /// blocked_ns`, always.
    pub const BLOCKED_UNATTRIBUTED_NS: &str = "kspan.sched.blocked.unattributed_ns";
    /// Of [`super::attributes::SLEEPING_NS`], inside a kernel lock's
    /// contention (an interruptible mutex or rwsem).
    pub const SLEEPING_LOCK_NS: &str = "kspan.sched.sleeping.lock_ns";
    /// Of `sleeping_ns`, in `futex` (user-space locks, condition
    /// variables, joins).
    pub const SLEEPING_FUTEX_NS: &str = "kspan.sched.sleeping.futex_ns";
    /// Of `sleeping_ns`, in `poll`, `select`, `epoll_wait` or
    /// `io_uring_enter`: waiting for readiness (an idle event loop).
    pub const SLEEPING_POLL_NS: &str = "kspan.sched.sleeping.poll_ns";
    /// Of `sleeping_ns`, in `nanosleep` or `clock_nanosleep`.
    pub const SLEEPING_TIMER_NS: &str = "kspan.sched.sleeping.timer_ns";
    /// Of `sleeping_ns`, in `read`, `readv`, `recv*` or `accept`: waiting
    /// for data or a connection (a socket, a pipe).
    pub const SLEEPING_RECEIVE_NS: &str = "kspan.sched.sleeping.receive_ns";
    /// Of `sleeping_ns`, the rest (a signal wait, another system call):
    /// the five above and this sum to `sleeping_ns`, always.
    pub const SLEEPING_UNATTRIBUTED_NS: &str = "kspan.sched.sleeping.unattributed_ns";
    /// Kernel mutex contention: nanoseconds from each contention's begin
    /// to its end (spinning on a CPU, then blocked), summed.
    pub const LOCK_MUTEX_NS: &str = "kspan.lock.mutex.wait_ns";
    /// Kernel mutex contentions.
    pub const LOCK_MUTEX_COUNT: &str = "kspan.lock.mutex.contentions";
    /// Read-write semaphore contention (percpu ones too), as for mutexes.
    pub const LOCK_RWSEM_NS: &str = "kspan.lock.rwsem.wait_ns";
    /// Read-write semaphore contentions.
    pub const LOCK_RWSEM_COUNT: &str = "kspan.lock.rwsem.contentions";
    /// Spinning lock contention (spinlocks, rwlocks): on a CPU throughout.
    pub const LOCK_SPIN_NS: &str = "kspan.lock.spin.wait_ns";
    /// Spinning lock contentions.
    pub const LOCK_SPIN_COUNT: &str = "kspan.lock.spin.contentions";
    /// Other kernel lock contention (semaphores).
    pub const LOCK_OTHER_NS: &str = "kspan.lock.other.wait_ns";
    /// Other kernel lock contentions.
    pub const LOCK_OTHER_COUNT: &str = "kspan.lock.other.contentions";
    /// Block requests the span's threads issued while it was current
    /// (`block_rq_insert` or `_issue` on the thread) and that completed:
    /// its own reads and writes that reached a device. Writeback and other
    /// threads' I/O on its behalf (a page another thread reads in) are not
    /// the span's.
    pub const BLOCK_REQUESTS: &str = "kspan.block.requests";
    /// Their bytes.
    pub const BLOCK_BYTES: &str = "kspan.block.bytes";
    /// Their time queued: from the insert into the queue to the issue to
    /// the driver (0 for a request issued at once).
    pub const BLOCK_QUEUE_NS: &str = "kspan.block.queue_ns";
    /// Their time on the device: from the issue to the completion.
    pub const BLOCK_DEVICE_NS: &str = "kspan.block.device_ns";
    /// The same by device, one line each (`vda: 3 requests, 12288 bytes,
    /// queued 0 ns, on the device 30412345 ns`): the first two devices the
    /// span used, then `other devices`. Only where it issued any.
    pub const BLOCK_BY_DEVICE: &str = "kspan.block.by_device";
    /// Page faults the span's threads took while it was current that
    /// needed no I/O (the kernel's own per-thread count, as
    /// `getrusage(RUSAGE_THREAD)`'s `ru_minflt`).
    pub const FAULTS_MINOR: &str = "kspan.fault.minor";
    /// Those that needed I/O (`ru_majflt`): a page read from a file or
    /// swap.
    pub const FAULTS_MAJOR: &str = "kspan.fault.major";
    /// Nanoseconds off CPU inside page faults taken in user space (blocked
    /// or sleeping until the page came): the major faults' waits. Part of
    /// `blocked_ns` and `sleeping_ns` (a fault's I/O wait is also in
    /// `blocked.io_ns`).
    pub const FAULT_WAIT_NS: &str = "kspan.fault.wait_ns";
    /// Nanoseconds the span's threads spent reclaiming memory themselves
    /// (the page allocator's direct reclaim, a cgroup's reclaim at
    /// `memory.high` or `memory.max`), from each reclaim's begin to its
    /// end, on a CPU or off it: what delay accounting's `freepages` delay
    /// counts for direct reclaim. Its time off CPU is also in
    /// `blocked.memory_ns`, or elsewhere in `blocked_ns`/`sleeping_ns`.
    pub const MEMORY_RECLAIM_NS: &str = "kspan.memory.reclaim_ns";
    /// Those reclaims.
    pub const MEMORY_RECLAIMS: &str = "kspan.memory.reclaims";
    /// Nanoseconds in direct compaction, as reclaim.
    pub const MEMORY_COMPACTION_NS: &str = "kspan.memory.compaction_ns";
    /// Those compactions.
    pub const MEMORY_COMPACTIONS: &str = "kspan.memory.compactions";
}

/// The attribute keys of a wait span.
pub mod wait_attributes {
    /// `preempted`, `sleeping`, `blocked` or `other`; `lock` for a kernel
    /// lock's contention (with the causes on; its time may be partly on a
    /// CPU, spinning).
    pub const STATE: &str = "kspan.sched.state";
    /// With the causes on, for a `blocked` wait: `io`, `memory`, `lock` or
    /// `unattributed` (see [`super::cause_attributes::BLOCKED_IO_NS`] and
    /// those after it).
    pub const BLOCK_CAUSE: &str = "kspan.sched.blocked.cause";
    /// With the causes on, for a `sleeping` wait: `lock`, `futex`,
    /// `poll`, `timer`, `receive` or `unattributed`.
    pub const SLEEP_CAUSE: &str = "kspan.sched.sleeping.cause";
    /// A `lock` wait (a kernel lock's contention): `mutex`, `rwsem`,
    /// `spin` or `other`.
    pub const LOCK_KIND: &str = "kspan.lock.kind";
    /// A `lock` wait: `read` or `write` for an rwsem or rwlock.
    pub const LOCK_ACCESS: &str = "kspan.lock.access";
    /// A `lock` wait: the lock's kernel address, in hex.
    pub const LOCK_ADDRESS: &str = "kspan.lock.address";
    /// A `lock` wait: the kernel symbol the lock is, or is in, where
    /// `/proc/kallsyms` has one (a static lock: `rtnl_mutex`); locks inside
    /// allocated objects (an inode's) have none.
    pub const LOCK_SYMBOL: &str = "kspan.lock.symbol";
    /// A `lock` wait on a mutex or a write-held rwsem: its owner's process
    /// id as the contention began (a link goes to the owner's application
    /// span when it is a thread of this process inside one).
    pub const LOCK_OWNER_PID: &str = "kspan.lock.owner.pid";
    /// The owner's thread id.
    pub const LOCK_OWNER_TID: &str = "kspan.lock.owner.tid";
    /// The owner's name (`comm`).
    pub const LOCK_OWNER_COMM: &str = "kspan.lock.owner.comm";
    /// A `blocked` wait (cause `io`) whose wake-up came from a block
    /// request's completion: the request's device (`vda`).
    pub const REQUEST_DEVICE: &str = "kspan.block.request.device";
    /// Its first sector (512 bytes each, on the whole disk).
    pub const REQUEST_SECTOR: &str = "kspan.block.request.sector";
    /// Its bytes.
    pub const REQUEST_BYTES: &str = "kspan.block.request.bytes";
    /// Its time queued (insert to issue).
    pub const REQUEST_QUEUE_NS: &str = "kspan.block.request.queue_ns";
    /// Its time on the device (issue to completion).
    pub const REQUEST_DEVICE_NS: &str = "kspan.block.request.device_ns";
    /// With the causes on, a `blocked` or `sleeping` wait inside a page
    /// fault taken in user space: `true` (absent otherwise).
    pub const IN_FAULT: &str = "kspan.sched.in_fault";
    /// Nanoseconds of the span waiting for the wake-up (0 for a preemption).
    pub const WAITING_NS: &str = "kspan.sched.waiting_ns";
    /// Nanoseconds from the wake-up (or preemption) to the switch-in.
    pub const RUN_QUEUE_NS: &str = "kspan.sched.run_queue_ns";
    /// The kernel stack at the switch-out, innermost first, scheduler
    /// frames left out: `do_nanosleep <- hrtimer_nanosleep <- ...`
    /// (the semantic conventions' `code.stacktrace`).
    pub const STACK: &str = "code.stacktrace";
    /// `task`, `interrupt`, `none` (a preemption, or not seen), or
    /// `unknown`: a task or an interrupt, not told apart (classic
    /// tracepoints, or an interrupt taken in user space on x86-64, for a
    /// wait shorter than the wait-span threshold at its wake-up, which
    /// became a wait span by its time on the run queue).
    pub const WAKER_KIND: &str = "kspan.sched.waker";
    /// On each link of a wait span, what the linked span is to the wait:
    /// `waker` (the application span of the thread that woke it), `owner`
    /// (a kernel lock wait's owner's application span) or `waker_wait`
    /// (with the causes on, the waker's own last wait span, when the waker
    /// waited until after this wait began: the next hop of the chain of
    /// wake-ups, which links on to its own waker and its waker's wait, and
    /// so on back to an interrupt, a timer, a device or another process).
    /// A `waker_wait`
    /// link carries that wait's `kspan.sched.state`, its cause and its
    /// `kspan.sched.waiting_ns`, so a chain reads hop by hop from the links
    /// alone. Only waits long enough to be wait spans are hops.
    pub const LINK: &str = "kspan.link";
    /// The waking task's process id.
    pub const WAKER_PID: &str = "kspan.sched.waker.pid";
    /// The waking task's thread id.
    pub const WAKER_TID: &str = "kspan.sched.waker.tid";
    /// The waking task's name (`comm`).
    pub const WAKER_COMM: &str = "kspan.sched.waker.comm";
}

/// What the kernel summed for one application span (`struct kspan_sched_sum`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedTotals {
    /// Runnable, waiting for a CPU.
    pub run_queue_ns: u64,
    /// Off CPU, sleeping (`S`).
    pub sleeping_ns: u64,
    /// Off CPU, blocked (`D`).
    pub blocked_ns: u64,
    /// Off CPU otherwise.
    pub other_ns: u64,
    /// Voluntary context switches.
    pub voluntary: u64,
    /// Involuntary context switches.
    pub involuntary: u64,
    /// Off-CPU intervals at least the wait-span threshold long.
    pub waits: u64,
    /// Off-CPU intervals whose switch-in was not seen
    /// ([`attributes::INTERVALS_MISSED`]).
    pub intervals_missed: u64,
    /// The most the figures can be off by for those
    /// ([`attributes::MISSED_NS`]).
    pub missed_ns: u64,
    /// Of `blocked_ns`, waiting on I/O ([`cause_attributes::BLOCKED_IO_NS`]).
    pub blocked_io_ns: u64,
    /// Of `blocked_ns`, stalled on memory
    /// ([`cause_attributes::BLOCKED_MEMORY_NS`]).
    pub blocked_memory_ns: u64,
    /// Of `blocked_ns`, in a kernel lock's contention.
    pub blocked_lock_ns: u64,
    /// Of `sleeping_ns`, by cause: kernel locks, futexes, polling,
    /// timers, receiving ([`cause_attributes::SLEEPING_LOCK_NS`] and those
    /// after it).
    pub sleeping_lock_ns: u64,
    /// See `sleeping_lock_ns`.
    pub sleeping_futex_ns: u64,
    /// See `sleeping_lock_ns`.
    pub sleeping_poll_ns: u64,
    /// See `sleeping_lock_ns`.
    pub sleeping_timer_ns: u64,
    /// See `sleeping_lock_ns`.
    pub sleeping_receive_ns: u64,
    /// Kernel lock contention time by kind: mutex, rwsem, spin, other.
    pub lock_ns: [u64; 4],
    /// Kernel lock contentions by kind, as `lock_ns`.
    pub locks: [u64; 4],
    /// Block requests issued under the span, by device: the devices (the
    /// kernel's `dev_t`, 0 for none), the first two the span used; then
    /// per row (those two, and the rest together) the requests completed,
    /// their bytes, time queued and time on the device.
    pub block_devices: [u64; 2],
    /// See `block_devices`.
    pub block_requests: [u64; 3],
    /// See `block_devices`.
    pub block_bytes: [u64; 3],
    /// See `block_devices`.
    pub block_queue_ns: [u64; 3],
    /// See `block_devices`.
    pub block_device_ns: [u64; 3],
    /// Off CPU inside page faults taken in user space
    /// ([`cause_attributes::FAULT_WAIT_NS`]).
    pub fault_ns: u64,
    /// Memory stalls the span's threads spent in themselves: reclaim, then
    /// compaction ([`cause_attributes::MEMORY_RECLAIM_NS`]), time and count.
    pub memory_ns: [u64; 2],
    /// See `memory_ns`.
    pub memory_stalls: [u64; 2],
}

impl SchedTotals {
    /// From the kernel's words (`struct kspan_sched_sum`).
    pub(crate) fn from_words(words: &[u64]) -> Self {
        let word = |i: usize| words.get(i).copied().unwrap_or(0);
        SchedTotals {
            run_queue_ns: word(0),
            sleeping_ns: word(1),
            blocked_ns: word(2),
            other_ns: word(3),
            voluntary: word(4),
            involuntary: word(5),
            waits: word(6),
            intervals_missed: word(7),
            missed_ns: word(8),
            blocked_io_ns: word(9),
            blocked_memory_ns: word(10),
            blocked_lock_ns: word(11),
            sleeping_lock_ns: word(12),
            sleeping_futex_ns: word(13),
            sleeping_poll_ns: word(14),
            sleeping_timer_ns: word(15),
            sleeping_receive_ns: word(16),
            lock_ns: [word(17), word(18), word(19), word(20)],
            locks: [word(21), word(22), word(23), word(24)],
            block_devices: [word(25), word(26)],
            block_requests: [word(27), word(28), word(29)],
            block_bytes: [word(30), word(31), word(32)],
            block_queue_ns: [word(33), word(34), word(35)],
            block_device_ns: [word(36), word(37), word(38)],
            fault_ns: word(39),
            memory_ns: [word(40), word(41)],
            memory_stalls: [word(42), word(43)],
        }
    }

    /// Off CPU in total, run queue included.
    pub fn off_cpu_ns(&self) -> u64 {
        self.run_queue_ns + self.sleeping_ns + self.blocked_ns + self.other_ns
    }

    /// The span's attributes, given how long it was current (`current_ns`):
    /// on a CPU is that less the time off CPU (never below 0: the two
    /// clocks are read a few hundred ns apart at each switch), and, when
    /// intervals were missed, how many and by how much the figures may be
    /// off; with `causes`, the splits by cause ([`cause_attributes`]).
    pub fn attributes(&self, current_ns: u64, causes: bool) -> Vec<KeyValue> {
        let current = current_ns.max(self.off_cpu_ns());
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let mut attrs = vec![
            KeyValue::new(attributes::ON_CPU_NS, n(current - self.off_cpu_ns())),
            KeyValue::new(attributes::RUN_QUEUE_NS, n(self.run_queue_ns)),
            KeyValue::new(attributes::BLOCKED_NS, n(self.blocked_ns)),
            KeyValue::new(attributes::SLEEPING_NS, n(self.sleeping_ns)),
            KeyValue::new(attributes::OTHER_OFF_CPU_NS, n(self.other_ns)),
            KeyValue::new(attributes::CURRENT_NS, n(current)),
            KeyValue::new(attributes::VOLUNTARY_SWITCHES, n(self.voluntary)),
            KeyValue::new(attributes::INVOLUNTARY_SWITCHES, n(self.involuntary)),
            KeyValue::new(attributes::WAITS, n(self.waits)),
        ];
        if self.intervals_missed > 0 {
            attrs.push(KeyValue::new(
                attributes::INTERVALS_MISSED,
                n(self.intervals_missed),
            ));
            attrs.push(KeyValue::new(attributes::MISSED_NS, n(self.missed_ns)));
        }
        if causes {
            attrs.extend(self.cause_attributes());
        }
        attrs
    }

    /// The splits by cause, each with its remainder.
    fn cause_attributes(&self) -> Vec<KeyValue> {
        use cause_attributes as a;
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let blocked_parts = self.blocked_io_ns + self.blocked_memory_ns + self.blocked_lock_ns;
        let sleeping_parts = self.sleeping_lock_ns
            + self.sleeping_futex_ns
            + self.sleeping_poll_ns
            + self.sleeping_timer_ns
            + self.sleeping_receive_ns;
        let mut attrs = vec![
            KeyValue::new(a::BLOCKED_IO_NS, n(self.blocked_io_ns)),
            KeyValue::new(a::BLOCKED_MEMORY_NS, n(self.blocked_memory_ns)),
            KeyValue::new(a::BLOCKED_LOCK_NS, n(self.blocked_lock_ns)),
            KeyValue::new(
                a::BLOCKED_UNATTRIBUTED_NS,
                n(self.blocked_ns.saturating_sub(blocked_parts)),
            ),
            KeyValue::new(a::SLEEPING_LOCK_NS, n(self.sleeping_lock_ns)),
            KeyValue::new(a::SLEEPING_FUTEX_NS, n(self.sleeping_futex_ns)),
            KeyValue::new(a::SLEEPING_POLL_NS, n(self.sleeping_poll_ns)),
            KeyValue::new(a::SLEEPING_TIMER_NS, n(self.sleeping_timer_ns)),
            KeyValue::new(a::SLEEPING_RECEIVE_NS, n(self.sleeping_receive_ns)),
            KeyValue::new(
                a::SLEEPING_UNATTRIBUTED_NS,
                n(self.sleeping_ns.saturating_sub(sleeping_parts)),
            ),
        ];
        let kinds = [
            (a::LOCK_MUTEX_NS, a::LOCK_MUTEX_COUNT),
            (a::LOCK_RWSEM_NS, a::LOCK_RWSEM_COUNT),
            (a::LOCK_SPIN_NS, a::LOCK_SPIN_COUNT),
            (a::LOCK_OTHER_NS, a::LOCK_OTHER_COUNT),
        ];
        for (i, (ns, count)) in kinds.into_iter().enumerate() {
            attrs.push(KeyValue::new(ns, n(self.lock_ns[i])));
            attrs.push(KeyValue::new(count, n(self.locks[i])));
        }
        attrs.extend([
            KeyValue::new(a::MEMORY_RECLAIM_NS, n(self.memory_ns[0])),
            KeyValue::new(a::MEMORY_RECLAIMS, n(self.memory_stalls[0])),
            KeyValue::new(a::MEMORY_COMPACTION_NS, n(self.memory_ns[1])),
            KeyValue::new(a::MEMORY_COMPACTIONS, n(self.memory_stalls[1])),
        ]);
        let total = |rows: &[u64; 3]| n(rows.iter().sum());
        attrs.extend([
            KeyValue::new(a::BLOCK_REQUESTS, total(&self.block_requests)),
            KeyValue::new(a::BLOCK_BYTES, total(&self.block_bytes)),
            KeyValue::new(a::BLOCK_QUEUE_NS, total(&self.block_queue_ns)),
            KeyValue::new(a::BLOCK_DEVICE_NS, total(&self.block_device_ns)),
        ]);
        let rows: Vec<String> = (0..3)
            .filter(|&row| self.block_requests[row] > 0)
            .map(|row| {
                let device = match self.block_devices.get(row) {
                    Some(&dev) => crate::kernel::block::device_name(dev),
                    None => "other devices".to_owned(),
                };
                format!(
                    "{device}: {} requests, {} bytes, queued {} ns, on the device {} ns",
                    self.block_requests[row],
                    self.block_bytes[row],
                    self.block_queue_ns[row],
                    self.block_device_ns[row]
                )
            })
            .collect();
        if !rows.is_empty() {
            let rows: Vec<opentelemetry::StringValue> = rows.into_iter().map(Into::into).collect();
            attrs.push(KeyValue::new(
                a::BLOCK_BY_DEVICE,
                opentelemetry::Value::Array(rows.into()),
            ));
        }
        attrs
    }
}

/// The page fault attributes of a span: the kernel's counts of its time
/// current, and its time off CPU in faults.
pub(crate) fn fault_attributes(minor: u64, major: u64, wait_ns: u64) -> [KeyValue; 3] {
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    [
        KeyValue::new(cause_attributes::FAULTS_MINOR, n(minor)),
        KeyValue::new(cause_attributes::FAULTS_MAJOR, n(major)),
        KeyValue::new(cause_attributes::FAULT_WAIT_NS, n(wait_ns)),
    ]
}

/// The name of a blocked wait's cause (`enum kspan_block_cause`).
pub(crate) fn block_cause_name(cause: u32) -> &'static str {
    use kspan_bpf::consts as c;
    match u64::from(cause) {
        c::KSPAN_BLOCK_IO => "io",
        c::KSPAN_BLOCK_MEMORY => "memory",
        c::KSPAN_BLOCK_LOCK => "lock",
        _ => "unattributed",
    }
}

/// The name of a sleeping wait's cause (`enum kspan_sleep_cause`).
pub(crate) fn sleep_cause_name(cause: u32) -> &'static str {
    use kspan_bpf::consts as c;
    match u64::from(cause) {
        c::KSPAN_SLEEP_LOCK => "lock",
        c::KSPAN_SLEEP_FUTEX => "futex",
        c::KSPAN_SLEEP_POLL => "poll",
        c::KSPAN_SLEEP_TIMER => "timer",
        c::KSPAN_SLEEP_RECEIVE => "receive",
        _ => "unattributed",
    }
}

/// The name of a kernel lock's kind (`enum kspan_lock_kind`).
pub(crate) fn lock_kind_name(kind: u32) -> &'static str {
    use kspan_bpf::consts as c;
    match u64::from(kind) {
        c::KSPAN_LOCK_MUTEX => "mutex",
        c::KSPAN_LOCK_RWSEM => "rwsem",
        c::KSPAN_LOCK_SPIN => "spin",
        _ => "other",
    }
}

/// The name of a wait state (`enum kspan_sched_state`).
pub(crate) fn state_name(state: u32) -> &'static str {
    use kspan_bpf::consts as c;
    match u64::from(state) {
        c::KSPAN_SCHED_PREEMPTED => "preempted",
        c::KSPAN_SCHED_SLEEPING => "sleeping",
        c::KSPAN_SCHED_BLOCKED => "blocked",
        c::KSPAN_SCHED_LOCK => "lock",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_cpu_is_the_current_time_less_the_off_cpu_time() {
        let totals = SchedTotals {
            run_queue_ns: 5,
            sleeping_ns: 50,
            blocked_ns: 20,
            other_ns: 0,
            voluntary: 3,
            involuntary: 1,
            waits: 2,
            blocked_io_ns: 12,
            blocked_memory_ns: 3,
            blocked_lock_ns: 1,
            sleeping_futex_ns: 30,
            sleeping_timer_ns: 15,
            lock_ns: [7, 0, 0, 0],
            locks: [1, 2, 0, 0],
            ..SchedTotals::default()
        };
        let attrs = totals.attributes(100, true);
        let value = |attrs: &[KeyValue], key: &str| {
            attrs
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.clone())
        };
        let int = |v: i64| Some(opentelemetry::Value::I64(v));
        assert_eq!(value(&attrs, attributes::ON_CPU_NS), int(25));
        assert_eq!(value(&attrs, attributes::CURRENT_NS), int(100));
        // Blocked and sleeping by cause: the rest of each unattributed.
        assert_eq!(value(&attrs, cause_attributes::BLOCKED_IO_NS), int(12));
        assert_eq!(value(&attrs, cause_attributes::BLOCKED_MEMORY_NS), int(3));
        assert_eq!(value(&attrs, cause_attributes::BLOCKED_LOCK_NS), int(1));
        assert_eq!(
            value(&attrs, cause_attributes::BLOCKED_UNATTRIBUTED_NS),
            int(4)
        );
        assert_eq!(value(&attrs, cause_attributes::SLEEPING_FUTEX_NS), int(30));
        assert_eq!(value(&attrs, cause_attributes::SLEEPING_TIMER_NS), int(15));
        assert_eq!(
            value(&attrs, cause_attributes::SLEEPING_UNATTRIBUTED_NS),
            int(5)
        );
        assert_eq!(value(&attrs, cause_attributes::LOCK_MUTEX_NS), int(7));
        assert_eq!(value(&attrs, cause_attributes::LOCK_RWSEM_COUNT), int(2));
        // A current time below the off-CPU time (clock skew) is raised to it.
        assert_eq!(
            value(&totals.attributes(60, true), attributes::ON_CPU_NS),
            int(0)
        );
        // No interval missed: no word of it; the causes off: none of them.
        // No block request: no line by device.
        assert_eq!(attrs.len(), 9 + 10 + 8 + 4 + 4);
        assert_eq!(totals.attributes(100, false).len(), 9);
        let missed = SchedTotals {
            intervals_missed: 1,
            missed_ns: 30,
            ..totals
        };
        let attrs = missed.attributes(100, false);
        let get = |k: &str| {
            attrs
                .iter()
                .find(|kv| kv.key.as_str() == k)
                .map(|kv| kv.value.clone())
        };
        assert_eq!(
            get(attributes::INTERVALS_MISSED),
            Some(opentelemetry::Value::I64(1))
        );
        assert_eq!(
            get(attributes::MISSED_NS),
            Some(opentelemetry::Value::I64(30))
        );
    }

    #[test]
    fn totals_read_the_kernel_layout() {
        let words: Vec<u64> = (1u64..=44).collect();
        let t = SchedTotals::from_words(&words);
        assert_eq!((t.run_queue_ns, t.waits), (1, 7));
        assert_eq!((t.intervals_missed, t.missed_ns), (8, 9));
        assert_eq!((t.blocked_io_ns, t.blocked_memory_ns), (10, 11));
        assert_eq!((t.blocked_lock_ns, t.sleeping_lock_ns), (12, 13));
        assert_eq!((t.sleeping_futex_ns, t.sleeping_receive_ns), (14, 17));
        assert_eq!((t.lock_ns, t.locks), ([18, 19, 20, 21], [22, 23, 24, 25]));
        assert_eq!(t.block_devices, [26, 27]);
        assert_eq!(
            (t.block_requests, t.block_device_ns),
            ([28, 29, 30], [37, 38, 39])
        );
        assert_eq!(
            std::mem::size_of::<kspan_bpf::types::kspan_sched_sum>(),
            words.len() * 8
        );
        // The slot: the span id and the tag, then the totals.
        assert_eq!(
            std::mem::size_of::<kspan_bpf::types::kspan_sched_slot>(),
            16 + words.len() * 8
        );
    }

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
