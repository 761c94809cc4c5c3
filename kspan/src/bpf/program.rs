// SPDX-License-Identifier: Apache-2.0 OR MIT
//! kspan's BPF programs by role ([`Program`]): which serve each hook, and
//! where each is in the object's skeleton.

use kspan_bpf::types::kspan_config;
use kspan_bpf::{KspanSkel, OpenKspanProgs};
use libbpf_rs::{OpenProgramMut, ProgramMut};

use crate::annotation::Hook;

/// kspan's programs, by role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Program {
    Fentry,
    Fexit,
    Kprobe,
    Kretprobe,
    KprobeMulti,
    KretprobeMulti,
    /// One program at both ends of a trampoline function (fsession).
    Fsession,
    /// The same, loaded with no target: one fsession.multi link attaches
    /// it to many functions.
    FsessionMulti,
    /// The same built without captures, refusals at exit, sums and
    /// histograms, for probes that have none ([`super::config::is_plain`]):
    /// a third of the instructions to verify.
    PlainFsessionMulti,
    /// One program at both ends of kprobe.multi functions.
    KprobeSession,
    SysEnter,
    SysExit,
    /// Where the probes' stacks are by thread id (no task local storage):
    /// empties a thread's at its exit (`sched:sched_process_exit`).
    TaskExit,
    /// The scheduler's account (see [`crate::sched`]): `sched_switch`,
    /// `sched_waking` and `sched_wakeup` as BTF tracepoints.
    BtfSchedSwitch,
    BtfSchedWaking,
    BtfSchedWakeup,
    /// The same as classic tracepoints.
    SchedSwitch,
    SchedWaking,
    SchedWakeup,
    /// The account's causes: `lock:contention_begin` and `_end` as BTF
    /// tracepoints.
    BtfLockBegin,
    BtfLockEnd,
    /// The same as classic tracepoints.
    LockBegin,
    LockEnd,
    /// The account's causes: `block_rq_insert`, `_issue` and `_complete`
    /// as BTF tracepoints (the classic ones give no request to follow).
    BtfBlockInsert,
    BtfBlockIssue,
    BtfBlockComplete,
    /// The account's causes: bios blk-throttle held (the fexit of
    /// `__blk_throtl_bio`: a trampoline, loaded apart from the account's
    /// tracepoints, where the kernel lets this process load one).
    FexitThrottle,
    /// The account's causes: memory stalls (`vmscan:mm_vmscan_direct_reclaim_*`,
    /// `mm_vmscan_memcg_reclaim_*`, `compaction:mm_compaction_*`), as BTF
    /// tracepoints and as classic ones.
    BtfDirectReclaimBegin,
    BtfDirectReclaimEnd,
    BtfMemcgReclaimBegin,
    BtfMemcgReclaimEnd,
    BtfCompactionBegin,
    BtfCompactionEnd,
    DirectReclaimBegin,
    DirectReclaimEnd,
    MemcgReclaimBegin,
    MemcgReclaimEnd,
    CompactionBegin,
    CompactionEnd,
    /// The account's causes: page fault exceptions
    /// (`exceptions:page_fault_user` and `page_fault_kernel`, x86-64), as
    /// BTF tracepoints: when a thread's fault counts may have moved.
    BtfPageFaultUser,
    BtfPageFaultKernel,
}

impl Program {
    /// The entry program of `hook`, and its exit program when it has one.
    pub(crate) fn of(hook: Hook) -> (Program, Option<Program>) {
        let (entry, exit) = match hook {
            Hook::Fentry | Hook::Fexit => (Program::Fentry, Program::Fexit),
            Hook::Kprobe | Hook::Kretprobe => (Program::Kprobe, Program::Kretprobe),
            Hook::Syscall => (Program::SysEnter, Program::SysExit),
        };
        (entry, hook.has_return().then_some(exit))
    }

    /// The kprobe.multi programs of a kprobe `hook`.
    pub(crate) fn multi_of(hook: Hook) -> (Program, Option<Program>) {
        (
            Program::KprobeMulti,
            hook.has_return().then_some(Program::KretprobeMulti),
        )
    }

    /// The fsession.multi program that serves `config`: the plain one
    /// where it can.
    pub(crate) fn fsession_multi_for(config: &kspan_config) -> Program {
        if super::config::is_plain(config) {
            Program::PlainFsessionMulti
        } else {
            Program::FsessionMulti
        }
    }

