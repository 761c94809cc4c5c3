/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The probes' own maps (the per-task stacks of open calls, entry values,
 * per-probe counters, rate limits, sums, histograms) and what a probe
 * reads and decides about one call: its trace context, arguments,
 * captures, predicate, rate limit, sums and histogram. Included by
 * probes.bpf.c, whose source it is part of: a file apart so that each file
 * stays readable.
 */
#ifndef KSPAN_PROBES_BPF_H
#define KSPAN_PROBES_BPF_H

#include "core.bpf.h"

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
 * The same where the kernel lacks task local storage for the program's
 * type (KSPAN_KF_TASK_STORAGE clear, Linux before 5.11): by thread id,
 * each thread's entry deleted at its exit (kspan_task_exit). Preallocated,
 * as tracing programs need; made only there, sized by the runtime.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kspan_task_stack);
} kspan_stacks_by_tid SEC(".maps");

/*
 * The open calls of `task` (thread `tid`), made empty first when `create`;
 * NULL when it has none, or none could be made (the thread map full).
 */
static __always_inline struct kspan_task_stack *kspan_stack_of(struct task_struct *task,
							       __u32 tid, const int create)
{
	struct kspan_task_stack *st;
	__u32 zero = 0;
	void *empty;

	if (kspan_has(KSPAN_KF_TASK_STORAGE))
		return bpf_task_storage_get(&kspan_stacks, task, 0,
					    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	st = bpf_map_lookup_elem(&kspan_stacks_by_tid, &tid);
	if (st || !create)
		return st;
	empty = bpf_map_lookup_elem(&kspan_zero, &zero);
	if (!empty)
		return NULL;
	bpf_map_update_elem(&kspan_stacks_by_tid, &tid, empty, BPF_NOEXIST);
	return bpf_map_lookup_elem(&kspan_stacks_by_tid, &tid);
}

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
		if (i >= kspan_cfg.nr_args)
			continue;
		if (kspan_has(KSPAN_KF_FUNC_ARGS))
			bpf_get_func_arg(ctx, i, &args[i]);
		else
			args[i] = ctx[i];
	}
}

/*
 * The return value of a trampoline's function: after its arguments in the
 * context, where no helper reads it.
 */
static __always_inline __u64 kspan_trampoline_ret(__u64 *ctx)
{
	__u64 ret = 0;

	if (kspan_has(KSPAN_KF_FUNC_ARGS)) {
		bpf_get_func_ret(ctx, &ret);
		return ret;
	}
	/* Trampolines take at most KSPAN_MAX_TRAMPOLINE_ARGS arguments. */
#pragma unroll
	for (int i = 0; i <= KSPAN_MAX_TRAMPOLINE_ARGS; i++)
		if (i == kspan_cfg.ret_slot)
			ret = ctx[i];
	return ret;
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
		if (kspan_cmpxchg(&rate->due_ns, due, from + interval) == due)
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
			kspan_publish(&slot->tag, (__u64)tag);
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

#endif /* KSPAN_PROBES_BPF_H */
