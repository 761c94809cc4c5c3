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
/*
 * Arguments a trampoline can pass before Linux 5.17 (x86-64 registers):
 * where kspan_trampoline_ret looks for the return value without a helper.
 */
#define KSPAN_MAX_TRAMPOLINE_ARGS 6
/* kspan_config.ret_slot of a function returning void. */
#define KSPAN_NO_RET_SLOT 255

/* Values captured per call (arguments, fields through pointers, strings). */
#define KSPAN_MAX_CAPS 8

/* Pointer hops and member offsets per field path (`a->b.c->d`). */
#define KSPAN_MAX_STEPS 8

/*
 * Bytes of strings and buffers per record. 1 KiB keeps a record well under a
 * page and lets a probe carry, say, a 255-byte path and a 512-byte buffer.
 */
#define KSPAN_MAX_DATA 1024
/*
 * Records waiting in the ring buffer before the consumer is woken: a wakeup
 * per record costs an irq_work round trip on every traced call. 256 KiB is a
 * sixteenth of the ring (about 1,300 records of scalars); below it, the
 * consumer's timer (50 ms) collects them.
 */
#define KSPAN_WAKEUP_BYTES (256 * 1024)
/*
 * A CPU asks how much is waiting at every this many of its span records
 * (a power of two), not at each: asking costs a helper call.
 */
#define KSPAN_WAKEUP_CHECK_RECORDS 64

/* Comparisons of a probe's filter (`filter = "count >= 65536 || ret < 0"`). */
#define KSPAN_MAX_CLAUSES 4

/* The capture a clause compares: an index in `caps`, or the return value. */
#define KSPAN_CLAUSE_RET 255

/* A clause's comparison. */
enum kspan_op {
	KSPAN_OP_EQ = 0,
	KSPAN_OP_NE = 1,
	KSPAN_OP_LT = 2,
	KSPAN_OP_LE = 3,
	KSPAN_OP_GT = 4,
	KSPAN_OP_GE = 5,
};

/*
 * One comparison of a filter. Clauses of the same group are and-ed, the
 * groups or-ed; groups are numbered from 0 in order.
 */
struct kspan_clause {
	/* A capture (a scalar read at exit) or KSPAN_CLAUSE_RET. */
	__u8 cap;
	/* enum kspan_op. */
	__u8 op;
	/* Bytes of the value's kernel type (1, 2, 4 or 8). */
	__u8 width;
	/* 1: the type is signed (sign-extended, compared signed). */
	__u8 is_signed;
	__u8 group;
	__u8 pad[3];
	/* The constant, as 64 bits (two's complement when negative). */
	__u64 value;
};

/*
 * Why a finished call of a probe is not a span although it was recorded:
 * indexes of the per-probe counters of a CPU (cpu * probe_counters_stride
 * + probe_id * KSPAN_PCTR_COUNT + reason). None is a loss.
 */
enum kspan_probe_counter {
	/* Refused by min_duration, errors_only or the predicate. */
	KSPAN_PCTR_FILTERED = 0,
	/* Over the probe's rate limit. */
	KSPAN_PCTR_RATE_LIMITED = 1,
	/* The probe makes no spans (`spans = false`): summed only. */
	KSPAN_PCTR_NO_SPANS = 2,
	KSPAN_PCTR_COUNT = 3,
};

/* How a capture is read once its path has been walked. */
enum kspan_cap_kind {
	/* The register (or the address the path reached) itself. */
	KSPAN_CAP_REG = 0,
	/* `size` bytes (1, 2, 4 or 8) of kernel memory at the address. */
	KSPAN_CAP_MEM = 1,
	/* A NUL-terminated kernel string at the address. */
	KSPAN_CAP_KSTR = 2,
	/* A NUL-terminated user-space string at the address. */
	KSPAN_CAP_USTR = 3,
	/* Kernel bytes at the address; length from `len_src`. */
	KSPAN_CAP_KBYTES = 4,
	/* User-space bytes at the address; length from `len_src`. */
	KSPAN_CAP_UBYTES = 5,
};

/* Where a byte capture's length comes from (capped at the slot's size). */
enum kspan_len_src {
	KSPAN_LEN_FIXED = 0,
	KSPAN_LEN_ARG = 1,
	KSPAN_LEN_RET = 2,
};

/* Capture flags in the record. */
#define KSPAN_CAPF_FAULT (1u << 0)

/* One step of a field path: optionally load the pointer at `cur`, then add. */
struct kspan_step {
	__u32 offset;
	__u32 load;
};

/* How to capture one value. */
struct kspan_capture {
	/* The argument the path starts from. */
	__u8 arg;
	/* enum kspan_cap_kind. */
	__u8 kind;
	/* Valid entries of `steps`. */
	__u8 nsteps;
	/* Width of a KSPAN_CAP_MEM read. */
	__u8 size;
	/* enum kspan_len_src, for byte captures. */
	__u8 len_src;
	/* The argument holding the length, for KSPAN_LEN_ARG. */
	__u8 len_arg;
	/* Where the capture's bytes go in the record's data area. */
	__u16 data_off;
	/* Bytes reserved there. */
	__u16 data_len;
	/*
	 * 1: read when the call begins and carried to its exit (a span's
	 * capture of memory the call frees or changes); 0: read at exit.
	 */
	__u8 at_entry;
	__u8 pad;
	struct kspan_step steps[KSPAN_MAX_STEPS];
};

/* Attach modes, as the Rust `Mode` enum numbers them. */
enum kspan_mode {
	KSPAN_MODE_FENTRY = 0,
	KSPAN_MODE_FEXIT = 1,
	KSPAN_MODE_KPROBE = 2,
	KSPAN_MODE_KRETPROBE = 3,
	KSPAN_MODE_SYSCALL = 4,
};

/*
 * What happens to a call of process `ctx_tgid` made with no application span
 * active (calls of other processes always start traces of their own).
 */
enum kspan_orphans {
	/* Its span starts a trace of its own. */
	KSPAN_ORPHANS_NEW_TRACE = 0,
	/* It is not recorded (counted); the runtime's default. */
	KSPAN_ORPHANS_DROP = 1,
};

