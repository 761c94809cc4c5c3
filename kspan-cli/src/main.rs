// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `kspan`: what this kernel offers for tracing, which functions it can
//! trace, and a ready-to-paste `#[kspan::kernel_span]` handler for one.
//!
//! ```text
//! kspan doctor                      # the mechanisms, each with its status and errno
//! kspan list 'vfs_rea*'             # kernel functions from BTF, with C signatures
//! kspan list --syscalls 'open*'     # syscall sources, with their arguments
//! kspan gen vfs_read                # a handler with the Rust types kspan accepts
//! kspan gen --syscall openat
//! kspan gen do_unlinkat --params dfd,name  # another kernel's name: what takes those here
//! ```
//!
//! # Why it is shaped this way
//!
//! * **Three questions, in the order they come up.** Before writing a probe
//!   one asks whether tracing works here at all (`doctor`), what can be
//!   traced (`list`), and what to write (`gen`). Each is one subcommand, so
//!   there is no configuration and nothing to remember between runs.
//! * **The same sources as the runtime.** `doctor` prints
//!   [`kspan::KernelCapabilities`], the record `auto` mode decides from, so
//!   the report and what `start` does cannot disagree. `list` and `gen` read
//!   the kernel's BTF at [`kspan::KERNEL_BTF`] and the tracefs formats that
//!   kspan plans against, so every name and type printed is this kernel's;
//!   and what `start` would refuse (kspan's deny list, functions missing
//!   from `available_filter_functions`) `list` leaves out and `gen` refuses.
//! * **A report is not a failure.** `doctor` exits 0 when features are
//!   missing: that is its answer. Exit 1 is kept for "could not do what was
//!   asked" (nothing matched, BTF unreadable, unknown function), exit 2 for
//!   a command line that does not parse (a bare `kspan` included): the
//!   mistake in a line and where the help is, not the help, which would
//!   bury it. Every error names the thing at fault and the fix. A closed
//!   output (`kspan list | head`) ends the command quietly.
//! * **No silent dead ends.** Where this kernel cannot trace kernel
//!   functions (in the mode asked), `list` and `gen` still answer, for
//!   other kernels, but repeat `doctor`'s verdict ([`Verdict`], the same
//!   code) and offer the syscall source to trace instead.
//! * **Generated code is accepted as generated.** `gen` maps kernel types to
//!   the Rust types kspan's checker accepts (same width and signedness,
//!   `usize`/`isize` for `size_t`/`ssize_t`, `&str` for a `char *` where BTF tags it (kernel or
//!   `#[capture(user)]` for `__user`), `&[u8]` with its `len` for a buffer
//!   (`#[capture(user, len = "ret")] buf: &[u8]` for `vfs_read`'s), `*const u8` for other
//!   pointers), and writes what no register capture can read (structs by
//!   value, parameters past the sixth, names a handler cannot use) as
//!   `// not captured` lines rather than dropping it silently. What it
//!   cannot decide it advises in comments: field captures of a struct
//!   pointer's members, each resolved as `start` resolves a path; the
//!   kernel and user forms of a `char *` or a buffer where BTF has no
//!   `__user` tags (it stays a pointer there); `at = "entry"` for
//!   what a function's name says it releases. The layout is rustfmt's, so
//!   pasted code survives `cargo fmt`. `tests/generated.rs` holds pasted
//!   output, and probes written from its advice, and plans them against this
//!   kernel's BTF.
//! * **Pure code apart.** Glob matching, the type mapping and all rendering
//!   are in [`render`], the choice of fields to suggest in [`fields`], both
//!   tested on hand-built types; this file only reads the system and
//!   prints. Arguments are parsed by hand: three subcommands
//!   with a flag or two do not need a parser, and the crate depends on
//!   `kspan` and std only.

mod fields;
mod render;

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kspan::kernel::btf::Btf;
use kspan::kernel::tracefs::{self, TRACEFS};
use kspan::{Attachment, Feature, Hook, KernelCapabilities, Mode};

use render::{NotTraced, Target};

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
const USAGE: &str = concat!(
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
const SHORT_USAGE: &str = "\
usage: kspan doctor
       kspan list [--all | --syscalls] [PATTERN]
       kspan gen FUNCTION [--mode MODE] [--params NAMES]
       kspan gen --syscall NAME
see `kspan --help`
";

/// The line after a usage error's message.
const SEE_HELP: &str = "see `kspan --help`";

/// Why a command did not succeed.
#[derive(Debug)]
enum Failure {
    /// The command line is wrong: exit 2, with where the help is.
    Usage(String),
    /// No command given: exit 2, with the short usage.
    NoCommand,
    /// The command could not do what was asked: exit 1.
    Failed(String),
    /// Standard output was closed early (`kspan list | head`): stop quietly.
    OutputClosed,
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Failure::OutputClosed
        } else {
            Failure::Failed(format!("cannot write to standard output: {e}"))
        }
    }
}

type Outcome = Result<(), Failure>;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let (status, message) = conclude(args_to_strings(args).and_then(|args| run(&args)));
    if let Some(message) = message {
        report(&message);
    }
    ExitCode::from(status)
}

