// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The privilege check done before anything is read or loaded, per attach
//! mechanism.
//!
//! Without it, the first symptom of missing privileges is an EPERM from
//! `bpf(2)` that looks exactly like a kernel refusing trampolines, or a
//! tracefs error that looks like tracefs is missing. What each mechanism
//! needs, measured as a non-root user on Debian 12's 6.1, Debian 13's 6.12
//! (both with Debian's default `kernel.perf_event_paranoid = 3`) and this
//! project's 6.18 host kernel (paranoid 2); the guide's "Least privilege" (docs/guide/privileges.md):
//!
//! | mechanism | needs |
//! | --- | --- |
//! | every one | CAP_BPF (maps, programs) + CAP_PERFMON (tracing programs) |
//! | syscall sources | + tracefs readable (formats, event ids), + perf events |
//! | kprobes without kprobe.multi (6.1) | + perf events |
//! | a pattern (`vfs_*`) | + tracefs readable (`available_filter_functions`) |
//!
//! CAP_SYS_ADMIN stands in for CAP_BPF, CAP_PERFMON and the perf events.
//! tracefs is root's only by default (the mount point is 0700, the files
//! 0440): CAP_DAC_READ_SEARCH. Perf events (a tracepoint's, a kprobe's) are
//! CAP_PERFMON's where `perf_event_paranoid` is 2 or less; Debian's kernels
//! reserve them for CAP_SYS_ADMIN at 3, their default.
//!
//! Both are found out by trying, not from the capability set alone: the
//! opening of a format file (or `available_filter_functions`) and of a
//! dummy perf event give the right answer for root without those
//! capabilities, for CAP_DAC_OVERRIDE, for a tracefs mounted with the
//! `gid=`/`mode=` an administrator chose, and for whatever the kernel's
//! perf restriction is. A capability is named as missing only when the
//! trying was refused with EACCES and the process lacks it.

use std::fmt;
use std::path::{Path, PathBuf};

use super::{sys, tracefs, KERNEL_BTF};
use crate::annotation::{Mode, Probe};

pub(crate) const CAP_DAC_OVERRIDE: u32 = 1;
pub(crate) const CAP_DAC_READ_SEARCH: u32 = 2;
pub(crate) const CAP_SYS_ADMIN: u32 = 21;
pub(crate) const CAP_PERFMON: u32 = 38;
pub(crate) const CAP_BPF: u32 = 39;

/// What lets CAP_PERFMON open perf events where Debian's restriction is on
/// (for messages).
pub(crate) const PERF_PARANOID_FIX: &str = "`sysctl -w kernel.perf_event_paranoid=2` (and a \
     file in /etc/sysctl.d/ to keep it) lets CAP_PERFMON open them";

/// An attach mechanism, as far as privileges go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mechanism {
    /// fentry/fexit.
    Trampolines,
    /// kprobe/kretprobe.
    Kprobes,
    /// `auto`: trampolines, else kprobes.
    Auto,
    /// Syscall sources: tracepoints, typed from tracefs.
    SyscallSources,
}

/// A mechanism the probes use, with the first probe that uses it (for the
/// message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Need {
    pub mechanism: Mechanism,
    pub mode: Mode,
    pub function: &'static str,
}

impl Need {
    fn describe(&self) -> String {
        match self.mechanism {
            Mechanism::Trampolines => {
                format!("BPF trampolines ({} `{}`)", self.mode, self.function)
            }
            Mechanism::Kprobes => format!("kprobes ({} `{}`)", self.mode, self.function),
            Mechanism::Auto => format!("BPF trampolines or kprobes (auto `{}`)", self.function),
            Mechanism::SyscallSources => format!("syscall sources (`{}`)", self.function),
        }
    }
}

/// What the probes use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Needs {
    /// Each mechanism once, in the probes' order.
    pub mechanisms: Vec<Need>,
    /// The first pattern probe (`vfs_*`), whose matches are checked against
    /// tracefs's `available_filter_functions`.
    pub pattern: Option<Need>,
}

impl Needs {
    fn uses(&self, mechanism: Mechanism) -> Option<&Need> {
        self.mechanisms.iter().find(|n| n.mechanism == mechanism)
    }

