// SPDX-License-Identifier: Apache-2.0 OR MIT
//! From a ring-buffer record to an OpenTelemetry span.
//!
//! Decoding is pure ([`parse_record`], [`KernelSpan::from_record`]); building
//! goes through the application's own tracer with the kernel's ids and times,
//! so the span passes the application's sampler, processors and exporter like
//! any span the application makes itself.

use std::panic::{catch_unwind, AssertUnwindSafe};

use kspan_bpf::types::kspan_record;
use opentelemetry::trace::{
    SpanBuilder, SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer,
};
use opentelemetry::{Context, KeyValue};

use crate::clock::ClockOffset;
use crate::plan::ProbePlan;
use crate::probe::Captured;
use crate::value::Value;

/// Attribute names kspan sets on every kernel span, in OpenTelemetry
/// semantic-convention style (dotted, lower snake case, registered names where
/// a registered one fits).
pub mod attributes {
    /// The traced kernel function (semantic conventions: `code.function.name`).
    pub const FUNCTION: &str = "code.function.name";
    /// How it was attached: `fentry` or `fexit`.
    pub const MODE: &str = "kernel.probe.mode";
    /// Prefix of captured arguments: `kernel.arg.count` for parameter `count`.
    pub const ARG_PREFIX: &str = "kernel.arg.";
    /// The return value.
    pub const RETURN_VALUE: &str = "kernel.return_value";
    /// Kernel spans enclosing this one on the same thread.
    pub const DEPTH: &str = "kernel.span.depth";
    /// The thread that made the call (semantic conventions: `thread.id`).
    pub const THREAD_ID: &str = "thread.id";
    /// The process that made the call (semantic conventions: `process.pid`).
    pub const PROCESS_PID: &str = "process.pid";
}

/// A record too short to be a span: a layout mismatch, never expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ring-buffer record of {len} bytes, expected {expected}")]
pub struct DecodeError {
    /// The record's length.
    pub len: usize,
    /// The layout's length.
    pub expected: usize,
}

/// Reads a record from ring-buffer bytes.
pub fn parse_record(bytes: &[u8]) -> Result<kspan_record, DecodeError> {
    let expected = std::mem::size_of::<kspan_record>();
    if bytes.len() < expected {
        return Err(DecodeError {
            len: bytes.len(),
            expected,
        });
    }
    // SAFETY: the slice holds at least size_of::<kspan_record>() bytes, the
    // type is plain old data (integers and byte arrays, every bit pattern
    // valid), and read_unaligned copes with the ring buffer's 8-byte alignment.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<kspan_record>()) })
}

/// One kernel span, decoded and ready to build.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelSpan {
    /// Span name: the kernel function.
    pub name: &'static str,
    /// Trace id from the kernel.
    pub trace_id: TraceId,
    /// Span id from the kernel.
    pub span_id: SpanId,
    /// Enclosing kernel span, if any.
    pub parent_span_id: Option<SpanId>,
    /// Start, kernel monotonic ns.
    pub start_ns: u64,
    /// End, kernel monotonic ns.
    pub end_ns: u64,
    /// Raw captured values, in handler parameter order.
    pub params: Vec<u64>,
    /// Raw return value, when the mode has one.
    pub ret: Option<u64>,
    /// Attributes.
    pub attributes: Vec<KeyValue>,
}

impl KernelSpan {
    /// Decodes `rec` with `plan` (pure).
    pub fn from_record(plan: &ProbePlan, rec: &kspan_record) -> KernelSpan {
        let spec = &plan.probe.spec;
        let params: Vec<u64> = plan
            .arg_positions
            .iter()
            .map(|&p| rec.args.get(p).copied().unwrap_or(0))
            .collect();
        let ret = (rec.flags & kspan_bpf::REC_HAS_RET != 0).then_some(rec.ret);
        let mut attributes = Vec::with_capacity(6 + params.len());
        attributes.push(KeyValue::new(attributes::FUNCTION, spec.function));
        attributes.push(KeyValue::new(attributes::MODE, spec.mode.as_str()));
        for (p, raw) in spec.params.iter().zip(&params) {
            attributes.push(KeyValue::new(
                format!("{}{}", attributes::ARG_PREFIX, p.name),
                Value::decode(*raw, p.ty).to_otel(),
            ));
        }
        if let (Some(ty), Some(raw)) = (spec.ret, ret) {
            attributes.push(KeyValue::new(
                attributes::RETURN_VALUE,
                Value::decode(raw, ty).to_otel(),
            ));
        }
        attributes.push(KeyValue::new(attributes::THREAD_ID, i64::from(rec.tid)));
        attributes.push(KeyValue::new(attributes::PROCESS_PID, i64::from(rec.pid)));
        attributes.push(KeyValue::new(attributes::DEPTH, i64::from(rec.depth)));
        KernelSpan {
            name: spec.function,
            trace_id: TraceId::from_bytes(rec.trace_id),
            span_id: SpanId::from(rec.span_id),
            parent_span_id: (rec.parent_span_id != 0).then(|| SpanId::from(rec.parent_span_id)),
            start_ns: rec.start_ns,
            end_ns: rec.end_ns.max(rec.start_ns),
            params,
            ret,
            attributes,
        }
    }

    /// Runs the probe's handler on the captured values. A panicking handler is
    /// caught: `false` is returned and the span is still exported.
    pub fn run_handler(&self, plan: &ProbePlan) -> bool {
        let captured = Captured::new(&self.params, self.ret);
        let handler = plan.probe.handler;
        catch_unwind(AssertUnwindSafe(|| handler(&captured))).is_ok()
    }

