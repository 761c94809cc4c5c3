// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Attaching every planned probe: the order, `auto`'s fallback from one
//! hook to the next, and the decision recorded for each function.
//!
//! Each hook has a module ([`trampoline`], [`kprobe`], [`tracepoint`]); all
//! get their programs the same way ([`Attacher::programs`]): a copy of a
//! program already loaded when there is one (see [`crate::bpf::copies`]),
//! else a load of the object through libbpf, which then gives the copies.
//! A copy that fails is loaded through libbpf instead, said at `warn` and
//! in the decision's [`AttachDecision::fallbacks`]. The exit program is
//! attached before the entry program, so that no entry is recorded whose
//! exit is not watched; a function whose attach fails keeps nothing.

mod kprobe;
mod links;
mod scheduler;
mod tracepoint;
mod trampoline;

use std::collections::HashMap;
use std::os::fd::OwnedFd;

use kspan_bpf::types::kspan_config;

use crate::annotation::{Attachment, Hook, Mechanism, Mode, Probe};
use crate::bpf::config::RuntimeSettings;
use crate::bpf::copies::{self, ProgramTemplate};
use crate::bpf::maps::SharedMaps;
use crate::bpf::object::{self, LoadRequest};
use crate::bpf::program::Program;
use crate::bpf::{refusal_reason, KernelCapabilities, LoadError};
use crate::kernel::errno;
use crate::plan::{denylist, NotAttached, ProbePlan};

pub(crate) use links::{Links, Programs};
pub(crate) use scheduler::attach as attach_scheduler;

/// How one probe was attached.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttachDecision {
    /// The kernel function (or syscall).
    pub function: &'static str,
    /// The mode the annotation asked for.
    pub requested: Mode,
    /// The hook in use.
    pub chosen: Hook,
    /// Hooks tried or skipped before, each with why; for `auto` on a
    /// kernel that preempts inside trampoline programs, also fexit, passed
    /// over for kprobes (see [`crate::kernel::preemption`]).
    pub rejected: Vec<(Hook, String)>,
    /// How the chosen hook's programs are attached.
    pub attachment: Attachment,
    /// The attachments of the chosen hook that cost less than
    /// `attachment` and were not used, best first, each with why (not on
    /// this kernel, turned off, refused): with `attachment`, every
    /// mechanism considered.
    pub passed_over: Vec<(Attachment, String)>,
    /// Attached together with the other functions of the same settings by
    /// one link (fsession.multi, kprobe.session, or kprobe.multi per
    /// direction).
    pub multi: bool,
    /// Faster ways that failed before the one that worked, each with why
    /// (a program copy the kernel refused, a kprobe.multi batch).
    pub fallbacks: Vec<String>,
    /// The probe's functions before `function` (it names alternatives,
    /// `"do_unlinkat" | "filename_unlinkat"`) that this kernel lacks or
    /// cannot trace, each with why; for a probe not attached, all of them.
    pub functions_passed_over: Vec<(&'static str, String)>,
    /// Why the probe is not attached at all: it is optional
    /// (`optional = true`) and this kernel can trace none of its functions.
    /// `function` is then its first function, and `chosen` and
    /// `attachment` what its mode would have used.
    pub not_attached: Option<String>,
}

impl AttachDecision {
    /// The decision for `plan`, attached on `chosen` through `attachment`.
    fn new(
        plan: &ProbePlan,
        chosen: Hook,
        attachment: Attachment,
        passed_over: Vec<(Attachment, String)>,
    ) -> Self {
        AttachDecision {
            function: plan.function(),
            requested: plan.mode(),
            chosen,
            rejected: Vec::new(),
            attachment,
            passed_over,
            multi: attachment.is_multi(),
            fallbacks: Vec::new(),
            functions_passed_over: plan.passed_over.clone(),
            not_attached: None,
        }
    }

    /// The decision for an optional probe left out.
    pub(crate) fn left_out(left_out: &NotAttached) -> Self {
        let spec = &left_out.probe.spec;
        let chosen = Hook::candidates(spec.mode)
            .first()
            .copied()
            .unwrap_or(Hook::Fexit);
        let attachment = Attachment::ladder(chosen)[0];
        AttachDecision {
            function: spec.function,
            requested: spec.mode,
            chosen,
            rejected: Vec::new(),
            attachment,
            passed_over: Vec::new(),
            multi: false,
            fallbacks: Vec::new(),
            functions_passed_over: left_out.tried.clone(),
            not_attached: Some(format!(
                "an optional probe, and this kernel can trace none of its functions: {}",
                left_out.reason()
            )),
        }
    }