    /// A trampoline program loaded with no target (its link names them).
    pub(super) fn is_multi_trampoline(self) -> bool {
        matches!(self, Program::FsessionMulti | Program::PlainFsessionMulti)
    }

    /// The scheduler's account programs: BTF tracepoints first.
    pub(crate) const SCHED_BTF: [Program; 3] = [
        Program::BtfSchedSwitch,
        Program::BtfSchedWaking,
        Program::BtfSchedWakeup,
    ];
    pub(crate) const SCHED_CLASSIC: [Program; 3] = [
        Program::SchedSwitch,
        Program::SchedWaking,
        Program::SchedWakeup,
    ];

    /// The lock contention programs of the causes, by mechanism: end
    /// first (attached first, so that no begin misses its end).
    pub(crate) const LOCK_BTF: [Program; 2] = [Program::BtfLockEnd, Program::BtfLockBegin];
    pub(crate) const LOCK_CLASSIC: [Program; 2] = [Program::LockEnd, Program::LockBegin];
    /// The block request programs of the causes: the completion first
    /// (attached first, so that no request kept misses its end).
    pub(crate) const BLOCK_BTF: [Program; 3] = [
        Program::BtfBlockComplete,
        Program::BtfBlockIssue,
        Program::BtfBlockInsert,
    ];
    /// The memory stall programs of the causes, each pair end first, with
    /// their tracepoints' category and event.
    pub(crate) const MEMORY_BTF: [(Program, &'static str, &'static str); 6] = [
        (
            Program::BtfDirectReclaimEnd,
            "vmscan",
            "mm_vmscan_direct_reclaim_end",
        ),
        (
            Program::BtfDirectReclaimBegin,
            "vmscan",
            "mm_vmscan_direct_reclaim_begin",
        ),
        (
            Program::BtfMemcgReclaimEnd,
            "vmscan",
            "mm_vmscan_memcg_reclaim_end",
        ),
        (
            Program::BtfMemcgReclaimBegin,
            "vmscan",
            "mm_vmscan_memcg_reclaim_begin",
        ),
        (Program::BtfCompactionEnd, "compaction", "mm_compaction_end"),
        (
            Program::BtfCompactionBegin,
            "compaction",
            "mm_compaction_begin",
        ),
    ];
    pub(crate) const MEMORY_CLASSIC: [(Program, &'static str, &'static str); 6] = [
        (
            Program::DirectReclaimEnd,
            "vmscan",
            "mm_vmscan_direct_reclaim_end",
        ),
        (
            Program::DirectReclaimBegin,
            "vmscan",
            "mm_vmscan_direct_reclaim_begin",
        ),
        (
            Program::MemcgReclaimEnd,
            "vmscan",
            "mm_vmscan_memcg_reclaim_end",
        ),
        (
            Program::MemcgReclaimBegin,
            "vmscan",
            "mm_vmscan_memcg_reclaim_begin",
        ),
        (Program::CompactionEnd, "compaction", "mm_compaction_end"),
        (
            Program::CompactionBegin,
            "compaction",
            "mm_compaction_begin",
        ),
    ];

    /// The page fault programs of the causes, with their tracepoints'
    /// category and event.
    pub(crate) const FAULTS_BTF: [(Program, &'static str, &'static str); 2] = [
        (Program::BtfPageFaultUser, "exceptions", "page_fault_user"),
        (
            Program::BtfPageFaultKernel,
            "exceptions",
            "page_fault_kernel",
        ),
    ];

    /// One of the scheduler's account programs.
    pub(super) fn is_sched(self) -> bool {
        Self::SCHED_BTF.contains(&self)
            || Self::SCHED_CLASSIC.contains(&self)
            || Self::LOCK_BTF.contains(&self)
            || Self::LOCK_CLASSIC.contains(&self)
            || Self::BLOCK_BTF.contains(&self)
            || self == Program::FexitThrottle
            || Self::MEMORY_BTF.iter().any(|&(p, ..)| p == self)
            || Self::MEMORY_CLASSIC.iter().any(|&(p, ..)| p == self)
            || Self::FAULTS_BTF.iter().any(|&(p, ..)| p == self)
    }

