// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The runtime: plan, load, attach, run, detach.
//!
//! [`KspanBuilder::start`] does the steps in that order and stops at the first
//! failure with everything loaded so far released: read the kernel's BTF and
//! plan every probe (no kernel change yet), check privileges, then per probe
//! open the BPF object, write its settings, load and attach (exit program
//! first, so that no entry is recorded whose exit is not watched), then start
//! the consumer task. Dropping [`Kspan`] detaches everything;
//! [`Kspan::shutdown`] also drains the ring buffer and flushes the exporter.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use kspan_bpf::names;
use kspan_bpf::types::kspan_config;
use libbpf_rs::{
    Link, MapCore, MapFlags, Object, ObjectBuilder, PrintLevel, RingBuffer, RingBufferBuilder,
};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::btf::Btf;
use crate::capabilities::{KernelCapabilities, KPROBE_PMU};
use crate::caps;
use crate::clock::ClockOffset;
use crate::copies::{self, ProgramTemplate};
use crate::error::{Error, Result};
use crate::export::{parse_record, Outcome, SpanFactory};
use crate::plan::{
    plan_all, PlanInputs, PlanSet, ProbePlan, SyscallFormats, ThreadContextSettings,
};
use crate::probe::{Mode, Probe};

/// Where the running kernel publishes its BTF.
pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Configures and starts kspan.
#[derive(Debug)]
pub struct KspanBuilder {
    provider: SdkTracerProvider,
    probes: Vec<&'static Probe>,
    btf_path: PathBuf,
    all_processes: bool,
    disabled: Vec<Mechanism>,
    orphans: Orphans,
    keep_unsampled: bool,
    thread_context: bool,
    context_observer: bool,
}

/// What happens to a kernel call made with no application span active on
/// its thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Orphans {
    /// Its span starts a trace of its own (the default).
    #[default]
    NewTrace,
    /// It is not recorded (counted in [`Stats::orphans_dropped`]).
    Drop,
}

impl KspanBuilder {
    /// Adds a probe (a `static` made by `#[kernel_span]`).
    pub fn probe(mut self, probe: &'static Probe) -> Self {
        self.probes.push(probe);
        self
    }

    /// Adds several probes.
    pub fn probes(mut self, probes: impl IntoIterator<Item = &'static Probe>) -> Self {
        self.probes.extend(probes);
        self
    }

    /// Adds every `#[kernel_span]` probe linked into the program, in no
    /// particular order (two on the same kernel function are refused at
    /// start, naming both).
    pub fn all_probes(mut self) -> Self {
        self.probes.extend(crate::registry::PROBES.iter().copied());
        self
    }

    /// Never uses `mechanism`: `auto` skips it (saying so in the attach
    /// plan), and a probe whose mode needs it fails to start.
    pub fn disable(mut self, mechanism: Mechanism) -> Self {
        self.disabled.push(mechanism);
        self
    }

    /// Attaches one probe: its own mode, or for `auto` the first mechanism
    /// that works, recording why each earlier one was passed over.
    fn attach_one(
        &self,
        loaded: &mut Loaded,
        plan: &ProbePlan,
        capabilities: &KernelCapabilities,
        probe_id: u32,
        target_tgid: u32,
    ) -> Result<AttachDecision> {
        let requested = plan.mode();
        let candidates: &[Mode] = if requested == Mode::Auto {
            &Mode::AUTO_ORDER
        } else {
            std::slice::from_ref(&plan.probe.spec.mode)
        };
        let mut rejected = Vec::new();
        for &mode in candidates {
            let mechanism = Mechanism::of(mode);
            if self.disabled.contains(&mechanism) {
                rejected.push((
                    mode,
                    format!("{mechanism} disabled by KspanBuilder::disable"),
                ));
                continue;
            }
            if requested == Mode::Auto {
                if let Some(refused) = capabilities.refuses(mode) {
                    rejected.push((mode, refused.to_string()));
                    continue;
                }
            }
            match loaded.load_and_attach(plan, mode, probe_id, target_tgid) {
                Ok(()) => {
                    return Ok(AttachDecision {
                        function: plan.function(),
                        requested,
                        chosen: mode,
                        rejected,
                        multi: false,
                    })
                }
                Err(e) if requested == Mode::Auto => rejected.push((mode, e.to_string())),
                Err(e) => return Err(e),
            }
        }
        Err(Error::NoMechanism {
            function: plan.function().to_owned(),
            tried: rejected,
        })
    }

