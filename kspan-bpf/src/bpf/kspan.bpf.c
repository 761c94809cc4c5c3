// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Generic programs of kspan. The same verified code serves every traced
 * function: user space loads the pair of programs of the function's hook
 * (fentry/fexit trampolines, kprobe/kretprobe, or a syscall's enter/exit
 * tracepoints) with the function's settings in `kspan_cfg`, and copies of
 * those programs for the functions that follow. Entry pushes a frame on the
 * task's stack, exit pops it and emits one record, so a span costs one
 * ring-buffer record, not two; every hook shares the stack, so their spans
 * nest.
 */
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

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by user space before load; constant to the verifier. */
const volatile struct kspan_config kspan_cfg = {};

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
 * Open spans per task. Task local storage is freed with the task, so a thread
 * that dies inside a traced call leaks nothing; no size to choose.
 */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct kspan_task_stack);
} kspan_stacks SEC(".maps");

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
 * Values of captures read at entry (`at_entry`), by span id, until the
 * exit. The runtime sizes it to one entry when no probe reads at entry.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KSPAN_ENTRY_CAPS_MAX);
	__type(key, __u64);
	__type(value, struct kspan_entry_values);
} kspan_entry_caps SEC(".maps");

/*
 * All zeros, the value a call's entry values start from in
 * `kspan_entry_caps` (too big for the stack); the captures then fill that
 * element in place. Not a per-CPU scratch: a program can be preempted
 * between filling one and storing it, and another task's call on the same
 * CPU would overwrite it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_RDONLY_PROG);
	__type(key, __u32);
	__type(value, struct kspan_entry_values);
} kspan_zero SEC(".maps");

/* Each CPU's SplitMix64 state for span and trace ids (kspan_new_id). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} kspan_id_state SEC(".maps");

/*
 * Calls recorded but not made into spans, by CPU, probe and reason
 * (cpu * probe_counters_stride + probe_id * KSPAN_PCTR_COUNT + enum
 * kspan_probe_counter); mapped by user space as kspan_counters is. The
 * runtime sizes it to its probes and the possible CPUs.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KSPAN_PCTR_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} kspan_probe_counters SEC(".maps");

/* Per probe: when its next span is due under its rate limit. Sized by the runtime. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kspan_rate);
} kspan_rates SEC(".maps");

/*
 * Totals of the calls not made into spans, by application span and probe,
 * until user space takes them as the application span ends (a table it
 * maps: see kspan.h). The runtime sizes it to one slot when no probe sums.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KSPAN_SUMS_MAX);
	__type(key, __u32);
	__type(value, struct kspan_sum_slot);
} kspan_sums SEC(".maps");

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
	return *(volatile __u64 *)span_at == 0 && __sync_val_compare_and_swap(span_at, 0, span) == 0;
}

/*
 * Latency histograms: two rows per probe id (success, failure) for each
 * CPU, apart (see kspan.h); mapped by user space, which reads them with no
 * system call (see kspan_counters). The runtime sizes it (two rows per
 * probe and CPU when some probe has a histogram, else one entry).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kspan_hist_row);
} kspan_hist SEC(".maps");

/*
 * Failed calls of histogram probes by errno (see kspan.h); mapped by user
 * space. Sized by the runtime (KSPAN_HIST_ERRNO_ROWS per histogram probe,
 * to a power of two).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kspan_hist_errno_slot);
} kspan_hist_errno SEC(".maps");

/* Keeps the record layout in the object's BTF for the Rust skeleton. */
struct kspan_record kspan_record_layout SEC(".bss.layout");
/* A uptr's target must be a whole struct in BTF, not a declaration. */
struct kspan_ctx_slot kspan_ctx_slot_layout SEC(".bss.layout");

#define KSPAN_DEPTH_MASK (KSPAN_MAX_DEPTH - 1)

/*
 * The frame in `slot`. The barrier stops clang from dropping the mask where it
 * can prove the bound itself, so the verifier sees a bounded index too.
 */
static __always_inline struct kspan_frame *kspan_frame_at(struct kspan_task_stack *st,
							    __u32 slot)
{
	barrier_var(slot);
	return &st->frames[slot & KSPAN_DEPTH_MASK];
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

	if (emitted && !(__sync_fetch_and_add(emitted, 1) & (KSPAN_WAKEUP_CHECK_RECORDS - 1)) &&
	    bpf_ringbuf_query(&kspan_events, BPF_RB_AVAIL_DATA) >= KSPAN_WAKEUP_BYTES)
		flags = BPF_RB_FORCE_WAKEUP;
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
	__u64 base = (__u64)task->stack, at = (__u64)ctx;

	return at >= base && at < base + KSPAN_THREAD_SIZE ? at : 0;
}

/*
 * Frames opened (`n` > 0) or closed on any task: every change of a task's
 * depth goes through here, so that the count is of open frames. A frame
 * on a task that dies with it stays counted (a call that never returned,
 * its exit skipped); kspan_overloaded reads the count with a cap for that.
 */
