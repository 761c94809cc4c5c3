// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The scheduler's account's causes
//! ([`SchedulerAccount::with_causes`](crate::SchedulerAccount::with_causes)):
//! which of their programs this kernel takes, checked before the load, and
//! how each cause is then read. The flags of a blocked thread and the
//! system call of a sleeping one are read by the switch's own program;
//! kernel locks and block requests need programs of their own, attached
//! with the account's (their ends first, so that nothing they keep misses
//! its end).

use crate::bpf::program::Program;
use crate::kernel::tracefs;
use crate::sched::{CauseMechanism, SchedMechanism, SchedulerAccount};

/// What this kernel offers each cause that needs programs of its own.
#[derive(Debug, Clone)]
pub(crate) struct CauseChecks {
    /// The causes are on.
    on: bool,
    /// `lock:contention_begin` and `_end`, with the layout the classic
    /// programs read.
    locks: Result<(), String>,
    /// `block:block_rq_insert`, `_issue` and `_complete`.
    block: Result<(), String>,
}

impl CauseChecks {
    /// Checks this kernel's tracepoints for `account`'s causes.
    pub(crate) fn of(account: &SchedulerAccount) -> Self {
        if !account.causes() {
            let off = || Err("the causes are off".to_owned());
            return CauseChecks {
                on: false,
                locks: off(),
                block: off(),
            };
        }
        CauseChecks {
            on: true,
            locks: check_lock_formats(),
            block: check_block_events(),
        }
    }

    /// The causes' programs to load and attach with `mechanism`, each with
    /// its tracepoint's category and event, ends first.
    pub(crate) fn programs(
        &self,
        mechanism: SchedMechanism,
    ) -> Vec<(Program, &'static str, &'static str)> {
        let mut programs = Vec::new();
        if self.locks.is_ok() {
            let [end, begin] = match mechanism {
                SchedMechanism::BtfTracepoints => Program::LOCK_BTF,
                SchedMechanism::Tracepoints => Program::LOCK_CLASSIC,
            };
            programs.push((end, "lock", "contention_end"));
            programs.push((begin, "lock", "contention_begin"));
        }
        if self.block.is_ok() && mechanism == SchedMechanism::BtfTracepoints {
            let [complete, issue, insert] = Program::BLOCK_BTF;
            programs.push((complete, "block", "block_rq_complete"));
            programs.push((issue, "block", "block_rq_issue"));
            programs.push((insert, "block", "block_rq_insert"));
        }
        programs
    }

    /// How each cause is read with `mechanism` attached, or why not; empty
    /// with the causes off.
    pub(crate) fn mechanisms(&self, mechanism: SchedMechanism) -> Vec<CauseMechanism> {
        if !self.on {
            return Vec::new();
        }
        let tracepoints = match mechanism {
            SchedMechanism::BtfTracepoints => "BTF tracepoints",
            SchedMechanism::Tracepoints => "classic tracepoints",
        };
        let block = match (&self.block, mechanism) {
            (Ok(()), SchedMechanism::BtfTracepoints) => Ok(
                "block:block_rq_insert, block_rq_issue and block_rq_complete as BTF tracepoints"
                    .to_owned(),
            ),
            (Ok(()), SchedMechanism::Tracepoints) => Err(
                "the account uses classic tracepoints, whose block events name no request to \
                 follow (block requests need BTF tracepoints)"
                    .to_owned(),
            ),
            (Err(why), _) => Err(why.clone()),
        };
        vec![
            CauseMechanism {
                cause: "blocked: io, memory",
                how: Ok(
                    "the leaving thread's in_iowait, in_memstall and in_thrashing flags, \
                         read at each blocked switch-out"
                        .to_owned(),
                ),
            },
            CauseMechanism {
                cause: "sleeping: futex, poll, timer, receive",
                how: if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
                    Ok(
                        "the system call the leaving thread sleeps in (its saved registers), \
                        read at each sleeping switch-out"
                            .to_owned(),
                    )
                } else {
                    Err("kspan knows the system call numbers of x86-64 and arm64 only".to_owned())
                },
            },
            CauseMechanism {
                cause: "kernel locks (and blocked: lock, sleeping: lock)",
                how: self
                    .locks
                    .clone()
                    .map(|()| format!("lock:contention_begin and contention_end as {tracepoints}")),
            },
            CauseMechanism {
                cause: "block requests (and a blocked wait's request)",
                how: block,
            },
        ]
    }
}

/// The lock tracepoints, with their fields where the classic programs read
/// them; `Err` says why not.
fn check_lock_formats() -> Result<(), String> {
    for (event, field, offset, size) in [
        ("contention_begin", "lock_addr", 8, 8),
        ("contention_begin", "flags", 16, 4),
        ("contention_end", "lock_addr", 8, 8),
        ("contention_end", "ret", 16, 4),
    ] {
        let format = tracefs::read_event_format("lock", event).map_err(|e| {
            format!(
                "this kernel has no lock:{event} tracepoint (Linux 5.19 and later have it): {e}"
            )
        })?;
        let found = tracefs::field_layout(&format, field);
        if found != Some((offset, size)) {
            return Err(format!(
                "lock:{event}'s `{field}` field is at {found:?} (offset, size) in this kernel's \
                 format, where kspan's program reads ({offset}, {size})"
            ));
        }
    }
    Ok(())
}

/// The block request tracepoints; `Err` says why not.
fn check_block_events() -> Result<(), String> {
    for event in ["block_rq_insert", "block_rq_issue", "block_rq_complete"] {
        tracefs::read_event_format("block", event)
            .map_err(|e| format!("this kernel has no block:{event} tracepoint: {e}"))?;
    }
    Ok(())
}
