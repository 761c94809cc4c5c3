// SPDX-License-Identifier: Apache-2.0 OR MIT
//! From a decoded record to an OpenTelemetry span, through the
//! application's own tracer with the kernel's ids and times, so the span
//! passes the application's sampler, processors and exporter like any span
//! the application makes itself; the probe's handler runs in between.

mod attributes;
mod clock;
mod held;
mod ids;
mod panics;
#[cfg(test)]
mod properties;

pub use clock::ClockOffset;
pub(crate) use ids::provider_has_kernel_ids;
pub use ids::KernelSpanIds;

use std::cell::{Cell, RefCell};
use std::time::Instant;

use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags,
    TraceId, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue};

use crate::annotation::attributes as keys;
use crate::annotation::{Capture, Captured, KernelSpan, KernelSpanParts, Value};
use crate::consume::{decode_capture, RecordView};
use crate::kernel::errno;
use crate::plan::{normalize, ProbePlan};
use attributes::capture_attributes;
use held::HeldSpans;

/// The instrumentation scope of kernel spans.
pub(crate) const SCOPE_NAME: &str = "kspan";

/// What became of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The span was exported.
    Exported,
    /// The handler discarded it.
    Discarded,
    /// The handler panicked; the span was exported as it was before the panic
    /// (with the attributes of the captures).
    HandlerPanicked,
    /// Not a span: a call refused by its probe's filters after spans under
    /// it were made; those spans now hang under the call's parent.
    Reparented,
}

/// Turns records into spans through one tracer: what every span of a kspan
/// instance shares (the tracer, the kernel-to-wall clock conversion, whether
/// spans name their process, the parent contexts last used). One consumer
/// uses it: it is not `Sync`.
#[derive(Debug)]
pub struct SpanFactory<T> {
    tracer: T,
    clock: ClockOffset,
    process_pid: bool,
    parents: RefCell<ParentContexts>,
    panics: panics::HandlerPanics,
    /// The next span's number, when spans are numbered for an export
    /// ledger (see [`crate::export`]).
    next_number: Option<Cell<u64>>,
    /// Spans waiting for their parent's fate.
    held: RefCell<HeldSpans>,
    /// Spans handed to the tracer so far.
    handed: Cell<u64>,
    /// Spans that went without their parent's fate known.
    unresolved: Cell<u64>,
    /// Records since waiting spans were last checked for expiry.
    since_expiry: Cell<u32>,
}

/// The bits of a span's number (`kspan.sequence`) that count within its
/// stream; the bits above name the stream (a span worker of the runtime).
pub(crate) const STREAM_SHIFT: u32 = 40;

/// The number of the `n`th span of stream `stream`: a worker numbers its
/// spans in the order it hands them on, and the batch processor keeps each
/// worker's order, not the order between workers (the export ledger
/// follows each stream apart).
pub(crate) fn sequence(stream: u32, n: u64) -> u64 {
    (u64::from(stream) << STREAM_SHIFT) | n
}

/// Records between two checks for spans that waited too long.
const EXPIRY_EVERY: u32 = 1024;

/// Contexts of recent parents, direct-mapped by span id (span ids are
/// random). Kernel spans mostly share their parent with spans near them in
/// the ring buffer: the calls of one request, the inner calls of one outer
/// call, the calls of a few dozen requests in flight. Making a context costs
/// an allocation (the SDK's span; the context observer prepares no record
/// for these, which are never attached): a hit costs none.
#[derive(Debug)]
struct ParentContexts {
    slots: Box<[Option<(TraceId, SpanId, Context)>]>,
}

/// Parents kept: a few dozen requests in flight.
const PARENT_SLOTS: usize = 64;

impl Default for ParentContexts {
    fn default() -> Self {
        ParentContexts {
            slots: (0..PARENT_SLOTS).map(|_| None).collect(),
        }
    }
}

impl ParentContexts {
    /// The context whose span is the sampled local span `parent` of
    /// `trace`.
    fn get(&mut self, trace: TraceId, parent: SpanId) -> &Context {
        let at = (u64::from_be_bytes(parent.to_bytes()) % PARENT_SLOTS as u64) as usize;
        let slot = &mut self.slots[at];
        if !matches!(slot, Some((t, p, _)) if *t == trace && *p == parent) {
            let cx = crate::context::unobserved(|| {
                Context::new().with_remote_span_context(SpanContext::new(
                    trace,
                    parent,
                    TraceFlags::SAMPLED,
                    false,
                    TraceState::NONE,
                ))
            });
            *slot = Some((trace, parent, cx));
        }
        match slot {
            Some((_, _, cx)) => cx,
            None => unreachable!("the slot was just filled"),
        }
    }
}

