// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The mechanism a probe is attached through, as chosen at start.
//!
//! A [`Mode`] is what an annotation asks for, `auto` included; a [`Hook`] is
//! what kspan attaches, always concrete. Keeping them apart means no code
//! that loads or attaches ever has to handle `auto`.

use std::fmt;

use super::Mode;

/// Where kspan's programs run for one traced function: a concrete attach
/// mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Hook {
    /// A BPF trampoline at entry: instants.
    Fentry,
    /// BPF trampolines at entry and exit: full spans.
    Fexit,
    /// A kprobe at entry: instants.
    Kprobe,
    /// A kprobe at entry and a kretprobe at exit: full spans.
    Kretprobe,
    /// The syscall's enter and exit tracepoints: full spans.
    Syscall,
}

impl Hook {
    /// The hooks that can serve `mode`, best first: one for a concrete mode,
    /// `fexit` then `kretprobe` for `auto`.
    pub fn candidates(mode: Mode) -> &'static [Hook] {
        match mode {
            Mode::Fentry => &[Hook::Fentry],
            Mode::Fexit => &[Hook::Fexit],
            Mode::Kprobe => &[Hook::Kprobe],
            Mode::Kretprobe => &[Hook::Kretprobe],
            Mode::Syscall => &[Hook::Syscall],
            Mode::Auto => &[Hook::Fexit, Hook::Kretprobe],
            // `Mode` is open to new modes; one this runtime does not know
            // has no hook here (and `start` says so, naming the function).
            _ => &[],
        }
    }

    /// The name, as in `mode = "..."`.
    pub fn as_str(self) -> &'static str {
        self.mode().as_str()
    }

    /// The mode that asks for exactly this hook.
    pub fn mode(self) -> Mode {
        match self {
            Hook::Fentry => Mode::Fentry,
            Hook::Fexit => Mode::Fexit,
            Hook::Kprobe => Mode::Kprobe,
            Hook::Kretprobe => Mode::Kretprobe,
            Hook::Syscall => Mode::Syscall,
        }
    }

    /// Whether an exit program runs too (the span has an end and a return
    /// value).
    pub fn has_return(self) -> bool {
        !matches!(self, Hook::Fentry | Hook::Kprobe)
    }

    /// Whether it is a BPF trampoline (attached against a BTF id).
    pub fn is_trampoline(self) -> bool {
        matches!(self, Hook::Fentry | Hook::Fexit)
    }

    /// Whether it is a kprobe (attached by function name, many functions
    /// per program).
    pub fn is_kprobe(self) -> bool {
        matches!(self, Hook::Kprobe | Hook::Kretprobe)
    }

    /// The family it belongs to, for [`KspanBuilder::disable`](crate::KspanBuilder::disable).
    pub fn mechanism(self) -> Mechanism {
        match self {
            Hook::Fentry | Hook::Fexit => Mechanism::Trampolines,
            Hook::Kprobe | Hook::Kretprobe => Mechanism::Kprobes,
            Hook::Syscall => Mechanism::Tracepoints,
        }
    }
}

impl fmt::Display for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A hook is the mode that asks for exactly it.
impl PartialEq<Mode> for Hook {
    fn eq(&self, mode: &Mode) -> bool {
        self.mode() == *mode
    }
}

/// A family of hooks, for [`KspanBuilder::disable`](crate::KspanBuilder::disable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mechanism {
    /// BPF trampolines: fentry and fexit.
    Trampolines,
    /// kprobes and kretprobes.
    Kprobes,
    /// Tracepoints: syscall sources.
    Tracepoints,
    /// Session programs (fsession, fsession.multi, kprobe.session): one
    /// program for both ends of a function. Turned off, full spans use a
    /// program at each end; the spans are the same.
    Sessions,
    /// Links that attach many functions at once (fsession.multi,
    /// kprobe.multi, kprobe.session). Turned off, each function gets links
    /// of its own; the spans are the same.
    MultiLinks,
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mechanism::Trampolines => "trampolines (fentry/fexit)",
            Mechanism::Kprobes => "kprobes",
            Mechanism::Tracepoints => "tracepoints",
            Mechanism::Sessions => "session programs (fsession, kprobe.session)",
            Mechanism::MultiLinks => "multi-function links (fsession.multi, kprobe.multi)",
        })
    }
}