    /// Builds and ends the span through `tracer`, with the kernel's ids and
    /// times.
    pub fn export<T: Tracer>(self, tracer: &T, clock: &ClockOffset) {
        let parent = match self.parent_span_id {
            Some(parent) => Context::new().with_remote_span_context(SpanContext::new(
                self.trace_id,
                parent,
                TraceFlags::SAMPLED,
                false,
                TraceState::NONE,
            )),
            None => Context::new(),
        };
        let mut builder = SpanBuilder::from_name(self.name)
            .with_kind(SpanKind::Internal)
            .with_start_time(clock.to_system_time(self.start_ns))
            .with_attributes(self.attributes);
        builder.trace_id = Some(self.trace_id);
        builder.span_id = Some(self.span_id);
        let mut span = tracer.build_with_context(builder, &parent);
        opentelemetry::trace::Span::end_with_timestamp(
            &mut span,
            clock.to_system_time(self.end_ns),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btf::{builder::sample, Btf};
    use crate::plan::plan_probe;
    use crate::probe::{Mode, ParamSpec, Probe, ProbeSpec};
    use crate::value::KernelValue;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, UNIX_EPOCH};

    static CALLS: AtomicUsize = AtomicUsize::new(0);
    static LAST_COUNT: AtomicUsize = AtomicUsize::new(0);

    fn handler(c: &Captured<'_>) {
        CALLS.fetch_add(1, Ordering::SeqCst);
        LAST_COUNT.store(c.param::<usize>(0), Ordering::SeqCst);
        assert!(c.ret::<isize>() >= 0, "negative ret");
    }

    static VFS_READ: Probe = Probe {
        spec: ProbeSpec {
            function: "vfs_read",
            mode: Mode::Fexit,
            params: &[ParamSpec {
                name: "count",
                ty: <usize as KernelValue>::TYPE,
            }],
            ret: Some(<isize as KernelValue>::TYPE),
            location: "test",
        },
        handler,
    };

    fn record(span_id: u64, parent: u64, ret: i64) -> kspan_record {
        kspan_record {
            trace_id: [7; 16],
            span_id,
            parent_span_id: parent,
            start_ns: 1_000,
            end_ns: 3_000,
            args: [0xffff_8880_0000_0000, 0x7fff_0000, 4096, 0, 0xdead, 0xbeef],
            ret: ret as u64,
            probe_id: 0,
            pid: 42,
            tid: 43,
            depth: u16::from(parent != 0),
            flags: kspan_bpf::REC_HAS_RET,
        }
    }

    #[test]
    fn parse_checks_length() {
        let rec = record(1, 0, 5);
        // SAFETY: kspan_record is plain old data; viewing it as bytes is sound.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&rec as *const kspan_record).cast::<u8>(),
                std::mem::size_of::<kspan_record>(),
            )
        };
        let back = parse_record(bytes).unwrap();
        assert_eq!(back.span_id, 1);
        assert_eq!(back.args[2], 4096);
        assert_eq!(
            parse_record(&bytes[..20]).unwrap_err(),
            DecodeError {
                len: 20,
                expected: bytes.len()
            }
        );
    }

    #[test]
    fn decodes_attributes_and_builds_a_tree() {
        let btf = Btf::parse(&sample()).unwrap();
        let plan = plan_probe(&btf, &VFS_READ).unwrap();
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let tracer = provider.tracer("kspan-test");
        let clock = ClockOffset::from_offset_ns(1_000_000_000);

        let outer = KernelSpan::from_record(&plan, &record(0x11, 0, 4096));
        assert_eq!(outer.params, [4096]);
        assert_eq!(outer.ret, Some(4096));
        assert!(outer.run_handler(&plan));
        assert_eq!(LAST_COUNT.load(Ordering::SeqCst), 4096);
        outer.export(&tracer, &clock);
        let inner = KernelSpan::from_record(&plan, &record(0x22, 0x11, -5));
        assert!(
            !inner.run_handler(&plan),
            "the handler panics on a negative ret"
        );
        inner.export(&tracer, &clock);

        let spans = exporter.get_finished_spans().unwrap();
        assert_eq!(spans.len(), 2);
        let by_id = |id: u64| {
            spans
                .iter()
                .find(|s| s.span_context.span_id() == SpanId::from(id))
                .unwrap()
        };
        let (outer, inner) = (by_id(0x11), by_id(0x22));
        assert_eq!(outer.name, "vfs_read");
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
        let attr = |s: &opentelemetry_sdk::trace::SpanData, k: &str| {
            s.attributes
                .iter()
                .find(|kv| kv.key.as_str() == k)
                .map(|kv| kv.value.clone())
        };
        assert_eq!(attr(outer, "kernel.arg.count"), Some(4096i64.into()));
        assert_eq!(attr(outer, "kernel.return_value"), Some(4096i64.into()));
        assert_eq!(attr(inner, "kernel.return_value"), Some((-5i64).into()));
        assert_eq!(attr(outer, "thread.id"), Some(43i64.into()));
        assert_eq!(attr(outer, "process.pid"), Some(42i64.into()));
        assert_eq!(attr(outer, "code.function.name"), Some("vfs_read".into()));
        assert_eq!(attr(inner, "kernel.span.depth"), Some(1i64.into()));
    }
}