impl<T: Tracer> SpanFactory<T> {
    /// Spans through `tracer`, with kernel times converted by `clock`, not
    /// naming their process.
    pub fn new(tracer: T, clock: ClockOffset) -> Self {
        SpanFactory {
            tracer,
            clock,
            process_pid: false,
            parents: RefCell::default(),
            panics: panics::HandlerPanics::default(),
            next_number: None,
            held: RefCell::default(),
            handed: Cell::new(0),
            unresolved: Cell::new(0),
            since_expiry: Cell::new(0),
        }
    }

    /// A factory for another span worker of the same runtime: the same
    /// tracer, clock and settings, its spans numbered in stream `stream`,
    /// handler panics said once for both; nothing else shared (a worker's
    /// held spans and parents are its threads').
    pub(crate) fn sibling(&self, stream: u32) -> Self
    where
        T: Clone,
    {
        SpanFactory {
            process_pid: self.process_pid,
            panics: self.panics.clone(),
            next_number: self.next_number.as_ref().map(|_| Cell::new(0)),
            ..SpanFactory::new(self.tracer.clone(), self.clock)
        }
        .sequence_stream(stream)
    }

    /// Spans handed to the tracer so far (held spans are not, yet).
    pub fn handed(&self) -> u64 {
        self.handed.get()
    }

    /// Spans handed without their parent's fate known: a parent with
    /// filters whose exit never came, or that ran longer than kspan waits.
    pub fn unresolved(&self) -> u64 {
        self.unresolved.get()
    }

    /// Spans waiting for their parent's fate now.
    pub fn waiting(&self) -> usize {
        self.held.borrow().len()
    }

    /// Hands every waiting span to the tracer as it is (at shutdown, and
    /// when they waited too long), counted as unresolved.
    pub fn release_waiting(&self) {
        let spans = self.held.borrow_mut().drain();
        self.export_unresolved(spans);
    }

    fn export_unresolved(&self, spans: Vec<KernelSpan>) {
        self.unresolved
            .set(self.unresolved.get() + spans.len() as u64);
        for span in spans {
            self.export(span);
        }
    }

    fn export_all(&self, spans: Vec<KernelSpan>) {
        for span in spans {
            self.export(span);
        }
    }

    /// Now and then: spans that waited too long go as they are.
    fn expire_waiting(&self) {
        let n = self.since_expiry.get() + 1;
        if n < EXPIRY_EVERY {
            self.since_expiry.set(n);
            return;
        }
        self.since_expiry.set(0);
        if self.held.borrow().len() == 0 {
            return;
        }
        let spans = self
            .held
            .borrow_mut()
            .expired(Instant::now(), held::MAX_WAIT);
        self.export_unresolved(spans);
    }

    /// Whether each span carries its number in the order spans are handed
    /// to the tracer ([`keys::SEQUENCE`]), for an export ledger to find the
    /// spans dropped before the exporter.
    pub fn numbered(mut self, on: bool) -> Self {
        self.next_number = on.then(|| Cell::new(0));
        self
    }

    /// Numbers this factory's spans in stream `stream` of its runtime, one
    /// stream per span worker ([`sequence`]): each
    /// worker hands its spans on in its own order, and the export ledger
    /// follows each stream apart. With [`Self::numbered`] on.
    pub(crate) fn sequence_stream(mut self, stream: u32) -> Self {
        if self.next_number.is_some() {
            self.next_number = Some(Cell::new(sequence(stream, 0)));
        }
        self
    }

    /// Whether each span carries `process.pid`: wanted when other processes
    /// are traced too; spans of the application's own process are already
    /// told apart by the application's resource.
    pub fn with_process_pid(mut self, on: bool) -> Self {
        self.process_pid = on;
        self
    }

