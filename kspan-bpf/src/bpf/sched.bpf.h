/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What the scheduler's account (account.bpf.c) and its causes
 * (causes.bpf.c) share: the threads' entries, the per-span totals, the
 * last block request completed on each CPU, and the helpers that find or
 * make them. Part of the one compilation unit, kspan.bpf.c.
 */
#ifndef KSPAN_SCHED_BPF_H
#define KSPAN_SCHED_BPF_H

#include "core.bpf.h"

/*
 * `ptr->field` of a task (or of what a task points to): a typed load
 * where the program's task pointers are typed (KSPAN_KF_TASK_BTF), else a
 * CO-RE read through bpf_probe_read_kernel (kernels before 5.11 give only
 * the current task's address). A tracepoint's own task arguments are typed
 * on every kernel, but go the same way: the account reads them only for
 * the process's own switches.
 */
#define kspan_task_read(ptr, field)                                                        \
	(kspan_has(KSPAN_KF_TASK_BTF) ? (ptr)->field : BPF_CORE_READ(ptr, field))

/* The same for a bitfield (BPF_CORE_READ_BITFIELD). */
#define kspan_task_read_bits(ptr, field)                                                   \
	(kspan_has(KSPAN_KF_TASK_BTF) ? BPF_CORE_READ_BITFIELD(ptr, field)                 \
				       : BPF_CORE_READ_BITFIELD_PROBED(ptr, field))

/* Only the size of the kernel's struct pt_regs is needed here. */
struct pt_regs___size {
	long unused;
} __attribute__((preserve_access_index));

/*
 * A task's user registers, saved by its entry into the kernel: through
 * bpf_task_pt_regs where the kernel has it (KSPAN_KF_TASK_PT_REGS), else
 * found where that helper finds them, at the top of the task's kernel
 * stack (task_pt_regs() of x86-64 and arm64: the stack's base plus
 * THREAD_SIZE, less a struct pt_regs). NULL: not known. Read them with
 * bpf_probe_read_kernel (or bpf_core_read).
 */
static __always_inline void *kspan_task_regs(void *task)
{
	struct task_struct___kspan *t = task;
	void *stack;

	if (kspan_has(KSPAN_KF_TASK_PT_REGS) && kspan_has(KSPAN_KF_TASK_BTF))
		return (void *)bpf_task_pt_regs(task);
	if (!task)
		return NULL;
	stack = BPF_CORE_READ(t, stack);
	if (!stack)
		return NULL;
	return stack + KSPAN_THREAD_SIZE - bpf_core_type_size(struct pt_regs___size);
}

/*
 * Each thread's entry, by tid (kspan.h): what its switch-in, its wake-up
 * and its causes need of its switch-out.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KSPAN_SCHED_TASKS_MAX);
	__type(key, __u32);
	__type(value, struct kspan_sched_task);
} kspan_sched_tasks SEC(".maps");

/*
 * Per application span: taken by user space when the span ends (a table
 * it maps: see kspan.h).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KSPAN_SUMS_MAX);
	__type(key, __u32);
	__type(value, struct kspan_sched_slot);
} kspan_sched_spans SEC(".maps");

/*
 * On each CPU, the last block request to complete (see kspan.h), for the
 * wake-up its completion makes next: written by the causes' block
 * programs, read by the account's sched_waking.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kspan_block_done);
} kspan_block_done SEC(".maps");

/*
 * Thread `tid`'s entry, made all zero if it has none (from kspan_zero,
 * which is larger: the entry is too big for the stack); NULL: no room.
 */
static __always_inline struct kspan_sched_task *kspan_sched_task_made(__u32 tid)
{
	struct kspan_sched_task *t = bpf_map_lookup_elem(&kspan_sched_tasks, &tid);
	__u32 zero = 0;
	void *fresh;

	if (t)
		return t;
	fresh = bpf_map_lookup_elem(&kspan_zero, &zero);
	if (!fresh)
		return NULL;
	bpf_map_update_elem(&kspan_sched_tasks, &tid, fresh, BPF_NOEXIST);
	return bpf_map_lookup_elem(&kspan_sched_tasks, &tid);
}