/* The fixed part of an OTEP 4947 thread-local context record (28 bytes). */
struct kspan_thread_ctx {
	__u8 trace_id[16];
	__u8 span_id[8];
	__u8 valid;
	__u8 trace_flags;
	__u16 attrs_data_size;
};

/* Bytes of OTEP 4947 `attrs-data` a slot holds after its record. */
#define KSPAN_CTX_ATTRS 96

/*
 * A thread's record as kspan's user space lays it out (128-byte slots of
 * memory of their own): the OTEP 4947 record, its attributes (which kspan's
 * programs never read), then the id of the thread that owns the slot now (0
 * while free), so that a registration left over from a thread that has
 * released its slot never reads as that thread's.
 */
struct kspan_ctx_slot {
	struct kspan_thread_ctx rec;
	__u8 attrs[KSPAN_CTX_ATTRS];
	__u32 owner_tid;
};


/* Indexes of the per-CPU counters; every drop has one. */
enum kspan_counter {
	/* A record was lost because the ring buffer was full. */
	KSPAN_CTR_RINGBUF_FULL = 0,
	/* An entry was not recorded: the task already had KSPAN_MAX_DEPTH open spans. */
	KSPAN_CTR_STACK_DEPTH = 1,
	/*
	 * An open span was discarded because its exit never came: an outer
	 * span on the task ended first, or a later call began where it was on
	 * the stack (the kernel skipped its exit program).
	 */
	KSPAN_CTR_LOST_EXIT = 2,
	/*
	 * An exit arrived with no matching entry (the call began before attach,
	 * or the kernel skipped its entry program).
	 */
	KSPAN_CTR_UNMATCHED_EXIT = 3,
	/* The per-task stack could not be allocated. */
	KSPAN_CTR_NO_STORAGE = 4,
	/* Records handed to the ring buffer. */
	KSPAN_CTR_EMITTED = 5,
	/* Calls under an unsampled application span: a sampling decision. */
	KSPAN_CTR_UNSAMPLED = 6,
	/* Calls with no application span, dropped by the orphan policy. */
	KSPAN_CTR_ORPHAN = 7,
	/*
	 * Calls not recorded because the ring buffer was running short. An
	 * outermost call (with everything it calls) is declined when the ring
	 * lacks room for its record, the records the open calls still need
	 * and a margin; a call inside a recorded one only when the ring lacks
	 * room for the open calls' records themselves, and that ancestor's
	 * span then says so (KSPAN_CTR_DESCENDANT_DROPPED).
	 */
	KSPAN_CTR_OVERLOAD = 8,
	/*
	 * Calls of a thread whose OpenTelemetry context suppresses telemetry
	 * (kspan's own threads and work, an exporter's export): published as
	 * an all-zero thread context record; not recorded, not a loss.
	 */
	KSPAN_CTR_SUPPRESSED = 9,
	/*
	 * Calls a probe's `sum` could not add to their application span's
	 * totals, and off-CPU intervals the scheduler's account could not:
	 * no free slot in the span's window of the table (kspan_sums,
	 * kspan_sched_spans).
	 */
	KSPAN_CTR_SUM_FAILED = 10,
	/*
	 * Off-CPU intervals of the scheduler's account whose switch-in it did
	 * not see (found at the thread's next switch-out): their time is in
	 * their span's time on a CPU, their switch is not counted.
	 */
	KSPAN_CTR_SCHED_MISSED = 11,
	/*
	 * Of the calls counted under another reason (overload, ring buffer
	 * full, stack depth, no storage), those made inside a call that was
	 * recorded: each is in its nearest recorded ancestor's
	 * `descendants_dropped`, so that ancestor's span says it lacks them.
	 * Not a loss of its own.
	 */
	KSPAN_CTR_DESCENDANT_DROPPED = 12,
	KSPAN_CTR_COUNT = 13,
	/*
	 * Counters a CPU has in kspan_counters (cpu * KSPAN_CTR_STRIDE +
	 * counter): 128 bytes, so that no two CPUs count in one cache line.
	 */
	KSPAN_CTR_STRIDE = 16,
};

/*
 * Latency histograms (`histogram` probes). Bucket 0 holds durations of 0
 * and 1 ns, bucket i (1..62) durations in (2^(i-1), 2^i] ns, bucket 63
 * everything above 2^62 ns: the upper bounds are exactly the explicit
 * boundaries 1, 2, 4, ..., 2^62 of an OpenTelemetry histogram in ns, so
 * user space publishes each call in the bucket the kernel put it in.
 */
#define KSPAN_HIST_BUCKETS 64

/*
 * One histogram row: the calls per bucket and the sum of their durations
 * in ns. `kspan_hist` holds two per probe id and CPU (index cpu *
 * hist_rows + probe_id * 2 + failed), so every call of a histogram probe
 * is counted there whatever its errno.
 */
struct kspan_hist_row {
	__u64 buckets[KSPAN_HIST_BUCKETS];
	__u64 sum_ns;
};

/*
 * The failed calls again, by errno: `kspan_hist_errno`, one table for
 * every CPU (added to atomically), of hist_errno_mask + 1 slots, open
 * addressing over KSPAN_TABLE_PROBES slots from the hash of `key`,
 * (probe_id + 1) << 16 | errno; a slot is claimed with a compare-and-swap
 * of its key and never freed (histograms accumulate). When no slot is
 * left a failed call is only in `kspan_hist`; user space reports the
 * difference as error.type `_OTHER`.
 */
struct kspan_hist_errno_slot {
	__u64 key;
	struct kspan_hist_row row;
};

/* Errnos a histogram probe has room for in `kspan_hist_errno`. */
#define KSPAN_HIST_ERRNO_ROWS 8

/* Record flags. */
#define KSPAN_REC_HAS_RET (1u << 0)
/*
 * The parent (a kernel span of a probe with filters, or one whose exit the
 * kernel may have skipped) may still be refused at its exit: user space
 * holds the span until it knows the parent's fate.
 */
