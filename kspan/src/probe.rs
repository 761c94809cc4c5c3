// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What the `kernel_span` macro generates: a probe definition.
//!
//! A [`Probe`] is plain `'static` data plus one function pointer, so the macro
//! can emit it as a `static` and the runtime can take any number of them
//! without generics.

use std::fmt;
use std::str::FromStr;

use crate::export::KernelSpan;
use crate::value::{Capture, FromCapture, KernelValue, ValueType};

/// How a kernel function is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// A BPF trampoline at entry only: each call is an instant (zero-length
    /// span) with the arguments; no return value.
    Fentry,
    /// BPF trampolines at entry and exit: a full span with start and end
    /// times, arguments and the return value.
    Fexit,
    /// A kprobe at entry only: an instant with the arguments, for kernels
    /// without trampolines.
    Kprobe,
    /// A kprobe at entry and a kretprobe at exit: a full span like `fexit`
    /// (the arguments are kept from entry), for kernels without trampolines.
    Kretprobe,
    /// A system call's enter and exit tracepoints: a full span with the
    /// arguments and the return value. Works where neither trampolines nor
    /// kprobes do. Declared with `#[kernel_span(syscall = "openat")]`.
    Syscall,
    /// The default: the best full-span mechanism this kernel offers for the
    /// function, `fexit` first, then `kretprobe`; the choice and the reason for
    /// every rejected option are in [`Kspan::attach_plan`](crate::Kspan::attach_plan).
    Auto,
}

impl Mode {
    /// Every mode, in the order error messages list them.
    pub const ALL: [Mode; 6] = [
        Mode::Fentry,
        Mode::Fexit,
        Mode::Kprobe,
        Mode::Kretprobe,
        Mode::Syscall,
        Mode::Auto,
    ];

    /// The mode's name as written in `mode = "..."`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Fentry => "fentry",
            Mode::Fexit => "fexit",
            Mode::Kprobe => "kprobe",
            Mode::Kretprobe => "kretprobe",
            Mode::Syscall => "syscall",
            Mode::Auto => "auto",
        }
    }

    /// Whether this mode sees the return value.
    pub fn has_return(self) -> bool {
        matches!(
            self,
            Mode::Fexit | Mode::Kretprobe | Mode::Syscall | Mode::Auto
        )
    }

    /// The mechanisms `auto` tries, best first.
    pub const AUTO_ORDER: [Mode; 2] = [Mode::Fexit, Mode::Kretprobe];

    /// Whether the mode attaches BPF trampolines (else kprobes).
    pub fn is_trampoline(self) -> bool {
        matches!(self, Mode::Fentry | Mode::Fexit)
    }

    pub(crate) fn bpf_value(self) -> u32 {
        use kspan_bpf::consts as c;
        (match self {
            Mode::Fentry => c::KSPAN_MODE_FENTRY,
            Mode::Fexit => c::KSPAN_MODE_FEXIT,
            Mode::Kprobe => c::KSPAN_MODE_KPROBE,
            Mode::Kretprobe => c::KSPAN_MODE_KRETPROBE,
            Mode::Syscall => c::KSPAN_MODE_SYSCALL,
            // Resolved to a concrete mode before anything is loaded.
            Mode::Auto => c::KSPAN_MODE_FEXIT,
        }) as u32
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A mode name that is not one of [`Mode::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode `{0}`: expected one of `auto`, `fentry`, `fexit`, `kprobe`, `kretprobe`")]
pub struct UnknownMode(pub String);

impl FromStr for Mode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownMode(s.to_owned()))
    }
}

/// Where a byte buffer's length comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
        }
    }
}

/// What to attach and what to capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSpec {
    /// The kernel function.
    pub function: &'static str,
    /// How to attach.
    pub mode: Mode,
    /// Captured parameters, in handler order.
    pub params: &'static [ParamSpec],
    /// The Rust type of the return value, when the handler takes `ret`.
    pub ret: Option<ValueType>,
    /// Whether a negative errno return sets the span status to error.
    pub errno: bool,
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
    fn modes_round_trip() {
        for m in Mode::ALL {
            assert_eq!(m.as_str().parse::<Mode>().unwrap(), m);
        }
        let err = "fexitt".parse::<Mode>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown mode `fexitt`: expected one of `auto`, `fentry`, `fexit`, `kprobe`, `kretprobe`"
        );
        assert!(Mode::Fexit.has_return() && !Mode::Fentry.has_return());
        assert!(Mode::Kretprobe.has_return() && !Mode::Kprobe.has_return());
        assert_eq!(Mode::Kretprobe.bpf_value(), 3);
    }

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