    /// How the BPF programs find the application's span (OTEP 4947): where
    /// `fsbase` is in `task_struct`, where the slot is from it, which process
    /// publishes, and the policies. Without either offset (another
    /// architecture, a kernel whose BTF lacks the member, or
    /// [`Self::thread_context`] off) nothing is read and every outermost call
    /// follows the orphan policy.
    fn thread_context_settings(&self, btf: &Btf) -> ThreadContextSettings {
        let mut settings = ThreadContextSettings {
            orphans: match self.orphans {
                Orphans::NewTrace => kspan_bpf::consts::KSPAN_ORPHANS_NEW_TRACE,
                Orphans::Drop => kspan_bpf::consts::KSPAN_ORPHANS_DROP,
            } as u32,
            keep_unsampled: self.keep_unsampled,
            ..ThreadContextSettings::default()
        };
        if !self.thread_context {
            return settings;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let fsbase =
                crate::fieldpath::member_offset(btf, "struct task_struct", &["thread", "fsbase"]);
            match (fsbase, crate::context::slot_offset()) {
                (Some(fsbase), Ok(slot)) => {
                    settings.task_fsbase_offset = fsbase;
                    settings.slot_offset = slot;
                    settings.tgid = std::process::id();
                }
                (fsbase, slot) => tracing::warn!(
                    fsbase_in_btf = fsbase.is_some(),
                    slot = ?slot.err(),
                    "kspan cannot read the application's thread context: kernel spans start traces of their own"
                ),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = btf;
        settings
    }

    /// Where the kernel has kprobe.multi: attaches the functions of explicit
    /// `kprobe`/`kretprobe` probes in batches, one link per direction for
    /// every function of the same settings, and returns their decisions by
    /// plan index. A batch the kernel refuses is left to [`Self::attach_one`],
    /// function by function, which reports errors per function.
    fn attach_kprobe_batches(
        &self,
        loaded: &mut Loaded,
        plans: &[ProbePlan],
        capabilities: &KernelCapabilities,
        target_tgid: u32,
    ) -> HashMap<usize, AttachDecision> {
        let mut decisions = HashMap::new();
        if !capabilities.kprobe_multi.is_available() || self.disabled.contains(&Mechanism::Kprobes)
        {
            return decisions;
        }
        let mut groups: std::collections::BTreeMap<Vec<u8>, Vec<(u32, &ProbePlan)>> =
            Default::default();
        for (i, plan) in plans.iter().enumerate() {
            let mode = plan.mode();
            if matches!(mode, Mode::Kprobe | Mode::Kretprobe) {
                let mut key = vec![0u8; std::mem::size_of::<kspan_config>()];
                write_config(&mut key, &shared_config(plan, mode, target_tgid));
                groups.entry(key).or_default().push((i as u32, plan));
            }
        }
        for group in groups.values() {
            let mode = group[0].1.mode();
            match loaded.attach_multi(group, mode, target_tgid) {
                Ok(()) => {
                    for (i, plan) in group {
                        decisions.insert(
                            *i as usize,
                            AttachDecision {
                                function: plan.function(),
                                requested: mode,
                                chosen: mode,
                                rejected: Vec::new(),
                                multi: true,
                            },
                        );
                    }
                }
                Err(e) => tracing::info!(
                    functions = group.len(),
                    error = %e,
                    "kspan attaches these kprobes one by one: kprobe.multi failed"
                ),
            }
        }
        decisions
    }

    /// Reads BTF from `path` instead of [`KERNEL_BTF`].
    pub fn btf_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.btf_path = path.into();
        self
    }

    /// What happens to kernel calls made with no application span active on
    /// their thread: [`Orphans::NewTrace`] (the default) or [`Orphans::Drop`].
    /// Calls of other processes ([`Self::trace_all_processes`]) have no
    /// application span kspan can read, so `Drop` drops them all.
    pub fn orphans(mut self, orphans: Orphans) -> Self {
        self.orphans = orphans;
        self
    }

    /// Records kernel calls made under an application span that is not
    /// sampled too (the default drops them in the kernel, counted in
    /// [`Stats::unsampled`]).
    pub fn keep_unsampled(mut self, keep: bool) -> Self {
        self.keep_unsampled = keep;
        self
    }

    /// Whether kernel spans are parented under the application span active
    /// on their thread (OTEP 4947 thread context, published by kspan's
    /// context observer, see [`Self::context_observer`]); on by default.
    /// Off: every outermost call starts a trace of its own.
    pub fn thread_context(mut self, on: bool) -> Self {
        self.thread_context = on;
        self
    }

    /// Whether [`Self::start`] registers kspan's OpenTelemetry context
    /// observer ([`crate::context::register_observer`]), which publishes
    /// every context switch; on by default, and `start` fails when the
    /// process already has another observer. Off: the thread context comes
    /// only from the `tracing` layers of [`crate::context`].
    pub fn context_observer(mut self, on: bool) -> Self {
        self.context_observer = on;
        self
    }

    /// Traces calls made by every process, not only this one (the default is
    /// this process only).
    pub fn trace_all_processes(mut self, all: bool) -> Self {
        self.all_processes = all;
        self
    }

    /// Plans, loads and attaches every probe and starts consuming spans on the
    /// current tokio runtime.
    pub fn start(self) -> Result<Kspan> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoTokioRuntime)?;
        // The SDK renders its configuration, id generator included, only
        // through `Debug`.
        if !crate::ids::provider_has_kernel_ids(&format!("{:?}", self.provider)) {
            return Err(Error::NoKernelSpanIds);
        }
        if self.thread_context && self.context_observer {
            crate::context::register_observer()?;
        }
        let started = std::time::Instant::now();
        let data = std::fs::read(&self.btf_path).map_err(|source| Error::NoKernelBtf {
            path: self.btf_path.clone(),
            source,
        })?;
        let btf = Btf::parse(&data).map_err(|source| Error::BadKernelBtf {
            path: self.btf_path.clone(),
            source,
        })?;
        let syscalls = read_syscall_formats(&self.probes)?;
        let inputs = PlanInputs {
            syscalls,
            traceable: read_traceable_functions(),
        };
        let PlanSet { mut plans, skipped } = plan_all(&btf, &self.probes, &inputs)?;
        let context = self.thread_context_settings(&btf);
        for plan in &mut plans {
            plan.thread_context = context;
        }
        for (function, why) in &skipped {
            tracing::info!(
                function = function.as_str(),
                reason = why.as_str(),
                "kspan skips a match"
            );
        }
        drop(btf);
        caps::check_tracing_caps(caps::effective())
            .map_err(|have| Error::MissingPrivileges { have })?;

        raise_open_files_limit();
        let target_tgid = if self.all_processes {
            0
        } else {
            std::process::id()
        };
        tracing::debug!(functions = plans.len(), elapsed = ?started.elapsed(), "kspan planned");
        let mut loaded = Loaded::default();
        let capabilities = KernelCapabilities::get();
        let mut decisions = Vec::with_capacity(plans.len());
        let total = plans.len();
        let mut prepared_ahead = false;
        let mut batched =
            self.attach_kprobe_batches(&mut loaded, &plans, capabilities, target_tgid);
        for (probe_id, plan) in plans.iter().enumerate() {
            // A progress line for large sets (patterns): every tenth.
            if total >= 20 && probe_id % (total / 10) == 0 {
                tracing::info!(attached = probe_id, total, "kspan attaching");
            }
            let decision = match batched.remove(&probe_id) {
                Some(decision) => decision,
                None => self.attach_one(
                    &mut loaded,
                    plan,
                    capabilities,
                    probe_id as u32,
                    target_tgid,
                )?,
            };
            // The first trampoline attached gave templates: load the copies
            // of the rest in parallel, ahead of their attaches.
            if decision.chosen.is_trampoline() && !prepared_ahead {
                prepared_ahead = true;
                if !self.disabled.contains(&Mechanism::Trampolines) {
                    let rest: Vec<(u32, &ProbePlan)> = plans
                        .iter()
                        .enumerate()
                        .skip(probe_id + 1)
                        .map(|(i, p)| (i as u32, p))
                        .collect();
                    loaded.prepare_trampoline_copies(&rest, target_tgid);
                }
            }
            tracing::info!(
                function = decision.function,
                requested = decision.requested.as_str(),
                chosen = decision.chosen.as_str(),
                kprobe_multi = decision.multi,
                rejected = %decision.rejected_summary(),
                "kspan attach plan"
            );
            decisions.push(decision);
        }

        tracing::debug!(functions = decisions.len(), elapsed = ?started.elapsed(), "kspan attached");
        let stats = Arc::new(Counters::default());
        let ring = loaded.ring_buffer(Processor {
            plans,
            factory: SpanFactory::new(self.provider.tracer("kspan"), ClockOffset::measure())
                .with_process_pid(self.all_processes),
            stats: stats.clone(),
        })?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let consumer = Consumer::new(ring, &runtime)?;
        let task = runtime.spawn(consumer.run(stop_rx));
        // Record from now on: the consumer is running.
        loaded.set_enabled(true)?;
        Ok(Kspan {
            decisions,
            skipped,
            loaded,
            provider: self.provider,
            stats,
            stop: stop_tx,
            task: Some(task),
        })
    }
}

/// BPF objects and program copies, and their links.
#[derive(Default)]
struct Loaded {
    /// Links before programs: dropping a link detaches its program. Entry
    /// and exit programs apart, to detach every entry before any exit.
    entry_links: Vec<Attachment>,
    exit_links: Vec<Attachment>,
    /// Programs and `.rodata` maps of the copies (see [`crate::copies`]).
    copies: Vec<OwnedFd>,
    /// Objects libbpf loaded: the first of each program, and any function
    /// whose copy failed.
    objects: Vec<Object>,
    /// By program name: what copies are made from.
    templates: HashMap<String, ProgramTemplate>,
    /// Bytes of `.rodata` (the settings, and padding).
    rodata_size: usize,
    /// Kprobe programs serving many functions, by settings and program.
    shared: HashMap<Vec<u8>, SharedPrograms>,
    /// Trampoline copies loaded ahead of their attach, by probe id.
    prepared: HashMap<u32, PreparedCopy>,
}