    /// Decodes `view` with `plan`, runs the handler and exports the span
    /// unless the handler discards it.
    pub fn process(&self, plan: &ProbePlan, view: &RecordView<'_>) -> Outcome {
        let rec = &view.header;
        self.expire_waiting();
        let parent_pending = rec.flags & kspan_bpf::REC_PARENT_PENDING != 0;
        let parent = (rec.parent_span_id != 0).then(|| SpanId::from(rec.parent_span_id));
        if rec.flags & kspan_bpf::REC_REPARENT != 0 {
            let ready = self.held.borrow_mut().parent_refused(
                SpanId::from(rec.span_id),
                parent,
                parent_pending,
                Instant::now(),
            );
            self.export_all(ready);
            return Outcome::Reparented;
        }
        let spec = &plan.probe.spec;
        // On the stack: no allocation for the captures themselves.
        let mut slots: [Capture<'_>; kspan_bpf::MAX_CAPS] = std::array::from_fn(|_| Capture::Fault);
        for (i, (slot, c)) in slots.iter_mut().zip(&plan.captures).enumerate() {
            *slot = decode_capture(c, i, view);
        }
        let captures = &slots[..plan.captures.len()];
        let ret = (rec.flags & kspan_bpf::REC_HAS_RET != 0)
            .then(|| normalize(rec.ret, plan.signature.ret.class));

        // Room for what kspan adds (return value, error type, function,
        // thread, process) and a truncation mark or two, so that the
        // handler's first additions do not reallocate either.
        let mut attributes = Vec::with_capacity(captures.len() + 8);
        for (c, capture) in plan.captures.iter().zip(captures) {
            capture_attributes(c, capture, &mut attributes);
        }
        let mut status = Status::Unset;
        if let Some(raw) = ret {
            if let Some(ty) = spec.ret {
                attributes.push(KeyValue::new(
                    keys::RETURN_VALUE,
                    Value::decode(raw, ty).to_otel(),
                ));
            }
            if plan.errno_status {
                // `raw` is normalized: a signed int return is sign-extended.
                if let Some(errno) = errno::from_return(raw as i64) {
                    let name = errno::name(errno);
                    attributes.push(KeyValue::new(keys::ERROR_TYPE, name.clone()));
                    status = Status::Error { description: name };
                }
            }
        }
        attributes.push(KeyValue::new(keys::FUNCTION_NAME, plan.function));
        attributes.push(KeyValue::new(keys::TID, i64::from(rec.tid)));
        if rec.descendants_dropped > 0 {
            attributes.push(KeyValue::new(
                keys::DESCENDANTS_DROPPED,
                i64::from(rec.descendants_dropped),
            ));
        }
        if self.process_pid {
            attributes.push(KeyValue::new(keys::PROCESS_PID, i64::from(rec.pid)));
        }

        // Fields set in place: the builder is large, and each `with_*` moves it.
        let mut builder = SpanBuilder::from_name(plan.function);
        builder.span_kind = Some(SpanKind::Internal);
        builder.start_time = Some(self.clock.to_system_time(rec.start_ns));
        builder.attributes = Some(attributes);
        let mut span = KernelSpan::new(KernelSpanParts {
            builder,
            trace_id: TraceId::from_bytes(rec.trace_id),
            span_id: SpanId::from(rec.span_id),
            parent_span_id: (rec.parent_span_id != 0).then(|| SpanId::from(rec.parent_span_id)),
            end_time: self.clock.to_system_time(rec.end_ns.max(rec.start_ns)),
            status,
        });
        let captured = Captured::new(captures, ret);
        let handler = plan.probe.handler;
        let ran = self.panics.run(rec.probe_id, plan.function, || {
            handler(&captured, &mut span)
        });
        let span_id = span.span_id();
        let outcome = match ran {
            Ok(()) if span.is_discarded() => {
                // Like a refusal: what waits for it goes under its parent.
                if self.held.borrow().len() > 0 {
                    let ready = self.held.borrow_mut().parent_refused(
                        span_id,
                        parent,
                        parent_pending,
                        Instant::now(),
                    );
                    self.export_all(ready);
                }
                return Outcome::Discarded;
            }
            Ok(()) => Outcome::Exported,
            Err(_) => {
                // Exported with what the handler did before it panicked, and marked.
                span.set_attribute(KeyValue::new(keys::HANDLER_PANICKED, true));
                Outcome::HandlerPanicked
            }
        };
        match parent {
            Some(parent) if parent_pending => {
                self.held.borrow_mut().hold(parent, span, Instant::now())
            }
            _ => self.export(span),
        }
        if self.held.borrow().len() > 0 {
            let ready = self.held.borrow_mut().parent_stands(span_id);
            self.export_all(ready);
        }
        outcome
    }

    /// Exports a span the kernel recorded whole, with no probe and no
    /// handler (a wait span of the scheduler's account): named `name`,
    /// with `rec`'s ids and times, `attributes` and `links` (and the
    /// process's pid where spans carry it).
    pub(crate) fn export_recorded(
        &self,
        rec: &kspan_bpf::types::kspan_record,
        name: &'static str,
        mut attributes: Vec<KeyValue>,
        links: Vec<opentelemetry::trace::Link>,
    ) {
        let end = rec.end_ns.max(rec.start_ns);
        if self.process_pid {
            attributes.push(KeyValue::new(keys::PROCESS_PID, i64::from(rec.pid)));
        }
        let mut builder = SpanBuilder::from_name(name);
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

    /// Builds and ends `span` through the tracer with the kernel's ids
    /// (handed to the provider's [`KernelSpanIds`](crate::KernelSpanIds)),
    /// end time and status. A parent is a sampled local span: a kernel span
    /// whose parent was not sampled never leaves the kernel.
    fn export(&self, span: KernelSpan) {
        let KernelSpanParts {
            mut builder,
            trace_id,
            span_id,
            parent_span_id,
            end_time,
            status,
        } = span.into_parts();
        if let Some(next) = &self.next_number {
            let number = next.get();
            next.set(number + 1);
            // First, so that span limits keep it whatever the handler added.
            builder
                .attributes
                .get_or_insert_with(Vec::new)
                .insert(0, KeyValue::new(keys::SEQUENCE, number as i64));
        }
        let mut built = match parent_span_id {
            Some(parent) => {
                // A clone (reference counts): the borrow ends before the
                // sampler and the processors run.
                let parent = self.parents.borrow_mut().get(trace_id, parent).clone();
                ids::with_kernel_ids(None, span_id, || {
                    self.tracer.build_with_context(builder, &parent)
                })
            }
            None => ids::with_kernel_ids(Some(trace_id), span_id, || {
                self.tracer.build_with_context(builder, &Context::new())
            }),
        };
        if status != Status::Unset {
            built.set_status(status);
        }
        built.end_with_timestamp(end_time);
        self.handed.set(self.handed.get() + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consume::{parse_record, DecodeError, RecordHeader};
    use crate::kernel::btf::{builder::sample, Btf};
    use crate::plan::plan_probe;
    use kspan_bpf::types::kspan_record;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
    use std::time::Duration;
    use std::time::UNIX_EPOCH;

    /// The handler renames spans of reads that returned 0 and discards those
    /// that read 1 byte; it panics on 2.
    #[kspan::kernel_span("vfs_read")]
    fn vfs_read(count: usize, #[capture(max = 8)] buf: &str, ret: isize, span: &mut KernelSpan) {
        match ret {
            0 => span.set_name("vfs_read eof"),
            1 => span.discard(),
            2 => {
                span.set_name("half-changed");
                panic!("a handler bug");
            }
            _ => span.set_attribute(KeyValue::new("seen.buf", buf.to_owned())),
        }
        assert_eq!(count, 4096);
    }

    fn record(span_id: u64, parent: u64, ret: i64, text: &[u8]) -> Vec<u8> {
        let mut header = kspan_record {
            trace_id: [7; 16],
            span_id,
            parent_span_id: parent,
            start_ns: 1_000,
            end_ns: 3_000,
            ret: ret as u64,
            probe_id: 0,
            pid: 42,
            tid: 43,
            flags: kspan_bpf::REC_HAS_RET,
            ..Default::default()
        };
        header.vals[0] = 4096; // count, from its register
        header.vals[1] = text.len() as u64 + 1; // bytes read with the NUL
                                                // SAFETY: kspan_record is plain old data; viewing it as bytes is sound.
        let mut bytes = unsafe {
            std::slice::from_raw_parts(
                (&header as *const kspan_record).cast::<u8>(),
                std::mem::size_of::<kspan_record>(),
            )
        }
        .to_vec();
        let mut slot = vec![0u8; 10]; // max 8 + 2
        slot[..text.len()].copy_from_slice(text);
        bytes.extend_from_slice(&slot);
        bytes
    }

    fn run(records: &[Vec<u8>]) -> (Vec<SpanData>, Vec<Outcome>) {
        run_with(records, false)
    }

    fn run_with(records: &[Vec<u8>], process_pid: bool) -> (Vec<SpanData>, Vec<Outcome>) {
        run_in(records, process_pid, |b| b)
    }

    /// Records through a provider configured by `configure` (plus what
    /// kspan needs); the spans its exporter got and each record's outcome.
    fn run_in(
        records: &[Vec<u8>],
        process_pid: bool,
        configure: impl FnOnce(
            opentelemetry_sdk::trace::TracerProviderBuilder,
        ) -> opentelemetry_sdk::trace::TracerProviderBuilder,
    ) -> (Vec<SpanData>, Vec<Outcome>) {
        let btf = Btf::parse(&sample()).unwrap();
        let plan = plan_probe(&btf, &vfs_read).unwrap();
        let exporter = InMemorySpanExporter::default();
        let provider = configure(
            SdkTracerProvider::builder()
                .with_simple_exporter(exporter.clone())
                .with_id_generator(crate::span::KernelSpanIds::default()),
        )
        .build();
        let factory = SpanFactory::new(
            provider.tracer("kspan-test"),
            ClockOffset::from_offset_ns(1_000_000_000),
        )
        .with_process_pid(process_pid);
        let outcomes = records
            .iter()
            .map(|r| factory.process(&plan, &parse_record(r).unwrap()))
            .collect();
        (exporter.get_finished_spans().unwrap(), outcomes)
    }

    fn attr(s: &SpanData, k: &str) -> Option<opentelemetry::Value> {
        s.attributes
            .iter()
            .find(|kv| kv.key.as_str() == k)
            .map(|kv| kv.value.clone())
    }

    #[test]
    fn parse_checks_length_and_keeps_the_data_area() {
        let bytes = record(1, 0, 5, b"abc");
        let view = parse_record(&bytes).unwrap();
        assert_eq!(view.header.span_id, 1);
        assert_eq!((view.header.start_ns, view.header.end_ns), (1_000, 3_000));
        assert_eq!(&view.data[..3], b"abc");
        assert_eq!(
            parse_record(&bytes[..20]).unwrap_err(),
            DecodeError {
                len: 20,
                expected: std::mem::size_of::<kspan_record>()
            }
        );
    }

    #[test]
    fn unaligned_records_are_copied_and_read_alike() {
        let bytes = record(9, 0, 5, b"abc");
        // The same record one byte into a buffer: its header cannot be
        // borrowed in place.
        let mut shifted = vec![0u8; bytes.len() + 1];
        shifted[1..].copy_from_slice(&bytes);
        let (aligned, unaligned) = (
            parse_record(&bytes).unwrap(),
            parse_record(&shifted[1..]).unwrap(),
        );
        assert!(matches!(aligned.header, RecordHeader::InPlace(_)));
        assert!(matches!(unaligned.header, RecordHeader::Copied(_)));
        assert_eq!(unaligned.header.span_id, 9);
        assert_eq!(unaligned.header.ret, aligned.header.ret);
        assert_eq!(unaligned.data, aligned.data);
    }

    #[test]
    fn a_span_that_lacks_descendants_says_how_many() {
        let mut lacking = record(0x11, 0, 4096, b"a");
        let at = std::mem::offset_of!(kspan_record, descendants_dropped);
        lacking[at..at + 4].copy_from_slice(&3u32.to_ne_bytes());
        let (spans, _) = run(&[lacking, record(0x22, 0, 4096, b"b")]);
        let by_id = |id: u64| {
            spans
                .iter()
                .find(|s| s.span_context.span_id() == SpanId::from(id))
                .unwrap()
        };
        assert_eq!(
            attr(by_id(0x11), keys::DESCENDANTS_DROPPED),
            Some(opentelemetry::Value::I64(3))
        );
        // None lacking: no attribute at all.
        assert_eq!(attr(by_id(0x22), keys::DESCENDANTS_DROPPED), None);
    }

    #[test]
    fn decodes_attributes_and_builds_a_tree() {
        let (spans, outcomes) = run(&[
            record(0x11, 0, 4096, b"data.bin"),
            record(0x22, 0x11, 0, b"x"),
        ]);
        assert_eq!(outcomes, [Outcome::Exported, Outcome::Exported]);
        let by_id = |id: u64| {
            spans
                .iter()
                .find(|s| s.span_context.span_id() == SpanId::from(id))
                .unwrap()
        };
        let (outer, inner) = (by_id(0x11), by_id(0x22));
        assert_eq!(outer.name, "vfs_read");
        assert_eq!(inner.name, "vfs_read eof", "renamed by the handler");
        assert_eq!(outer.span_context.trace_id(), TraceId::from_bytes([7; 16]));
        assert_eq!(outer.parent_span_id, SpanId::INVALID);
        assert_eq!(inner.parent_span_id, SpanId::from(0x11));
        assert_eq!(inner.span_context.trace_id(), outer.span_context.trace_id());
        assert_eq!(
            outer.start_time,
            UNIX_EPOCH + Duration::from_nanos(1_000_001_000)
        );
        assert_eq!(
            outer.end_time,
            UNIX_EPOCH + Duration::from_nanos(1_000_003_000)
        );
        assert_eq!(attr(outer, "kernel.arg.count"), Some(4096i64.into()));
        assert_eq!(attr(outer, "kernel.arg.buf"), Some("data.bin".into()));
        assert_eq!(attr(outer, "kernel.arg.buf.truncated"), None);
        assert_eq!(
            attr(outer, "seen.buf"),
            Some("data.bin".into()),
            "the handler added it"
        );
        assert_eq!(attr(outer, "kernel.return_value"), Some(4096i64.into()));
        assert_eq!(attr(outer, "kspan.tid"), Some(43i64.into()));
        assert_eq!(
            attr(outer, "code.function.name"),
            Some(outer.name.to_string().into())
        );
        assert_eq!(
            attr(outer, "thread.id"),
            None,
            "the runtime's id, not the OS's"
        );
        assert_eq!(attr(outer, "process.pid"), None, "the resource's business");
        assert_eq!(
            outer.attributes.len(),
            6,
            "count, buf, seen.buf, ret, function, thread: {:?}",
            outer.attributes
        );
        assert_eq!(outer.status, Status::Unset);
    }

    /// The spans of `records` through a provider configured by `configure`.
    fn run_configured(
        records: &[Vec<u8>],
        configure: impl FnOnce(
            opentelemetry_sdk::trace::TracerProviderBuilder,
        ) -> opentelemetry_sdk::trace::TracerProviderBuilder,
    ) -> Vec<SpanData> {
        run_in(records, false, configure).0
    }

    #[test]
    fn the_applications_sampler_decides_kernel_roots() {
        use opentelemetry_sdk::trace::Sampler;
        // A root (no parent: an orphan's own trace) asks the sampler.
        let spans = run_configured(&[record(0x11, 0, 5, b"x")], |b| {
            b.with_sampler(Sampler::AlwaysOff)
        });
        assert!(spans.is_empty(), "{spans:?}");
        let spans = run_configured(&[record(0x11, 0, 5, b"x")], |b| {
            b.with_sampler(Sampler::AlwaysOn)
        });
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].span_context.span_id(), SpanId::from(0x11));
        assert_eq!(
            spans[0].span_context.trace_id(),
            TraceId::from_bytes([7; 16]),
            "the kernel's trace id, not one the SDK made up"
        );
        // A child of a sampled parent follows it (the default sampler).
        let spans = run_configured(&[record(0x22, 0x11, 5, b"x")], |b| b);
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].parent_span_id, SpanId::from(0x11));
        assert!(!spans[0].parent_span_is_remote, "a parent in this process");
    }