/// The exit status of `outcome`, and what to write to standard error: a
/// usage error is its message and where the help is (the help itself would
/// bury the one line that matters), a bare `kspan` the short usage.
fn conclude(outcome: Outcome) -> (u8, Option<String>) {
    match outcome {
        Ok(()) | Err(Failure::OutputClosed) => (0, None),
        Err(Failure::Usage(message)) => (2, Some(format!("kspan: {message}\n{SEE_HELP}"))),
        Err(Failure::NoCommand) => (2, Some(SHORT_USAGE.to_owned())),
        Err(Failure::Failed(message)) => (1, Some(format!("kspan: {message}"))),
    }
}

/// Writes to standard error; if even that fails there is no one to tell.
fn report(message: &str) {
    let _ = writeln!(io::stderr().lock(), "{}", message.trim_end());
}

fn args_to_strings(args: Vec<OsString>) -> Result<Vec<String>, Failure> {
    args.into_iter()
        .map(|a| {
            a.into_string().map_err(|a| {
                Failure::Usage(format!(
                    "argument {a:?} is not valid UTF-8; kernel function names are ASCII"
                ))
            })
        })
        .collect()
}

fn run(args: &[String]) -> Outcome {
    let Some((command, rest)) = args.split_first() else {
        return Err(Failure::NoCommand);
    };
    if rest.iter().any(|a| a == "--help" || a == "-h") {
        return print(USAGE);
    }
    match command.as_str() {
        "help" | "--help" | "-h" => print(USAGE),
        "--version" | "-V" => print(&format!("kspan {}\n", env!("CARGO_PKG_VERSION"))),
        "doctor" => {
            if let Some(extra) = rest.first() {
                return Err(Failure::Usage(format!(
                    "`kspan doctor` takes no arguments; remove `{extra}`"
                )));
            }
            doctor()
        }
        "list" => list(rest),
        "gen" => generate(rest),
        other => Err(Failure::Usage(format!(
            "unknown command `{other}`: use `doctor`, `list` or `gen`"
        ))),
    }
}

fn print(text: &str) -> Outcome {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

// ---------------------------------------------------------------- doctor

fn doctor() -> Outcome {
    let release = match std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        Ok(text) => text.trim().to_owned(),
        Err(e) => format!("unknown (cannot read /proc/sys/kernel/osrelease: {e})"),
    };
    let caps = KernelCapabilities::probe();
    let features: [(&str, &Feature); 11] = [
        ("btf", &caps.btf),
        ("privileges", &caps.privileges),
        ("trampolines", &caps.trampolines),
        ("fsession", &caps.trampoline_sessions),
        ("fsession.multi", &caps.trampoline_multi),
        ("kprobes", &caps.kprobes),
        ("kprobe.multi", &caps.kprobe_multi),
        ("kprobe.session", &caps.kprobe_sessions),
        ("tracepoints", &caps.tracepoints),
        ("tp_btf", &caps.btf_tracepoints),
        ("ctx-records", &caps.context_records),
    ];
    let mut text = format!("kernel {release}\n\nmechanisms:\n");
    for (name, feature) in features {
        text.push_str(&format!("  {name:<15} {feature}\n"));
    }
    let preempts = caps.preemption.preempts_programs();
    text.push_str(&format!(
        "  {:<15} {} ({})\n",
        "preemption",
        caps.preemption,
        if caps.preemption.model.is_none() {
            "taken as preempting inside trampoline programs"
        } else if preempts {
            "preempts inside trampoline programs: the kernel skips them for other tasks \
             meanwhile"
        } else {
            "trampoline programs run to the end"
        }
    ));

    let verdict = Verdict::read(&caps);
    text.push_str("\nmodes:\n");
    text.push_str(&format!("  {}\n", verdict.trampolines_line()));
    text.push_str(&format!("  {}\n", verdict.kprobes_line()));
    text.push_str(&format!(
        "  syscall sources: {}\n",
        match &verdict.syscalls {
            Ok(()) if verdict.unmounted => format!(
                "yes, once tracefs is mounted (kspan mounts it at start; by hand: \
                 `mount -t tracefs tracefs {}`)",
                TRACEFS
            ),
            other => yes_or(other),
        }
    ));
    text.push_str(&format!(
        "  scheduler account: {}\n",
        match (&verdict.syscalls, &caps.btf_tracepoints) {
            (Ok(()), Feature::Available) => "yes, through tp_btf (BTF tracepoints)".to_owned(),
            (Ok(()), _) => "yes, through classic tracepoints (tp_btf unavailable)".to_owned(),
            (Err(no), _) => no.clone(),
        }
    ));
    if verdict.syscalls.is_ok() {
        let event = |category: &str, event: &str| {
            kspan::kernel::tracefs::read_event_format(category, event).is_ok()
        };
        let btf = matches!(caps.btf_tracepoints, Feature::Available);
        text.push_str(&format!(
            "  scheduler account's causes (`SchedulerAccount::with_causes`): blocked time by the \
             thread's flags (io, memory), sleeping time by its system call, page faults; \
             kernel locks {}; block requests {}; memory stalls {}\n",
            if event("lock", "contention_begin") {
                "yes (lock:contention_begin/end)"
            } else {
                "no (no lock:contention_begin tracepoint: Linux 5.19+)"
            },
            if btf && event("block", "block_rq_complete") {
                "yes (block:block_rq_*, BTF tracepoints)"
            } else {
                "no (they need BTF tracepoints and block:block_rq_*)"
            },
            if event("vmscan", "mm_vmscan_direct_reclaim_begin") {
                "yes (vmscan and compaction begin/end)"
            } else {
                "no (no vmscan:mm_vmscan_direct_reclaim_begin tracepoint)"
            },
        ));
    }
    text.push_str(&format!("  {}\n", verdict.auto_line()));
    text.push_str(
        "\nattachments, best first (spans are the same; cost per call and attach differ):\n",
    );
    text.push_str(&format!("  fexit: {}\n", verdict.fexit_ladder));
    text.push_str(&format!(
        "  kretprobe: {} (the first two for kretprobe probes, and auto's where \
         kprobes come first)\n",
        verdict.kretprobe_ladder
    ));
    print(&text)
}

