// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The scheduler's account's causes
//! ([`SchedulerAccount::with_causes`](crate::SchedulerAccount::with_causes)):
//! which of their programs this kernel takes, checked before the load, and
//! how each cause is then read. The flags of a blocked thread and the
//! system call of a sleeping one are read by the switch's own program;
//! kernel locks and block requests need programs of their own, attached
//! with the account's (their ends first, so that nothing they keep misses
//! its end).

use super::{CauseMechanism, SchedMechanism, SchedulerAccount};
use crate::bpf::program::Program;
use crate::kernel::btf::Btf;
use crate::kernel::tracefs;

/// What this kernel offers each cause that needs programs of its own, for
/// each mechanism: BTF tracepoints by the kernel's BTF (`btf_trace_<event>`,
/// no tracefs needed: a process with CAP_BPF and CAP_PERFMON alone reads
/// them), classic ones by their tracefs format.
#[derive(Debug, Clone)]
pub(crate) struct CauseChecks {
    /// The causes are on.
    on: bool,
    /// `lock:contention_begin` and `_end`, by BTF; by tracefs, with the
    /// layout the classic programs read.
    locks_btf: Result<(), String>,
    locks_classic: Result<(), String>,
    /// `block:block_rq_insert`, `_issue` and `_complete`, by BTF.
    block_btf: Result<(), String>,
    /// blk-throttle's decision (`__blk_throtl_bio`, or `blk_throtl_bio`
    /// in older kernels) in BTF and in the kernel's symbols, and
    /// trampolines to load its fexit (which the block programs need as
    /// well): the function.
    throttle: Result<&'static str, String>,
    /// The memory stall tracepoints the kernel has (each begin/end pair
    /// whole), by BTF and by tracefs, and those it lacks with why.
    memory_btf: Vec<&'static str>,
    memory_classic: Vec<&'static str>,
    memory_missing: Vec<String>,
    /// How the account treats interrupt time on this kernel (whether the
    /// causes are on or not): [`interrupt_time`].
    pub(crate) interrupts: &'static str,
    /// `exceptions:page_fault_user` and `page_fault_kernel`, by BTF
    /// (x86-64 has them; arm64 has no such tracepoints).
    faults_btf: Result<(), String>,
    /// The flags of why a task blocks that this kernel's `task_struct`
    /// has, of `in_iowait`, `in_memstall` and `in_thrashing`.
    block_flags: Vec<&'static str>,
    /// Whether `bpf_task_pt_regs` finds a task's user registers in BTF
    /// tracepoint and in classic tracepoint programs (else the programs
    /// find them at the top of its kernel stack, as the helper does).
    task_pt_regs: (bool, bool),
}

/// Where the kernel accounts interrupt time apart from tasks' CPU time.
const INTERRUPTS_APART: &str = "left out of on_cpu_ns and said in kspan.sched.interrupts_ns, as \
     the kernel leaves it out of a thread's CPU time (CONFIG_IRQ_TIME_ACCOUNTING: the run \
     queue's prev_irq_time, read at each switch in and out)";

/// Where it does not.
const INTERRUPTS_IN: &str = "in on_cpu_ns, as in the kernel's own CPU time of the thread \
     (schedstat, its CPU clock): this kernel does not account interrupt time apart (no \
     CONFIG_IRQ_TIME_ACCOUNTING: its struct rq has no prev_irq_time)";

/// How the account treats interrupt time on the kernel of `btf`: out of
/// on-CPU time where the kernel leaves it out of a thread's CPU time, in
/// it where the kernel counts it there.
pub(crate) fn interrupt_time(btf: &Btf) -> &'static str {
    if crate::plan::fieldpath::member_offset(btf, "struct rq", &["prev_irq_time"]).is_some() {
        INTERRUPTS_APART
    } else {
        INTERRUPTS_IN
    }
}

/// Whether `btf` has the BTF tracepoint `event` (its `btf_trace_` typedef).
fn btf_has(btf: &Btf, event: &str) -> bool {
    btf.type_named(&format!("btf_trace_{event}")).is_some()
}

