// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The causes of the scheduler's account: kernel lock contention, block
 * requests and memory stalls (reclaim, compaction), each followed from its
 * own events to the span current on its thread, and to the thread's wait.
 * A file of its own so that a new cause touches this file and what it
 * shares with the account (sched.bpf.h), not the account's programs; a
 * file of the one compilation unit, kspan.bpf.c (which includes it), not a
 * unit of its own.
 */
#include "sched.bpf.h"

/*
 * Block requests in flight (see kspan.h), by request: kept from their
 * first event under a recorded span to their completion.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KSPAN_BLOCK_REQUESTS_MAX);
	__type(key, __u64);
	__type(value, struct kspan_block_request);
} kspan_block_requests SEC(".maps");

/* Bios held by blk-throttle (see kspan.h), by bio: from the hold to the request made of them. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, KSPAN_BLOCK_BIOS_MAX);
	__type(key, __u64);
	__type(value, struct kspan_block_bio);
} kspan_block_bios SEC(".maps");

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
	__builtin_memset(&w->waker_during, 0, sizeof(w->waker_during));
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
	if (kspan_call_of(ctx, kspan_current_task()))
		kspan_lock_begin((__u64)lock, flags);
	return 0;
}

SEC("tp_btf/contention_end")
int BPF_PROG(kspan_tp_lock_end, void *lock, int ret)
{
	if (kspan_call_of(ctx, kspan_current_task()))
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
	void *elevator;
} __attribute__((preserve_access_index));

struct bio___kspan;

struct request___kspan {
	struct request_queue___kspan *q;
	struct block_device___kspan *part;
	unsigned int __data_len;
	__u64 __sector;
	struct bio___kspan *bio;
} __attribute__((preserve_access_index));

/* A bio's cgroup: its blkg's blkcg's cgroup, named by its kernfs node. */
struct kernfs_node___kspan {
	const char *name;
	__u64 id;
} __attribute__((preserve_access_index));

struct cgroup___kspan {
	struct kernfs_node___kspan *kn;
} __attribute__((preserve_access_index));

struct cgroup_subsys_state___kspan {
	struct cgroup___kspan *cgroup;
} __attribute__((preserve_access_index));

struct blkcg___kspan {
	struct cgroup_subsys_state___kspan css;
} __attribute__((preserve_access_index));

struct blkcg_gq___kspan {
	struct blkcg___kspan *blkcg;
} __attribute__((preserve_access_index));

struct bio___kspan {
	struct blkcg_gq___kspan *bi_blkg;
} __attribute__((preserve_access_index));

/* The cgroup `bio` is charged to (whose limits the throttle applies), into `by`. */
static __always_inline void kspan_bio_cgroup(struct bio___kspan *bio, struct kspan_block_held *by)
{
	struct kernfs_node___kspan *kn = NULL;
	const char *name = NULL;

	if (!bpf_core_field_exists(bio->bi_blkg))
		return;
	kn = BPF_CORE_READ(bio, bi_blkg, blkcg, css.cgroup, kn);
	if (!kn)
		return;
	by->cgroup_id = BPF_CORE_READ(kn, id);
	name = BPF_CORE_READ(kn, name);
	if (name)
		bpf_probe_read_kernel_str(by->cgroup, sizeof(by->cgroup), name);
}

/*
 * blk-throttle decided about a bio (the fexit of __blk_throtl_bio, which
 * runs on the submitting thread, only for bios of a cgroup with limits):
 * `held`, it keeps it, to dispatch it later from its kernel worker. A bio
 * of a thread of the process under a recorded span is kept until its
 * request, which is then that thread's and that span's.
 */
SEC("fexit/__blk_throtl_bio")
int BPF_PROG(kspan_fexit_throttle, struct bio___kspan *bio, _Bool held)
{
	struct kspan_block_bio fresh = {};
	struct kspan_thread_ctx c = {};
	__u64 pid_tgid = bpf_get_current_pid_tgid(), key = (__u64)bio;

	if (!held || (__u32)(pid_tgid >> 32) != kspan_cfg.target_tgid || !kspan_sched_enabled())
		return 0;
	if (!kspan_recorded_span(&c, pid_tgid, &fresh.span))
		return 0;
	fresh.tid = (__u32)pid_tgid;
	fresh.held_from_ns = bpf_ktime_get_ns();
	kspan_bio_cgroup(bio, &fresh.by);
	bpf_map_update_elem(&kspan_block_bios, &key, &fresh, BPF_ANY);
	return 0;
}

/*
 * Before Linux 5.11 a request names its partition by a `struct hd_struct`
 * (its number in the disk `rq_disk`), not by a block device.
 */
struct hd_struct___kspan {
	int partno;
} __attribute__((preserve_access_index));

struct request___kspan_hd {
	struct gendisk___kspan *rq_disk;
	struct hd_struct___kspan *part;
} __attribute__((preserve_access_index));

/* The kernel's dev_t of `rq`'s device (MKDEV: major << 20 | minor). */
static __always_inline __u64 kspan_request_dev(struct request___kspan *rq)
{
	struct block_device___kspan *part;
	struct gendisk___kspan *disk;

	if (bpf_core_type_exists(struct hd_struct___kspan)) {
		struct request___kspan_hd *old = (void *)rq;
		struct hd_struct___kspan *hd = old->part;
		__u32 partno = hd ? hd->partno : 0;

		disk = old->rq_disk;
		if (!disk)
			return 0;
		return ((__u64)disk->major << 20) | (__u32)(disk->first_minor + partno);
	}
	part = rq->part;
	if (part)
		return part->bd_dev;
	if (!rq->q || !bpf_core_field_exists(rq->q->disk))
		return 0;
	disk = rq->q->disk;
	if (!disk)
		return 0;
	return ((__u64)disk->major << 20) | (__u32)disk->first_minor;
}