/// A copy loaded ahead of its attach.
struct PreparedCopy {
    mode: Mode,
    rodata: OwnedFd,
    entry: OwnedFd,
    exit: Option<OwnedFd>,
}

/// A copy's `.rodata` holding `config`, and its programs loaded from the
/// templates (the exit one when `exit_t` is given), for trampolines against
/// `btf_id`.
fn load_programs(
    rodata_size: usize,
    config: &kspan_config,
    btf_id: u32,
    entry_t: &ProgramTemplate,
    exit_t: Option<&ProgramTemplate>,
) -> std::io::Result<(OwnedFd, OwnedFd, Option<OwnedFd>)> {
    let mut value = vec![0u8; rodata_size];
    write_config(&mut value, config);
    let rodata = copies::rodata_map(&value)?;
    let entry = entry_t.load(&rodata, btf_id)?;
    let exit = exit_t.map(|t| t.load(&rodata, btf_id)).transpose()?;
    Ok((rodata, entry, exit))
}

/// An entry program and maybe an exit program that serve many functions.
struct SharedPrograms {
    entry: OwnedFd,
    exit: Option<OwnedFd>,
}

impl SharedPrograms {
    fn try_clone(&self) -> std::io::Result<Self> {
        Ok(SharedPrograms {
            entry: self.entry.try_clone()?,
            exit: self.exit.as_ref().map(OwnedFd::try_clone).transpose()?,
        })
    }
}

/// Raises the limit of open files: each traced function holds a link per
/// direction (and a program copy for trampolines), and a thousand functions
/// pass the usual soft limit of 1,024 (bpftrace raises it too). Best effort: if it fails, an attach that runs out says so.
fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given, which is valid.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    // A privileged process may raise the hard limit too; if not, the soft
    // limit goes up to the hard one.
    let wanted = limit.rlim_max.max(1 << 16);
    let raised = libc::rlimit {
        rlim_cur: wanted,
        rlim_max: wanted,
    };
    // SAFETY: setrlimit reads the struct it is given, which is valid.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
        return;
    }
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            tracing::debug!("kspan could not raise the open-files limit");
        }
    }
}

/// Drops `links`: kprobe links from up to [`DETACH_THREADS`] threads,
/// trampoline links one by one. Trampoline detaches gain nothing from
/// threads (the kernel serialises them), and concurrent ones were seen to
/// make the 6.12 guest under QEMU/TCG hit a stray int3 while the kernel
/// live-patched a traced function's entry (a patching race of the
/// emulator); one at a time, as before, that was never seen.
fn detach_in_parallel(links: Vec<Attachment>) {
    let (kprobes, others): (Vec<_>, Vec<_>) = links
        .into_iter()
        .partition(|l| matches!(l, Attachment::Kprobe(_)));
    for link in others.into_iter().rev() {
        drop(link);
    }
    if kprobes.len() < 2 {
        return;
    }
    let links = kprobes;
    let threads = DETACH_THREADS.min(links.len());
    let mut shares: Vec<Vec<Attachment>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, link) in links.into_iter().enumerate() {
        shares[i % threads].push(link);
    }
    std::thread::scope(|scope| {
        for share in shares {
            scope.spawn(move || drop(share));
        }
    });
}

/// Threads that detach at once: measured on Debian 12's kernel, 71
/// functions' kprobe pairs detach in 12.7 s one by one, 6.9 s from 8
/// threads and 6.3 s from 16 (trampolines are detached one by one).
const DETACH_THREADS: usize = 16;

/// The programs of `mode`: entry and exit.
fn programs_of(mode: Mode) -> (&'static str, &'static str) {
    match mode {
        Mode::Fentry | Mode::Fexit | Mode::Auto => (names::FENTRY_PROG, names::FEXIT_PROG),
        Mode::Kprobe | Mode::Kretprobe => (names::KPROBE_PROG, names::KRETPROBE_PROG),
        Mode::Syscall => (names::SYS_ENTER_PROG, names::SYS_EXIT_PROG),
    }
}

/// `plan`'s settings for a program shared by many functions: the probe id
/// comes from each link's cookie.
fn shared_config(plan: &ProbePlan, mode: Mode, target_tgid: u32) -> kspan_config {
    let mut config = plan.bpf_config(mode, 0, target_tgid);
    config.probe_id_from_cookie = 1;
    config
}

/// The error of a failed attach of `function`.
fn attach_error(function: &str, mode: Mode, source: libbpf_rs::Error) -> Error {
    let errno = errno_of(&source);
    Error::AttachFailed {
        function: function.to_owned(),
        mode,
        errno,
        errno_name: errno_name(errno),
        reason: refusal_reason(errno, mode, "attach"),
        source,
    }
}

/// One attached program. The fields are held for their `Drop`: dropping
/// them detaches.
#[allow(dead_code)]
enum Attachment {
    /// Attached by libbpf.
    Libbpf(Link),
    /// A trampoline link kspan created itself (copies).
    Copy(OwnedFd),
    /// A kprobe link kspan created itself (shared programs, kprobe.multi):
    /// these detach from several threads.
    Kprobe(OwnedFd),
}

impl Loaded {
    fn first(&self) -> Option<&Object> {
        self.objects.first()
    }

    /// Loads and attaches `plan` as `mode`; on failure nothing of it stays.
    fn load_and_attach(
        &mut self,
        plan: &ProbePlan,
        mode: Mode,
        probe_id: u32,
        target_tgid: u32,
    ) -> Result<()> {
        let function = plan.function();
        let (entry_prog, exit_prog) = programs_of(mode);
        // Kprobes: one program pair per distinct settings, the probe id in
        // each link's cookie. Anything wrong there, and the function gets
        // programs of its own below, which report errors properly.
        if matches!(mode, Mode::Kprobe | Mode::Kretprobe) {
            match self.attach_shared_kprobe(plan, mode, probe_id, target_tgid) {
                Ok(()) => return Ok(()),
                Err(e) => tracing::debug!(
                    function,
                    error = %e,
                    "kspan gives this kprobe programs of its own: the shared ones failed"
                ),
            }
        }
        let config = plan.bpf_config(mode, probe_id, target_tgid);
        if mode != Mode::Syscall {
            match self.load_copy(plan, mode, &config, (entry_prog, exit_prog)) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => tracing::debug!(
                    function,
                    error = %e,
                    "kspan loads this function through libbpf: its copy failed"
                ),
            }
        }
        let wanted: &[&str] = if mode.has_return() {
            &[entry_prog, exit_prog]
        } else {
            &[entry_prog]
        };
        let object = self.load_object(plan, mode, &config, wanted)?;