/// Which modes work on a kernel: `kspan doctor`'s verdict, which `list`
/// and `gen` repeat in its words where a kernel function cannot be traced.
#[derive(Debug, Clone)]
struct Verdict {
    /// fexit/fentry: `Ok`, or `no (trampolines unavailable)`.
    trampolines: Result<(), String>,
    /// kprobe/kretprobe, as `trampolines`.
    kprobes: Result<(), String>,
    /// Syscall sources (tracepoints), as `trampolines`.
    syscalls: Result<(), String>,
    /// tracefs is there but not mounted: kspan mounts it at start.
    unmounted: bool,
    /// What `auto` would use, or that nothing works.
    auto: String,
    /// The fexit hook's attachments, best first, each `yes` or `no`.
    fexit_ladder: String,
    /// The kretprobe hook's, as `fexit_ladder`.
    kretprobe_ladder: String,
}

impl Verdict {
    /// The verdict for this kernel's capabilities, tracefs as it is now.
    fn read(caps: &KernelCapabilities) -> Verdict {
        // kspan mounts tracefs itself when a syscall source needs it.
        let tracefs = Path::new(TRACEFS);
        let unmounted = !caps.tracepoints.is_available()
            && tracefs.is_dir()
            && !tracefs.join("events").exists();
        Verdict::of(caps, unmounted)
    }

    /// The verdict for `caps`; `unmounted`: tracefs is there, unmounted.
    fn of(caps: &KernelCapabilities, unmounted: bool) -> Verdict {
        // What each mode needs besides its mechanism: BTF to plan the
        // probes against, and the privileges to load BPF programs.
        let common: [(&str, &Feature); 2] = [("btf", &caps.btf), ("privileges", &caps.privileges)];
        let works = |mechanism: (&str, &Feature)| -> Result<(), String> {
            let missing: Vec<&str> = common
                .iter()
                .chain([&mechanism])
                .filter(|(_, f)| !f.is_available())
                .map(|(name, _)| *name)
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("no ({} unavailable)", missing.join(", ")))
            }
        };
        let trampolines = works(("trampolines", &caps.trampolines));
        let kprobes = works(("kprobes", &caps.kprobes));
        let syscalls = if unmounted {
            works(("tracepoints", &Feature::Available))
        } else {
            works(("tracepoints", &caps.tracepoints))
        };
        // Per hook, its attachments best first, and the one a probe would get.
        let ladder = |hook: Hook, usable: bool| -> (String, Option<Attachment>) {
            let mut chosen = None;
            let steps: Vec<String> = Attachment::ladder(hook)
                .iter()
                .map(|&a| {
                    let feature = match a {
                        Attachment::FsessionMulti => Some(&caps.trampoline_multi),
                        Attachment::Fsession => Some(&caps.trampoline_sessions),
                        Attachment::KprobeSession => Some(&caps.kprobe_sessions),
                        Attachment::KprobeMulti => Some(&caps.kprobe_multi),
                        _ => None,
                    };
                    let ok = usable && feature.is_none_or(Feature::is_available);
                    if ok && chosen.is_none() {
                        chosen = Some(a);
                    }
                    format!("{a} {}", if ok { "yes" } else { "no" })
                })
                .collect();
            (steps.join(" > "), chosen)
        };
        let (fexit_ladder, fexit_choice) = ladder(Hook::Fexit, trampolines.is_ok());
        let (kretprobe_ladder, kret_choice) = ladder(Hook::Kretprobe, kprobes.is_ok());
        let preempts = caps.preemption.preempts_programs();
        let auto = if let (true, true, Some(a)) = (preempts, kprobes.is_ok(), kret_choice) {
            format!(
                "would use kretprobe through {a} (this kernel preempts inside trampoline \
                 programs; kprobes run with preemption off)"
            )
        } else if let (true, Some(a)) = (trampolines.is_ok(), fexit_choice) {
            format!("would use fexit through {a}")
        } else if kprobes.is_ok() {
            "would use kretprobe (no trampolines)".to_owned()
        } else if syscalls.is_ok() {
            "nothing works for kernel functions; use syscall sources \
             (`kspan list --syscalls`, `kspan gen --syscall NAME`)"
                .to_owned()
        } else {
            "nothing works for kernel functions, and syscall sources do not work either".to_owned()
        };
        Verdict {
            trampolines,
            kprobes,
            syscalls,
            unmounted,
            auto,
            fexit_ladder,
            kretprobe_ladder,
        }
    }

    fn trampolines_line(&self) -> String {
        format!("fexit/fentry: {}", yes_or(&self.trampolines))
    }

    fn kprobes_line(&self) -> String {
        format!("kprobe/kretprobe: {}", yes_or(&self.kprobes))
    }

    fn auto_line(&self) -> String {
        format!("auto: {}", self.auto)
    }

    /// Why a probe on a kernel function in `mode` cannot attach here, as
    /// `kspan doctor` says it (its lines for the mechanisms `mode` needs,
    /// then `auto`'s), if it cannot.
    fn refuses(&self, mode: Mode) -> Option<String> {
        let lines = match mode {
            Mode::Syscall => return None,
            Mode::Fentry | Mode::Fexit => {
                self.trampolines.as_ref().err()?;
                vec![self.trampolines_line()]
            }
            Mode::Kprobe | Mode::Kretprobe => {
                self.kprobes.as_ref().err()?;
                vec![self.kprobes_line()]
            }
            _ => {
                if self.trampolines.is_ok() || self.kprobes.is_ok() {
                    return None;
                }
                vec![self.trampolines_line(), self.kprobes_line()]
            }
        };
        Some(format!("{}; {}", lines.join("; "), self.auto_line()))
    }

    /// The note `list` and `gen` print where `mode` cannot trace kernel
    /// functions here: doctor's verdict, and the syscall source to trace
    /// instead (`syscall`: `function`'s system call, where it has one), or
    /// for an explicit mode, `auto` where that works.
    fn note(&self, mode: Mode, function: Option<&str>, syscall: Option<&str>) -> Option<String> {
        let why = self.refuses(mode)?;
        let what = match mode {
            Mode::Auto => "kernel functions".to_owned(),
            mode => format!("kernel functions in mode `{mode}`"),
        };
        let mut note = format!("note: this kernel cannot trace {what}; `kspan doctor` says: {why}");
        if mode != Mode::Auto && self.refuses(Mode::Auto).is_none() {
            note.push_str("\nleave out `--mode` for `auto`, which works here");
        } else if self.syscalls.is_ok() {
            match (function, syscall) {
                (Some(function), Some(syscall)) => note.push_str(&format!(
                    "\ninstead of `{function}`, trace its system call: \
                     `#[kspan::kernel_span(syscall = \"{syscall}\")]` (`kspan gen --syscall \
                     {syscall}`)"
                )),
                _ => note.push_str(
                    "\na syscall source is written `#[kspan::kernel_span(syscall = \"read\")]`",
                ),
            }
        }
        Some(note)
    }
}

