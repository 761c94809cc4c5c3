/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The one definition of everything the kernel half and the Rust half of kspan
 * exchange: the per-program settings, the record emitted per finished span and
 * the drop counters. The Rust side gets these layouts from the BPF object's BTF
 * through the generated skeleton, so a field added here cannot drift.
 */
#ifndef KSPAN_H
#define KSPAN_H

/*
 * Arguments captured per call. x86-64 passes six arguments in registers and
 * BPF trampolines save at least six, so six covers what a register read can
 * reach on every kernel kspan supports.
 */
#define KSPAN_MAX_ARGS 6

/*
 * Kernel spans open at once on one task (nesting and recursion). A power of two
 * so that the index can be masked, which the verifier accepts as bounded.
 */
#define KSPAN_MAX_DEPTH 16

/* Attach modes, as the Rust `Mode` enum numbers them. */
enum kspan_mode {
	KSPAN_MODE_FENTRY = 0,
	KSPAN_MODE_FEXIT = 1,
};

/* Indexes of the per-CPU counters; every drop has one. */
enum kspan_counter {
	/* A record was lost because the ring buffer was full. */
	KSPAN_CTR_RINGBUF_FULL = 0,
	/* An entry was not recorded: the task already had KSPAN_MAX_DEPTH open spans. */
	KSPAN_CTR_STACK_DEPTH = 1,
	/* An open span was discarded because an outer span on the task ended first. */
	KSPAN_CTR_LOST_EXIT = 2,
	/* An exit arrived with no matching entry (e.g. the call began before attach). */
	KSPAN_CTR_UNMATCHED_EXIT = 3,
	/* The per-task stack could not be allocated. */
	KSPAN_CTR_NO_STORAGE = 4,
	/* Records handed to the ring buffer. */
	KSPAN_CTR_EMITTED = 5,
	KSPAN_CTR_COUNT = 6,
};

/* Record flags. */
#define KSPAN_REC_HAS_RET (1u << 0)
#define KSPAN_REC_INSTANT (1u << 1)

/* Settings of one loaded program pair, written into .rodata before load. */
struct kspan_config {
	/* Only calls made by this process are traced; 0 traces every process. */
	__u32 target_tgid;
	/* Index of the probe in the runtime's table, copied into each record. */
	__u32 probe_id;
	/* How many leading arguments to capture (<= KSPAN_MAX_ARGS). */
	__u32 nr_args;
	/* enum kspan_mode. */
	__u32 mode;
};

/* One open kernel span on a task's stack. */
struct kspan_frame {
	__u64 start_ns;
	__u64 span_id;
	__u64 args[KSPAN_MAX_ARGS];
	__u32 probe_id;
	__u32 pad;
};

/* Per-task stack of open kernel spans (task local storage). */
struct kspan_task_stack {
	/* Trace id shared by the spans of one outermost call. */
	__u8 trace_id[16];
	/* Number of valid frames. */
	__u32 depth;
	/* Entries not pushed because the stack was full; their exits are skipped. */
	__u32 overflow;
	struct kspan_frame frames[KSPAN_MAX_DEPTH];
};

/* One finished span, as it travels through the ring buffer. */
struct kspan_record {
	__u8 trace_id[16];
	__u64 span_id;
	/* Span id of the enclosing kernel span on the same task, 0 for none. */
	__u64 parent_span_id;
	/* CLOCK_MONOTONIC nanoseconds. */
	__u64 start_ns;
	__u64 end_ns;
	/* Raw argument registers, the first nr_args of them valid. */
	__u64 args[KSPAN_MAX_ARGS];
	/* Raw return register, valid with KSPAN_REC_HAS_RET. */
	__u64 ret;
	__u32 probe_id;
	/* Process (tgid) and thread (pid) ids as user space sees them. */
	__u32 pid;
	__u32 tid;
	/* Number of kernel spans that enclosed this one on its task. */
	__u16 depth;
	/* KSPAN_REC_* bits. */
	__u16 flags;
};

#endif /* KSPAN_H */
