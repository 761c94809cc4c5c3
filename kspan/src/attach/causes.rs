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
    /// The memory stall tracepoints this kernel has (each pair whole), and
    /// those it lacks with why.
    memory: Vec<(&'static str, &'static str)>,
    memory_missing: Vec<String>,
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
                memory: Vec::new(),
                memory_missing: Vec::new(),
            };
        }
        let (memory, memory_missing) = check_memory_events();
        CauseChecks {
            on: true,
            locks: check_lock_formats(),
            block: check_block_events(),
            memory,
            memory_missing,
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
        let memory = match mechanism {
            SchedMechanism::BtfTracepoints => Program::MEMORY_BTF,
            SchedMechanism::Tracepoints => Program::MEMORY_CLASSIC,
        };
        programs.extend(
            memory
                .into_iter()
                .filter(|(_, category, event)| self.memory.contains(&(category, event))),
        );
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
            CauseMechanism {
                cause: "memory stalls: reclaim, compaction",
                how: if self.memory.is_empty() {
                    Err(self.memory_missing.join("; "))
                } else {
                    let events: Vec<String> = self
                        .memory
                        .iter()
                        .map(|(category, event)| format!("{category}:{event}"))
                        .collect();
                    let mut how = format!("{} as {tracepoints}", events.join(", "));
                    if !self.memory_missing.is_empty() {
                        how.push_str(&format!(" (not: {})", self.memory_missing.join("; ")));
                    }
                    Ok(how)
                },
            },
            CauseMechanism {
                cause: "page faults: minor, major, and the time waiting in them",
                how: Ok(
                    "the thread's own counts (getrusage) at each switch of its span, and \
                         its user registers at each waiting switch-out"
                        .to_owned(),
                ),
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

/// The memory stall tracepoints this kernel has, each begin/end pair whole,
/// and why each missing pair is missing.
fn check_memory_events() -> (Vec<(&'static str, &'static str)>, Vec<String>) {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for (category, begin, end, needs) in [
        (
            "vmscan",
            "mm_vmscan_direct_reclaim_begin",
            "mm_vmscan_direct_reclaim_end",
            "direct reclaim",
        ),
        (
            "vmscan",
            "mm_vmscan_memcg_reclaim_begin",
            "mm_vmscan_memcg_reclaim_end",
            "a cgroup's reclaim (CONFIG_MEMCG)",
        ),
        (
            "compaction",
            "mm_compaction_begin",
            "mm_compaction_end",
            "compaction (CONFIG_COMPACTION)",
        ),
    ] {
        let has = |event: &str| tracefs::read_event_format(category, event).is_ok();
        if has(begin) && has(end) {
            found.push((category, begin));
            found.push((category, end));
        } else {
            missing.push(format!("{needs}: no {category}:{begin}/_end tracepoints"));
        }
    }
    (found, missing)
}

/// The block request tracepoints; `Err` says why not.
fn check_block_events() -> Result<(), String> {
    for event in ["block_rq_insert", "block_rq_issue", "block_rq_complete"] {
        tracefs::read_event_format("block", event)
            .map_err(|e| format!("this kernel has no block:{event} tracepoint: {e}"))?;
    }
    Ok(())
}