    #[test]
    fn kept_parent_contexts_never_give_a_wrong_parent() {
        // Parents 0x40 apart share a slot; parent 7 comes back after both.
        let parents = [7u64, 7 + 64, 7, 7 + 128, 3, 7];
        let records: Vec<_> = parents
            .iter()
            .enumerate()
            .map(|(i, p)| record(0x100 + i as u64, *p, 5, b"x"))
            .collect();
        let spans = run_configured(&records, |b| b);
        assert_eq!(spans.len(), parents.len());
        for (i, p) in parents.iter().enumerate() {
            let span = spans
                .iter()
                .find(|s| s.span_context.span_id() == SpanId::from(0x100 + i as u64))
                .unwrap();
            assert_eq!(span.parent_span_id, SpanId::from(*p), "span {i}");
        }
        // Same parent id, another trace: not the kept context.
        let mut other_trace = record(0x200, 7, 5, b"x");
        other_trace[..16].copy_from_slice(&[9; 16]);
        let spans = run_configured(&[record(0x1ff, 7, 5, b"x"), other_trace], |b| b);
        let span = spans
            .iter()
            .find(|s| s.span_context.span_id() == SpanId::from(0x200))
            .unwrap();
        assert_eq!(span.span_context.trace_id(), TraceId::from_bytes([9; 16]));
        assert_eq!(span.parent_span_id, SpanId::from(7));
    }