    /// The attachments passed over and why, on one line (`-` for none).
    pub fn passed_over_summary(&self) -> String {
        if self.passed_over.is_empty() {
            return "-".to_owned();
        }
        self.passed_over
            .iter()
            .map(|(a, why)| format!("{a}: {why}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The rejected hooks and reasons on one line (`-` for none).
    pub fn rejected_summary(&self) -> String {
        if self.rejected.is_empty() {
            return "-".to_owned();
        }
        self.rejected
            .iter()
            .map(|(hook, why)| format!("{hook}: {why}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Why a function could not be attached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttachError {
    /// The kernel refused to load a program.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The program loaded but the kernel refused to attach it.
    #[error("cannot attach {hook} to `{function}`: {reason} ({errno_name})")]
    Refused {
        /// The kernel function.
        function: String,
        /// The hook.
        hook: Hook,
        /// The kernel's errno (positive), when known.
        errno: Option<i32>,
        /// Its symbolic name.
        errno_name: String,
        /// What the errno means here.
        reason: String,
        /// The system call's error.
        source: std::io::Error,
    },
    /// `auto` found no hook that works for a function.
    #[error(
        "cannot trace `{function}` on this kernel: every mechanism was tried or ruled out: {}{hint}",
        tried.iter().map(|(hook, why)| format!("[{hook}] {why}")).collect::<Vec<_>>().join("; ")
    )]
    NoMechanism {
        /// The kernel function.
        function: String,
        /// Each hook, with why it did not work.
        tried: Vec<(Hook, String)>,
        /// What does work here, when something does (`; ...`), or nothing.
        hint: String,
    },
    /// A function a probe names is one the kernel cannot trace, found when
    /// the kernel refused the multi-function link it was in.
    #[error(
        "`{function}` (probe at {location}) cannot be traced: it is {reason}; trace a caller \
         or a callee instead"
    )]
    NotTraceable {
        /// The kernel function.
        function: String,
        /// Where the probe is declared.
        location: &'static str,
        /// Why the kernel cannot trace it.
        reason: &'static str,
    },
    /// The probe's mode needs a mechanism the builder turned off.
    #[error(
        "`{function}` asks for {hook}, and `KspanBuilder::disable({mechanism:?})` turned \
         {mechanism} off: remove that call, or give the probe another mode (`mode = \"auto\"` \
         takes what is left)"
    )]
    Disabled {
        /// The kernel function.
        function: String,
        /// The hook its mode asks for.
        hook: Hook,
        /// The mechanism turned off.
        mechanism: Mechanism,
    },
}

impl AttachError {
    fn refused(function: &str, hook: Hook, source: std::io::Error) -> Self {
        let errno = source.raw_os_error();
        AttachError::Refused {
            function: function.to_owned(),
            hook,
            errno,
            errno_name: errno::name_of(errno).into_owned(),
            reason: refusal_reason(errno, hook, "attach"),
            source,
        }
    }
}

/// Why `attachment` cannot be used on a kernel with `caps`, before trying
/// it: the kernel lacks it, or the builder turned it off (`disabled`).
fn unusable(
    caps: &KernelCapabilities,
    disabled: &[Mechanism],
    attachment: Attachment,
) -> Option<String> {
    let (feature, needs): (Option<&crate::bpf::Feature>, &[Mechanism]) = match attachment {
        Attachment::FsessionMulti => (
            Some(&caps.trampoline_multi),
            &[
                Mechanism::Sessions,
                Mechanism::MultiLinks,
                Mechanism::Trampolines,
            ],
        ),
        Attachment::Fsession => (Some(&caps.trampoline_sessions), &[Mechanism::Sessions]),
        Attachment::KprobeSession => (
            Some(&caps.kprobe_sessions),
            &[Mechanism::Sessions, Mechanism::MultiLinks],
        ),
        Attachment::KprobeMulti => (Some(&caps.kprobe_multi), &[Mechanism::MultiLinks]),
        _ => (None, &[]),
    };
    if let Some(off) = needs.iter().find(|m| disabled.contains(m)) {
        return Some(format!(
            "turned off by KspanBuilder::disable(Mechanism::{off:?})"
        ));
    }
    feature.filter(|f| !f.is_available()).map(|f| f.to_string())
}

