// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The loading steps of [`KspanBuilder::start`]: the shared maps, made
//! once from the settings; the probes attached over them; the scheduler's
//! account attached over them. Each source takes the maps as given.

use crate::attach::{AttachDecision, Attached, Attacher};
use crate::bpf::links::Links;
use crate::bpf::maps::{MapSpec, SharedMaps};
use crate::bpf::KernelCapabilities;
use crate::error::Result;
use crate::sched::{self, AccountAttached, CauseChecks, SchedulerAccount};

use super::super::ThreadContextReads;
use super::kernel::{Planned, Settings};
use super::KspanBuilder;

/// The account to attach, and what this kernel gives its causes (read
/// from its BTF while start still has it).
pub(super) struct AccountPlan {
    pub account: SchedulerAccount,
    pub checks: CauseChecks,
}

impl AccountPlan {
    /// `account`'s causes checked against `btf` (and tracefs).
    pub(super) fn new(account: SchedulerAccount, btf: &crate::kernel::btf::Btf) -> Self {
        AccountPlan {
            checks: CauseChecks::of(Some(&account), btf),
            account,
        }
    }
}

/// Makes the maps every program shares. The kernel said it has uptrs and
/// then refused the map of registered records: the programs read user
/// memory instead.
pub(super) fn make_maps(settings: &mut Settings, account: bool) -> Result<SharedMaps> {
    match MapSpec::of(&settings.runtime, account).create() {
        Err(refused) if settings.runtime.thread_context.registered_records => {
            tracing::info!(
                error = %refused,
                "kspan makes its maps again, reading thread contexts from user memory"
            );
            read_user_memory(
                settings,
                format!("making the map of registered records failed: {refused}"),
            );
            Ok(MapSpec::of(&settings.runtime, account).create()?)
        }
        made => Ok(made?),
    }
}

fn read_user_memory(settings: &mut Settings, why: String) {
    settings.runtime.thread_context.registered_records = false;
    settings.context_reads = ThreadContextReads::UserMemory { why };
}

impl KspanBuilder {
    /// Attaches every planned probe over `maps` (none when only the
    /// account runs). The kernel said it has uptrs and then refused their
    /// reads: the programs are attached again reading user memory.
    pub(super) fn attach_probes(
        &self,
        planned: &mut Planned,
        settings: &mut Settings,
        capabilities: &KernelCapabilities,
        maps: &mut SharedMaps,
    ) -> Result<Attached> {
        crate::kernel::sys::raise_open_files_limit();
        let mut attached = if planned.plans.is_empty() {
            Attached::default()
        } else {
            let attach = |settings: &Settings, maps: &SharedMaps| {
                let mut attacher =
                    Attacher::new(&settings.runtime, capabilities, &self.disabled, maps);
                if !planned.traceable_listed {
                    attacher = attacher.planned_without_traceable_list();
                }
                attacher.attach_all(&planned.plans)
            };
            match attach(settings, maps) {
                Err(refused) if settings.runtime.thread_context.registered_records => {
                    tracing::info!(
                        error = %refused,
                        "kspan attaches again, reading thread contexts from user memory"
                    );
                    read_user_memory(
                        settings,
                        format!("loading the programs with registered records failed: {refused}"),
                    );
                    maps.without_context_records();
                    attach(settings, maps)?
                }
                attached => attached?,
            }
        };
        // The planner's first, then what attaching found.
        let mut skipped = std::mem::take(&mut planned.skipped);
        skipped.append(&mut attached.skipped);
        attached.skipped = skipped;
        attached
            .decisions
            .extend(planned.not_attached.iter().map(AttachDecision::left_out));
        Ok(attached)
    }
}

/// Attaches the scheduler's account over `maps`, its links with the
/// probes' in `links`.
pub(super) fn attach_account(
    plan: &AccountPlan,
    settings: &Settings,
    maps: &SharedMaps,
    links: &mut Links,
) -> Result<AccountAttached> {
    let attached = sched::attach(&plan.account, &plan.checks, &settings.runtime, maps, links)?;
    tracing::info!(
        mechanism = attached.mechanism.as_str(),
        passed_over = attached.btf_passed_over.as_deref().unwrap_or("-"),
        "kspan's scheduler account attached"
    );
    Ok(attached)
}
