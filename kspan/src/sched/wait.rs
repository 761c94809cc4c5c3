// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Wait spans of the scheduler's account ([`WaitSpans`]): a
//! `struct kspan_wait_record` made into a child span of the application
//! span the thread waited in, with its state, the run-queue part, the
//! kernel stack and who woke it, exported through the core's
//! [`SpanFactory`] like any kernel span.

use std::sync::{Arc, OnceLock};

use kspan_bpf::consts as c;
use kspan_bpf::types::kspan_wait_record;
use opentelemetry::trace::{Link, SpanContext, SpanId, TraceFlags, TraceId, TraceState, Tracer};
use opentelemetry::KeyValue;

use super::keys::wait_attributes as attr;
use crate::annotation::attributes as keys;
use crate::kernel::ksyms::{in_interrupt, render_stack, KernelSymbolTable};
use crate::span::SpanFactory;

/// Frames of a wait span's stack kept in its attribute.
const STACK_FRAMES_SHOWN: usize = 8;

/// Whether `bytes` is a wait record (its header says so).
pub(crate) fn is_wait(probe_id: u32, flags: u32) -> bool {
    u64::from(probe_id) == c::KSPAN_WAIT_PROBE_ID && u64::from(flags) & c::KSPAN_REC_WAIT != 0
}

/// The wait record in `bytes`, if they hold one whole.
fn parse_wait(bytes: &[u8]) -> Option<kspan_wait_record> {
    if bytes.len() < std::mem::size_of::<kspan_wait_record>() {
        return None;
    }
    // SAFETY: the slice holds a whole record; the type is plain old data
    // (integers and byte arrays: every bit pattern is valid), and
    // read_unaligned copes with any alignment.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<kspan_wait_record>()) })
}

/// The span name of each state: low cardinality, as span names should be.
fn span_name(state: u32) -> &'static str {
    match u64::from(state) {
        c::KSPAN_SCHED_PREEMPTED => "off-cpu preempted",
        c::KSPAN_SCHED_SLEEPING => "off-cpu sleeping",
        c::KSPAN_SCHED_BLOCKED => "off-cpu blocked",
        c::KSPAN_SCHED_LOCK => "kernel lock wait",
        _ => "off-cpu other",
    }
}

/// A lock wait's attributes: its kind, access, address and symbol, and
/// its owner (a link to the owner's span goes with the waker's).
fn lock_attributes(w: &kspan_wait_record, symbols: &KernelSymbolTable) -> Vec<KeyValue> {
    let flags = u64::from(w.lock_flags);
    let mut attributes = vec![
        KeyValue::new(attr::LOCK_KIND, lock_kind_name(w.cause)),
        KeyValue::new(attr::LOCK_ADDRESS, format!("{:#x}", w.lock_addr)),
    ];
    if flags & c::KSPAN_LCB_F_WRITE != 0 {
        attributes.push(KeyValue::new(attr::LOCK_ACCESS, "write"));
    } else if flags & c::KSPAN_LCB_F_READ != 0 {
        attributes.push(KeyValue::new(attr::LOCK_ACCESS, "read"));
    }
    if let Some(name) = symbols.data_name_of(w.lock_addr) {
        attributes.push(KeyValue::new(attr::LOCK_SYMBOL, name));
    }
    if u64::from(w.waker_kind) == c::KSPAN_WAKER_TASK {
        attributes.extend([
            KeyValue::new(attr::LOCK_OWNER_PID, i64::from(w.waker_pid)),
            KeyValue::new(attr::LOCK_OWNER_TID, i64::from(w.waker_tid)),
            KeyValue::new(attr::LOCK_OWNER_COMM, c_str(&w.waker_comm)),
        ]);
    }
    attributes
}