impl CauseChecks {
    /// Checks this kernel (`btf`, and tracefs) for `account`'s causes
    /// (none without an account).
    pub(crate) fn of(account: Option<&SchedulerAccount>, btf: &Btf) -> Self {
        let interrupts = interrupt_time(btf);
        if !account.is_some_and(SchedulerAccount::causes) {
            let off = || Err("the causes are off".to_owned());
            return CauseChecks {
                on: false,
                locks_btf: off(),
                locks_classic: off(),
                block_btf: off(),
                throttle: Err("the causes are off".to_owned()),
                memory_btf: Vec::new(),
                memory_classic: Vec::new(),
                memory_missing: Vec::new(),
                interrupts,
                faults_btf: off(),
                block_flags: Vec::new(),
                task_pt_regs: (false, false),
            };
        }
        let btf_events = |category: &str, events: &[&str]| match events
            .iter()
            .find(|event| !btf_has(btf, event))
        {
            Some(event) => Err(format!(
                "this kernel's BTF has no {category}:{event} tracepoint (btf_trace_{event})"
            )),
            None => Ok(()),
        };
        let mut memory_btf = Vec::new();
        let mut memory_classic = Vec::new();
        let mut memory_missing = Vec::new();
        for (category, begin, end, what) in MEMORY_EVENTS {
            let in_btf = btf_has(btf, begin) && btf_has(btf, end);
            let has = |event: &str| tracefs::read_event_format(category, event).is_ok();
            let in_tracefs = has(begin) && has(end);
            if in_btf {
                memory_btf.extend([begin, end]);
            }
            if in_tracefs {
                memory_classic.extend([begin, end]);
            }
            if !in_btf && !in_tracefs {
                memory_missing.push(format!("{what}: no {category}:{begin}/_end tracepoints"));
            }
        }
        let capabilities = crate::bpf::KernelCapabilities::cached(|| Ok(btf));
        let task = btf
            .type_named("struct task_struct")
            .and_then(|id| btf.composite(id));
        let block_flags = BLOCK_FLAGS
            .into_iter()
            .filter(|flag| {
                task.as_ref()
                    .is_some_and(|t| t.members.iter().any(|m| m.name == *flag))
            })
            .collect();
        CauseChecks {
            block_flags,
            task_pt_regs: (
                capabilities.tracing_programs.task_pt_regs.is_available(),
                capabilities.tracepoint_programs.task_pt_regs.is_available(),
            ),
            on: true,
            throttle: check_throttle(btf),
            locks_btf: btf_events("lock", &["contention_begin", "contention_end"]),
            locks_classic: check_lock_formats(),
            block_btf: btf_events(
                "block",
                &["block_rq_insert", "block_rq_issue", "block_rq_complete"],
            ),
            memory_btf,
            memory_classic,
            memory_missing,
            interrupts,
            faults_btf: btf_events("exceptions", &["page_fault_user", "page_fault_kernel"]),
        }
    }

    /// Whether the causes are on.
    pub(crate) fn on(&self) -> bool {
        self.on
    }

    /// Whether the page fault programs are attached with `mechanism`: then
    /// a thread's fault counts are read (getrusage) at a change of its
    /// span only after a fault (`time`), else at every change.
    pub(crate) fn faults_hooked(&self, mechanism: SchedMechanism) -> bool {
        mechanism == SchedMechanism::BtfTracepoints && self.faults_btf.is_ok()
    }

    fn locks(&self, mechanism: SchedMechanism) -> &Result<(), String> {
        match mechanism {
            SchedMechanism::BtfTracepoints => &self.locks_btf,
            SchedMechanism::Tracepoints => &self.locks_classic,
        }
    }

    fn memory(&self, mechanism: SchedMechanism) -> &[&'static str] {
        match mechanism {
            SchedMechanism::BtfTracepoints => &self.memory_btf,
            SchedMechanism::Tracepoints => &self.memory_classic,
        }
    }

