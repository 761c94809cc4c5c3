// SPDX-License-Identifier: Apache-2.0 OR MIT
//! BPF trampolines, cheapest first: one fsession program for every
//! function of the same settings through one fsession.multi link (Linux
//! 7.2+); else one fsession program and link per function (7.0+); else an
//! fentry and an fexit program per function, loaded against the function's
//! BTF id. fentry alone makes instants.
//!
//! The kernel serialises trampoline updates, each waiting for RCU, so the
//! number of links is what attaching costs: fsession halves it, a multi link
//! makes it one per settings group. Verifying a copy is most of the rest,
//! and it runs in parallel where attaches cannot: once the first trampoline
//! gave templates, the copies of every later trampoline function are loaded
//! from several threads ahead of their attaches ([`prepare`]).

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};

use libbpf_rs::libbpf_sys;

use super::attacher::{Attacher, Prepared};
use super::report::{AttachDecision, AttachError, Batches};
use crate::annotation::{Attachment, Hook, Mechanism, Mode};
use crate::bpf::config::{config_key, probe_config, ProbeId};
use crate::bpf::copies;
use crate::bpf::links::{Link, LinkKind};
use crate::bpf::program::Program;
use crate::bpf::sys;
use crate::plan::{denylist, NotTraced, ProbePlan};

/// Whether full spans on this runtime use fsession programs.
fn sessions(at: &Attacher<'_>) -> bool {
    at.unusable(Attachment::Fsession).is_none()
}

/// Loads and attaches `plan` on `hook` (fentry or fexit): through fsession
/// where the kernel has it, else (or when that fails, said in `fallbacks`
/// and `reasons`) through an fentry/fexit pair.
pub(super) fn attach(
    at: &mut Attacher<'_>,
    plan: &ProbePlan,
    hook: Hook,
    probe_id: u32,
    fallbacks: &mut Vec<String>,
    reasons: &mut Vec<(Attachment, String)>,
) -> Result<Attachment, AttachError> {
    if hook == Hook::Fexit && sessions(at) {
        match attach_session(at, plan, probe_id, fallbacks) {
            Ok(()) => return Ok(Attachment::Fsession),
            Err(e) => {
                let why = format!("fsession failed ({e}); attached through fentry+fexit");
                crate::diagnostics::warn_user!(function = plan.function(), "kspan: {why}");
                fallbacks.push(why);
                reasons.push((Attachment::Fsession, e.to_string()));
            }
        }
    }
    let (entry, exit) = match at.prepared.remove(&probe_id) {
        Some(prepared) if prepared.hook == hook && !prepared.session => {
            (prepared.entry, prepared.exit)
        }
        _ => {
            let config = probe_config(plan, hook, ProbeId::Fixed(probe_id), at.runtime);
            at.programs(
                plan,
                hook,
                &config,
                plan.signature.btf_id,
                Program::of(hook),
                fallbacks,
            )?
        }
    };
    let link = |prog: &OwnedFd, is_exit: bool| {
        let attach_type = if is_exit {
            libbpf_sys::BPF_TRACE_FEXIT
        } else {
            libbpf_sys::BPF_TRACE_FENTRY
        };
        sys::attach_trace(prog.as_fd(), attach_type)
            .map(|fd| Link::new(LinkKind::Trampoline, fd))
            .map_err(|e| AttachError::refused(plan.function(), hook, e))
    };
    at.attach_pair(entry, exit, link)?;
    Ok(if hook == Hook::Fexit {
        Attachment::FentryFexit
    } else {
        Attachment::Fentry
    })
}