static __always_inline void kspan_open_frames_add(__s32 n)
{
	__u32 key = KSPAN_OPEN_FRAMES, *open = bpf_map_lookup_elem(&kspan_control, &key);

	if (open)
		__sync_fetch_and_add(open, (__u32)n);
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

/*
 * A call inside the recorded call of slot `anchor - 1` (kspan_frame's
 * `anchor`; 0: none) is not recorded: that call's span says so.
 */
static __always_inline void kspan_descendant_dropped(struct kspan_task_stack *st, __u32 anchor)
{
	if (!anchor || anchor > KSPAN_MAX_DEPTH)
		return;
	kspan_frame_at(st, anchor - 1)->descendants_dropped += 1;
	kspan_count(KSPAN_CTR_DESCENDANT_DROPPED);
}

/*
 * Whether a call not recorded for reason `counter` (KSPAN_CTR_*) is a
 * loss its recorded ancestor should tell of: not a decision about the
 * whole tree (orphan, unsampled, suppressed), which is never recorded.
 */
static __always_inline int kspan_lost_reason(__u32 counter)
{
	return counter == KSPAN_CTR_OVERLOAD || counter == KSPAN_CTR_NO_STORAGE ||
	       counter == KSPAN_CTR_STACK_DEPTH || counter == KSPAN_CTR_RINGBUF_FULL;
}

/*
 * Whether this call is traced. Every program asks first, before it reads
 * arguments, return value or cookie: the programs run for every process's
 * calls, and another process's call should cost it no more than this check.
 */
static __always_inline int kspan_wanted(__u64 *pid_tgid)
{
	__u32 target = kspan_cfg.target_tgid, zero = 0, *enabled;

	/* Read once per run: every later use takes this value. */
	*pid_tgid = bpf_get_current_pid_tgid();
	if (target && (__u32)(*pid_tgid >> 32) != target)
		return 0;
	enabled = bpf_map_lookup_elem(&kspan_control, &zero);
	return enabled && *enabled;
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
	__u64 *state = bpf_map_lookup_elem(&kspan_id_state, &zero);
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
 * The trace id of a tree with no application trace, made in place on
 * first use: all zeros until a record needs it, so that a tree that emits
 * nothing (a histogram-only probe's) draws no ids. (All zeros is never an
 * application's trace id: kspan_outermost takes that for a thread that
 * suppresses telemetry.)
 */
static __always_inline void kspan_made_trace_id(__u8 *trace_id)
{
	__u64 *words = (__u64 *)trace_id;

	if (words[0] || words[1])
		return;
	kspan_new_ids(words, 2);
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
	task = bpf_get_current_task_btf();
	if (kspan_cfg.ctx_records) {
		int registered = kspan_registered_context(ctx, task, (__u32)pid_tgid);

		if (registered >= 0)
			return registered;
	}
	tp = *(__u64 *)(task + kspan_cfg.task_tp_offset);
	if (!tp)
		return 0;
	if (bpf_probe_read_user(&slot, sizeof(slot),
				(void *)(tp + kspan_cfg.thread_ctx_offset)) || !slot)
		return 0;
	if (bpf_probe_read_user(ctx, sizeof(*ctx), (void *)slot))
		return 0;
	return ctx->valid == 1;
}

/*
 * At the outermost call of a task: which trace the call's span joins and
 * under which parent, or whether it is recorded at all. Returns the counter
 * of the reason it is not recorded, or -1 when it is (trace id and parent
 * filled in).
 */
static __always_inline int kspan_outermost(__u8 *trace_id, __u64 *parent, __u64 pid_tgid)
{
	struct kspan_thread_ctx ctx = {};
	int has_context = kspan_app_context(&ctx, pid_tgid);

	/* All-zero ids: the thread suppresses telemetry (see kspan.h). */
	if (has_context && !*(__u64 *)ctx.trace_id && !*(__u64 *)&ctx.trace_id[8])
		return KSPAN_CTR_SUPPRESSED;
	if (has_context && kspan_cfg.ctx_parent) {
		if (!(ctx.trace_flags & 1) && !kspan_cfg.keep_unsampled)
			return KSPAN_CTR_UNSAMPLED;
		__builtin_memcpy(trace_id, ctx.trace_id, sizeof(ctx.trace_id));
		/* W3C bytes are big-endian; the record carries the id as a number. */
		*parent = __builtin_bswap64(*(__u64 *)ctx.span_id);
		return -1;
	}
	if (kspan_cfg.orphans == KSPAN_ORPHANS_DROP &&
	    (__u32)(pid_tgid >> 32) == kspan_cfg.ctx_tgid)
		return KSPAN_CTR_ORPHAN;
	/* Made when a record needs it (kspan_made_trace_id). */
	((__u64 *)trace_id)[0] = 0;
	((__u64 *)trace_id)[1] = 0;
	*parent = 0;
	return -1;
}

/*
 * The context of the task's current tree of calls, read once, when its
 * first call needs it: the counter of why the tree is not recorded, or -1
 * (trace id and application parent in `st`).
 */
static __always_inline int kspan_tree_context(struct kspan_task_stack *st, __u64 pid_tgid)
{
	if (!st->ctx_known) {
		st->ctx_skip = kspan_outermost(st->trace_id, &st->app_span_id, pid_tgid);
		st->ctx_known = 1;
	}
	return st->ctx_skip;
}

/* The span id of `frame`, made on first use. */
static __always_inline __u64 kspan_frame_id(struct kspan_frame *frame)
{
	if (!frame->span_id)
		frame->span_id = kspan_new_id();
	return frame->span_id;
}

/* Arguments of a trampoline program, from the trampoline's saved registers. */
static __always_inline void kspan_trampoline_args(__u64 *ctx, __u64 *args)
{
#pragma unroll
	for (int i = 0; i < KSPAN_MAX_ARGS; i++) {
		args[i] = 0;
		if (i < kspan_cfg.nr_args)
			bpf_get_func_arg(ctx, i, &args[i]);
	}
}

/*
 * Arguments of a kprobe program, from the registers at the probed
 * instruction, by the architecture's calling convention (bpf_tracing.h's
 * PT_REGS_PARMn; -D__TARGET_ARCH_<arch> picks it).
 */
static __always_inline void kspan_kprobe_args(struct pt_regs *regs, __u64 *args)
{
	/* Written out: a table would be a second variable in .rodata. */
	args[0] = kspan_cfg.nr_args > 0 ? PT_REGS_PARM1(regs) : 0;
	args[1] = kspan_cfg.nr_args > 1 ? PT_REGS_PARM2(regs) : 0;
	args[2] = kspan_cfg.nr_args > 2 ? PT_REGS_PARM3(regs) : 0;
	args[3] = kspan_cfg.nr_args > 3 ? PT_REGS_PARM4(regs) : 0;
	args[4] = kspan_cfg.nr_args > 4 ? PT_REGS_PARM5(regs) : 0;
	args[5] = kspan_cfg.nr_args > 5 ? PT_REGS_PARM6(regs) : 0;
}

/*
 * The probe this call belongs to: the setting, or the attach cookie when one
 * program serves many functions (the branch not taken is never verified).
 */
static __always_inline __u32 kspan_probe_id(void *ctx)
{
	if (kspan_cfg.probe_id_from_cookie)
		return (__u32)bpf_get_attach_cookie(ctx);
	return kspan_cfg.probe_id;
}

static __always_inline int kspan_is_instant(void)
{
	return kspan_cfg.mode == KSPAN_MODE_FENTRY || kspan_cfg.mode == KSPAN_MODE_KPROBE;
}

static __always_inline void kspan_fill_ids(struct kspan_record *rec, __u64 pid_tgid, __u32 probe_id)
{
	rec->probe_id = probe_id;
	rec->pid = pid_tgid >> 32;
	rec->tid = (__u32)pid_tgid;
}

/* Walks capture `c`'s field path from the argument registers. */
static __always_inline int kspan_walk(const volatile struct kspan_capture *c, const __u64 *args,
				      __u64 *out)
{
	__u64 cur;
	__u32 arg = c->arg;

	if (arg >= KSPAN_MAX_ARGS)
		return -1;
	cur = args[arg];
#pragma unroll
	for (int s = 0; s < KSPAN_MAX_STEPS; s++) {
		if (s >= c->nsteps)
			break;
		if (c->steps[s].load && bpf_probe_read_kernel(&cur, sizeof(cur), (void *)cur))
			return -1;
		cur += c->steps[s].offset;
	}
	*out = cur;
	return 0;
}

/* The length of byte capture `c`: asked for, before capping. */
static __always_inline __u64 kspan_byte_len(const volatile struct kspan_capture *c,
					    const __u64 *args, __u64 ret)
{
	__u32 arg = c->len_arg;

	if (c->len_src == KSPAN_LEN_RET)
		return (__s64)ret > 0 ? ret : 0;
	if (c->len_src == KSPAN_LEN_ARG && arg < KSPAN_MAX_ARGS)
		return args[arg];
	return c->data_len;
}

/* Which captures a call of kspan_capture reads. */
enum kspan_phase {
	/* Every capture (an instant). */
	KSPAN_PHASE_ALL = 0,
	/* Those read at entry. */
	KSPAN_PHASE_ENTRY = 1,
	/* Those read at exit. */
	KSPAN_PHASE_EXIT = 2,
};

/*
 * Capture `i` of the plan into `rec` (its value, flag and data), where
 * `phase` reads it. Out of line, called once per capture with `i` a
 * constant at each call: the verifier still sees each capture's settings
 * as constants and checks only its kind's path, while the program holds
 * one copy of this code instead of one per capture slot.
 */
static __noinline void kspan_capture_one(struct kspan_record *rec, const __u64 *args, __u64 ret,
					 int phase, __u32 i)
{
	__u8 *data = (__u8 *)(rec + 1);
	const volatile struct kspan_capture *c;
	__u64 addr = 0, value = 0, n;
	__u8 kind;
	long err = 0;

	if (i >= KSPAN_MAX_CAPS)
		return;
	c = &kspan_cfg.caps[i];
	kind = c->kind;
	if ((phase == KSPAN_PHASE_ENTRY && !c->at_entry) ||
	    (phase == KSPAN_PHASE_EXIT && c->at_entry))
		return;
	rec->cap_flags[i] = 0;
	if (kspan_walk(c, args, &addr)) {
		rec->vals[i] = 0;
		rec->cap_flags[i] = KSPAN_CAPF_FAULT;
		return;
	}
	switch (kind) {
	case KSPAN_CAP_REG:
		value = addr;
		break;
	case KSPAN_CAP_MEM:
		err = bpf_probe_read_kernel(&value, c->size, (void *)addr);
		break;
	case KSPAN_CAP_KSTR:
		err = bpf_probe_read_kernel_str(data + c->data_off, c->data_len, (void *)addr);
		value = err;
		break;
	case KSPAN_CAP_USTR:
		err = bpf_probe_read_user_str(data + c->data_off, c->data_len, (void *)addr);
		value = err;
		break;
	case KSPAN_CAP_KBYTES:
	case KSPAN_CAP_UBYTES:
		value = kspan_byte_len(c, args, ret);
		n = value < c->data_len ? value : c->data_len;
		if (kind == KSPAN_CAP_KBYTES)
			err = bpf_probe_read_kernel(data + c->data_off, n, (void *)addr);
		else
			err = bpf_probe_read_user(data + c->data_off, n, (void *)addr);
		break;
	}
	rec->vals[i] = value;
	if (err < 0)
		rec->cap_flags[i] = KSPAN_CAPF_FAULT;
}

/*
 * Fills vals, cap_flags and the data area of `rec` from the capture plan.
 * Out of line: one copy for the entry, the exit and instants. An argument
 * taken as it is (the commonest capture) is stored here, without a call.
 */
static __noinline void kspan_capture(struct kspan_record *rec, const __u64 *args, __u64 ret,
					  int phase)
{
#pragma unroll
	for (__u32 i = 0; i < KSPAN_MAX_CAPS; i++) {
		const volatile struct kspan_capture *c = &kspan_cfg.caps[i];
		__u32 arg = c->arg;

		if (i >= kspan_cfg.nr_caps)
			break;
		if (c->kind == KSPAN_CAP_REG && c->nsteps == 0 && arg < KSPAN_MAX_ARGS) {
			if ((phase == KSPAN_PHASE_ENTRY && !c->at_entry) ||
			    (phase == KSPAN_PHASE_EXIT && c->at_entry))
				continue;
			rec->vals[i] = args[arg];
			rec->cap_flags[i] = 0;
			continue;
		}
		kspan_capture_one(rec, args, ret, phase, i);
	}
}

/*
 * Reads the captures of a call that are read at entry and keeps them under
 * the call's span id until its exit; 0 when they are kept.
 */
static __always_inline int kspan_keep_entry_values(const __u64 *args, __u64 span_id)
{
	const struct kspan_entry_values *zero;
	struct kspan_entry_values *kept;
	__u32 key = 0;

	/* The element first, then its values in place: the span id is this call's alone. */
	zero = bpf_map_lookup_elem(&kspan_zero, &key);
	if (!zero || bpf_map_update_elem(&kspan_entry_caps, &span_id, zero, BPF_NOEXIST))
		return -1;
	kept = bpf_map_lookup_elem(&kspan_entry_caps, &span_id);
	if (!kept)
		return -1;
	kspan_capture(&kept->rec, args, 0, KSPAN_PHASE_ENTRY);
	return 0;
}

/* Puts the values kept at entry for `span_id` into `rec`, and forgets them. */
static __always_inline void kspan_restore_entry_values(struct kspan_record *rec, __u64 span_id)
{
	struct kspan_entry_values *kept = bpf_map_lookup_elem(&kspan_entry_caps, &span_id);
	__u32 data_len = kspan_cfg.record_size - sizeof(*rec);

#pragma unroll
	for (int i = 0; i < KSPAN_MAX_CAPS; i++) {
		if (i >= kspan_cfg.nr_caps)
			break;
		if (!kspan_cfg.caps[i].at_entry)
			continue;
		rec->vals[i] = kept ? kept->rec.vals[i] : 0;
		rec->cap_flags[i] = kept ? kept->rec.cap_flags[i] : KSPAN_CAPF_FAULT;
	}
	if (!kept)
		return;
	/* The whole data area: the exit's captures then write their own parts. */
	if (data_len > 0 && data_len <= KSPAN_MAX_DATA)
		bpf_probe_read_kernel((void *)(rec + 1), data_len, kept->data);
	bpf_map_delete_elem(&kspan_entry_caps, &span_id);
}

static __always_inline void kspan_count_probe(__u32 probe_id, __u32 reason)
{
	__u32 key = bpf_get_smp_processor_id() * kspan_cfg.probe_counters_stride +
		    probe_id * KSPAN_PCTR_COUNT + reason;
	__u64 *value = bpf_map_lookup_elem(&kspan_probe_counters, &key);

	/* A probe's own value: see kspan_hist_record. */
	if (value)
		*value += 1;
}

/* `raw` read as a value of `width` bytes, sign- or zero-extended to 64 bits. */
static __always_inline __u64 kspan_widen(__u64 raw, __u32 width, __u32 is_signed)
{
	__u32 shift;

	if (width == 0 || width >= 8)
		return raw;
	shift = 64 - width * 8;
	if (is_signed)
		return (__u64)((__s64)(raw << shift) >> shift);
	return (raw << shift) >> shift;
}

/* Whether the return value is an errno (-4095..-1 of a signed type). */
static __always_inline int kspan_failed(__u64 ret)
{
	__s64 value = (__s64)kspan_widen(ret, kspan_cfg.ret_width, kspan_cfg.ret_signed);

	return kspan_cfg.ret_signed && value < 0 && value >= -4095;
}

/*
 * The value clause `cl` compares: the return value or a scalar capture
 * read at exit. 0 when it was read; a value that cannot be read fails
 * its clause.
 */
static __always_inline int kspan_operand(const volatile struct kspan_clause *cl, const __u64 *args,
					 __u64 ret, __u64 *out)
{
	const volatile struct kspan_capture *c;
	__u64 addr = 0, value = 0;
	__u32 i = cl->cap;

	if (i == KSPAN_CLAUSE_RET) {
		*out = ret;
		return 0;
	}
	if (i >= KSPAN_MAX_CAPS)
		return -1;
	c = &kspan_cfg.caps[i];
	if (kspan_walk(c, args, &addr))
		return -1;
	if (c->kind == KSPAN_CAP_MEM) {
		if (bpf_probe_read_kernel(&value, c->size, (void *)addr))
			return -1;
		*out = value;
		return 0;
	}
	*out = addr;
	return 0;
}

static __always_inline int kspan_compare(__u64 a, __u64 b, __u32 op, __u32 is_signed)
{
	__s64 x = (__s64)a, y = (__s64)b;

	switch (op) {
	case KSPAN_OP_EQ:
		return a == b;
	case KSPAN_OP_NE:
		return a != b;
	case KSPAN_OP_LT:
		return is_signed ? x < y : a < b;
	case KSPAN_OP_LE:
		return is_signed ? x <= y : a <= b;
	case KSPAN_OP_GT:
		return is_signed ? x > y : a > b;
	case KSPAN_OP_GE:
		return is_signed ? x >= y : a >= b;
	}
	return 0;
}

/* The probe's predicate: true when every clause of some group holds. */
static __always_inline int kspan_predicate(const __u64 *args, __u64 ret)
{
	int group_ok = 1;
	__u32 group = 0;

#pragma unroll
	for (int i = 0; i < KSPAN_MAX_CLAUSES; i++) {
		const volatile struct kspan_clause *cl = &kspan_cfg.clauses[i];
		__u64 value = 0;

		if (i >= kspan_cfg.nr_clauses)
			break;
		if (cl->group != group) {
			if (group_ok)
				return 1;
			group = cl->group;
			group_ok = 1;
		}
		if (!group_ok)
			continue;
		if (kspan_operand(cl, args, ret, &value) ||
		    !kspan_compare(kspan_widen(value, cl->width, cl->is_signed), cl->value, cl->op,
				   cl->is_signed))
			group_ok = 0;
	}
	return group_ok;
}

/*
 * The probe's rate limit (GCRA): a span is due every `rate_interval_ns`,
 * and a burst may run up to one second ahead. Two tries at the shared
 * slot; a call that loses both races to other CPUs is counted over the
 * limit.
 */
static __always_inline int kspan_rate_ok(__u32 probe_id, __u64 now)
{
	__u64 interval = kspan_cfg.rate_interval_ns;
	struct kspan_rate *rate;

	if (!interval)
		return 1;
	rate = bpf_map_lookup_elem(&kspan_rates, &probe_id);
	if (!rate)
		return 1;
#pragma unroll
	for (int attempt = 0; attempt < 2; attempt++) {
		__u64 due = rate->due_ns;
		__u64 from = due > now ? due : now;

		if (from - now > 1000000000ULL - interval)
			return 0;
		if (__sync_val_compare_and_swap(&rate->due_ns, due, from + interval) == due)
			return 1;
	}
	return 0;
}

/*
 * A setting of kspan_cfg, or 0 in a plain program: one whose every call is
 * a span with nothing captured, refused at its exit, summed or counted in
 * a histogram. `plain` is a constant at every use, so clang leaves the
 * code of those settings out of a plain program, and the verifier checks
 * about a third of the instructions at each load (the cost of attaching a
 * pattern through one fsession.multi link is mostly that check). The
 * runtime loads a plain program only for probes whose settings are all 0
 * there (`kspan::bpf::config::is_plain`).
 */
#define KSPAN_SETTING(plain, field) ((plain) ? 0 : kspan_cfg.field)

/*
 * Why the call whose frame is `frame` is not a span (enum
 * kspan_probe_counter), or -1 when it is one.
 */
static __always_inline int kspan_refusal(const struct kspan_frame *frame, __u64 ret, __u64 now,
					 __u32 probe_id)
{
	if (kspan_cfg.no_spans)
		return KSPAN_PCTR_NO_SPANS;
	if (kspan_cfg.min_duration_ns && now - frame->start_ns < kspan_cfg.min_duration_ns)
		return KSPAN_PCTR_FILTERED;
	if (kspan_cfg.errors_only && !kspan_failed(ret))
		return KSPAN_PCTR_FILTERED;
	if (kspan_cfg.nr_clauses && !kspan_predicate(frame->args, ret))
		return KSPAN_PCTR_FILTERED;
	if (!kspan_rate_ok(probe_id, now))
		return KSPAN_PCTR_RATE_LIMITED;
	return -1;
}

/* Adds a call that is not a span to its application span's totals. */
static __always_inline void kspan_add_sum(__u64 app_span_id, __u32 probe_id, __u64 duration,
					  int failed)
{
	__u32 tag = probe_id + 1, first = kspan_table_hash(app_span_id, tag), i;
	struct kspan_sum *sum = NULL;

	if (!kspan_cfg.sum || !app_span_id)
		return;
	for (i = 0; i < KSPAN_TABLE_PROBES; i++) {
		__u32 at = (first + i) & (KSPAN_SUMS_MAX - 1);
		struct kspan_sum_slot *slot = bpf_map_lookup_elem(&kspan_sums, &at);

		if (!slot)
			break;
		if (*(volatile __u64 *)&slot->span == app_span_id &&
		    *(volatile __u64 *)&slot->tag == tag) {
			sum = &slot->sum;
			break;
		}
		if (kspan_table_claim(&slot->span, app_span_id)) {
			slot->sum.calls = 0;
			slot->sum.duration_ns = 0;
			slot->sum.errors = 0;
			/* Last, and a barrier: only now may others add here. */
			__sync_lock_test_and_set(&slot->tag, (__u64)tag);
			sum = &slot->sum;
			break;
		}
	}
	if (!sum) {
		kspan_count(KSPAN_CTR_SUM_FAILED);
		return;
	}
	__sync_fetch_and_add(&sum->calls, 1);
	__sync_fetch_and_add(&sum->duration_ns, duration);
	if (failed)
		__sync_fetch_and_add(&sum->errors, 1);
}

/*
 * A record naming `parent` as the parent of what it carries: whether user
 * space must wait for the parent's own fate, and a note on the parent
 * that it has children out there.
 */
static __always_inline __u32 kspan_parent_flags(struct kspan_frame *parent)
{
	if (!parent)
		return 0;
	parent->flags |= KSPAN_FRAME_CHILD_SENT;
	return parent->flags & KSPAN_FRAME_MAY_DROP ? KSPAN_REC_PARENT_PENDING : 0;
}

/*
 * Call `frame` is not a span (refused at its exit, or its exit never
 * came) after spans under it were emitted: tells user space to hang them
 * under the call's own parent.
 */
static __always_inline void kspan_emit_reparent(struct kspan_task_stack *st,
						struct kspan_frame *frame,
						struct kspan_frame *parent, __u32 probe_id)
{
	struct kspan_record *rec = bpf_ringbuf_reserve(&kspan_events, sizeof(*rec), 0);

	if (!rec) {
		kspan_count(KSPAN_CTR_RINGBUF_FULL);
		return;
	}
	kspan_made_trace_id(st->trace_id);
	__builtin_memcpy(rec->trace_id, st->trace_id, sizeof(rec->trace_id));
	rec->span_id = kspan_frame_id(frame);
	rec->parent_span_id = parent ? kspan_frame_id(parent) : st->app_span_id;
	rec->start_ns = frame->start_ns;
	rec->end_ns = frame->start_ns;
	rec->ret = 0;
	kspan_fill_ids(rec, bpf_get_current_pid_tgid(), probe_id);
	rec->flags = KSPAN_REC_REPARENT | kspan_parent_flags(parent);
	rec->descendants_dropped = 0;
	/* Rare, and never alone: the spans' wakeups or the timer collect it. */
	bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);
}

/*
 * The task's depth read from its stack again, at most KSPAN_MAX_DEPTH:
 * after frames are forgotten in a loop, a value the verifier did not carry
 * through the loop, so that its paths merge.
 */
static __always_inline __u32 kspan_depth(struct kspan_task_stack *st)
{
	__u32 depth = *(volatile __u32 *)&st->depth;

	return depth < KSPAN_MAX_DEPTH ? depth : KSPAN_MAX_DEPTH;
}

/*
 * Forgets the task's top frame, of a call whose exit never came: counted,
 * and a reparent record when spans under it were emitted (so that they,
 * and spans waiting for its fate, go under its parent). Out of line: it is
 * called in loops, whose passes then leave the verifier one state each.
 */
static __noinline int kspan_forget_top(struct kspan_task_stack *st)
{
	__u32 depth = kspan_depth(st);
	struct kspan_frame *frame;

	if (depth == 0)
		return 0;
	frame = kspan_frame_at(st, depth - 1);
	if (frame->flags & KSPAN_FRAME_CHILD_SENT)
		kspan_emit_reparent(st, frame, depth >= 2 ? kspan_frame_at(st, depth - 2) : NULL,
				    frame->probe_id);
	/* What it lacked, its parent (which gets its children) lacks. */
	if (depth >= 2)
		kspan_frame_at(st, depth - 2)->descendants_dropped += frame->descendants_dropped;
	st->depth = depth - 1;
	kspan_open_frames_add(-1);
	/* Entries past the depth limit were inside it: over too. */
	st->overflow = 0;
	kspan_count(KSPAN_CTR_LOST_EXIT);
	return 0;
}

/*
 * Frames forgotten at once with a reparent record each; those under them
 * are only counted. More than one or two at once are rare (nested traced
 * calls whose exits were all skipped), and 6.1's verifier explores each
 * pass of a loop around kspan_forget_top on every path (16 take it past
 * its limit).
 */
#define KSPAN_FORGET_REPARENTED 2

/*
 * Whether the frame in `slot` is of a call made below `call` on the stack
 * (`or_at`: or at it); with `call` 0, whether there is one.
 */
static __always_inline int kspan_below(struct kspan_task_stack *st, __u32 slot, __u64 call,
				       int or_at)
{
	__u64 at;

	if (!call)
		return 1;
	at = kspan_frame_at(st, slot)->call;
	return at && (at < call || (at == call && or_at));
}

/*
 * Forgets the task's top frames while they are of calls made below `call`
 * on the stack (`or_at`: or at it), which returned unseen: a running
 * caller's place is above. `call` 0: every frame.
 */
static __always_inline void kspan_forget_below(struct kspan_task_stack *st, __u64 call, int or_at)
{
	__u32 depth, keep;

	for (int i = 0; i < KSPAN_FORGET_REPARENTED; i++) {
		depth = kspan_depth(st);
		if (depth == 0 || !kspan_below(st, depth - 1, call, or_at))
			return;
		kspan_forget_top(st);
	}
	depth = kspan_depth(st);
	keep = depth;
	for (int i = 0; i < KSPAN_MAX_DEPTH; i++) {
		if (keep == 0 || !kspan_below(st, keep - 1, call, or_at))
			break;
		keep -= 1;
	}
	if (keep < depth) {
		kspan_count_n(KSPAN_CTR_LOST_EXIT, depth - keep);
		kspan_open_frames_add(-(__s32)(depth - keep));
		st->depth = keep;
		st->overflow = 0;
	}
}

/*
 * How far apart calls made the same way in two system calls can be on
 * the stack: the kernel moves each system call's stack by up to 1 KiB
 * (CONFIG_RANDOMIZE_KSTACK_OFFSET, on by default in Debian's kernels).
 */
#define KSPAN_KSTACK_OFFSET_MAX 1024

/*
 * Whether the application's context on the task is not the one its
 * current tree was read with (st->ctx_known).
 */
static __always_inline int kspan_context_changed(struct kspan_task_stack *st, __u64 pid_tgid)
{
	__u8 trace_id[16];
	__u64 parent = 0;
	int skip = kspan_outermost(trace_id, &parent, pid_tgid);

	return skip != st->ctx_skip || (skip < 0 && parent != st->app_span_id);
}

/*
 * Before a call at `call` (kspan_call_of) of probe `probe_id` is entered:
 * the task's frames of calls that returned unseen are forgotten. Those at
 * or below `call` on the stack are such calls (a caller's is above). A
 * frame of the same function less than the system call stack offset above
 * is either its caller (recursion) or a call of an earlier system call of
 * the task, which the offset put above. The application's context cannot
 * change while the task is in the kernel: when it has since the tree's
 * was read, every frame is of an earlier system call, and all are
 * forgotten. Otherwise the frame is kept and marked as one that may not
 * stand, so that the spans under it wait for its fate (its span, or a
 * reparent once it is forgotten).
 */
static __always_inline void kspan_settle(struct kspan_task_stack *st, __u64 call, __u32 probe_id,
					 __u64 pid_tgid)
{
	struct kspan_frame *top;
	__u32 depth;

	if (!call)
		return;
	kspan_forget_below(st, call, 1);
	depth = kspan_depth(st);
	if (depth == 0)
		return;
	top = kspan_frame_at(st, depth - 1);
	/* Compared, not subtracted: `call` is the context pointer to the verifier. */
	if (top->probe_id != probe_id || !top->call || top->call > call + KSPAN_KSTACK_OFFSET_MAX)
		return;
	if (st->ctx_known && kspan_context_changed(st, pid_tgid)) {
		/* The task has been back in user space since the tree began. */
		kspan_forget_below(st, 0, 1);
		return;
	}
	top->flags |= KSPAN_FRAME_MAY_DROP;
}

/* fentry mode: an instant span, emitted at once. */
static __always_inline int kspan_emit_instant(const __u64 *args, __u64 now, __u32 probe_id,
					      struct task_struct *task, __u64 call, __u64 pid_tgid)
{
	struct kspan_task_stack *st;
	struct kspan_frame *top = NULL;
	struct kspan_record *rec;
	__u8 trace_id[16];
	__u64 parent;
	__u32 depth = 0;

	/* Where the instant belongs, decided before anything is reserved. */
	st = bpf_task_storage_get(&kspan_stacks, task, 0, 0);
	if (st) {
		kspan_settle(st, call, probe_id, pid_tgid);
		depth = kspan_depth(st);
	}
	if (st && depth > 0) {
		int skip;

		top = kspan_frame_at(st, depth - 1);
		if (top->suppressed) {
			/* Inside a call that is not recorded. */
			kspan_count(top->suppressed - 1);
			if (kspan_lost_reason(top->suppressed - 1))
				kspan_descendant_dropped(st, top->anchor);
			return 0;
		}
		skip = kspan_tree_context(st, pid_tgid);
		if (skip < 0 && kspan_overloaded(0))
			skip = KSPAN_CTR_OVERLOAD;
		if (skip >= 0) {
			kspan_count(skip);
			if (kspan_lost_reason(skip))
				kspan_descendant_dropped(st, depth);
			return 0;
		}
		kspan_made_trace_id(st->trace_id);
		__builtin_memcpy(trace_id, st->trace_id, sizeof(trace_id));
		parent = kspan_frame_id(top);
	} else {
		int skip = kspan_outermost(trace_id, &parent, pid_tgid);

		if (skip < 0 && kspan_overloaded(1))
			skip = KSPAN_CTR_OVERLOAD;
		if (skip >= 0) {
			kspan_count(skip);
			return 0;
		}
		kspan_made_trace_id(trace_id);
	}
	rec = bpf_ringbuf_reserve(&kspan_events, kspan_cfg.record_size, 0);
	if (!rec) {
		kspan_count(KSPAN_CTR_RINGBUF_FULL);
		if (top)
			kspan_descendant_dropped(st, depth);
		return 0;
	}
	__builtin_memcpy(rec->trace_id, trace_id, sizeof(rec->trace_id));
	rec->descendants_dropped = 0;
	rec->parent_span_id = parent;
	rec->span_id = kspan_new_id();
	rec->start_ns = now;
	rec->end_ns = now;
	rec->ret = 0;
	kspan_fill_ids(rec, pid_tgid, probe_id);
	rec->flags = kspan_parent_flags(top);
	kspan_capture(rec, args, 0, KSPAN_PHASE_ALL);
	kspan_submit_span(rec);
	return 0;
}

/* A session cookie's stamp of a frame pushed at `start_ns` for `probe_id`. */
static __always_inline __u64 kspan_session_stamp(__u64 start_ns, __u32 probe_id)
{
	return ((__u64)((__u32)start_ns | 1) << 32) | probe_id;
}

/*
 * Why a call the ring has no room for is not recorded, as a frame's
 * `suppressed` (counter + 1): overload only when its tree would be recorded;
 * a call that its context refuses anyway (orphan, unsampled, kspan's own)
 * keeps that reason. The context is read here only under overload.
 */
static __always_inline __u32 kspan_declined(struct kspan_task_stack *st, __u64 pid_tgid)
{
	int skip = kspan_tree_context(st, pid_tgid);

	return (skip >= 0 ? (__u32)skip : KSPAN_CTR_OVERLOAD) + 1;
}

/*
 * Entry of a traced call (kspan_wanted() said so): an instant, or a frame
 * pushed for the exit. `call` is where the call is on the task's stack
 * (kspan_call_of; 0: unknown); `cookie`, where a session program has one,
 * the slot its entry shares with its exit, which learns from it whether
 * its entry pushed a frame, which, and the probe's id. `spans_only`, a constant: the program serves
 * only modes with an exit (sessions, syscall sources), so the instant
 * path is left out of it at compile time rather than cut by the verifier
 * at every load. `plain`, a constant: see KSPAN_SETTING.
 */
static __always_inline int kspan_entry(const __u64 *args, __u32 probe_id,
				       struct task_struct *task, __u64 call, __u64 *cookie,
				       __u64 pid_tgid, const int spans_only, const int plain)
{
	struct kspan_task_stack *st;
	struct kspan_frame *frame;
	__u64 now, span_id;
	__u32 depth, suppressed, anchor = 0;

	now = bpf_ktime_get_ns();
	if (!spans_only && kspan_is_instant())
		return kspan_emit_instant(args, now, probe_id, task, call, pid_tgid);

	st = bpf_task_storage_get(&kspan_stacks, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!st) {
		kspan_count(KSPAN_CTR_NO_STORAGE);
		return 0;
	}
	kspan_settle(st, call, probe_id, pid_tgid);
	depth = kspan_depth(st);
	if (depth >= KSPAN_MAX_DEPTH) {
		struct kspan_frame *top = kspan_frame_at(st, KSPAN_MAX_DEPTH - 1);

		st->overflow += 1;
		kspan_count(KSPAN_CTR_STACK_DEPTH);
		kspan_descendant_dropped(st, top->suppressed ? top->anchor : KSPAN_MAX_DEPTH);
		return 0;
	}
	if (depth == 0) {
		/* A new tree: its context is read when a call of it needs it. */
		st->ctx_known = 0;
		suppressed = kspan_overloaded(1) ? kspan_declined(st, pid_tgid) : 0;
	} else {
		struct kspan_frame *up = kspan_frame_at(st, depth - 1);

		/* A call inside one that is not recorded is not recorded either. */
		suppressed = up->suppressed;
		anchor = suppressed ? up->anchor : depth;
		if (!suppressed && kspan_overloaded(0))
			suppressed = kspan_declined(st, pid_tgid);
	}
	/* The id is the key of the values read at entry; otherwise made when needed. */
	span_id = KSPAN_SETTING(plain, entry_caps) ? kspan_new_id() : 0;
	if (!suppressed && KSPAN_SETTING(plain, entry_caps) && kspan_keep_entry_values(args, span_id))
		suppressed = KSPAN_CTR_NO_STORAGE + 1;
	if (suppressed) {
		kspan_count(suppressed - 1);
		if (kspan_lost_reason(suppressed - 1))
			kspan_descendant_dropped(st, anchor);
	} else {
		anchor = depth + 1;
	}
	frame = kspan_frame_at(st, depth);
	frame->suppressed = suppressed;
	frame->anchor = anchor;
	frame->descendants_dropped = 0;
	frame->start_ns = now;
	frame->call = call;
	/*
	 * Tells this call's exit that its entry pushed a frame (never 0), of
	 * which probe (the low half), and which frame: the low bits of its
	 * start time, odd (the high half; see kspan_exit, kspan_session).
	 */
	if (cookie)
		*cookie = kspan_session_stamp(now, probe_id);
	frame->span_id = span_id;
	frame->probe_id = probe_id;
	frame->flags = KSPAN_SETTING(plain, may_drop) ? KSPAN_FRAME_MAY_DROP : 0;
	__builtin_memcpy(frame->args, args, sizeof(frame->args));
	st->depth = depth + 1;
	kspan_open_frames_add(1);
	return 0;
}

/* floor(log2(v)) for v > 0, in six compare-and-shift steps (no loop). */
static __always_inline __u32 kspan_log2(__u64 v)
{
	__u32 r = 0, s;

	s = (v > 0xFFFFFFFFull) << 5;
	v >>= s;
	r |= s;
	s = (v > 0xFFFF) << 4;
	v >>= s;
	r |= s;
	s = (v > 0xFF) << 3;
	v >>= s;
	r |= s;
	s = (v > 0xF) << 2;
	v >>= s;
	r |= s;
	s = (v > 0x3) << 1;
	v >>= s;
	r |= s;
	return r | (__u32)(v >> 1);
}

/*
 * The histogram bucket of a duration (see KSPAN_HIST_BUCKETS): 0 for 0 and
 * 1 ns, else ceil(log2(ns)), at most 63.
 */
static __always_inline __u32 kspan_hist_bucket(__u64 ns)
{
	__u32 b;

	if (ns <= 1)
		return 0;
	b = kspan_log2(ns - 1) + 1;
	return b < KSPAN_HIST_BUCKETS ? b : KSPAN_HIST_BUCKETS - 1;
}

/* Adds `add` to this CPU's value of `key` in kspan_hist_errno. */
/*
 * The errno row of `key` in kspan_hist_errno, claimed if new; NULL when
 * the table has no room for it (kspan.h).
 */
static __always_inline struct kspan_hist_row *kspan_hist_errno_row(__u64 key)
{
	__u32 first = kspan_table_hash(key, 0), i;

	for (i = 0; i < KSPAN_TABLE_PROBES; i++) {
		__u32 at = (first + i) & kspan_cfg.hist_errno_mask;
		struct kspan_hist_errno_slot *slot = bpf_map_lookup_elem(&kspan_hist_errno, &at);

		if (!slot)
			return NULL;
		if (*(volatile __u64 *)&slot->key == key || kspan_table_claim(&slot->key, key))
			return &slot->row;
		/* Claimed by another CPU for the same key between the two reads. */
		if (*(volatile __u64 *)&slot->key == key)
			return &slot->row;
	}
	return NULL;
}

/*
 * Counts a finished call of a `histogram` probe: its bucket and duration
 * in its row (success or failure), and a failure again under its errno.
 * Every call whose frame was pushed is counted, recorded as a span or not
 * (unsampled, orphan, overload): metrics are not sampled and take no ring
 * space; only the calls of threads that suppress telemetry (kspan's own)
 * are left out.
 */
static __always_inline void kspan_hist_record(__u32 probe_id, __u64 start_ns, __u64 end_ns,
					      __u64 ret)
{
	struct kspan_hist_row *row;
	__u64 ns = end_ns - start_ns;
	__s64 r = (__s64)ret;
	__u32 bucket, index, failed = 0;

	if (!kspan_cfg.histogram)
		return;
	/*
	 * Plain adds to this CPU's rows: a probe's rows and probe counters
	 * are written by its exit program alone, which the kernel never runs
	 * twice at once on a CPU, preempted or not (its recursion guard;
	 * kprobe programs run with preemption off).
	 */
	if (kspan_cfg.hist_errno_bytes == 4)
		r = (__s64)(__s32)ret;
	if (kspan_cfg.hist_errno_bytes && r >= -4095 && r <= -1)
		failed = 1;
	if (end_ns < start_ns)
		ns = 0;
	bucket = kspan_hist_bucket(ns);
	index = bpf_get_smp_processor_id() * kspan_cfg.hist_rows + probe_id * 2 + failed;
	row = bpf_map_lookup_elem(&kspan_hist, &index);
	if (row) {
		/*
		 * clang knows bucket < 64 and would drop the mask; older
		 * verifiers (6.1) lose that bound on a copy of the register.
		 */
		barrier_var(bucket);
		row->buckets[bucket & (KSPAN_HIST_BUCKETS - 1)] += 1;
		row->sum_ns += ns;
	}
	if (!failed)
		return;
	/* One table for every CPU: atomically. */
	row = kspan_hist_errno_row((__u64)(probe_id + 1) << 16 | (__u16)-r);
	if (row) {
		barrier_var(bucket);
		__sync_fetch_and_add(&row->buckets[bucket & (KSPAN_HIST_BUCKETS - 1)], 1);
		__sync_fetch_and_add(&row->sum_ns, ns);
	}
}

/* Whether `frame` holds the arguments `args` (those the probe reads). */
static __always_inline int kspan_same_args(const struct kspan_frame *frame, const __u64 *args)
{
#pragma unroll
	for (int i = 0; i < KSPAN_MAX_ARGS; i++)
		if (i < kspan_cfg.nr_args && frame->args[i] != args[i])
			return 0;
	return 1;
}

/* The frame search of an exit that is not at its own place (kspan_exit). */
struct kspan_search {
	struct kspan_task_stack *st;
	__u64 call;
	__u32 probe_id;
	/* The slot above the next frame looked at. */
	__u32 depth;
	/* 1 + the slot of this probe's innermost frame; 0: none. */
	__u32 found;
};

/*
 * One frame of the search, from the top: a bpf_loop callback, so that the
 * verifier checks it once rather than once per frame (unrolled, the
 * search was most of what it checked in the session programs).
 */
static long kspan_search_step(__u64 index, void *data)
{
	struct kspan_search *s = data;
	struct kspan_frame *f;
	__u32 depth = s->depth;

	if (depth == 0 || depth > KSPAN_MAX_DEPTH)
		return 1;
	f = kspan_frame_at(s->st, depth - 1);
	if (s->call && f->call && f->call != s->call) {
		/* Another call's place: one still running ends the search. */
		if (f->call > s->call)
			return 1;
	} else if (f->probe_id == s->probe_id) {
		s->found = depth;
		return 1;
	}
	s->depth = depth - 1;
	return 0;
}

/*
 * Exit of a traced call (kspan_wanted() said so): pop its frame, emit one
 * record. `call` and `cookie` as for kspan_entry; `args`, where the exit
 * has them (fexit), the call's arguments.
 */
static __always_inline int kspan_exit(__u64 ret, __u32 probe_id, struct task_struct *task,
				      __u64 call, __u64 *cookie, const __u64 *args, __u64 pid_tgid,
				      const int plain)
{
	struct kspan_task_stack *st;
	struct kspan_frame *frame, *parent = NULL;
	struct kspan_record *rec;
	__u64 now, parent_id;
	__u32 depth, found = 0;

	now = bpf_ktime_get_ns();
	st = bpf_task_storage_get(&kspan_stacks, task, 0, 0);
	if (!st) {
		kspan_count(KSPAN_CTR_UNMATCHED_EXIT);
		return 0;
	}
	if (cookie && !*cookie) {
		/*
		 * Its entry pushed no frame (skipped, the stack full, or
		 * before the probe was attached): no frame is this call's.
		 */
		if (st->overflow)
			st->overflow -= 1;
		else
			kspan_count(KSPAN_CTR_UNMATCHED_EXIT);
		return 0;
	}
	if (call) {
		struct kspan_frame *top;

		/* Frames below this call's place are of calls that returned unseen. */
		kspan_forget_below(st, call, 0);
		depth = kspan_depth(st);
		top = depth ? kspan_frame_at(st, depth - 1) : NULL;
		if (top && top->call) {
			if (top->call != call || top->probe_id != probe_id) {
				/*
				 * No frame at this call's place: its entry found
				 * the stack full, was skipped, or came before
				 * the probe was attached.
				 */
				if (st->overflow)
					st->overflow -= 1;
				else
					kspan_count(KSPAN_CTR_UNMATCHED_EXIT);
				return 0;
			}
			/*
			 * The frame at this call's place may be an earlier
			 * call's, whose exit was skipped, this call's entry
			 * being skipped too: the session cookie names the
			 * entry's frame; without one, a call with other
			 * arguments is another call (one with the same is
			 * taken for this).
			 */
			if (cookie ? *cookie != kspan_session_stamp(top->start_ns, probe_id)
				   : args && !kspan_same_args(top, args)) {
				kspan_forget_top(st);
				kspan_count(KSPAN_CTR_UNMATCHED_EXIT);
				return 0;
			}
			/* Entries past the depth limit were inside this call: over too. */
			st->overflow = 0;
			found = depth;
		}
	}
	if (!found) {
		if (st->overflow) {
			/* This exit belongs to an entry that found the stack full. */
			st->overflow -= 1;
			return 0;
		}

		/*
		 * Find the innermost frame of this probe (frames of kprobes
		 * and tracepoints, and of calls on an interrupt stack, have no
		 * place). Frames above it belong to calls whose exit never
		 * came: they are discarded and counted. No frame at all means
		 * the call began before the probe was attached.
		 */
		struct kspan_search search = {
			.st = st,
			.call = call,
			.probe_id = probe_id,
			.depth = kspan_depth(st),
		};

		bpf_loop(KSPAN_MAX_DEPTH, kspan_search_step, &search, 0);
		found = search.found < KSPAN_MAX_DEPTH ? search.found : KSPAN_MAX_DEPTH;
		/* A session's entry names its frame: another one found is not it. */
		if (found && cookie &&
		    *cookie != kspan_session_stamp(kspan_frame_at(st, found - 1)->start_ns, probe_id))
			found = 0;
		if (!found) {
			kspan_count(KSPAN_CTR_UNMATCHED_EXIT);
			return 0;
		}
		if (st->depth > found)
			kspan_count_n(KSPAN_CTR_LOST_EXIT, st->depth - found);
	}
	kspan_open_frames_add(-(__s32)(kspan_depth(st) - (found - 1)));
	st->depth = found - 1;
	/*
	 * Read back: one value for the verifier whichever way the frame was
	 * found, so that it checks what follows once, not once per way.
	 */
	found = kspan_depth(st) + 1;
	frame = kspan_frame_at(st, found - 1);
	/* Every call but those of threads that suppress telemetry (kspan's own). */
	if (KSPAN_SETTING(plain, histogram) &&
	    kspan_tree_context(st, pid_tgid) != KSPAN_CTR_SUPPRESSED)
		kspan_hist_record(probe_id, frame->start_ns, now, ret);
	if (frame->suppressed)
		/* Counted at its entry. */
		return 0;
	if (found >= 2)
		parent = kspan_frame_at(st, found - 2);
	if (KSPAN_SETTING(plain, may_drop)) {
		int refused = kspan_refusal(frame, ret, now, probe_id);

		if (refused >= 0) {
			kspan_count_probe(probe_id, refused);
			if (KSPAN_SETTING(plain, sum) && kspan_tree_context(st, pid_tgid) < 0)
				kspan_add_sum(st->app_span_id, probe_id, now - frame->start_ns,
					      kspan_failed(ret));
			if (KSPAN_SETTING(plain, entry_caps))
				bpf_map_delete_elem(&kspan_entry_caps, &frame->span_id);
			if (frame->flags & KSPAN_FRAME_CHILD_SENT)
				kspan_emit_reparent(st, frame, parent, probe_id);
			/* Its children go under its parent, and so does what they lack. */
			if (parent)
				parent->descendants_dropped += frame->descendants_dropped;
			return 0;
		}
	}
	{
		/* About to be a span: whether its tree is recorded at all. */
		int skip = kspan_tree_context(st, pid_tgid);

		if (skip >= 0) {
			kspan_count(skip);
			if (KSPAN_SETTING(plain, entry_caps))
				bpf_map_delete_elem(&kspan_entry_caps, &frame->span_id);
			return 0;
		}
	}
	parent_id = parent ? kspan_frame_id(parent) : st->app_span_id;

	rec = bpf_ringbuf_reserve(&kspan_events, kspan_cfg.record_size, 0);
	if (!rec) {
		kspan_count(KSPAN_CTR_RINGBUF_FULL);
		if (KSPAN_SETTING(plain, entry_caps))
			bpf_map_delete_elem(&kspan_entry_caps, &frame->span_id);
		if (parent) {
			/* The call and what it lacked: its parent lacks them. */
			parent->descendants_dropped += frame->descendants_dropped;
			kspan_descendant_dropped(st, found - 1);
		}
		return 0;
	}
	kspan_made_trace_id(st->trace_id);
	__builtin_memcpy(rec->trace_id, st->trace_id, sizeof(rec->trace_id));
	rec->span_id = kspan_frame_id(frame);
	rec->parent_span_id = parent_id;
	rec->start_ns = frame->start_ns;
	rec->end_ns = now;
	rec->ret = ret;
	kspan_fill_ids(rec, pid_tgid, probe_id);
	rec->flags = KSPAN_REC_HAS_RET | kspan_parent_flags(parent);
	rec->descendants_dropped = frame->descendants_dropped;
	if (KSPAN_SETTING(plain, entry_caps))
		kspan_restore_entry_values(rec, frame->span_id);
	if (!plain)
		kspan_capture(rec, frame->args, ret, KSPAN_PHASE_EXIT);
	kspan_submit_span(rec);
	return 0;
}

/*
 * The session kfuncs (7.0+ prototypes, the program's context as argument),
 * weak: an object that has them still loads where the kernel does not, and
 * only the session programs, never loaded there, call them.
 */
extern _Bool bpf_session_is_return(void *ctx) __ksym __weak;
/* fsession: 8 bytes the call's entry and exit share, zeroed per call. */
extern __u64 *bpf_session_cookie(void *ctx) __ksym __weak;
/* The 6.10 to 6.19 prototype of the same kfunc (kprobe.session only). */
extern _Bool bpf_session_is_return___noctx(void) __ksym __weak;

SEC("fentry")
int kspan_fentry(__u64 *ctx)
{
	__u64 pid_tgid;
	__u64 args[KSPAN_MAX_ARGS];
	struct task_struct *task;

	if (!kspan_wanted(&pid_tgid))
		return 0;
	kspan_trampoline_args(ctx, args);
	task = bpf_get_current_task_btf();
	return kspan_entry(args, kspan_cfg.probe_id, task, kspan_call_of(ctx, task), NULL,
			   pid_tgid, 0, 0);
}

SEC("fexit")
int kspan_fexit(__u64 *ctx)
{
	__u64 pid_tgid;
	__u64 args[KSPAN_MAX_ARGS];
	struct task_struct *task;
	__u64 ret = 0;

	if (!kspan_wanted(&pid_tgid))
		return 0;
	bpf_get_func_ret(ctx, &ret);
	kspan_trampoline_args(ctx, args);
	task = bpf_get_current_task_btf();
	return kspan_exit(ret, kspan_cfg.probe_id, task, kspan_call_of(ctx, task), NULL, args,
			  pid_tgid, 0);
}

/*
 * fsession (Linux 7.0+): one program at both ends of the function, so one
 * trampoline link where fentry + fexit take two. The per-task stack pairs
 * the ends as it does for fentry/fexit (nesting, recursion, lost exits);
 * the session cookie tells the exit whether its entry pushed a frame,
 * which, and of which probe. The probe id is the attach cookie when one
 * program serves many functions through one fsession.multi link (Linux
 * 7.2+): read at the entry, and at an exit only when its entry pushed no
 * frame.
 * Arguments and the return value are read through helpers, as that
 * attach type requires. Must return 0. `plain`: see KSPAN_SETTING.
 */
static __always_inline int kspan_session(__u64 *ctx, const int plain)
{
	__u64 pid_tgid;
	__u64 args[KSPAN_MAX_ARGS];
	struct task_struct *task;
	__u64 ret = 0;

	if (!kspan_wanted(&pid_tgid))
		return 0;
	task = bpf_get_current_task_btf();
	if (bpf_session_is_return(ctx)) {
		__u64 *cookie = bpf_session_cookie(ctx);

		bpf_get_func_ret(ctx, &ret);
		/* The entry's stamp names the probe: no attach cookie to read. */
		kspan_exit(ret, *cookie ? (__u32)*cookie : kspan_probe_id(ctx), task,
			   kspan_call_of(ctx, task), cookie, NULL, pid_tgid, plain);
		return 0;
	}
	kspan_trampoline_args(ctx, args);
	kspan_entry(args, kspan_probe_id(ctx), task, kspan_call_of(ctx, task),
		    bpf_session_cookie(ctx), pid_tgid, 1, plain);
	return 0;
}

SEC("fsession")
int kspan_fsession(__u64 *ctx)
{
	return kspan_session(ctx, 0);
}

/*
 * The same, loaded with no target for one fsession.multi link (libbpf 1.7
 * has no section for it: kspan registers this one with libbpf).
 */
SEC("fsession.multi")
int kspan_fsession_multi(__u64 *ctx)
{
	return kspan_session(ctx, 0);
}

/*
 * The same for probes that capture, refuse, sum and count nothing (see
 * KSPAN_SETTING): what patterns such as `vfs_*` mostly are, and where
 * attaching costs most. Its name tells it apart in `bpftool prog`
 * (names keep 15 characters).
 */
SEC("fsession.multi")
int kspan_plain_fsession_multi(__u64 *ctx)
{
	return kspan_session(ctx, 1);
}

static __always_inline int kspan_on_kprobe(struct pt_regs *regs)
{
	__u64 pid_tgid;
	__u64 args[KSPAN_MAX_ARGS];

	if (!kspan_wanted(&pid_tgid))
		return 0;
	kspan_kprobe_args(regs, args);
	return kspan_entry(args, kspan_probe_id(regs), bpf_get_current_task_btf(), 0, NULL,
			   pid_tgid, 0, 0);
}

static __always_inline int kspan_on_kretprobe(struct pt_regs *regs)
{
	__u64 pid_tgid;
	if (!kspan_wanted(&pid_tgid))
		return 0;
	return kspan_exit(PT_REGS_RC(regs), kspan_probe_id(regs), bpf_get_current_task_btf(), 0,
			  NULL, NULL, pid_tgid, 0);
}

SEC("kprobe")
int kspan_kprobe(struct pt_regs *regs)
{
	return kspan_on_kprobe(regs);
}

SEC("kretprobe")
int kspan_kretprobe(struct pt_regs *regs)
{
	return kspan_on_kretprobe(regs);
}

/*
 * The same two, attached to many functions by one kprobe.multi link each
 * (fprobe, Linux 5.18+ built with CONFIG_FPROBE); the probe id is the
 * cookie of each function.
 */
SEC("kprobe.multi")
int kspan_kprobe_multi(struct pt_regs *regs)
{
	return kspan_on_kprobe(regs);
}

SEC("kretprobe.multi")
int kspan_kretprobe_multi(struct pt_regs *regs)
{
	return kspan_on_kretprobe(regs);
}

/*
 * kprobe.session (Linux 6.10+, a kprobe.multi link): one program at entry
 * and return. An entry that returns nonzero skips the return: calls of
 * other processes, and calls while kspan is off, cost one entry only.
 */
SEC("kprobe.session")
int kspan_kprobe_session(struct pt_regs *regs)
{
	__u64 pid_tgid;
	__u64 args[KSPAN_MAX_ARGS];
	_Bool is_return;

	if (!kspan_wanted(&pid_tgid))
		return 1;
	if (bpf_ksym_exists(bpf_session_is_return))
		is_return = bpf_session_is_return(regs);
	else
		is_return = bpf_session_is_return___noctx();
	if (is_return) {
		kspan_exit(PT_REGS_RC(regs), kspan_probe_id(regs), bpf_get_current_task_btf(), 0,
			   NULL, NULL, pid_tgid, 0);
		return 0;
	}
	kspan_kprobe_args(regs, args);
	kspan_entry(args, kspan_probe_id(regs), bpf_get_current_task_btf(), 0, NULL, pid_tgid, 1,
		    0);
	return 0;
}

/*
 * Syscall sources: the syscalls:sys_enter_<name> and sys_exit_<name>
 * tracepoints. Their records are the common header (8 bytes), the syscall
 * number (padded to 8), then the six argument registers on entry, or the
 * return value on exit.
 */
SEC("tracepoint")
int kspan_sys_enter(__u64 *ctx)
{
	__u64 pid_tgid;
	__u64 args[KSPAN_MAX_ARGS];

	if (!kspan_wanted(&pid_tgid))
		return 0;
#pragma unroll
	for (int i = 0; i < KSPAN_MAX_ARGS; i++)
		args[i] = i < kspan_cfg.nr_args ? ctx[2 + i] : 0;
	return kspan_entry(args, kspan_cfg.probe_id, bpf_get_current_task_btf(), 0, NULL,
			   pid_tgid, 1, 0);
}

SEC("tracepoint")
int kspan_sys_exit(__u64 *ctx)
{
	__u64 pid_tgid;
	if (!kspan_wanted(&pid_tgid))
		return 0;
	return kspan_exit(ctx[2], kspan_cfg.probe_id, bpf_get_current_task_btf(), 0, NULL, NULL,
			  pid_tgid, 0);
}

/*
 * The scheduler's account of application spans (see kspan.h). Two events:
 * a switch runs on the task that leaves the CPU, which is then current, so
 * its thread context names the span it leaves in; the switch-in of the
 * next task needs only what its own switch-out left by tid. A wake-up runs
 * on the waker (or in an interrupt), whose context names the span that
 * released the wait. Other processes' threads return at the first check:
 * their tgid (BTF tracepoints), or a hash miss on their tid (classic ones).
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
 * wakee's time on a CPU. The run queue is found through a task on it (its
 * scheduling entity's `cfs_rq`, with group scheduling). The tasks are BTF
 * pointers (the tracepoint's, or the current task's), read with plain
 * loads the verifier guards: no helper call a switch.
 */
struct rq___kspan {
	__u64 clock;
	struct task_struct___rq *curr;
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

	if (f && bpf_core_field_exists(f->in_memstall) && BPF_CORE_READ_BITFIELD(f, in_memstall))
		return KSPAN_BLOCK_MEMORY;
	if (f && bpf_core_field_exists(f->in_thrashing) && BPF_CORE_READ_BITFIELD(f, in_thrashing))
		return KSPAN_BLOCK_MEMORY;
	if (f && bpf_core_field_exists(f->in_iowait) && BPF_CORE_READ_BITFIELD(f, in_iowait))
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
	struct pt_regs___kspan *regs = (void *)bpf_task_pt_regs(task);
	long ax = 0;

	/* In a system call its entry keeps -ENOSYS in `ax` until it returns. */
	if (regs && !bpf_core_read(&ax, sizeof(ax), &regs->ax) && ax == -38)
		bpf_core_read(&nr, sizeof(nr), &regs->orig_ax);
#elif defined(__TARGET_ARCH_arm64)
	struct pt_regs___kspan *regs = (void *)bpf_task_pt_regs(task);
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
	struct pt_regs___kspan *regs = (void *)bpf_task_pt_regs(task);
	long orig_ax = 0;

	if (!regs || bpf_core_read(&orig_ax, sizeof(orig_ax), &regs->orig_ax))
		return 0;
	return orig_ax == -1;
#elif defined(__TARGET_ARCH_arm64)
	struct pt_regs___kspan *regs = (void *)bpf_task_pt_regs(task);
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
	return prev->sched_info.run_delay;
}

/*
 * The run-queue time the kernel's account gives the task `next_tid`
 * coming onto this CPU now, from the task `prev` leaving it, since its
 * switch-out, when its run-queue total was `run_delay_out`: what a move
 * between run queues added (sched_info_dequeue), and this run queue's
 * clock less when the task was queued on it.
 */
static __always_inline __u64 kspan_kernel_queued_ns(struct task_struct___rq *prev, __u32 next_tid,
						    __u64 run_delay_out)
{
	struct task_struct___rq *next;
	struct cfs_rq___kspan *cfs_rq;
	struct rq___kspan *rq;
	__u64 clock, queued, run_delay;

	if (run_delay_out == KSPAN_QUEUED_UNKNOWN || !kspan_kernel_queue_known(prev))
		return KSPAN_QUEUED_UNKNOWN;
	cfs_rq = prev->se.cfs_rq;
	if (!cfs_rq)
		return KSPAN_QUEUED_UNKNOWN;
	rq = cfs_rq->rq;
	if (!rq)
		return KSPAN_QUEUED_UNKNOWN;
	/* The scheduler names the task coming in before the tracepoint. */
	next = rq->curr;
	if (!next || (__u32)next->pid != next_tid)
		return KSPAN_QUEUED_UNKNOWN;
	clock = rq->clock;
	queued = next->sched_info.last_queued;
	run_delay = next->sched_info.run_delay;
	if (!queued || queued > clock || run_delay < run_delay_out)
		return KSPAN_QUEUED_UNKNOWN;
	return run_delay - run_delay_out + clock - queued;
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
			__sync_lock_test_and_set(&slot->tag, (__u64)1);
			return &slot->sum;
		}
	}
	kspan_count(KSPAN_CTR_SUM_FAILED);
	return NULL;
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
	t->run_delay_out = kspan_kernel_run_delay(task);
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
			__sync_lock_test_and_set(&open->tid, (__u64)tid);
		}
	}
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
	__u64 out, wake, run_from, queued, kernel_queued;
	int long_wait;

	if (!t || !t->out_ns)
		return;
	out = t->out_ns;
	t->out_ns = 0;
	{
		struct kspan_sched_open *open = kspan_sched_open_of(tid);

		if (open)
			__sync_val_compare_and_swap(&open->tid, (__u64)tid, 0);
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
	 * the span's figures are schedstat's and taskstats': at most the time
	 * since the wake-up (or the whole interval when the wake-up was not
	 * seen); what the kernel counts as the task's CPU time stays out of
	 * the off-CPU figures. The wait span keeps the times as they passed.
	 */
	queued = now - run_from;
	kernel_queued = kspan_kernel_queued_ns(prev, tid, t->run_delay_out);
	if (kernel_queued != KSPAN_QUEUED_UNKNOWN) {
		__u64 most = run_from == now ? now - out : now - run_from;

		queued = kernel_queued < most ? kernel_queued : most;
	}
	if (!t->skip)
		kspan_sched_add(t, run_from == now ? now - out - queued : run_from - out, queued,
				long_wait);
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
 * Block requests (see kspan.h): those in flight by request, and on each
 * CPU the last to complete, for the wake-up its completion makes next.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KSPAN_BLOCK_REQUESTS_MAX);
	__type(key, __u64);
	__type(value, struct kspan_block_request);
} kspan_block_requests SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kspan_block_done);
} kspan_block_done SEC(".maps");

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

