// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What the running kernel offers, probed once and cached.
//!
//! Each mechanism is checked without side effects on the traced system:
//! files that exist exactly when a kernel feature is built in (the kprobe PMU,
//! the fprobe functions behind kprobe.multi, tracefs), the capability set,
//! and for trampolines the real thing short of attaching: the smallest fentry
//! program is loaded against a function and unloaded, so the kernel's errno
//! (EPERM on a locked-down kernel) is what is reported, and an expected
//! refusal writes nothing to libbpf's log; the preemption model from the
//! kernel's files. `auto` mode and `kspan doctor` read the same record.

use std::path::Path;
use std::sync::OnceLock;

use libbpf_rs::libbpf_sys;

use super::sys::KPROBE_PMU;
use crate::annotation::Hook;
use crate::kernel::btf::Btf;
use crate::kernel::errno;
use crate::kernel::preemption::Preemption;
use crate::kernel::tracefs::TRACEFS;
use crate::kernel::{privileges, read_btf, KERNEL_BTF};

/// Whether a mechanism is usable, and if not why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Feature {
    /// Usable.
    Available,
    /// Not usable: why, with the kernel's errno when it said no.
    Unavailable {
        /// What was found.
        reason: String,
        /// The errno, when a system call refused.
        errno: Option<i32>,
    },
}

impl Feature {
    /// Whether it is usable.
    pub fn is_available(&self) -> bool {
        matches!(self, Feature::Available)
    }

    fn no(reason: impl Into<String>) -> Feature {
        Feature::Unavailable {
            reason: reason.into(),
            errno: None,
        }
    }
}

impl std::fmt::Display for Feature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Feature::Available => f.write_str("available"),
            Feature::Unavailable {
                reason,
                errno: Some(e),
            } => write!(f, "unavailable: {reason} ({})", errno::name(i64::from(*e))),
            Feature::Unavailable {
                reason,
                errno: None,
            } => write!(f, "unavailable: {reason}"),
        }
    }
}

/// The kernel's tracing mechanisms, as probed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelCapabilities {
    /// Kernel BTF at `/sys/kernel/btf/vmlinux`.
    pub btf: Feature,
    /// CAP_BPF + CAP_PERFMON or CAP_SYS_ADMIN.
    pub privileges: Feature,
    /// BPF trampolines (fentry/fexit).
    pub trampolines: Feature,
    /// kprobes and kretprobes.
    pub kprobes: Feature,
    /// kprobe.multi links (many functions in one attach).
    pub kprobe_multi: Feature,
    /// fsession (Linux 7.0+): one trampoline program and link for both
    /// ends of a function, where fentry + fexit take two.
    pub trampoline_sessions: Feature,
    /// fsession.multi (Linux 7.2+): one trampoline link for many functions.
    pub trampoline_multi: Feature,
    /// kprobe.session (Linux 6.10+): one kprobe.multi program for both
    /// ends.
    pub kprobe_sessions: Feature,
    /// Tracepoints (syscall sources), through tracefs.
    pub tracepoints: Feature,
    /// BTF tracepoints (`tp_btf`) on the scheduler's tracepoints: what the
    /// scheduler's account attaches with where it can (see
    /// [`crate::sched`]); classic tracepoints otherwise.
    pub btf_tracepoints: Feature,
    /// Task storage holding pointers into user memory that the kernel pins
    /// (uptr, Linux 6.13+): each thread's context record is registered
    /// there, and programs read it with plain loads instead of copying it
    /// from user memory at each call that starts a tree.
    pub context_records: Feature,
    /// The kernel's preemption model: where it preempts inside trampoline
    /// programs, `auto` takes kprobes (see
    /// [`crate::kernel::preemption`]).
    pub preemption: Preemption,
    /// What kspan's trampoline and BTF tracepoint programs may use beyond
    /// Linux 5.8's BPF; where something is missing they do the same job
    /// an older way.
    pub tracing_programs: ProgramFeatures,
    /// The same for its kprobe programs.
    pub kprobe_programs: ProgramFeatures,
    /// The same for its classic tracepoint programs (syscall sources, the
    /// account where BTF tracepoints are refused).
    pub tracepoint_programs: ProgramFeatures,
    /// BPF memory charged to the memory cgroup (Linux 5.11); before, to
    /// the process's `RLIMIT_MEMLOCK`, which a service without
    /// `CAP_SYS_RESOURCE` must have raised for kspan's maps. Probed as
    /// libbpf does: by a helper of the same release
    /// (`bpf_ktime_get_coarse_ns`).
    pub memcg_accounting: Feature,
    /// Atomics that return a value (BPF_FETCH, Linux 5.12). With
    /// `bpf_loop`, what kspan's programs are built with; a kernel lacking
    /// either refuses them whole, so the same programs built without both
    /// are loaded there ([`KernelCapabilities::legacy_programs`]).
    pub fetch_atomics: Feature,
}