#define KSPAN_REC_PARENT_PENDING (1u << 1)
/*
 * Not a span: call `span_id` was refused at its exit (or its exit never
 * came) after spans under it were emitted; they belong under
 * `parent_span_id` instead. Only the header is meaningful.
 */
#define KSPAN_REC_REPARENT (1u << 2)

/* Frame flags. */
/*
 * The call's probe may refuse it at its exit (filters, rate limit, no
 * spans), or the call may be one whose exit was skipped (kspan_settle).
 */
#define KSPAN_FRAME_MAY_DROP (1u << 0)
/* A record (span or reparent) naming this call as parent was emitted. */
#define KSPAN_FRAME_CHILD_SENT (1u << 1)

/* A probe's rate limit (GCRA): when its next span is due, in ns. */
struct kspan_rate {
	__u64 due_ns;
};

/* Calls not made into spans, summed per application span and probe. */
struct kspan_sum {
	__u64 calls;
	__u64 duration_ns;
	__u64 errors;
};

/*
 * Totals by application span (kspan_sums, kspan_sched_spans) are kept in
 * tables user space maps, so that taking a span's totals as it ends is no
 * system call (see kspan_counters). Each is an array of KSPAN_SUMS_MAX
 * slots with open addressing: the totals of span `span` under tag `tag`
 * (a probe id plus one; 1 for the scheduler's) are in one of the
 * KSPAN_TABLE_PROBES slots from kspan_table_hash(span, tag).
 *
 * A slot is free while its `span` is 0. A program claims one with a
 * compare-and-swap of `span`, zeroes the totals, then sets `tag`: only a
 * slot whose span and tag both match is added to. Two programs claiming
 * for the same totals at once may take two slots; user space adds every
 * match. User space, at the span's end, reads the matching slots, clears
 * `tag`, then frees `span`. A full window is counted (KSPAN_CTR_SUM_FAILED).
 */
#define KSPAN_SUMS_MAX 16384
#define KSPAN_TABLE_PROBES 8
#define KSPAN_TABLE_HASH_MULTIPLIER 11400714819323198485ULL

struct kspan_sum_slot {
	__u64 span;
	__u64 tag;
	struct kspan_sum sum;
};

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
	/* Valid entries of `caps`. */
	__u32 nr_caps;
	/* Bytes reserved per record: the header and the data area in use. */
	__u32 record_size;
	/*
	 * 1: the probe id is the attach cookie, not `probe_id`: one program
	 * serves every function of the same settings (kprobes, kprobe.multi).
	 */
	__u32 probe_id_from_cookie;
	/*
	 * The application's thread context (OTEP 4947), read at the outermost
	 * call of a task of process `ctx_tgid`: the slot is at the thread
	 * pointer plus `thread_ctx_offset`, the thread pointer kept in
	 * task_struct at `task_tp_offset` (x86-64 `thread.fsbase`, arm64
	 * `thread.uw.tp_value`, from the kernel's BTF). 0: do not read.
	 */
	__u32 task_tp_offset;
	__u32 ctx_tgid;
	/* enum kspan_orphans: calls with no application span active. */
	__u32 orphans;
	/* 1: keep calls under an unsampled application span (default: drop). */
	__u32 keep_unsampled;
	/*
	 * 1: spans are children of the application span in the thread context.
	 * 0: the context is read only to skip threads that suppress telemetry.
	 */
	__u32 ctx_parent;
	/* 1: some capture is read at entry (`at_entry`). */
	__u32 entry_caps;
	/* Bytes of the ring buffer (the runtime's setting). */
	__u32 ring_bytes;
	/* 1: calls of this probe may be refused at exit (any setting below). */
	__u32 may_drop;
	/* Only calls whose return value is an errno (-4095..-1) are spans. */
	__u32 errors_only;
	/* Width in bytes and signedness of the return value's kernel type. */
	__u32 ret_width;
	__u32 ret_signed;
	/* Valid entries of `clauses`. */
	__u32 nr_clauses;
	/* 1: calls not made into spans are summed onto their application span. */
	__u32 sum;
	/* 1: no call becomes a span (`spans = false`). */
	__u32 no_spans;
	/*
	 * 1: `kspan_ctx_records` exists (kernels with task-storage uptrs,
	 * Linux 6.13+): a thread's registered record is read from there with
	 * plain loads instead of from user memory, and a thread without one
	 * has no record unless `kspan_ctx_pending` says one may be missing.
	 */
	__u32 ctx_records;
	/* Calls shorter than this are not spans (0: no minimum). */
	__u64 min_duration_ns;
	/* Rate limit: one span per `rate_interval_ns`, bursts of up to one second (0: none). */
	__u64 rate_interval_ns;
	struct kspan_clause clauses[KSPAN_MAX_CLAUSES];
	/* 1: count every call in the latency histogram (`kspan_hist`). */
	__u32 histogram;
	/*
	 * Width of the return value when it follows the -errno convention (4:
	 * a signed int, 8: a long), for the histogram's failed calls; 0: it
	 * does not (every call is a success).
	 */
	__u32 hist_errno_bytes;
	__s64 thread_ctx_offset;
	/*
	 * The scheduler's account (its own load): an off-CPU interval of an
	 * application span this long or longer is a wait span; 0: none is.
	 */
	__u64 wait_min_ns;
	/*
	 * Counters a CPU has in kspan_probe_counters: every probe's, rounded
	 * up to whole cache lines (the same in every program of a runtime).
	 */
	__u32 probe_counters_stride;
	/* Rows a CPU has in kspan_hist (two per probe id), and the errno table's mask. */
	__u32 hist_rows;
	__u32 hist_errno_mask;
	/*
	 * The scheduler's account: 1 to read why each wait happened (the
	 * leaving task's flags, its system call, kernel lock contention); 0
	 * reads none of it.
	 */
	__u32 sched_causes;
	/*
	 * enum kspan_kernel_feature: what the running kernel offers a program
	 * of this one's type, as the runtime probed it at start.
	 */
	__u32 kernel_features;
	/*
	 * Where a trampoline's context holds the traced function's return
	 * value, for kernels without bpf_get_func_ret: after its arguments (its
	 * BTF prototype's count); KSPAN_NO_RET_SLOT for a function returning
	 * void, whose context has none.
	 */
	__u32 ret_slot;
	struct kspan_capture caps[KSPAN_MAX_CAPS];
};