/* Whether the process's recording is on (the switch user space turns on). */
static __always_inline int kspan_sched_enabled(void)
{
	__u32 zero = 0, *enabled = bpf_map_lookup_elem(&kspan_control, &zero);

	return enabled && *enabled;
}

/*
 * sched_switch as a BTF tracepoint (raw arguments: the raw state of
 * `prev`, and whether it was preempted).
 */
SEC("tp_btf/sched_switch")
int BPF_PROG(kspan_tp_sched_switch, _Bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
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
		__u32 state;

		if (prev_state & KSPAN_TASK_DEAD) {
			__u32 tid = p->pid;

			bpf_map_delete_elem(&kspan_sched_tasks, &tid);
		} else {
			if (preempt || !prev_state)
				state = KSPAN_SCHED_PREEMPTED;
			else if (prev_state & KSPAN_TASK_UNINTERRUPTIBLE)
				state = prev_state & KSPAN_TASK_NOLOAD ? KSPAN_SCHED_OTHER
								       : KSPAN_SCHED_BLOCKED;
			else if (prev_state & KSPAN_TASK_INTERRUPTIBLE)
				state = KSPAN_SCHED_SLEEPING;
			else
				state = KSPAN_SCHED_OTHER;
			kspan_sched_out(ctx, pid_tgid, state, !preempt && prev_state, 0, prev,
					now);
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
	struct pt_regs *regs = (void *)bpf_task_pt_regs(task);
	long orig_rax = 0;
	__u64 cs = 0;

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
	current = bpf_get_current_task_btf();
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

	if ((__u32)(pid_tgid >> 32) == target && kspan_sched_enabled()) {
		__s64 reported = args->prev_state;
		__u32 tid = (__u32)pid_tgid, state;

		if (reported & KSPAN_REPORT_EXITING) {
			bpf_map_delete_elem(&kspan_sched_tasks, &tid);
		} else {
			if (!reported || reported >= KSPAN_REPORT_MAX)
				state = KSPAN_SCHED_PREEMPTED;
			else if (reported & KSPAN_TASK_UNINTERRUPTIBLE)
				state = KSPAN_SCHED_BLOCKED;
			else if (reported & KSPAN_TASK_INTERRUPTIBLE)
				state = KSPAN_SCHED_SLEEPING;
			else
				state = KSPAN_SCHED_OTHER;
			kspan_sched_out(args, pid_tgid, state,
					reported && reported < KSPAN_REPORT_MAX, 1,
					bpf_get_current_task_btf(), now);
		}
	}
	kspan_sched_in((__u32)args->next_pid, target, NULL, bpf_get_current_task_btf(), now);
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

/*
 * Kernel lock contention (lock:contention_begin/_end, Linux 5.19+), with
 * the scheduler's causes on: both events run on the contending thread. A
 * contention is kept on the thread's entry from its begin to its end; a
 * begin for the same lock while it is open is the mutex's second (it
 * stops spinning to sleep: its flags then say so), one for another lock
 * is a lock taken inside the wait (a mutex's wait_lock), whose time is the
 * outer wait's. The end adds the time to the span current then (a thread
 * cannot change spans inside the kernel), and a long one becomes a wait
 * record of its own, naming the lock and its owner at the begin.
 */
struct kspan_atomic_long {
	long counter;
};

/* The owner word of a mutex and an rwsem: a task pointer with flags in its low bits. */
struct mutex___kspan {
	struct kspan_atomic_long owner;
} __attribute__((preserve_access_index));

struct rw_semaphore___kspan {
	struct kspan_atomic_long owner;
} __attribute__((preserve_access_index));

/* MUTEX_FLAGS, and RWSEM_OWNER_FLAGS_MASK's bits with room to spare. */
#define KSPAN_LOCK_OWNER_FLAGS 0x7UL
/* RWSEM_READER_OWNED: the owner word names one reader of several. */
#define KSPAN_RWSEM_READER_OWNED 0x1UL

struct task_struct___owner {
	int pid;
	int tgid;
	char comm[16];
} __attribute__((preserve_access_index));

static __always_inline __u32 kspan_lock_kind(__u32 flags)
{
	if (flags & (KSPAN_LCB_F_MUTEX | KSPAN_LCB_F_RT))
		return KSPAN_LOCK_MUTEX;
	if (flags & KSPAN_LCB_F_SPIN)
		return KSPAN_LOCK_SPIN;
	if (flags & (KSPAN_LCB_F_READ | KSPAN_LCB_F_WRITE | KSPAN_LCB_F_PERCPU))
		return KSPAN_LOCK_RWSEM;
	return KSPAN_LOCK_OTHER;
}

/*
 * The owner of `lock` now, into `t`: a mutex's, or an rwsem's held for
 * writing (one held for reading names just its last reader). Any read
 * that fails leaves the owner unknown.
 */
static __always_inline void kspan_lock_owner(struct kspan_sched_task *t, __u64 lock, __u32 flags)
{
	struct task_struct___owner *owner;
	struct kspan_thread_ctx c = {};
	long word = 0;
	__u64 tp = 0, slot = 0;

	t->lock_owner_tid = 0;
	t->lock_owner_span_id = 0;
	if (flags & KSPAN_LCB_F_MUTEX) {
		struct mutex___kspan *m = (void *)lock;

		if (bpf_core_read(&word, sizeof(word), &m->owner.counter))
			return;
	} else if ((flags & (KSPAN_LCB_F_READ | KSPAN_LCB_F_WRITE)) &&
		   !(flags & (KSPAN_LCB_F_SPIN | KSPAN_LCB_F_PERCPU | KSPAN_LCB_F_RT))) {
		struct rw_semaphore___kspan *r = (void *)lock;

		if (!bpf_core_field_exists(r->owner) ||
		    bpf_core_read(&word, sizeof(word), &r->owner.counter) ||
		    (word & KSPAN_RWSEM_READER_OWNED))
			return;
	} else {
		return;
	}
	owner = (void *)(word & ~KSPAN_LOCK_OWNER_FLAGS);
	if (!owner)
		return;
	if (bpf_core_read(&t->lock_owner_pid, sizeof(t->lock_owner_pid), &owner->tgid) ||
	    bpf_core_read(&t->lock_owner_tid, sizeof(t->lock_owner_tid), &owner->pid)) {
		t->lock_owner_tid = 0;
		return;
	}
	bpf_core_read(t->lock_owner_comm, sizeof(t->lock_owner_comm), &owner->comm);
	/*
	 * An owner of this process: its application span, from its thread
	 * context in the process's memory (the current task's too).
	 */
	if (t->lock_owner_pid != kspan_cfg.ctx_tgid || !kspan_cfg.task_tp_offset)
		return;
	if (bpf_probe_read_kernel(&tp, sizeof(tp), (void *)owner + kspan_cfg.task_tp_offset) || !tp)
		return;
	if (bpf_probe_read_user(&slot, sizeof(slot), (void *)(tp + kspan_cfg.thread_ctx_offset)) ||
	    !slot)
		return;
	if (bpf_probe_read_user(&c, sizeof(c), (void *)slot) || c.valid != 1)
		return;
	__builtin_memcpy(t->lock_owner_trace_id, c.trace_id, sizeof(c.trace_id));
	t->lock_owner_span_id = __builtin_bswap64(*(__u64 *)c.span_id);
}

static __always_inline void kspan_lock_begin(__u64 lock, __u32 flags)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct kspan_sched_task *t;

	if ((__u32)(pid_tgid >> 32) != kspan_cfg.target_tgid || !kspan_sched_enabled())
		return;
	t = kspan_sched_task_made(tid);
	if (!t)
		return;
	if (t->lock_addr) {
		if (t->lock_addr == lock)
			t->lock_flags = flags;
		return;
	}
	t->lock_flags = flags;
	t->lock_begin_ns = bpf_ktime_get_ns();
	kspan_lock_owner(t, lock, flags);
	t->lock_addr = lock;
}

static __always_inline void kspan_lock_end(void *ctx, __u64 lock)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid(), now, took;
	__u32 tid = (__u32)pid_tgid, kind;
	struct kspan_sched_task *t;
	struct kspan_thread_ctx c = {};
	struct kspan_sched_sum *s;
	struct kspan_wait_record *w;
	__u64 span;

	if ((__u32)(pid_tgid >> 32) != kspan_cfg.target_tgid)
		return;
	t = bpf_map_lookup_elem(&kspan_sched_tasks, &tid);
	if (!t || !lock || t->lock_addr != lock)
		return;
	now = bpf_ktime_get_ns();
	t->lock_addr = 0;
	if (now < t->lock_begin_ns || !kspan_sched_enabled())
		return;
	took = now - t->lock_begin_ns;
	kind = kspan_lock_kind(t->lock_flags);
	if (!kspan_recorded_span(&c, pid_tgid, &span))
		return;
	s = kspan_sched_sum_of(span);
	if (s && kind < KSPAN_LOCK_KINDS) {
		__sync_fetch_and_add(&s->lock_ns[kind], took);
		__sync_fetch_and_add(&s->locks[kind], 1);
	}
	if (!kspan_cfg.wait_min_ns || took < kspan_cfg.wait_min_ns)
		return;
	if (kspan_overloaded(1)) {
		kspan_count(KSPAN_CTR_OVERLOAD);
		return;
	}
	w = bpf_ringbuf_reserve(&kspan_events, sizeof(*w), 0);
	if (!w) {
		kspan_count(KSPAN_CTR_RINGBUF_FULL);
		return;
	}
	__builtin_memcpy(w->rec.trace_id, c.trace_id, sizeof(w->rec.trace_id));
	w->rec.span_id = kspan_new_id();
	w->rec.parent_span_id = span;
	w->rec.start_ns = t->lock_begin_ns;
	w->rec.end_ns = now;
	w->rec.ret = 0;
	w->rec.probe_id = KSPAN_WAIT_PROBE_ID;
	w->rec.pid = pid_tgid >> 32;
	w->rec.tid = tid;
	w->rec.flags = KSPAN_REC_WAIT;
	w->rec.descendants_dropped = 0;
	w->wake_ns = now;
	w->state = KSPAN_SCHED_LOCK;
	w->cause = kind;
	w->lock_addr = lock;
	w->lock_flags = t->lock_flags;
	w->in_fault = 0;
	w->waker_kind = t->lock_owner_tid ? KSPAN_WAKER_TASK : KSPAN_WAKER_NONE;
	w->waker_pid = t->lock_owner_pid;
	w->waker_tid = t->lock_owner_tid;
	__builtin_memcpy(w->waker_comm, t->lock_owner_comm, sizeof(w->waker_comm));
	__builtin_memcpy(w->waker_trace_id, t->lock_owner_trace_id, sizeof(w->waker_trace_id));
	w->waker_span_id = t->lock_owner_span_id;
	w->waker_nframes = 0;
	__builtin_memset(w->waker_frames, 0, sizeof(w->waker_frames));
	__builtin_memset(&w->request, 0, sizeof(w->request));
	__builtin_memset(&w->waker_wait, 0, sizeof(w->waker_wait));
	/* Where the lock is taken: the stack it was acquired on. */
	{
		long n = bpf_get_stack(ctx, w->frames, sizeof(w->frames), 0);

		w->nframes = n > 0 ? n / 8 : 0;
	}
	kspan_submit_span(w);
}

