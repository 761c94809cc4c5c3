// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The attach mode a probe asks for.
//!
//! Only the request is here: how a mode is encoded for the BPF program and
//! which mechanism `auto` resolves to on a given kernel are the runtime's.

use std::fmt;
use std::str::FromStr;

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
    /// The default: a full span through the mechanism this kernel suits
    /// best. Where the kernel preempts kernel code (preemption `full`,
    /// `lazy`, `rt`, or a model that cannot be read), kprobes first
    /// (kprobe.session, else kprobe.multi, else kprobe and kretprobe), since
    /// trampoline programs there lose calls uncounted; elsewhere (`none`,
    /// `voluntary`) trampolines first (fsession.multi, else fsession, else
    /// fentry and fexit); the other family is the fallback. The choice and
    /// the reason for every rejected option are in kspan's
    /// `Kspan::attach_plan` and `kspan doctor`.
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

    /// The modes `#[kernel_span(mode = "...")]` accepts, in the order
    /// [`UnknownMode`] lists them. [`Mode::Syscall`] is not among them: a
    /// system call is named with `syscall = "openat"` in place of the kernel
    /// function, and that chooses its mode.
    pub const ANNOTATION_MODES: [Mode; 5] = [
        Mode::Auto,
        Mode::Fentry,
        Mode::Fexit,
        Mode::Kprobe,
        Mode::Kretprobe,
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

    /// The variant's name (`Fexit`), for code that names it, such as the
    /// macro's `::kspan::Mode::Fexit`.
    pub fn variant_name(self) -> &'static str {
        match self {
            Mode::Fentry => "Fentry",
            Mode::Fexit => "Fexit",
            Mode::Kprobe => "Kprobe",
            Mode::Kretprobe => "Kretprobe",
            Mode::Syscall => "Syscall",
            Mode::Auto => "Auto",
        }
    }

    /// Whether this mode sees the return value.
    pub fn has_return(self) -> bool {
        matches!(
            self,
            Mode::Fexit | Mode::Kretprobe | Mode::Syscall | Mode::Auto
        )
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A mode name that is not one of [`Mode::ALL`]. Its message lists
/// [`Mode::ANNOTATION_MODES`], the names a user writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownMode(pub String);

impl fmt::Display for UnknownMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown mode `{}`: expected one of ", self.0)?;
        for (i, mode) in Mode::ANNOTATION_MODES.into_iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "`{mode}`")?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownMode {}

impl FromStr for Mode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownMode(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip() {
        for m in Mode::ALL {
            assert_eq!(m.as_str().parse::<Mode>().unwrap(), m);
            assert_eq!(m.to_string(), m.as_str());
            assert_eq!(format!("{m:?}"), m.variant_name());
        }
        let err = "fexitt".parse::<Mode>().unwrap_err();
        assert_eq!(err, UnknownMode("fexitt".to_owned()));
        assert_eq!(
            err.to_string(),
            "unknown mode `fexitt`: expected one of `auto`, `fentry`, `fexit`, `kprobe`, `kretprobe`"
        );
        let _: &dyn std::error::Error = &err;
        assert!(Mode::Fexit.has_return() && !Mode::Fentry.has_return());
        assert!(Mode::Kretprobe.has_return() && !Mode::Kprobe.has_return());
        assert!(Mode::Syscall.has_return() && Mode::Auto.has_return());
    }

    #[test]
    fn annotation_modes_are_all_but_syscall() {
        let others: Vec<Mode> = Mode::ALL
            .into_iter()
            .filter(|m| !Mode::ANNOTATION_MODES.contains(m))
            .collect();
        assert_eq!(others, [Mode::Syscall]);
    }
}