        let attach = |prog_name: &str, retprobe: bool| -> Result<Link> {
            let prog = object
                .progs_mut()
                .find(|p| p.name() == prog_name)
                .expect("the object has every program");
            // libbpf's own lines about a refusal would repeat the error below.
            let attached = quiet_libbpf(|| match mode {
                Mode::Fentry | Mode::Fexit | Mode::Auto => prog.attach_trace(),
                Mode::Kprobe | Mode::Kretprobe => prog.attach_kprobe(retprobe, function),
                Mode::Syscall => {
                    let event = if retprobe { "sys_exit" } else { "sys_enter" };
                    prog.attach_tracepoint(
                        libbpf_rs::TracepointCategory::Syscalls,
                        format!("{event}_{function}"),
                    )
                }
            });
            attached.map_err(|source| attach_error(function, mode, source))
        };
        // Exit first: no entry is recorded whose exit is not watched. The
        // links are kept only once both are attached.
        let exit = match mode.has_return() {
            true => Some(Attachment::Libbpf(attach(exit_prog, true)?)),
            false => None,
        };
        let entry = Attachment::Libbpf(attach(entry_prog, false)?);
        self.keep(exit, entry);
        self.keep_templates(&object);
        self.objects.push(object);
        Ok(())
    }

    /// Opens the BPF object with `config` as its settings, sharing the first
    /// object's maps, and loads the programs named `wanted` (for trampolines,
    /// against `plan`'s function).
    fn load_object(
        &self,
        plan: &ProbePlan,
        mode: Mode,
        config: &kspan_config,
        wanted: &[&str],
    ) -> Result<Object> {
        let function = plan.function();
        let load_err = |source: libbpf_rs::Error, log: Option<String>| {
            let errno = errno_of(&source);
            Error::LoadFailed {
                function: function.to_owned(),
                mode,
                errno,
                errno_name: errno_name(errno),
                reason: refusal_reason(errno, mode, "load"),
                verifier_log: log,
                source,
            }
        };
        let mut open = ObjectBuilder::default()
            .open_memory(kspan_bpf::OBJECT)
            .map_err(|e| load_err(e, None))?;
        for mut map in open.maps_mut() {
            let name = map.name().to_string_lossy().into_owned();
            if name.ends_with(names::RODATA_MAP_SUFFIX) {
                let Some(data) = map.initial_value_mut() else {
                    continue;
                };
                write_config(data, config);
            } else if let Some(first) = self.first() {
                // Every object shares the first one's ring buffer, stacks and counters.
                if let Some(shared) = first.maps().find(|m| m.name().to_string_lossy() == name) {
                    if matches!(
                        name.as_str(),
                        names::EVENTS_MAP
                            | names::STACKS_MAP
                            | names::COUNTERS_MAP
                            | names::CONTROL_MAP
                    ) {
                        map.reuse_fd(shared.as_fd())
                            .map_err(|e| load_err(e, None))?;
                    }
                }
            }
        }
        for mut prog in open.progs_mut() {
            let name = prog.name().to_string_lossy();
            if !wanted.contains(&name.as_ref()) {
                prog.set_autoload(false);
                continue;
            }
            if mode.is_trampoline() {
                prog.set_attach_target(0, Some(function.to_owned()))
                    .map_err(|e| load_err(e, None))?;
            }
        }
        match with_captured_libbpf_log(|| open.load()) {
            (Ok(object), _) => Ok(object),
            (Err(e), log) => Err(load_err(e, verifier_log(&log))),
        }
    }

    /// The program pair (entry, and exit when `mode` has one) named
    /// `progs` for kprobe settings `config` (probe id from the cookie):
    /// loaded once per distinct settings, as copies when there are
    /// templates, else through libbpf.
    fn shared_programs(
        &mut self,
        plan: &ProbePlan,
        mode: Mode,
        config: &kspan_config,
        (entry_prog, exit_prog): (&str, &str),
    ) -> std::result::Result<SharedPrograms, String> {
        let mut key = vec![0u8; std::mem::size_of::<kspan_config>()];
        write_config(&mut key, config);
        key.extend_from_slice(entry_prog.as_bytes());
        if let Some(found) = self.shared.get(&key) {
            return found.try_clone().map_err(|e| e.to_string());
        }
        let exit_wanted = mode.has_return();
        let copied = match (
            self.templates.get(entry_prog),
            self.templates.get(exit_prog),
        ) {
            (Some(entry_t), exit_t) if exit_t.is_some() || !exit_wanted => {
                let exit_t = exit_t.filter(|_| exit_wanted);
                let (rodata, entry, exit) =
                    load_programs(self.rodata_size, config, 0, entry_t, exit_t)
                        .map_err(|e| e.to_string())?;
                self.copies.push(rodata);
                Some(SharedPrograms { entry, exit })
            }
            _ => None,
        };
        let programs = match copied {
            Some(programs) => programs,
            None => {
                let wanted: &[&str] = if exit_wanted {
                    &[entry_prog, exit_prog]
                } else {
                    &[entry_prog]
                };
                let object = self
                    .load_object(plan, mode, config, wanted)
                    .map_err(|e| e.to_string())?;
                let fd_of = |name: &str| -> std::result::Result<OwnedFd, String> {
                    let prog = object
                        .progs()
                        .find(|p| p.name() == name)
                        .ok_or_else(|| format!("no program {name}"))?;
                    prog.as_fd().try_clone_to_owned().map_err(|e| e.to_string())
                };
                let programs = SharedPrograms {
                    entry: fd_of(entry_prog)?,
                    exit: if exit_wanted {
                        Some(fd_of(exit_prog)?)
                    } else {
                        None
                    },
                };
                self.keep_templates(&object);
                self.objects.push(object);
                programs
            }
        };
        let handle = programs.try_clone().map_err(|e| e.to_string())?;
        self.shared.insert(key, programs);
        Ok(handle)
    }

    /// Attaches `plan` through the kprobe programs shared by its settings:
    /// one perf event per direction, the probe id in the link's cookie.
    fn attach_shared_kprobe(
        &mut self,
        plan: &ProbePlan,
        mode: Mode,
        probe_id: u32,
        target_tgid: u32,
    ) -> std::result::Result<(), String> {
        let config = shared_config(plan, mode, target_tgid);
        let programs = self.shared_programs(
            plan,
            mode,
            &config,
            (names::KPROBE_PROG, names::KRETPROBE_PROG),
        )?;
        let attach = |prog: &OwnedFd, retprobe: bool| {
            copies::attach_kprobe(prog.as_fd(), plan.function(), retprobe, probe_id.into())
                .map(Attachment::Kprobe)
                .map_err(|e| e.to_string())
        };
        let exit = match &programs.exit {
            Some(exit) => Some(attach(exit, true)?),
            None => None,
        };
        let entry = attach(&programs.entry, false)?;
        self.keep(exit, entry);
        Ok(())
    }

    /// Attaches every function of `group` (same settings but the probe id)
    /// with one kprobe.multi link per direction, the probe ids as cookies.
    fn attach_multi(
        &mut self,
        group: &[(u32, &ProbePlan)],
        mode: Mode,
        target_tgid: u32,
    ) -> std::result::Result<(), String> {
        let Some((_, first)) = group.first() else {
            return Ok(());
        };
        let config = shared_config(first, mode, target_tgid);
        let programs = self.shared_programs(
            first,
            mode,
            &config,
            (names::KPROBE_MULTI_PROG, names::KRETPROBE_MULTI_PROG),
        )?;
        let functions: Vec<(&str, u64)> = group
            .iter()
            .map(|(id, plan)| (plan.function(), u64::from(*id)))
            .collect();
        let attach = |prog: &OwnedFd, retprobe: bool| {
            copies::attach_kprobe_multi(prog.as_fd(), &functions, retprobe)
                .map(Attachment::Kprobe)
                .map_err(|e| e.to_string())
        };
        let exit = match &programs.exit {
            Some(exit) => Some(attach(exit, true)?),
            None => None,
        };
        let entry = attach(&programs.entry, false)?;
        self.keep(exit, entry);
        Ok(())
    }

    /// Keeps the loaded programs of `object` as templates for copies, unless
    /// programs of those names are kept already.
    fn keep_templates(&mut self, object: &Object) {
        let Some(rodata) = object.maps().find(|m| {
            m.name()
                .to_string_lossy()
                .ends_with(names::RODATA_MAP_SUFFIX)
        }) else {
            return;
        };
        self.rodata_size = rodata.value_size() as usize;
        let rodata_fd = rodata.as_fd().as_raw_fd();
        for prog in object.progs() {
            let name = prog.name().to_string_lossy().into_owned();
            if prog.as_fd().as_raw_fd() < 0 || self.templates.contains_key(&name) {
                continue;
            }
            let template = ProgramTemplate::new(&prog, rodata_fd);
            if template.uses_rodata() {
                self.templates.insert(name, template);
            }
        }
    }

    /// Loads and attaches `plan` as `mode` from the templates, when there
    /// are templates for its programs. `Ok(false)`: no templates (yet);
    /// errors leave nothing behind, and the caller goes through libbpf.
    fn load_copy(
        &mut self,
        plan: &ProbePlan,
        mode: Mode,
        config: &kspan_config,
        (entry_prog, exit_prog): (&str, &str),
    ) -> std::io::Result<bool> {
        let entry_t = self.templates.get(entry_prog);
        let exit_t = if mode.has_return() {
            self.templates.get(exit_prog)
        } else {
            None
        };
        let (Some(entry_t), true) = (entry_t, exit_t.is_some() || !mode.has_return()) else {
            return Ok(false);
        };
        let (rodata, entry, exit) = match self.prepared.remove(&config.probe_id) {
            Some(p) if p.mode == mode => (p.rodata, p.entry, p.exit),
            _ => {
                let btf_id = if mode.is_trampoline() {
                    plan.signature.btf_id
                } else {
                    0
                };
                load_programs(self.rodata_size, config, btf_id, entry_t, exit_t)?
            }
        };
        let exit = match (exit_t, exit) {
            (Some(t), Some(prog)) => Some((t, prog)),
            _ => None,
        };
        let attach = |t: &ProgramTemplate, prog: &OwnedFd, retprobe: bool| {
            if mode.is_trampoline() {
                t.attach_trace(prog).map(Attachment::Copy)
            } else {
                copies::attach_kprobe(prog.as_fd(), plan.function(), retprobe, 0)
                    .map(Attachment::Kprobe)
            }
        };
        // Exit first, as for libbpf's attachments.
        let exit_link = match &exit {
            Some((t, prog)) => Some(attach(t, prog, true)?),
            None => None,
        };
        let entry_link = attach(entry_t, &entry, false)?;
        // Fields, not `keep`: the templates are still borrowed.
        self.exit_links.extend(exit_link);
        self.entry_links.push(entry_link);
        self.copies.push(rodata);
        self.copies.push(entry);
        self.copies.extend(exit.map(|(_, prog)| prog));
        Ok(true)
    }

    /// Loads, from several threads, the trampoline copies of `plans` that
    /// will want them (trampolines first, not yet attached), once templates
    /// exist: verification is most of a copy's cost, and it runs in parallel
    /// where the attaches cannot. Whatever fails here is loaded again, and
    /// reported, by the attach loop.
    fn prepare_trampoline_copies(&mut self, plans: &[(u32, &ProbePlan)], target_tgid: u32) {
        let (Some(entry_t), Some(exit_t)) = (
            self.templates.get(names::FENTRY_PROG),
            self.templates.get(names::FEXIT_PROG),
        ) else {
            return;
        };
        let work: Vec<(u32, &ProbePlan, Mode)> = plans
            .iter()
            .filter(|(id, _)| !self.prepared.contains_key(id))
            .map(|(id, plan)| {
                let mode = match plan.mode() {
                    Mode::Auto => Mode::AUTO_ORDER[0],
                    mode => mode,
                };
                (*id, *plan, mode)
            })
            .filter(|(_, _, mode)| mode.is_trampoline())
            .collect();
        if work.is_empty() {
            return;
        }
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, 8)
            .min(work.len());
        let next = std::sync::atomic::AtomicUsize::new(0);
        let rodata_size = self.rodata_size;
        let prepared: Vec<(u32, PreparedCopy)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let mut done = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(&(id, plan, mode)) = work.get(i) else {
                                break;
                            };
                            let config = plan.bpf_config(mode, id, target_tgid);
                            let exit_t = mode.has_return().then_some(exit_t);
                            match load_programs(
                                rodata_size,
                                &config,
                                plan.signature.btf_id,
                                entry_t,
                                exit_t,
                            ) {
                                Ok((rodata, entry, exit)) => done.push((
                                    id,
                                    PreparedCopy {
                                        mode,
                                        rodata,
                                        entry,
                                        exit,
                                    },
                                )),
                                Err(e) => tracing::debug!(
                                    function = plan.function(),
                                    error = %e,
                                    "kspan could not prepare this copy"
                                ),
                            }
                        }
                        done
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_default())
                .collect()
        });
        self.prepared.extend(prepared);
    }

    /// The ring buffer, with `processor` run on each record as it is consumed
    /// (no copy: the record is read where the kernel wrote it).
    fn ring_buffer(&self, mut processor: Processor) -> Result<RingBuffer<'static>> {
        let first = self.first().expect("at least one probe was loaded");
        let events = first
            .maps()
            .find(|m| m.name() == names::EVENTS_MAP)
            .expect("the object has a ring buffer");
        let mut builder = RingBufferBuilder::new();
        builder
            .add(&events, move |bytes: &[u8]| {
                processor.process(bytes);
                0
            })
            .map_err(|source| Error::Map {
                map: names::EVENTS_MAP,
                source,
            })?;
        builder.build().map_err(|source| Error::Map {
            map: names::EVENTS_MAP,
            source,
        })
    }

    /// Keeps the links of one function.
    fn keep(&mut self, exit: Option<Attachment>, entry: Attachment) {
        self.exit_links.extend(exit);
        self.entry_links.push(entry);
    }

    /// Detaches every entry program, then every exit program, so that a
    /// call entered before its entry went away still finds its exit (exits
    /// first would strand frames on busy threads while detaches wait for
    /// RCU, and fill their stacks). In each half, kprobe links are detached
    /// from several threads (their RCU waits overlap), trampoline links one
    /// by one (the kernel serialises them anyway).
    fn detach_all(&mut self) {
        let started = std::time::Instant::now();
        let links = self.entry_links.len() + self.exit_links.len();
        detach_in_parallel(std::mem::take(&mut self.entry_links));
        detach_in_parallel(std::mem::take(&mut self.exit_links));
        // The objects stay: their maps hold the last records and the
        // counters that `shutdown` reads after this.
        tracing::debug!(links, elapsed = ?started.elapsed(), "kspan detached");
    }

    /// Turns recording on or off in every program at once.
    fn set_enabled(&self, on: bool) -> Result<()> {
        let Some(first) = self.first() else {
            return Ok(());
        };
        let map = first
            .maps()
            .find(|m| m.name() == names::CONTROL_MAP)
            .expect("the object has its switch");
        map.update(
            &0u32.to_ne_bytes(),
            &u32::from(on).to_ne_bytes(),
            MapFlags::ANY,
        )
        .map_err(|source| Error::Map {
            map: names::CONTROL_MAP,
            source,
        })
    }

    /// Sums the per-CPU kernel counters.
    fn kernel_counters(&self) -> Result<[u64; kspan_bpf::COUNTER_COUNT]> {
        let mut out = [0u64; kspan_bpf::COUNTER_COUNT];
        let Some(first) = self.first() else {
            return Ok(out);
        };
        let map = first
            .maps()
            .find(|m| m.name() == names::COUNTERS_MAP)
            .expect("the object has counters");
        for (i, slot) in out.iter_mut().enumerate() {
            let per_cpu = map
                .lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)
                .map_err(|source| Error::Map {
                    map: names::COUNTERS_MAP,
                    source,
                })?
                .unwrap_or_default();
            *slot = per_cpu
                .iter()
                .filter_map(|v| {
                    v.get(..8)
                        .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
                })
                .sum();
        }
        Ok(out)
    }
}

