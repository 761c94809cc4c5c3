// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Kernel calls as OpenTelemetry spans.
//!
//! A service marks the kernel functions it cares about:
//!
//! ```no_run
//! #[kspan::kernel_span("vfs_read", mode = "fexit")]
//! fn vfs_read(count: usize, ret: isize) {}
//!
//! # async fn run(provider: opentelemetry_sdk::trace::SdkTracerProvider) -> kspan::Result<()> {
//! let kspan = kspan::Kspan::builder(&provider).probe(&vfs_read).start()?;
//! // ... the service reads files ...
//! let stats = kspan.shutdown().await?;
//! assert_eq!(stats.lost(), 0);
//! # Ok(()) }
//! ```
//!
//! and every call of `vfs_read` made by the process becomes a span named
//! `vfs_read` with the arguments and the return value as attributes, built
//! through the application's own tracer provider and exported with its spans.
//!
//! # Why it is shaped this way
//!
//! * **The kernel pairs entry and exit.** One generic fentry program pushes a
//!   frame (start time, span id, captured arguments) on a per-task stack in
//!   task local storage; one generic fexit program pops it and emits a single
//!   ring-buffer record per finished span. Nesting and recursion fall out of
//!   the stack; a missed exit is detected and counted instead of corrupting it.
//! * **One verified program, many functions.** The BPF object is compiled once
//!   (`kspan-bpf`) and opened once per traced function, with the function's
//!   settings written into `.rodata` before load and the maps of the first copy
//!   shared by all. No code is generated per function.
//! * **Plan before touching the kernel.** Every probe is resolved against the
//!   running kernel's BTF (function exists, parameter names to positions, Rust
//!   types against kernel types) by pure code in [`plan`]; a typo fails with
//!   an error naming the function, the parameter and the fix, before anything
//!   is loaded.
//! * **The application's pipeline is reused.** Spans are built with the
//!   kernel's ids and times through the application's [`SdkTracerProvider`],
//!   so its resource, sampler, processors and exporter apply.
//! * **Nothing is lost silently.** Every drop (ring buffer full, stack too
//!   deep, lost exit) has a per-CPU counter, reported by [`Kspan::stats`] and
//!   at [`Kspan::shutdown`].
//!
//! # Span attributes
//!
//! | attribute | value |
//! | --- | --- |
//! | `kernel.arg.<name>` | each captured parameter |
//! | `kernel.return_value` | the return value (fexit) |
//! | `thread.id` | the calling thread (kernel pid) |
//! | `process.pid` | the calling process (kernel tgid) |
//!
//! Integers are OTLP integers (an unsigned value above `i64::MAX` becomes its
//! decimal string), `bool`s are booleans, pointers are `0x…` hex strings.
//!
//! # What the kernel must offer
//!
//! BTF (`/sys/kernel/btf/vmlinux`), CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN),
//! and BPF trampolines (Linux 5.17+ for the helpers used, built with
//! `CONFIG_FUNCTION_TRACER`). Where one is missing, [`KspanBuilder::start`]
//! fails with an [`Error`] that says which, with the kernel's errno.
//!
//! [`SdkTracerProvider`]: opentelemetry_sdk::trace::SdkTracerProvider

// The macro's expansion names `::kspan`; this lets the crate's own tests use it.
#[cfg(test)]
extern crate self as kspan;

pub mod btf;
mod caps;
pub mod clock;
mod errno;
mod error;
pub mod export;
pub mod fieldpath;
pub mod plan;
mod probe;
mod registry;
mod runtime;
mod value;

pub use error::{Error, Result};
pub use export::{KernelSpan, Outcome};
pub use opentelemetry::trace::Status;
pub use opentelemetry::KeyValue;
pub use probe::{Captured, LenSource, Mode, ParamSpec, Probe, ProbeSpec, UnknownMode};
pub use runtime::{Kspan, KspanBuilder, Stats, KERNEL_BTF};
pub use value::{Capture, FromCapture, KernelValue, Value, ValueKind, ValueType};

/// What the `kernel_span` macro's expansion uses; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::registry::PROBES;
    pub use linkme;
}

/// Turns a function into a kernel probe.
///
/// ```no_run
/// #[kspan::kernel_span("vfs_read", mode = "fexit")]
/// fn vfs_read(count: usize, ret: isize) {
///     // runs for every traced call, with the captured values
/// }
/// ```
///
/// The function becomes a `static` [`Probe`] of the same name, given to
/// [`KspanBuilder::probe`].
///
/// * The first argument is the kernel function's name (a string literal).
/// * `mode = "fexit"` (the default): a span from entry to exit with the
///   arguments and the return value. `mode = "fentry"`: an instant at entry,
///   with the arguments only.
/// * Each parameter is named after a parameter of the kernel function and
///   captures it; `ret` captures the return value (fexit only). Names and
///   types are checked against the kernel's BTF when kspan starts.
/// * Types: `u8`..`u64`, `i8`..`i64`, `usize`, `isize` (same width and
///   signedness as the kernel type; enums by width), `bool` (kernel `bool`),
///   raw pointers `*const T` / `*mut T` (kernel pointers, captured as the
///   address, never dereferenced), or `u64`/`usize` for a pointer's address.
/// * The body runs on kspan's consumer for every span, after the span's
///   attributes are taken; a panic in it is caught and counted.
///
/// Misuse is a compile error at the offending token: a missing or non-string
/// function name, an unknown mode, an unknown or duplicate key, `ret` in
/// `fentry` mode, an unsupported parameter type.
pub use kspan_macros::kernel_span;
