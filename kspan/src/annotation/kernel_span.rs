// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The span a handler receives, and the attribute names kspan sets on it.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{SpanBuilder, SpanId, Status, TraceId};
use opentelemetry::KeyValue;

/// Attribute names kspan sets on kernel spans, in OpenTelemetry
/// semantic-convention style (dotted, lower snake case, registered names where
/// a registered one fits). The span's name is the kernel function; the nesting
/// of kernel spans is their parent links; the attach mode is fixed in the
/// probe's source: none of those is repeated on every span.
pub mod attributes {
    /// Prefix of captured values: `kernel.arg.count` for parameter `count`.
    /// A string cut at its bound also sets `kernel.arg.<name>.truncated`; a
    /// value the kernel could not read sets `kernel.arg.<name>.fault` instead
    /// of the value. Enum values are their enumerator's name; buffers are hex.
    pub const ARG_PREFIX: &str = "kernel.arg.";
    /// The return value.
    pub const RETURN_VALUE: &str = "kernel.return_value";
    /// The errno name of a failed call (`ENOENT`) (semantic conventions:
    /// `error.type`).
    pub const ERROR_TYPE: &str = "error.type";
    /// Set to `true` on the span of a handler that panicked.
    pub const HANDLER_PANICKED: &str = "kspan.handler.panicked";
    /// The Linux thread id (`gettid`) of the thread that made the call.
    /// Not the semantic conventions' `thread.id`, which is the runtime's
    /// "managed" thread id, "as opposed to OS thread ID" (and which
    /// tracing-opentelemetry sets to its own number on the application's
    /// spans): the two would never match.
    pub const TID: &str = "kspan.tid";
    /// The kernel function the span is a call of, or the system call of a
    /// syscall source (semantic conventions: `code.function.name`).
    pub const FUNCTION_NAME: &str = "code.function.name";
    /// The process that made the call (semantic conventions: `process.pid`).
    /// Set only when other processes are traced too
    /// ([`KspanBuilder::trace_all_processes`](crate::KspanBuilder::trace_all_processes)):
    /// the application's own spans are told apart by its resource.
    pub const PROCESS_PID: &str = "process.pid";
    /// kspan's number of the span, in the order spans are handed to the
    /// pipeline; set only with an export ledger
    /// ([`KspanBuilder::export_ledger`](crate::KspanBuilder::export_ledger)),
    /// whose [`AccountedExporter`](crate::AccountedExporter) removes it
    /// before the span is exported.
    pub const SEQUENCE: &str = "kspan.sequence";
    /// Calls made inside this one (at any depth, on its thread) that have
    /// no span: the ring buffer ran short while this call was open, or the
    /// thread's stack of open calls was full. Set only when not 0: a kernel
    /// span without it lacks no descendant of kspan's probes. The calls
    /// are counted in [`Stats::lost`](crate::Stats::lost) under their
    /// reason and in [`Stats::descendants_dropped`](crate::Stats::descendants_dropped).
    pub const DESCENDANTS_DROPPED: &str = "kspan.descendants_dropped";
}

/// One kernel span, decoded: what the handler sees and may change before it
/// is exported.
///
/// It holds the OpenTelemetry span builder itself, so that what the handler
/// changes is what is exported, with no copy in between; the ids, the end
/// time and the status are applied when the span is built (the SDK takes
/// them from its id generator and the started span, not from the builder).
#[derive(Debug, Clone)]
pub struct KernelSpan {
    parts: KernelSpanParts,
    discarded: bool,
}

/// What a [`KernelSpan`] is made of, and what the span factory exports once
/// the handler is done with it.
#[derive(Debug, Clone)]
pub(crate) struct KernelSpanParts {
    /// Name, attributes (always `Some`) and start time.
    pub builder: SpanBuilder,
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub parent_span_id: Option<SpanId>,
    pub end_time: SystemTime,
    pub status: Status,
}

impl KernelSpan {
    /// The span of `parts`, for its handler.
    pub(crate) fn new(parts: KernelSpanParts) -> Self {
        KernelSpan {
            parts,
            discarded: false,
        }
    }

    /// The parts the tracer needs.
    pub(crate) fn into_parts(self) -> KernelSpanParts {
        self.parts
    }

    /// The span's name (the kernel function unless renamed).
    pub fn name(&self) -> &str {
        &self.parts.builder.name
    }

    /// Renames the span.
    pub fn set_name(&mut self, name: impl Into<Cow<'static, str>>) {
        self.parts.builder.name = name.into();
    }

    fn attributes_mut(&mut self) -> &mut Vec<KeyValue> {
        self.parts.builder.attributes.get_or_insert_with(Vec::new)
    }

    /// Sets an attribute, replacing one with the same key.
    pub fn set_attribute(&mut self, attribute: KeyValue) {
        let attributes = self.attributes_mut();
        match attributes.iter_mut().find(|kv| kv.key == attribute.key) {
            Some(existing) => *existing = attribute,
            None => attributes.push(attribute),
        }
    }

    /// Removes the attribute `key`, if present.
    pub fn remove_attribute(&mut self, key: &str) {
        self.attributes_mut().retain(|kv| kv.key.as_str() != key);
    }

    /// The attributes so far.
    pub fn attributes(&self) -> &[KeyValue] {
        self.parts.builder.attributes.as_deref().unwrap_or(&[])
    }

    /// The value of attribute `key`.
    pub fn attribute(&self, key: &str) -> Option<&opentelemetry::Value> {
        self.attributes()
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| &kv.value)
    }

    /// Sets the status (errno returns have set it to an error already).
    pub fn set_status(&mut self, status: Status) {
        self.parts.status = status;
    }

    /// The status.
    pub fn status(&self) -> &Status {
        &self.parts.status
    }

    /// Drops the span: it is not exported (and counted as discarded).
    pub fn discard(&mut self) {
        self.discarded = true;
    }

    /// Whether [`KernelSpan::discard`] was called.
    pub fn is_discarded(&self) -> bool {
        self.discarded
    }

    /// The trace id.
    pub fn trace_id(&self) -> TraceId {
        self.parts.trace_id
    }

    /// The span id.
    pub fn span_id(&self) -> SpanId {
        self.parts.span_id
    }

    /// The enclosing kernel span, if any.
    pub fn parent_span_id(&self) -> Option<SpanId> {
        self.parts.parent_span_id
    }

    /// Hangs the span under another parent (its own was refused by a
    /// filter); `None` makes it a root of its trace.
    pub(crate) fn set_parent_span_id(&mut self, parent: Option<SpanId>) {
        self.parts.parent_span_id = parent;
    }

    /// Duration from entry to exit (zero in fentry mode).
    pub fn duration(&self) -> Duration {
        self.parts
            .builder
            .start_time
            .and_then(|start| self.parts.end_time.duration_since(start).ok())
            .unwrap_or_default()
    }
}