pub(crate) fn write_config(data: &mut [u8], config: &kspan_config) {
    let size = std::mem::size_of::<kspan_config>();
    assert!(
        data.len() >= size,
        "kspan_cfg is the first variable of .rodata"
    );
    // SAFETY: kspan_config is plain old data (four u32s); viewing it as bytes
    // is sound, and `size` is its exact size.
    let bytes =
        unsafe { std::slice::from_raw_parts((config as *const kspan_config).cast::<u8>(), size) };
    data[..size].copy_from_slice(bytes);
}

/// libbpf writes the verifier log through its print callback; it is captured
/// while an object loads so that the error can carry it.
static LIBBPF_LOG: Mutex<String> = Mutex::new(String::new());

fn capture_libbpf(_level: PrintLevel, msg: String) {
    LIBBPF_LOG
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push_str(&msg);
}

fn with_captured_libbpf_log<T>(f: impl FnOnce() -> T) -> (T, String) {
    static LOADING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = LOADING.lock().unwrap_or_else(|p| p.into_inner());
    LIBBPF_LOG.lock().unwrap_or_else(|p| p.into_inner()).clear();
    let previous = libbpf_rs::set_print(Some((PrintLevel::Info, capture_libbpf)));
    let out = f();
    libbpf_rs::set_print(previous);
    let log = std::mem::take(&mut *LIBBPF_LOG.lock().unwrap_or_else(|p| p.into_inner()));
    (out, log)
}