    /// Whether anything is read from tracefs.
    fn reads_tracefs(&self) -> bool {
        self.pattern.is_some() || self.uses(Mechanism::SyscallSources).is_some()
    }
}

/// The mechanisms `probes` use.
pub(crate) fn needs(probes: &[&Probe]) -> Needs {
    let mut needs = Needs::default();
    for p in probes {
        let mechanism = match p.spec.mode {
            Mode::Fentry | Mode::Fexit => Mechanism::Trampolines,
            Mode::Kprobe | Mode::Kretprobe => Mechanism::Kprobes,
            Mode::Syscall => Mechanism::SyscallSources,
            // `auto`, and modes this runtime does not know (refused later,
            // by name): whatever they attach loads BPF programs.
            _ => Mechanism::Auto,
        };
        let need = Need {
            mechanism,
            mode: p.spec.mode,
            function: p.spec.function,
        };
        if needs.uses(mechanism).is_none() {
            needs.mechanisms.push(need);
        }
        // As the planner tells a pattern (`plan::denylist::is_pattern`).
        let pattern = p.spec.function.contains(['*', '?']);
        if pattern && mechanism != Mechanism::SyscallSources && needs.pattern.is_none() {
            needs.pattern = Some(need);
        }
    }
    needs
}

/// Whether this process could open a file in tracefs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TracefsAccess {
    /// Readable, or not needed, or failing for a reason that is not a
    /// privilege (reading it later says which).
    Readable,
    /// Opening `path` was refused with `errno`.
    Refused {
        /// The file or directory.
        path: PathBuf,
        /// The errno (EACCES for file permissions).
        errno: i32,
    },
    /// tracefs is not mounted at `path` (kspan mounts it, which needs
    /// CAP_SYS_ADMIN).
    NotMounted {
        /// The mount point.
        path: PathBuf,
    },
}

/// Opens the first of `files` (in tracefs) that exists: what `start` reads
/// next. None existing: `Readable` when tracefs is there (the planner
/// names an unknown syscall), else why not.
fn tracefs_access(files: &[PathBuf]) -> TracefsAccess {
    if files.is_empty() {
        return TracefsAccess::Readable;
    }
    let refused = |path: PathBuf, e: std::io::Error| {
        e.raw_os_error()
            .map_or(TracefsAccess::Readable, |errno| TracefsAccess::Refused {
                path,
                errno,
            })
    };
    for path in files {
        match std::fs::File::open(path) {
            Ok(_) => return TracefsAccess::Readable,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return refused(path.clone(), e),
        }
    }
    let root = Path::new(tracefs::TRACEFS);
    match std::fs::metadata(root.join("events")) {
        Ok(_) => TracefsAccess::Readable,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => TracefsAccess::NotMounted {
            path: root.to_owned(),
        },
        Err(e) => refused(root.join("events"), e),
    }
}

/// What was found out about this process and kernel, for [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Facts {
    /// The effective capabilities (`CapEff`).
    pub cap_eff: u64,
    /// Opening the syscall sources' format files.
    pub syscall_formats: TracefsAccess,
    /// Opening `available_filter_functions` (for patterns).
    pub filter_functions: TracefsAccess,
    /// Opening a perf event as kprobes and tracepoints do: the errno if
    /// refused.
    pub perf_events: Result<(), i32>,
    /// `kernel.perf_event_paranoid`, when readable.
    pub perf_event_paranoid: Option<i32>,
    /// Whether kprobes attach through kprobe.multi links (no perf event).
    pub kprobe_multi: bool,
}

impl Facts {
    /// Everything allowed: what a test varies one thing of.
    #[cfg(test)]
    fn all_allowed(cap_eff: u64) -> Facts {
        Facts {
            cap_eff,
            syscall_formats: TracefsAccess::Readable,
            filter_functions: TracefsAccess::Readable,
            perf_events: Ok(()),
            perf_event_paranoid: Some(2),
            kprobe_multi: false,
        }
    }
}

