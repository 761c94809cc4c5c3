// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Attaching every plan ([`Attacher::attach_all`]): the multi-function
//! links first (fsession.multi, kprobe.session or kprobe.multi, each for
//! every function of the same settings), then each function left alone
//! ([`Attacher::attach_one`]) on its own hook, or for `auto` on the first
//! that works, falling back from one hook to the next and recording why
//! each earlier one was passed over.
//!
//! The last step of attaching: it drives the hooks' modules, and nothing
//! under `attach` imports it.

use super::attacher::Attacher;
use super::choice::{candidates, kprobes_first, passed_over, preemptible_trampolines};
use super::report::{AttachDecision, AttachError};
use super::{kprobe, tracepoint, trampoline};
use crate::annotation::{Attachment, Hook, Mechanism, Mode};
use crate::bpf::links::Links;
use crate::plan::{denylist, ProbePlan};

/// What attaching leaves running.
#[derive(Debug, Default)]
pub(crate) struct Attached {
    /// How each probe was attached, in plan order.
    pub decisions: Vec<AttachDecision>,
    /// The links: dropping them detaches.
    pub links: Links,
    /// `(function, why)` for each match of a pattern found untraceable
    /// while attaching (the planner had no traceable list), not attached.
    pub skipped: Vec<(String, String)>,
}

impl Attacher<'_> {
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
                    match self.attach_one(plan, probe_id as u32, refused) {
                        Ok(decision) => decision,
                        // An optional probe that no mechanism of this
                        // kernel can trace is left out, as one whose
                        // functions it lacks.
                        Err(e @ AttachError::NoMechanism { .. }) if plan.probe.spec.optional => {
                            let decision = AttachDecision::unattachable(plan, &e);
                            crate::diagnostics::warn_user!(
                                function = plan.function(),
                                location = plan.probe.spec.location,
                                reason = e.to_string().as_str(),
                                "kspan starts without an optional probe: no mechanism this \
                                 kernel offers can trace it"
                            );
                            decisions.push(decision);
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
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
            decision.older_kernel = self.capabilities.older_kernel(decision.chosen);
            tracing::info!(
                function = decision.function,
                requested = decision.requested.as_str(),
                chosen = decision.chosen.as_str(),
                attachment = decision.attachment.as_str(),
                passed_over = %decision.passed_over_summary(),
                rejected = %decision.rejected_summary(),
                fallbacks = ?decision.fallbacks,
                older_kernel = ?decision.older_kernel,
                "kspan attach plan"
            );
            decisions.push(decision);
        }
        Ok(Attached {
            decisions,
            links: std::mem::take(&mut self.links),
            skipped,
        })
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
                    let passed_over =
                        passed_over(self.capabilities, self.disabled, hook, attachment, |a| {
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
            let syscalls = crate::kernel::tracefs::syscall_names().ok();
            super::hint::syscall_instead(plan.function(), syscalls.as_deref())
        } else {
            String::new()
        };
        Err(AttachError::NoMechanism {
            function: plan.function().to_owned(),
            tried: rejected,
            hint,
        })
    }
}