/*
 * What the running kernel offers, probed by the runtime at start for each
 * program type (a helper in the kernel's BTF and a tiny program loaded
 * with it), never read off a version number: a vendor kernel with
 * backports gets what it has. Where a bit is clear, the program does the
 * same job the older way; the verifier sees the bits as constants (a
 * frozen .rodata) and never checks the branch not taken, so a helper the
 * kernel lacks is never seen by it. bpf_loop (5.17) is not a bit: a
 * program calling it cannot even be given to an older kernel, so its
 * bounded twins (`*_bounded`) are loaded there instead.
 */
enum kspan_kernel_feature {
	/* bpf_get_current_task_btf (5.11): typed loads; else CO-RE reads. */
	KSPAN_KF_TASK_BTF = 1,
	/*
	 * Task local storage in this program type (5.11): the per-thread
	 * stacks of open calls; else a hash by thread id, emptied at the
	 * thread's exit.
	 */
	KSPAN_KF_TASK_STORAGE = 2,
	/*
	 * bpf_get_func_arg and _ret (5.17); else the trampoline's context read
	 * at constant offsets (the function's argument count in .rodata).
	 */
	KSPAN_KF_FUNC_ARGS = 4,
	/* bpf_task_pt_regs (5.15): a task's user registers. */
	KSPAN_KF_TASK_PT_REGS = 8,
};

/* One open kernel span on a task's stack. */
struct kspan_frame {
	__u64 start_ns;
	/*
	 * Where the call is on the task's kernel stack (its trampoline's
	 * frame), so that an exit finds its own frame and an entry sees the
	 * frames of calls that returned unseen; 0 where unknown (kprobes,
	 * tracepoints, calls on an interrupt stack).
	 */
	__u64 call;
	/* Made when first needed (its record, a child's, a reparent); 0 until then. */
	__u64 span_id;
	__u64 args[KSPAN_MAX_ARGS];
	__u32 probe_id;
	/*
	 * 0: the call may be recorded. Otherwise it is not (the ring buffer was
	 * running short, or its entry values found no room): the KSPAN_CTR_* it
	 * is counted under, plus one. Nested calls inherit it.
	 */
	__u32 suppressed;
	/* KSPAN_FRAME_* bits. */
	__u32 flags;
	/*
	 * 1 + the slot of the nearest recorded (not suppressed) frame below
	 * this one on the stack, counting this one when it is recorded: where
	 * a call declined inside it is counted. 0: none (the whole tree is
	 * declined, or this is its outermost call, declined).
	 */
	__u32 anchor;
	/*
	 * Calls inside this one (at any depth) that were not recorded although
	 * this one was (KSPAN_CTR_DESCENDANT_DROPPED): carried into its record.
	 */
	__u32 descendants_dropped;
	__u32 pad;
};

/* Per-task stack of open kernel spans (task local storage). */
struct kspan_task_stack {
	/* Trace id shared by the spans of one outermost call. */
	__u8 trace_id[16];
	/* The application span the outermost call was made under, or 0. */
	__u64 app_span_id;
	/* Number of valid frames. */
	__u32 depth;
	/* Entries not pushed because the stack was full; their exits are skipped. */
	__u32 overflow;
	/*
	 * The application's context for the current outermost call, read at
	 * the first call of its tree that needs it (one about to become a
	 * span, or summed, or counted in a histogram), not at entry: a call
	 * its filters refuse never pays for the read. 0: not read yet.
	 */
	__u32 ctx_known;
	/* Once read: the counter of why the tree is not recorded, or -1. */
	__s32 ctx_skip;
	struct kspan_frame frames[KSPAN_MAX_DEPTH];
};

/*
 * Calls whose captures read at entry wait for their exit at once, in the
 * map that carries those values (an LRU hash: an entry whose exit never
 * comes is evicted in time).
 */
#define KSPAN_ENTRY_CAPS_MAX 1024

/* One finished span, as it travels through the ring buffer. */
struct kspan_record {
	__u8 trace_id[16];
	__u64 span_id;
	/* Span id of the enclosing kernel span on the same task, 0 for none. */
	__u64 parent_span_id;
	/* CLOCK_MONOTONIC nanoseconds. */
	__u64 start_ns;
	__u64 end_ns;
	/* Raw return register, valid with KSPAN_REC_HAS_RET. */
	__u64 ret;
	__u32 probe_id;
	/* Process (tgid) and thread (pid) ids as user space sees them. */
	__u32 pid;
	__u32 tid;
	/* KSPAN_REC_* bits. */
	__u32 flags;
	/*
	 * Per capture: the scalar value; for strings the bytes read including
	 * the NUL (negative: the read failed); for byte captures the length
	 * asked for (the bytes present are min(that, data_len)).
	 */
	__u64 vals[KSPAN_MAX_CAPS];
	/* Per capture: KSPAN_CAPF_* bits. */
	__u8 cap_flags[KSPAN_MAX_CAPS];
	/*
	 * Calls inside this one that were not recorded (the ring buffer ran
	 * short, the task's stack was full): the span lacks that many
	 * descendants (`kspan.descendants_dropped`).
	 */
	__u32 descendants_dropped;
	__u32 pad;
	/* The data area (strings, buffers) follows: config.record_size - sizeof(record). */
};

/*
 * Captures read at entry, kept until the exit: the record's values and
 * flags, and its data area.
 */
struct kspan_entry_values {
	struct kspan_record rec;
	__u8 data[KSPAN_MAX_DATA];
};

/*
 * The scheduler's account of application spans (sched_switch and
 * sched_waking): what a thread of the process did while an application
 * span was its current context. Only off-CPU intervals are the kernel's to
 * measure: a thread's record cannot change while it is off CPU, so each
 * interval belongs whole to the span current at its switch-out. Time on a
 * CPU is the rest of the span's time as current context, which user space
 * measures at each context switch.
 */

