// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Wait spans of the scheduler's account (see [`crate::sched`]): a
//! `struct kspan_wait_record` made into a child span of the application
//! span the thread waited in, with its state, the run-queue part, the
//! kernel stack and who woke it.

use std::cell::OnceCell;

use kspan_bpf::consts as c;
use kspan_bpf::types::kspan_wait_record;
use opentelemetry::trace::{
    Link, SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
    Tracer,
};
use opentelemetry::KeyValue;

use super::{keys, SpanFactory};
use crate::annotation::{KernelSpan, KernelSpanParts};
use crate::kernel::ksyms::{in_interrupt, render_stack, KernelSymbolTable};
use crate::sched::{
    block_cause_name, lock_kind_name, sleep_cause_name, state_name, wait_attributes as attr,
};

/// Frames of a wait span's stack kept in its attribute.
const STACK_FRAMES_SHOWN: usize = 8;

/// Whether `bytes` is a wait record (its header says so).
pub(crate) fn is_wait(probe_id: u32, flags: u32) -> bool {
    u64::from(probe_id) == c::KSPAN_WAIT_PROBE_ID && u64::from(flags) & c::KSPAN_REC_WAIT != 0
}

/// The wait record in `bytes`, if they hold one whole.
pub(crate) fn parse_wait(bytes: &[u8]) -> Option<kspan_wait_record> {
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
    vec![
        KeyValue::new(
            attr::REQUEST_DEVICE,
            crate::kernel::block::device_name(r.dev),
        ),
        KeyValue::new(attr::REQUEST_SECTOR, n(r.sector)),
        KeyValue::new(attr::REQUEST_BYTES, n(r.bytes)),
        KeyValue::new(attr::REQUEST_QUEUE_NS, n(r.queue_ns)),
        KeyValue::new(attr::REQUEST_DEVICE_NS, n(r.device_ns)),
    ]
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

/// The kernel's symbols, read on first use or up front ([`WaitSymbols::loaded`]).
#[derive(Debug, Default)]
pub(crate) struct WaitSymbols(OnceCell<KernelSymbolTable>);

impl WaitSymbols {
    /// The symbols read now: a runtime with wait spans reads them before
    /// its recording starts, not when the first wait of a request ends.
    pub(crate) fn loaded() -> Self {
        let symbols = Self::default();
        symbols.table();
        symbols
    }

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

impl<T: Tracer> SpanFactory<T> {
    /// Makes wait record `w` a span under its application span.
    pub(crate) fn process_wait(&self, w: &kspan_wait_record, symbols: &WaitSymbols) {
        let rec = &w.rec;
        let end = rec.end_ns.max(rec.start_ns);
        let run_from = w.wake_ns.clamp(rec.start_ns, end);
        let mut attributes = vec![
            KeyValue::new(attr::STATE, state_name(w.state)),
            KeyValue::new(attr::WAITING_NS, (run_from - rec.start_ns) as i64),
            KeyValue::new(attr::RUN_QUEUE_NS, (end - run_from) as i64),
            KeyValue::new(keys::TID, i64::from(rec.tid)),
        ];
        let causes = self.sched_causes;
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
            self.export_wait(w, attributes, links);
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
                    Vec::new(),
                ));
                links.extend(waker_wait_link(w));
            }
            c::KSPAN_WAKER_UNKNOWN => {
                attributes.push(KeyValue::new(attr::WAKER_KIND, "unknown"));
            }
            _ => attributes.push(KeyValue::new(attr::WAKER_KIND, "none")),
        }
        self.export_wait(w, attributes, links);
    }

    /// Exports wait record `w` as a span with `attributes` and `links`.
    fn export_wait(&self, w: &kspan_wait_record, mut attributes: Vec<KeyValue>, links: Vec<Link>) {
        let rec = &w.rec;
        let end = rec.end_ns.max(rec.start_ns);
        if self.process_pid {
            attributes.push(KeyValue::new(keys::PROCESS_PID, i64::from(rec.pid)));
        }
        let mut builder = SpanBuilder::from_name(span_name(w.state));
        builder.span_kind = Some(SpanKind::Internal);
        builder.start_time = Some(self.clock.to_system_time(rec.start_ns));
        builder.attributes = Some(attributes);
        if !links.is_empty() {
            builder.links = Some(links);
        }
        self.export(KernelSpan::new(KernelSpanParts {
            builder,
            trace_id: TraceId::from_bytes(rec.trace_id),
            span_id: SpanId::from(rec.span_id),
            parent_span_id: Some(SpanId::from(rec.parent_span_id)),
            end_time: self.clock.to_system_time(end),
            status: Status::Unset,
        }));
    }
}