/*
 * A lock taken in an interrupt contends for the interrupt, not for the
 * task it interrupted: the program's stack tells (an interrupt's, not the
 * task's), as for sched_waking.
 */
SEC("tp_btf/contention_begin")
int BPF_PROG(kspan_tp_lock_begin, void *lock, unsigned int flags)
{
	if (kspan_call_of(ctx, bpf_get_current_task_btf()))
		kspan_lock_begin((__u64)lock, flags);
	return 0;
}

SEC("tp_btf/contention_end")
int BPF_PROG(kspan_tp_lock_end, void *lock, int ret)
{
	if (kspan_call_of(ctx, bpf_get_current_task_btf()))
		kspan_lock_end(ctx, (__u64)lock);
	return 0;
}

/* The same as classic tracepoints (lock:contention_begin, lock:contention_end). */
struct kspan_lock_args {
	__u64 common;
	__u64 lock_addr;
	__u32 flags_or_ret;
};

SEC("tracepoint/lock/contention_begin")
int kspan_lock_begin_tp(struct kspan_lock_args *args)
{
	kspan_lock_begin(args->lock_addr, args->flags_or_ret);
	return 0;
}

SEC("tracepoint/lock/contention_end")
int kspan_lock_end_tp(struct kspan_lock_args *args)
{
	kspan_lock_end(args, args->lock_addr);
	return 0;
}