/// One capability the process lacks, and for what.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MissingCapability {
    /// Its name, as `CAP_PERFMON`.
    pub capability: &'static str,
    /// The mechanisms that need it, each with the first probe using it, as
    /// "BPF trampolines (fexit `vfs_read`)".
    pub needed_by: Vec<String>,
    /// What they need it for.
    pub purpose: String,
}

/// The capabilities a process lacks for its probes' mechanisms.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MissingPrivileges {
    /// Each missing capability, with the mechanisms that need it (a
    /// capability needed for two purposes comes twice).
    pub missing: Vec<MissingCapability>,
    /// The capabilities that matter here that the process does have.
    pub held: Vec<&'static str>,
    /// The file capabilities that give a binary with these probes what it
    /// needs, in `setcap`'s syntax (`cap_bpf,cap_perfmon+ep`).
    pub setcap: String,
    /// What else would do, instead of or besides capabilities (mount
    /// tracefs, a sysctl).
    pub also: Vec<String>,
}

impl MissingPrivileges {
    /// The missing capabilities' names, each once.
    pub fn capabilities(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = Vec::new();
        for m in &self.missing {
            if !names.contains(&m.capability) {
                names.push(m.capability);
            }
        }
        names
    }
}

impl fmt::Display for MissingPrivileges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "missing privileges: this process lacks {} ({})",
            join_and(&self.capabilities()),
            if self.held.is_empty() {
                "it holds none of the capabilities its probes need".to_owned()
            } else {
                format!("it has {}", join_and(&self.held))
            }
        )?;
        for m in &self.missing {
            // Every mechanism's name is plural: "need".
            write!(
                f,
                ". {}: {} need it {}",
                m.capability,
                join_and(&m.needed_by),
                m.purpose
            )?;
        }
        for also in &self.also {
            write!(f, ". {also}")?;
        }
        write!(
            f,
            ". Grant the service's binary what its probes need with `setcap {} <binary>` \
             (or run it as root)",
            self.setcap
        )
    }
}

/// `a`, `a and b`, `a, b and c`.
fn join_and<S: AsRef<str>>(items: &[S]) -> String {
    match items {
        [] => String::new(),
        [one] => one.as_ref().to_owned(),
        [init @ .., last] => format!(
            "{} and {}",
            init.iter()
                .map(AsRef::as_ref)
                .collect::<Vec<_>>()
                .join(", "),
            last.as_ref()
        ),
    }
}