/// The hooks a probe of `mode` tries, in order, on a kernel with `caps`:
/// `auto` puts kprobes first where the kernel preempts inside trampoline
/// programs and has kprobes ([`kprobes_first`]).
pub(crate) fn candidates(
    mode: Mode,
    caps: &KernelCapabilities,
    disabled: &[Mechanism],
) -> &'static [Hook] {
    if mode == Mode::Auto && kprobes_first(caps, disabled) {
        &[Hook::Kretprobe, Hook::Fexit]
    } else {
        Hook::candidates(mode)
    }
}

/// Whether `auto` takes kprobes before trampolines here. The kernel runs a
/// program at most once at a time on a CPU; trampoline programs run with
/// preemption on, so on a kernel that preempts kernel code (`full`,
/// `lazy`, `rt`) a task preempted inside one makes other tasks' calls of
/// it on that CPU skipped: their entry, their exit, or both, and a call
/// that lost both is counted nowhere. Kprobe programs run with preemption
/// off and lose none to it (nor to kspan's own map calls:
/// [`registration_skips`]). A model that cannot be read counts as
/// preemptible.
fn kprobes_first(caps: &KernelCapabilities, disabled: &[Mechanism]) -> bool {
    caps.preemption.preempts_programs()
        && caps.kprobes.is_available()
        && !disabled.contains(&Mechanism::Kprobes)
}

/// Why the runtime does not register thread-context records here, if it
/// should not: registering one is a BPF map update, and while it runs the
/// kernel skips every kprobe and tracepoint program on its CPU
/// ([`Attachment::skipped_during_map_calls`]). On a kernel that preempts
/// kernel code the registering thread can be preempted inside it, and the
/// calls other threads make on that CPU meanwhile lose their programs' runs
/// (measured: 64 to 201 runs at a time in sid's 7.2 guest, in 1 run of 5
/// of `vm_preempt`). Such programs then read user memory instead.
pub(crate) fn registration_skips(
    capabilities: &KernelCapabilities,
    decisions: &[AttachDecision],
    scheduler: Option<crate::sched::SchedMechanism>,
) -> Option<String> {
    if !capabilities.preemption.preempts_programs() {
        return None;
    }
    let guarded = decisions
        .iter()
        .filter(|d| d.not_attached.is_none())
        .find(|d| d.attachment.skipped_during_map_calls())
        .map(|d| format!("{} through {}", d.function, d.attachment.as_str()))
        .or_else(|| {
            scheduler
                .filter(|m| m.skipped_during_map_calls())
                .map(|m| format!("the scheduler's account through {m}"))
        })?;
    Some(format!(
        "a thread registers its record with a BPF map update, during which the kernel skips \
         kprobe and tracepoint programs on its CPU ({guarded}); this kernel's preemption is \
         {}, so a registering thread preempted there would cost other threads' calls",
        capabilities.preemption
    ))
}

/// Why `auto` passed over fexit for kprobes on this kernel.
fn preemptible_trampolines(caps: &KernelCapabilities) -> String {
    format!(
        "passed over for kprobes: this kernel's preemption is {}; a task preempted inside a \
         trampoline program makes the kernel skip that program for every other task on its \
         CPU until it runs again, so calls lose their entry, exit or both, a call that lost \
         both uncounted; kprobe programs run with preemption off and lose none (ask for \
         `mode = \"fexit\"` to take trampolines anyway)",
        caps.preemption
    )
}