/// Helpers and map types a kind of kspan program may use, each probed by
/// loading a program that calls it (never read off the kernel's version:
/// vendor kernels backport BPF). Where one is missing the programs do the
/// same job an older way, at some cost, said by [`ProgramFeatures::fallbacks`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProgramFeatures {
    /// `bpf_get_current_task_btf` (Linux 5.11): typed reads of the task;
    /// else `bpf_probe_read_kernel`.
    pub current_task_btf: Feature,
    /// Task local storage (Linux 5.11; map type and helper): the
    /// per-thread stacks of open calls; else a map by thread id, emptied
    /// at each thread's exit.
    pub task_storage: Feature,
    /// `bpf_get_func_arg` and `_ret` (Linux 5.17, trampolines): else the
    /// trampoline's context at offsets from the function's BTF prototype.
    pub func_args: Feature,
    /// `bpf_loop` (Linux 5.17): else bounded loops, which the verifier
    /// walks once per iteration (a longer load).
    pub loops: Feature,
    /// `bpf_task_pt_regs` (Linux 5.15): a task's user registers, for the
    /// account's system call of a wait.
    pub task_pt_regs: Feature,
    /// `bpf_get_attach_cookie` (Linux 5.15 for kprobes, 6.0 for
    /// trampolines): one program serves many functions; else a program
    /// per function, its probe id a setting.
    pub attach_cookies: Feature,
}

impl ProgramFeatures {
    /// All of them (a 5.17+ kernel's).
    #[cfg(test)]
    pub(crate) fn all() -> Self {
        ProgramFeatures {
            current_task_btf: Feature::Available,
            task_storage: Feature::Available,
            func_args: Feature::Available,
            loops: Feature::Available,
            task_pt_regs: Feature::Available,
            attach_cookies: Feature::Available,
        }
    }

    /// None of them: what a program type the kernel refuses gets.
    fn none(why: &str) -> Self {
        ProgramFeatures {
            current_task_btf: Feature::no(why),
            task_storage: Feature::no(why),
            func_args: Feature::no(why),
            loops: Feature::no(why),
            task_pt_regs: Feature::no(why),
            attach_cookies: Feature::no(why),
        }
    }

    /// `enum kspan_kernel_feature` bits: what the programs' settings say.
    pub(crate) fn bits(&self) -> u32 {
        use kspan_bpf::consts as c;
        [
            (&self.current_task_btf, c::KSPAN_KF_TASK_BTF),
            (&self.task_storage, c::KSPAN_KF_TASK_STORAGE),
            (&self.func_args, c::KSPAN_KF_FUNC_ARGS),
            (&self.task_pt_regs, c::KSPAN_KF_TASK_PT_REGS),
        ]
        .into_iter()
        .filter(|(f, _)| f.is_available())
        .fold(0, |bits, (_, bit)| bits | bit as u32)
    }