/// A blocked wait's block request, when its completion woke it.
fn request_attributes(w: &kspan_wait_record) -> Vec<KeyValue> {
    let r = &w.request;
    if r.complete_ns == 0 {
        return Vec::new();
    }
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let mut attributes = vec![
        KeyValue::new(
            attr::REQUEST_DEVICE,
            crate::kernel::block::device_name(r.dev),
        ),
        KeyValue::new(attr::REQUEST_SECTOR, n(r.sector)),
        KeyValue::new(attr::REQUEST_BYTES, n(r.bytes)),
        KeyValue::new(attr::REQUEST_QUEUE_NS, n(r.queue_ns)),
        KeyValue::new(attr::REQUEST_DEVICE_NS, n(r.device_ns)),
    ];
    if r.held_ns > 0 {
        let name: Vec<u8> = r.held_by.cgroup.iter().map(|&b| b as u8).collect();
        attributes.extend([
            KeyValue::new(attr::REQUEST_HELD_NS, n(r.held_ns)),
            KeyValue::new(attr::REQUEST_HELD_BY, c_str(&name)),
            KeyValue::new(attr::REQUEST_HELD_BY_ID, n(r.held_by.cgroup_id)),
        ]);
    }
    attributes
}

/// A link of kind `kind` ([`attr::LINK`]) to the span of
/// `trace_id`/`span_id` (none for 0), with `more` attributes.
fn span_link(
    trace_id: [u8; 16],
    span_id: u64,
    kind: &'static str,
    more: Vec<KeyValue>,
) -> Option<Link> {
    (span_id != 0).then(|| {
        let mut attributes = vec![KeyValue::new(attr::LINK, kind)];
        attributes.extend(more);
        Link::new(
            SpanContext::new(
                TraceId::from_bytes(trace_id),
                SpanId::from(span_id),
                TraceFlags::SAMPLED,
                false,
                TraceState::NONE,
            ),
            attributes,
            0,
        )
    })
}

/// The link to the waker's own last wait span: the next hop of the chain
/// of wake-ups, with its state, cause and time waiting.
fn waker_wait_link(w: &kspan_wait_record) -> Option<Link> {
    let hop = &w.waker_wait;
    let cause = match u64::from(hop.state) {
        c::KSPAN_SCHED_BLOCKED => Some((attr::BLOCK_CAUSE, block_cause_name(hop.cause))),
        c::KSPAN_SCHED_SLEEPING => Some((attr::SLEEP_CAUSE, sleep_cause_name(hop.cause))),
        _ => None,
    };
    let mut more = vec![
        KeyValue::new(attr::STATE, state_name(hop.state)),
        KeyValue::new(
            attr::WAITING_NS,
            i64::try_from(hop.waiting_ns).unwrap_or(i64::MAX),
        ),
    ];
    more.extend(cause.map(|(key, name)| KeyValue::new(key, name)));
    span_link(hop.trace_id, hop.span_id, "waker_wait", more)
}

