// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The scheduler's account: `sched_switch`, `sched_waking` (who woke a
//! thread) and `sched_wakeup` (when it was queued), as BTF
//! tracepoints where the kernel lets this process load them (their
//! arguments are the tasks themselves: another process's switch costs a
//! field compare, and a long wait's stack is read at its end only), else
//! as classic tracepoints (perf events, as syscall sources are; another
//! process's switch costs a hash lookup, and every switch-out of the
//! process reads its stack).

use std::os::fd::{AsFd, OwnedFd};

use super::causes::CauseChecks;
use super::links::{Link, LinkKind, Links};
use super::report::AttachError;
use crate::annotation::Hook;
use crate::bpf::config::{sched_config, HistogramSizes, RuntimeSettings};
use crate::bpf::maps::SharedMaps;
use crate::bpf::object::{self, LoadRequest, SchedMaps};
use crate::bpf::program::Program;
use crate::bpf::sys;
use crate::kernel::tracefs;
use crate::sched::{CauseMechanism, SchedMechanism, SchedulerAccount};

/// What attaching the account leaves.
#[derive(Debug)]
pub(crate) struct SchedAttached {
    /// The mechanism in use.
    pub mechanism: SchedMechanism,
    /// Why BTF tracepoints are not in use, when they are not.
    pub btf_passed_over: Option<String>,
    /// The totals per application span, and which spans have them.
    pub maps_read: SchedMaps,
    /// The shared maps, when this load made them (no probe did before).
    pub maps: Option<SharedMaps>,
    /// With the causes on, how each is read on this kernel.
    pub causes: Vec<CauseMechanism>,
    /// The causes are on.
    pub causes_on: bool,
}

/// Loads and attaches the account's programs (with its causes' that
/// `checks` found on this kernel) into `links`, sharing `shared` (the
/// probes' maps) where there are.
pub(crate) fn attach(
    runtime: &RuntimeSettings,
    account: &SchedulerAccount,
    checks: &CauseChecks,
    shared: Option<&SharedMaps>,
    links: &mut Links,
) -> Result<SchedAttached, AttachError> {
    let config = sched_config(runtime, account.wait_min_ns(), account.causes());
    let attached = attach_mechanisms(&config, runtime, account, shared, links, checks)?;
    Ok(SchedAttached {
        causes: checks.mechanisms(attached.mechanism),
        causes_on: account.causes(),
        ..attached
    })
}

/// The account attached with the mechanism asked for, else the cheapest
/// that works.
fn attach_mechanisms(
    config: &kspan_bpf::types::kspan_config,
    runtime: &RuntimeSettings,
    account: &SchedulerAccount,
    shared: Option<&SharedMaps>,
    links: &mut Links,
    causes: &CauseChecks,
) -> Result<SchedAttached, AttachError> {
    if let Some(only) = account.only_mechanism() {
        return attach_with(config, runtime, shared, links, only, causes);
    }
    let btf = attach_with(
        config,
        runtime,
        shared,
        links,
        SchedMechanism::BtfTracepoints,
        causes,
    );
    let (attached, why) = match btf {
        Ok(attached) => (attached, None),
        Err(refused) => {
            let why = refused.to_string();
            tracing::info!(
                reason = why.as_str(),
                "kspan's scheduler account uses classic tracepoints: BTF tracepoints failed"
            );
            let attached = attach_with(
                config,
                runtime,
                shared,
                links,
                SchedMechanism::Tracepoints,
                causes,
            )?;
            (attached, Some(why))
        }
    };
    Ok(SchedAttached {
        btf_passed_over: why,
        ..attached
    })
}