/* How a thread left the CPU. */
/*
 * Why a thread blocked (D), by its own flags as it left the CPU: the
 * flags delay accounting and PSI read, set by the kernel around the wait.
 */
enum kspan_block_cause {
	/* None of the flags below (a kernel mutex, a network file system's reply, ...). */
	KSPAN_BLOCK_UNATTRIBUTED = 0,
	/* in_iowait: io_schedule, waiting on block I/O (its own, or a page or buffer another's I/O holds). */
	KSPAN_BLOCK_IO = 1,
	/* in_memstall or in_thrashing: reclaim, compaction, a refault's wait, memory.high's throttle. */
	KSPAN_BLOCK_MEMORY = 2,
	/* Inside a kernel lock's contention (lock:contention_begin to _end): a mutex, an rwsem. */
	KSPAN_BLOCK_LOCK = 3,
};

/*
 * Why a thread slept (S): a kernel lock's contention, else the system call
 * it sleeps in, by class.
 */
enum kspan_sleep_cause {
	/* None of the below (a signal wait, a pipe's writer, ...). */
	KSPAN_SLEEP_UNATTRIBUTED = 0,
	/* Inside a kernel lock's contention (an interruptible mutex or rwsem). */
	KSPAN_SLEEP_LOCK = 1,
	/* futex, futex_waitv: user-space locks and condition variables. */
	KSPAN_SLEEP_FUTEX = 2,
	/* poll, select, epoll, io_uring_enter: waiting for readiness. */
	KSPAN_SLEEP_POLL = 3,
	/* nanosleep, clock_nanosleep. */
	KSPAN_SLEEP_TIMER = 4,
	/* read, readv, recv*, accept: waiting for data or a connection. */
	KSPAN_SLEEP_RECEIVE = 5,
};

/*
 * Kernel lock contention (lock:contention_begin, Linux 5.19+): its flags
 * (include/trace/events/lock.h), and the kinds kspan sums by.
 */
#define KSPAN_LCB_F_SPIN (1u << 0)
#define KSPAN_LCB_F_READ (1u << 1)
#define KSPAN_LCB_F_WRITE (1u << 2)
#define KSPAN_LCB_F_RT (1u << 3)
#define KSPAN_LCB_F_PERCPU (1u << 4)
#define KSPAN_LCB_F_MUTEX (1u << 5)

enum kspan_lock_kind {
	/* A mutex (or rt_mutex), spinning first or sleeping. */
	KSPAN_LOCK_MUTEX = 0,
	/* A read-write semaphore (percpu ones included), read or write. */
	KSPAN_LOCK_RWSEM = 1,
	/* A spinning lock: spinlock, rwlock. */
	KSPAN_LOCK_SPIN = 2,
	/* Anything else (a semaphore). */
	KSPAN_LOCK_OTHER = 3,
};
#define KSPAN_LOCK_KINDS 4

enum kspan_sched_state {
	/* Preempted, or yielded: runnable all along (run-queue time). */
	KSPAN_SCHED_PREEMPTED = 0,
	/* Interruptible sleep (S): futexes, poll/epoll, sleeps, sockets. */
	KSPAN_SCHED_SLEEPING = 1,
	/* Uninterruptible (D): disk and file I/O, page faults, some kernel locks. */
	KSPAN_SCHED_BLOCKED = 2,
	/* Anything else: stopped, traced, idle (I), parked. */
	KSPAN_SCHED_OTHER = 3,
	/*
	 * Not an off-CPU interval: a kernel lock's contention, from
	 * contention_begin to contention_end (a wait record of its own).
	 */
	KSPAN_SCHED_LOCK = 4,
};

/* Who made a waiting thread runnable again. */
enum kspan_waker_kind {
	/* Not seen (a preemption needs no wake-up). */
	KSPAN_WAKER_NONE = 0,
	/*
	 * The current task: pid, tid, comm, and its application span when it
	 * is one of the process's; or an interrupt that interrupted it (user
	 * space tells from the waker's stack).
	 */
	KSPAN_WAKER_TASK = 1,
	/*
	 * An interrupt (hard or soft), told by the program's stack: not the
	 * task's kernel stack (BTF tracepoints).
	 */
	KSPAN_WAKER_INTERRUPT = 2,
	/*
	 * A task or an interrupt, not told apart (classic tracepoints, which
	 * read the waker's stack only for an interval that is a wait span's
	 * length already at its wake-up: the read costs about 1.5 us).
	 */
	KSPAN_WAKER_UNKNOWN = 3,
};

/* Kernel stack frames a wait span carries, from the switch-out. */
#define KSPAN_WAIT_FRAMES 16

/* Kernel stack frames kept of a waker: enough to reach an interrupt's entry. */
#define KSPAN_WAKER_FRAMES 12

/* Probe id of wait records: no probe has it. */
#define KSPAN_WAIT_PROBE_ID 4294967295

/* Record flag: a wait span (`struct kspan_wait_record`). */
#define KSPAN_REC_WAIT (1u << 3)

/* Threads of the process the account follows at once (an LRU, by tid). */
#define KSPAN_SCHED_TASKS_MAX 16384

/*
 * Block requests (block:block_rq_insert, _issue and _complete, as BTF
 * tracepoints), with the scheduler's causes on: each request a thread of
 * the process issues under an application span is kept from its insert
 * (or its issue, when issued at once) to its completion, by request.
 */
#define KSPAN_BLOCK_REQUESTS_MAX 4096
/* Devices a span's block totals are kept for; the rest are summed as one. */
#define KSPAN_BLOCK_DEVICES 2
/*
 * A blocked I/O wait names the request whose completion ended it: its own
 * request's, found by the completion (the thread that issued it is off
 * CPU, blocked on I/O), else one that completed on the waking CPU at most
 * this long before the wake-up (another thread's read of a page it waits
 * on: the waker runs in the completion's own path).
 */
#define KSPAN_BLOCK_LINK_NS 1000000

/*
 * Bios a thread of the process submitted under an application span that
 * blk-throttle held (cgroup v1 blkio.throttle.*, v2 io.max: the fexit of
 * __blk_throtl_bio said so), kept by bio until the request made of it
 * (in the throttle's kernel worker, which dispatches it later): that
 * request is then the thread's and its span's, its time held the bio's.
 */