/// What these probes lack, given what was found out. Pure, so every
/// combination is unit-tested.
pub(crate) fn check(needs: &Needs, facts: &Facts) -> Result<(), MissingPrivileges> {
    let has = |cap: u32| facts.cap_eff & (1u64 << cap) != 0;
    let describe = |list: &[&Need]| list.iter().map(|n| n.describe()).collect::<Vec<_>>();
    let all: Vec<&Need> = needs.mechanisms.iter().collect();
    let syscalls = needs.uses(Mechanism::SyscallSources);
    // CAP_SYS_ADMIN passes bpf_capable(), perfmon_capable() and every perf
    // restriction.
    let admin = has(CAP_SYS_ADMIN);
    let mut missing = Vec::new();
    let mut also = Vec::new();
    if !all.is_empty() && !admin && !has(CAP_BPF) {
        missing.push(MissingCapability {
            capability: "CAP_BPF",
            needed_by: describe(&all),
            purpose: "to create BPF maps and load BPF programs".to_owned(),
        });
    }
    let perfmon = admin || has(CAP_PERFMON);
    if !all.is_empty() && !perfmon {
        missing.push(MissingCapability {
            capability: "CAP_PERFMON",
            needed_by: describe(&all),
            purpose: "to load tracing programs and read kernel memory".to_owned(),
        });
    }

    // tracefs: the syscall formats, and the traceable functions for patterns.
    let dac = has(CAP_DAC_READ_SEARCH) || has(CAP_DAC_OVERRIDE);
    let readers = [
        (
            syscalls,
            &facts.syscall_formats,
            "to read their formats and event ids in tracefs",
        ),
        (
            needs.pattern.as_ref(),
            &facts.filter_functions,
            "to read in tracefs which functions the kernel can trace \
             (available_filter_functions, so that a pattern leaves out those it cannot)",
        ),
    ];
    for (need, access, what) in readers {
        let Some(need) = need else { continue };
        match access {
            TracefsAccess::Refused { path, errno } if *errno == libc::EACCES && !dac => {
                missing.push(MissingCapability {
                    capability: "CAP_DAC_READ_SEARCH",
                    needed_by: describe(&[need]),
                    purpose: format!(
                        "{what}, which only root may read here ({}: {})",
                        path.display(),
                        std::io::Error::from_raw_os_error(*errno)
                    ),
                });
            }
            TracefsAccess::NotMounted { path } if !admin => {
                missing.push(MissingCapability {
                    capability: "CAP_SYS_ADMIN",
                    needed_by: describe(&[need]),
                    purpose: format!("{what}, and to mount it at {}", path.display()),
                });
                let mount = format!(
                    "Rather than granting CAP_SYS_ADMIN, mount tracefs before the service \
                     starts (`mount -t tracefs tracefs {}`, or an /etc/fstab line)",
                    path.display()
                );
                if !also.contains(&mount) {
                    also.push(mount);
                }
            }
            // Readable; or refused although the process may bypass file
            // permissions: not a capability (a security module?), reading
            // it says so.
            _ => {}
        }
    }

    // Perf events: every syscall tracepoint, and kprobes unless they go
    // through kprobe.multi links. A process without CAP_PERFMON was told
    // above; one with it that is refused meets a stricter kernel.
    let mut perf_users: Vec<&Need> = syscalls.into_iter().collect();
    if !facts.kprobe_multi {
        perf_users.extend(needs.uses(Mechanism::Kprobes));
    }
    let paranoid = facts
        .perf_event_paranoid
        .map_or_else(|| "?".to_owned(), |p| p.to_string());
    match facts.perf_events {
        Err(errno) if errno == libc::EACCES && !perf_users.is_empty() && !admin => {
            if perfmon {
                missing.push(MissingCapability {
                    capability: "CAP_SYS_ADMIN",
                    needed_by: describe(&perf_users),
                    purpose: format!(
                        "to open perf events, which this kernel refuses to CAP_PERFMON at \
                         kernel.perf_event_paranoid = {paranoid} (Debian's kernels reserve \
                         them for CAP_SYS_ADMIN above 2)"
                    ),
                });
                also.push(format!(
                    "Rather than granting CAP_SYS_ADMIN, {PERF_PARANOID_FIX}"
                ));
            } else if facts.perf_event_paranoid.is_some_and(|p| p > 2) {
                also.push(format!(
                    "kernel.perf_event_paranoid is {paranoid} here: where that keeps perf \
                     events from CAP_PERFMON (Debian's kernels), {PERF_PARANOID_FIX}"
                ));
            }
        }
        _ => {}
    }

    if missing.is_empty() {
        return Ok(());
    }
    let mut relevant = vec![(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")];
    if needs.reads_tracefs() {
        relevant.push((CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH"));
    }
    relevant.push((CAP_SYS_ADMIN, "CAP_SYS_ADMIN"));
    Err(MissingPrivileges {
        missing,
        held: relevant
            .iter()
            .filter(|(c, _)| has(*c))
            .map(|(_, n)| *n)
            .collect(),
        setcap: setcap_set(needs),
        also,
    })
}

/// The least file capabilities for `needs`, in `setcap`'s syntax (where
/// perf events are CAP_PERFMON's: see [`PERF_PARANOID_FIX`]).
pub(crate) fn setcap_set(needs: &Needs) -> String {
    if needs.reads_tracefs() {
        "cap_bpf,cap_perfmon,cap_dac_read_search+ep".to_owned()
    } else {
        "cap_bpf,cap_perfmon+ep".to_owned()
    }
}

/// The check `start` makes first: the probes' mechanisms against this
/// process's capabilities, tracefs and perf events, each tried only where
/// a probe needs it.
pub(crate) fn check_start(probes: &[&Probe]) -> Result<(), MissingPrivileges> {
    let needs = needs(probes);
    if needs.mechanisms.is_empty() {
        return Ok(());
    }
    let events = tracefs::syscall_events();
    let formats: Vec<PathBuf> = probes
        .iter()
        .filter(|p| p.spec.mode == Mode::Syscall)
        .map(|p| events.join(format!("sys_enter_{}/format", p.spec.function)))
        .collect();
    let filter_functions = if needs.pattern.is_some() {
        vec![Path::new(tracefs::TRACEFS).join("available_filter_functions")]
    } else {
        Vec::new()
    };
    let kprobes = needs.uses(Mechanism::Kprobes).is_some();
    let perf_users = kprobes || needs.uses(Mechanism::SyscallSources).is_some();
    let perf_events = if perf_users {
        sys::open_perf_event()
    } else {
        Ok(())
    };
    let facts = Facts {
        cap_eff: effective(),
        syscall_formats: tracefs_access(&formats),
        filter_functions: tracefs_access(&filter_functions),
        perf_events,
        perf_event_paranoid: std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
            .ok()
            .and_then(|s| parse_paranoid(&s)),
        // Only asked when it matters: a refused perf event and kprobes.
        kprobe_multi: kprobes && perf_events.is_err() && kernel_has_fprobe(),
    };
    check(&needs, &facts)
}

/// Whether the kernel has fprobe (kprobe.multi), as `KernelCapabilities`
/// decides it: a `register_fprobe` function in its BTF. A search for the
/// name in the string section, without parsing the BTF (read again, parsed,
/// a moment later by `start`).
fn kernel_has_fprobe() -> bool {
    std::fs::read(KERNEL_BTF).is_ok_and(|btf| {
        btf.windows(b"\0register_fprobe\0".len())
            .any(|w| w == b"\0register_fprobe\0")
    })
}

/// Whether `cap_eff` may load tracing programs at all (for `kspan doctor`
/// and the capability probe); `Err` says what is missing.
pub(crate) fn check_tracing_caps(cap_eff: u64) -> Result<(), String> {
    let needs = Needs {
        mechanisms: vec![Need {
            mechanism: Mechanism::Auto,
            mode: Mode::Auto,
            function: "*",
        }],
        pattern: None,
    };
    check(
        &needs,
        &Facts {
            cap_eff,
            syscall_formats: TracefsAccess::Readable,
            filter_functions: TracefsAccess::Readable,
            perf_events: Ok(()),
            perf_event_paranoid: None,
            kprobe_multi: false,
        },
    )
    .map_err(|e| {
        format!(
            "needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); the process lacks {}",
            join_and(&e.capabilities())
        )
    })
}

/// Reads `CapEff` from `/proc/self/status` text.
pub(crate) fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// The level of `/proc/sys/kernel/perf_event_paranoid` text.
pub(crate) fn parse_paranoid(text: &str) -> Option<i32> {
    text.trim().parse().ok()
}

/// This process's effective capabilities; all assumed present when they cannot
/// be read (the kernel will then say no itself, with its errno).
pub(crate) fn effective() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_cap_eff(&s))
        .unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BPF: u64 = 1 << CAP_BPF;
    const PERFMON: u64 = 1 << CAP_PERFMON;
    const DAC: u64 = 1 << CAP_DAC_READ_SEARCH;
    const ADMIN: u64 = 1 << CAP_SYS_ADMIN;

    fn need(mechanism: Mechanism, mode: Mode, function: &'static str) -> Need {
        Need {
            mechanism,
            mode,
            function,
        }
    }

    fn fexit() -> Need {
        need(Mechanism::Trampolines, Mode::Fexit, "vfs_read")
    }

    fn kretprobe() -> Need {
        need(Mechanism::Kprobes, Mode::Kretprobe, "tcp_sendmsg")
    }

    fn syscall() -> Need {
        need(Mechanism::SyscallSources, Mode::Syscall, "openat")
    }

    fn only(list: &[Need]) -> Needs {
        Needs {
            mechanisms: list.to_vec(),
            pattern: None,
        }
    }

    fn refused() -> TracefsAccess {
        TracefsAccess::Refused {
            path: "/sys/kernel/tracing/events/syscalls/sys_enter_openat/format".into(),
            errno: libc::EACCES,
        }
    }

    fn missing(e: &MissingPrivileges) -> Vec<&'static str> {
        e.missing.iter().map(|m| m.capability).collect()
    }

    /// Debian's default: perf events refused to CAP_PERFMON.
    fn debian(cap_eff: u64) -> Facts {
        Facts {
            perf_events: Err(libc::EACCES),
            perf_event_paranoid: Some(3),
            ..Facts::all_allowed(cap_eff)
        }
    }

    #[test]
    fn parses_cap_eff() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(parse_cap_eff(status), Some(0x1ff_ffff_ffff));
        assert_eq!(parse_cap_eff("Name: x\n"), None);
    }

    #[test]
    fn trampolines_and_kprobes_need_bpf_and_perfmon() {
        for n in [fexit(), kretprobe(), need(Mechanism::Auto, Mode::Auto, "f")] {
            let needs = only(&[n]);
            assert_eq!(check(&needs, &Facts::all_allowed(BPF | PERFMON)), Ok(()));
            assert_eq!(
                check(&needs, &Facts::all_allowed(ADMIN)),
                Ok(()),
                "CAP_SYS_ADMIN stands in"
            );
            // tracefs is no business of theirs.
            let tracefs_refused = Facts {
                syscall_formats: refused(),
                filter_functions: refused(),
                ..Facts::all_allowed(BPF | PERFMON)
            };
            assert_eq!(check(&needs, &tracefs_refused), Ok(()));
            let e = check(&needs, &Facts::all_allowed(BPF)).unwrap_err();
            assert_eq!(missing(&e), ["CAP_PERFMON"]);
            assert_eq!(e.held, ["CAP_BPF"]);
            assert_eq!(e.setcap, "cap_bpf,cap_perfmon+ep");
            let e = check(&needs, &Facts::all_allowed(PERFMON)).unwrap_err();
            assert_eq!(missing(&e), ["CAP_BPF"]);
            let e = check(&needs, &Facts::all_allowed(0)).unwrap_err();
            assert_eq!(missing(&e), ["CAP_BPF", "CAP_PERFMON"]);
        }
    }

    #[test]
    fn the_message_names_the_capability_the_mechanism_and_the_fix() {
        let e = check(&only(&[fexit()]), &Facts::all_allowed(BPF))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "missing privileges: this process lacks CAP_PERFMON (it has CAP_BPF). CAP_PERFMON: \
             BPF trampolines (fexit `vfs_read`) need it to load tracing programs and read \
             kernel memory. Grant the service's binary what its probes need with `setcap \
             cap_bpf,cap_perfmon+ep <binary>` (or run it as root)"
        );
        let e = check(&only(&[kretprobe()]), &Facts::all_allowed(0))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "missing privileges: this process lacks CAP_BPF and CAP_PERFMON (it holds none \
                 of the capabilities its probes need). CAP_BPF: kprobes (kretprobe \
                 `tcp_sendmsg`) need it to create BPF maps and load BPF programs. CAP_PERFMON: \
                 kprobes (kretprobe `tcp_sendmsg`) need it"
            ),
            "{e}"
        );
        assert_eq!(join_and(&["a", "b", "c"]), "a, b and c");
    }

    #[test]
    fn syscall_sources_also_need_to_read_tracefs() {
        let needs = only(&[syscall()]);
        let with = |cap_eff, syscall_formats| Facts {
            syscall_formats,
            ..Facts::all_allowed(cap_eff)
        };
        let all = BPF | PERFMON | DAC;
        assert_eq!(check(&needs, &with(all, TracefsAccess::Readable)), Ok(()));
        // Readable without the capability (a tracefs mounted with gid=, or
        // root without it): nothing missing.
        assert_eq!(
            check(&needs, &with(BPF | PERFMON, TracefsAccess::Readable)),
            Ok(())
        );
        let e = check(&needs, &with(BPF | PERFMON, refused())).unwrap_err();
        assert_eq!(missing(&e), ["CAP_DAC_READ_SEARCH"]);
        assert_eq!(e.setcap, "cap_bpf,cap_perfmon,cap_dac_read_search+ep");
        let text = e.to_string();
        assert!(
            text.contains(
                "lacks CAP_DAC_READ_SEARCH (it has CAP_BPF and CAP_PERFMON). \
                 CAP_DAC_READ_SEARCH: syscall sources (`openat`) need it to read their formats \
                 and event ids in tracefs, which only root may read here \
                 (/sys/kernel/tracing/events/syscalls/sys_enter_openat/format: Permission \
                 denied"
            ),
            "{text}"
        );
        // CAP_DAC_OVERRIDE would have let the opening through; one held but
        // refused all the same is not a capability problem.
        assert_eq!(check(&needs, &with(all, refused())), Ok(()));
        let e = check(&needs, &with(DAC, refused())).unwrap_err();
        assert_eq!(missing(&e), ["CAP_BPF", "CAP_PERFMON"]);
        let e = check(&needs, &with(0, refused())).unwrap_err();
        assert_eq!(
            missing(&e),
            ["CAP_BPF", "CAP_PERFMON", "CAP_DAC_READ_SEARCH"]
        );
        // EPERM is not file permissions.
        let eperm = TracefsAccess::Refused {
            path: "/x".into(),
            errno: libc::EPERM,
        };
        assert_eq!(check(&needs, &with(BPF | PERFMON, eperm)), Ok(()));
    }

    #[test]
    fn unmounted_tracefs_needs_mounting() {
        let not_mounted = Facts {
            syscall_formats: TracefsAccess::NotMounted {
                path: "/sys/kernel/tracing".into(),
            },
            ..Facts::all_allowed(BPF | PERFMON | DAC)
        };
        let e = check(&only(&[syscall()]), &not_mounted).unwrap_err();
        assert_eq!(missing(&e), ["CAP_SYS_ADMIN"]);
        let text = e.to_string();
        assert!(
            text.contains(
                "mount tracefs before the service starts (`mount -t tracefs tracefs \
                 /sys/kernel/tracing`"
            ),
            "{text}"
        );
        let admin = Facts {
            cap_eff: ADMIN,
            ..not_mounted.clone()
        };
        assert_eq!(check(&only(&[syscall()]), &admin), Ok(()));
        assert_eq!(check(&only(&[fexit()]), &not_mounted), Ok(()));
    }

    #[test]
    fn patterns_read_the_traceable_functions() {
        let pattern = need(Mechanism::Trampolines, Mode::Fexit, "vfs_*");
        let needs = Needs {
            mechanisms: vec![pattern],
            pattern: Some(pattern),
        };
        let refused = Facts {
            filter_functions: TracefsAccess::Refused {
                path: "/sys/kernel/tracing/available_filter_functions".into(),
                errno: libc::EACCES,
            },
            ..Facts::all_allowed(BPF | PERFMON)
        };
        let e = check(&needs, &refused).unwrap_err();
        assert_eq!(missing(&e), ["CAP_DAC_READ_SEARCH"]);
        assert_eq!(e.setcap, "cap_bpf,cap_perfmon,cap_dac_read_search+ep");
        assert!(
            e.to_string().contains(
                "CAP_DAC_READ_SEARCH: BPF trampolines (fexit `vfs_*`) need it to read in \
                 tracefs which functions the kernel can trace (available_filter_functions, so \
                 that a pattern leaves out those it cannot), which only root may read here"
            ),
            "{e}"
        );
        // A locked-down function tracer refuses root too (EPERM): nothing
        // a capability changes.
        let locked = Facts {
            filter_functions: TracefsAccess::Refused {
                path: "/x".into(),
                errno: libc::EPERM,
            },
            ..Facts::all_allowed(BPF | PERFMON)
        };
        assert_eq!(check(&needs, &locked), Ok(()));
        assert_eq!(check(&only(&[fexit()]), &refused), Ok(()));
    }

    #[test]
    fn perf_events_where_the_kernel_keeps_them_from_perfmon() {
        let caps = BPF | PERFMON | DAC;
        // Syscall sources open a perf event per tracepoint.
        let e = check(&only(&[syscall()]), &debian(caps)).unwrap_err();
        assert_eq!(missing(&e), ["CAP_SYS_ADMIN"]);
        let text = e.to_string();
        assert!(
            text.contains(
                "CAP_SYS_ADMIN: syscall sources (`openat`) need it to open perf events, which \
                 this kernel refuses to CAP_PERFMON at kernel.perf_event_paranoid = 3"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "Rather than granting CAP_SYS_ADMIN, `sysctl -w kernel.perf_event_paranoid=2`"
            ),
            "{text}"
        );
        assert_eq!(check(&only(&[syscall()]), &debian(ADMIN)), Ok(()));
        // kprobes too, unless they go through kprobe.multi links.
        let e = check(&only(&[kretprobe()]), &debian(BPF | PERFMON)).unwrap_err();
        assert_eq!(missing(&e), ["CAP_SYS_ADMIN"]);
        assert_eq!(
            e.missing[0].needed_by,
            ["kprobes (kretprobe `tcp_sendmsg`)"]
        );
        let multi = Facts {
            kprobe_multi: true,
            ..debian(BPF | PERFMON)
        };
        assert_eq!(check(&only(&[kretprobe()]), &multi), Ok(()));
        // Trampolines open no perf event.
        assert_eq!(check(&only(&[fexit()]), &debian(BPF | PERFMON)), Ok(()));
        // Without CAP_PERFMON, that is what is named, with a hint.
        let e = check(&only(&[syscall()]), &debian(BPF | DAC)).unwrap_err();
        assert_eq!(missing(&e), ["CAP_PERFMON"]);
        assert!(
            e.to_string()
                .contains("kernel.perf_event_paranoid is 3 here"),
            "{e}"
        );
    }

    #[test]
    fn every_mechanism_in_use_is_named() {
        let needs = only(&[fexit(), syscall()]);
        let facts = Facts {
            syscall_formats: refused(),
            ..Facts::all_allowed(BPF)
        };
        let e = check(&needs, &facts).unwrap_err();
        assert_eq!(missing(&e), ["CAP_PERFMON", "CAP_DAC_READ_SEARCH"]);
        assert_eq!(
            e.missing[0].needed_by,
            [
                "BPF trampolines (fexit `vfs_read`)",
                "syscall sources (`openat`)"
            ]
        );
        assert_eq!(e.missing[1].needed_by, ["syscall sources (`openat`)"]);
        assert_eq!(e.setcap, "cap_bpf,cap_perfmon,cap_dac_read_search+ep");
        assert!(e.to_string().contains(
            "CAP_PERFMON: BPF trampolines (fexit `vfs_read`) and syscall sources (`openat`) \
             need it to"
        ));
        assert_eq!(
            check(&Needs::default(), &debian(0)),
            Ok(()),
            "no probes, no needs"
        );
    }

    #[test]
    fn needs_are_read_from_the_probes_modes() {
        use crate::annotation::ProbeSpec;
        fn probe(function: &'static str, mode: Mode) -> &'static Probe {
            Box::leak(Box::new(Probe {
                spec: ProbeSpec {
                    function,
                    alternatives: &[],
                    optional: false,
                    mode,
                    params: &[],
                    ret: None,
                    errno: false,
                    filter: crate::annotation::FilterSpec::NONE,
                    sum: false,
                    spans: true,
                    histogram: false,
                    location: "here",
                },
                handler: |_, _| {},
            }))
        }
        let probes = [
            probe("vfs_read", Mode::Fexit),
            probe("vfs_write", Mode::Fentry),
            probe("openat", Mode::Syscall),
            probe("tcp_sendmsg", Mode::Kretprobe),
            probe("tcp_*", Mode::Kprobe),
        ];
        let needs = needs(&probes);
        assert_eq!(needs.mechanisms, [fexit(), syscall(), kretprobe()]);
        assert_eq!(
            needs.pattern,
            Some(need(Mechanism::Kprobes, Mode::Kprobe, "tcp_*"))
        );
    }

    #[test]
    fn doctor_summary() {
        assert!(check_tracing_caps(BPF | PERFMON).is_ok());
        assert!(check_tracing_caps(ADMIN).is_ok());
        assert_eq!(
            check_tracing_caps(BPF).unwrap_err(),
            "needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); the process lacks CAP_PERFMON"
        );
    }
}