    /// Each missing feature with what kspan does instead, one line each.
    pub fn fallbacks(&self) -> Vec<String> {
        [
            (
                &self.current_task_btf,
                "bpf_get_current_task_btf",
                "the task read through bpf_probe_read_kernel",
            ),
            (
                &self.task_storage,
                "task local storage",
                "open calls kept by thread id, emptied at each thread's exit",
            ),
            (
                &self.func_args,
                "bpf_get_func_arg/_ret",
                "arguments and return value read at offsets from the function's BTF prototype",
            ),
            (
                &self.loops,
                "bpf_loop",
                "bounded loops (each program takes longer to load)",
            ),
            (
                &self.task_pt_regs,
                "bpf_task_pt_regs",
                "a wait's system call not read (the account's sleeping time by system call)",
            ),
            (
                &self.attach_cookies,
                "bpf_get_attach_cookie",
                "a program per function",
            ),
        ]
        .into_iter()
        .filter_map(|(f, name, instead)| match f {
            Feature::Available => None,
            no => Some(format!("{name}: {no}; instead: {instead}")),
        })
        .collect()
    }
}

/// The helpers a program of `prog_type` may call, by loading one that
/// calls each (`attach` as [`super::sys::probe_helper`] takes it).
///
/// `trampoline`: for tracing programs, a function to load an fentry
/// program against (`bpf_get_func_arg` is a trampoline's alone, not a BTF
/// tracepoint's).
fn probe_program_features(
    prog_type: libbpf_sys::bpf_prog_type,
    attach: Option<(libbpf_sys::bpf_attach_type, u32)>,
    trampoline: Option<u32>,
    what: &str,
) -> ProgramFeatures {
    let (attach_type, btf_id) = attach.unwrap_or((0, 0));
    let mut refused = None;
    let mut helper = |id: libbpf_sys::bpf_func_id, name: &str, since: &str| {
        match super::sys::probe_helper(prog_type, attach_type, btf_id, id) {
            Ok(true) => Feature::Available,
            Ok(false) => Feature::no(format!(
                "the verifier does not know {name} in {what} programs ({since}; a program calling it was refused)"
            )),
            Err(e) => {
                refused.get_or_insert(e.raw_os_error());
                Feature::Unavailable {
                    reason: format!("{what} programs were refused: not probed"),
                    errno: e.raw_os_error(),
                }
            }
        }
    };
    let current_task_btf = helper(
        libbpf_sys::BPF_FUNC_get_current_task_btf,
        "bpf_get_current_task_btf",
        "Linux 5.11+",
    );
    let mut task_storage = helper(
        libbpf_sys::BPF_FUNC_task_storage_get,
        "bpf_task_storage_get",
        "Linux 5.11+",
    );
    let func_args = match trampoline {
        Some(btf_id) => match super::sys::probe_helper(
            prog_type,
            libbpf_sys::BPF_TRACE_FENTRY,
            btf_id,
            libbpf_sys::BPF_FUNC_get_func_arg,
        ) {
            Ok(true) => Feature::Available,
            Ok(false) => Feature::no(
                "the verifier does not know bpf_get_func_arg in trampoline programs (Linux \
                 5.17+; a program calling it was refused)",
            ),
            Err(e) => Feature::Unavailable {
                reason: "trampoline programs were refused: not probed".to_owned(),
                errno: e.raw_os_error(),
            },
        },
        None if prog_type == libbpf_sys::BPF_PROG_TYPE_TRACING => {
            Feature::no("no trampolines: not probed")
        }
        None => Feature::no("only trampoline programs read arguments through helpers"),
    };
    let loops = helper(libbpf_sys::BPF_FUNC_loop, "bpf_loop", "Linux 5.17+");
    let task_pt_regs = helper(
        libbpf_sys::BPF_FUNC_task_pt_regs,
        "bpf_task_pt_regs",
        "Linux 5.15+",
    );
    let attach_cookies = helper(
        libbpf_sys::BPF_FUNC_get_attach_cookie,
        "bpf_get_attach_cookie",
        "Linux 5.15+ for kprobes, 6.0+ for trampolines",
    );
    if task_storage.is_available() {
        // SAFETY: a plain libbpf call with no pointers (null options).
        let map = unsafe {
            libbpf_sys::libbpf_probe_bpf_map_type(
                libbpf_sys::BPF_MAP_TYPE_TASK_STORAGE,
                std::ptr::null(),
            )
        };
        if map != 1 {
            task_storage = Feature::Unavailable {
                reason: "the kernel refused a task storage map (Linux 5.11+)".to_owned(),
                errno: (map < 0).then_some(-map),
            };
        }
    }
    ProgramFeatures {
        current_task_btf,
        task_storage,
        func_args,
        loops,
        task_pt_regs,
        attach_cookies,
    }
}

