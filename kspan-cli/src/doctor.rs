// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `kspan doctor`: the mechanisms this kernel offers for tracing, each with
//! its status and errno, and the [`Verdict`] on which modes work; it exits
//! 1 when none does for this process. `list`
//! and `gen` repeat the verdict, in its words, where a kernel function
//! cannot be traced ([`cannot_trace_note`]).

use std::path::Path;

use kspan::kernel::tracefs::TRACEFS;
use kspan::{Attachment, Feature, Hook, KernelCapabilities, Mode};

use crate::common::{enter_format_path, print, Failure, Outcome};

/// `kspan doctor`, which takes no arguments.
pub fn parse(args: &[String]) -> Result<(), Failure> {
    match args.first() {
        Some(extra) => Err(Failure::Usage(format!(
            "`kspan doctor` takes no arguments; remove `{extra}`"
        ))),
        None => Ok(()),
    }
}

/// `kspan doctor`.
pub fn run() -> Outcome {
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

    text.push_str(&programs_section(&caps));

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
             kernel locks {}; block requests {}; throttled block I/O {}; memory stalls {}\n",
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
            match (
                btf && event("block", "block_rq_complete"),
                &caps.trampolines,
                // `blk_throtl_bio` before 5.12 (Debian 11's 5.10).
                kernel_has_symbol("__blk_throtl_bio") || kernel_has_symbol("blk_throtl_bio"),
            ) {
                (false, ..) => "no (it needs the block requests)".to_owned(),
                (true, Feature::Available, true) => {
                    "yes (fexit on __blk_throtl_bio or blk_throtl_bio: cgroup v2 io.max, v1 \
                     blkio.throttle.*)"
                        .to_owned()
                }
                (true, Feature::Available, false) => {
                    "no (neither __blk_throtl_bio nor blk_throtl_bio in /proc/kallsyms: a \
                     kernel without CONFIG_BLK_DEV_THROTTLING)"
                        .to_owned()
                }
                (true, refused, _) => {
                    format!("no (it needs a trampoline on blk-throttle's decision: {refused})")
                }
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
    print(&text)?;
    // A report, and a status a script or a container's start can act on:
    // nothing kspan traces works for this process here.
    match (&verdict.trampolines, &verdict.kprobes, &verdict.syscalls) {
        (Err(fexit), Err(kprobes), Err(syscalls)) => Err(Failure::Failed(format!(
            "nothing kspan traces works for this process on this kernel: fexit/fentry {fexit}, \
             kprobes {kprobes}, syscall sources {syscalls} (the report above says why)"
        ))),
        _ => Ok(()),
    }
}

/// Which modes work on a kernel: `kspan doctor`'s verdict, which `list`
/// and `gen` repeat in its words where a kernel function cannot be traced.
#[derive(Debug, Clone)]
pub struct Verdict {
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

/// Where this kernel cannot trace kernel functions in `mode`, `kspan
/// doctor`'s verdict and what to do instead: the system call of the first
/// of `functions` that has one, else syscall sources in general.
pub fn cannot_trace_note(mode: Mode, functions: &[&str]) -> Option<String> {
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

/// The first of `functions` whose system call ([`syscalls_for`])
/// this kernel has tracepoints for, with that call.
fn related_syscall<'a>(functions: impl IntoIterator<Item = &'a str>) -> Option<(&'a str, String)> {
    functions.into_iter().find_map(|function| {
        syscalls_for(function)
            .into_iter()
            .find(|name| enter_format_path(name).exists())
            .map(|name| (function, name))
    })
}

/// The system calls that kernel function `function` may serve, by its
/// name, likeliest first: `read` for `vfs_read` and `ksys_read`,
/// `openat2` for `do_sys_openat2`. Whether each is one is for the caller
/// to check (its tracepoint).
fn syscalls_for(function: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for prefix in [
        "__x64_sys_",
        "__arm64_sys_",
        "__ia32_sys_",
        "__se_sys_",
        "__do_sys_",
        "__sys_",
        "ksys_",
        "do_sys_",
        "sys_",
        "vfs_",
        "do_",
        "",
    ] {
        if let Some(name) = function.strip_prefix(prefix).filter(|n| !n.is_empty()) {
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
    }
    names
}

/// Whether `/proc/kallsyms` names the kernel function `name`.
fn kernel_has_symbol(name: &str) -> bool {
    std::fs::read_to_string("/proc/kallsyms").is_ok_and(|text| {
        text.lines()
            .any(|line| line.split_whitespace().nth(2) == Some(name))
    })
}

/// What the kernel's verifier takes of what kspan's programs use beyond
/// Linux 5.8's BPF, by program type, and what the programs do instead
/// where it lacks something: each said once.
fn programs_section(caps: &KernelCapabilities) -> String {
    let mut text = String::from(
        "\nprograms (what the verifier takes, probed by loading programs that use it):\n",
    );
    text.push_str(&format!(
        "  {:<15} {}\n",
        "build",
        match caps.legacy_programs() {
            None => "current (bpf_loop, atomics that fetch)".to_owned(),
            Some(why) => format!(
                "for older kernels ({why}): bounded loops, plain loads and stores in place of \
                 atomics that fetch"
            ),
        }
    ));
    for (kind, features) in [
        ("trampoline/tp_btf", &caps.tracing_programs),
        ("kprobe", &caps.kprobe_programs),
        ("tracepoint", &caps.tracepoint_programs),
    ] {
        let fallbacks = features.fallbacks();
        if fallbacks.is_empty() {
            text.push_str(&format!("  {kind:<15} everything kspan uses\n"));
        }
        for line in fallbacks {
            text.push_str(&format!("  {kind:<15} {line}\n"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use kspan::kernel::preemption::{Preemption, PreemptionModel};

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
        for mode in crate::gen::GEN_MODES {
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

    #[test]
    fn system_calls_of_a_function() {
        assert_eq!(syscalls_for("vfs_read"), ["read", "vfs_read"]);
        assert_eq!(syscalls_for("ksys_read")[0], "read");
        assert_eq!(syscalls_for("do_sys_openat2")[0], "openat2");
        assert_eq!(syscalls_for("__x64_sys_openat")[0], "openat");
        assert_eq!(syscalls_for("__sys_sendto")[0], "sendto");
        assert_eq!(syscalls_for("do_unlinkat")[0], "unlinkat");
        assert_eq!(syscalls_for("tcp_sendmsg"), ["tcp_sendmsg"]);
    }
}