fn attach_with(
    config: &kspan_bpf::types::kspan_config,
    runtime: &RuntimeSettings,
    shared: Option<&SharedMaps>,
    links: &mut Links,
    mechanism: SchedMechanism,
    causes: &CauseChecks,
) -> Result<SchedAttached, AttachError> {
    let sched = match mechanism {
        SchedMechanism::BtfTracepoints => Program::SCHED_BTF,
        SchedMechanism::Tracepoints => {
            check_classic_formats()?;
            Program::SCHED_CLASSIC
        }
    };
    let cause_programs = causes.programs(mechanism);
    let mut programs = sched.to_vec();
    programs.extend(cause_programs.iter().map(|&(program, ..)| program));
    let mut loaded = object::load(&LoadRequest {
        function: "sched:sched_switch",
        hook: Hook::Syscall,
        config,
        programs: &programs,
        shared,
        ring_buffer_bytes: runtime.ring_buffer_bytes,
        entry_values: runtime.entry_values,
        probes: runtime.probes,
        sums: runtime.sums,
        histograms: if shared.is_some() {
            runtime.histograms
        } else {
            HistogramSizes::default()
        },
    })?;
    let refused = |event: &str, e: std::io::Error| AttachError::refused(event, Hook::Syscall, e);
    let [switch, waking, wakeup] = sched;
    let switch_fd = loaded.take(switch).ok_or_else(|| missing(switch))?;
    let waking_fd = loaded.take(waking).ok_or_else(|| missing(waking))?;
    let wakeup_fd = loaded.take(wakeup).ok_or_else(|| missing(wakeup))?;
    let link_in = |prog: &OwnedFd, category: &str, event: &str| -> Result<Link, AttachError> {
        let fd = match mechanism {
            SchedMechanism::BtfTracepoints => sys::attach_btf_tracepoint(prog.as_fd()),
            SchedMechanism::Tracepoints => sys::attach_tracepoint(prog.as_fd(), category, event),
        };
        fd.map(|fd| Link::new(LinkKind::Tracepoint, fd))
            .map_err(|e| refused(&format!("{category}:{event}"), e))
    };
    let link = |prog: &OwnedFd, event: &str| link_in(prog, "sched", event);
    // The causes' programs before the switch's, so that a switch-out
    // inside a lock's contention knows it from the first.
    for (program, category, event) in cause_programs {
        let fd = loaded.take(program).ok_or_else(|| missing(program))?;
        let cause_link = link_in(&fd, category, event)?;
        links.keep(None, cause_link, [Some(fd)]);
    }
    // The wake-up programs first: a switch-out they would complete is
    // then never missing its wake-up.
    let wakeup_link = link(&wakeup_fd, "sched_wakeup")?;
    let waking_link = link(&waking_fd, "sched_waking")?;
    let switch_link = link(&switch_fd, "sched_switch")?;
    links.keep(None, wakeup_link, [Some(wakeup_fd)]);
    links.keep(None, waking_link, [Some(waking_fd)]);
    links.keep(None, switch_link, [Some(switch_fd)]);
    let maps_read = loaded.sched.take().ok_or_else(|| missing(switch))?;
    Ok(SchedAttached {
        mechanism,
        btf_passed_over: None,
        maps_read,
        maps: loaded.maps.take(),
        causes: Vec::new(),
        causes_on: false,
    })
}

/// The fields the classic programs read, where they read them
/// (`struct kspan_sched_switch_args` and `kspan_sched_waking_args` of
/// kspan-bpf's account.bpf.c): every kernel since 4.x lays them out so;
/// another layout is refused with what differs.
const CLASSIC_FIELDS: [(&str, &str, usize, usize); 4] = [
    ("sched_switch", "prev_state", 32, 8),
    ("sched_switch", "next_pid", 56, 4),
    ("sched_waking", "pid", 24, 4),
    ("sched_wakeup", "pid", 24, 4),
];

fn check_classic_formats() -> Result<(), AttachError> {
    for (event, field, offset, size) in CLASSIC_FIELDS {
        let format = tracefs::read_sched_format(event).map_err(|e| {
            AttachError::refused(
                &format!("sched:{event}"),
                Hook::Syscall,
                std::io::Error::other(e.to_string()),
            )
        })?;
        let found = tracefs::field_layout(&format, field);
        if found != Some((offset, size)) {
            return Err(AttachError::refused(
                &format!("sched:{event}"),
                Hook::Syscall,
                std::io::Error::other(format!(
                    "its `{field}` field is at {found:?} (offset, size) in this kernel's format, \
                     where kspan's program reads ({offset}, {size})"
                )),
            ));
        }
    }
    Ok(())
}

fn missing(program: Program) -> AttachError {
    AttachError::refused(
        "sched:sched_switch",
        Hook::Syscall,
        std::io::Error::other(format!("the load did not give the {program:?} program")),
    )
}