/// One fsession program and link for `plan`.
fn attach_session(
    at: &mut Attacher<'_>,
    plan: &ProbePlan,
    probe_id: u32,
    fallbacks: &mut Vec<String>,
) -> Result<(), AttachError> {
    let prog = match at.prepared.remove(&probe_id) {
        Some(prepared) if prepared.session => prepared.entry,
        _ => {
            let config = probe_config(plan, Hook::Fexit, ProbeId::Fixed(probe_id), at.runtime);
            at.programs(
                plan,
                Hook::Fexit,
                &config,
                plan.signature.btf_id,
                (Program::Fsession, None),
                fallbacks,
            )?
            .0
        }
    };
    let link = sys::attach_trace(prog.as_fd(), libbpf_sys::BPF_TRACE_FSESSION)
        .map(|fd| Link::new(LinkKind::Trampoline, fd))
        .map_err(|e| AttachError::refused(plan.function(), Hook::Fexit, e))?;
    at.links.keep(None, link, [Some(prog)]);
    Ok(())
}

/// Where the kernel has fsession.multi: attaches every function whose
/// first hook is fexit (explicit `fexit` probes, and `auto` ones unless
/// kprobes come first on this kernel), one link per
/// distinct settings, the probe ids in the targets' cookies. A refused
/// batch is said at `warn`; its functions are then attached one by one,
/// which reports errors per function.
pub(super) fn attach_batches(at: &mut Attacher<'_>, plans: &[ProbePlan]) -> Batches {
    let mut batches = Batches::default();
    if at.disabled.contains(&Mechanism::Trampolines)
        || at.unusable(Attachment::FsessionMulti).is_some()
    {
        return batches;
    }
    let mut groups: BTreeMap<Vec<u8>, Vec<usize>> = BTreeMap::new();
    for (i, plan) in plans.iter().enumerate() {
        if at.first_hook(plan) == Some(Hook::Fexit) && plan.trampoline_refusal.is_none() {
            let config = probe_config(plan, Hook::Fexit, ProbeId::FromCookie, at.runtime);
            groups.entry(config_key(&config)).or_default().push(i);
        }
    }
    for mut members in groups.into_values() {
        let mut fallbacks = Vec::new();
        let result = attach_multi(at, plans, &mut members, &mut fallbacks);
        if let Ok(left_out) = &result {
            for &i in left_out {
                let why = NotTraced::Untraceable.to_string();
                if denylist::is_pattern(plans[i].probe.spec.function) {
                    batches.skipped.insert(i, why);
                } else if plans[i].mode() == Mode::Auto {
                    // Named by an `auto` probe: kprobes may take it.
                    batches.refused.insert(i, (Attachment::FsessionMulti, why));
                } else {
                    batches.untraceable.push(i);
                }
            }
        }
        match result {
            Ok(_) => {
                for &i in &members {
                    let mut decision = AttachDecision::new(
                        &plans[i],
                        Hook::Fexit,
                        Attachment::FsessionMulti,
                        Vec::new(),
                    );
                    decision.fallbacks = fallbacks.clone();
                    batches.attached.insert(i, decision);
                }
            }
            Err(e) => {
                crate::diagnostics::warn_user!(
                    functions = members.len(),
                    error = %e,
                    "kspan attaches these functions one by one: fsession.multi failed"
                );
                for &i in &members {
                    batches.refused.insert(
                        i,
                        (
                            Attachment::FsessionMulti,
                            format!("fsession.multi refused the batch: {e}"),
                        ),
                    );
                }
            }
        }
    }
    batches
}