/// Whether every kernel function of `probes` (syscall sources aside) goes
/// to fsession.multi first here: then a link the kernel refuses can say
/// which of its functions are untraceable, and the planner needs only what
/// the symbol table rules out, not the kernel's whole traceable list.
pub(crate) fn multi_links_take_all(
    probes: &[&'static Probe],
    caps: &KernelCapabilities,
    disabled: &[Mechanism],
) -> bool {
    unusable(caps, disabled, Attachment::FsessionMulti).is_none()
        && probes
            .iter()
            .filter(|p| p.spec.mode != Mode::Syscall)
            .all(|p| candidates(p.spec.mode, caps, disabled).first() == Some(&Hook::Fexit))
}

/// What the multi-function links did, by plan index.
#[derive(Default)]
pub(super) struct Batches {
    /// The functions attached.
    pub attached: HashMap<usize, AttachDecision>,
    /// The functions of batches the kernel refused, with the attachment
    /// and why: each is then attached alone, which reports errors per
    /// function.
    pub refused: HashMap<usize, (Attachment, String)>,
    /// Functions of patterns left out of a batch because the kernel cannot
    /// trace them, and why: not attached at all.
    pub skipped: HashMap<usize, String>,
    /// Functions probes name in a mode with no other mechanism, left out
    /// of a batch because the kernel cannot trace them: an error.
    pub untraceable: Vec<usize>,
}

/// What attaching leaves running.
#[derive(Debug)]
pub(crate) struct Attached {
    /// How each probe was attached, in plan order.
    pub decisions: Vec<AttachDecision>,
    /// The links: dropping them detaches.
    pub links: Links,
    /// The maps every program shares (ring buffer, counters, switch).
    pub maps: SharedMaps,
    /// `(function, why)` for each match of a pattern found untraceable
    /// while attaching (the planner had no traceable list), not attached.
    pub skipped: Vec<(String, String)>,
}

/// The kernel's list of traceable functions, as attaching needs it.
enum TraceableList {
    /// The planner applied it: a refused link is not about it.
    Applied,
    /// The planner did not have it; read when a link is refused.
    NotRead,
    /// Read (`None`: unreadable).
    Read(Option<std::collections::HashSet<String>>),
}

/// What the attach of many functions carries from one to the next.
pub(crate) struct Attacher<'a> {
    runtime: &'a RuntimeSettings,
    capabilities: &'a KernelCapabilities,
    disabled: &'a [Mechanism],
    /// Made by the first load.
    maps: Option<SharedMaps>,
    /// What copies are made from, by program.
    templates: HashMap<Program, ProgramTemplate>,
    /// Kprobe programs serving many functions, by settings and program.
    shared: HashMap<(Vec<u8>, Program), (OwnedFd, Option<OwnedFd>)>,
    /// Trampoline copies loaded ahead of their attach, by probe id.
    prepared: HashMap<u32, trampoline::Prepared>,
    links: Links,
    traceable: TraceableList,
}

impl<'a> Attacher<'a> {
    pub(crate) fn new(
        runtime: &'a RuntimeSettings,
        capabilities: &'a KernelCapabilities,
        disabled: &'a [Mechanism],
    ) -> Self {
        Attacher {
            runtime,
            capabilities,
            disabled,
            maps: None,
            templates: HashMap::new(),
            shared: HashMap::new(),
            prepared: HashMap::new(),
            links: Links::default(),
            traceable: TraceableList::Applied,
        }
    }

    /// The plans were made without the kernel's list of traceable
    /// functions (see [`multi_links_take_all`]): a multi-function link the
    /// kernel refuses reads it, and is made again without what it leaves
    /// out.
    pub(crate) fn planned_without_traceable_list(mut self) -> Self {
        self.traceable = TraceableList::NotRead;
        self
    }

    /// After a refused link: the kernel's list of traceable functions,
    /// where the planner did not apply it and it can be read.
    fn traceable_list_after_refusal(&mut self) -> Option<&std::collections::HashSet<String>> {
        if let TraceableList::NotRead = self.traceable {
            let list = crate::kernel::tracefs::traceable_functions().ok();
            self.traceable = TraceableList::Read(list);
        }
        match &self.traceable {
            TraceableList::Read(list) => list.as_ref(),
            _ => None,
        }
    }

