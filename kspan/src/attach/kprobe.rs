// SPDX-License-Identifier: Apache-2.0 OR MIT
//! kprobes and kretprobes: one program pair per distinct settings serves
//! every function with those settings, the probe id in each link's BPF
//! cookie; where the kernel has kprobe.multi (fprobe), the functions of
//! explicit `kprobe`/`kretprobe` probes attach in batches, one link per
//! direction for every function of the same settings.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsFd, OwnedFd};

use super::links::{Link, LinkKind};
use super::{AttachDecision, AttachError, Attacher};
use crate::annotation::{Hook, Mechanism};
use crate::bpf::config::{config_key, probe_config, ProbeId};
use crate::bpf::object::Program;
use crate::bpf::sys;
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
) -> Result<(), AttachError> {
    let (entry, exit, cookie) = match shared_programs(at, plan, hook, Program::of(hook), fallbacks)
    {
        Ok((entry, exit)) => (entry, exit, u64::from(probe_id)),
        // Kernels before 5.15 have no attach cookies: programs of the
        // function's own, the probe id a setting.
        Err(AttachError::Load(e)) => {
            let why = format!(
                "shared {hook} programs failed to load ({e}); loaded for this function alone"
            );
            tracing::warn!(function = plan.function(), "kspan: {why}");
            fallbacks.push(why);
            let config = probe_config(plan, hook, ProbeId::Fixed(probe_id), at.runtime);
            let (entry, exit) =
                at.programs(plan, hook, &config, 0, Program::of(hook), fallbacks)?;
            (entry, exit, 0)
        }
        Err(e) => return Err(e),
    };
    let function = plan.function();
    let link = |prog: &OwnedFd, retprobe: bool| {
        sys::attach_kprobe(prog.as_fd(), function, retprobe, cookie)
            .map(|fd| Link::new(LinkKind::Kprobe, fd))
            .map_err(|e| AttachError::refused(function, hook, e))
    };
    at.attach_pair(entry, exit, link)
}

/// What the kprobe.multi batches did, by plan index.
#[derive(Default)]
pub(super) struct Batches {
    /// The functions attached.
    pub attached: HashMap<usize, AttachDecision>,
    /// The functions of batches the kernel refused, with why: each is then
    /// attached alone, which reports errors per function.
    pub refused: HashMap<usize, String>,
}

/// Where the kernel has kprobe.multi: attaches the functions of explicit
/// `kprobe`/`kretprobe` probes in batches, one per distinct settings. A
/// refused batch is said at `warn` and in its functions' decisions.
pub(super) fn attach_batches(at: &mut Attacher<'_>, plans: &[ProbePlan]) -> Batches {
    let mut batches = Batches::default();
    if !at.capabilities.kprobe_multi.is_available() || at.disabled.contains(&Mechanism::Kprobes) {
        return batches;
    }
    let mut groups: BTreeMap<Vec<u8>, (Hook, Vec<usize>)> = BTreeMap::new();
    for (i, plan) in plans.iter().enumerate() {
        // Only explicit kprobe modes: `auto` prefers trampolines.
        if let [hook] = Hook::candidates(plan.mode()) {
            if hook.is_kprobe() {
                let config = probe_config(plan, *hook, ProbeId::FromCookie, at.runtime);
                groups
                    .entry(config_key(&config))
                    .or_insert((*hook, Vec::new()))
                    .1
                    .push(i);
            }
        }
    }
    for (hook, members) in groups.into_values() {
        let mut fallbacks = Vec::new();
        match attach_multi(at, plans, hook, &members, &mut fallbacks) {
            Ok(()) => {
                for &i in &members {
                    batches.attached.insert(
                        i,
                        AttachDecision {
                            function: plans[i].function(),
                            requested: plans[i].mode(),
                            chosen: hook,
                            rejected: Vec::new(),
                            multi: true,
                            fallbacks: fallbacks.clone(),
                        },
                    );
                }
            }
            Err(e) => {
                tracing::warn!(
                    functions = members.len(),
                    error = %e,
                    "kspan attaches these kprobes one by one: kprobe.multi failed"
                );
                for &i in &members {
                    batches
                        .refused
                        .insert(i, format!("kprobe.multi refused the batch: {e}"));
                }
            }
        }
    }
    batches
}

/// One kprobe.multi link per direction for the functions `members` of
/// `plans`, the probe ids (plan indexes) as cookies.
fn attach_multi(
    at: &mut Attacher<'_>,
    plans: &[ProbePlan],
    hook: Hook,
    members: &[usize],
    fallbacks: &mut Vec<String>,
) -> Result<(), AttachError> {
    let Some(&first) = members.first() else {
        return Ok(());
    };
    let plan = &plans[first];
    let (entry, exit) = shared_programs(at, plan, hook, Program::multi_of(hook), fallbacks)?;
    let functions: Vec<(&str, u64)> = members
        .iter()
        .map(|&i| (plans[i].function(), i as u64))
        .collect();
    let link = |prog: &OwnedFd, retprobe: bool| {
        sys::attach_kprobe_multi(prog.as_fd(), &functions, retprobe)
            .map(|fd| Link::new(LinkKind::Kprobe, fd))
            .map_err(|e| AttachError::refused(plan.function(), hook, e))
    };
    at.attach_pair(entry, exit, link)
}