/*
 * The application span the current thread of the process records under
 * now (its id as a number, into `span`, and its context into `c`): 0 when
 * it has none, or one that suppresses telemetry or is not sampled (unless
 * unsampled spans are kept).
 */
static __always_inline int kspan_recorded_span(struct kspan_thread_ctx *c, __u64 pid_tgid,
					       __u64 *span)
{
	if (!kspan_app_context(c, pid_tgid))
		return 0;
	if (!*(__u64 *)c->trace_id && !*(__u64 *)&c->trace_id[8])
		return 0;
	if (!(c->trace_flags & 1) && !kspan_cfg.keep_unsampled)
		return 0;
	*span = __builtin_bswap64(*(__u64 *)c->span_id);
	return 1;
}

/* The totals of application span `key`, made on first use; NULL: no room. */
static __always_inline struct kspan_sched_sum *kspan_sched_sum_of(__u64 key)
{
	__u32 first = kspan_table_hash(key, 1), i;

	for (i = 0; i < KSPAN_TABLE_PROBES; i++) {
		__u32 at = (first + i) & (KSPAN_SUMS_MAX - 1);
		struct kspan_sched_slot *slot = bpf_map_lookup_elem(&kspan_sched_spans, &at);

		if (!slot)
			break;
		if (*(volatile __u64 *)&slot->span == key && *(volatile __u64 *)&slot->tag == 1)
			return &slot->sum;
		if (kspan_table_claim(&slot->span, key)) {
			__builtin_memset(&slot->sum, 0, sizeof(slot->sum));
			/* Last, and a barrier: only now may others add here. */
			kspan_publish(&slot->tag, (__u64)1);
			return &slot->sum;
		}
	}
	kspan_count(KSPAN_CTR_SUM_FAILED);
	return NULL;
}

/*
 * Thread `t`'s off-CPU interval from `out` that ended now: waiting
 * `waiting` ns in its state (t->state, t->cause), then `queued` on a run
 * queue, into its ring for the threads it wakes (kspan.h: struct
 * kspan_chain). Written at its switch-in, before it runs: a wake-up it
 * makes, which reads the ring, comes after.
 */
static __always_inline void kspan_chain_wait_add(struct kspan_sched_task *t, __u64 out,
						 __u64 waiting, __u64 queued)
{
	struct kspan_chain_wait *e = &t->chain.waits[t->chain.waits_n & (KSPAN_CHAIN_WAITS - 1)];

	e->out_ns = out;
	e->what = (waiting & KSPAN_CHAIN_WAITING_MASK) |
		  ((__u64)(t->state & 0xf) << KSPAN_CHAIN_STATE_SHIFT) |
		  ((__u64)(t->cause & 0xf) << KSPAN_CHAIN_CAUSE_SHIFT);
	e->queued_ns = queued;
	t->chain.waits_n++;
}

/*
 * A block request thread `t` issued completed at `done`: into its ring.
 * Completions run on any CPU, so a wake-up by `t` on another may read the
 * ring meanwhile: the slot is written first, the count moved after it (a
 * reader sees a slot being written only when the ring is full, its oldest).
 */
static __always_inline void kspan_chain_request_add(struct kspan_sched_task *t, __u64 held,
						    __u64 insert, __u64 issue, __u64 done)
{
	__u32 at = *(volatile __u32 *)&t->chain.requests_n & (KSPAN_CHAIN_REQUESTS - 1);
	struct kspan_chain_request *r = &t->chain.requests[at];

	r->held_ns = held && held < insert ? insert - held : 0;
	r->insert_ns = insert;
	r->issue_ns = issue;
	r->complete_ns = done;
	__sync_fetch_and_add(&t->chain.requests_n, 1);
}

/* Whether the process's recording is on (the switch user space turns on). */
static __always_inline int kspan_sched_enabled(void)
{
	__u32 zero = 0, *enabled = bpf_map_lookup_elem(&kspan_control, &zero);

	return enabled && *enabled;
}

#endif /* KSPAN_SCHED_BPF_H */