/*
 * Block requests, with the causes on (BTF tracepoints only: the classic
 * ones give no request to follow). The request's fields, by CO-RE: the
 * device of its partition (or of its queue's disk), its first sector, and
 * its bytes left.
 */
struct request;

struct block_device___kspan {
	__u32 bd_dev;
} __attribute__((preserve_access_index));

struct gendisk___kspan {
	int major;
	int first_minor;
} __attribute__((preserve_access_index));

struct request_queue___kspan {
	struct gendisk___kspan *disk;
} __attribute__((preserve_access_index));

struct request___kspan {
	struct request_queue___kspan *q;
	struct block_device___kspan *part;
	unsigned int __data_len;
	__u64 __sector;
} __attribute__((preserve_access_index));

/* The kernel's dev_t of `rq`'s device (MKDEV: major << 20 | minor). */
static __always_inline __u64 kspan_request_dev(struct request___kspan *rq)
{
	struct block_device___kspan *part = rq->part;
	struct gendisk___kspan *disk;

	if (part)
		return part->bd_dev;
	if (!rq->q)
		return 0;
	disk = rq->q->disk;
	if (!disk)
		return 0;
	return ((__u64)disk->major << 20) | (__u32)disk->first_minor;
}

/*
 * The request `rq` enters the queue (`issue` 0) or goes to the driver
 * (`issue` 1): kept from its first event on a thread of the process under
 * a recorded span; its issue time stamped wherever it is issued.
 */