    pub(super) const ALL: [Program; 41] = [
        Program::Fentry,
        Program::Fexit,
        Program::Kprobe,
        Program::Kretprobe,
        Program::KprobeMulti,
        Program::KretprobeMulti,
        Program::Fsession,
        Program::FsessionMulti,
        Program::PlainFsessionMulti,
        Program::KprobeSession,
        Program::SysEnter,
        Program::SysExit,
        Program::TaskExit,
        Program::BtfSchedSwitch,
        Program::BtfSchedWaking,
        Program::BtfSchedWakeup,
        Program::SchedSwitch,
        Program::SchedWaking,
        Program::SchedWakeup,
        Program::BtfLockBegin,
        Program::BtfLockEnd,
        Program::LockBegin,
        Program::LockEnd,
        Program::BtfBlockInsert,
        Program::BtfBlockIssue,
        Program::BtfBlockComplete,
        Program::FexitThrottle,
        Program::BtfDirectReclaimBegin,
        Program::BtfDirectReclaimEnd,
        Program::BtfMemcgReclaimBegin,
        Program::BtfMemcgReclaimEnd,
        Program::BtfCompactionBegin,
        Program::BtfCompactionEnd,
        Program::DirectReclaimBegin,
        Program::DirectReclaimEnd,
        Program::MemcgReclaimBegin,
        Program::MemcgReclaimEnd,
        Program::CompactionBegin,
        Program::CompactionEnd,
        Program::BtfPageFaultUser,
        Program::BtfPageFaultKernel,
    ];

    pub(super) fn in_skeleton<'a, 'obj>(
        self,
        progs: &'a mut OpenKspanProgs<'obj>,
    ) -> &'a mut OpenProgramMut<'obj> {
        match self {
            Program::Fentry => &mut progs.kspan_fentry,
            Program::Fexit => &mut progs.kspan_fexit,
            Program::Kprobe => &mut progs.kspan_kprobe,
            Program::Kretprobe => &mut progs.kspan_kretprobe,
            Program::KprobeMulti => &mut progs.kspan_kprobe_multi,
            Program::KretprobeMulti => &mut progs.kspan_kretprobe_multi,
            Program::Fsession => &mut progs.kspan_fsession,
            Program::FsessionMulti => &mut progs.kspan_fsession_multi,
            Program::PlainFsessionMulti => &mut progs.kspan_plain_fsession_multi,
            Program::KprobeSession => &mut progs.kspan_kprobe_session,
            Program::SysEnter => &mut progs.kspan_sys_enter,
            Program::SysExit => &mut progs.kspan_sys_exit,
            Program::TaskExit => &mut progs.kspan_task_exit,
            Program::BtfSchedSwitch => &mut progs.kspan_tp_sched_switch,
            Program::BtfSchedWaking => &mut progs.kspan_tp_sched_waking,
            Program::SchedSwitch => &mut progs.kspan_sched_switch,
            Program::SchedWaking => &mut progs.kspan_sched_waking_tp,
            Program::BtfSchedWakeup => &mut progs.kspan_tp_sched_wakeup,
            Program::SchedWakeup => &mut progs.kspan_sched_wakeup_tp,
            Program::BtfLockBegin => &mut progs.kspan_tp_lock_begin,
            Program::BtfLockEnd => &mut progs.kspan_tp_lock_end,
            Program::LockBegin => &mut progs.kspan_lock_begin_tp,
            Program::LockEnd => &mut progs.kspan_lock_end_tp,
            Program::BtfBlockInsert => &mut progs.kspan_tp_block_insert,
            Program::FexitThrottle => &mut progs.kspan_fexit_throttle,
            Program::BtfBlockIssue => &mut progs.kspan_tp_block_issue,
            Program::BtfBlockComplete => &mut progs.kspan_tp_block_complete,
            Program::BtfDirectReclaimBegin => &mut progs.kspan_tp_mm_vmscan_direct_reclaim_begin,
            Program::BtfDirectReclaimEnd => &mut progs.kspan_tp_mm_vmscan_direct_reclaim_end,
            Program::BtfMemcgReclaimBegin => &mut progs.kspan_tp_mm_vmscan_memcg_reclaim_begin,
            Program::BtfMemcgReclaimEnd => &mut progs.kspan_tp_mm_vmscan_memcg_reclaim_end,
            Program::BtfCompactionBegin => &mut progs.kspan_tp_mm_compaction_begin,
            Program::BtfCompactionEnd => &mut progs.kspan_tp_mm_compaction_end,
            Program::DirectReclaimBegin => &mut progs.kspan_mm_vmscan_direct_reclaim_begin_tp,
            Program::DirectReclaimEnd => &mut progs.kspan_mm_vmscan_direct_reclaim_end_tp,
            Program::MemcgReclaimBegin => &mut progs.kspan_mm_vmscan_memcg_reclaim_begin_tp,
            Program::MemcgReclaimEnd => &mut progs.kspan_mm_vmscan_memcg_reclaim_end_tp,
            Program::CompactionBegin => &mut progs.kspan_mm_compaction_begin_tp,
            Program::CompactionEnd => &mut progs.kspan_mm_compaction_end_tp,
            Program::BtfPageFaultUser => &mut progs.kspan_tp_page_fault_user,
            Program::BtfPageFaultKernel => &mut progs.kspan_tp_page_fault_kernel,
        }
    }