/*
 * The request `rq` enters the queue (`issue` 0) or goes to the driver
 * (`issue` 1): kept from its first event on a thread of the process under
 * a recorded span, or in the throttle's worker when its first bio is one
 * blk-throttle held for such a thread (the request is then that
 * thread's, its time held the bio's); its issue time stamped wherever it
 * is issued. A thread that runs a hardware queue issues whatever the I/O
 * scheduler hands out, other tasks' requests too: where the queue has a
 * scheduler, every request is inserted on its submitter first, so one
 * first seen at its issue is another's (a `dd` beside the span's reads
 * gave the span 7 of its requests on the host's mq-deadline disk).
 */
static __always_inline void kspan_block_queued(struct request___kspan *req, int issue)
{
	__u64 rq = (__u64)req;
	struct kspan_block_request *r = bpf_map_lookup_elem(&kspan_block_requests, &rq);
	struct kspan_block_request fresh = {};
	struct kspan_thread_ctx c = {};
	struct kspan_block_bio *held;
	__u64 pid_tgid, now = bpf_ktime_get_ns(), bio;

	if (r) {
		if (issue)
			r->issue_ns = now;
		return;
	}
	fresh.insert_ns = now;
	fresh.issue_ns = issue ? now : 0;
	pid_tgid = bpf_get_current_pid_tgid();
	if ((__u32)(pid_tgid >> 32) == kspan_cfg.target_tgid) {
		if (!kspan_sched_enabled() || !kspan_recorded_span(&c, pid_tgid, &fresh.span))
			return;
		if (issue && req->q && bpf_core_field_exists(req->q->elevator) &&
		    req->q->elevator)
			return;
		fresh.tid = (__u32)pid_tgid;
		bpf_map_update_elem(&kspan_block_requests, &rq, &fresh, BPF_ANY);
		return;
	}
	/* Another task's request (a held bio's, made only while recording is on). */
	bio = (__u64)req->bio;
	held = bio ? bpf_map_lookup_elem(&kspan_block_bios, &bio) : NULL;
	if (!held)
		return;
	fresh.span = held->span;
	fresh.tid = held->tid;
	fresh.held_ns = now > held->held_from_ns ? now - held->held_from_ns : 0;
	__builtin_memcpy(&fresh.held_by, &held->by, sizeof(fresh.held_by));
	bpf_map_delete_elem(&kspan_block_bios, &bio);
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
		if (!held && kspan_cmpxchg(&s->block_dev[i], 0, dev) == 0)
			return i;
		if (*(volatile __u64 *)&s->block_dev[i] == dev)
			return i;
	}
	return KSPAN_BLOCK_DEVICES;
}

SEC("tp_btf/block_rq_insert")
int BPF_PROG(kspan_tp_block_insert, struct request *rq)
{
	kspan_block_queued((void *)rq, 0);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(kspan_tp_block_issue, struct request *rq)
{
	kspan_block_queued((void *)rq, 1);
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
	__u64 dev, bytes, held_ns;

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
		done->held_ns = r->held_ns;
		__builtin_memcpy(&done->held_by, &r->held_by, sizeof(done->held_by));
	}
	/* Its thread waiting on I/O: this is what it waits for. */
	{
		__u32 tid = r->tid;
		struct kspan_sched_task *t = bpf_map_lookup_elem(&kspan_sched_tasks, &tid);

		/* For the threads it wakes, what it did over their waits. */
		if (t)
			kspan_chain_request_add(t, r->held_ns, r->insert_ns, r->issue_ns, now);
		if (t && t->out_ns && t->state == KSPAN_SCHED_BLOCKED && t->cause == KSPAN_BLOCK_IO &&
		    !t->request.complete_ns) {
			t->request.complete_ns = now;
			t->request.dev = dev;
			t->request.sector = rq->__sector;
			t->request.bytes = bytes;
			t->request.queue_ns = queue_ns;
			t->request.device_ns = device_ns;
			t->request.held_ns = r->held_ns;
			__builtin_memcpy(&t->request.held_by, &r->held_by,
					 sizeof(t->request.held_by));
		}
	}
	held_ns = r->held_ns;
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
	if (held_ns) {
		__sync_fetch_and_add(&s->block_held[row], 1);
		__sync_fetch_and_add(&s->block_held_ns[row], held_ns);
	}
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

/*
 * Page fault exceptions of the process's threads, with the causes on
 * (exceptions:page_fault_user and page_fault_kernel: x86-64 only, at each
 * fault's entry). Each bumps the `faults` word of its thread's slot in
 * kspan_sched_open, so that user space reads the thread's fault counts
 * (getrusage) at a change of its span only when a fault may have moved
 * them since its last reading. A slot is shared by the tids with the same
 * low bits: another thread's fault costs a reading more, never one missed.
 */
static __always_inline void kspan_fault_taken(void)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct kspan_sched_open *open;

	if ((__u32)(pid_tgid >> 32) != kspan_cfg.target_tgid)
		return;
	open = kspan_sched_open_of((__u32)pid_tgid);
	if (open)
		__sync_fetch_and_add(&open->faults, 1);
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(kspan_tp_page_fault_user)
{
	kspan_fault_taken();
	return 0;
}

SEC("tp_btf/page_fault_kernel")
int BPF_PROG(kspan_tp_page_fault_kernel)
{
	kspan_fault_taken();
	return 0;
}