    /// The causes' programs to load and attach with `mechanism`, each with
    /// its tracepoint's category and event, ends first.
    pub(crate) fn programs(
        &self,
        mechanism: SchedMechanism,
    ) -> Vec<(Program, &'static str, &'static str)> {
        let mut programs = Vec::new();
        if self.locks(mechanism).is_ok() {
            let [end, begin] = match mechanism {
                SchedMechanism::BtfTracepoints => Program::LOCK_BTF,
                SchedMechanism::Tracepoints => Program::LOCK_CLASSIC,
            };
            programs.push((end, "lock", "contention_end"));
            programs.push((begin, "lock", "contention_begin"));
        }
        if self.block_btf.is_ok() && mechanism == SchedMechanism::BtfTracepoints {
            let [complete, issue, insert] = Program::BLOCK_BTF;
            programs.push((complete, "block", "block_rq_complete"));
            programs.push((issue, "block", "block_rq_issue"));
            programs.push((insert, "block", "block_rq_insert"));
        }
        let memory = match mechanism {
            SchedMechanism::BtfTracepoints => Program::MEMORY_BTF,
            SchedMechanism::Tracepoints => Program::MEMORY_CLASSIC,
        };
        let have = self.memory(mechanism);
        programs.extend(
            memory
                .into_iter()
                .filter(|(_, _, event)| have.contains(event)),
        );
        if self.faults_hooked(mechanism) {
            programs.extend(Program::FAULTS_BTF);
        }
        programs
    }

    /// The function the throttle's fexit is to be loaded on with
    /// `mechanism` attached: `Err` says why none.
    pub(crate) fn throttle(&self, mechanism: SchedMechanism) -> Result<&'static str, String> {
        self.block(mechanism)?;
        self.throttle.clone()
    }

    fn block(&self, mechanism: SchedMechanism) -> Result<(), String> {
        match (&self.block_btf, mechanism) {
            (Ok(()), SchedMechanism::BtfTracepoints) => Ok(()),
            (_, SchedMechanism::Tracepoints) => Err(
                "the account uses classic tracepoints, whose block events name no request to \
                 follow (block requests need BTF tracepoints)"
                    .to_owned(),
            ),
            (Err(why), _) => Err(why.clone()),
        }
    }

    /// How each cause is read with `mechanism` attached, or why not; empty
    /// with the causes off. `throttle`: what became of the throttle's
    /// fexit ([`CauseChecks::throttle`], then its load and attach).
    pub(crate) fn mechanisms(
        &self,
        mechanism: SchedMechanism,
        throttle: &Result<&'static str, String>,
    ) -> Vec<CauseMechanism> {
        if !self.on {
            return Vec::new();
        }
        let tracepoints = match mechanism {
            SchedMechanism::BtfTracepoints => "BTF tracepoints",
            SchedMechanism::Tracepoints => "classic tracepoints",
        };
        let block = self.block(mechanism).map(|()| {
            "block:block_rq_insert, block_rq_issue and block_rq_complete as BTF tracepoints"
                .to_owned()
        });
        vec![
            CauseMechanism {
                cause: "blocked: io, memory",
                how: self.block_flags_read(),
            },
            CauseMechanism {
                cause: "sleeping: futex, poll, timer, receive",
                how: if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
                    Ok(format!(
                        "the system call the leaving thread sleeps in (its saved registers{}), \
                         read at each sleeping switch-out",
                        self.registers_found(mechanism)
                    ))
                } else {
                    Err("kspan knows the system call numbers of x86-64 and arm64 only".to_owned())
                },
            },
            CauseMechanism {
                cause: "kernel locks (and blocked: lock, sleeping: lock)",
                how: self
                    .locks(mechanism)
                    .clone()
                    .map(|()| format!("lock:contention_begin and contention_end as {tracepoints}")),
            },
            CauseMechanism {
                cause: "block requests (and a blocked wait's request)",
                how: block,
            },
            CauseMechanism {
                cause: THROTTLE_CAUSE,
                how: throttle.clone().map(|function| {
                    format!(
                        "the fexit of {function} (the bios it holds, by bio), followed to their \
                         requests in the throttle's worker"
                    )
                }),
            },
            CauseMechanism {
                cause: "memory stalls: reclaim, compaction",
                how: {
                    let have = self.memory(mechanism);
                    if have.is_empty() {
                        Err(if self.memory_missing.is_empty() {
                            format!("none of their tracepoints is readable as {tracepoints}")
                        } else {
                            self.memory_missing.join("; ")
                        })
                    } else {
                        let events: Vec<&str> = have.to_vec();
                        let mut how = format!("{} as {tracepoints}", events.join(", "));
                        if !self.memory_missing.is_empty() {
                            how.push_str(&format!(" (not: {})", self.memory_missing.join("; ")));
                        }
                        Ok(how)
                    }
                },
            },
            CauseMechanism {
                cause: "interrupt time",
                how: Ok(self.interrupts.to_owned()),
            },
            CauseMechanism {
                cause: "page faults: minor, major, and the time waiting in them",
                how: Ok(self.faults_read(mechanism)),
            },
        ]
    }

    /// Which of the flags of why a task blocks the switch-out reads here,
    /// and those this kernel lacks.
    fn block_flags_read(&self) -> Result<String, String> {
        let lacking: Vec<&str> = BLOCK_FLAGS
            .into_iter()
            .filter(|flag| !self.block_flags.contains(flag))
            .collect();
        let read = match &self.block_flags[..] {
            [] => {
                return Err(format!(
                    "this kernel's task_struct has none of the flags {} (its BTF)",
                    BLOCK_FLAGS.join(", ")
                ))
            }
            [one] => format!("{one} flag"),
            [rest @ .., last] => format!("{} and {last} flags", rest.join(", ")),
        };
        let lacking = if lacking.is_empty() {
            String::new()
        } else {
            format!(" (this kernel's task_struct has no {})", lacking.join(", "))
        };
        Ok(format!(
            "the leaving thread's {read}{lacking}, read at each blocked switch-out"
        ))
    }

    /// Where the programs of `mechanism` find a task's user registers,
    /// where not through `bpf_task_pt_regs`.
    fn registers_found(&self, mechanism: SchedMechanism) -> &'static str {
        let helper = match mechanism {
            SchedMechanism::BtfTracepoints => self.task_pt_regs.0,
            SchedMechanism::Tracepoints => self.task_pt_regs.1,
        };
        if helper {
            ""
        } else {
            ", found at the top of its kernel stack as the kernel's task_pt_regs() finds them: \
             this kernel has no bpf_task_pt_regs for these programs"
        }
    }

    /// How a span's page faults are read with `mechanism`.
    fn faults_read(&self, mechanism: SchedMechanism) -> String {
        let counts = match (&self.faults_btf, mechanism) {
            (Ok(()), SchedMechanism::BtfTracepoints) => {
                "the thread's own counts (getrusage) at a switch of its span after a page \
                 fault exception (exceptions:page_fault_user and page_fault_kernel as BTF \
                 tracepoints say when)"
                    .to_owned()
            }
            (Ok(()), SchedMechanism::Tracepoints) => {
                "the thread's own counts (getrusage) at each switch of its span (the fault \
                 tracepoints are read as BTF tracepoints only)"
                    .to_owned()
            }
            (Err(why), _) => {
                format!("the thread's own counts (getrusage) at each switch of its span ({why})")
            }
        };
        format!("{counts}, and its user registers at each waiting switch-out")
    }
}