    #[test]
    fn the_applications_span_limits_apply() {
        let spans = run_configured(&[record(1, 0, 5, b"abc")], |b| {
            b.with_max_attributes_per_span(2)
        });
        assert_eq!(spans[0].attributes.len(), 2);
        assert!(spans[0].dropped_attributes_count > 0);
    }

    #[test]
    fn spans_name_their_process_when_asked() {
        let (spans, _) = run_with(&[record(1, 0, 7, b"")], true);
        assert_eq!(attr(&spans[0], "process.pid"), Some(42i64.into()));
        assert_eq!(attr(&spans[0], "kspan.tid"), Some(43i64.into()));
    }

    #[test]
    fn long_strings_are_cut_and_marked_invalid_utf8_replaced() {
        // The kernel read 9 characters (one past the bound of 8).
        let (spans, _) = run(&[record(1, 0, 7, b"abcdefgh\xff")]);
        assert_eq!(attr(&spans[0], "kernel.arg.buf"), Some("abcdefgh".into()));
        assert_eq!(
            attr(&spans[0], "kernel.arg.buf.truncated"),
            Some(true.into())
        );
        let (spans, _) = run(&[record(1, 0, 7, b"ab\xffcd")]);
        assert_eq!(
            attr(&spans[0], "kernel.arg.buf"),
            Some("ab\u{fffd}cd".into())
        );
    }