#define KSPAN_BLOCK_BIOS_MAX 4096
/* The bytes of a cgroup's name kept (its last path component). */
#define KSPAN_CGROUP_NAME_BYTES 32

/* A held bio (kspan_block_bios), and what a request made of it keeps of it. */
struct kspan_block_held {
	/* The cgroup whose limit held it (its kernfs id, as cgroup.id or an inode number), and its name. */
	__u64 cgroup_id;
	char cgroup[KSPAN_CGROUP_NAME_BYTES];
};

struct kspan_block_bio {
	/* The application span it was submitted under (its id as a number), and the thread. */
	__u64 span;
	__u32 tid;
	__u32 pad;
	/* When the throttle held it (CLOCK_MONOTONIC ns). */
	__u64 held_from_ns;
	struct kspan_block_held by;
};

/* One request in flight (kspan_block_requests). */
struct kspan_block_request {
	/* The application span it was issued under (its id as a number), and the thread. */
	__u64 span;
	__u32 tid;
	__u32 pad;
	/* Inserted into the queue, and issued to the driver (CLOCK_MONOTONIC ns). */
	__u64 insert_ns;
	__u64 issue_ns;
	/* Its first bio's time held by blk-throttle before it (0: not held), and by whom. */
	__u64 held_ns;
	struct kspan_block_held held_by;
};

/*
 * A request as it completed: on each CPU the last one (kspan_block_done,
 * per CPU), and on a wait it woke.
 */
struct kspan_block_done {
	/* When it completed; 0: none. */
	__u64 complete_ns;
	/* The device (the kernel's dev_t: major << 20 | minor), and the first sector. */
	__u64 dev;
	__u64 sector;
	__u64 bytes;
	/* Insert to issue, and issue to completion. */
	__u64 queue_ns;
	__u64 device_ns;
	/* Held by blk-throttle before the insert (0: not held), and by whom. */
	__u64 held_ns;
	struct kspan_block_held held_by;
};

/*
 * A wait span as a hop of a chain of wake-ups: a thread's wait that ended,
 * whose thread then woke another (which links to it, and so on back).
 */
struct kspan_wait_hop {
	/* The wait span's id (0: none), and its trace. */
	__u64 span_id;
	__u8 trace_id[16];
	/* When it ended (the switch-in), and its time waiting (to the wake-up). */
	__u64 end_ns;
	__u64 waiting_ns;
	/* enum kspan_sched_state, and its cause. */
	__u32 state;
	__u32 cause;
};

/*
 * Chains explained whole: what a waker did over the wait it ended. Each
 * thread of the process keeps its last off-CPU intervals and its last
 * block requests completed (struct kspan_chain, in its kspan_sched_task),
 * and a wake-up by one of them of a wait already a wait span's length
 * sums those that overlap the wait, from its switch-out to the wake-up,
 * into the wait's kspan_waker_during: the waker's off-CPU time by state and cause, and its
 * requests' time queued and on the device, over the overlap.
 */
#define KSPAN_CHAIN_WAITS 16
#define KSPAN_CHAIN_REQUESTS 8
/* Causes a blocked wait and a sleeping wait can have (enum kspan_block_cause, kspan_sleep_cause). */
#define KSPAN_BLOCK_CAUSES 4
#define KSPAN_SLEEP_CAUSES 6
/* kspan_chain_wait's `what`: the state in bits 56-59, the cause in bits 60-63. */
#define KSPAN_CHAIN_WAITING_MASK ((1ULL << 56) - 1)
#define KSPAN_CHAIN_STATE_SHIFT 56
#define KSPAN_CHAIN_CAUSE_SHIFT 60

/*
 * One finished off-CPU interval: from `out_ns`, waiting (its state's part,
 * as the account adds it) for the low 56 bits of `what`, then on a run
 * queue `queued_ns` (the account's run-queue part), up to its switch-in.
 */
struct kspan_chain_wait {
	__u64 out_ns;
	__u64 what;
	__u64 queued_ns;
};

/*
 * One block request completed, issued by the thread (its first bio held
 * by blk-throttle from `held_ns`, 0: not held; insert, issue, completion).
 */
struct kspan_chain_request {
	__u64 held_ns;
	__u64 insert_ns;
	__u64 issue_ns;
	__u64 complete_ns;
};

/*
 * A thread's recent past, for the threads it wakes: rings of its last
 * KSPAN_CHAIN_WAITS off-CPU intervals (written at each switch-in of an
 * interval that began under a span, with the causes on) and its last
 * KSPAN_CHAIN_REQUESTS requests (at each completion), and how many of
 * each were ever written (the next goes at that count modulo the ring).
 */
struct kspan_chain {
	__u32 waits_n;
	__u32 requests_n;
	/*
	 * The thread's last interval under no span of the process, which no
	 * ring holds: its switch-out (0: none yet), and its switch-in (before
	 * the switch-out: not back yet).
	 */
	__u64 unspanned_out_ns;
	__u64 unspanned_in_ns;
	struct kspan_chain_wait waits[KSPAN_CHAIN_WAITS];
	struct kspan_chain_request requests[KSPAN_CHAIN_REQUESTS];
};

/* kspan_waker_during's flags. */
/* The waker left a CPU under no span of the process in the overlap: that interval is in no figure. */
#define KSPAN_DURING_UNSPANNED (1u << 0)

/*
 * What the waker of a wait (a thread of the process) did over that wait:
 * from the wait's switch-out (`from_ns`) to the wake-up (`to_ns`; 0: not
 * known, the waker is not followed). Each figure is the part of the
 * waker's intervals inside [from_ns, to_ns]; the rest of the overlap,
 * less `uncovered_ns`, the waker was on a CPU.
 */