/// Runs `f` with libbpf's messages captured and dropped (capability probes,
/// whose failures are reported as results, not as libbpf's log lines).
pub(crate) fn quiet_libbpf<T>(f: impl FnOnce() -> T) -> T {
    with_captured_libbpf_log(f).0
}

/// The verifier's part of libbpf's output, if the verifier ran.
fn verifier_log(libbpf_log: &str) -> Option<String> {
    let start = libbpf_log.find("-- BEGIN PROG LOAD LOG --")?;
    let end = libbpf_log[start..]
        .find("-- END PROG LOAD LOG --")
        .map_or(libbpf_log.len(), |e| {
            start + e + "-- END PROG LOAD LOG --".len()
        });
    Some(libbpf_log[start..end].trim().to_owned())
}

/// The kernel's errno inside a libbpf error.
pub(crate) fn errno_of(err: &libbpf_rs::Error) -> Option<i32> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(code) = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
        {
            return Some(code);
        }
        source = e.source();
    }
    // The message of an io::Error ends in "(os error N)".
    let text = format!("{err:#}");
    let tail = text.rsplit("os error ").next()?;
    tail.trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()
}

pub(crate) fn errno_name(errno: Option<i32>) -> String {
    let name = match errno {
        Some(libc::EPERM) => "EPERM",
        Some(libc::ENOENT) => "ENOENT",
        Some(libc::ESRCH) => "ESRCH",
        Some(libc::E2BIG) => "E2BIG",
        Some(libc::EACCES) => "EACCES",
        Some(libc::EBUSY) => "EBUSY",
        Some(libc::EINVAL) => "EINVAL",
        Some(libc::ENOMEM) => "ENOMEM",
        Some(libc::ENOSPC) => "ENOSPC",
        Some(libc::ENOSYS) => "ENOSYS",
        Some(libc::EOPNOTSUPP) => "EOPNOTSUPP",
        Some(524) => "ENOTSUPP",
        Some(n) => return format!("errno {n}"),
        None => "errno unknown",
    };
    name.to_owned()
}

/// The `sys_enter_<name>` formats of the syscall sources among `probes`,
/// mounting tracefs first where it is not (as bpftrace and perf do).
fn read_syscall_formats(probes: &[&'static Probe]) -> Result<SyscallFormats> {
    let mut formats = SyscallFormats::new();
    let syscalls: Vec<&'static Probe> = probes
        .iter()
        .copied()
        .filter(|p| p.spec.mode == Mode::Syscall)
        .collect();
    if syscalls.is_empty() {
        return Ok(formats);
    }
    let tracefs = std::path::Path::new(crate::syscall::TRACEFS);
    let events = tracefs.join("events/syscalls");
    if !events.exists() {
        mount_tracefs(tracefs)?;
    }
    for probe in syscalls {
        let name = probe.spec.function;
        let path = events.join(format!("sys_enter_{name}/format"));
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                formats.insert(name, text);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let known: Vec<String> = std::fs::read_dir(&events)
                    .map(|dir| {
                        dir.filter_map(|e| {
                            e.ok()?
                                .file_name()
                                .to_str()?
                                .strip_prefix("sys_enter_")
                                .map(str::to_owned)
                        })
                        .collect()
                    })
                    .unwrap_or_default();
                return Err(Error::UnknownSyscall {
                    syscall: name.to_owned(),
                    location: probe.spec.location,
                    suggestions: crate::plan::closest_names(
                        known.iter().map(String::as_str),
                        name,
                        3,
                    ),
                });
            }
            Err(e) => {
                return Err(Error::Tracefs {
                    path: tracefs.to_owned(),
                    reason: format!("cannot read {}: {e}", path.display()),
                })
            }
        }
    }
    Ok(formats)
}

/// The functions the kernel can trace, from tracefs, when readable (it is
/// not where the function tracer is locked down; then nothing is ruled out
/// here and the attach says what the kernel refuses).
fn read_traceable_functions() -> Option<std::collections::HashSet<String>> {
    let path = std::path::Path::new(crate::syscall::TRACEFS).join("available_filter_functions");
    let text = std::fs::read_to_string(path).ok()?;
    Some(
        text.lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_owned)
            .collect(),
    )
}

