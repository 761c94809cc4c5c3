// SPDX-License-Identifier: Apache-2.0 OR MIT
//! kprobes and kretprobes: one program pair per distinct settings serves
//! every function with those settings, the probe id in each link's BPF
//! cookie; where the kernel has kprobe.multi (fprobe), the functions of
//! `kprobe`/`kretprobe` probes (and of `auto` ones where kprobes come
//! first) attach in batches: one kprobe.session program and link for both
//! ends of every kretprobe function of the same settings (Linux 6.10+),
//! else one kprobe.multi link per direction.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};

use super::attacher::Attacher;
use super::report::{AttachDecision, AttachError, Batches};
use crate::annotation::{Attachment, Hook, Mechanism};
use crate::bpf::config::{config_key, probe_config, ProbeId};
use crate::bpf::links::{Link, LinkKind};
use crate::bpf::program::Program;
use crate::bpf::sys::{self, KprobeMultiKind};
use crate::plan::ProbePlan;

/// The shared programs `programs` of `hook` for `plan`'s settings, loaded
/// on first use.
fn shared_programs(
    at: &mut Attacher<'_>,
    plan: &ProbePlan,
    hook: Hook,
    programs: (Program, Option<Program>),
    fallbacks: &mut Vec<String>,
) -> Result<(OwnedFd, Option<OwnedFd>), AttachError> {
    let config = probe_config(plan, hook, ProbeId::FromCookie, at.runtime);
    let key = (config_key(&config), programs.0);
    if !at.shared.contains_key(&key) {
        let loaded = at.programs(plan, hook, &config, 0, programs, fallbacks)?;
        at.shared.insert(key.clone(), loaded);
    }
    let (entry, exit) = &at.shared[&key];
    let dup = |fd: &OwnedFd| {
        fd.try_clone()
            .map_err(|e| AttachError::refused(plan.function(), hook, e))
    };
    Ok((dup(entry)?, exit.as_ref().map(dup).transpose()?))
}

/// Attaches `plan` on `hook` (kprobe or kretprobe) through the programs
/// shared by its settings.
pub(super) fn attach(
    at: &mut Attacher<'_>,
    plan: &ProbePlan,
    hook: Hook,
    probe_id: u32,
    fallbacks: &mut Vec<String>,
) -> Result<Attachment, AttachError> {
    let kind = at.runtime.kernel.kprobe;
    let programs = Program::of(hook);
    // Without attach cookies (before 5.15) every function has programs
    // of its own, its probe id a setting: said once in the attach plan.
    let shared = kind
        .cookies
        .then(|| shared_programs(at, plan, hook, programs, fallbacks));
    let (entry, exit, cookie) = match shared {
        Some(Ok((entry, exit))) => (entry, exit, u64::from(probe_id)),
        None => {
            let config = probe_config(plan, hook, ProbeId::Fixed(probe_id), at.runtime);
            let (entry, exit) = at.programs(plan, hook, &config, 0, programs, fallbacks)?;
            (entry, exit, 0)
        }
        // Kernels before 5.15 have no attach cookies: programs of the
        // function's own, the probe id a setting.
        Some(Err(AttachError::Load(e))) => {
            let why = format!(
                "shared {hook} programs failed to load ({e}); loaded for this function alone"
            );
            crate::diagnostics::warn_user!(function = plan.function(), "kspan: {why}");
            fallbacks.push(why);
            let config = probe_config(plan, hook, ProbeId::Fixed(probe_id), at.runtime);
            let (entry, exit) = at.programs(plan, hook, &config, 0, programs, fallbacks)?;
            (entry, exit, 0)
        }
        Some(Err(e)) => return Err(e),
    };
    let function = plan.function();
    let link = |prog: &OwnedFd, retprobe: bool| {
        sys::attach_kprobe(prog.as_fd(), function, retprobe, cookie)
            .map(|fd| Link::new(LinkKind::Kprobe, fd))
            .map_err(|e| AttachError::refused(function, hook, e))
    };
    at.attach_pair(entry, exit, link)?;
    Ok(Attachment::Kprobes)
}

