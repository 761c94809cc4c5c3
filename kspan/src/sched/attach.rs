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

use kspan_bpf::consts as c;
use kspan_bpf::types::kspan_config;

use super::causes::CauseChecks;
use super::error::AccountError;
use super::{CauseMechanism, SchedMechanism, SchedulerAccount};
use crate::annotation::Hook;
use crate::bpf::config::{kernel_bits, RuntimeSettings};
use crate::bpf::links::{Link, LinkKind, Links};
use crate::bpf::maps::SharedMaps;
use crate::bpf::object::{self, LoadRequest};
use crate::bpf::program::Program;
use crate::bpf::sys;
use crate::kernel::tracefs;

/// What attaching the account leaves, beside its links.
#[derive(Debug)]
pub(crate) struct AccountAttached {
    /// The mechanism in use.
    pub mechanism: SchedMechanism,
    /// Why BTF tracepoints are not in use, when they are not.
    pub btf_passed_over: Option<String>,
    /// With the causes on, how each is read on this kernel.
    pub causes: Vec<CauseMechanism>,
    /// How interrupt time is treated on this kernel (in on-CPU time, or
    /// out of it as the kernel leaves it out).
    pub interrupts: &'static str,
    /// With the causes on, the page fault programs are attached: a
    /// thread's fault counts are read only after its faults.
    pub faults_hooked: bool,
}

impl AccountAttached {
    /// The account's programs, described, when the kernel skips them on a
    /// CPU where a task is inside a BPF map system call (see
    /// [`SchedMechanism::skipped_during_map_calls`]).
    pub(crate) fn map_call_guard(&self) -> Option<String> {
        map_call_guard(self.mechanism)
    }
}

fn map_call_guard(mechanism: SchedMechanism) -> Option<String> {
    mechanism
        .skipped_during_map_calls()
        .then(|| format!("the scheduler's account through {mechanism}"))
}

/// The settings of the account's programs attached with `mechanism`:
/// this process's threads (whatever other processes the probes trace),
/// the thread context, the ring buffer, the shortest off-CPU interval that
/// is a wait span (0: none is), whether the causes are read, and what the
/// kernel offers programs of the mechanism's type (BTF tracepoints are
/// tracing programs, as trampolines are; classic ones are tracepoint
/// programs).
pub(crate) fn config(
    runtime: &RuntimeSettings,
    account: &SchedulerAccount,
    mechanism: SchedMechanism,
) -> kspan_config {
    let context = &runtime.thread_context;
    kspan_config {
        target_tgid: std::process::id(),
        probe_id: c::KSPAN_WAIT_PROBE_ID as u32,
        mode: c::KSPAN_MODE_SYSCALL as u32,
        record_size: std::mem::size_of::<kspan_bpf::types::kspan_wait_record>() as u32,
        task_tp_offset: context.task_tp_offset,
        ctx_tgid: context.tgid,
        orphans: context.orphans,
        keep_unsampled: u32::from(context.keep_unsampled),
        ctx_parent: 1,
        ctx_records: u32::from(context.registered_records),
        ring_bytes: runtime.ring_buffer_bytes,
        thread_ctx_offset: context.slot_offset,
        wait_min_ns: account.wait_min_ns(),
        sched_causes: u32::from(account.causes()),
        kernel_features: kernel_bits(runtime, hook_of(mechanism)),
        ..kspan_config::default()
    }
}

/// The probes' hook whose programs are of `mechanism`'s program type.
fn hook_of(mechanism: SchedMechanism) -> Hook {
    match mechanism {
        SchedMechanism::BtfTracepoints => Hook::Fexit,
        SchedMechanism::Tracepoints => Hook::Syscall,
    }
}

/// Loads and attaches the account's programs (with its causes' that
/// `checks` found on this kernel) over the shared `maps`, into `links`:
/// with the mechanism asked for, else the cheapest that works.
pub(crate) fn attach(
    account: &SchedulerAccount,
    checks: &CauseChecks,
    runtime: &RuntimeSettings,
    maps: &SharedMaps,
    links: &mut Links,
) -> Result<AccountAttached, AccountError> {
    let mut try_mechanism = |mechanism| {
        let config = config(runtime, account, mechanism);
        attach_with(&config, maps, links, mechanism, checks)
    };
    let (mechanism, btf_passed_over) = match account.only_mechanism() {
        Some(only) => (try_mechanism(only).map(|()| only)?, None),
        None => match try_mechanism(SchedMechanism::BtfTracepoints) {
            Ok(()) => (SchedMechanism::BtfTracepoints, None),
            Err(refused) => {
                let why = refused.to_string();
                tracing::info!(
                    reason = why.as_str(),
                    "kspan's scheduler account uses classic tracepoints: BTF tracepoints failed"
                );
                try_mechanism(SchedMechanism::Tracepoints)?;
                (SchedMechanism::Tracepoints, Some(why))
            }
        },
    };
    tracing::info!(
        interrupt_time = checks.interrupts,
        "kspan's scheduler account: how interrupt time is counted on this kernel"
    );
    // The throttle's fexit, apart: a kernel that refuses trampolines
    // (where the tracepoints load) costs the account that cause only.
    let throttle = checks.throttle(mechanism).and_then(|function| {
        let config = config(runtime, account, mechanism);
        attach_throttle(function, &config, maps, links).map(|()| function)
    });
    if let Err(why) = &throttle {
        if checks.on() {
            tracing::debug!(
                reason = why.as_str(),
                "kspan's throttled block I/O is not read"
            );
        }
    }
    Ok(AccountAttached {
        mechanism,
        btf_passed_over,
        causes: checks.mechanisms(mechanism, &throttle),
        interrupts: checks.interrupts,
        faults_hooked: checks.faults_hooked(mechanism),
    })
}