struct kspan_waker_during {
	__u64 from_ns;
	__u64 to_ns;
	/* Off CPU waiting, blocked by enum kspan_block_cause, sleeping by enum kspan_sleep_cause. */
	__u64 blocked_ns[KSPAN_BLOCK_CAUSES];
	__u64 sleeping_ns[KSPAN_SLEEP_CAUSES];
	/* Off CPU in any other state (stopped, idle). */
	__u64 other_ns;
	/* Runnable, on a run queue (after a wake-up, or preempted). */
	__u64 run_queue_ns;
	/*
	 * The first this many ns of the overlap are in no figure: the rings
	 * (of intervals or of requests) had been written over past them.
	 */
	__u64 uncovered_ns;
	/* Block requests the waker issued that completed in the overlap, and their parts in it. */
	__u64 requests;
	/* Held back before the queue by blk-throttle (its first bio's hold to the insert). */
	__u64 request_held_ns;
	/* Queued (insert to issue), and on the device (issue to completion). */
	__u64 request_queue_ns;
	__u64 request_device_ns;
	/* KSPAN_DURING_* bits. */
	__u32 flags;
	__u32 pad;
};

/*
 * Memory stalls a thread spends in itself (vmscan:mm_vmscan_direct_reclaim_*,
 * mm_vmscan_memcg_reclaim_*, compaction:mm_compaction_*), with the causes on.
 */
enum kspan_memory_stall {
	/* Reclaim: the page allocator's direct reclaim, or a cgroup's (memory.high, memory.max). */
	KSPAN_MEMORY_RECLAIM = 0,
	/* Direct compaction. */
	KSPAN_MEMORY_COMPACTION = 1,
};
#define KSPAN_MEMORY_STALLS 2

/* A thread of the process between its switch-out and its switch-in. */
struct kspan_sched_task {
	/* The application span current at the switch-out (trace id, span id as a number). */
	__u8 trace_id[16];
	__u64 app_span_id;
	/* Switch-out, CLOCK_MONOTONIC ns; 0 while the thread is on a CPU. */
	__u64 out_ns;
	/* The wake-up that made it runnable (0: not seen). */
	__u64 wake_ns;
	/*
	 * The kernel's run-queue total for the thread (sched_info.run_delay)
	 * at the switch-out: what a move between run queues adds before the
	 * switch-in is the difference.
	 */
	__u64 run_delay_out;
	/*
	 * The run queue's clock at the switch-out (sched_clock ns; -1: not
	 * known): where the kernel stopped counting the thread's CPU time.
	 */
	__u64 clock_out;
	/* The CPU it left (whose run queue's clock clock_out is). */
	__u64 cpu_out;
	/*
	 * Its CPU's interrupt time at its switch-in, where the kernel
	 * accounts it apart (CONFIG_IRQ_TIME_ACCOUNTING; 0: not, or not on a
	 * CPU since a switch-in the account saw).
	 */
	__u64 irq_in;
	/* enum kspan_sched_state. */
	__u32 state;
	/* 1: a voluntary switch (it blocked or slept), 0: involuntary. */
	__u32 voluntary;
	/* KSPAN_CTR_* of why its wait spans are not recorded (unsampled, suppressed), or 0. */
	__u32 skip;
	/* enum kspan_block_cause of a blocked switch-out, kspan_sleep_cause of a sleeping one, else 0. */
	__u32 cause;
	/* enum kspan_waker_kind, and the waker when a task. */
	__u32 waker_kind;
	__u32 waker_pid;
	__u32 waker_tid;
	__u8 waker_comm[16];
	/* The waker's application span (all zero: none). */
	__u8 waker_trace_id[16];
	__u64 waker_span_id;
	/* Frames of the kernel stack at the switch-out (classic tracepoints). */
	__u64 nframes;
	__u64 frames[KSPAN_WAIT_FRAMES];
	/* The waker's kernel stack (an interrupt's shows its entry). */
	__u64 waker_nframes;
	__u64 waker_frames[KSPAN_WAKER_FRAMES];
	/*
	 * The kernel lock the thread contends for now (0: none), from its
	 * contention_begin; with its flags (KSPAN_LCB_F_*), when it began,
	 * and its owner then (a mutex's, a writer-held rwsem's; tid 0: not
	 * known) with the owner's application span.
	 */
	__u64 lock_addr;
	__u64 lock_begin_ns;
	__u32 lock_flags;
	__u32 lock_owner_pid;
	__u32 lock_owner_tid;
	/* 1: it left the CPU inside a page fault taken in user space (with the causes on). */
	__u32 in_fault;
	/* The memory stall it is in now (enum kspan_memory_stall + 1; 0: none), since when. */
	__u32 memory_stall;
	__u32 memory_pad;
	__u64 memory_begin_ns;
	__u8 lock_owner_comm[16];
	__u8 lock_owner_trace_id[16];
	__u64 lock_owner_span_id;
	/*
	 * A blocked I/O wait woken by a block request's completion (on the
	 * waking CPU just before): the request (kspan_block_done).
	 */
	struct kspan_block_done request;
	/*
	 * Its last wait span (a sleeping or blocked one, emitted; id 0:
	 * none), when it ended, how long it waited and why: the hop a thread
	 * it wakes next links to, as its waker's own wait.
	 */
	struct kspan_wait_hop last_wait;
	/* The current interval's waker's own last wait, when it ended after this began. */
	struct kspan_wait_hop waker_wait;
	/* What the current interval's waker did over it (with the causes on; to_ns 0: not read). */
	struct kspan_waker_during waker_during;
	/* Its own recent past, for the threads it wakes. */
	struct kspan_chain chain;
};