/// What the waker did over the wait (the record's `waker_during`), as
/// the attributes of its `waker` link; none where it is not known.
fn waker_during_attributes(w: &kspan_wait_record) -> Vec<KeyValue> {
    let d = &w.waker_during;
    if d.to_ns <= d.from_ns {
        return Vec::new();
    }
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let overlap = d.to_ns - d.from_ns;
    let blocked = [
        attr::WAKER_BLOCKED_UNATTRIBUTED_NS,
        attr::WAKER_BLOCKED_IO_NS,
        attr::WAKER_BLOCKED_MEMORY_NS,
        attr::WAKER_BLOCKED_LOCK_NS,
    ];
    let sleeping = [
        attr::WAKER_SLEEPING_UNATTRIBUTED_NS,
        attr::WAKER_SLEEPING_LOCK_NS,
        attr::WAKER_SLEEPING_FUTEX_NS,
        attr::WAKER_SLEEPING_POLL_NS,
        attr::WAKER_SLEEPING_TIMER_NS,
        attr::WAKER_SLEEPING_RECEIVE_NS,
    ];
    let parts: Vec<(&'static str, u64)> = blocked
        .into_iter()
        .zip(d.blocked_ns)
        .chain(sleeping.into_iter().zip(d.sleeping_ns))
        .chain([(attr::WAKER_OTHER_OFF_CPU_NS, d.other_ns)])
        .collect();
    // Saturating: a record's figures are the kernel's, and a sum past
    // u64 is not a reason to panic on the consumer's thread.
    let off_cpu = parts
        .iter()
        .fold(d.run_queue_ns, |sum, &(_, v)| sum.saturating_add(v));
    let on_cpu = overlap.saturating_sub(off_cpu.saturating_add(d.uncovered_ns));
    let mut attributes = vec![
        KeyValue::new(attr::WAKER_OVERLAP_NS, n(overlap)),
        KeyValue::new(attr::WAKER_ON_CPU_NS, n(on_cpu)),
        KeyValue::new(attr::WAKER_RUN_QUEUE_NS, n(d.run_queue_ns)),
    ];
    attributes.extend(
        parts
            .into_iter()
            .filter(|&(_, v)| v > 0)
            .map(|(key, v)| KeyValue::new(key, n(v))),
    );
    if d.uncovered_ns > 0 {
        attributes.push(KeyValue::new(attr::WAKER_UNCOVERED_NS, n(d.uncovered_ns)));
    }
    if u64::from(d.flags) & c::KSPAN_DURING_UNSPANNED != 0 {
        attributes.push(KeyValue::new(attr::WAKER_UNSPANNED, true));
    }
    let requests = d.request_held_ns | d.request_queue_ns | d.request_device_ns;
    if d.requests > 0 || requests > 0 {
        attributes.extend([
            KeyValue::new(attr::WAKER_BLOCK_REQUESTS, n(d.requests)),
            KeyValue::new(attr::WAKER_BLOCK_HELD_NS, n(d.request_held_ns)),
            KeyValue::new(attr::WAKER_BLOCK_QUEUE_NS, n(d.request_queue_ns)),
            KeyValue::new(attr::WAKER_BLOCK_DEVICE_NS, n(d.request_device_ns)),
        ]);
    }
    attributes
}

/// The kernel's symbols, read on first use or up front ([`WaitSpans::new`]).
/// Shared by the span workers' copies: one table a runtime.
#[derive(Debug, Default, Clone)]
struct WaitSymbols(Arc<OnceLock<KernelSymbolTable>>);

impl WaitSymbols {
    fn table(&self) -> &KernelSymbolTable {
        self.0.get_or_init(|| {
            KernelSymbolTable::load().unwrap_or_else(|e| {
                crate::diagnostics::warn_user!(error = %e, "kspan cannot read /proc/kallsyms: wait spans show stack addresses");
                KernelSymbolTable::default()
            })
        })
    }
}

/// A NUL-padded kernel string.
fn c_str(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// The account's half of turning records into spans: its wait records,
/// and what making them needs (the kernel's symbols, whether the causes
/// are read).
#[derive(Debug, Default, Clone)]
pub(crate) struct WaitSpans {
    symbols: WaitSymbols,
    /// The causes are read: blocked and sleeping waits say theirs.
    causes: bool,
}

impl WaitSpans {
    /// For `account`: with wait spans, the kernel's symbols are read now,
    /// before recording starts, not when the first wait of a request ends.
    pub(crate) fn new(account: &super::SchedulerAccount) -> Self {
        let spans = WaitSpans {
            symbols: WaitSymbols::default(),
            causes: account.causes(),
        };
        if account.wait_min_ns() > 0 {
            spans.symbols.table();
        }
        spans
    }

    /// With `symbols` for the stacks and the causes read, for the fuzz
    /// targets (nothing read from the system).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn with_symbols(symbols: KernelSymbolTable) -> Self {
        WaitSpans {
            symbols: WaitSymbols(Arc::new(OnceLock::from(symbols))),
            causes: true,
        }
    }

    /// Makes the wait record in `bytes` a span under its application span
    /// through `factory`; `false` when they hold no whole wait record.
    pub(crate) fn process<T: Tracer>(&self, factory: &SpanFactory<T>, bytes: &[u8]) -> bool {
        match parse_wait(bytes) {
            Some(wait) => {
                self.process_wait(factory, &wait);
                true
            }
            None => false,
        }
    }

    /// Makes wait record `w` a span under its application span.
    fn process_wait<T: Tracer>(&self, factory: &SpanFactory<T>, w: &kspan_wait_record) {
        let symbols = &self.symbols;
        let rec = &w.rec;
        let end = rec.end_ns.max(rec.start_ns);
        let run_from = w.wake_ns.clamp(rec.start_ns, end);
        let mut attributes = vec![
            KeyValue::new(attr::STATE, state_name(w.state)),
            KeyValue::new(attr::WAITING_NS, (run_from - rec.start_ns) as i64),
            KeyValue::new(attr::RUN_QUEUE_NS, (end - run_from) as i64),
            KeyValue::new(keys::TID, i64::from(rec.tid)),
        ];
        let causes = self.causes;
        let mut links = Vec::new();
        match u64::from(w.state) {
            c::KSPAN_SCHED_BLOCKED if causes => {
                attributes.push(KeyValue::new(attr::BLOCK_CAUSE, block_cause_name(w.cause)));
                attributes.extend(request_attributes(w));
            }
            c::KSPAN_SCHED_SLEEPING if causes => {
                attributes.push(KeyValue::new(attr::SLEEP_CAUSE, sleep_cause_name(w.cause)));
            }
            c::KSPAN_SCHED_LOCK => {
                attributes.extend(lock_attributes(w, symbols.table()));
                links.extend(span_link(
                    w.waker_trace_id,
                    w.waker_span_id,
                    "owner",
                    Vec::new(),
                ));
            }
            _ => {}
        }
        if causes && w.in_fault != 0 {
            attributes.push(KeyValue::new(attr::IN_FAULT, true));
        }
        let frames = &w.frames[..(w.nframes as usize).min(w.frames.len())];
        if !frames.is_empty() {
            let stack = render_stack(symbols.table(), frames, STACK_FRAMES_SHOWN);
            attributes.push(KeyValue::new(attr::STACK, stack));
        }
        if u64::from(w.state) == c::KSPAN_SCHED_LOCK {
            factory.export_recorded(&w.rec, span_name(w.state), attributes, links);
            return;
        }
        let waker_frames = &w.waker_frames[..(w.waker_nframes as usize).min(w.waker_frames.len())];
        match u64::from(w.waker_kind) {
            c::KSPAN_WAKER_INTERRUPT => {
                attributes.push(KeyValue::new(attr::WAKER_KIND, "interrupt"));
            }
            c::KSPAN_WAKER_TASK if in_interrupt(symbols.table(), waker_frames) => {
                attributes.push(KeyValue::new(attr::WAKER_KIND, "interrupt"));
            }
            c::KSPAN_WAKER_TASK => {
                attributes.extend([
                    KeyValue::new(attr::WAKER_KIND, "task"),
                    KeyValue::new(attr::WAKER_PID, i64::from(w.waker_pid)),
                    KeyValue::new(attr::WAKER_TID, i64::from(w.waker_tid)),
                    KeyValue::new(attr::WAKER_COMM, c_str(&w.waker_comm)),
                ]);
                links.extend(span_link(
                    w.waker_trace_id,
                    w.waker_span_id,
                    "waker",
                    waker_during_attributes(w),
                ));
                links.extend(waker_wait_link(w));
            }
            c::KSPAN_WAKER_UNKNOWN => {
                attributes.push(KeyValue::new(attr::WAKER_KIND, "unknown"));
            }
            _ => attributes.push(KeyValue::new(attr::WAKER_KIND, "none")),
        }
        factory.export_recorded(&w.rec, span_name(w.state), attributes, links);
    }
}

/// The name of a blocked wait's cause (`enum kspan_block_cause`).
pub(crate) fn block_cause_name(cause: u32) -> &'static str {
    use kspan_bpf::consts as c;
    match u64::from(cause) {
        c::KSPAN_BLOCK_IO => "io",
        c::KSPAN_BLOCK_MEMORY => "memory",
        c::KSPAN_BLOCK_LOCK => "lock",
        _ => "unattributed",
    }
}

