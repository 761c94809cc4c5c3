// SPDX-License-Identifier: Apache-2.0 OR MIT
//! fentry and fexit: BPF trampolines, one program pair per function,
//! loaded against the function's BTF id.
//!
//! Verifying a copy is most of a function's cost, and it runs in parallel
//! where attaches cannot (the kernel serialises trampoline updates): once
//! the first trampoline gave templates, the copies of every later
//! trampoline function are loaded from several threads ahead of their
//! attaches ([`prepare`]).

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};

use libbpf_rs::libbpf_sys;

use super::links::{Link, LinkKind};
use super::{AttachError, Attacher};
use crate::annotation::{Hook, Mechanism};
use crate::bpf::config::{probe_config, ProbeId};
use crate::bpf::copies;
use crate::bpf::object::Program;
use crate::bpf::sys;
use crate::plan::ProbePlan;

/// A copy loaded ahead of its attach.
pub(super) struct Prepared {
    hook: Hook,
    entry: OwnedFd,
    exit: Option<OwnedFd>,
}

/// Loads and attaches `plan` on `hook` (fentry or fexit).
pub(super) fn attach(
    at: &mut Attacher<'_>,
    plan: &ProbePlan,
    hook: Hook,
    probe_id: u32,
    fallbacks: &mut Vec<String>,
) -> Result<(), AttachError> {
    let (entry, exit) = match at.prepared.remove(&probe_id) {
        Some(prepared) if prepared.hook == hook => (prepared.entry, prepared.exit),
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
    at.attach_pair(entry, exit, link)
}

/// Loads, from several threads, the copies of the trampoline functions of
/// `plans` from index `from` on, once there are templates. Whatever fails
/// here is loaded again, and reported, by its attach.
pub(super) fn prepare(at: &mut Attacher<'_>, plans: &[ProbePlan], from: usize) {
    if at.disabled.contains(&Mechanism::Trampolines) {
        return;
    }
    let (Some(entry_t), Some(exit_t)) = (
        at.templates.get(&Program::Fentry),
        at.templates.get(&Program::Fexit),
    ) else {
        return;
    };
    let work: Vec<(u32, &ProbePlan, Hook)> = plans
        .iter()
        .enumerate()
        .skip(from)
        .filter_map(|(id, plan)| {
            let hook = Hook::candidates(plan.mode())[0];
            hook.is_trampoline().then_some((id as u32, plan, hook))
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
                        let config = probe_config(plan, hook, ProbeId::Fixed(id), runtime);
                        let exit_t = hook.has_return().then_some(exit_t);
                        match copies::load_copy(&config, plan.signature.btf_id, entry_t, exit_t) {
                            Ok((entry, exit)) => done.push((id, Prepared { hook, entry, exit })),
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
