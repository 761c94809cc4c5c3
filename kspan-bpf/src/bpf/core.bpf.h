/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The core both sources of kspan's BPF programs share (the probes, and the
 * scheduler's account with its causes): the settings (`kspan_cfg`), the
 * maps made once for both (the ring buffer, the counters, the on/off
 * switch, the thread-context registrations, the id state, the zero value)
 * and the helpers both call (counting, submitting a record, making ids,
 * reading a thread's application context, the overload check). Part of
 * the one compilation unit, kspan.bpf.c, which includes it first.
 */
#ifndef KSPAN_CORE_BPF_H
#define KSPAN_CORE_BPF_H

#include <linux/bpf.h>
#include <asm/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "kspan.h"

/*
 * A pointer into user memory that the kernel pins when user space stores
 * it in a task-storage value (Linux 6.13+), so that programs read through
 * it with plain loads. The tag needs clang 15 or later: older clangs drop
 * it, and the kernel then takes the field for a plain number.
 */
#if __clang_major__ < 15
#error "kspan.bpf.c needs clang 15 or later (btf_type_tag): run `cargo xtask deps`, then `cargo xtask bpf`"
#endif
#define __uptr __attribute__((btf_type_tag("uptr")))

/*
 * Atomics that return a value (BPF_FETCH, Linux 5.12): kernels before
 * refuse a program holding one, reachable or not, so the object built
 * for them (-DKSPAN_LEGACY, loaded where a probe finds them missing) does
 * without: a compare-and-swap becomes a load and a store, a release store
 * a plain one. Two CPUs may then both claim a free slot at the same
 * instant (their figures share it); a rate limit may admit one span more.
 */
#ifdef KSPAN_LEGACY
#define kspan_cmpxchg(p, old, new)                                                         \
	({                                                                                 \
		__typeof__(*(p)) kspan_cur_ = *(volatile __typeof__(*(p)) *)(p);           \
		if (kspan_cur_ == (old))                                                   \
			*(volatile __typeof__(*(p)) *)(p) = (new);                         \
		kspan_cur_;                                                                \
	})
#define kspan_publish(p, v) (*(volatile __typeof__(*(p)) *)(p) = (v))
#else
#define kspan_cmpxchg(p, old, new) __sync_val_compare_and_swap(p, old, new)
/* A store every earlier store is seen before (an atomic exchange). */
#define kspan_publish(p, v) __sync_lock_test_and_set(p, v)
#endif

/* Set by user space before load; constant to the verifier. */
const volatile struct kspan_config kspan_cfg = {};

/*
 * Whether the kernel offers `feature` (enum kspan_kernel_feature) to
 * this program: a constant to the verifier, which checks only the branch
 * taken.
 */
#define kspan_has(feature) (kspan_cfg.kernel_features & (feature))

/*
 * The current task: a typed pointer where the kernel gives one
 * (KSPAN_KF_TASK_BTF), else only its address, which is read through
 * bpf_probe_read_kernel (kspan_task_word).
 */
static __always_inline struct task_struct *kspan_current_task(void)
{
	if (kspan_has(KSPAN_KF_TASK_BTF))
		return bpf_get_current_task_btf();
	return (struct task_struct *)bpf_get_current_task();
}

/* The 8 bytes at `offset` in `task` (from kspan_current_task). */
static __always_inline __u64 kspan_task_word(void *task, __u64 offset)
{
	__u64 word = 0;

	if (kspan_has(KSPAN_KF_TASK_BTF))
		return *(__u64 *)(task + offset);
	bpf_probe_read_kernel(&word, sizeof(word), task + offset);
	return word;
}

/*
 * Finished spans. The runtime sets the size before load
 * (`KspanBuilder::ring_buffer_size`, 4 MiB by default); this one is a
 * placeholder.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 * 1024 * 1024);
} kspan_events SEC(".maps");

/*
 * KSPAN_CTR_STRIDE slots a CPU, one per enum kspan_counter, so that
 * counting never contends; an array user space maps, so that reading them
 * is no system call (one holds the CPU's guard against BPF programs, and
 * a preempted one makes the kernel skip kprobe and tracepoint programs on
 * that CPU meanwhile). The runtime sizes it to the possible CPUs.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KSPAN_CTR_STRIDE);
	__type(key, __u32);
	__type(value, __u64);
} kspan_counters SEC(".maps");

/*
 * Entry 0, one switch: 0 until user space is ready to consume, so the
 * process's own calls while it loads the other probes (libbpf reads BTF
 * with vfs_read) do not flood the ring buffer before anyone reads it.
 * Entry 1 (KSPAN_OPEN_FRAMES): the frames open on every task, each a record
 * its exit may still need (see kspan_overloaded).
 */
#define KSPAN_OPEN_FRAMES 1
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} kspan_control SEC(".maps");