static __always_inline void kspan_block_queued(__u64 rq, int issue)
{
	struct kspan_block_request *r = bpf_map_lookup_elem(&kspan_block_requests, &rq);
	struct kspan_block_request fresh = {};
	struct kspan_thread_ctx c = {};
	__u64 pid_tgid, now = bpf_ktime_get_ns();

	if (r) {
		if (issue)
			r->issue_ns = now;
		return;
	}
	pid_tgid = bpf_get_current_pid_tgid();
	if ((__u32)(pid_tgid >> 32) != kspan_cfg.target_tgid || !kspan_sched_enabled())
		return;
	if (!kspan_recorded_span(&c, pid_tgid, &fresh.span))
		return;
	fresh.tid = (__u32)pid_tgid;
	fresh.insert_ns = now;
	fresh.issue_ns = issue ? now : 0;
	bpf_map_update_elem(&kspan_block_requests, &rq, &fresh, BPF_ANY);
}

/* Which of a span's device rows `dev` is summed in (KSPAN_BLOCK_DEVICES: the rest). */
static __always_inline __u32 kspan_block_row(struct kspan_sched_sum *s, __u64 dev)
{
	__u32 i;

	for (i = 0; i < KSPAN_BLOCK_DEVICES; i++) {
		__u64 held = *(volatile __u64 *)&s->block_dev[i];

		if (held == dev)
			return i;
		if (!held && __sync_val_compare_and_swap(&s->block_dev[i], 0, dev) == 0)
			return i;
		if (*(volatile __u64 *)&s->block_dev[i] == dev)
			return i;
	}
	return KSPAN_BLOCK_DEVICES;
}