/// The flags of a task that say why it blocks (include/linux/sched.h),
/// read by the account's switch-out where the kernel has them:
/// `in_thrashing` is newer than the others.
const BLOCK_FLAGS: [&str; 3] = ["in_iowait", "in_memstall", "in_thrashing"];

/// The cause a throttled request's time is, as
/// [`Kspan::scheduler_causes`](crate::Kspan::scheduler_causes) names it.
pub(crate) const THROTTLE_CAUSE: &str =
    "throttled block I/O: blk-throttle's hold (cgroup v2 io.max, v1 blkio.throttle.*)";

/// The function the throttle's fexit can be loaded on here, if one:
/// blk-throttle's decision about a bio in the kernel's BTF
/// (CONFIG_BLK_DEV_THROTTLING) and symbols, and trampolines.
fn check_throttle(btf: &Btf) -> Result<&'static str, String> {
    let function = THROTTLE_FUNCTIONS
        .into_iter()
        .find(|function| btf.function(function).is_some())
        .ok_or_else(|| {
            "this kernel's BTF has no __blk_throtl_bio or blk_throtl_bio (a kernel without \
             blk-throttle, CONFIG_BLK_DEV_THROTTLING)"
                .to_owned()
        })?;
    // BTF names functions the compiler inlined everywhere too (Debian
    // 11's 5.10 has blk_throtl_bio only inside submit_bio_checks).
    match kallsyms_has(function) {
        Ok(true) => {}
        Ok(false) => {
            return Err(format!(
                "this kernel's blk-throttle decides in {function}, which is not in \
                 /proc/kallsyms (inlined into its callers): no trampoline can attach to it"
            ))
        }
        Err(e) => {
            return Err(format!(
                "/proc/kallsyms could not be read to find {function}: {e}"
            ))
        }
    }
    let capabilities = crate::bpf::KernelCapabilities::cached(|| Ok(btf));
    match &capabilities.trampolines {
        crate::bpf::Feature::Available => Ok(function),
        refused => Err(format!(
            "the throttle's hold is read by a trampoline (fexit on {function}): {refused}"
        )),
    }
}