impl KernelCapabilities {
    /// The capabilities of this kernel, probed on first use.
    pub fn get() -> &'static KernelCapabilities {
        Self::cached(|| read_btf(Path::new(KERNEL_BTF)).map_err(|e| e.to_string()))
    }

    /// The cached capabilities, probed with the BTF `btf` gives on first
    /// use: `start` hands over the BTF it has parsed already.
    pub(crate) fn cached<B: std::borrow::Borrow<Btf>>(
        btf: impl FnOnce() -> Result<B, String>,
    ) -> &'static KernelCapabilities {
        static CAPS: OnceLock<KernelCapabilities> = OnceLock::new();
        CAPS.get_or_init(|| {
            let btf = btf();
            KernelCapabilities::probe_with(btf.as_ref().map(|b| b.borrow()))
        })
    }

    /// Probes now (prefer [`KernelCapabilities::get`]).
    pub fn probe() -> KernelCapabilities {
        let btf = read_btf(Path::new(KERNEL_BTF)).map_err(|e| e.to_string());
        Self::probe_with(btf.as_ref())
    }

    /// Probes now, with the kernel's BTF already read (or why it could not
    /// be).
    pub(crate) fn probe_with(btf: Result<&Btf, &String>) -> KernelCapabilities {
        let privileges = match privileges::check_tracing_caps(privileges::effective()) {
            Ok(()) => Feature::Available,
            Err(why) => Feature::no(why),
        };
        let trampolines = match (&btf, &privileges) {
            (Err(e), _) => Feature::no(format!("no kernel BTF to attach against: {e}")),
            (_, Feature::Unavailable { .. }) => Feature::no("not probed: missing privileges"),
            (Ok(btf), Feature::Available) => probe_trampolines(btf),
        };
        let kprobes = if Path::new(KPROBE_PMU).exists() {
            Feature::Available
        } else {
            Feature::no(format!(
                "no kprobe PMU at {KPROBE_PMU} (kernel built without CONFIG_KPROBES)"
            ))
        };
        let kprobe_multi = match (&btf, &kprobes) {
            (_, Feature::Unavailable { .. }) => Feature::no("no kprobes"),
            (Ok(btf), _) if btf.function("register_fprobe").is_some() => Feature::Available,
            (Ok(_), _) => {
                Feature::no("kernel built without CONFIG_FPROBE (no register_fprobe in BTF)")
            }
            (Err(_), _) => Feature::no("no kernel BTF to look for fprobe"),
        };
        let (trampoline_sessions, trampoline_multi) = match (&btf, &trampolines) {
            (Ok(btf), Feature::Available) => probe_sessions(btf),
            _ => (Feature::no("no trampolines"), Feature::no("no trampolines")),
        };
        let kprobe_sessions = match (&btf, &kprobe_multi) {
            (_, Feature::Unavailable { .. }) => Feature::no("no kprobe.multi"),
            (Ok(btf), _) if btf.function("bpf_session_is_return").is_some() => Feature::Available,
            (Ok(_), _) => Feature::no("kernel before 6.10 (no bpf_session_is_return kfunc in BTF)"),
            (Err(_), _) => Feature::no("no kernel BTF to look for kprobe.session"),
        };
        let events = Path::new(TRACEFS).join("events");
        let tracepoints = match std::fs::metadata(&events) {
            Ok(_) => Feature::Available,
            // Mounted, but root's only (the mount point is 0700).
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Feature::Unavailable {
                reason: format!(
                    "tracefs at {TRACEFS} is not readable by this process: syscall sources \
                     need CAP_DAC_READ_SEARCH (or a tracefs readable by the service's user)"
                ),
                errno: e.raw_os_error(),
            },
            Err(_) if Path::new(TRACEFS).exists() => Feature::no(format!(
                "tracefs is not mounted at {TRACEFS} (kspan mounts it when a syscall source needs it)"
            )),
            Err(_) => Feature::no("the kernel has no tracefs"),
        };
        let btf_tracepoints = match (&btf, &privileges) {
            (Err(e), _) => Feature::no(format!("no kernel BTF: {e}")),
            (_, Feature::Unavailable { .. }) => Feature::no("not probed: missing privileges"),
            (Ok(btf), Feature::Available) => probe_btf_tracepoints(btf),
        };
        let tracing_programs = match (&btf, &btf_tracepoints, &trampolines) {
            // BTF tracepoints where they load (a fentry needs a target the
            // kernel lets it trace), else a trampoline against a function.
            (Ok(btf), Feature::Available, _) => probe_program_features(
                libbpf_sys::BPF_PROG_TYPE_TRACING,
                btf.type_named("btf_trace_sched_switch")
                    .map(|id| (libbpf_sys::BPF_TRACE_RAW_TP, id)),
                trampoline_target(btf, &trampolines),
                "BTF tracepoint",
            ),
            (Ok(btf), _, Feature::Available) => probe_program_features(
                libbpf_sys::BPF_PROG_TYPE_TRACING,
                probe_target(btf).map(|(_, id)| (libbpf_sys::BPF_TRACE_FENTRY, id)),
                trampoline_target(btf, &trampolines),
                "trampoline",
            ),
            _ => ProgramFeatures::none("no trampolines or BTF tracepoints: not probed"),
        };
        let (kprobe_programs, tracepoint_programs) = match &privileges {
            Feature::Available => (
                probe_program_features(libbpf_sys::BPF_PROG_TYPE_KPROBE, None, None, "kprobe"),
                probe_program_features(
                    libbpf_sys::BPF_PROG_TYPE_TRACEPOINT,
                    None,
                    None,
                    "tracepoint",
                ),
            ),
            _ => (
                ProgramFeatures::none("not probed: missing privileges"),
                ProgramFeatures::none("not probed: missing privileges"),
            ),
        };
        // SAFETY: a plain libbpf call with no pointers (null options).
        let coarse = unsafe {
            libbpf_sys::libbpf_probe_bpf_helper(
                libbpf_sys::BPF_PROG_TYPE_SOCKET_FILTER,
                libbpf_sys::BPF_FUNC_ktime_get_coarse_ns,
                std::ptr::null(),
            )
        };
        let memcg_accounting = if coarse == 1 {
            Feature::Available
        } else {
            Feature::no(
                "kernel before 5.11 (no bpf_ktime_get_coarse_ns): BPF maps are charged to \
                 RLIMIT_MEMLOCK",
            )
        };
        let fetch_atomics = match super::sys::probe_fetch_atomics() {
            Ok(()) => Feature::Available,
            Err(e) => Feature::Unavailable {
                reason: "the verifier refused an atomic_fetch_add (Linux 5.12+)".to_owned(),
                errno: e.raw_os_error(),
            },
        };
        let context_records = match &btf {
            Ok(btf) => probe_context_records(btf),
            Err(_) => Feature::no("no kernel BTF to look for task-storage uptrs"),
        };
        KernelCapabilities {
            btf: match btf {
                Ok(_) => Feature::Available,
                Err(e) => Feature::no(e.clone()),
            },
            privileges,
            trampolines,
            kprobes,
            kprobe_multi,
            trampoline_sessions,
            trampoline_multi,
            kprobe_sessions,
            tracepoints,
            btf_tracepoints,
            context_records,
            preemption: Preemption::read(),
            tracing_programs,
            kprobe_programs,
            tracepoint_programs,
            fetch_atomics,
            memcg_accounting,
        }
    }

    /// What this kernel lacks that `hook`'s programs use on newer
    /// kernels, each with what they do instead: the programs' build, then
    /// the helpers of their program type.
    pub fn older_kernel(&self, hook: Hook) -> Vec<String> {
        let (features, relevant): (&ProgramFeatures, &[&str]) = match hook {
            Hook::Fentry | Hook::Fexit => (
                &self.tracing_programs,
                &[
                    "bpf_get_current_task_btf",
                    "task local storage",
                    "bpf_get_func_arg/_ret",
                ],
            ),
            Hook::Kprobe | Hook::Kretprobe => (
                &self.kprobe_programs,
                &[
                    "bpf_get_current_task_btf",
                    "task local storage",
                    "bpf_get_attach_cookie",
                ],
            ),
            Hook::Syscall => (
                &self.tracepoint_programs,
                &["bpf_get_current_task_btf", "task local storage"],
            ),
        };
        let mut lines: Vec<String> = self
            .legacy_programs()
            .map(|why| {
                format!(
                    "{why}; instead: the programs built without it (bounded loops, plain \
                     loads and stores: two CPUs may share a sums slot, a rate limit may admit \
                     one span more, span ids are random)"
                )
            })
            .into_iter()
            .collect();
        lines.extend(
            features
                .fallbacks()
                .into_iter()
                .filter(|line| relevant.iter().any(|name| line.starts_with(name))),
        );
        lines
    }

    /// Why kspan loads its programs built for older kernels
    /// (`kspan_bpf::LEGACY_OBJECT`: bounded loops, plain loads and stores
    /// in place of atomics that fetch), or `None` where the kernel takes
    /// the current ones.
    pub fn legacy_programs(&self) -> Option<String> {
        if let Feature::Unavailable { .. } = &self.fetch_atomics {
            return Some(format!("atomics that fetch: {}", self.fetch_atomics));
        }
        let loops = [
            &self.tracing_programs.loops,
            &self.kprobe_programs.loops,
            &self.tracepoint_programs.loops,
        ];
        if loops.iter().any(|l| l.is_available()) {
            return None;
        }
        Some(format!("bpf_loop: {}", self.tracepoint_programs.loops))
    }

    /// Why `hook` cannot work on this kernel, if known before trying.
    pub fn refuses(&self, hook: Hook) -> Option<&Feature> {
        let feature = match hook {
            Hook::Fentry | Hook::Fexit => &self.trampolines,
            Hook::Kprobe | Hook::Kretprobe => &self.kprobes,
            Hook::Syscall => &self.tracepoints,
        };
        (!feature.is_available()).then_some(feature)
    }
}