fn mount_tracefs(at: &std::path::Path) -> Result<()> {
    let fail = |reason: String| Error::Tracefs {
        path: at.to_owned(),
        reason,
    };
    let target = std::ffi::CString::new(at.as_os_str().as_encoded_bytes())
        .map_err(|_| fail("the path has a NUL byte".to_owned()))?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call;
    // tracefs takes no mount data.
    let rc = unsafe {
        libc::mount(
            c"tracefs".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(fail(format!(
            "it is not mounted, and mounting it failed: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// What a refusal means, and what to do.
pub(crate) fn refusal_reason(errno: Option<i32>, mode: Mode, step: &str) -> String {
    if errno == Some(libc::EMFILE) {
        return format!(
            "this process has run out of file descriptors (EMFILE) while attaching {mode} \
             programs (kspan raised its soft limit to the hard one): raise the hard \
             open-files limit (`ulimit -Hn`, RLIMIT_NOFILE)"
        );
    }
    if matches!(mode, Mode::Kprobe | Mode::Kretprobe) {
        return kprobe_refusal_reason(errno, mode, std::path::Path::new(KPROBE_PMU).exists());
    }
    if mode == Mode::Syscall {
        return format!("the kernel refused to {step} the syscall tracepoint program");
    }
    match errno {
        Some(libc::EPERM) => format!(
            "the kernel refused to {step} the BPF trampoline: {mode} is not permitted on this \
             kernel (it is locked down, or its function tracer is disabled) although the process \
             has the capabilities; run on a kernel that allows BPF trampolines"
        ),
        Some(libc::EOPNOTSUPP) | Some(524) => format!(
            "this kernel does not support BPF trampolines ({mode} needs CONFIG_FUNCTION_TRACER \
             and CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS)"
        ),
        Some(libc::ESRCH) | Some(libc::ENOENT) => {
            "the function cannot be traced (it may be inlined, notrace, or missing from the \
             kernel's symbol table)"
                .to_owned()
        }
        Some(libc::EACCES) | Some(libc::EINVAL) => {
            format!("the kernel rejected the {mode} program (see the verifier log)")
        }
        Some(libc::EBUSY) => {
            "the function already has the most trampoline programs allowed".to_owned()
        }
        Some(libc::ENOMEM) => "the kernel is out of memory for BPF programs".to_owned(),
        _ => format!("the kernel refused to {step} the {mode} program"),
    }
}

/// What a refusal of a kprobe or kretprobe means, and what to do.
fn kprobe_refusal_reason(errno: Option<i32>, mode: Mode, kernel_has_kprobes: bool) -> String {
    if !kernel_has_kprobes {
        return format!(
            "this kernel has no kprobes (built without CONFIG_KPROBES: no kprobe PMU at \
             {KPROBE_PMU}); {mode} cannot work here, use a trampoline mode (fentry/fexit) where \
             the kernel allows it"
        );
    }
    match errno {
        Some(libc::ENOENT) | Some(libc::EINVAL) => {
            "the function cannot be probed: it is not in /proc/kallsyms (inlined or static \
             under another name), or it is on the kernel's kprobe blacklist"
                .to_owned()
        }
        Some(libc::EPERM) | Some(libc::EACCES) => {
            format!("the kernel refused the {mode}: kprobes are locked down here")
        }
        Some(libc::EBUSY) => "the function already has the most probes allowed".to_owned(),
        _ => format!("the kernel refused the {mode}"),
    }
}

/// A kind of attach mechanism, for [`KspanBuilder::disable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mechanism {
    /// BPF trampolines: fentry and fexit.
    Trampolines,
    /// kprobes and kretprobes.
    Kprobes,
    /// Tracepoints: syscall sources.
    Tracepoints,
}

impl Mechanism {
    fn of(mode: Mode) -> Mechanism {
        match mode {
            Mode::Fentry | Mode::Fexit | Mode::Auto => Mechanism::Trampolines,
            Mode::Kprobe | Mode::Kretprobe => Mechanism::Kprobes,
            Mode::Syscall => Mechanism::Tracepoints,
        }
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mechanism::Trampolines => "trampolines (fentry/fexit)",
            Mechanism::Kprobes => "kprobes",
            Mechanism::Tracepoints => "tracepoints",
        })
    }
}

/// How one probe was attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachDecision {
    /// The kernel function (or syscall).
    pub function: &'static str,
    /// The mode the annotation asked for.
    pub requested: Mode,
    /// The mode in use.
    pub chosen: Mode,
    /// Modes tried or skipped before, each with why.
    pub rejected: Vec<(Mode, String)>,
    /// Attached together with the other functions of the same settings by
    /// one kprobe.multi link per direction (kprobes on kernels with fprobe).
    pub multi: bool,
}

impl AttachDecision {
    /// The rejected modes and reasons on one line (`-` for none).
    pub fn rejected_summary(&self) -> String {
        if self.rejected.is_empty() {
            return "-".to_owned();
        }
        self.rejected
            .iter()
            .map(|(m, why)| format!("{m}: {why}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Counters kept in user space.
#[derive(Debug, Default)]
struct Counters {
    spans: AtomicU64,
    decode_errors: AtomicU64,
    unknown_probe: AtomicU64,
    handler_panics: AtomicU64,
    discarded: AtomicU64,
}

/// What kspan did and dropped. Every drop has a counter; none is silent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Spans handed to the tracer.
    pub spans_exported: u64,
    /// Records the kernel put in the ring buffer.
    pub records_emitted: u64,
    /// Spans lost because the ring buffer was full.
    pub dropped_ring_buffer_full: u64,
    /// Entries not recorded because a task had too many open kernel spans.
    pub dropped_stack_depth: u64,
    /// Open spans discarded because their exit never came.
    pub dropped_lost_exit: u64,
    /// Exits with no recorded entry (calls already running at attach).
    pub unmatched_exits: u64,
    /// Entries not recorded because per-task storage could not be allocated.
    pub dropped_no_storage: u64,
    /// Records that could not be decoded.
    pub decode_errors: u64,
    /// Records naming a probe the runtime does not know.
    pub unknown_probe: u64,
    /// Handlers that panicked (their spans are still exported).
    pub handler_panics: u64,
    /// Spans the handlers discarded on purpose (not a loss).
    pub discarded_by_handler: u64,
    /// Calls not recorded because the application span they were made under
    /// is not sampled: a sampling decision, taken in the kernel (not a loss).
    pub unsampled: u64,
    /// Calls made with no application span active, not recorded because of
    /// [`Orphans::Drop`] (not a loss).
    pub orphans_dropped: u64,
}

impl Stats {
    /// Spans lost for any reason.
    pub fn lost(&self) -> u64 {
        self.dropped_ring_buffer_full
            + self.dropped_stack_depth
            + self.dropped_lost_exit
            + self.dropped_no_storage
            + self.decode_errors
            + self.unknown_probe
    }
}

/// Running kspan. Dropping it detaches every probe.
///
/// Spans reach the application's pipeline in batches: the kernel wakes the
/// consumer once 256 KiB of records wait, and the consumer also collects
/// whatever is there every 50 ms, so a span is handed to the tracer at most
/// about 50 ms after its call returned. [`Kspan::shutdown`] collects the rest.
pub struct Kspan {
    decisions: Vec<AttachDecision>,
    skipped: Vec<(String, String)>,
    loaded: Loaded,
    provider: SdkTracerProvider,
    stats: Arc<Counters>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Kspan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kspan")
            .field("probes", &self.loaded.objects.len())
            .finish()
    }
}

impl Kspan {
    /// Starts configuring kspan; spans go through `provider`, the application's
    /// own tracer provider, which must take its ids from
    /// [`KernelSpanIds`](crate::KernelSpanIds)
    /// (`.with_id_generator(kspan::KernelSpanIds::default())`; `start` fails
    /// otherwise).
    pub fn builder(provider: &SdkTracerProvider) -> KspanBuilder {
        KspanBuilder {
            provider: provider.clone(),
            probes: Vec::new(),
            btf_path: PathBuf::from(KERNEL_BTF),
            all_processes: false,
            disabled: Vec::new(),
            orphans: Orphans::NewTrace,
            keep_unsampled: false,
            thread_context: true,
            context_observer: true,
        }
    }

    /// Functions a pattern matched that are not traced, each with why
    /// (deny list, inlined or notrace).
    pub fn skipped(&self) -> &[(String, String)] {
        &self.skipped
    }

    /// How each probe was attached, and why other mechanisms were not used.
    pub fn attach_plan(&self) -> &[AttachDecision] {
        &self.decisions
    }

    /// Current figures.
    pub fn stats(&self) -> Result<Stats> {
        let k = self.loaded.kernel_counters()?;
        let s = &self.stats;
        Ok(Stats {
            spans_exported: s.spans.load(Ordering::Relaxed),
            records_emitted: k[5],
            dropped_ring_buffer_full: k[0],
            dropped_stack_depth: k[1],
            dropped_lost_exit: k[2],
            unmatched_exits: k[3],
            dropped_no_storage: k[4],
            decode_errors: s.decode_errors.load(Ordering::Relaxed),
            unknown_probe: s.unknown_probe.load(Ordering::Relaxed),
            handler_panics: s.handler_panics.load(Ordering::Relaxed),
            discarded_by_handler: s.discarded.load(Ordering::Relaxed),
            unsampled: k[kspan_bpf::consts::KSPAN_CTR_UNSAMPLED as usize],
            orphans_dropped: k[kspan_bpf::consts::KSPAN_CTR_ORPHAN as usize],
        })
    }

    /// Detaches every probe, exports every span still in the ring buffer,
    /// flushes the tracer provider and returns the final figures.
    pub async fn shutdown(mut self) -> Result<Stats> {
        // No new records once the links are gone.
        self.loaded.detach_all();
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            task.await.map_err(|e| Error::Consumer(e.to_string()))?;
        }
        let stats = self.stats()?;
        if stats.lost() > 0 || stats.handler_panics > 0 {
            tracing::warn!(?stats, "kspan lost spans or handlers panicked");
        }
        let provider = self.provider.clone();
        tokio::task::spawn_blocking(move || provider.force_flush())
            .await
            .map_err(|e| Error::Consumer(e.to_string()))?
            .map_err(Error::Flush)?;
        Ok(stats)
    }
}

impl Drop for Kspan {
    fn drop(&mut self) {
        self.loaded.detach_all();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The ring buffer's epoll descriptor, for tokio's reactor.
struct EpollFd(RawFd);

impl AsRawFd for EpollFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

struct Consumer {
    // Declared before `ring`, so dropped before it: the descriptor it
    // watches belongs to the ring buffer.
    fd: AsyncFd<EpollFd>,
    ring: RingBuffer<'static>,
}

impl Consumer {
    /// Registers the ring buffer's epoll descriptor with `runtime`'s reactor;
    /// a failure fails `start`, not the consumer later.
    fn new(ring: RingBuffer<'static>, runtime: &tokio::runtime::Handle) -> Result<Self> {
        let _in_runtime = runtime.enter();
        // SAFETY: the epoll descriptor belongs to `ring`, which is moved into
        // the same `Consumer` and declared after `fd`, so it outlives the
        // `AsyncFd`; it stays open and refers to the same epoll instance for
        // the whole life of the `AsyncFd`.
        let fd = unsafe {
            AsyncFd::register_with_interest(EpollFd(ring.epoll_fd()), tokio::io::Interest::READABLE)
        }
        .map_err(|e| Error::Consumer(format!("cannot poll the ring buffer: {e}")))?;
        Ok(Consumer { fd, ring })
    }

    async fn run(self, mut stop: watch::Receiver<bool>) {
        let fd = &self.fd;
        // The kernel wakes the consumer only once KSPAN_WAKEUP_BYTES wait
        // (a wakeup per record would tax every traced call); the timer
        // collects a quieter trickle.
        let mut tick = tokio::time::interval(CONSUMER_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                _ = tick.tick() => self.drain(),
                ready = fd.readable() => {
                    let mut guard = match ready {
                        Ok(guard) => guard,
                        Err(e) => {
                            // Not expected from an epoll descriptor; said
                            // loudly, and the rest is drained below.
                            tracing::error!(error = %e, "kspan stops polling its ring buffer");
                            break;
                        }
                    };
                    // Readiness is edge-triggered: cleared before draining,
                    // so that a wakeup sent while draining is not lost.
                    guard.clear_ready();
                    self.drain();
                }
            }
        }
        // Whatever the kernel wrote before the links went away.
        self.drain();
    }

    fn drain(&self) {
        if let Err(e) = self.ring.consume() {
            tracing::error!(error = %e, "kspan ring buffer consume failed");
        }
    }
}

/// How long a record may wait in the ring buffer when fewer than
/// `KSPAN_WAKEUP_BYTES` are waiting (documented with `Kspan`).
const CONSUMER_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Turns records into spans, inside the ring buffer's callback.
struct Processor {
    plans: Vec<ProbePlan>,
    factory: SpanFactory<SdkTracer>,
    stats: Arc<Counters>,
}

impl Processor {
    fn process(&mut self, bytes: &[u8]) {
        let view = match parse_record(bytes) {
            Ok(view) => view,
            Err(_) => {
                self.stats.decode_errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let Some(plan) = self.plans.get(view.header.probe_id as usize) else {
            self.stats.unknown_probe.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let counter = match self.factory.process(plan, &view) {
            Outcome::Exported => &self.stats.spans,
            Outcome::Discarded => &self.stats.discarded,
            Outcome::HandlerPanicked => {
                self.stats.spans.fetch_add(1, Ordering::Relaxed);
                &self.stats.handler_panics
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifier_log_is_cut_out() {
        let log = "libbpf: prog 'x': BPF program load failed: Permission denied\n\
                   libbpf: prog 'x': -- BEGIN PROG LOAD LOG --\n0: R1=ctx\ninvalid access\n\
                   -- END PROG LOAD LOG --\nlibbpf: failed to load object\n";
        let v = verifier_log(log).unwrap();
        assert!(v.starts_with("-- BEGIN PROG LOAD LOG --"));
        assert!(v.contains("invalid access"));
        assert!(v.ends_with("-- END PROG LOAD LOG --"));
        assert_eq!(verifier_log("libbpf: nothing"), None);
    }

    #[test]
    fn errno_from_libbpf_errors() {
        let e = libbpf_rs::Error::from_raw_os_error(libc::EPERM);
        assert_eq!(errno_of(&e), Some(libc::EPERM));
        assert_eq!(errno_name(errno_of(&e)), "EPERM");
        assert_eq!(errno_name(Some(524)), "ENOTSUPP");
        assert_eq!(errno_name(Some(4000)), "errno 4000");
        assert!(refusal_reason(Some(libc::EPERM), Mode::Fexit, "load")
            .contains("fexit is not permitted"));
    }

    #[test]
    fn config_goes_first_in_rodata() {
        let mut data = vec![0xffu8; std::mem::size_of::<kspan_config>() + 8];
        let config = kspan_config {
            target_tgid: 7,
            probe_id: 2,
            nr_args: 3,
            mode: 1,
            nr_caps: 0,
            record_size: 200,
            ..Default::default()
        };
        write_config(&mut data, &config);
        assert_eq!(&data[..12], &[7, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]);
        assert_eq!(&data[20..24], &200u32.to_ne_bytes());
        assert_eq!(&data[data.len() - 8..], &[0xff; 8]);
    }
}
