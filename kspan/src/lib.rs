// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Kernel calls as OpenTelemetry spans.
//!
//! A service marks the kernel calls it cares about, builds its tracer
//! provider with kspan's pipeline, and starts kspan:
//!
//! ```
//! use kspan::TracerProviderBuilderExt as _;
//! use opentelemetry::trace::{Tracer as _, TracerProvider as _};
//!
//! /// Every read(2) of the process: the size asked for and the bytes read.
//! /// (A kernel function, where the kernel lets BPF trace them:
//! /// `#[kspan::kernel_span("vfs_read")] fn vfs_read(count: usize, ret: isize) {}`.)
//! #[kspan::kernel_span(syscall = "read")]
//! fn read(count: usize, ret: i64) {}
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! # // Exported to memory here; a service gives its OTLP exporter.
//! # let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
//! let pipeline = kspan::Pipeline::new();
//! let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
//!     .with_kspan(&pipeline, exporter) // the service's exporter (OTLP, say)
//!     .build();
//! let kspan = kspan::Kspan::builder(&provider)
//!     .pipeline(&pipeline)
//!     .probe(&read)
//!     .start()?;
//!
//! // Kernel spans are children of the application span current on their
//! // thread (calls outside any are counted, not exported).
//! let tracer = provider.tracer("my-service");
//! let text = tracer.in_span("load_config", |_cx| std::fs::read_to_string("/etc/os-release"))?;
//!
//! // Detach, drain, flush, shut the provider down: within one budget.
//! let stats = kspan.shutdown_with_provider().await?;
//! assert!(stats.spans_to_pipeline >= 2, "{stats}"); // the data's read, and the one at its end
//! assert_eq!(stats.spans_acknowledged, stats.spans_to_pipeline, "{stats}");
//! assert_eq!(stats.lost(), 0, "{stats}");
//! # let _ = text;
//! # Ok(()) }
//! ```
//!
//! Every `read` the process makes inside `load_config` becomes a span named
//! `read`, a child of it, with the arguments and the return value as
//! attributes, built through the application's own tracer provider and
//! exported with its spans; `stats` says what the exporter made of them.
//! README's "Add kspan to a service" has the whole service (OTLP, the
//! scheduler's account, `build.rs`).
//!
//! # Why it is shaped this way
//!
//! * **The kernel pairs entry and exit.** At a call's entry a generic
//!   program pushes a frame (start time, span id, captured arguments) on a
//!   per-task stack in task local storage; at its exit it pops it and emits
//!   a single ring-buffer record per finished span. Nesting and recursion
//!   fall out of the stack; a missed exit is detected and counted instead of
//!   corrupting it. The two ends are one session program where the kernel
//!   has them (fsession, kprobe.session), else an fentry/fexit or
//!   kprobe/kretprobe pair: the stack pairs them the same way.
//! * **The fewest links.** The kernel serialises trampoline updates, each
//!   waiting for RCU, so attaching costs what the number of links does:
//!   every function of the same settings attaches through one
//!   fsession.multi (Linux 7.2+) or kprobe.multi link where the kernel has
//!   it, and each [`AttachDecision`] says which attachment it got and why
//!   the better ones were passed over.
//! * **One compiled program, many functions.** The BPF object is compiled
//!   once (`kspan-bpf`); each function's settings are constants in a frozen
//!   read-only map, so the verifier specialises the program to them. libbpf
//!   loads the first function of each program; the others are loaded from its
//!   final instructions with a map of their own settings (no ELF, no second
//!   parse of the kernel's BTF), verified in parallel ahead of their attaches.
//!   kprobe programs go further: one per distinct settings serves every
//!   function, the probe id in each link's cookie, with one kprobe.multi link
//!   per direction where the kernel has fprobe. The maps of the first object
//!   are shared by all. No code is generated per function. libbpf's
//!   process-wide print callback is left to the application: verifier logs
//!   come from a buffer per program and load.
//! * **Kernel spans join the application's traces.** The application's
//!   current span per thread is published in the OpenTelemetry
//!   thread-context record (OTEP 4947) by kspan's OpenTelemetry context
//!   observer ([`context::register_observer`]), the SDK's own hook for
//!   publishing the current context to an outside reader: it sees every
//!   context switch, from the OpenTelemetry API and from
//!   tracing-opentelemetry alike, and prepares each context's record once,
//!   when the context is made. The BPF programs read the record at a task's
//!   outermost traced call, with no system call, so the kernel span becomes
//!   a child of the application span, in its trace, and calls under an
//!   unsampled span are dropped in the kernel before they cost a record.
//!   `tracing` layers ([`EnteredSpanLayer`], feature `tracing`) cover only
//!   what the observer cannot see.
//! * **Plan before touching the kernel.** Every probe is resolved against the
//!   running kernel's BTF (function exists, parameter names to positions, Rust
//!   types against kernel types) by pure code (`plan`); a typo fails with
//!   an error naming the function, the parameter and the fix, before anything
//!   is loaded.
//! * **The application's pipeline is reused, through its id generator.**
//!   Kernel spans are started through the application's
//!   [`SdkTracerProvider`], so its resource, sampler, span limits,
//!   processors and exporter apply to them. The kernel gives each span its
//!   id, and a child's record arrives before its parent's, so the parent
//!   must be exported under the id the child already names; the SDK takes
//!   span ids only from the provider's `IdGenerator` (it dropped the
//!   builder's id fields in 0.32). So the application installs
//!   [`KernelSpanIds`], which wraps its own generator and hands out the
//!   kernel's ids only while kspan starts a kernel span on that thread.
//!   The other route, handing finished span data to the application's
//!   processors, would need the processors, resource and limits to be given
//!   to kspan a second time (the provider does not expose them) and would
//!   skip the sampler; one line on the provider keeps a single pipeline.
//!   [`KspanBuilder::start`] fails, naming that line, when the provider
//!   lacks it. End times and statuses are set on the started span.
//! * **Nothing is lost silently.** Every drop (ring buffer full, stack too
//!   deep, lost exit) has a per-CPU counter, reported by [`Kspan::stats`] and
//!   at [`Kspan::shutdown`].
//! * **Kprobes where the kernel preempts inside programs.** The kernel runs
//!   a BPF program at most once at a time on a CPU. Trampoline programs run
//!   with preemption on, so on a kernel that preempts kernel code (`full`,
//!   `lazy`, `rt`: sid's 7.2 runs `lazy`) a task preempted inside one makes
//!   other tasks' calls of it on that CPU skipped, and a call whose entry
//!   and exit were both skipped leaves nothing behind: the kernel's count of
//!   skips names no process or call, so it cannot be counted, and no
//!   bookkeeping in the programs can keep that promise. A program per
//!   function does not either (the calls that collide are of one function).
//!   Kprobe programs run with preemption off and lose none to that (a task
//!   preempted inside a BPF map system call makes the kernel skip them on
//!   its CPU; kspan makes no such call while recording there, reading
//!   thread contexts from user memory rather than registering them), so
//!   there `auto` takes kprobes (kprobe.session where the kernel has it), and trampolines
//!   where programs run to the end (Debian 12's and 13's `voluntary`); on
//!   7.2 that costs about 710 instructions a call more than fsession.multi
//!   (the guide's "Preemptible kernels", BENCHMARKS.md). [`kernel::preemption`] reads the model, and
//!   fexit's entry in [`AttachDecision::rejected`] says why it was passed
//!   over.
//!
//! # Where things are
//!
//! Two sources of records over one core. The probes (per-call kernel
//! spans: `plan`, `attach`) and the scheduler's account ([`sched`]: per-span
//! totals, wait spans, causes) each plug into the core the other uses too:
//! the maps made once up front (`bpf`), the ring buffer and its consumer
//! (`consume`), span building (`span`), the pipeline (`sums`, `export`)
//! and the figures. One module per stage, in the order data flows; each
//! imports only from the stages before it (a stage that must tell a later
//! one something calls a hook it was handed), and each has an error type
//! of its own, composed in [`Error`]. The stages not linked are internal;
//! what a service uses of them is re-exported here. `docs/guide/internals.md`
//! draws the map.
//!
//! | stage | what it holds |
//! | --- | --- |
//! | `annotation` | what `#[kernel_span]` generates ([`Probe`], [`Mode`]) and the span a handler may change ([`KernelSpan`]); the macro's contract with the runtime is in the hidden `__private`, never named by users |
//! | [`kernel`] | facts about the running kernel, no BPF: its BTF, tracefs, syscall formats, privileges, preemption model, errno names |
//! | `plan` | pure: each probe checked against BTF into captures and settings; field paths, the deny list ([`PlanError`], [`FieldPathError`]) |
//! | `bpf` | the core's kernel side: the shared maps made up front, kspan's BPF object through its skeleton, program copies, the links, the raw attach system calls, what the kernel offers ([`KernelCapabilities`], [`LoadError`]) |
//! | `attach` | the probes' source: the order, `auto`'s fallback from one [`Hook`] to the next, one module per hook ([`AttachDecision`], [`AttachError`]) |
//! | `consume` | the ring buffer and the records in it |
//! | `span` | records to spans through the application's tracer ([`KernelSpanIds`]) |
//! | `export` | after kspan: what the application's exporter made of kernel spans ([`AccountedExporter`], [`ExportLedger`]) |
//! | `sums` | the kernel's totals onto application spans as they end: of calls not made into spans, and whatever figures a source hands it (the account's) ([`KernelSums`], [`KernelSumsProcessor`]) |
//! | [`sched`] | the scheduler account's room: its settings ([`SchedulerAccount`]), what the kernel gives its causes, its attach ([`sched::AccountError`]), its totals, attribute keys, wait spans and time base; it plugs into `bpf`, `span`, `sums` and the thread context by hooks, and only `runtime` (and [`Error`]) import it |
//! | [`telemetry`] | kspan's figures ([`Stats`]) as OpenTelemetry metrics |
//! | [`latency`] | the kernel's latency histograms as OpenTelemetry histograms |
//! | [`context`] | beside the stages: the application's span per thread, published for the BPF programs |
//!
//! `runtime` ([`KspanBuilder`], [`Kspan`], [`Stats`]) runs them in that order.
//! The field-path syntax and the modes are `kspan_dsl`'s, shared with the
//! macro so that both reject the same mistakes in the same words.
//!
//! # Span attributes
//!
//! | attribute | value |
//! | --- | --- |
//! | `kernel.arg.<name>` | each captured parameter |
//! | `kernel.return_value` | the return value (fexit) |
//! | `kernel.<function>.calls`, `.duration_ns`, `.errors` | on application spans: the calls of a probe with `sum` not made into spans |
//! | `code.function.name` | the kernel function (the system call, for a syscall source) |
//! | `kspan.tid` | the calling thread's kernel thread id (not `thread.id`: the conventions' is the runtime's "managed" id) |
//! | `process.pid` | the calling process (kernel tgid), with `trace_all_processes` only |
//! | `kspan.descendants_dropped` | calls inside this one that have no span (the ring buffer ran short while it was open); absent when none |
//!
//! Integers are OTLP integers (an unsigned value above `i64::MAX` becomes its
//! decimal string), `bool`s are booleans, pointers are `0x…` hex strings.
//!
//! # Feature flags
//!
//! | feature | default | what it adds |
//! | --- | --- | --- |
//! | `tracing` | off | [`EnteredSpanLayer`] (and the deprecated `ThreadContextLayer`) in [`context`]: `tracing` layers that publish the OpenTelemetry span of the entered `tracing` span for the BPF programs, where kspan's context observer cannot see it (tracing-opentelemetry's context activation turned off, or another context observer registered in the process). Adds the `tracing-subscriber` and `tracing-opentelemetry` dependencies. |
//!
//! A service on `tracing` with tracing-opentelemetry's default context
//! activation needs no feature: [`context::register_observer`] sees its
//! spans.
//!
//! # What the kernel must offer
//!
//! Linux 5.10 or later with BTF (`/sys/kernel/btf/vmlinux`) and CAP_BPF +
//! CAP_PERFMON (or CAP_SYS_ADMIN). Kernel functions need BPF trampolines
//! (built with `CONFIG_FUNCTION_TRACER`) or kprobes, and mode `auto` (the
//! default) takes whichever this kernel allows; syscall sources need
//! neither, only tracefs. What an older verifier lacks
//! (task local storage, `bpf_loop`, atomics that fetch, ...) is probed at
//! start by loading programs that use it, and done the older way
//! ([`KernelCapabilities::older_kernel`], `kspan doctor`). Syscall sources and patterns also read tracefs
//! (CAP_DAC_READ_SEARCH, as it is root's only by default), and syscall
//! sources and kprobes without kprobe.multi open perf events (which Debian's
//! kernels keep from CAP_PERFMON at `kernel.perf_event_paranoid = 3`); the
//! guide's "Least privilege" has the `setcap` line per mechanism. Where one is
//! missing, [`KspanBuilder::start`] fails with an [`Error`] that says which
//! ([`KernelError::MissingPrivileges`] names each capability and the mechanism
//! that needs it), with the kernel's errno where it refused.
//!
//! [`SdkTracerProvider`]: opentelemetry_sdk::trace::SdkTracerProvider
// Without the `tracing` feature the layer is absent: its links lead to the
// feature flags section above.
#![cfg_attr(
    feature = "tracing",
    doc = "[`EnteredSpanLayer`]: context::EnteredSpanLayer"
)]
#![cfg_attr(not(feature = "tracing"), doc = "[`EnteredSpanLayer`]: #feature-flags")]