/// The name of a sleeping wait's cause (`enum kspan_sleep_cause`).
pub(crate) fn sleep_cause_name(cause: u32) -> &'static str {
    use kspan_bpf::consts as c;
    match u64::from(cause) {
        c::KSPAN_SLEEP_LOCK => "lock",
        c::KSPAN_SLEEP_FUTEX => "futex",
        c::KSPAN_SLEEP_POLL => "poll",
        c::KSPAN_SLEEP_TIMER => "timer",
        c::KSPAN_SLEEP_RECEIVE => "receive",
        _ => "unattributed",
    }
}

/// The name of a kernel lock's kind (`enum kspan_lock_kind`).
pub(crate) fn lock_kind_name(kind: u32) -> &'static str {
    use kspan_bpf::consts as c;
    match u64::from(kind) {
        c::KSPAN_LOCK_MUTEX => "mutex",
        c::KSPAN_LOCK_RWSEM => "rwsem",
        c::KSPAN_LOCK_SPIN => "spin",
        _ => "other",
    }
}

/// The name of a wait state (`enum kspan_sched_state`).
pub(crate) fn state_name(state: u32) -> &'static str {
    use kspan_bpf::consts as c;
    match u64::from(state) {
        c::KSPAN_SCHED_PREEMPTED => "preempted",
        c::KSPAN_SCHED_SLEEPING => "sleeping",
        c::KSPAN_SCHED_BLOCKED => "blocked",
        c::KSPAN_SCHED_LOCK => "lock",
        _ => "other",
    }
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(attributes: &[KeyValue], key: &str) -> Option<i64> {
        attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| match kv.value {
                opentelemetry::Value::I64(v) => v,
                ref other => panic!("{key}: {other:?}"),
            })
    }

    #[test]
    fn a_waker_not_followed_says_nothing() {
        let w = kspan_wait_record::default();
        assert!(waker_during_attributes(&w).is_empty());
    }

    /// Found by `any_wait_record_becomes_a_span_without_a_panic`: parts
    /// whose sum passed u64 overflowed (a panic in a debug build).
    #[test]
    fn parts_past_u64_leave_no_time_on_cpu() {
        let mut w = kspan_wait_record::default();
        let d = &mut w.waker_during;
        (d.from_ns, d.to_ns) = (1, 1_000);
        d.blocked_ns = [u64::MAX / 2; 4];
        d.run_queue_ns = u64::MAX;
        let attributes = waker_during_attributes(&w);
        assert_eq!(figure(&attributes, attr::WAKER_ON_CPU_NS), Some(0));
        assert_eq!(figure(&attributes, attr::WAKER_OVERLAP_NS), Some(999));
    }

    /// The `records` fuzz target's first find: figures whose sum passes
    /// u64::MAX panicked (overflow checks) or wrapped into a wrong on-CPU
    /// time.
    #[test]
    fn waker_figures_past_u64_max_saturate() {
        let mut w = kspan_wait_record::default();
        w.waker_during.from_ns = 1;
        w.waker_during.to_ns = 1_000;
        w.waker_during.blocked_ns[1] = u64::MAX - 5;
        w.waker_during.sleeping_ns[2] = 0x5555_5555_5555_5556;
        w.waker_during.run_queue_ns = 10;
        let attributes = waker_during_attributes(&w);
        assert_eq!(figure(&attributes, attr::WAKER_ON_CPU_NS), Some(0));
        assert_eq!(
            figure(&attributes, attr::WAKER_BLOCKED_IO_NS),
            Some(i64::MAX)
        );
    }

    #[test]
    fn the_waker_s_parts_close_the_overlap() {
        let mut w = kspan_wait_record::default();
        let d = &mut w.waker_during;
        d.from_ns = 1_000;
        d.to_ns = 101_000;
        d.blocked_ns[c::KSPAN_BLOCK_IO as usize] = 60_000;
        d.sleeping_ns[c::KSPAN_SLEEP_FUTEX as usize] = 10_000;
        d.run_queue_ns = 5_000;
        d.uncovered_ns = 20_000;
        d.requests = 3;
        d.request_device_ns = 55_000;
        d.flags = c::KSPAN_DURING_UNSPANNED as u32;
        let attributes = waker_during_attributes(&w);
        let get = |key| figure(&attributes, key);
        assert_eq!(get(attr::WAKER_OVERLAP_NS), Some(100_000));
        assert_eq!(get(attr::WAKER_BLOCKED_IO_NS), Some(60_000));
        assert_eq!(get(attr::WAKER_SLEEPING_FUTEX_NS), Some(10_000));
        assert_eq!(
            get(attr::WAKER_BLOCKED_LOCK_NS),
            None,
            "a part of 0 is left out"
        );
        assert_eq!(get(attr::WAKER_UNCOVERED_NS), Some(20_000));
        assert_eq!(get(attr::WAKER_ON_CPU_NS), Some(5_000), "the rest");
        assert_eq!(get(attr::WAKER_BLOCK_REQUESTS), Some(3));
        assert_eq!(get(attr::WAKER_BLOCK_HELD_NS), Some(0));
        assert!(attributes
            .iter()
            .any(|kv| kv.key.as_str() == attr::WAKER_UNSPANNED));
    }
}