    /// Attaches every plan, its index as its probe id; stops at the first
    /// function that cannot be attached (dropping `self` detaches the rest).
    pub(crate) fn attach_all(mut self, plans: &[ProbePlan]) -> Result<Attached, AttachError> {
        let total = plans.len();
        let mut decisions = Vec::with_capacity(total);
        let mut prepared_ahead = false;
        let mut batched = trampoline::attach_batches(&mut self, plans);
        let kprobes = kprobe::attach_batches(&mut self, plans);
        batched.attached.extend(kprobes.attached);
        batched.refused.extend(kprobes.refused);
        if let Some(&i) = batched.untraceable.first() {
            let plan = &plans[i];
            return Err(AttachError::NotTraceable {
                function: plan.function().to_owned(),
                location: plan.probe.spec.location,
                reason: denylist::ABSENT_FROM_LIST,
            });
        }
        let mut skipped = Vec::new();
        for (probe_id, plan) in plans.iter().enumerate() {
            if let Some(why) = batched.skipped.remove(&probe_id) {
                tracing::info!(
                    function = plan.function(),
                    reason = why.as_str(),
                    "kspan skips a match"
                );
                skipped.push((plan.function().to_owned(), why));
                continue;
            }
            // A progress line for large sets (patterns): every tenth.
            if total >= 20 && probe_id % (total / 10) == 0 {
                tracing::info!(attached = probe_id, total, "kspan attaching");
            }
            let mut decision = match batched.attached.remove(&probe_id) {
                Some(decision) => decision,
                None => {
                    let refused = batched.refused.remove(&probe_id);
                    self.attach_one(plan, probe_id as u32, refused)?
                }
            };
            if decision.requested == Mode::Auto
                && decision.chosen.is_kprobe()
                && kprobes_first(self.capabilities, self.disabled)
            {
                let off = Hook::Fexit.mechanism();
                let why = if self.disabled.contains(&off) {
                    format!("{off} disabled by KspanBuilder::disable")
                } else {
                    preemptible_trampolines(self.capabilities)
                };
                decision.rejected.insert(0, (Hook::Fexit, why));
            }
            // The first trampoline attached gave templates: load the copies
            // of the rest in parallel, ahead of their attaches.
            if decision.chosen.is_trampoline() && !prepared_ahead {
                prepared_ahead = true;
                trampoline::prepare(&mut self, plans, probe_id + 1, &batched.attached);
            }
            tracing::info!(
                function = decision.function,
                requested = decision.requested.as_str(),
                chosen = decision.chosen.as_str(),
                attachment = decision.attachment.as_str(),
                passed_over = %decision.passed_over_summary(),
                rejected = %decision.rejected_summary(),
                fallbacks = ?decision.fallbacks,
                "kspan attach plan"
            );
            decisions.push(decision);
        }
        // The planner refuses an empty set, so the first attach made them.
        let maps = self.maps.take().ok_or_else(|| AttachError::NoMechanism {
            function: "(no function planned)".to_owned(),
            tried: Vec::new(),
            hint: String::new(),
        })?;
        Ok(Attached {
            decisions,
            links: std::mem::take(&mut self.links),
            maps,
            skipped,
        })
    }

    /// The first hook `plan` tries here.
    fn first_hook(&self, plan: &ProbePlan) -> Option<Hook> {
        candidates(plan.mode(), self.capabilities, self.disabled)
            .first()
            .copied()
    }

    /// Why `attachment` cannot be used here, before trying it: the kernel
    /// lacks it, or the builder turned it off.
    fn unusable(&self, attachment: Attachment) -> Option<String> {
        unusable(self.capabilities, self.disabled, attachment)
    }

    /// The attachments of `hook` better than `chosen`, each with why it was
    /// not used: `why` where the caller knows (a refusal), else
    /// [`Self::unusable`].
    fn passed_over(
        &self,
        hook: Hook,
        chosen: Attachment,
        mut why: impl FnMut(Attachment) -> Option<String>,
    ) -> Vec<(Attachment, String)> {
        Attachment::ladder(hook)
            .iter()
            .take_while(|a| **a != chosen)
            .map(|&a| {
                let reason = why(a)
                    .or_else(|| self.unusable(a))
                    .unwrap_or_else(|| "not tried".to_owned());
                (a, reason)
            })
            .collect()
    }