/// One fsession.multi program and link for the functions `members` of
/// `plans`, the probe ids (plan indexes) as cookies. Where the plans were
/// made without the kernel's list of traceable functions, a refused link
/// is made again without the members the list leaves out: those are
/// taken out of `members` and returned.
fn attach_multi(
    at: &mut Attacher<'_>,
    plans: &[ProbePlan],
    members: &mut Vec<usize>,
    fallbacks: &mut Vec<String>,
) -> Result<Vec<usize>, AttachError> {
    let Some(&first) = members.first() else {
        return Ok(Vec::new());
    };
    let plan = &plans[first];
    let refused = |e| AttachError::refused(plan.function(), Hook::Fexit, e);
    let config = probe_config(plan, Hook::Fexit, ProbeId::FromCookie, at.runtime);
    // No target: the link names the functions.
    let (prog, _) = at.programs(
        plan,
        Hook::Fexit,
        &config,
        0,
        (Program::fsession_multi_for(&config), None),
        fallbacks,
    )?;
    let link = |members: &[usize]| {
        let targets: Vec<(u32, u64)> = members
            .iter()
            .map(|&i| (plans[i].signature.btf_id, i as u64))
            .collect();
        sys::attach_tracing_multi(prog.as_fd(), sys::BPF_TRACE_FSESSION_MULTI, &targets)
    };
    let mut left_out = Vec::new();
    let fd = match link(members) {
        Ok(fd) => fd,
        Err(e) => {
            let Some(list) = at.traceable_list_after_refusal() else {
                return Err(refused(e));
            };
            let (out, kept): (Vec<usize>, Vec<usize>) = members
                .iter()
                .partition(|&&i| !list.contains(plans[i].function()));
            if out.is_empty() {
                return Err(refused(e));
            }
            fallbacks.push(format!(
                "fsession.multi refused the link ({e}); made again without the {} of its \
                 functions absent from available_filter_functions",
                out.len()
            ));
            *members = kept;
            left_out = out;
            if members.is_empty() {
                return Ok(left_out);
            }
            link(members).map_err(refused)?
        }
    };
    at.links
        .keep(None, Link::new(LinkKind::Trampoline, fd), [Some(prog)]);
    Ok(left_out)
}

/// Loads, from several threads, the copies of the trampoline functions of
/// `plans` from index `from` on that are not `attached` yet, once there
/// are templates. Whatever fails here is loaded again, and reported, by
/// its attach.
pub(super) fn prepare(
    at: &mut Attacher<'_>,
    plans: &[ProbePlan],
    from: usize,
    attached: &HashMap<usize, AttachDecision>,
) {
    if at.disabled.contains(&Mechanism::Trampolines) {
        return;
    }
    let session = sessions(at);
    let first: Vec<Option<Hook>> = plans.iter().map(|p| at.first_hook(p)).collect();
    let templates = &at.templates;
    // The templates of the programs `hook` attaches here.
    let for_hook = |hook: Hook| match hook {
        Hook::Fexit if session => Some((templates.get(&Program::Fsession)?, None)),
        Hook::Fexit => Some((
            templates.get(&Program::Fentry)?,
            Some(templates.get(&Program::Fexit)?),
        )),
        _ => Some((templates.get(&Program::Fentry)?, None)),
    };
    let work: Vec<(u32, &ProbePlan, Hook)> = plans
        .iter()
        .enumerate()
        .skip(from)
        .filter(|(id, _)| !attached.contains_key(id))
        .filter_map(|(id, plan)| {
            let hook = first[id]?;
            (hook.is_trampoline() && for_hook(hook).is_some()).then_some((id as u32, plan, hook))
        })
        .collect();
    if work.is_empty() {
        return;
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, 8)
        .min(work.len());
    let next = AtomicUsize::new(0);
    let runtime = at.runtime;
    let prepared: HashMap<u32, Prepared> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    while let Some(&(id, plan, hook)) =
                        work.get(next.fetch_add(1, Ordering::Relaxed))
                    {
                        let Some((entry_t, exit_t)) = for_hook(hook) else {
                            continue;
                        };
                        let config = probe_config(plan, hook, ProbeId::Fixed(id), runtime);
                        match copies::load_copy(&config, plan.signature.btf_id, entry_t, exit_t) {
                            Ok((entry, exit)) => done.push((
                                id,
                                Prepared {
                                    hook,
                                    session: session && hook == Hook::Fexit,
                                    entry,
                                    exit,
                                },
                            )),
                            Err(e) => tracing::debug!(
                                function = plan.function(),
                                error = %e,
                                "kspan could not prepare this copy; its attach loads it"
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
    at.prepared.extend(prepared);
}