/// `yes`, or the `no (...)` of a [`Verdict`] line.
fn yes_or(works: &Result<(), String>) -> String {
    match works {
        Ok(()) => "yes".to_owned(),
        Err(no) => no.clone(),
    }
}

/// The first of `functions` whose system call ([`render::syscalls_for`])
/// this kernel has tracepoints for, with that call.
fn related_syscall<'a>(functions: impl IntoIterator<Item = &'a str>) -> Option<(&'a str, String)> {
    functions.into_iter().find_map(|function| {
        render::syscalls_for(function)
            .into_iter()
            .find(|name| enter_format_path(name).exists())
            .map(|name| (function, name))
    })
}

// ---------------------------------------------------------------- list

fn list(args: &[String]) -> Outcome {
    let mut syscalls = false;
    let mut all = false;
    let mut pattern: Option<&str> = None;
    for arg in args {
        match arg.as_str() {
            "--syscalls" => syscalls = true,
            "--all" => all = true,
            flag if flag.starts_with('-') && flag.len() > 1 => {
                return Err(Failure::Usage(format!(
                    "unknown option `{flag}` for `kspan list`: the options are `--syscalls` \
                     and `--all`"
                )))
            }
            p => {
                if let Some(first) = pattern {
                    return Err(Failure::Usage(format!(
                        "`kspan list` takes one pattern, got `{first}` and `{p}`; quote a \
                         pattern with `*` so the shell does not expand it"
                    )));
                }
                pattern = Some(p);
            }
        }
    }
    let pattern = pattern.unwrap_or("*");
    match (syscalls, all) {
        (true, true) => Err(Failure::Usage(
            "`--all` is for kernel functions; every system call with tracepoints is listed \
             already"
                .to_owned(),
        )),
        (true, false) => list_syscalls(pattern),
        (false, _) => list_functions(pattern, all),
    }
}

fn list_functions(pattern: &str, all: bool) -> Outcome {
    let btf = read_btf()?;
    let traceable = read_traceable();
    let mut names: Vec<&str> = btf
        .function_names()
        .filter(|name| render::glob_match(pattern, name))
        .collect();
    if names.is_empty() {
        return Err(no_match(
            "kernel function",
            pattern,
            btf.function_names(),
            "kspan list",
        ));
    }
    names.sort_unstable();
    let (mut denied, mut untraceable) = (0usize, 0usize);
    let mut listed = 0usize;
    // The functions listed as traced, for the system call to offer.
    let mut traced: Vec<&str> = Vec::new();
    let mut out = BufWriter::new(io::stdout().lock());
    for name in &names {
        let Some(sig) = btf.function(name) else {
            continue;
        };
        let why_not = render::not_traced(name, traceable.as_ref().ok());
        match why_not {
            Some(NotTraced::Denied(_)) => denied += 1,
            Some(_) => untraceable += 1,
            None => {}
        }
        match why_not {
            None => {
                writeln!(out, "{}", render::c_signature(&sig))?;
                traced.push(name);
            }
            Some(why) if all => {
                writeln!(out, "{}  // not traced: {why}", render::c_signature(&sig))?
            }
            Some(_) => continue,
        }
        listed += 1;
    }
    out.flush()?;

    let mut summary = format!(
        "{} of {} kernel functions match `{pattern}`",
        names.len(),
        btf.function_count()
    );
    let left_out = denied + untraceable;
    if left_out > 0 {
        let mut why: Vec<String> = Vec::new();
        if denied > 0 {
            why.push(format!("{denied} on its deny list"));
        }
        if untraceable > 0 {
            why.push(format!("{untraceable} inlined or notrace"));
        }
        summary.push_str(&format!(
            "; {left_out} of them kspan will not trace ({}){}",
            why.join(", "),
            if all {
                ": marked `// not traced`"
            } else {
                ": left out, `--all` lists them"
            }
        ));
    }
    if let Err(why) = &traceable {
        summary.push_str(&format!(
            "\nnote: {why}; inlined and notrace functions are listed too"
        ));
    }
    if let Some(note) = cannot_trace_note(Mode::Auto, &traced) {
        summary.push('\n');
        summary.push_str(&note);
    }
    report(&summary);
    if listed == 0 {
        return Err(Failure::Failed(format!(
            "every kernel function matching `{pattern}` is one kspan will not trace; `kspan \
             list --all '{pattern}'` shows them with the reason"
        )));
    }
    Ok(())
}