/*
 * Each thread's context record, registered by user space when the thread
 * makes it (and for every live one when a runtime starts): a thread with
 * an entry is read without a user memory copy, and one without has no
 * record, unless `kspan_ctx_pending` is non-zero. Both maps are created
 * only where the kernel has uptrs (`ctx_records`).
 */
struct kspan_ctx_ref {
	struct kspan_ctx_slot __uptr *slot;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct kspan_ctx_ref);
} kspan_ctx_records SEC(".maps");

/*
 * How many reasons there are now to doubt that a thread without a
 * registration has no record: records being made and registered, one
 * until the runtime has registered the records made before it started,
 * one for good once a record could not be registered. User space counts
 * in the mapped value, without system calls (a thread's system calls
 * while its record is registered would read the map they change).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} kspan_ctx_pending SEC(".maps");

/*
 * All zeros, the value a call's entry values start from in
 * `kspan_entry_caps` (too big for the stack); the captures then fill that
 * element in place. Not a per-CPU scratch: a program can be preempted
 * between filling one and storing it, and another task's call on the same
 * CPU would overwrite it. The account's thread entries start from it too
 * (sched.bpf.h), and the probes' stacks where they are by thread id
 * (probes.bpf.h): it is as large as the largest.
 */
union kspan_zero_value {
	struct kspan_entry_values entry;
	struct kspan_sched_task task;
	/* A thread's first stack, where stacks are by thread id. */
	struct kspan_task_stack stack;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_RDONLY_PROG);
	__type(key, __u32);
	__type(value, union kspan_zero_value);
} kspan_zero SEC(".maps");

/* Each CPU's SplitMix64 state for span and trace ids (kspan_new_id). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} kspan_id_state SEC(".maps");

/* The first slot a span's totals under `tag` may be in (kspan.h). */
static __always_inline __u32 kspan_table_hash(__u64 span, __u32 tag)
{
	return (__u32)(((span ^ ((__u64)tag << 40)) * KSPAN_TABLE_HASH_MULTIPLIER) >> 32);
}

/*
 * Claims free slot `span_at` of a table for `span` and `tag` (kspan.h):
 * whether it was free; if so, `zero_and_tag` is done by the caller.
 */
static __always_inline int kspan_table_claim(__u64 *span_at, __u64 span)
{
	return *(volatile __u64 *)span_at == 0 && kspan_cmpxchg(span_at, 0, span) == 0;
}

/* This CPU's value of `counter` (enum kspan_counter). */
static __always_inline __u64 *kspan_counter(__u32 counter)
{
	__u32 key = bpf_get_smp_processor_id() * KSPAN_CTR_STRIDE + counter;

	return bpf_map_lookup_elem(&kspan_counters, &key);
}

/*
 * Submits a span record and counts it. Every KSPAN_WAKEUP_CHECK_RECORDS-th
 * record of this CPU asks how much is waiting and wakes the consumer when
 * that is KSPAN_WAKEUP_BYTES or more: about once per batch, not once per
 * record, and one helper call per many records. Below that, and in the
 * records between checks, the consumer's timer collects them.
 */
static __always_inline void kspan_submit_span(void *rec)
{
	__u64 *emitted = kspan_counter(KSPAN_CTR_EMITTED);
	__u64 flags = BPF_RB_NO_WAKEUP;

#ifdef KSPAN_LEGACY
	/* No fetching add: the count read after (a check may move by one). */
	if (emitted) {
		__sync_fetch_and_add(emitted, 1);
		if (!(*(volatile __u64 *)emitted & (KSPAN_WAKEUP_CHECK_RECORDS - 1)) &&
		    bpf_ringbuf_query(&kspan_events, BPF_RB_AVAIL_DATA) >= KSPAN_WAKEUP_BYTES)
			flags = BPF_RB_FORCE_WAKEUP;
	}
#else
	if (emitted && !(__sync_fetch_and_add(emitted, 1) & (KSPAN_WAKEUP_CHECK_RECORDS - 1)) &&
	    bpf_ringbuf_query(&kspan_events, BPF_RB_AVAIL_DATA) >= KSPAN_WAKEUP_BYTES)
		flags = BPF_RB_FORCE_WAKEUP;
#endif
	bpf_ringbuf_submit(rec, flags);
}