/* Per application span, what the scheduler did while it was current. */
struct kspan_sched_sum {
	/* Runnable, waiting for a CPU: from the wake-up or preemption to the switch-in. */
	__u64 run_queue_ns;
	/* Off CPU by state, up to the wake-up. */
	__u64 sleeping_ns;
	__u64 blocked_ns;
	__u64 other_ns;
	/* Context switches (as /proc/<tid>/status counts them). */
	__u64 voluntary;
	__u64 involuntary;
	/* Off-CPU intervals at least `wait_min_ns` long (wait spans, made or counted). */
	__u64 waits;
	/*
	 * Off-CPU intervals whose switch-in the kernel did not report (found
	 * at the thread's next switch-out, KSPAN_CTR_SCHED_MISSED): their time
	 * is in the span's time on a CPU, their switch is not counted.
	 */
	__u64 intervals_missed;
	/*
	 * For those, the time from the switch-out to the next switch-out that
	 * found them open: the most of the span's time on a CPU that may have
	 * been off it.
	 */
	__u64 missed_ns;
	/* Of blocked_ns: KSPAN_BLOCK_IO's, KSPAN_BLOCK_MEMORY's and KSPAN_BLOCK_LOCK's intervals. */
	__u64 blocked_io_ns;
	__u64 blocked_memory_ns;
	__u64 blocked_lock_ns;
	/* Of sleeping_ns: by enum kspan_sleep_cause (LOCK, FUTEX, POLL, TIMER, RECEIVE). */
	__u64 sleeping_lock_ns;
	__u64 sleeping_futex_ns;
	__u64 sleeping_poll_ns;
	__u64 sleeping_timer_ns;
	__u64 sleeping_receive_ns;
	/*
	 * Kernel lock contention by enum kspan_lock_kind: the time from each
	 * contention_begin to its contention_end (on a CPU spinning, or off
	 * it), and how many.
	 */
	__u64 lock_ns[KSPAN_LOCK_KINDS];
	__u64 locks[KSPAN_LOCK_KINDS];
	/*
	 * Block requests issued under the span and completed: by device
	 * (`block_dev`, 0 while free; index KSPAN_BLOCK_DEVICES: any other),
	 * their count, bytes, time queued and time on the device.
	 */
	__u64 block_dev[KSPAN_BLOCK_DEVICES];
	__u64 block_requests[KSPAN_BLOCK_DEVICES + 1];
	__u64 block_bytes[KSPAN_BLOCK_DEVICES + 1];
	__u64 block_queue_ns[KSPAN_BLOCK_DEVICES + 1];
	__u64 block_device_ns[KSPAN_BLOCK_DEVICES + 1];
	/*
	 * Of those, the ones blk-throttle held before their insert (their
	 * bios, submitted by the span's thread, issued by the throttle's
	 * worker), and their time held.
	 */
	__u64 block_held[KSPAN_BLOCK_DEVICES + 1];
	__u64 block_held_ns[KSPAN_BLOCK_DEVICES + 1];
	/* Off CPU (blocked or sleeping) inside page faults taken in user space. */
	__u64 fault_ns;
	/*
	 * Memory stalls the thread spent in itself, by enum kspan_memory_stall:
	 * from each begin to its end (on a CPU reclaiming, or off it), and how many.
	 */
	__u64 memory_ns[KSPAN_MEMORY_STALLS];
	__u64 memory_stalls[KSPAN_MEMORY_STALLS];
	/*
	 * Interrupt time on the CPUs while the span's threads ran there, where
	 * the kernel accounts it apart (CONFIG_IRQ_TIME_ACCOUNTING) and leaves
	 * it out of their CPU time: not the span's time on a CPU either.
	 */
	__u64 irq_ns;
};

/*
 * A thread's open off-CPU interval, for user space to see from the thread
 * itself (`kspan_sched_open`, mapped; slot tid & (KSPAN_SCHED_OPEN_SLOTS -
 * 1)): set at a switch-out under a recorded span, cleared at the switch-in.
 * A thread that runs while its slot holds an interval lost that switch-in:
 * as one of its spans ends, user space claims such an interval of that span
 * (a compare-and-swap setting KSPAN_SCHED_OPEN_CLAIMED in `out_ns`), and
 * says it on the span; the next switch-out then counts it in Stats only.
 * `faults` counts the page fault exceptions of the threads of the slot
 * (with the causes on, where the kernel has the fault tracepoints): while
 * it stands still, the thread's fault counts have not moved (sched/time.rs).
 */
struct kspan_sched_open {
	__u64 tid;
	__u64 out_ns;
	__u64 span;
	__u64 faults;
};

#define KSPAN_SCHED_OPEN_SLOTS 16384
#define KSPAN_SCHED_OPEN_CLAIMED (1ULL << 63)

/* The scheduler's totals of one application span in kspan_sched_spans (tag 1). */
struct kspan_sched_slot {
	__u64 span;
	__u64 tag;
	struct kspan_sched_sum sum;
};

/*
 * One wait span: a record (probe id KSPAN_WAIT_PROBE_ID, flag
 * KSPAN_REC_WAIT; trace id and parent the application span's, start the
 * switch-out, end the switch-in, pid and tid the thread's), then this.
 */
struct kspan_wait_record {
	struct kspan_record rec;
	__u64 wake_ns;
	__u32 state;
	/*
	 * enum kspan_block_cause of a blocked wait, kspan_sleep_cause of a
	 * sleeping one, kspan_lock_kind of a lock's contention.
	 */
	__u32 cause;
	__u32 waker_kind;
	__u32 waker_pid;
	__u32 waker_tid;
	__u8 waker_comm[16];
	__u8 waker_trace_id[16];
	__u64 waker_span_id;
	__u64 nframes;
	__u64 frames[KSPAN_WAIT_FRAMES];
	__u64 waker_nframes;
	__u64 waker_frames[KSPAN_WAKER_FRAMES];
	/*
	 * A lock's contention (KSPAN_SCHED_LOCK): the lock's address and its
	 * flags (KSPAN_LCB_F_*); the waker fields then name its owner at the
	 * contention's start (kind KSPAN_WAKER_TASK) or none.
	 */
	__u64 lock_addr;
	__u32 lock_flags;
	/* 1: a wait inside a page fault taken in user space. */
	__u32 in_fault;
	/* A blocked I/O wait's request, when its completion woke it (complete_ns 0: none). */
	struct kspan_block_done request;
	/*
	 * The waker's own last wait, a thread of the process that waited
	 * until after this wait began (span_id 0: none): the next hop back.
	 */
	struct kspan_wait_hop waker_wait;
	/* What the waker, a thread of the process, did over this wait (to_ns 0: not known). */
	struct kspan_waker_during waker_during;
};

#endif /* KSPAN_H */