fn list_syscalls(pattern: &str) -> Outcome {
    let names = syscall_names()?;
    let mut matching: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|name| render::glob_match(pattern, name))
        .collect();
    if matching.is_empty() {
        return Err(no_match(
            "system call",
            pattern,
            names.iter().map(String::as_str),
            "kspan list --syscalls",
        ));
    }
    matching.sort_unstable();
    let mut out = BufWriter::new(io::stdout().lock());
    for name in &matching {
        let path = enter_format_path(name);
        let line = match std::fs::read_to_string(&path) {
            Ok(text) => match kspan::kernel::syscall::parse_enter_format(&text) {
                Some(args) => {
                    let args: Vec<String> = args
                        .iter()
                        .map(|(arg, ctype)| render::c_declaration(ctype, arg))
                        .collect();
                    let args = if args.is_empty() {
                        "void".to_owned()
                    } else {
                        args.join(", ")
                    };
                    format!("long {name}({args})")
                }
                None => format!("long {name}(?) (cannot parse {})", path.display()),
            },
            Err(e) => format!("long {name}(?) (cannot read {}: {e})", path.display()),
        };
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    report(&format!(
        "{} of {} system calls match `{pattern}`",
        matching.len(),
        names.len()
    ));
    Ok(())
}

/// The error for a pattern that matched nothing, with close names.
fn no_match<'a>(
    what: &str,
    pattern: &str,
    names: impl Iterator<Item = &'a str>,
    command: &str,
) -> Failure {
    let literal: String = pattern
        .chars()
        .filter(|c| !matches!(c, '*' | '?'))
        .collect();
    // A name this kernel lacks may be another kernel's: names alike by
    // their stem too (`filename_unlinkat` for `do_unlinkat`).
    let suggestions = if what == "kernel function" && !render::has_wildcard(pattern) {
        render::closest_functions(names, &literal, 5, |_| true)
    } else {
        render::closest_names(names, &literal, 5)
    };
    let mut message = format!("no {what} matches `{pattern}`");
    if !render::has_wildcard(pattern) {
        message.push_str(" (a pattern without `*` or `?` matches one name exactly)");
    }
    if suggestions.is_empty() {
        message.push_str(&format!(
            "; `{command} '*{literal}*'` lists names that contain `{literal}`"
        ));
    }
    message.push_str(&render::did_you_mean(&suggestions));
    Failure::Failed(message)
}

// ---------------------------------------------------------------- gen

fn generate(args: &[String]) -> Outcome {
    let mut mode: Option<Mode> = None;
    let mut params: Option<Vec<String>> = None;
    let mut syscall = false;
    let mut name: Option<&str> = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let arg = arg.as_str();
        if arg == "--params" || arg.starts_with("--params=") {
            let value = match arg.strip_prefix("--params=") {
                Some(value) => value,
                None => rest.next().map(String::as_str).ok_or_else(|| {
                    Failure::Usage(
                        "`--params` needs the handler's parameter names, e.g. `--params dfd,name`"
                            .to_owned(),
                    )
                })?,
            };
            if params.is_some() {
                return Err(Failure::Usage("`--params` is given twice".to_owned()));
            }
            params = Some(render::parse_params(value).map_err(Failure::Usage)?);
        } else if arg == "--mode" || arg.starts_with("--mode=") {
            let value = match arg.strip_prefix("--mode=") {
                Some(value) => value,
                None => rest.next().map(String::as_str).ok_or_else(|| {
                    Failure::Usage(
                        "`--mode` needs a value: auto, fentry, fexit, kprobe or kretprobe"
                            .to_owned(),
                    )
                })?,
            };
            if mode.is_some() {
                return Err(Failure::Usage("`--mode` is given twice".to_owned()));
            }
            mode = Some(render::parse_mode(value).map_err(Failure::Usage)?);
        } else if arg == "--syscall" {
            syscall = true;
        } else if arg.starts_with('-') && arg.len() > 1 {
            return Err(Failure::Usage(format!(
                "unknown option `{arg}` for `kspan gen`: the options are `--mode MODE`, \
                 `--params NAMES` and `--syscall`"
            )));
        } else if let Some(first) = name {
            return Err(Failure::Usage(format!(
                "`kspan gen` takes one name, got `{first}` and `{arg}`"
            )));
        } else {
            name = Some(arg);
        }
    }
    let Some(name) = name else {
        return Err(Failure::Usage(if syscall {
            "`kspan gen --syscall` needs a system call name, e.g. `kspan gen --syscall openat`"
                .to_owned()
        } else {
            "`kspan gen` needs a kernel function name, e.g. `kspan gen vfs_read`".to_owned()
        }));
    };
    if render::has_wildcard(name) {
        return Err(Failure::Usage(format!(
            "`kspan gen` takes one name, not a pattern (`{name}`); find names with `kspan list{} \
             '{name}'`",
            if syscall { " --syscalls" } else { "" }
        )));
    }
    if syscall {
        if params.is_some() {
            return Err(Failure::Usage(
                "`--params` chooses among kernel functions; a system call keeps its name: \
                 remove `--params`"
                    .to_owned(),
            ));
        }
        if mode.is_some() {
            return Err(Failure::Usage(
                "a syscall source has its own mode (the syscall's tracepoints): remove `--mode`"
                    .to_owned(),
            ));
        }
        generate_syscall(name)
    } else {
        generate_function(
            name,
            mode.unwrap_or(Mode::Auto),
            &params.unwrap_or_default(),
        )
    }
}

