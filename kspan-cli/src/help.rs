// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `kspan help` (also `--help`, `-h`): the help text; and what a bare
//! `kspan` or a usage error prints instead, which is shorter so that the
//! one line that matters is not buried.

/// What `mode = "auto"` does, in the library's own terms (its choice of
/// hooks, `kspan::attach`, and `KernelCapabilities::preemption`): the help
/// and docs/guide/cli.md say it in these words, which a test holds them to.
macro_rules! auto_mode {
    () => {
        "auto (the default) takes kprobes first on a kernel that preempts kernel code
(preemption model full, lazy or rt, or one that cannot be read), where a task
preempted inside a trampoline program makes the kernel skip it for other tasks,
losing their calls, some uncounted; elsewhere (none, voluntary) it takes BPF
trampolines first. The other is the fallback. Each takes the best attachment
the kernel has: kprobe.session, else kprobe.multi, else kprobe+kretprobe;
fsession.multi, else fsession, else fentry+fexit. `Kspan::attach_plan()` and
`kspan doctor` say which and why."
    };
}

/// [`auto_mode!`], for the tests.
#[cfg(test)]
const AUTO_MODE: &str = auto_mode!();

/// The help, for `kspan help`, `--help` and `-h`.
pub const USAGE: &str = concat!(
    "\
kspan: kernel calls as OpenTelemetry spans. What this kernel offers, which
functions it can trace, and handlers to paste.

Usage:
  kspan doctor                     what this kernel offers for tracing, and which modes work
  kspan list [PATTERN] [--all]     kernel functions kspan can trace matching PATTERN, with C
                                   signatures (--all: also those it will not, with the reason)
  kspan list --syscalls [PATTERN]  system calls usable as syscall sources, with their arguments
  kspan gen FUNCTION [--mode MODE] [--params NAMES]
                                   a #[kspan::kernel_span] handler for a kernel function, with
                                   advice in comments (struct fields to capture, at = \"entry\")
  kspan gen --syscall NAME         a handler for a system call (its tracepoints)
  kspan help                       this text (also -h, --help)
  kspan --version

PATTERN is a shell glob: `*` matches any run of characters, `?` one character;
without a wildcard it matches one name exactly. Quote it for the shell. The
default is `*`.

MODE is one of auto, fentry, fexit, kprobe, kretprobe; fentry and kprobe see no
return value.
",
    auto_mode!(),
    "

Where this kernel can trace no kernel function, `list` and `gen` say so as
`kspan doctor` does, and point to syscall sources.

NAMES (`--params dfd,name`) are the parameters a handler takes: where this
kernel lacks FUNCTION (another kernel's name), the functions suggested instead
are those that take them first.

Exit status: 0 done, 1 failed (nothing matched, BTF unreadable, unknown name),
2 usage error.
"
);

/// What a bare `kspan` prints (to standard error, exit 2): the forms of the
/// command, and where the rest is.
pub const SHORT_USAGE: &str = "\
usage: kspan doctor
       kspan list [--all | --syscalls] [PATTERN]
       kspan gen FUNCTION [--mode MODE] [--params NAMES]
       kspan gen --syscall NAME
see `kspan --help`
";

/// The line after a usage error's message.
pub const SEE_HELP: &str = "see `kspan --help`";

#[cfg(test)]
mod tests {
    use super::*;
    use kspan::kernel::preemption::{Preemption, PreemptionModel};
    use kspan::{Attachment, Hook};

    /// `text` with each run of whitespace one space.
    fn words(text: &str) -> String {
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// The help and the guide say what `auto` does in the same words, and
    /// the words are the library's: which preemption models take kprobes
    /// first, and each hook's attachments in order.
    #[test]
    fn auto_is_described_as_the_library_does_it() {
        assert!(USAGE.contains(AUTO_MODE));
        let guide = words(include_str!("../../docs/guide/cli.md"));
        assert!(
            guide.contains(&words(AUTO_MODE)),
            "docs/guide/cli.md describes `auto` as the help does:\n{AUTO_MODE}"
        );

        let text = words(AUTO_MODE);
        let (kprobes_first, trampolines_first) = text
            .split_once("elsewhere (")
            .expect("where trampolines come first");
        let kprobes_first = kprobes_first
            .split_once("(preemption model ")
            .expect("the models that take kprobes first")
            .1
            .split_once(')')
            .unwrap()
            .0;
        let trampolines_first = trampolines_first.split_once(')').unwrap().0;
        for name in ["none", "voluntary", "full", "lazy", "rt"] {
            let model = PreemptionModel::from_name(name).unwrap();
            let listed = |list: &str| list.split([',', ' ']).any(|w| w == name);
            assert_eq!(listed(kprobes_first), model.preempts_programs(), "{name}");
            assert_eq!(
                listed(trampolines_first),
                !model.preempts_programs(),
                "{name}"
            );
        }
        let unknown = Preemption {
            model: None,
            source: "a test".to_owned(),
        };
        assert!(unknown.preempts_programs());
        assert!(kprobes_first.contains("or one that cannot be read"));
        assert!(text.contains("auto (the default)"));
        for hook in [Hook::Kretprobe, Hook::Fexit] {
            let ladder: Vec<&str> = Attachment::ladder(hook)
                .iter()
                .map(|a| a.as_str())
                .collect();
            assert!(text.contains(&ladder.join(", else ")), "{ladder:?}");
        }
        assert!(text.contains("`Kspan::attach_plan()` and `kspan doctor` say which and why"));
    }
}