/// How a function's programs are attached: the kernel mechanism under a
/// [`Hook`]. Several can serve one hook; the spans are the same, the cost
/// per call and per attach is not. Listed best first within each hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Attachment {
    /// One fsession program for every function of the same settings,
    /// through one link (Linux 7.2+), the probe id in each target's cookie.
    #[doc(alias = "BPF_TRACE_FSESSION_MULTI")]
    FsessionMulti,
    /// One fsession program and link per function, run at both ends
    /// (Linux 7.0+).
    #[doc(alias = "BPF_TRACE_FSESSION")]
    Fsession,
    /// An fentry and an fexit program per function, a link each.
    #[doc(alias = "BPF_TRACE_FEXIT")]
    FentryFexit,
    /// An fentry program per function (instants).
    #[doc(alias = "BPF_TRACE_FENTRY")]
    Fentry,
    /// One kprobe.session program for every function of the same settings,
    /// through one kprobe.multi link (Linux 6.10+).
    #[doc(alias = "BPF_TRACE_KPROBE_SESSION")]
    KprobeSession,
    /// kprobe.multi links (fprobe): one per direction for every function of
    /// the same settings.
    #[doc(alias = "BPF_TRACE_KPROBE_MULTI")]
    KprobeMulti,
    /// A kprobe (and kretprobe) perf event per function.
    #[doc(alias = "BPF_PERF_EVENT")]
    Kprobes,
    /// The syscall's enter and exit tracepoints.
    Tracepoints,
}

impl Attachment {
    /// Whether the kernel skips this attachment's programs on a CPU while
    /// another task there is inside a BPF map system call: kprobe and
    /// tracepoint programs run under a per-CPU guard (`bpf_prog_active`)
    /// that the map calls hold too, with migration off but preemption on.
    /// Trampoline programs have a guard of their own per program.
    #[doc(alias = "bpf_prog_active")]
    pub fn skipped_during_map_calls(self) -> bool {
        matches!(
            self,
            Attachment::KprobeSession
                | Attachment::KprobeMulti
                | Attachment::Kprobes
                | Attachment::Tracepoints
        )
    }

    /// The name, as libbpf spells the section (`fsession.multi`).
    pub fn as_str(self) -> &'static str {
        match self {
            Attachment::FsessionMulti => "fsession.multi",
            Attachment::Fsession => "fsession",
            Attachment::FentryFexit => "fentry+fexit",
            Attachment::Fentry => "fentry",
            Attachment::KprobeSession => "kprobe.session",
            Attachment::KprobeMulti => "kprobe.multi",
            Attachment::Kprobes => "kprobe+kretprobe",
            Attachment::Tracepoints => "tracepoints",
        }
    }

    /// The attachments that can serve `hook`, best first: least cost per
    /// call, then per attach.
    pub fn ladder(hook: Hook) -> &'static [Attachment] {
        match hook {
            Hook::Fexit => &[
                Attachment::FsessionMulti,
                Attachment::Fsession,
                Attachment::FentryFexit,
            ],
            Hook::Fentry => &[Attachment::Fentry],
            Hook::Kretprobe => &[
                Attachment::KprobeSession,
                Attachment::KprobeMulti,
                Attachment::Kprobes,
            ],
            Hook::Kprobe => &[Attachment::KprobeMulti, Attachment::Kprobes],
            Hook::Syscall => &[Attachment::Tracepoints],
        }
    }

    /// Whether one link serves many functions.
    pub fn is_multi(self) -> bool {
        matches!(
            self,
            Attachment::FsessionMulti | Attachment::KprobeSession | Attachment::KprobeMulti
        )
    }
}

impl fmt::Display for Attachment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_is_never_a_hook() {
        assert_eq!(Hook::candidates(Mode::Auto), [Hook::Fexit, Hook::Kretprobe]);
        for mode in Mode::ALL.into_iter().filter(|m| *m != Mode::Auto) {
            let [hook] = Hook::candidates(mode) else {
                panic!("{mode} has one hook");
            };
            assert_eq!(*hook, mode);
            assert_eq!(hook.has_return(), mode.has_return());
        }
        assert_eq!(Hook::Kretprobe.mechanism(), Mechanism::Kprobes);
    }

    #[test]
    fn every_hook_has_attachments_ending_in_one_every_kernel_has() {
        for hook in [
            Hook::Fentry,
            Hook::Fexit,
            Hook::Kprobe,
            Hook::Kretprobe,
            Hook::Syscall,
        ] {
            let ladder = Attachment::ladder(hook);
            let last = ladder.last().expect("at least one attachment");
            assert!(!last.is_multi(), "{hook}: the last needs no newer kernel");
            assert!(
                !matches!(last, Attachment::Fsession | Attachment::KprobeSession),
                "{hook}"
            );
        }
        assert_eq!(
            Attachment::ladder(Hook::Fexit),
            [
                Attachment::FsessionMulti,
                Attachment::Fsession,
                Attachment::FentryFexit
            ]
        );
        assert_eq!(
            Attachment::ladder(Hook::Kretprobe)[0].as_str(),
            "kprobe.session"
        );
    }
}