SEC("tp_btf/block_rq_insert")
int BPF_PROG(kspan_tp_block_insert, struct request *rq)
{
	kspan_block_queued((__u64)rq, 0);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(kspan_tp_block_issue, struct request *rq)
{
	kspan_block_queued((__u64)rq, 1);
	return 0;
}

/*
 * A request completes `nr_bytes` of its bytes left: the last of them
 * complete it. Its totals go to its span; the CPU remembers it for the
 * wake-up its completion makes next (the waiter's, in the same path).
 */
SEC("tp_btf/block_rq_complete")
int BPF_PROG(kspan_tp_block_complete, struct request *req, int error, unsigned int nr_bytes)
{
	struct request___kspan *rq = (void *)req;
	__u64 key = (__u64)req, now = bpf_ktime_get_ns(), issue, queue_ns, device_ns;
	struct kspan_block_request *r = bpf_map_lookup_elem(&kspan_block_requests, &key);
	struct kspan_block_done *done;
	struct kspan_sched_sum *s;
	__u32 zero = 0, row;
	__u64 dev, bytes;

	if (!r)
		return 0;
	bytes = rq->__data_len;
	if (nr_bytes < bytes) {
		/* A part of it: the rest completes later. */
		return 0;
	}
	issue = r->issue_ns ? r->issue_ns : r->insert_ns;
	queue_ns = issue > r->insert_ns ? issue - r->insert_ns : 0;
	device_ns = now > issue ? now - issue : 0;
	dev = kspan_request_dev(rq);
	done = bpf_map_lookup_elem(&kspan_block_done, &zero);
	if (done) {
		done->complete_ns = now;
		done->dev = dev;
		done->sector = rq->__sector;
		done->bytes = bytes;
		done->queue_ns = queue_ns;
		done->device_ns = device_ns;
	}
	/* Its thread waiting on I/O: this is what it waits for. */
	{
		__u32 tid = r->tid;
		struct kspan_sched_task *t = bpf_map_lookup_elem(&kspan_sched_tasks, &tid);

		if (t && t->out_ns && t->state == KSPAN_SCHED_BLOCKED && t->cause == KSPAN_BLOCK_IO &&
		    !t->request.complete_ns) {
			t->request.complete_ns = now;
			t->request.dev = dev;
			t->request.sector = rq->__sector;
			t->request.bytes = bytes;
			t->request.queue_ns = queue_ns;
			t->request.device_ns = device_ns;
		}
	}
	s = kspan_sched_sum_of(r->span);
	bpf_map_delete_elem(&kspan_block_requests, &key);
	if (!s)
		return 0;
	row = kspan_block_row(s, dev);
	if (row > KSPAN_BLOCK_DEVICES)
		return 0;
	__sync_fetch_and_add(&s->block_requests[row], 1);
	__sync_fetch_and_add(&s->block_bytes[row], bytes);
	__sync_fetch_and_add(&s->block_queue_ns[row], queue_ns);
	__sync_fetch_and_add(&s->block_device_ns[row], device_ns);
	return 0;
}

/*
 * Memory stalls, with the causes on: reclaim and compaction the thread
 * does itself, from their begin to their end (kcompactd's and kswapd's
 * own work is theirs). One at a time a thread: a begin while one is open
 * is inside it.
 */
static __always_inline void kspan_memory_begin(__u32 kind)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct kspan_sched_task *t;

	if ((__u32)(pid_tgid >> 32) != kspan_cfg.target_tgid || !kspan_sched_enabled())
		return;
	t = kspan_sched_task_made((__u32)pid_tgid);
	if (!t || t->memory_stall)
		return;
	t->memory_begin_ns = bpf_ktime_get_ns();
	t->memory_stall = kind + 1;
}

