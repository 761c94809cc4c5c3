// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The probes' programs. The same verified code serves every traced
 * function: user space loads the pair of programs of the function's hook
 * (fentry/fexit trampolines, kprobe/kretprobe, or a syscall's enter/exit
 * tracepoints) with the function's settings in `kspan_cfg`, and copies of
 * those programs for the functions that follow. Entry pushes a frame on the
 * task's stack, exit pops it and emits one record, so a span costs one
 * ring-buffer record, not two; every hook shares the stack, so their spans
 * nest.
 *
 * This file holds the stack of open calls, the entry, the exit and the
 * programs of each hook; what a probe reads about a call is in
 * probes.bpf.h, and what it shares with the scheduler's account in
 * core.bpf.h. A file of the one compilation unit, kspan.bpf.c (which
 * includes it), not a unit of its own.
 */
#include "probes.bpf.h"

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
	st = kspan_stack_of(task, (__u32)pid_tgid, 0);
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

	st = kspan_stack_of(task, (__u32)pid_tgid, 1);
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
	st = kspan_stack_of(task, (__u32)pid_tgid, 0);
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

#ifdef KSPAN_LEGACY
		/* No bpf_loop (before 5.17): the verifier walks each frame. */
		for (__u32 i = 0; i < KSPAN_MAX_DEPTH; i++)
			if (kspan_search_step(i, &search))
				break;
#else
		bpf_loop(KSPAN_MAX_DEPTH, kspan_search_step, &search, 0);
#endif
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
	task = kspan_current_task();
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
	ret = kspan_trampoline_ret(ctx);
	kspan_trampoline_args(ctx, args);
	task = kspan_current_task();
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
	task = kspan_current_task();
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
	return kspan_entry(args, kspan_probe_id(regs), kspan_current_task(), 0, NULL,
			   pid_tgid, 0, 0);
}

static __always_inline int kspan_on_kretprobe(struct pt_regs *regs)
{
	__u64 pid_tgid;
	if (!kspan_wanted(&pid_tgid))
		return 0;
	return kspan_exit(PT_REGS_RC(regs), kspan_probe_id(regs), kspan_current_task(), 0,
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
		kspan_exit(PT_REGS_RC(regs), kspan_probe_id(regs), kspan_current_task(), 0,
			   NULL, NULL, pid_tgid, 0);
		return 0;
	}
	kspan_kprobe_args(regs, args);
	kspan_entry(args, kspan_probe_id(regs), kspan_current_task(), 0, NULL, pid_tgid, 1,
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
	return kspan_entry(args, kspan_cfg.probe_id, kspan_current_task(), 0, NULL,
			   pid_tgid, 1, 0);
}

SEC("tracepoint")
int kspan_sys_exit(__u64 *ctx)
{
	__u64 pid_tgid;
	if (!kspan_wanted(&pid_tgid))
		return 0;
	return kspan_exit(ctx[2], kspan_cfg.probe_id, kspan_current_task(), 0, NULL, NULL,
			  pid_tgid, 0);
}

/*
 * Where stacks are by thread id (no task local storage): a thread's entry
 * goes with the thread (sched_process_exit runs on the exiting thread). A
 * raw tracepoint: it needs neither tracefs nor a perf event, so a service
 * with CAP_BPF and CAP_PERFMON alone attaches it.
 */
SEC("raw_tracepoint/sched_process_exit")
int kspan_task_exit(void *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	bpf_map_delete_elem(&kspan_stacks_by_tid, &tid);
	return 0;
}