// The crate's README (its crates.io page) compiles as a doctest: its program
// is the one a newcomer copies first.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadme;

// The macro's expansion names `::kspan`; this lets the crate's own tests use it.
#[cfg(test)]
extern crate self as kspan;

// The stages (see "Where things are" above for their order); a module
// imports only from the stages before it, and `context` from none.
//
// `consume`, `plan` and `span` (and `kernel`'s BTF parser, tracefs and errno
// modules) are public for kspan's CLI (kspan-cli), its tests and benches
// only: `#[doc(hidden)]`, so `cargo doc` shows the service API alone, and
// without any stability promise. What a service needs of them is re-exported
// below.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
#[path = "fuzz.rs"]
pub mod __fuzz;
mod annotation;
mod attach;
mod bpf;
#[doc(hidden)]
pub mod consume;
pub mod context;
mod diagnostics;
mod error;
mod export;
pub mod kernel;
pub mod latency;
mod pipeline;
#[doc(hidden)]
pub mod plan;
mod runtime;
pub mod sched;
#[doc(hidden)]
pub mod span;
mod stats;
mod sums;
pub mod telemetry;
#[cfg(test)]
mod test_rng;

pub use annotation::{
    attributes, Attachment, Capture, Hook, KernelSpan, Mechanism, Mode, Probe, UnknownMode, Value,
};
pub use attach::{AttachDecision, AttachError};
pub use bpf::{
    Feature, KernelCapabilities, LoadError, MapError, Orphans, ProgramFeatures,
    DEFAULT_RING_BUFFER_BYTES,
};
pub use context::obi::ObiTracesMap;
pub use error::{Error, Result};
pub use export::{AccountedExporter, ExportLedger};
pub use kernel::{KernelError, KERNEL_BTF};
pub use opentelemetry::trace::Status;
pub use opentelemetry::KeyValue;
pub use pipeline::{Pipeline, TracerProviderBuilderExt};
pub use plan::fieldpath::{FieldPathError, PathSyntaxError, SegmentProblem};
pub use plan::PlanError;
pub use runtime::{default_span_workers, Kspan, KspanBuilder, SetupGap, ThreadContextReads};
pub use sched::{CauseMechanism, SchedMechanism, SchedulerAccount};
pub use span::KernelSpanIds;
// For kspan's benches and tests (see above).
#[doc(hidden)]
pub use span::{Outcome, SpanFactory};
pub use stats::{ProbeStats, Stats};
pub use sums::{KernelSums, KernelSumsProcessor};

