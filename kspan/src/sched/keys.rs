// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The account's attribute keys: on each application span ([`attributes`],
//! with the causes [`cause_attributes`]) and on each wait span
//! ([`wait_attributes`]).

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
    /// Nanoseconds the CPUs spent in interrupts while the span's threads
    /// ran there, where the kernel accounts interrupt time apart
    /// (CONFIG_IRQ_TIME_ACCOUNTING) and leaves it out of their CPU time:
    /// out of [`ON_CPU_NS`] too, so that the figures and this add up to
    /// [`CURRENT_NS`]. Set only when not 0; elsewhere interrupt time is in
    /// `on_cpu_ns`, as it is in the kernel's own CPU time of the thread
    /// (`Kspan::scheduler_interrupt_time` says which). Charged to the
    /// span current when the thread left the CPU.
    pub const INTERRUPTS_NS: &str = "kspan.sched.interrupts_ns";
}

/// The attribute keys of the causes, on each application span, with
/// [`SchedulerAccount::with_causes`](crate::SchedulerAccount::with_causes). Each split closes: its parts plus its
/// `unattributed_ns` equal the whole. An attribute that is 0 is left out
/// of the span: absent reads as 0.
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
    /// Of those, the requests blk-throttle held before their insert (a
    /// cgroup's `io.max`, or cgroup v1's `blkio.throttle.*`): bios the
    /// span's threads submitted, which the throttle's kernel worker
    /// dispatched later, and so issued (they are the span's all the same).
    pub const BLOCK_HELD_REQUESTS: &str = "kspan.block.held.requests";
    /// Their time held: from the throttle's hold of each one's first bio
    /// to its insert (or issue). Not in `queue_ns`, which starts at the
    /// insert: a request's whole way is held, queued, then on the device.
    pub const BLOCK_HELD_NS: &str = "kspan.block.held_ns";
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
    /// Its time held by blk-throttle before the insert: only on a request
    /// the throttle held.
    pub const REQUEST_HELD_NS: &str = "kspan.block.request.held_ns";
    /// The cgroup whose limit held it (its name: the last component of its
    /// path, the first 31 bytes).
    pub const REQUEST_HELD_BY: &str = "kspan.block.request.held_by.cgroup";
    /// That cgroup's id (the inode number of its directory under the
    /// cgroup file system; on v2, its `cgroup.id` as bpftool and systemd
    /// name it).
    pub const REQUEST_HELD_BY_ID: &str = "kspan.block.request.held_by.cgroup_id";
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
    /// On a `waker` link (with the causes on, the waker a thread of the
    /// process, the wait already a wait span's length at its wake-up):
    /// nanoseconds the waker's time and this wait overlap, from the wait's
    /// switch-out to its wake-up (its [`WAITING_NS`] less the few
    /// microseconds from the wake-up to its queueing). The `kspan.waker.*`
    /// figures after it say what the waker did over that overlap, each the
    /// part of the waker's own intervals inside it: `on_cpu_ns +
    /// run_queue_ns +` the blocked and sleeping parts `+ other_off_cpu_ns +
    /// uncovered_ns = overlap_ns`. Where the waker waited too, its
    /// `waker_wait` link is its last wait; these are all of them.
    pub const WAKER_OVERLAP_NS: &str = "kspan.waker.overlap_ns";
    /// Of [`WAKER_OVERLAP_NS`], the rest: the waker on a CPU, or not
    /// followed yet (a thread is followed from its first switch-out under
    /// a span).
    pub const WAKER_ON_CPU_NS: &str = "kspan.waker.on_cpu_ns";
    /// Of it, the waker runnable, on a run queue.
    pub const WAKER_RUN_QUEUE_NS: &str = "kspan.waker.run_queue_ns";
    /// Of it, the waker blocked on I/O, as [`super::cause_attributes::BLOCKED_IO_NS`]
    /// (each part below only when not 0).
    pub const WAKER_BLOCKED_IO_NS: &str = "kspan.waker.blocked.io_ns";
    /// Blocked, stalled on memory.
    pub const WAKER_BLOCKED_MEMORY_NS: &str = "kspan.waker.blocked.memory_ns";
    /// Blocked in a kernel lock's contention.
    pub const WAKER_BLOCKED_LOCK_NS: &str = "kspan.waker.blocked.lock_ns";
    /// Blocked, the rest.
    pub const WAKER_BLOCKED_UNATTRIBUTED_NS: &str = "kspan.waker.blocked.unattributed_ns";
    /// Sleeping in a kernel lock's contention.
    pub const WAKER_SLEEPING_LOCK_NS: &str = "kspan.waker.sleeping.lock_ns";
    /// Sleeping in a futex.
    pub const WAKER_SLEEPING_FUTEX_NS: &str = "kspan.waker.sleeping.futex_ns";
    /// Sleeping in a poll.
    pub const WAKER_SLEEPING_POLL_NS: &str = "kspan.waker.sleeping.poll_ns";
    /// Sleeping in a timer.
    pub const WAKER_SLEEPING_TIMER_NS: &str = "kspan.waker.sleeping.timer_ns";
    /// Sleeping in a receive.
    pub const WAKER_SLEEPING_RECEIVE_NS: &str = "kspan.waker.sleeping.receive_ns";
    /// Sleeping, the rest.
    pub const WAKER_SLEEPING_UNATTRIBUTED_NS: &str = "kspan.waker.sleeping.unattributed_ns";
    /// Off CPU in another state (stopped, idle).
    pub const WAKER_OTHER_OFF_CPU_NS: &str = "kspan.waker.other_off_cpu_ns";
    /// The first nanoseconds of the overlap that no figure covers: the
    /// waker's last 16 off-CPU intervals (or its last 8 block requests),
    /// which the account keeps, began after them. Only when not 0: the
    /// figures are then short by up to this much, and say so.
    pub const WAKER_UNCOVERED_NS: &str = "kspan.waker.uncovered_ns";
    /// `true` when the waker left a CPU outside any application span
    /// during the overlap: that interval is in no figure (counted in
    /// `on_cpu_ns`). Absent otherwise.
    pub const WAKER_UNSPANNED: &str = "kspan.waker.unspanned";
    /// Block requests the waker issued that completed in the overlap
    /// (with the block figures below, only when its requests were in it).
    pub const WAKER_BLOCK_REQUESTS: &str = "kspan.waker.block.requests";
    /// Its requests' time held back by blk-throttle before their insert
    /// (from their first bio's hold) inside the overlap.
    pub const WAKER_BLOCK_HELD_NS: &str = "kspan.waker.block.held_ns";
    /// Its requests' time queued (insert to issue) inside the overlap.
    pub const WAKER_BLOCK_QUEUE_NS: &str = "kspan.waker.block.queue_ns";
    /// Its requests' time on the device (issue to completion) inside the
    /// overlap.
    pub const WAKER_BLOCK_DEVICE_NS: &str = "kspan.waker.block.device_ns";
    /// The waking task's process id.
    pub const WAKER_PID: &str = "kspan.sched.waker.pid";
    /// The waking task's thread id.
    pub const WAKER_TID: &str = "kspan.sched.waker.tid";
    /// The waking task's name (`comm`).
    pub const WAKER_COMM: &str = "kspan.sched.waker.comm";
}