static __always_inline void kspan_memory_end(__u32 kind)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid(), now;
	__u32 tid = (__u32)pid_tgid;
	struct kspan_thread_ctx c = {};
	struct kspan_sched_task *t;
	struct kspan_sched_sum *s;
	__u64 span;

	if ((__u32)(pid_tgid >> 32) != kspan_cfg.target_tgid)
		return;
	t = bpf_map_lookup_elem(&kspan_sched_tasks, &tid);
	if (!t || t->memory_stall != kind + 1)
		return;
	t->memory_stall = 0;
	now = bpf_ktime_get_ns();
	if (now < t->memory_begin_ns || kind >= KSPAN_MEMORY_STALLS || !kspan_sched_enabled())
		return;
	if (!kspan_recorded_span(&c, pid_tgid, &span))
		return;
	s = kspan_sched_sum_of(span);
	if (!s)
		return;
	__sync_fetch_and_add(&s->memory_ns[kind], now - t->memory_begin_ns);
	__sync_fetch_and_add(&s->memory_stalls[kind], 1);
}

#define KSPAN_MEMORY_PROGRAMS(category, event, kind, what)                              \
	SEC("tp_btf/" #event)                                                          \
	int BPF_PROG(kspan_tp_##event)                                                 \
	{                                                                              \
		kspan_memory_##what(kind);                                             \
		return 0;                                                              \
	}                                                                              \
	SEC("tracepoint/" #category "/" #event)                                        \
	int kspan_##event##_tp(void *args)                                             \
	{                                                                              \
		kspan_memory_##what(kind);                                             \
		return 0;                                                              \
	}

KSPAN_MEMORY_PROGRAMS(vmscan, mm_vmscan_direct_reclaim_begin, KSPAN_MEMORY_RECLAIM, begin)
KSPAN_MEMORY_PROGRAMS(vmscan, mm_vmscan_direct_reclaim_end, KSPAN_MEMORY_RECLAIM, end)
KSPAN_MEMORY_PROGRAMS(vmscan, mm_vmscan_memcg_reclaim_begin, KSPAN_MEMORY_RECLAIM, begin)
KSPAN_MEMORY_PROGRAMS(vmscan, mm_vmscan_memcg_reclaim_end, KSPAN_MEMORY_RECLAIM, end)
KSPAN_MEMORY_PROGRAMS(compaction, mm_compaction_begin, KSPAN_MEMORY_COMPACTION, begin)
KSPAN_MEMORY_PROGRAMS(compaction, mm_compaction_end, KSPAN_MEMORY_COMPACTION, end)