/*
 * Adds `n` to this CPU's value of a counter every program adds to
 * (kspan_counters).
 * Atomically: on PREEMPT and PREEMPT_LAZY kernels (every 7.x kernel) a
 * program runs with migration disabled but can be preempted, and another
 * task's program on this CPU may add to the same value between a plain
 * load and store. (A probe's own values are added to plainly: see
 * kspan_hist_record.)
 */
static __always_inline void kspan_add(__u64 *value, __u64 n)
{
	__sync_fetch_and_add(value, n);
}

static __always_inline void kspan_count_n(__u32 counter, __u64 n)
{
	__u64 *value = kspan_counter(counter);

	if (value)
		kspan_add(value, n);
}

static __always_inline void kspan_count(__u32 counter)
{
	kspan_count_n(counter, 1);
}

/* The one field of task_struct kspan reads; CO-RE relocates its offset. */
struct task_struct___kspan {
	void *stack;
} __attribute__((preserve_access_index));

/*
 * Bytes of a task's kernel stack: THREAD_SIZE of x86-64 (and arm64)
 * kernels built without KASAN. Where it is larger, calls deeper in the
 * stack than this are not identified (0), and pair as on kprobes.
 */
#define KSPAN_THREAD_SIZE (16 * 1024)

/*
 * Which call a trampoline program runs for: the address of its context,
 * which the trampoline keeps in its own frame on the task's kernel stack,
 * the same for the call's entry and exit. A caller's is higher, a
 * callee's lower, and the next call at the same depth reuses it. 0 for a
 * call on an interrupt stack.
 *
 * Why: the kernel skips a trampoline program while it is running on the
 * same CPU (its per-CPU recursion guard), and on PREEMPT and PREEMPT_LAZY
 * kernels (every 7.x kernel) that includes while a task preempted inside
 * it waits to run again, so other tasks' calls there lose their entry, or
 * their exit. Paired by address, a skipped entry's exit pops no other
 * call's frame, and a skipped exit leaves a frame kspan_settle forgets,
 * not one under every later call of the task (which would all join that
 * call's tree and application context, and fill the stack).
 */
static __always_inline __u64 kspan_call_of(void *ctx, struct task_struct *current)
{
	struct task_struct___kspan *task = (void *)current;
	__u64 base, at = (__u64)ctx;

	if (kspan_has(KSPAN_KF_TASK_BTF))
		base = (__u64)task->stack;
	else
		base = (__u64)BPF_CORE_READ(task, stack);

	return at >= base && at < base + KSPAN_THREAD_SIZE ? at : 0;
}

/*
 * Whether the ring buffer lacks room for a new call: room for its own
 * record and for those every open frame may still need at its exit (each
 * call's exit then finds its room). An outermost call (`outermost`) also
 * needs a margin, for what other CPUs admit meanwhile, for the records no
 * frame reserves (instants, reparents) and for the calls its own tree
 * will make: the calls inside a recorded one are declined only past the
 * margin, when the open frames' records themselves would not fit, so that
 * trees are declined whole, at their root, and an exported span lacks a
 * descendant only in a ring too small for the trees open at once (and
 * then says so: KSPAN_CTR_DESCENDANT_DROPPED). The open frames are
 * counted at most as half the ring, so that frames left on dead tasks can
 * never shut it.
 */
static __always_inline int kspan_overloaded(const int outermost)
{
	__u64 size = kspan_cfg.ring_bytes;
	/* A record takes the ring's 8-byte header, rounded to 8. */
	__u64 slot = (kspan_cfg.record_size + 8 + 7) & ~7ULL;
	__u32 key = KSPAN_OPEN_FRAMES, *counted;
	__u64 waiting, open = 0, margin = 0;
	__s32 frames;

	if (!size)
		return 0;
	waiting = bpf_ringbuf_query(&kspan_events, BPF_RB_AVAIL_DATA);
	counted = bpf_map_lookup_elem(&kspan_control, &key);
	if (counted) {
		frames = (__s32)*(volatile __u32 *)counted;
		open = frames > 0 ? (__u64)frames * slot : 0;
	}
	if (open > size / 2)
		open = size / 2;
	if (outermost)
		margin = size / 32 > 4 * slot ? size / 32 : 4 * slot;
	return waiting + open + slot + margin > size;
}

/* SplitMix64's increment (the golden ratio, odd). */
#define KSPAN_ID_GAMMA 0x9e3779b97f4a7c15ULL