fn generate_function(name: &str, mode: Mode, params: &[String]) -> Outcome {
    let btf = read_btf()?;
    let Some(sig) = btf.function(name) else {
        let mut message = format!(
            "unknown kernel function `{name}`: the kernel's BTF ({}) describes no function of \
             that name",
            kspan::KERNEL_BTF,
        );
        if enter_format_path(name).exists() {
            message.push_str(&format!(
                "; `{name}` is a system call: `kspan gen --syscall {name}`"
            ));
        }
        let takes = |f: &str| {
            btf.function(f)
                .is_some_and(|sig| render::takes_params(&sig, params))
        };
        let suggestions = render::closest_functions(btf.function_names(), name, 3, takes);
        message.push_str(&format!(
            "; `kspan list '*{name}*'` lists the functions whose names contain it{}",
            render::did_you_mean(&suggestions)
        ));
        if let Some(first) = suggestions
            .first()
            .filter(|f| !params.is_empty() && takes(f))
        {
            message.push_str(&format!(
                "\n`{first}` takes `{}`: `kspan gen {first}`; where other kernels have \
                 `{name}`, one probe traces whichever the kernel has: \
                 `#[kspan::kernel_span(\"{name}\" | \"{first}\")]`",
                params.join("`, `")
            ));
        }
        return Err(Failure::Failed(message));
    };
    if let Some(why) = render::not_traced(name, read_traceable().as_ref().ok()) {
        return Err(Failure::Failed(format!(
            "`{name}` is {why}; kspan refuses a probe on it at start: trace a caller or a \
             callee instead (`kspan list '{name}*'` lists the functions it traces)"
        )));
    }
    let hints = type_hints(&btf, &sig);
    print(&render::render_handler(
        &sig,
        Target::Function(mode),
        &hints,
    ))?;
    if let Some(note) = cannot_trace_note(mode, &[name]) {
        report(&format!("kspan: {note}"));
    }
    Ok(())
}

/// Where this kernel cannot trace kernel functions in `mode`, `kspan
/// doctor`'s verdict and what to do instead: the system call of the first
/// of `functions` that has one, else syscall sources in general.
fn cannot_trace_note(mode: Mode, functions: &[&str]) -> Option<String> {
    let verdict = Verdict::read(&KernelCapabilities::probe());
    verdict.refuses(mode)?;
    // A look at each name's likely system calls, for the first few
    // thousand names at most.
    let related = related_syscall(functions.iter().copied().take(2000));
    verdict.note(
        mode,
        related.as_ref().map(|(f, _)| *f),
        related.as_ref().map(|(_, s)| s.as_str()),
    )
}

/// What `gen` tells of `sig`'s types besides their names: whether this BTF
/// marks user pointers, and the field captures suggested for each struct
/// pointer, each one resolved as `Kspan::start` resolves a path (so only
/// paths the library accepts are printed).
fn type_hints(btf: &Btf, sig: &kspan::kernel::btf::FuncSignature) -> render::TypeHints {
    use kspan::plan::fieldpath;
    let resolves = |path: &str| {
        fieldpath::parse(path).is_ok_and(|p| fieldpath::resolve(btf, &sig.name, &p).is_ok())
    };
    render::TypeHints {
        user_tags: btf.has_user_tags(),
        fields: sig
            .params
            .iter()
            .take(render::MAX_ARGS)
            .map(|(name, t)| {
                let fields: Vec<_> = fields::field_captures(btf, name, t)
                    .into_iter()
                    .filter(|f| resolves(&f.path))
                    .collect();
                (name.clone(), fields)
            })
            .filter(|(_, fields)| !fields.is_empty())
            .collect(),
    }
}