/// The BTF id of a function to load a probing fentry program against,
/// where trampolines load.
fn trampoline_target(btf: &Btf, trampolines: &Feature) -> Option<u32> {
    trampolines
        .is_available()
        .then(|| probe_target(btf).map(|(_, id)| id))
        .flatten()
}

/// A function every kernel has, to load test programs against.
fn probe_target(btf: &Btf) -> Option<(&'static str, u32)> {
    ["vfs_read", "ksys_read", "vfs_write"]
        .into_iter()
        .find_map(|f| Some((f, btf.function(f)?.btf_id)))
}

/// Loads a minimal fentry program against a function every kernel has, and
/// unloads it: nothing is attached.
fn probe_trampolines(btf: &Btf) -> Feature {
    let Some((target, btf_id)) = probe_target(btf) else {
        return Feature::no("no known function in BTF to load a trampoline against");
    };
    match super::sys::load_trampoline_probe(libbpf_sys::BPF_TRACE_FENTRY, btf_id) {
        Ok(_) => Feature::Available,
        Err(e) => Feature::Unavailable {
            reason: format!(
                "this kernel refuses BPF trampolines (a minimal fentry program, loaded against \
                 `{target}` to test them, was refused)"
            ),
            errno: e.raw_os_error(),
        },
    }
}