/// What the `kernel_span` macro's expansion uses; not a public API: the
/// contract between the macro and the runtime (what a probe asks for, and
/// how captured values reach a handler's typed parameters), which users
/// never name and which changes with the macro.
#[doc(hidden)]
pub mod __private {
    pub use crate::annotation::{
        Captured, FilterSpec, FromCapture, KernelValue, LenSource, ParamSpec, ProbeSpec, ValueKind,
        ValueType, PROBES,
    };
    pub use linkme;
}

/// Turns a function into a kernel probe: the DSL reference.
///
/// ```no_run
/// #[kspan::kernel_span("vfs_read")]
/// fn vfs_read(count: usize, ret: isize) {
///     // runs for every traced call, with the captured values
/// }
/// ```
///
/// The function becomes a `static` [`Probe`] of the same name, for
/// [`KspanBuilder::probe`]; [`KspanBuilder::all_probes`] takes every probe of
/// the program without naming them.
///
/// # The attribute
///
/// `#[kernel_span("function" | "alternative", mode = "...", errno = bool, histogram, optional, <filters>)]`
///
/// * `"function"`: the kernel function, a string literal, first.
/// * `mode = "auto"` (the default): a span from entry to exit through the
///   mechanism this kernel suits best. Where the kernel preempts kernel
///   code (preemption `full`, `lazy`, `rt`), kprobes first (kprobe.session
///   where the kernel has it), since trampoline programs there lose calls
///   uncounted (see [`kernel::preemption`]); elsewhere trampolines first
///   (fsession where the kernel has it, else fexit); the other family is
///   the fallback. The choice and the reasons are in [`Kspan::attach_plan`]
///   and `kspan doctor`. `mode = "fexit"` / `"kretprobe"`: that mechanism
///   only. `mode = "fentry"` / `"kprobe"`: an instant at entry, with the
///   captures only.
/// * `syscall = "openat"` instead of the function name: a syscall source, from
///   the syscall's enter and exit tracepoints, typed from its tracefs format;
///   works where neither trampolines nor kprobes do. Pointers are user memory.
/// * `"do_unlinkat" | "filename_unlinkat"`: alternatives, for kernels that
///   renamed a function. The first of them the running kernel has and can
///   trace is traced, and the handler is checked against that one (one that
///   does not fit it fails the start, naming it); [`AttachDecision`] says
///   which functions were passed over and why. Not with patterns, nor with
///   `syscall` (system calls keep their names).
///
///   ```no_run
///   #[kspan::kernel_span("do_unlinkat" | "filename_unlinkat", mode = "fexit", optional)]
///   fn unlink(dfd: i32, #[capture(path = "name->name")] name: &str, ret: i32) {}
///   ```
/// * `optional` (or `optional = true`): where the kernel can trace none of
///   the probe's functions, [`KspanBuilder::start`] goes on without it,
///   saying why in [`Kspan::attach_plan`] ([`AttachDecision::not_attached`]),
///   in [`Stats::probes_not_attached`] and once at `warn`; otherwise that
///   fails the start.
/// * A function name with `*` or `?` (`"vfs_*"`) traces every matching function
///   the kernel can trace; the captures must exist in every match. Functions on
///   kspan's deny list (`kspan list --all` says why each is left out) and
///   inlined or notrace matches are skipped and reported ([`Kspan::skipped`]).
/// * `errno = false`: by default a function returning a signed `int` or
///   `long` that returns `-1..=-4095` gets status error and an `error.type`
///   attribute with the errno's name (`ENOENT`); this turns that off.
/// * `histogram` (or `histogram = true`): the kernel also counts every call
///   in a latency histogram (power-of-two buckets of nanoseconds, per CPU,
///   with the sum), published through the meter provider of
///   [`KspanBuilder::meter_provider`] as the OpenTelemetry histogram
///   `kernel.<function>.duration` (unit `ns`), with `error.type` (the
///   errno's name) on failed calls when `errno` applies. Every call counts,
///   whether or not it becomes a span. It needs a duration: with
///   `mode = "fentry"` or `"kprobe"` (instants) it is a compile error. See
///   [`latency`] for the shape and the cost.
///
///   ```no_run
///   #[kspan::kernel_span("vfs_read", mode = "fexit", histogram)]
///   fn vfs_read(ret: isize) {}
///   ```
///
/// # Hot functions: filters, rate limits and sums in the kernel
///
/// A span costs the service about a microsecond of consumer and SDK work.
/// For a function called hundreds of thousands of times a second, keep the
/// calls that matter and count the rest, in the kernel, at the call's exit,
/// before any ring-buffer space is taken (spans only: not for `fentry` or
/// `kprobe`):
///
/// * `min_duration = "1ms"` (`ns`, `us`, `ms`, `s`; decimals allowed): only
///   calls at least that long.
/// * `errors_only`: only calls that return an errno (`-1..=-4095` of a
///   signed `int` or `long`).
/// * `filter = "count >= 65536 || ret < 0"`: an or (`||`) of ands (`&&`) of
///   up to four comparisons (`==`, `!=`, `<`, `<=`, `>`, `>=`) of the
///   handler's scalar parameters read at exit, or `ret`, with integer
///   constants; compared with the width and signedness of the kernel's type.
///   No parentheses: a predicate the kernel cannot evaluate as written is a
///   compile error at the token.
/// * `rate_limit = 1000`: at most that many spans a second (bursts of up to
///   a second's worth), after the filters.
/// * `sum`: the calls that do not become spans add to their application
///   span's attributes `kernel.<function>.calls`, `.duration_ns` and
///   `.errors` (needs [`KernelSums`] between the tracer provider and
///   [`KspanBuilder::kernel_sums`]).
/// * `spans = false` (with `sum` or `histogram`): no call becomes a span;
///   every call is summed, or counted in the histogram.
///
/// Refused calls are counted per probe ([`Kspan::probe_stats`], the
/// `kspan.probe.calls.skipped` metric) and in [`Stats`], never as loss.
/// Nesting stays whole: a kept span under a refused call hangs under that
/// call's parent; kspan holds it until the parent's fate is known.
///
/// ```no_run
/// #[kspan::kernel_span("vfs_read", filter = "count >= 65536", sum)]
/// fn vfs_read(count: usize, ret: isize) {}
///
/// #[kspan::kernel_span("tcp_sendmsg", min_duration = "500us", rate_limit = 100)]
/// fn tcp_sendmsg(size: usize, ret: i32) {}
/// ```
///
/// # Parameters
///
/// Every parameter of the handler is one of:
///
/// * **a capture**, named after a parameter of the kernel function (or free
///   when it has a `path`), with an optional `#[capture(...)]`;
/// * **`ret`**: the return value (fexit only), an integer, `bool` or pointer;
/// * **`span: &mut kspan::KernelSpan`**: the span about to be exported, to
///   rename it ([`KernelSpan::set_name`]), add or replace attributes
///   ([`KernelSpan::set_attribute`]), set the status
///   ([`KernelSpan::set_status`]) or drop it ([`KernelSpan::discard`]).
///
/// Names and types are checked against the running kernel's BTF when kspan
/// starts; a mismatch is an [`Error`] naming the function, the parameter, both
/// types and the fix. With an empty body, every capture is an attribute
/// `kernel.arg.<name>`.
///
/// # Capture kinds
///
/// Integers (`u8`..`u64`, `i8`..`i64`, `usize`, `isize`): the Rust type has
/// the kernel type's width and signedness, or is wider: of the same
/// signedness, or signed (an `i64` holds every `unsigned int`). A wider Rust
/// type keeps working when a kernel changes `long` to `int`. Kernel enums are
/// read as integers of at least their width and exported as the enumerator's
/// name.
///
/// ```no_run
/// #[kspan::kernel_span("ksys_read")]
/// fn ksys_read(fd: u32, count: usize, ret: isize) {}
/// ```
///
/// `bool` for kernel `bool`; raw pointers (`*const T`, `*mut T`, or `u64`) for
/// kernel pointers, captured as the address and never dereferenced:
///
/// ```no_run
/// #[kspan::kernel_span("vfs_read", mode = "fentry")]
/// fn vfs_read(file: *const u8, pos: *const i64) {}
/// ```
///
/// Fields through pointers: `path` starts at a kernel parameter and follows
/// `->member` (through a pointer) and `.member` (inside a struct), at most 8
/// members; every segment is checked against BTF, and an error lists the
/// members that do exist. Offsets come from the running kernel, so one binary
/// works across kernel versions. Values behind pointers are read when the
/// call returns (fexit) or at entry (fentry); a pointer that cannot be read
/// gives `kernel.arg.<name>.fault = true` instead of a value.
///
/// ```no_run
/// #[kspan::kernel_span("tcp_sendmsg")]
/// fn tcp_sendmsg(
///     size: usize,
///     #[capture(path = "sk->__sk_common.skc_dport")] dport: u16, // network byte order
///     #[capture(path = "sk->sk_socket->state")] state: u32,       // "SS_CONNECTED"
///     ret: i32,
/// ) {}
/// ```
///
/// Kernel strings: `&str` from a `char *` (a parameter, or a member reached by
/// `path`) or a `char` array member; NUL-terminated, at most `max` bytes
/// (default 64, up to 1022); invalid UTF-8 is replaced; a longer string is cut
/// and marked `kernel.arg.<name>.truncated = true`.
///
/// ```no_run
/// #[kspan::kernel_span("vfs_read")]
/// fn vfs_read(
///     #[capture(path = "file->f_path.dentry->d_name.name", max = 128)] name: &str,
///     ret: isize,
/// ) {}
/// ```
///
/// Byte arrays: `[u8; N]` from an array member (at most its size) or the
/// first `N` bytes behind a pointer; exported as hex.
///
/// ```no_run
/// #[kspan::kernel_span("wake_up_process")]
/// fn wake_up_process(#[capture(path = "p->comm")] comm: [u8; 16]) {}
/// ```
///
/// User-space memory, only when asked with `user`: strings (`&str`) and
/// buffers (`&[u8]`) whose length is another parameter (`len = "count"`) or
/// the return value (`len = "ret"`, read at exit: the bytes really produced),
/// at most `max` bytes (default 256); a longer buffer is cut and marked.
///
/// ```no_run
/// #[kspan::kernel_span("do_sys_openat2")]
/// fn do_sys_openat2(
///     #[capture(user)] filename: &str,
///     #[capture(path = "how->flags")] flags: u64,
///     ret: i64,
/// ) {}
///
/// #[kspan::kernel_span("vfs_read")]
/// fn vfs_read(#[capture(user, len = "ret", max = 64)] buf: &[u8], ret: isize) {}
/// ```
///
/// When a span's captures are read: the arguments themselves are saved when
/// the call begins; the memory they point to (field paths, strings, buffers)
/// is read when it returns by default, so that what the call produced is
/// there (`len = "ret"`, `file->f_pos` after a read). Memory the call frees
/// or changes before it returns is read with `at = "entry"` and carried to
/// the span's end: `do_unlinkat` drops its `struct filename` before it
/// returns (the VM test `vm_entry_captures` finds its reference count 0 at
/// exit), so its name is read at entry. Instants (`fentry`, `kprobe`) read
/// everything at entry.
///
/// ```no_run
/// #[kspan::kernel_span("do_unlinkat")]
/// fn do_unlinkat(#[capture(path = "name->name", at = "entry")] name: &str, ret: i32) {}
/// ```
///
/// Limits: 8 captures per probe, the first 6 kernel parameters, 8 members per
/// path, 1024 bytes of strings and buffers per call; 1,024 calls with
/// captures read at entry in flight at once (beyond that, the values of the
/// call waiting longest are evicted, and its span marks those captures
/// `kernel.arg.<name>.fault`).
///
/// # Handlers that shape the span
///
/// ```no_run
/// #[kspan::kernel_span("vfs_read")]
/// fn vfs_read(
///     #[capture(path = "file->f_path.dentry->d_name.name")] name: &str,
///     ret: isize,
///     span: &mut kspan::KernelSpan,
/// ) {
///     if name.ends_with(".tmp") {
///         span.discard(); // counted in `Stats::discarded_by_handler`, not lost
///     } else if ret == 0 {
///         span.set_name("vfs_read eof");
///         span.set_attribute(kspan::KeyValue::new("app.file", name.to_owned()));
///     }
/// }
/// ```
///
/// A panicking handler does not stop kspan: the panic is counted
/// ([`Stats::handler_panics`]) and reported at shutdown, and the span is
/// exported as the handler left it, with `kspan.handler.panicked = true`.
/// Its first panic per probe is logged (a `tracing` warning with the panic's
/// message and location); the later ones are counted, not logged. None
/// reaches the process's panic hook, which would print each and, with
/// `RUST_BACKTRACE` set, capture and symbolize a backtrace (tens of MB kept
/// for the life of the process, and the consumer stalled meanwhile).
///
/// # Probes on the same function
///
/// One kernel function has one probe per runtime: a second probe on it is
/// refused at start with an error naming both annotations (merge the
/// handlers). A process runs one runtime at a time ([`KspanBuilder::start`]).
///
/// # Names
///
/// The probe is a `static` named like the function, so a handler parameter
/// cannot have the name of another `static` in scope (another probe of the
/// same module included): Rust forbids parameters shadowing statics. Rename
/// the probe function (`fn rseq_probe(rseq: ...)` with
/// `#[kernel_span("rseq")]`) when that happens.
///
/// # Compile errors
///
/// Misuse is a compile error at the offending token: a missing, empty or
/// non-string function name, an unknown mode, an unknown or duplicate key,
/// `errno` or `histogram` not a bool, `histogram` on an instant mode, `ret`
/// in fentry mode or of a non-scalar type, `span` of
/// another type, an unsupported parameter type, a malformed path, `user`,
/// `max` or `len` where they mean nothing, `len = "ret"` in fentry mode.
pub use kspan_macros::kernel_span;