    #[test]
    fn errno_returns_fail_the_span() {
        let (spans, _) = run(&[record(1, 0, -2, b"")]);
        assert_eq!(spans[0].status, Status::error("ENOENT"));
        assert_eq!(attr(&spans[0], "error.type"), Some("ENOENT".into()));
        assert_eq!(attr(&spans[0], "kernel.return_value"), Some((-2i64).into()));
    }

    #[test]
    fn handlers_discard_and_panics_keep_the_span() {
        let (spans, outcomes) = run(&[record(1, 0, 1, b""), record(2, 0, 2, b"")]);
        assert_eq!(outcomes, [Outcome::Discarded, Outcome::HandlerPanicked]);
        assert_eq!(spans.len(), 1);
        assert_eq!(
            spans[0].name, "half-changed",
            "exported as the handler left it"
        );
        assert_eq!(attr(&spans[0], "kspan.handler.panicked"), Some(true.into()));
    }

    #[test]
    fn faults_are_attributes_not_values() {
        let mut bytes = record(1, 0, 7, b"");
        let flags = std::mem::offset_of!(kspan_record, cap_flags);
        bytes[flags + 1] = kspan_bpf::consts::KSPAN_CAPF_FAULT as u8;
        let (spans, _) = run(&[bytes]);
        assert_eq!(attr(&spans[0], "kernel.arg.buf"), None);
        assert_eq!(attr(&spans[0], "kernel.arg.buf.fault"), Some(true.into()));
    }

    #[test]
    fn corrupt_and_truncated_records_never_panic() {
        // A real record with 1 to 8 bytes overwritten (lengths, flags, ids,
        // the data area) and cut at any length.
        let valid = record(0x11, 0x22, 5, b"data.bin");
        let mut rng = crate::test_rng::Rng(0x9e37_79b9_7f4a_7c15);
        let records: Vec<Vec<u8>> = (0..5_000)
            .map(|_| {
                let mut r = valid.clone();
                for _ in 0..rng.next() % 8 + 1 {
                    let at = rng.next() as usize % r.len();
                    r[at] = rng.next() as u8;
                }
                r.truncate(rng.next() as usize % (r.len() + 1));
                r
            })
            .collect();
        let whole: Vec<Vec<u8>> = records
            .iter()
            .filter(|r| parse_record(r).is_ok())
            .cloned()
            .collect();
        assert!(
            !whole.is_empty() && whole.len() < records.len(),
            "both short and whole records were made"
        );
        let (spans, outcomes) = run(&whole);
        assert_eq!(outcomes.len(), whole.len());
        assert!(!spans.is_empty());
    }
}