    /// The program in a loaded skeleton.
    pub(super) fn in_loaded<'a, 'obj>(self, skel: &'a KspanSkel<'obj>) -> &'a ProgramMut<'obj> {
        let progs = &skel.progs;
        match self {
            Program::Fentry => &progs.kspan_fentry,
            Program::Fexit => &progs.kspan_fexit,
            Program::Kprobe => &progs.kspan_kprobe,
            Program::Kretprobe => &progs.kspan_kretprobe,
            Program::KprobeMulti => &progs.kspan_kprobe_multi,
            Program::KretprobeMulti => &progs.kspan_kretprobe_multi,
            Program::Fsession => &progs.kspan_fsession,
            Program::FsessionMulti => &progs.kspan_fsession_multi,
            Program::PlainFsessionMulti => &progs.kspan_plain_fsession_multi,
            Program::KprobeSession => &progs.kspan_kprobe_session,
            Program::SysEnter => &progs.kspan_sys_enter,
            Program::SysExit => &progs.kspan_sys_exit,
            Program::TaskExit => &progs.kspan_task_exit,
            Program::BtfSchedSwitch => &progs.kspan_tp_sched_switch,
            Program::BtfSchedWaking => &progs.kspan_tp_sched_waking,
            Program::SchedSwitch => &progs.kspan_sched_switch,
            Program::SchedWaking => &progs.kspan_sched_waking_tp,
            Program::BtfSchedWakeup => &progs.kspan_tp_sched_wakeup,
            Program::SchedWakeup => &progs.kspan_sched_wakeup_tp,
            Program::BtfLockBegin => &progs.kspan_tp_lock_begin,
            Program::BtfLockEnd => &progs.kspan_tp_lock_end,
            Program::LockBegin => &progs.kspan_lock_begin_tp,
            Program::LockEnd => &progs.kspan_lock_end_tp,
            Program::BtfBlockInsert => &progs.kspan_tp_block_insert,
            Program::FexitThrottle => &progs.kspan_fexit_throttle,
            Program::BtfBlockIssue => &progs.kspan_tp_block_issue,
            Program::BtfBlockComplete => &progs.kspan_tp_block_complete,
            Program::BtfDirectReclaimBegin => &progs.kspan_tp_mm_vmscan_direct_reclaim_begin,
            Program::BtfDirectReclaimEnd => &progs.kspan_tp_mm_vmscan_direct_reclaim_end,
            Program::BtfMemcgReclaimBegin => &progs.kspan_tp_mm_vmscan_memcg_reclaim_begin,
            Program::BtfMemcgReclaimEnd => &progs.kspan_tp_mm_vmscan_memcg_reclaim_end,
            Program::BtfCompactionBegin => &progs.kspan_tp_mm_compaction_begin,
            Program::BtfCompactionEnd => &progs.kspan_tp_mm_compaction_end,
            Program::DirectReclaimBegin => &progs.kspan_mm_vmscan_direct_reclaim_begin_tp,
            Program::DirectReclaimEnd => &progs.kspan_mm_vmscan_direct_reclaim_end_tp,
            Program::MemcgReclaimBegin => &progs.kspan_mm_vmscan_memcg_reclaim_begin_tp,
            Program::MemcgReclaimEnd => &progs.kspan_mm_vmscan_memcg_reclaim_end_tp,
            Program::CompactionBegin => &progs.kspan_mm_compaction_begin_tp,
            Program::CompactionEnd => &progs.kspan_mm_compaction_end_tp,
            Program::BtfPageFaultUser => &progs.kspan_tp_page_fault_user,
            Program::BtfPageFaultKernel => &progs.kspan_tp_page_fault_kernel,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hook_has_its_programs() {
        assert_eq!(Program::of(Hook::Fentry), (Program::Fentry, None));
        assert_eq!(
            Program::of(Hook::Syscall),
            (Program::SysEnter, Some(Program::SysExit))
        );
        assert_eq!(
            Program::multi_of(Hook::Kretprobe),
            (Program::KprobeMulti, Some(Program::KretprobeMulti))
        );
    }
}