fn generate_syscall(name: &str) -> Outcome {
    let path = enter_format_path(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let names = syscall_names()?;
            let mut suggestions = render::closest_names(names.iter().map(String::as_str), name, 3);
            for prefix in [
                "sys_enter_",
                "__x64_sys_",
                "__arm64_sys_",
                "__se_sys_",
                "sys_",
            ] {
                if let Some(bare) = name.strip_prefix(prefix) {
                    if names.iter().any(|n| n == bare) && !suggestions.iter().any(|s| s == bare) {
                        suggestions.insert(0, bare.to_owned());
                    }
                }
            }
            return Err(Failure::Failed(format!(
                "unknown system call `{name}`: there is no tracepoint format {}; `kspan list \
                 --syscalls` lists the system calls{}",
                path.display(),
                render::did_you_mean(&suggestions)
            )));
        }
        Err(e) => {
            return Err(Failure::Failed(format!(
                "cannot read {}: {e}{}",
                path.display(),
                if e.kind() == io::ErrorKind::PermissionDenied {
                    "; run as root"
                } else {
                    ""
                }
            )))
        }
    };
    let btf = read_btf()?;
    let sig = kspan::kernel::syscall::signature(&btf, name, &text).ok_or_else(|| {
        Failure::Failed(format!(
            "cannot parse {}: it is not a `sys_enter_*` tracepoint format (no `__syscall_nr` \
             field)",
            path.display()
        ))
    })?;
    // Field paths are not supported on syscall sources, and their `char`
    // pointers are user strings whatever BTF says.
    let hints = render::TypeHints::default();
    print(&render::render_handler(&sig, Target::Syscall, &hints))
}

// ---------------------------------------------------------------- sources

fn read_btf() -> Result<Btf, Failure> {
    let path = kspan::KERNEL_BTF;
    kspan::kernel::read_btf(Path::new(path)).map_err(|e| {
        Failure::Failed(match e {
            kspan::KernelError::NoKernelBtf { source, .. } => match source.kind() {
                io::ErrorKind::NotFound => format!(
                    "cannot read the kernel's BTF at {path}: it does not exist; the kernel must \
                     be built with CONFIG_DEBUG_INFO_BTF=y"
                ),
                io::ErrorKind::PermissionDenied => format!(
                    "cannot read the kernel's BTF at {path}: permission denied; run as root"
                ),
                _ => format!("cannot read the kernel's BTF at {path}: {source}"),
            },
            kspan::KernelError::BadKernelBtf { source, .. } => format!(
                "cannot parse the kernel's BTF at {path}: {source}; kspan cannot use this \
                 kernel's BTF"
            ),
            other => other.to_string(),
        })
    })
}

/// The functions the kernel can trace (`available_filter_functions`), as
/// the runtime reads them; why not when unreadable (on a kernel whose
/// function tracer is locked down, even for root).
fn read_traceable() -> Result<HashSet<String>, String> {
    tracefs::traceable_functions().map_err(|e| {
        // `Operation not permitted (os error 1)`: the kind is enough.
        let e = e.to_string();
        let e = e.split(" (os error").next().unwrap_or_default();
        format!(
            "cannot read {} ({e})",
            Path::new(TRACEFS)
                .join("available_filter_functions")
                .display()
        )
    })
}

use tracefs::syscall_events;

/// The format file of syscall `name`'s enter tracepoint.
fn enter_format_path(name: &str) -> PathBuf {
    syscall_events().join(format!("sys_enter_{name}/format"))
}

