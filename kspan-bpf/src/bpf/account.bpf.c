// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The scheduler's account of application spans (see kspan.h). Two events:
 * a switch runs on the task that leaves the CPU, which is then current, so
 * its thread context names the span it leaves in; the switch-in of the
 * next task needs only what its own switch-out left by tid. A wake-up runs
 * on the waker (or in an interrupt), whose context names the span that
 * released the wait. Other processes' threads return at the first check:
 * their tgid (BTF tracepoints), or a hash miss on their tid (classic ones).
 *
 * This file holds the account's programs (sched_switch, sched_waking,
 * sched_wakeup; BTF and classic tracepoints), the wait records they emit,
 * and how a thread's wait is classified (its state, its system call, its
 * fault, the kernel's run-queue figures); its maps, and what its causes
 * (causes.bpf.c) share with it, are in sched.bpf.h. A file of the one
 * compilation unit, kspan.bpf.c (which includes it), not a unit of its own.
 */
#include "sched.bpf.h"

/* Each thread's open off-CPU interval, by tid's low bits (kspan.h); mapped by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KSPAN_SCHED_OPEN_SLOTS);
	__type(key, __u32);
	__type(value, struct kspan_sched_open);
} kspan_sched_open SEC(".maps");

static __always_inline struct kspan_sched_open *kspan_sched_open_of(__u32 tid)
{
	__u32 at = tid & (KSPAN_SCHED_OPEN_SLOTS - 1);

	return bpf_map_lookup_elem(&kspan_sched_open, &at);
}

/* Keeps the wait record's layout in the object's BTF for the Rust skeleton. */
struct kspan_wait_record kspan_wait_record_layout SEC(".bss.layout");