    /// Attaches one probe: its own hook, or for `auto` the first that
    /// works, recording why each earlier one was passed over. `refused`:
    /// a multi-function link that took this function and failed, and why.
    fn attach_one(
        &mut self,
        plan: &ProbePlan,
        probe_id: u32,
        refused: Option<(Attachment, String)>,
    ) -> Result<AttachDecision, AttachError> {
        let requested = plan.mode();
        let auto = requested == Mode::Auto;
        let mut rejected = Vec::new();
        let mut fallbacks: Vec<String> = refused.iter().map(|(_, why)| why.clone()).collect();
        let mut reasons: Vec<(Attachment, String)> = refused.into_iter().collect();
        for &hook in candidates(requested, self.capabilities, self.disabled) {
            if !auto && self.disabled.contains(&hook.mechanism()) {
                return Err(AttachError::Disabled {
                    function: plan.function().to_owned(),
                    hook,
                    mechanism: hook.mechanism(),
                });
            }
            if self.disabled.contains(&hook.mechanism()) {
                rejected.push((
                    hook,
                    format!("{} disabled by KspanBuilder::disable", hook.mechanism()),
                ));
                continue;
            }
            if auto {
                if let Some(refused) = self.capabilities.refuses(hook) {
                    rejected.push((hook, refused.to_string()));
                    continue;
                }
                if let (true, Some(why)) = (hook.is_trampoline(), &plan.trampoline_refusal) {
                    rejected.push((hook, why.clone()));
                    continue;
                }
            }
            let attached = match hook {
                Hook::Fentry | Hook::Fexit => {
                    trampoline::attach(self, plan, hook, probe_id, &mut fallbacks, &mut reasons)
                }
                Hook::Kprobe | Hook::Kretprobe => {
                    kprobe::attach(self, plan, hook, probe_id, &mut fallbacks)
                }
                Hook::Syscall => tracepoint::attach(self, plan, probe_id, &mut fallbacks),
            };
            match attached {
                Ok(attachment) => {
                    let passed_over = self.passed_over(hook, attachment, |a| {
                        reasons
                            .iter()
                            .find(|(r, _)| *r == a)
                            .map(|(_, why)| why.clone())
                    });
                    let mut decision = AttachDecision::new(plan, hook, attachment, passed_over);
                    decision.rejected = rejected;
                    decision.fallbacks = fallbacks;
                    return Ok(decision);
                }
                Err(e) if auto => rejected.push((hook, e.to_string())),
                Err(e) => return Err(e),
            }
        }
        // Tracepoints work where tracefs is mounted, or can be (kspan mounts it).
        let tracepoints = self.capabilities.tracepoints.is_available()
            || std::path::Path::new(crate::kernel::tracefs::TRACEFS).is_dir();
        let hint = if tracepoints && !self.disabled.contains(&Mechanism::Tracepoints) {
            "; syscall sources work here: trace the system call instead \
             (`#[kernel_span(syscall = \"read\")]` for a read path)"
                .to_owned()
        } else {
            String::new()
        };
        Err(AttachError::NoMechanism {
            function: plan.function().to_owned(),
            tried: rejected,
            hint,
        })
    }

    /// Attaches the exit program first, so that no entry is recorded whose
    /// exit is not watched, then the entry program; keeps the links only
    /// once both are attached. `link` attaches one program (`true`: the
    /// exit).
    fn attach_pair(
        &mut self,
        entry: OwnedFd,
        exit: Option<OwnedFd>,
        link: impl Fn(&OwnedFd, bool) -> Result<links::Link, AttachError>,
    ) -> Result<(), AttachError> {
        let exit_link = exit.as_ref().map(|prog| link(prog, true)).transpose()?;
        let entry_link = link(&entry, false)?;
        self.links.keep(exit_link, entry_link, [Some(entry), exit]);
        Ok(())
    }