/// Loads and attaches the fexit of blk-throttle's `function` over the
/// shared `maps`, into `links`; `Err` says why it could not.
fn attach_throttle(
    function: &str,
    config: &kspan_config,
    maps: &SharedMaps,
    links: &mut Links,
) -> Result<(), String> {
    let mut loaded = object::load(&LoadRequest {
        attach_target: Some(function),
        config,
        programs: &[Program::FexitThrottle],
        shared: maps,
    })
    .map_err(|failure| {
        let log = failure
            .verifier_log
            .map(|log| format!("; the verifier said: {log}"))
            .unwrap_or_default();
        format!(
            "its fexit on {function} was not loaded: {}{log}",
            failure.source
        )
    })?;
    let fd = loaded
        .take(Program::FexitThrottle)
        .ok_or_else(|| format!("its fexit on {function} was not among the programs loaded"))?;
    let link = sys::attach_trace(fd.as_fd(), libbpf_rs::libbpf_sys::BPF_TRACE_FEXIT).map_err(
        |e| match e.raw_os_error() {
            Some(libc::EOPNOTSUPP) | Some(524) => format!(
                "its fexit on {function} loads but does not attach (ENOTSUPP): this kernel \
                 cannot attach BPF trampolines on this architecture (arm64 before 6.0, or \
                 without CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS)"
            ),
            _ => format!("its fexit on {function} was not attached: {e}"),
        },
    )?;
    links.keep(None, Link::new(LinkKind::Trampoline, link), [Some(fd)]);
    Ok(())
}

fn attach_with(
    config: &kspan_config,
    maps: &SharedMaps,
    links: &mut Links,
    mechanism: SchedMechanism,
    causes: &CauseChecks,
) -> Result<(), AccountError> {
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
        attach_target: None,
        config,
        programs: &programs,
        shared: maps,
    })
    .map_err(|failure| AccountError::load(mechanism, failure))?;
    let [switch, waking, wakeup] = sched;
    let missing = |program: Program| AccountError::missing(mechanism, program);
    let switch_fd = loaded.take(switch).ok_or_else(|| missing(switch))?;
    let waking_fd = loaded.take(waking).ok_or_else(|| missing(waking))?;
    let wakeup_fd = loaded.take(wakeup).ok_or_else(|| missing(wakeup))?;
    let link_in = |prog: &OwnedFd, category: &str, event: &str| -> Result<Link, AccountError> {
        let fd = match mechanism {
            SchedMechanism::BtfTracepoints => sys::attach_btf_tracepoint(prog.as_fd()),
            SchedMechanism::Tracepoints => sys::attach_tracepoint(prog.as_fd(), category, event),
        };
        fd.map(|fd| Link::new(LinkKind::Tracepoint, fd))
            .map_err(|e| AccountError::refused(mechanism, &format!("{category}:{event}"), e))
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
    Ok(())
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

fn check_classic_formats() -> Result<(), AccountError> {
    for (event, field, offset, size) in CLASSIC_FIELDS {
        let format = tracefs::read_sched_format(event).map_err(|e| AccountError::Format {
            event: format!("sched:{event}"),
            reason: e.to_string(),
        })?;
        let found = tracefs::field_layout(&format, field);
        if found != Some((offset, size)) {
            return Err(AccountError::Format {
                event: format!("sched:{event}"),
                reason: format!(
                    "its `{field}` field is at {found:?} (offset, size) in this kernel's format, \
                     where kspan's program reads ({offset}, {size})"
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_tracepoints_are_said_skipped_during_map_calls_and_btf_ones_not() {
        assert_eq!(
            map_call_guard(SchedMechanism::Tracepoints).as_deref(),
            Some("the scheduler's account through tracepoint")
        );
        assert_eq!(map_call_guard(SchedMechanism::BtfTracepoints), None);
    }
}