/// The system calls that have tracepoints, sorted.
fn syscall_names() -> Result<Vec<String>, Failure> {
    let tracefs = TRACEFS;
    let events = syscall_events();
    tracefs::syscall_names().map_err(|e| {
        let mount = format!("mount it with `mount -t tracefs tracefs {tracefs}`");
        Failure::Failed(if e.kind() == io::ErrorKind::PermissionDenied {
            format!(
                "cannot read {}: permission denied; run as root",
                events.display()
            )
        } else if !Path::new(tracefs).is_dir() {
            format!("this kernel has no tracefs ({tracefs} does not exist), so no syscall sources")
        } else if !Path::new(tracefs).join("events").is_dir() {
            format!("tracefs is not mounted at {tracefs}: {mount}")
        } else if e.kind() == io::ErrorKind::NotFound {
            format!(
                "{} does not exist: the kernel has no syscall tracepoints (it needs \
                         CONFIG_FTRACE_SYSCALLS=y)",
                events.display()
            )
        } else {
            format!("cannot read {}: {e}", events.display())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kspan::kernel::preemption::{Preemption, PreemptionModel};

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn a_usage_error_is_its_message_and_where_the_help_is() {
        for line in [
            &["bogus"][..],
            &["list", "a*", "b*"][..],
            &["gen", "vfs_read", "--bogus"][..],
            &["doctor", "--verbose"][..],
        ] {
            let outcome = run(&args(line));
            assert!(matches!(outcome, Err(Failure::Usage(_))), "{line:?}");
            let (status, text) = conclude(outcome);
            let text = text.unwrap();
            assert_eq!(status, 2, "{line:?}");
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), 2, "{text}");
            assert!(lines[0].starts_with("kspan: "), "{text}");
            assert_eq!(lines[1], "see `kspan --help`");
        }
        let (status, text) = conclude(Err(Failure::Usage("`--mode` is given twice".into())));
        assert_eq!(
            (status, text.as_deref()),
            (
                2,
                Some("kspan: `--mode` is given twice\nsee `kspan --help`")
            )
        );
        assert_eq!(
            conclude(Err(Failure::Failed("no luck".into()))),
            (1, Some("kspan: no luck".to_owned()))
        );
        assert_eq!(conclude(Err(Failure::OutputClosed)), (0, None));
    }

    #[test]
    fn a_bare_kspan_is_a_usage_error_with_the_short_usage() {
        let outcome = run(&[]);
        assert!(matches!(outcome, Err(Failure::NoCommand)));
        let (status, text) = conclude(outcome);
        let text = text.unwrap();
        assert_eq!(status, 2);
        assert_eq!(text, SHORT_USAGE);
        assert!(text.lines().count() <= 6, "{text}");
        assert!(text.ends_with("see `kspan --help`\n"));
        // Every form of the help is in the short usage.
        for form in [
            "kspan doctor",
            "kspan list [--all | --syscalls] [PATTERN]",
            "kspan gen FUNCTION [--mode MODE] [--params NAMES]",
            "kspan gen --syscall NAME",
        ] {
            assert!(text.contains(form), "{form}");
        }
    }

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

    /// This kernel's capabilities with every mechanism there, trampoline
    /// programs running to the end.
    fn all_there() -> KernelCapabilities {
        let mut caps = KernelCapabilities::probe();
        for f in [
            &mut caps.btf,
            &mut caps.privileges,
            &mut caps.trampolines,
            &mut caps.trampoline_sessions,
            &mut caps.trampoline_multi,
            &mut caps.kprobes,
            &mut caps.kprobe_multi,
            &mut caps.kprobe_sessions,
            &mut caps.tracepoints,
            &mut caps.btf_tracepoints,
            &mut caps.context_records,
        ] {
            *f = Feature::Available;
        }
        caps.preemption = Preemption {
            model: Some(PreemptionModel::Voluntary),
            source: "a test".to_owned(),
        };
        caps
    }

    fn refused(why: &str) -> Feature {
        Feature::Unavailable {
            reason: why.to_owned(),
            errno: Some(1),
        }
    }

    #[test]
    fn list_and_gen_repeat_doctors_verdict() {
        let caps = all_there();
        let verdict = Verdict::of(&caps, false);
        for mode in render::GEN_MODES {
            assert_eq!(verdict.refuses(mode), None, "{mode}");
            assert_eq!(verdict.note(mode, Some("vfs_read"), Some("read")), None);
        }
        assert_eq!(
            verdict.auto_line(),
            "auto: would use fexit through fsession.multi"
        );

        // No trampolines (this project's 6.18 host): auto takes kprobes,
        // an explicit trampoline mode is refused.
        let mut caps = all_there();
        caps.trampolines = refused("this kernel refuses BPF trampolines");
        let verdict = Verdict::of(&caps, false);
        assert_eq!(verdict.refuses(Mode::Auto), None);
        assert_eq!(verdict.refuses(Mode::Kretprobe), None);
        let why = "fexit/fentry: no (trampolines unavailable); auto: would use kretprobe through \
                   kprobe.session (this kernel preempts";
        assert_eq!(verdict.refuses(Mode::Fexit), verdict.refuses(Mode::Fentry));
        let note = verdict
            .note(Mode::Fexit, Some("vfs_read"), Some("read"))
            .unwrap();
        assert!(
            note.starts_with(
                "note: this kernel cannot trace kernel functions in mode `fexit`; `kspan doctor` \
                 says: fexit/fentry: no (trampolines unavailable); auto: would use kretprobe"
            ) && note.ends_with("\nleave out `--mode` for `auto`, which works here"),
            "{note}"
        );
        caps.preemption.model = None;
        assert!(Verdict::of(&caps, false)
            .refuses(Mode::Fexit)
            .unwrap()
            .starts_with(why));

        // Neither (the host with kprobes refused too): doctor's lines, and
        // the system call to trace instead.
        caps.kprobes = refused("no kprobe PMU");
        let verdict = Verdict::of(&caps, false);
        let why = "fexit/fentry: no (trampolines unavailable); kprobe/kretprobe: no (kprobes \
                   unavailable); auto: nothing works for kernel functions; use syscall sources \
                   (`kspan list --syscalls`, `kspan gen --syscall NAME`)";
        assert_eq!(verdict.refuses(Mode::Auto).as_deref(), Some(why));
        assert_eq!(
            verdict
                .note(Mode::Auto, Some("vfs_read"), Some("read"))
                .unwrap(),
            format!(
                "note: this kernel cannot trace kernel functions; `kspan doctor` says: {why}\n\
                 instead of `vfs_read`, trace its system call: \
                 `#[kspan::kernel_span(syscall = \"read\")]` (`kspan gen --syscall read`)"
            )
        );
        assert!(verdict.note(Mode::Auto, None, None).unwrap().ends_with(
            "\na syscall source is written `#[kspan::kernel_span(syscall = \"read\")]`"
        ));
        assert_eq!(verdict.refuses(Mode::Syscall), None);

        // No tracepoints either: nothing to offer.
        caps.tracepoints = refused("no tracefs");
        let verdict = Verdict::of(&caps, false);
        let note = verdict
            .note(Mode::Auto, Some("vfs_read"), Some("read"))
            .unwrap();
        assert!(
            note.ends_with(
                "auto: nothing works for kernel functions, and syscall sources do not work either"
            ),
            "{note}"
        );
        // Without privileges nothing loads, whatever the kernel has.
        let mut caps = all_there();
        caps.privileges = refused("not root");
        assert!(Verdict::of(&caps, false)
            .refuses(Mode::Auto)
            .unwrap()
            .starts_with("fexit/fentry: no (privileges unavailable); kprobe/kretprobe: no (privileges unavailable)"));
    }
}