    /// The programs `(entry, exit)` of `hook` with settings `config` (for
    /// trampolines, against `btf_id`): copies of the templates when there
    /// are, else loaded through libbpf.
    fn programs(
        &mut self,
        plan: &ProbePlan,
        hook: Hook,
        config: &kspan_config,
        btf_id: u32,
        (entry, exit): (Program, Option<Program>),
        fallbacks: &mut Vec<String>,
    ) -> Result<(OwnedFd, Option<OwnedFd>), LoadError> {
        let entry_t = self.templates.get(&entry);
        let exit_t = exit.map(|p| self.templates.get(&p));
        if let (Some(entry_t), None | Some(Some(_))) = (entry_t, exit_t) {
            match copies::load_copy(config, btf_id, entry_t, exit_t.flatten()) {
                Ok(programs) => return Ok(programs),
                Err(e) => {
                    let why = format!(
                        "loading a copy of the {hook} program failed ({e}); loaded through libbpf"
                    );
                    tracing::warn!(function = plan.function(), "kspan: {why}");
                    if let Some(log) = &e.verifier_log {
                        tracing::debug!(
                            function = plan.function(),
                            "kspan: the verifier's log of the refused copy:\n{log}"
                        );
                    }
                    fallbacks.push(why);
                }
            }
        }
        let wanted: Vec<Program> = std::iter::once(entry).chain(exit).collect();
        let mut loaded = object::load(&LoadRequest {
            function: plan.function(),
            hook,
            config,
            programs: &wanted,
            shared: self.maps.as_ref(),
            ring_buffer_bytes: self.runtime.ring_buffer_bytes,
            entry_values: self.runtime.entry_values,
            probes: self.runtime.probes,
            sums: self.runtime.sums,
            histograms: self.runtime.histograms,
        })?;
        if self.maps.is_none() {
            self.maps = loaded.maps.take();
        }
        for (program, template) in loaded.templates.drain(..) {
            self.templates.entry(program).or_insert(template);
        }
        let missing = || {
            LoadError::new(
                plan.function(),
                hook,
                libbpf_rs::Error::from(std::io::Error::from(std::io::ErrorKind::NotFound)),
                None,
            )
        };
        let entry_fd = loaded.take(entry).ok_or_else(missing)?;
        let exit_fd = match exit {
            Some(exit) => Some(loaded.take(exit).ok_or_else(missing)?),
            None => None,
        };
        Ok((entry_fd, exit_fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::Feature;
    use crate::kernel::preemption::{Preemption, PreemptionModel};

    fn caps(multi: bool, session: bool, kprobe_session: bool) -> KernelCapabilities {
        let feature = |on: bool, why: &str| {
            if on {
                Feature::Available
            } else {
                Feature::Unavailable {
                    reason: why.to_owned(),
                    errno: Some(libc::EINVAL),
                }
            }
        };
        KernelCapabilities {
            btf: Feature::Available,
            privileges: Feature::Available,
            trampolines: Feature::Available,
            kprobes: Feature::Available,
            kprobe_multi: Feature::Available,
            trampoline_sessions: feature(session, "no fsession"),
            trampoline_multi: feature(multi, "no fsession.multi"),
            kprobe_sessions: feature(kprobe_session, "no kprobe.session"),
            tracepoints: Feature::Available,
            btf_tracepoints: Feature::Available,
            context_records: Feature::Available,
            preemption: Preemption {
                model: Some(PreemptionModel::Voluntary),
                source: "a test".to_owned(),
            },
        }
    }

    fn decision(function: &'static str, attachment: Attachment) -> AttachDecision {
        AttachDecision {
            function,
            requested: Mode::Auto,
            chosen: Hook::Kretprobe,
            rejected: Vec::new(),
            attachment,
            passed_over: Vec::new(),
            multi: false,
            fallbacks: Vec::new(),
            functions_passed_over: Vec::new(),
            not_attached: None,
        }
    }

    #[test]
    fn records_are_not_registered_where_a_preempted_registration_skips_programs() {
        let mut kernel = caps(true, true, true);
        let trampoline = [decision("vfs_read", Attachment::FsessionMulti)];
        let kprobe = [
            decision("vfs_read", Attachment::FsessionMulti),
            decision("noop_fsync", Attachment::KprobeSession),
        ];
        let sched = crate::sched::SchedMechanism::Tracepoints;
        let btf_sched = crate::sched::SchedMechanism::BtfTracepoints;
        // Voluntary: a registration is never preempted inside the update.
        assert_eq!(registration_skips(&kernel, &kprobe, Some(sched)), None);
        for model in [
            Some(PreemptionModel::Full),
            Some(PreemptionModel::Lazy),
            None,
        ] {
            kernel.preemption.model = model;
            assert_eq!(registration_skips(&kernel, &trampoline, None), None);
            assert_eq!(
                registration_skips(&kernel, &trampoline, Some(btf_sched)),
                None
            );
            let why = registration_skips(&kernel, &kprobe, None).expect("kprobes are skipped");
            assert!(why.contains("noop_fsync through kprobe.session"), "{why}");
            assert!(why.contains("a test"), "{why}");
            let why = registration_skips(&kernel, &trampoline, Some(sched))
                .expect("classic tracepoints are skipped");
            assert!(
                why.contains("the scheduler's account through tracepoint"),
                "{why}"
            );
        }
        // A probe left out attaches nothing.
        let mut left_out = decision("noop_fsync", Attachment::Kprobes);
        left_out.not_attached = Some("optional".into());
        assert_eq!(registration_skips(&kernel, &[left_out], None), None);
    }

    #[test]
    fn auto_takes_kprobes_first_where_the_kernel_preempts_programs() {
        let mut kernel = caps(true, true, true);
        let trampolines_first = [Hook::Fexit, Hook::Kretprobe];
        assert_eq!(candidates(Mode::Auto, &kernel, &[]), trampolines_first);
        for model in [
            Some(PreemptionModel::Full),
            Some(PreemptionModel::Lazy),
            Some(PreemptionModel::Rt),
            None,
        ] {
            kernel.preemption.model = model;
            assert_eq!(
                candidates(Mode::Auto, &kernel, &[]),
                [Hook::Kretprobe, Hook::Fexit],
                "{model:?}"
            );
            // Explicit modes keep their hook.
            assert_eq!(candidates(Mode::Fexit, &kernel, &[]), [Hook::Fexit]);
            // Without kprobes, trampolines: skips beat nothing.
            assert_eq!(
                candidates(Mode::Auto, &kernel, &[Mechanism::Kprobes]),
                trampolines_first
            );
        }
        kernel.preemption.model = Some(PreemptionModel::Lazy);
        let why = preemptible_trampolines(&kernel);
        assert!(
            why.starts_with(
                "passed over for kprobes: this kernel's preemption is lazy (from a test)"
            ),
            "{why}"
        );
        kernel.kprobes = Feature::Unavailable {
            reason: "no kprobe PMU".to_owned(),
            errno: None,
        };
        assert_eq!(candidates(Mode::Auto, &kernel, &[]), trampolines_first);
    }

    #[test]
    fn what_is_unusable_names_the_kernel_or_the_builder() {
        let runtime = RuntimeSettings::default();
        let old = caps(false, false, false);
        let at = Attacher::new(&runtime, &old, &[]);
        assert_eq!(
            at.unusable(Attachment::FsessionMulti).as_deref(),
            Some("unavailable: no fsession.multi (EINVAL)")
        );
        assert_eq!(at.unusable(Attachment::FentryFexit), None);
        assert_eq!(
            at.passed_over(Hook::Fexit, Attachment::FentryFexit, |_| None),
            [
                (
                    Attachment::FsessionMulti,
                    "unavailable: no fsession.multi (EINVAL)".to_owned()
                ),
                (
                    Attachment::Fsession,
                    "unavailable: no fsession (EINVAL)".to_owned()
                ),
            ]
        );

        let new = caps(true, true, true);
        let off = [Mechanism::MultiLinks];
        let at = Attacher::new(&runtime, &new, &off);
        let turned_off = "turned off by KspanBuilder::disable(Mechanism::MultiLinks)";
        assert_eq!(
            at.unusable(Attachment::FsessionMulti).as_deref(),
            Some(turned_off)
        );
        assert_eq!(at.unusable(Attachment::Fsession), None);
        assert_eq!(
            at.unusable(Attachment::KprobeSession).as_deref(),
            Some(turned_off),
            "kprobe.session is a kprobe.multi link"
        );
        // A refusal the caller saw wins over "usable".
        let passed = at.passed_over(Hook::Fexit, Attachment::FentryFexit, |a| {
            (a == Attachment::Fsession).then(|| "refused (E2BIG)".to_owned())
        });
        assert_eq!(
            passed,
            [
                (Attachment::FsessionMulti, turned_off.to_owned()),
                (Attachment::Fsession, "refused (E2BIG)".to_owned()),
            ]
        );
        let at = Attacher::new(&runtime, &new, &[]);
        assert!(at
            .passed_over(Hook::Fexit, Attachment::FsessionMulti, |_| None)
            .is_empty());
    }
}
