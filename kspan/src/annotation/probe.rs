// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A probe definition: what the `kernel_span` macro generates.
//!
//! A [`Probe`] is plain `'static` data plus one function pointer, so the macro
//! can emit it as a `static` and the runtime can take any number of them
//! without generics.

use std::fmt;

use super::kernel_span::KernelSpan;
use super::value::{Capture, FromCapture, KernelValue, ValueType};
use super::Mode;

/// Where a byte buffer's length comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LenSource {
    /// Another parameter of the kernel function, by name.
    Param(&'static str),
    /// The return value (fexit only): the bytes the call really produced.
    Ret,
}

/// One captured value: which kernel value and the Rust type it is read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamSpec {
    /// The handler parameter's name; without `path`, also the kernel
    /// function's parameter it captures.
    pub name: &'static str,
    /// The Rust type of the handler parameter.
    pub ty: ValueType,
    /// A field path from a kernel parameter (`file->f_path.dentry`).
    pub path: Option<&'static str>,
    /// Read user-space memory (strings and buffers behind `__user` pointers).
    pub user: bool,
    /// Bound in bytes for strings and buffers (default 64 for strings, 256
    /// for buffers).
    pub max: Option<u16>,
    /// Length of a `&[u8]` buffer.
    pub len: Option<LenSource>,
    /// Read when the call begins (`at = "entry"`) rather than when it
    /// returns, for a span: what the call frees or changes. Arguments
    /// themselves are saved at entry either way; this is about the memory
    /// they point to.
    pub at_entry: bool,
}

impl ParamSpec {
    /// A plain parameter capture (no path, no options).
    pub const fn new(name: &'static str, ty: ValueType) -> Self {
        ParamSpec {
            name,
            ty,
            path: None,
            user: false,
            max: None,
            len: None,
            at_entry: false,
        }
    }
}

/// The in-kernel filters of a probe: a call becomes a span only when it
/// passes all of them. Evaluated by the BPF program at the call's exit,
/// before any ring-buffer space is taken; what they reject is counted, per
/// probe, never lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FilterSpec {
    /// Calls shorter than this many nanoseconds are not spans (0: none).
    pub min_duration_ns: u64,
    /// Only calls whose return value is an errno (-4095..=-1) are spans.
    pub errors_only: bool,
    /// A predicate over captured scalars and `ret`
    /// (`"count >= 65536 || ret < 0"`), parsed by the macro and again
    /// against the kernel's BTF at start.
    pub predicate: Option<&'static str>,
    /// At most this many spans per second (0: no limit); calls over it are
    /// counted as rate-limited.
    pub rate_limit: u32,
}

impl FilterSpec {
    /// Every call is a span.
    pub const NONE: FilterSpec = FilterSpec {
        min_duration_ns: 0,
        errors_only: false,
        predicate: None,
        rate_limit: 0,
    };

    /// Whether some call may be refused at its exit.
    pub fn is_active(&self) -> bool {
        *self != FilterSpec::NONE
    }
}

/// What to attach and what to capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSpec {
    /// The kernel function (or pattern, or system call).
    pub function: &'static str,
    /// Functions to trace where the kernel lacks `function` or cannot
    /// trace it, in order (`"do_unlinkat" | "filename_unlinkat"`): the
    /// first of `function` and these that this kernel has and can trace is
    /// traced, and the handler's parameters are checked against that one.
    pub alternatives: &'static [&'static str],
    /// Whether the runtime starts without this probe where none of its
    /// functions can be traced (`optional = true`), saying why in
    /// `Kspan::attach_plan` and counting it in `Stats::probes_not_attached`;
    /// otherwise that fails the start.
    pub optional: bool,
    /// How to attach.
    pub mode: Mode,
    /// Captured parameters, in handler order.
    pub params: &'static [ParamSpec],
    /// The Rust type of the return value, when the handler takes `ret`.
    pub ret: Option<ValueType>,
    /// Whether a negative errno return sets the span status to error.
    pub errno: bool,
    /// Which calls become spans, decided in the kernel.
    pub filter: FilterSpec,
    /// Calls that do not become spans add to their application span's
    /// `kernel.<function>.*` attributes (see [`KernelSums`](crate::KernelSums)).
    pub sum: bool,
    /// Whether calls become spans at all (`spans = false`: only the
    /// histogram and the sums).
    pub spans: bool,
    /// Whether the kernel keeps a latency histogram of the calls, published
    /// as an OpenTelemetry histogram (`kernel.<function>.duration`, see
    /// [`crate::latency`]). Needs a mode with a duration (not an instant).
    pub histogram: bool,
    /// Where the annotation is (`file:line`), for messages.
    pub location: &'static str,
}

/// A probe: the spec and the generated handler. Made by `#[kernel_span]`.
pub struct Probe {
    /// What to attach and capture.
    pub spec: ProbeSpec,
    /// Decodes the captured values into the handler's typed parameters and runs
    /// the handler body, which may change the span.
    pub handler: fn(&Captured<'_>, &mut KernelSpan),
}

impl fmt::Debug for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Probe").field("spec", &self.spec).finish()
    }
}

static FAULT: Capture<'static> = Capture::Fault;

/// The captured values of one call, in the handler's parameter order.
#[derive(Debug, Clone, Copy)]
pub struct Captured<'a> {
    params: &'a [Capture<'a>],
    ret: Option<u64>,
}

impl<'a> Captured<'a> {
    /// Wraps captures (one per parameter of the spec) and the raw return value.
    pub fn new(params: &'a [Capture<'a>], ret: Option<u64>) -> Self {
        Captured { params, ret }
    }

    /// Capture `index` as `T`. An index past the captures reads as a fault
    /// (the planner guarantees that this does not happen).
    pub fn param<T: FromCapture<'a>>(&self, index: usize) -> T {
        match self.params.get(index) {
            Some(capture) => T::from_capture(capture),
            None => T::from_capture(&FAULT),
        }
    }

    /// The return value read as `T` (0 where the mode has none).
    pub fn ret<T: KernelValue>(&self) -> T {
        T::from_raw(self.ret.unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_reads_typed_values() {
        let raw = [
            Capture::Scalar(42),
            Capture::Scalar(u64::MAX),
            Capture::Str {
                text: "data.bin".into(),
                truncated: false,
            },
            Capture::Bytes {
                data: b"abc",
                truncated: true,
            },
            Capture::Fault,
        ];
        let c = Captured::new(&raw, Some((-9i64) as u64));
        assert_eq!(c.param::<usize>(0), 42);
        assert_eq!(c.param::<i32>(1), -1);
        assert_eq!(c.param::<&str>(2), "data.bin");
        assert_eq!(c.param::<&[u8]>(3), b"abc");
        assert_eq!(c.param::<[u8; 4]>(3), *b"abc\0");
        assert_eq!(c.param::<&str>(4), "", "a fault reads as empty");
        assert_eq!(c.param::<u64>(4), 0);
        assert_eq!(c.ret::<isize>(), -9);
        assert_eq!(c.param::<u64>(9), 0);
    }
}