/*
 * `n` new span or trace id words: SplitMix64 over this CPU's state, which
 * kspan seeds with random values at load. Each CPU's state walks through
 * every 64-bit value before it repeats, and the mix is a bijection, so a
 * CPU never hands out an id twice; the seeds keep CPUs (and processes)
 * apart. Inline arithmetic: two bpf_get_prandom_u32 calls per id cost a
 * traced call more. The `n` steps are taken at once, atomically: on
 * preemptible kernels another task's program may run on this CPU between
 * a load and a store.
 */
static __always_inline void kspan_new_ids(__u64 *ids, const int n)
{
	__u32 zero = 0;
#ifdef KSPAN_LEGACY
	/* No fetching add to take `n` steps at once: random ids. */
	__u64 *state = NULL;
#else
	__u64 *state = bpf_map_lookup_elem(&kspan_id_state, &zero);
#endif
	__u64 z = 0;

	if (state)
		z = __sync_fetch_and_add(state, KSPAN_ID_GAMMA * n);
#pragma unroll
	for (int i = 0; i < n; i++) {
		__u64 id;

		if (!state) {
			ids[i] = ((__u64)bpf_get_prandom_u32() << 32) | bpf_get_prandom_u32() | 1;
			continue;
		}
		z += KSPAN_ID_GAMMA;
		id = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
		id = (id ^ (id >> 27)) * 0x94d049bb133111ebULL;
		id ^= id >> 31;
		/* Zero is the invalid id in OpenTelemetry. */
		ids[i] = id ? id : 1;
	}
}

static __always_inline __u64 kspan_new_id(void)
{
	__u64 id;

	kspan_new_ids(&id, 1);
	return id;
}

/*
 * The thread's record from `kspan_ctx_records`: 1 and `ctx` filled when
 * the thread has a valid one, 0 when it has none, -1 when a record may be
 * missing from the map (read user memory instead). A registration whose
 * slot another thread owns now (or none) is of a record its thread gave
 * back at exit: none. The doubts are read before the map: a registration
 * that lands between the two reads is then of a count read as non-zero.
 */
static __always_inline int kspan_registered_context(struct kspan_thread_ctx *ctx,
						    void *task, __u32 tid)
{
	__u32 zero = 0, *pending, in_doubt;
	struct kspan_ctx_ref *ref;
	struct kspan_ctx_slot *slot;

	pending = bpf_map_lookup_elem(&kspan_ctx_pending, &zero);
	in_doubt = !pending || *(volatile __u32 *)pending;
	ref = bpf_task_storage_get(&kspan_ctx_records, task, 0, 0);
	if (ref) {
		slot = ref->slot;
		if (!slot || slot->owner_tid != tid)
			return 0;
		__builtin_memcpy(ctx, &slot->rec, sizeof(*ctx));
		return ctx->valid == 1;
	}
	return in_doubt ? -1 : 0;
}

/*
 * The application's span on this thread (OTEP 4947): the slot
 * `otel_thread_ctx_v1` sits at a fixed offset from the thread pointer (the
 * x86-64 fs base, arm64's tpidr_el0), below it or above it as the
 * architecture's TLS variant puts it; it holds NULL or a record whose `valid` byte is 1 when it may be
 * read. The reads are of user memory and may fault: any failure is "no
 * application span". Where the kernel pins the records for kspan
 * (`ctx_records`), the record is read from there instead. Returns 1 and
 * fills `ctx` when there is one.
 */
static __always_inline int kspan_app_context(struct kspan_thread_ctx *ctx, __u64 pid_tgid)
{
	__u64 tp, slot = 0;
	void *task;

	if (!kspan_cfg.task_tp_offset)
		return 0;
	if ((__u32)(pid_tgid >> 32) != kspan_cfg.ctx_tgid)
		return 0;
	/* A typed load at a constant offset: no helper call. */
	task = kspan_current_task();
	if (kspan_cfg.ctx_records) {
		int registered = kspan_registered_context(ctx, task, (__u32)pid_tgid);

		if (registered >= 0)
			return registered;
	}
	tp = kspan_task_word(task, kspan_cfg.task_tp_offset);
	if (!tp)
		return 0;
	if (bpf_probe_read_user(&slot, sizeof(slot),
				(void *)(tp + kspan_cfg.thread_ctx_offset)) || !slot)
		return 0;
	if (bpf_probe_read_user(ctx, sizeof(*ctx), (void *)slot))
		return 0;
	return ctx->valid == 1;
}

#endif /* KSPAN_CORE_BPF_H */