/* The task_struct fields the BTF tracepoints read; CO-RE relocates them. */
struct task_struct___sched {
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

/*
 * The scheduler's own run-queue clock (kernel/sched/stats.h): a task's
 * `sched_info.last_queued` is its run queue's clock when it was queued,
 * and the switch-in adds that clock's reading then, less it, to the
 * task's `run_delay` (schedstat, taskstats). The switch reads the clock
 * once, unless a wake-up that preempts (of an idle CPU, or of a task the
 * wakee outranks) asked it to reuse the reading of the wake-up's enqueue:
 * then the time from the enqueue to the switch (the interrupt's and the
 * idle loop's way out) is not run-queue time to the kernel but the
 * wakee's time on a CPU, and the task it preempts is queued from that
 * reading (its time since is run-queue time, not CPU time). The run queue is found through a task on it (its
 * scheduling entity's `cfs_rq`, with group scheduling). The tasks are the
 * tracepoint's, or the current task, read with plain loads the verifier
 * guards where the kernel gives typed task pointers (KSPAN_KF_TASK_BTF:
 * no helper call a switch), else through bpf_probe_read_kernel
 * (kspan_task_read).
 */
struct rq___kspan {
	__u64 clock;
	struct task_struct___rq *curr;
	__u64 prev_irq_time;
} __attribute__((preserve_access_index));

struct cfs_rq___kspan {
	struct rq___kspan *rq;
} __attribute__((preserve_access_index));

struct sched_entity___kspan {
	struct cfs_rq___kspan *cfs_rq;
} __attribute__((preserve_access_index));

struct sched_info___kspan {
	unsigned long long run_delay;
	unsigned long long last_queued;
} __attribute__((preserve_access_index));

struct task_struct___rq {
	int pid;
	struct sched_entity___kspan se;
	struct sched_info___kspan sched_info;
} __attribute__((preserve_access_index));

/*
 * The leaving task's own flags of why it waits (include/linux/sched.h):
 * set by io_schedule_prepare (in_iowait), psi_memstall_enter (in_memstall)
 * and delayacct_thrashing_start (in_thrashing), read where the kernel has
 * them. Bitfields: CO-RE gives each one's place in this kernel.
 */
struct task_struct___causes {
	unsigned in_iowait : 1;
	unsigned in_memstall : 1;
	unsigned in_thrashing : 1;
} __attribute__((preserve_access_index));

/* enum kspan_block_cause of a task leaving the CPU blocked. */
static __always_inline __u32 kspan_block_cause(struct kspan_sched_task *t, void *task)
{
	struct task_struct___causes *f = task;

	if (f && bpf_core_field_exists(f->in_memstall) && kspan_task_read_bits(f, in_memstall))
		return KSPAN_BLOCK_MEMORY;
	if (f && bpf_core_field_exists(f->in_thrashing) && kspan_task_read_bits(f, in_thrashing))
		return KSPAN_BLOCK_MEMORY;
	if (f && bpf_core_field_exists(f->in_iowait) && kspan_task_read_bits(f, in_iowait))
		return KSPAN_BLOCK_IO;
	if (t->lock_addr)
		return KSPAN_BLOCK_LOCK;
	return KSPAN_BLOCK_UNATTRIBUTED;
}

/*
 * The system call a task sleeps in: the number its entry saved in its user
 * registers (x86-64 `orig_ax`, arm64 `syscallno`). Only the fields' names
 * are given here: CO-RE finds them in this kernel's `struct pt_regs`.
 */
#if defined(__TARGET_ARCH_x86)
struct pt_regs___kspan {
	long orig_ax;
	long ax;
} __attribute__((preserve_access_index));
#elif defined(__TARGET_ARCH_arm64)
struct pt_regs___kspan {
	int syscallno;
} __attribute__((preserve_access_index));
#endif

static __always_inline long kspan_syscall_nr(void *task)
{
	long nr = -1;
#if defined(__TARGET_ARCH_x86)
	struct pt_regs___kspan *regs = kspan_task_regs(task);
	long ax = 0;

	/* In a system call its entry keeps -ENOSYS in `ax` until it returns. */
	if (regs && !bpf_core_read(&ax, sizeof(ax), &regs->ax) && ax == -38)
		bpf_core_read(&nr, sizeof(nr), &regs->orig_ax);
#elif defined(__TARGET_ARCH_arm64)
	struct pt_regs___kspan *regs = kspan_task_regs(task);
	int no = -1;

	if (regs)
		bpf_core_read(&no, sizeof(no), &regs->syscallno);
	nr = no;
#endif
	return nr;
}

/*
 * Whether a task leaving the CPU to wait is inside a page fault it took in
 * user space: its user registers are an exception's, not a system call's
 * (x86-64: `orig_ax` -1, which the exception entry writes over the error
 * code, where a system call keeps its number and an interrupt its vector's
 * complement; arm64: no system call number), and an exception that waits
 * is a fault (interrupts do not sleep). A fault inside a system call
 * (copying to a user buffer) is the call's.
 */
static __always_inline int kspan_in_user_fault(void *task)
{
#if defined(__TARGET_ARCH_x86)
	struct pt_regs___kspan *regs = kspan_task_regs(task);
	long orig_ax = 0;

	if (!regs || bpf_core_read(&orig_ax, sizeof(orig_ax), &regs->orig_ax))
		return 0;
	return orig_ax == -1;
#elif defined(__TARGET_ARCH_arm64)
	struct pt_regs___kspan *regs = kspan_task_regs(task);
	int no = 0;

	if (!regs || bpf_core_read(&no, sizeof(no), &regs->syscallno))
		return 0;
	return no == -1;
#else
	return 0;
#endif
}

/*
 * enum kspan_sleep_cause of a task leaving the CPU sleeping: a lock's
 * contention, else its system call's class. The numbers are each
 * architecture's ABI (arch/x86/entry/syscalls/syscall_64.tbl, and the
 * generic table arm64 uses).
 */
static __always_inline __u32 kspan_sleep_cause(struct kspan_sched_task *t, void *task)
{
	if (t->lock_addr)
		return KSPAN_SLEEP_LOCK;
	switch (kspan_syscall_nr(task)) {
#if defined(__TARGET_ARCH_x86)
	case 202: /* futex */
	case 449: /* futex_waitv */
		return KSPAN_SLEEP_FUTEX;
	case 7:	  /* poll */
	case 23:  /* select */
	case 232: /* epoll_wait */
	case 270: /* pselect6 */
	case 271: /* ppoll */
	case 281: /* epoll_pwait */
	case 426: /* io_uring_enter */
	case 441: /* epoll_pwait2 */
		return KSPAN_SLEEP_POLL;
	case 35:  /* nanosleep */
	case 230: /* clock_nanosleep */
		return KSPAN_SLEEP_TIMER;
	case 0:	  /* read */
	case 19:  /* readv */
	case 43:  /* accept */
	case 45:  /* recvfrom */
	case 47:  /* recvmsg */
	case 288: /* accept4 */
	case 299: /* recvmmsg */
		return KSPAN_SLEEP_RECEIVE;
#elif defined(__TARGET_ARCH_arm64)
	case 98:  /* futex */
	case 449: /* futex_waitv */
		return KSPAN_SLEEP_FUTEX;
	case 22:  /* epoll_pwait */
	case 72:  /* pselect6 */
	case 73:  /* ppoll */
	case 426: /* io_uring_enter */
	case 441: /* epoll_pwait2 */
		return KSPAN_SLEEP_POLL;
	case 101: /* nanosleep */
	case 115: /* clock_nanosleep */
		return KSPAN_SLEEP_TIMER;
	case 63:  /* read */
	case 65:  /* readv */
	case 202: /* accept */
	case 207: /* recvfrom */
	case 212: /* recvmsg */
	case 242: /* accept4 */
	case 243: /* recvmmsg */
		return KSPAN_SLEEP_RECEIVE;
#endif
	}
	return KSPAN_SLEEP_UNATTRIBUTED;
}

/* Not known (no group scheduling, no sched_info, or not this switch's task). */
#define KSPAN_QUEUED_UNKNOWN ((__u64)-1)

/*
 * How far the kernel's figures of an interval may reach before its
 * switch-out's tracepoint: to the run queue's last clock reading, which a
 * wake-up that preempts asks the switch not to renew (the scheduler's
 * tick renews it at least once a tick, 10 ms at HZ=100), or the switch's
 * own reading a path before the tracepoint.
 */
#define KSPAN_STALE_MOST_NS 10000000ULL

/* Whether the kernel's run-queue figures can be read (see above). */
static __always_inline int kspan_kernel_queue_known(struct task_struct___rq *task)
{
	return task && bpf_core_field_exists(task->se.cfs_rq) &&
	       bpf_core_field_exists(task->sched_info.last_queued) &&
	       bpf_core_field_exists(task->sched_info.run_delay);
}

/* The kernel's run-queue total of the task leaving this CPU. */
static __always_inline __u64 kspan_kernel_run_delay(struct task_struct___rq *prev)
{
	if (!kspan_kernel_queue_known(prev))
		return KSPAN_QUEUED_UNKNOWN;
	return kspan_task_read(prev, sched_info.run_delay);
}

/* This CPU's run queue, through the task `prev` leaving it; NULL: not known. */
static __always_inline struct rq___kspan *kspan_kernel_rq(struct task_struct___rq *prev)
{
	struct cfs_rq___kspan *cfs_rq;

	if (!kspan_kernel_queue_known(prev))
		return NULL;
	cfs_rq = kspan_task_read(prev, se.cfs_rq);
	if (!cfs_rq)
		return NULL;
	return kspan_task_read(cfs_rq, rq);
}

/*
 * The run queue's clock as the switch of the task `prev` leaving this CPU
 * read it: where the kernel stopped counting its CPU time.
 */
static __always_inline __u64 kspan_kernel_clock(struct task_struct___rq *prev)
{
	struct rq___kspan *rq = kspan_kernel_rq(prev);

	return rq ? kspan_task_read(rq, clock) : KSPAN_QUEUED_UNKNOWN;
}

/*
 * This CPU's interrupt time as of its run queue's last clock reading
 * (`prev_irq_time`, kernel/sched/core.c), where the kernel accounts
 * interrupt time apart (CONFIG_IRQ_TIME_ACCOUNTING): the clock the
 * kernel counts tasks' CPU time by (`clock_task`) leaves it out, so the
 * difference over a thread's time on the CPU, between the readings its
 * switch-in and its switch-out started and stopped its CPU time at, is
 * the interrupt time the kernel left out of it. 0: not accounted.
 */
static __always_inline __u64 kspan_kernel_irq_ns(struct task_struct___rq *prev)
{
	struct rq___kspan *rq;

	/* First: on a kernel without it the rest is left out at load. */
	if (!bpf_core_field_exists(struct rq___kspan, prev_irq_time))
		return 0;
	rq = kspan_kernel_rq(prev);
	return rq ? kspan_task_read(rq, prev_irq_time) : 0;
}

/*
 * The run-queue time the kernel's account gives the task `next_tid`
 * coming onto this CPU now, from the task `prev` leaving it, since its
 * switch-out, when its run-queue total was `run_delay_out`: what a move
 * between run queues added (sched_info_dequeue), and this run queue's
 * clock less when the task was queued on it. `queued_at`: that clock
 * reading when the task was queued where it is now and moved by no
 * dequeue since its switch-out (a woken task's enqueue), else
 * KSPAN_QUEUED_UNKNOWN.
 */
static __always_inline __u64 kspan_kernel_queued_ns(struct task_struct___rq *prev, __u32 next_tid,
						    __u64 run_delay_out, __u64 *queued_at)
{
	struct task_struct___rq *next;
	struct cfs_rq___kspan *cfs_rq;
	struct rq___kspan *rq;
	__u64 clock, queued, run_delay;

	if (run_delay_out == KSPAN_QUEUED_UNKNOWN || !kspan_kernel_queue_known(prev))
		return KSPAN_QUEUED_UNKNOWN;
	cfs_rq = kspan_task_read(prev, se.cfs_rq);
	if (!cfs_rq)
		return KSPAN_QUEUED_UNKNOWN;
	rq = kspan_task_read(cfs_rq, rq);
	if (!rq)
		return KSPAN_QUEUED_UNKNOWN;
	/* The scheduler names the task coming in before the tracepoint. */
	next = kspan_task_read(rq, curr);
	if (!next || (__u32)kspan_task_read(next, pid) != next_tid)
		return KSPAN_QUEUED_UNKNOWN;
	clock = kspan_task_read(rq, clock);
	queued = kspan_task_read(next, sched_info.last_queued);
	run_delay = kspan_task_read(next, sched_info.run_delay);
	if (!queued || queued > clock || run_delay < run_delay_out)
		return KSPAN_QUEUED_UNKNOWN;
	if (run_delay == run_delay_out)
		*queued_at = queued;
	return run_delay - run_delay_out + clock - queued;
}


/* Adds a finished off-CPU interval to its application span's totals. */
static __always_inline void kspan_sched_add(struct kspan_sched_task *t, __u64 off_ns,
					    __u64 run_queue_ns, int long_wait)
{
	struct kspan_sched_sum *s = kspan_sched_sum_of(t->app_span_id);

	if (!s)
		return;
	/* Atomically: one span may be current on several threads. */
	__sync_fetch_and_add(&s->run_queue_ns, run_queue_ns);
	if (t->state == KSPAN_SCHED_SLEEPING) {
		__sync_fetch_and_add(&s->sleeping_ns, off_ns);
		if (t->cause == KSPAN_SLEEP_LOCK)
			__sync_fetch_and_add(&s->sleeping_lock_ns, off_ns);
		else if (t->cause == KSPAN_SLEEP_FUTEX)
			__sync_fetch_and_add(&s->sleeping_futex_ns, off_ns);
		else if (t->cause == KSPAN_SLEEP_POLL)
			__sync_fetch_and_add(&s->sleeping_poll_ns, off_ns);
		else if (t->cause == KSPAN_SLEEP_TIMER)
			__sync_fetch_and_add(&s->sleeping_timer_ns, off_ns);
		else if (t->cause == KSPAN_SLEEP_RECEIVE)
			__sync_fetch_and_add(&s->sleeping_receive_ns, off_ns);
	} else if (t->state == KSPAN_SCHED_BLOCKED) {
		__sync_fetch_and_add(&s->blocked_ns, off_ns);
		if (t->cause == KSPAN_BLOCK_IO)
			__sync_fetch_and_add(&s->blocked_io_ns, off_ns);
		else if (t->cause == KSPAN_BLOCK_MEMORY)
			__sync_fetch_and_add(&s->blocked_memory_ns, off_ns);
		else if (t->cause == KSPAN_BLOCK_LOCK)
			__sync_fetch_and_add(&s->blocked_lock_ns, off_ns);
	} else if (t->state == KSPAN_SCHED_OTHER)
		__sync_fetch_and_add(&s->other_ns, off_ns);
	if (t->in_fault)
		__sync_fetch_and_add(&s->fault_ns, off_ns);
	if (t->voluntary)
		__sync_fetch_and_add(&s->voluntary, 1);
	else
		__sync_fetch_and_add(&s->involuntary, 1);
	if (long_wait)
		__sync_fetch_and_add(&s->waits, 1);
}

/*
 * The thread's open interval, found at its switch-out at `now`, lost its
 * switch-in: counted, and on the span it left in, so that that span says
 * its figures lack an interval and by how much at most.
 */
static __always_inline void kspan_sched_missed(struct kspan_sched_task *t, __u32 tid, __u64 now)
{
	struct kspan_sched_open *open = kspan_sched_open_of(tid);
	struct kspan_sched_sum *s;

	if (t->skip)
		return;
	kspan_count(KSPAN_CTR_SCHED_MISSED);
	/* Said on its span already, by user space as the span ended. */
	if (open && open->tid == tid && open->out_ns == (t->out_ns | KSPAN_SCHED_OPEN_CLAIMED))
		return;
	s = kspan_sched_sum_of(t->app_span_id);
	if (!s)
		return;
	__sync_fetch_and_add(&s->intervals_missed, 1);
	if (now > t->out_ns)
		__sync_fetch_and_add(&s->missed_ns, now - t->out_ns);
}

/*
 * A thread of the process leaves the CPU in `state`. With a span current
 * (and recordable), what its switch-in needs is kept by tid; with
 * `frames`, the kernel stack of the switch-out too (classic tracepoints:
 * at the switch-in the stack of the task coming in cannot be read).
 */
static __always_inline void kspan_sched_out(void *ctx, __u64 pid_tgid, __u32 state,
					    __u32 voluntary, int frames, void *task, __u64 now)
{
	struct kspan_thread_ctx c = {};
	struct kspan_sched_task *t;
	__u32 tid = (__u32)pid_tgid, skip = 0;

	if (!kspan_app_context(&c, pid_tgid)) {
		/*
		 * No span current: nothing to keep, but an interval still open
		 * is closed unseen, or its switch-in, when it comes, would
		 * charge this stretch (on a CPU, then off it under no span) to
		 * the span it left in.
		 */
		t = bpf_map_lookup_elem(&kspan_sched_tasks, &tid);
		if (t && t->out_ns) {
			kspan_sched_missed(t, tid, now);
			t->out_ns = 0;
		}
		if (t)
			t->irq_in = 0;
		/* An interval the chain's ring will not hold (kspan.h). */
		if (t)
			t->chain.unspanned_out_ns = now;
		return;
	}
	if (!*(__u64 *)c.trace_id && !*(__u64 *)&c.trace_id[8])
		skip = KSPAN_CTR_SUPPRESSED;
	else if (!(c.trace_flags & 1) && !kspan_cfg.keep_unsampled)
		skip = KSPAN_CTR_UNSAMPLED;
	t = kspan_sched_task_made(tid);
	if (!t)
		return;
	/* An interval still open: its switch-in was never seen. */
	if (t->out_ns)
		kspan_sched_missed(t, tid, now);
	/*
	 * The interrupt time the kernel left out of the thread's CPU time
	 * since its switch-in, to the span current now (a span that became
	 * current since, on this CPU without a switch, gets the whole).
	 */
	if (t->irq_in && !skip) {
		__u64 irq = kspan_kernel_irq_ns(task);
		struct kspan_sched_sum *s;

		if (irq > t->irq_in) {
			s = kspan_sched_sum_of(__builtin_bswap64(*(__u64 *)c.span_id));
			if (s)
				__sync_fetch_and_add(&s->irq_ns, irq - t->irq_in);
		}
	}
	t->irq_in = 0;
	__builtin_memcpy(t->trace_id, c.trace_id, sizeof(c.trace_id));
	t->app_span_id = __builtin_bswap64(*(__u64 *)c.span_id);
	t->state = state;
	t->cause = 0;
	t->in_fault = kspan_cfg.sched_causes && !skip &&
		      (state == KSPAN_SCHED_BLOCKED || state == KSPAN_SCHED_SLEEPING) &&
		      kspan_in_user_fault(task);
	if (kspan_cfg.sched_causes && state == KSPAN_SCHED_BLOCKED)
		t->cause = kspan_block_cause(t, task);
	else if (kspan_cfg.sched_causes && state == KSPAN_SCHED_SLEEPING && !skip)
		t->cause = kspan_sleep_cause(t, task);
	t->voluntary = voluntary;
	t->skip = skip;
	t->wake_ns = 0;
	t->request.complete_ns = 0;
	t->waker_wait.span_id = 0;
	t->waker_during.to_ns = 0;
	t->run_delay_out = kspan_kernel_run_delay(task);
	t->clock_out = kspan_kernel_clock(task);
	t->cpu_out = bpf_get_smp_processor_id();
	t->waker_kind = KSPAN_WAKER_NONE;
	t->nframes = 0;
	if (frames && !skip && kspan_cfg.wait_min_ns) {
		long n = bpf_get_stack(ctx, t->frames, sizeof(t->frames), 0);

		t->nframes = n > 0 ? n / 8 : 0;
	}
	/* Last: a wake-up on another CPU takes a thread with out_ns set as off CPU. */
	t->out_ns = now;
	if (!skip) {
		struct kspan_sched_open *open = kspan_sched_open_of(tid);

		if (open) {
			open->out_ns = now;
			open->span = t->app_span_id;
			/* Last, and a barrier: the slot is this thread's interval now. */
			kspan_publish(&open->tid, (__u64)tid);
		}
	}
}

/* The part of [lo, hi] inside [from, to]. */
static __always_inline __u64 kspan_overlap(__u64 lo, __u64 hi, __u64 from, __u64 to)
{
	if (lo < from)
		lo = from;
	if (hi > to)
		hi = to;
	return hi > lo ? hi - lo : 0;
}

/*
 * What a waker did over [from, to] (a wait it ends now, at `to`), from its
 * rings (`ch`, kspan.h), newest first: each interval's waiting and queued
 * parts inside the window by state and cause, each request's queued and
 * device parts. A ring read to its end, written over since `from`, leaves
 * the window's start uncovered: said in `uncovered_ns`, not guessed.
 */
static __always_inline void kspan_chain_sum(struct kspan_waker_during *d, struct kspan_chain *ch,
					    __u64 from, __u64 to)
{
	__u32 n = ch->waits_n, i;
	__u64 unspanned = ch->unspanned_out_ns, oldest = to, uncovered = 0;

	__builtin_memset(d, 0, sizeof(*d));
	if (to <= from)
		return;
	d->from_ns = from;
	d->to_ns = to;
	for (i = 0; i < KSPAN_CHAIN_WAITS && i < n; i++) {
		struct kspan_chain_wait *e = &ch->waits[(n - 1 - i) & (KSPAN_CHAIN_WAITS - 1)];
		__u64 out = e->out_ns, what = e->what, queued = e->queued_ns;
		__u64 waiting = what & KSPAN_CHAIN_WAITING_MASK, part;
		__u32 state = (what >> KSPAN_CHAIN_STATE_SHIFT) & 0xf;
		__u32 cause = what >> KSPAN_CHAIN_CAUSE_SHIFT;

		if (out + waiting + queued <= from) {
			/* Older ones end before it too: the window is covered. */
			oldest = from;
			break;
		}
		oldest = out;
		part = kspan_overlap(out, out + waiting, from, to);
		if (state == KSPAN_SCHED_BLOCKED && cause < KSPAN_BLOCK_CAUSES)
			d->blocked_ns[cause] += part;
		else if (state == KSPAN_SCHED_SLEEPING && cause < KSPAN_SLEEP_CAUSES)
			d->sleeping_ns[cause] += part;
		else if (state == KSPAN_SCHED_OTHER)
			d->other_ns += part;
		d->run_queue_ns +=
			kspan_overlap(out + waiting, out + waiting + queued, from, to);
	}
	if (n > KSPAN_CHAIN_WAITS && oldest > from)
		uncovered = oldest - from;
	/* Its last interval under no span, if it overlaps the window: in no ring. */
	if (unspanned && unspanned < to && (ch->unspanned_in_ns < unspanned ||
					    ch->unspanned_in_ns > from))
		d->flags |= KSPAN_DURING_UNSPANNED;
	n = *(volatile __u32 *)&ch->requests_n;
	oldest = to;
	for (i = 0; i < KSPAN_CHAIN_REQUESTS && i < n; i++) {
		struct kspan_chain_request *r =
			&ch->requests[(n - 1 - i) & (KSPAN_CHAIN_REQUESTS - 1)];
		__u64 held = r->held_ns, insert = r->insert_ns, issue = r->issue_ns;
		__u64 done = r->complete_ns;

		if (done <= from) {
			oldest = from;
			break;
		}
		oldest = done;
		if (!issue)
			issue = insert;
		if (done <= to)
			d->requests++;
		if (held)
			d->request_held_ns += kspan_overlap(held, insert, from, to);
		d->request_queue_ns += kspan_overlap(insert, issue, from, to);
		d->request_device_ns += kspan_overlap(issue, done, from, to);
	}
	/* Requests that completed in the window before the oldest kept may be lost. */
	if (n > KSPAN_CHAIN_REQUESTS && oldest > from && oldest - from > uncovered)
		uncovered = oldest - from;
	d->uncovered_ns = uncovered;
}

/*
 * Thread `tid` of the process comes back on a CPU: its interval since the
 * switch-out goes to the span it left in, and a long one becomes a wait
 * span, whole or counted. `next`: the task, where its stack can be read
 * (BTF tracepoints), else NULL (the stack of the switch-out is used).
 * `prev`: the task leaving the CPU, through which the kernel's own
 * run-queue figure is read.
 */
static __always_inline void kspan_sched_in(__u32 tid, __u32 tgid, void *next, void *prev,
					   __u64 now)
{
	struct kspan_sched_task *t = bpf_map_lookup_elem(&kspan_sched_tasks, &tid);
	struct kspan_wait_record *w;
	__u64 out, wake, run_from, queued, kernel_queued, off, queued_at = KSPAN_QUEUED_UNKNOWN;
	int long_wait;

	if (!t)
		return;
	t->irq_in = kspan_kernel_irq_ns(prev);
	if (!t->out_ns) {
		/* Back from an interval under no span (kspan.h: struct kspan_chain). */
		if (t->chain.unspanned_out_ns > t->chain.unspanned_in_ns)
			t->chain.unspanned_in_ns = now;
		return;
	}
	out = t->out_ns;
	t->out_ns = 0;
	{
		struct kspan_sched_open *open = kspan_sched_open_of(tid);

		if (open)
			kspan_cmpxchg(&open->tid, (__u64)tid, 0);
	}
	if (now < out)
		return;
	wake = t->wake_ns;
	/* Preempted: runnable from the switch-out. Not seen waking: all waiting. */
	if (t->state == KSPAN_SCHED_PREEMPTED)
		run_from = out;
	else if (wake >= out && wake <= now)
		run_from = wake;
	else
		run_from = now;
	long_wait = kspan_cfg.wait_min_ns && now - out >= kspan_cfg.wait_min_ns;
	/*
	 * The account's run-queue time is the kernel's (see above), so that
	 * the span's figures are schedstat's and taskstats': what the kernel
	 * counts as the task's CPU time stays out of the off-CPU figures, and
	 * what it counts as run-queue time out of the time on a CPU. The wait
	 * span keeps the times as they passed.
	 */
	queued = now - run_from;
	off = run_from == now ? 0 : run_from - out;
	kernel_queued = kspan_kernel_queued_ns(prev, tid, t->run_delay_out, &queued_at);
	if (kernel_queued != KSPAN_QUEUED_UNKNOWN) {
		/*
		 * The kernel's figure whole. A preempted task's began at the run
		 * queue's clock as the switch-out read it, which a wake-up that
		 * preempted it (KSPAN_STALE_MOST_NS) may have read before: the
		 * time from that reading to the switch is the task's run-queue
		 * time to the kernel, and not its CPU time, so it is the
		 * account's run-queue time too (the span's on-CPU time is the
		 * less by it). A woken task's began at its enqueue, before its
		 * sched_wakeup: its time off CPU ends there (below).
		 */
		__u64 most = now - out + KSPAN_STALE_MOST_NS;

		queued = kernel_queued < most ? kernel_queued : most;
	}
	if (t->state != KSPAN_SCHED_PREEMPTED &&
	    (run_from == now || queued > now - out || off > now - out - queued))
		off = now - out > queued ? now - out - queued : 0;
	/*
	 * A woken task's time off CPU as the kernel has it: from the run
	 * queue's clock where its switch-out stopped its CPU time to the
	 * clock of its enqueue, where its run-queue time (or, when the
	 * wake-up preempted, its CPU time) began. The tracepoints run a path
	 * away from either reading (the pick of the next task and an idle
	 * CPU's balancing before the switch-out's; the enqueue, and a remote
	 * CPU's rescheduling interrupt sent by the waker, before
	 * sched_wakeup's), which the kernel counts as CPU time: a
	 * microsecond a wait natively, several in a VM where the interrupt
	 * exits to the hypervisor. Both readings of one run queue: a kernel
	 * whose clock is not stable across CPUs (an emulated guest's) keeps
	 * one clock a CPU, and a wait that ends on another CPU keeps the
	 * tracepoints' bounds.
	 */
	if (t->state != KSPAN_SCHED_PREEMPTED && queued_at != KSPAN_QUEUED_UNKNOWN &&
	    t->clock_out != KSPAN_QUEUED_UNKNOWN && queued_at >= t->clock_out &&
	    t->cpu_out == bpf_get_smp_processor_id()) {
		/*
		 * Whole, as the run-queue time: the path before the switch-out's
		 * tracepoint (from its clock reading) is the thread's own time
		 * in the span it leaves in, off CPU to the kernel. An emulated
		 * guest runs that path tens of times slower (measured in
		 * Debian's 6.1 under QEMU: up to 0.47 ms a wait with classic
		 * tracepoints).
		 */
		__u64 room = now - out + KSPAN_STALE_MOST_NS;

		room = room > queued ? room - queued : 0;
		off = queued_at - t->clock_out < room ? queued_at - t->clock_out : room;
	}
	if (!t->skip)
		kspan_sched_add(t, off, queued, long_wait);
	if (kspan_cfg.sched_causes)
		kspan_chain_wait_add(t, out, off, queued);
	if (!long_wait)
		return;
	if (t->skip) {
		kspan_count(t->skip);
		return;
	}
	if (kspan_overloaded(1)) {
		kspan_count(KSPAN_CTR_OVERLOAD);
		return;
	}
	w = bpf_ringbuf_reserve(&kspan_events, sizeof(*w), 0);
	if (!w) {
		kspan_count(KSPAN_CTR_RINGBUF_FULL);
		return;
	}
	__builtin_memcpy(w->rec.trace_id, t->trace_id, sizeof(w->rec.trace_id));
	w->rec.span_id = kspan_new_id();
	w->rec.parent_span_id = t->app_span_id;
	w->rec.start_ns = out;
	w->rec.end_ns = now;
	w->rec.ret = 0;
	w->rec.probe_id = KSPAN_WAIT_PROBE_ID;
	w->rec.pid = tgid;
	w->rec.tid = tid;
	w->rec.flags = KSPAN_REC_WAIT;
	w->rec.descendants_dropped = 0;
	w->wake_ns = run_from;
	w->state = t->state;
	w->cause = t->cause;
	w->lock_addr = 0;
	w->lock_flags = 0;
	w->in_fault = t->in_fault;
	__builtin_memcpy(&w->request, &t->request, sizeof(w->request));
	w->waker_kind = t->waker_kind;
	w->waker_pid = t->waker_pid;
	w->waker_tid = t->waker_tid;
	__builtin_memcpy(w->waker_comm, t->waker_comm, sizeof(w->waker_comm));
	__builtin_memcpy(w->waker_trace_id, t->waker_trace_id, sizeof(w->waker_trace_id));
	w->waker_span_id = t->waker_span_id;
	__builtin_memcpy(&w->waker_wait, &t->waker_wait, sizeof(w->waker_wait));
	__builtin_memcpy(&w->waker_during, &t->waker_during, sizeof(w->waker_during));
	w->waker_nframes = t->waker_nframes <= KSPAN_WAKER_FRAMES ? t->waker_nframes : 0;
	__builtin_memcpy(w->waker_frames, t->waker_frames, sizeof(w->waker_frames));
	if (next) {
		long n = bpf_get_task_stack(next, w->frames, sizeof(w->frames), 0);

		w->nframes = n > 0 ? n / 8 : 0;
	} else {
		__u64 n = t->nframes;

		w->nframes = n <= KSPAN_WAIT_FRAMES ? n : 0;
		__builtin_memcpy(w->frames, t->frames, sizeof(w->frames));
	}
	/* A hop for the chains of the waits this thread ends next. */
	if (kspan_cfg.sched_causes &&
	    (t->state == KSPAN_SCHED_SLEEPING || t->state == KSPAN_SCHED_BLOCKED)) {
		t->last_wait.span_id = w->rec.span_id;
		__builtin_memcpy(t->last_wait.trace_id, t->trace_id, sizeof(t->trace_id));
		t->last_wait.end_ns = now;
		t->last_wait.waiting_ns = run_from - out;
		t->last_wait.state = t->state;
		t->last_wait.cause = t->cause;
	}
	kspan_submit_span(w);
}


/*
 * A blocked I/O wait of `t` woken now: the request whose completion on
 * this CPU came just before, if one did.
 */
static __always_inline void kspan_block_woken(struct kspan_sched_task *t)
{
	__u32 zero = 0;
	struct kspan_block_done *done = bpf_map_lookup_elem(&kspan_block_done, &zero);

	if (t->request.complete_ns)
		return;
	if (done && done->complete_ns && t->wake_ns >= done->complete_ns &&
	    t->wake_ns - done->complete_ns <= KSPAN_BLOCK_LINK_NS)
		__builtin_memcpy(&t->request, done, sizeof(t->request));
}

/*
 * Thread `tid` of the process is being woken, by the current task or an
 * interrupt: the first wake-up of an interval is kept, with who made it.
 * `interrupt`: 1 when the program is known to run in an interrupt, 0 when
 * known not to, -1 when not known (user space tells from the waker's
 * stack).
 */
static __always_inline void kspan_sched_waking(void *ctx, __u32 tid, int interrupt)
{
	struct kspan_sched_task *t = bpf_map_lookup_elem(&kspan_sched_tasks, &tid);
	struct kspan_thread_ctx c = {};
	__u64 pid_tgid;

	if (!t || !t->out_ns || t->waker_kind != KSPAN_WAKER_NONE)
		return;
	/* Until its sched_wakeup says when it was queued. */
	t->wake_ns = bpf_ktime_get_ns();
	t->waker_nframes = 0;
	if (kspan_cfg.sched_causes && t->state == KSPAN_SCHED_BLOCKED && t->cause == KSPAN_BLOCK_IO)
		kspan_block_woken(t);
	if (interrupt > 0) {
		t->waker_kind = KSPAN_WAKER_INTERRUPT;
		return;
	}
	/*
	 * Not known: the waker's stack, for user space to tell an interrupt (a
	 * timer, a device, a softirq) from the task it interrupted (the
	 * kernel's per-CPU preempt count is not readable on kernels without
	 * KALLSYMS_ALL). About 1.5 us a wake-up, so only where the interval
	 * is a wait span already (a shorter one becomes one only by its time
	 * on the run queue after this); BTF tracepoints tell by the stack
	 * their program runs on instead.
	 */
	if (interrupt < 0) {
		long n;

		if (!kspan_cfg.wait_min_ns || t->wake_ns - t->out_ns < kspan_cfg.wait_min_ns) {
			t->waker_kind = KSPAN_WAKER_UNKNOWN;
			return;
		}
		n = bpf_get_stack(ctx, t->waker_frames, sizeof(t->waker_frames), 0);
		t->waker_nframes = n > 0 ? n / 8 : 0;
	}
	pid_tgid = bpf_get_current_pid_tgid();
	t->waker_kind = KSPAN_WAKER_TASK;
	t->waker_pid = pid_tgid >> 32;
	t->waker_tid = (__u32)pid_tgid;
	bpf_get_current_comm(t->waker_comm, sizeof(t->waker_comm));
	t->waker_span_id = 0;
	/* The waker's own last wait, when it waited past this wait's start. */
	if (kspan_cfg.sched_causes && (__u32)(pid_tgid >> 32) == kspan_cfg.target_tgid) {
		__u32 waker = (__u32)pid_tgid;
		struct kspan_sched_task *k = bpf_map_lookup_elem(&kspan_sched_tasks, &waker);

		if (k && k->last_wait.span_id && k->last_wait.end_ns >= t->out_ns)
			__builtin_memcpy(&t->waker_wait, &k->last_wait, sizeof(t->waker_wait));
		/*
		 * What it did over this wait, for a wait a wait span's length
		 * already: read now, as the waker may exit (and its entry go)
		 * before the waiter runs; only for those, so that the many
		 * short waits of a busy process pay one compare.
		 */
		if (k && kspan_cfg.wait_min_ns && t->wake_ns - t->out_ns >= kspan_cfg.wait_min_ns)
			kspan_chain_sum(&t->waker_during, &k->chain, t->out_ns, t->wake_ns);
	}
	if (kspan_app_context(&c, pid_tgid) && c.span_id[0] | c.span_id[1] | c.span_id[2] |
	    c.span_id[3] | c.span_id[4] | c.span_id[5] | c.span_id[6] | c.span_id[7]) {
		__builtin_memcpy(t->waker_trace_id, c.trace_id, sizeof(c.trace_id));
		t->waker_span_id = __builtin_bswap64(*(__u64 *)c.span_id);
	}
}

/*
 * Thread `tid` of the process is on a run queue again (sched_wakeup: on
 * the CPU that queues it, which for a remote wake-up is the wakee's, in
 * the IPI): its run-queue time starts now, as the scheduler's own
 * run_delay does, not at the waking (the IPI's latency is not queued
 * time).
 */
static __always_inline void kspan_sched_wakeup(__u32 tid)
{
	struct kspan_sched_task *t = bpf_map_lookup_elem(&kspan_sched_tasks, &tid);
	__u64 now;

	if (!t || !t->out_ns)
		return;
	now = bpf_ktime_get_ns();
	if (now >= t->out_ns)
		t->wake_ns = now;
}


/* Raw task states (include/linux/sched.h) and the states sched_switch reports. */
#define KSPAN_TASK_INTERRUPTIBLE 0x1
#define KSPAN_TASK_UNINTERRUPTIBLE 0x2
#define KSPAN_TASK_DEAD 0x80
#define KSPAN_TASK_NOLOAD 0x400
/* Reported: EXIT_DEAD, EXIT_ZOMBIE; TASK_REPORT_MAX (0x100) and above for a preemption. */
#define KSPAN_REPORT_EXITING 0x30
#define KSPAN_REPORT_MAX 0x100

/*
 * sched_switch's BTF prototype since Linux 5.18, whose last argument is
 * the raw state `prev` leaves in, as the scheduler read it before taking
 * the task off its run queue.
 */
typedef void (*btf_trace_sched_switch___kspan)(void *, _Bool, struct task_struct *,
					       struct task_struct *, unsigned int);

/* A task's raw state: `__state` since Linux 5.14, `state` before. */
struct task_struct___state {
	unsigned int __state;
} __attribute__((preserve_access_index));

struct task_struct___state_old {
	long state;
} __attribute__((preserve_access_index));

/* What the scheduler noted of a task as it took it off its run queue. */
struct task_struct___dequeued {
	int on_rq;
	unsigned sched_contributes_to_load : 1;
} __attribute__((preserve_access_index));

/*
 * Where the switch's tracepoint gives the state `prev` waits in as read
 * at the tracepoint (before Linux 5.18: its raw state read there, or the
 * classic tracepoint's report of it), a waker on another CPU may have set
 * it waking meanwhile (TASK_WAKING, reported as running): a task the
 * scheduler took off its run queue (`on_rq` 0) waits all the same, and
 * blocked exactly when the scheduler counted it to the load as it took
 * it off (`sched_contributes_to_load`: uninterruptible, not NOLOAD). Its
 * state then, or -1 where it is still on its run queue (it runs on).
 */
static __always_inline int kspan_dequeued_state(void *prev)
{
	struct task_struct___dequeued *t = prev;

	if (!prev || !bpf_core_field_exists(t->sched_contributes_to_load) ||
	    BPF_CORE_READ(t, on_rq))
		return -1;
	return BPF_CORE_READ_BITFIELD_PROBED(t, sched_contributes_to_load) ? KSPAN_SCHED_BLOCKED
									      : KSPAN_SCHED_SLEEPING;
}

/* `prev`'s raw state as its switch's BTF tracepoint runs (see above). */
static __always_inline __u32 kspan_raw_state(void *prev)
{
	struct task_struct___state *t = prev;
	struct task_struct___state_old *old = prev;

	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return (__u32)BPF_CORE_READ(old, state);
}

/*
 * sched_switch as a BTF tracepoint (raw arguments: whether `prev` was
 * preempted and, since Linux 5.18, its raw state; before, its state is
 * read from it).
 */
SEC("tp_btf/sched_switch")
int BPF_PROG(kspan_tp_sched_switch, _Bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	/*
	 * First: the scheduler charges what runs from here on to the task
	 * coming in (its clock started before the tracepoint), so the switch
	 * is this instant for both tasks.
	 */
	__u64 now = bpf_ktime_get_ns();
	struct task_struct___sched *p = (void *)prev, *n = (void *)next;
	__u32 target = kspan_cfg.target_tgid;

	if (p->tgid == target && kspan_sched_enabled()) {
		__u64 pid_tgid = ((__u64)target << 32) | (__u32)p->pid;
		__u32 state, prev_state, from_arg = bpf_core_type_matches(btf_trace_sched_switch___kspan);
		int dequeued;

		/* The argument is read only where the prototype has it. */
		prev_state = from_arg ? (__u32)ctx[3] : kspan_raw_state(prev);
		if (prev_state & KSPAN_TASK_DEAD) {
			__u32 tid = p->pid;

			bpf_map_delete_elem(&kspan_sched_tasks, &tid);
		} else {
			if (preempt)
				state = KSPAN_SCHED_PREEMPTED;
			else if (prev_state & KSPAN_TASK_UNINTERRUPTIBLE)
				state = prev_state & KSPAN_TASK_NOLOAD ? KSPAN_SCHED_OTHER
								       : KSPAN_SCHED_BLOCKED;
			else if (prev_state & KSPAN_TASK_INTERRUPTIBLE)
				state = KSPAN_SCHED_SLEEPING;
			else if (!from_arg && (dequeued = kspan_dequeued_state(prev)) >= 0)
				state = dequeued;
			else if (!prev_state)
				state = KSPAN_SCHED_PREEMPTED;
			else
				state = KSPAN_SCHED_OTHER;
			kspan_sched_out(ctx, pid_tgid, state, state != KSPAN_SCHED_PREEMPTED, 0,
					prev, now);
		}
	}
	if (n->tgid == target)
		kspan_sched_in(n->pid, target, next, prev, now);
	return 0;
}

/*
 * Whether the current task is in the kernel by an interrupt taken in user
 * space, and perhaps still in it: x86-64 runs such an interrupt on the
 * task's own (empty) kernel stack, so a frame's place there does not tell
 * the interrupt from the task. Its entry frame does: user mode, with no
 * system call or fault number (-1).
 */
static __always_inline int kspan_entered_from_user_by_interrupt(struct task_struct *task)
{
#if defined(__TARGET_ARCH_x86)
	struct pt_regs *regs = kspan_task_regs(task);
	long orig_rax = 0;
	__u64 cs = 0;

	if (!regs)
		return 0;
	bpf_probe_read_kernel(&orig_rax, sizeof(orig_rax), &regs->orig_rax);
	bpf_probe_read_kernel(&cs, sizeof(cs), &regs->cs);
	return (cs & 3) == 3 && orig_rax < 0;
#else
	return 0;
#endif
}

SEC("tp_btf/sched_waking")
int BPF_PROG(kspan_tp_sched_waking, struct task_struct *p)
{
	struct task_struct___sched *t = (void *)p;
	struct task_struct *current;
	int interrupt;

	if (t->tgid != kspan_cfg.target_tgid)
		return 0;
	/*
	 * The arguments are in the tracepoint's frame: on an interrupt's stack
	 * (hard interrupts, and softirqs, which x86-64 and arm64 run there
	 * unless in ksoftirqd) or on the task's kernel stack, where an
	 * interrupt taken in user space runs too on x86-64: then (or in what
	 * the task does on its way back to user space) the stack tells.
	 */
	current = kspan_current_task();
	if (!kspan_call_of(ctx, current))
		interrupt = 1;
	else if (kspan_entered_from_user_by_interrupt(current))
		interrupt = -1;
	else
		interrupt = 0;
	kspan_sched_waking(ctx, t->pid, interrupt);
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(kspan_tp_sched_wakeup, struct task_struct *p)
{
	struct task_struct___sched *t = (void *)p;

	if (t->tgid == kspan_cfg.target_tgid)
		kspan_sched_wakeup(t->pid);
	return 0;
}

/*
 * The same as classic tracepoints (sched:sched_switch, sched:sched_waking),
 * their records as the formats under tracefs lay them out (the runtime
 * checks the offsets): the reported state of `prev`, and tids only.
 */
struct kspan_sched_switch_args {
	__u64 common;
	char prev_comm[16];
	__s32 prev_pid;
	__s32 prev_prio;
	__s64 prev_state;
	char next_comm[16];
	__s32 next_pid;
	__s32 next_prio;
};

struct kspan_sched_waking_args {
	__u64 common;
	char comm[16];
	__s32 pid;
	__s32 prio;
	__s32 target_cpu;
};

SEC("tracepoint/sched/sched_switch")
int kspan_sched_switch(struct kspan_sched_switch_args *args)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 target = kspan_cfg.target_tgid;
	void *task = kspan_current_task();

	if ((__u32)(pid_tgid >> 32) == target && kspan_sched_enabled()) {
		__s64 reported = args->prev_state;
		__u32 tid = (__u32)pid_tgid, state;
		int dequeued;

		if (reported & KSPAN_REPORT_EXITING) {
			bpf_map_delete_elem(&kspan_sched_tasks, &tid);
		} else {
			if (reported >= KSPAN_REPORT_MAX)
				state = KSPAN_SCHED_PREEMPTED;
			else if (!reported && (dequeued = kspan_dequeued_state(task)) >= 0)
				state = dequeued;
			else if (!reported)
				state = KSPAN_SCHED_PREEMPTED;
			else if (reported & KSPAN_TASK_UNINTERRUPTIBLE)
				state = KSPAN_SCHED_BLOCKED;
			else if (reported & KSPAN_TASK_INTERRUPTIBLE)
				state = KSPAN_SCHED_SLEEPING;
			else
				state = KSPAN_SCHED_OTHER;
			kspan_sched_out(args, pid_tgid, state,
					state != KSPAN_SCHED_PREEMPTED, 1, task, now);
		}
	}
	kspan_sched_in((__u32)args->next_pid, target, NULL, task, now);
	return 0;
}

SEC("tracepoint/sched/sched_waking")
int kspan_sched_waking_tp(struct kspan_sched_waking_args *args)
{
	kspan_sched_waking(args, (__u32)args->pid, -1);
	return 0;
}

/* sched_wakeup has sched_waking's format. */
SEC("tracepoint/sched/sched_wakeup")
int kspan_sched_wakeup_tp(struct kspan_sched_waking_args *args)
{
	kspan_sched_wakeup((__u32)args->pid);
	return 0;
}