/// Where the kernel has kprobe.multi: attaches the functions whose first
/// hook is a kprobe (explicit `kprobe`/`kretprobe` probes, and `auto` ones
/// on a kernel that preempts inside trampoline programs) in batches, one
/// per distinct settings:
/// kretprobes through one kprobe.session link where the kernel has it (else
/// a kprobe.multi link per direction). A refused batch is said at `warn`
/// and in its functions' decisions.
pub(super) fn attach_batches(at: &mut Attacher<'_>, plans: &[ProbePlan]) -> Batches {
    let mut batches = Batches::default();
    if at.unusable(Attachment::KprobeMulti).is_some() || at.disabled.contains(&Mechanism::Kprobes) {
        return batches;
    }
    let mut groups: BTreeMap<Vec<u8>, (Hook, Vec<usize>)> = BTreeMap::new();
    for (i, plan) in plans.iter().enumerate() {
        // Explicit kprobe modes, and `auto` where kprobes come first.
        if let Some(hook) = at.first_hook(plan) {
            if hook.is_kprobe() {
                let config = probe_config(plan, hook, ProbeId::FromCookie, at.runtime);
                groups
                    .entry(config_key(&config))
                    .or_insert((hook, Vec::new()))
                    .1
                    .push(i);
            }
        }
    }
    for (hook, members) in groups.into_values() {
        let mut fallbacks = Vec::new();
        let mut passed_over = Vec::new();
        let mut attached = None;
        for attachment in [Attachment::KprobeSession, Attachment::KprobeMulti] {
            if !Attachment::ladder(hook).contains(&attachment) {
                continue;
            }
            if let Some(why) = at.unusable(attachment) {
                passed_over.push((attachment, why));
                continue;
            }
            match attach_multi(at, plans, hook, attachment, &members, &mut fallbacks) {
                Ok(()) => {
                    attached = Some(attachment);
                    break;
                }
                Err(e) => {
                    crate::diagnostics::warn_user!(
                        functions = members.len(),
                        error = %e,
                        "kspan: {attachment} failed for a batch of kprobes"
                    );
                    let why = format!("{attachment} refused the batch: {e}");
                    fallbacks.push(why.clone());
                    passed_over.push((attachment, why));
                }
            }
        }
        for &i in &members {
            match attached {
                Some(attachment) => {
                    let mut decision =
                        AttachDecision::new(&plans[i], hook, attachment, passed_over.clone());
                    decision.fallbacks = fallbacks.clone();
                    batches.attached.insert(i, decision);
                }
                None => {
                    if let Some(last) = passed_over.last() {
                        batches.refused.insert(i, last.clone());
                    }
                }
            }
        }
    }
    batches
}

/// One kprobe.session link, or one kprobe.multi link per direction, for
/// the functions `members` of `plans`, the probe ids (plan indexes) as
/// cookies.
fn attach_multi(
    at: &mut Attacher<'_>,
    plans: &[ProbePlan],
    hook: Hook,
    attachment: Attachment,
    members: &[usize],
    fallbacks: &mut Vec<String>,
) -> Result<(), AttachError> {
    let Some(&first) = members.first() else {
        return Ok(());
    };
    let plan = &plans[first];
    let functions: Vec<(&str, u64)> = members
        .iter()
        .map(|&i| (plans[i].function(), i as u64))
        .collect();
    let refused = |e| AttachError::refused(plan.function(), hook, e);
    if attachment == Attachment::KprobeSession {
        let (prog, _) = shared_programs(at, plan, hook, (Program::KprobeSession, None), fallbacks)?;
        let link = sys::attach_kprobe_multi(prog.as_fd(), &functions, KprobeMultiKind::Session)
            .map(|fd| Link::new(LinkKind::Kprobe, fd))
            .map_err(refused)?;
        at.links.keep(None, link, [Some(prog)]);
        return Ok(());
    }
    let (entry, exit) = shared_programs(at, plan, hook, Program::multi_of(hook), fallbacks)?;
    let link = |prog: &OwnedFd, retprobe: bool| {
        let kind = if retprobe {
            KprobeMultiKind::Return
        } else {
            KprobeMultiKind::Entry
        };
        sys::attach_kprobe_multi(prog.as_fd(), &functions, kind)
            .map(|fd| Link::new(LinkKind::Kprobe, fd))
            .map_err(refused)
    };
    at.attach_pair(entry, exit, link)
}