/// blk-throttle's decision about a bio, which returns whether it holds
/// it, `bool (struct bio *)` under both names: `__blk_throtl_bio` in
/// newer kernels, `blk_throtl_bio` in older ones (5.10).
const THROTTLE_FUNCTIONS: [&str; 2] = ["__blk_throtl_bio", "blk_throtl_bio"];

/// Whether `/proc/kallsyms` lists the kernel function `name`.
fn kallsyms_has(name: &str) -> std::io::Result<bool> {
    let file = std::io::BufReader::new(std::fs::File::open("/proc/kallsyms")?);
    kallsyms_lists(file, name)
}

/// Whether kallsyms text (`address type name [module]` lines) lists the
/// kernel function `name`.
pub(crate) fn kallsyms_lists(text: impl std::io::BufRead, name: &str) -> std::io::Result<bool> {
    for line in text.lines() {
        let line = line?;
        let mut fields = line.split_ascii_whitespace().skip(1);
        if matches!(fields.next(), Some("t" | "T")) && fields.next() == Some(name) {
            return Ok(true);
        }
    }
    Ok(false)
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
        let events = std::path::Path::new(tracefs::TRACEFS).join("events");
        if events.is_dir() && !events.join("lock").join(event).is_dir() {
            return Err(format!(
                "this kernel has no lock:{event} tracepoint (Linux 5.19 and later have it)"
            ));
        }
        let format = tracefs::read_event_format("lock", event)
            .map_err(|e| format!("lock:{event}'s format could not be read: {e}"))?;
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

/// The memory stall tracepoints, by pair: category, begin, end, and what
/// the pair tells.
const MEMORY_EVENTS: [(&str, &str, &str, &str); 3] = [
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
];

#[cfg(test)]
mod tests {
    use super::*;

    fn checks(block_flags: Vec<&'static str>, task_pt_regs: (bool, bool)) -> CauseChecks {
        let off = || Err("off".to_owned());
        CauseChecks {
            on: true,
            locks_btf: off(),
            locks_classic: off(),
            block_btf: off(),
            throttle: Err("off".to_owned()),
            memory_btf: Vec::new(),
            memory_classic: Vec::new(),
            memory_missing: Vec::new(),
            interrupts: INTERRUPTS_IN,
            faults_btf: off(),
            block_flags,
            task_pt_regs,
        }
    }

    #[test]
    fn the_block_flags_read_are_those_the_kernel_has_and_the_rest_are_said() {
        assert_eq!(
            checks(BLOCK_FLAGS.to_vec(), (true, true)).block_flags_read(),
            Ok(
                "the leaving thread's in_iowait, in_memstall and in_thrashing flags, read at \
                each blocked switch-out"
                    .to_owned()
            )
        );
        // Linux 5.10's task_struct.
        assert_eq!(
            checks(vec!["in_iowait", "in_memstall"], (false, false)).block_flags_read(),
            Ok(
                "the leaving thread's in_iowait and in_memstall flags (this kernel's \
                task_struct has no in_thrashing), read at each blocked switch-out"
                    .to_owned()
            )
        );
        assert!(checks(Vec::new(), (true, true)).block_flags_read().is_err());
    }

    #[test]
    fn registers_found_without_bpf_task_pt_regs_say_so_per_mechanism() {
        let c = checks(BLOCK_FLAGS.to_vec(), (true, false));
        assert_eq!(c.registers_found(SchedMechanism::BtfTracepoints), "");
        assert!(c
            .registers_found(SchedMechanism::Tracepoints)
            .contains("no bpf_task_pt_regs"));
    }
}