/// Loads a minimal `tp_btf/sched_switch` program and unloads it: the
/// tracepoint's BTF typedef must exist and the kernel must let this
/// process load tracing programs.
fn probe_btf_tracepoints(btf: &Btf) -> Feature {
    let Some(id) = btf.type_named("btf_trace_sched_switch") else {
        return Feature::no("no btf_trace_sched_switch in the kernel's BTF");
    };
    match super::sys::load_trampoline_probe(libbpf_sys::BPF_TRACE_RAW_TP, id) {
        Ok(_) => Feature::Available,
        Err(e) => Feature::Unavailable {
            reason: "this kernel refuses BTF tracepoints (a minimal tp_btf/sched_switch program                      was refused): the scheduler's account uses classic tracepoints"
                .to_owned(),
            errno: e.raw_os_error(),
        },
    }
}

/// fsession and fsession.multi, each by loading a minimal program of its
/// attach type (trampolines are known to work): kernels without them
/// refuse the attach type (EINVAL).
fn probe_sessions(btf: &Btf) -> (Feature, Feature) {
    let Some((target, btf_id)) = probe_target(btf) else {
        let no = || Feature::no("no known function in BTF to load a trampoline against");
        return (no(), no());
    };
    let refused = |what: &str, since: &str, e: std::io::Error| Feature::Unavailable {
        reason: format!(
            "this kernel has no {what} ({since}): a minimal {what} program was refused"
        ),
        errno: e.raw_os_error(),
    };
    // Loaded against `target`: fsession programs have one target each.
    let single = match super::sys::load_trampoline_probe(libbpf_sys::BPF_TRACE_FSESSION, btf_id) {
        Ok(_) => Feature::Available,
        Err(e) => refused("fsession", &format!("Linux 7.0+; tried on `{target}`"), e),
    };
    // The kernel's multi-function trampolines are built by the x86-64 JIT
    // alone: elsewhere the attach type loads and then never attaches.
    let multi = if !cfg!(target_arch = "x86_64") {
        Feature::no(
            "fsession.multi is x86-64 only (Linux 7.2's multi-function trampolines; this \
             architecture's BPF JIT has none)",
        )
    } else {
        match super::sys::load_trampoline_probe(super::sys::BPF_TRACE_FSESSION_MULTI, 0) {
            Ok(_) => Feature::Available,
            Err(e) => refused("fsession.multi", "Linux 7.2+", e),
        }
    };
    (single, multi)
}

/// Task-storage uptrs, from the kernel's BTF: the verifier's kinds of
/// special map-value fields (`enum btf_field_type`) have `BPF_UPTR` exactly
/// when map values may hold them.
fn probe_context_records(btf: &Btf) -> Feature {
    let kinds = btf
        .type_named("enum btf_field_type")
        .and_then(|id| btf.enumerators(id));
    match kinds {
        Some(kinds) if kinds.iter().any(|(name, _)| name == "BPF_UPTR") => Feature::Available,
        Some(_) => Feature::no(
            "kernel before 6.13 (no BPF_UPTR in enum btf_field_type): thread contexts are read \
             from user memory",
        ),
        None => Feature::no("no enum btf_field_type in the kernel's BTF"),
    }
}
