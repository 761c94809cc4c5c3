// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The scheduler's account on the host kernel, natively: BTF tracepoints
//! (what `auto` takes here) and classic tracepoints both, against the
//! kernel's own per-thread accounting (cases in `kspan_tests::sched`).

use kspan::{SchedMechanism, SchedulerAccount};
use kspan_tests::sched;

/// With the causes on: the sleep is a timer's, the lock a futex's.
#[test]
fn btf_tracepoints_figures_equal_the_kernel_s() {
    sched::a_span_s_figures_equal_the_kernel_s_own_accounting(
        SchedulerAccount::new()
            .mechanism(SchedMechanism::BtfTracepoints)
            .with_causes(),
        &sched::disk_dir(false),
        16,
        1,
        5,
    );
}

/// With the causes off: none is said.
#[test]
fn classic_tracepoints_figures_equal_the_kernel_s() {
    sched::a_span_s_figures_equal_the_kernel_s_own_accounting(
        SchedulerAccount::new().mechanism(SchedMechanism::Tracepoints),
        &sched::disk_dir(false),
        16,
        1,
        5,
    );
}

/// More threads than CPUs, woken by a disk's interrupts, timers and each
/// other: every span's figures are the kernel's (schedstat, status,
/// taskstats), or the span says it missed an interval.
#[test]
fn btf_every_span_s_figures_equal_the_kernel_s_under_contention() {
    sched::every_span_s_figures_equal_the_kernel_s_under_contention(
        SchedulerAccount::new()
            .mechanism(SchedMechanism::BtfTracepoints)
            .with_causes(),
        &sched::disk_dir(false),
    );
}

#[test]
fn classic_every_span_s_figures_equal_the_kernel_s_under_contention() {
    sched::every_span_s_figures_equal_the_kernel_s_under_contention(
        SchedulerAccount::new()
            .mechanism(SchedMechanism::Tracepoints)
            .with_causes(),
        &sched::disk_dir(false),
    );
}

/// 5 ms: a task's first polls pay for the runtime's first uses (its
/// blocking pool's threads, its timer), measured at up to 3.2 ms above the
/// task's own code in a CI run; another task's sleep under it is caught by
/// the wait spans' threads, whatever the slack.
#[test]
fn tokio_tasks_each_get_their_own_figures() {
    sched::tokio_tasks_each_get_their_own_figures(
        SchedulerAccount::new(),
        5,
        sched::SwitchClocks::RUNNING,
    );
}

#[test]
fn only_this_process_s_spans_are_accounted() {
    sched::only_this_process_s_spans_are_accounted(SchedulerAccount::new());
}

#[test]
fn classic_only_this_process_s_spans_are_accounted() {
    sched::only_this_process_s_spans_are_accounted(
        SchedulerAccount::new().mechanism(SchedMechanism::Tracepoints),
    );
}

#[test]
fn under_overload_wait_spans_are_whole_or_counted() {
    sched::under_overload_wait_spans_are_whole_or_counted(SchedulerAccount::new());
}

#[test]
fn the_account_without_its_parts_is_refused_with_the_fix() {
    sched::the_account_without_its_parts_is_refused_with_the_fix();
}

#[test]
fn a_read_past_the_cache_is_blocked_time() {
    sched::a_read_past_the_cache_is_blocked_time(sched::ReadTarget::FileIn(&sched::disk_dir(
        false,
    )));
}

#[test]
fn every_switch_is_counted_or_said_missed() {
    sched::every_switch_is_counted_or_said_missed(SchedulerAccount::new());
}

#[test]
fn a_timer_interrupt_taken_in_user_space_is_the_waker() {
    sched::a_timer_interrupt_taken_in_user_space_is_the_waker(
        SchedulerAccount::new().mechanism(SchedMechanism::BtfTracepoints),
        false,
    );
}

#[test]
fn classic_a_timer_interrupt_taken_in_user_space_is_the_waker() {
    sched::a_timer_interrupt_taken_in_user_space_is_the_waker(
        SchedulerAccount::new().mechanism(SchedMechanism::Tracepoints),
        true,
    );
}

/// A 64 MiB write holds its file's `f_pos_lock` (a kernel mutex) for tens
/// of ms: the other writer's span says the contention, 1 ms + 5% from the
/// holder's write's own clock, and names the holder.
#[test]
fn btf_a_kernel_mutex_wait_names_its_owner() {
    sched::a_kernel_mutex_wait_names_its_owner(
        SchedulerAccount::new()
            .mechanism(SchedMechanism::BtfTracepoints)
            .with_causes(),
        64 << 20,
        1,
        5,
    );
}

#[test]
fn classic_a_kernel_mutex_wait_names_its_owner() {
    sched::a_kernel_mutex_wait_names_its_owner(
        SchedulerAccount::new()
            .mechanism(SchedMechanism::Tracepoints)
            .with_causes(),
        64 << 20,
        1,
        5,
    );
}

/// 16 O_DIRECT reads of a synced file on the host's disk: the span's
/// block requests are exactly its reads (count, bytes, read_bytes), their
/// queue and device time within the reads' wall time and at least their
/// time off CPU, less 1 ms + 5%.
#[test]
fn a_span_s_block_requests_are_its_reads() {
    sched::a_span_s_block_requests_are_its_reads(
        SchedulerAccount::new()
            .wait_spans_from(std::time::Duration::from_micros(50))
            .with_causes(),
        sched::ReadTarget::FileIn(&sched::disk_dir(false)),
        16,
        1,
        5,
    );
}

/// The host refuses trampolines: the throttle's hold, read by a fexit, is
/// said not read, naming them (on a host that has them, said read).
#[test]
fn throttled_io_is_said_read_or_not() {
    sched::throttled_io_is_said_read_or_not(SchedulerAccount::new().with_causes());
}

/// A futex wait on a thread that reads the host's disk while it holds the
/// lock: the wait links to the reader's span and to its last read's wait,
/// which names its request; the times are schedstat's and taskstats'.
#[test]
fn a_chain_of_wake_ups_names_each_hop() {
    sched::a_chain_of_wake_ups_names_each_hop(
        SchedulerAccount::new()
            .wait_spans_from(std::time::Duration::from_micros(20))
            .with_causes(),
        std::time::Duration::from_micros(20),
        sched::ReadTarget::FileIn(&sched::disk_dir(false)),
        4,
        1,
        5,
    );
}

/// A lock holder that sleeps 40 times 300 us over the waiter's wait: the
/// waiter's `waker` link says the naps the account kept of it, and how
/// much of the wait's start it no longer covers.
#[test]
fn a_waker_says_what_its_rings_no_longer_cover() {
    sched::a_waker_says_what_its_rings_no_longer_cover(
        SchedulerAccount::new()
            .wait_spans_from(std::time::Duration::from_micros(20))
            .with_causes(),
        40,
        std::time::Duration::from_micros(300),
    );
}

/// Cold pages of a synced file on the host's disk, mapped and touched: the
/// span's faults are getrusage's, its time in them taskstats'.
#[test]
fn a_span_s_page_faults_are_the_kernel_s() {
    sched::a_span_s_page_faults_are_the_kernel_s(
        SchedulerAccount::new()
            .wait_spans_from(std::time::Duration::from_micros(20))
            .with_causes(),
        sched::ReadTarget::FileIn(&sched::disk_dir(false)),
        16,
        1,
        5,
    );
}

/// 2,048 major faults in nine spans (cold pages of a synced file on the
/// host's disk, read-ahead off): every span's blocked and on-CPU time is
/// the kernel's within 1 ms + 5%, or its missed intervals cover the
/// difference; the nine spans' time off CPU within 50 us + 0.5%.
#[test]
fn btf_fault_heavy_spans_are_the_kernel_s() {
    sched::fault_heavy_spans_are_the_kernel_s(
        SchedulerAccount::new()
            .mechanism(SchedMechanism::BtfTracepoints)
            .with_causes(),
        sched::ReadTarget::FileIn(&sched::disk_dir(false)),
        9,
        228,
        (1_000, 5),
        (50, 5),
    );
}

#[test]
fn classic_fault_heavy_spans_are_the_kernel_s() {
    sched::fault_heavy_spans_are_the_kernel_s(
        SchedulerAccount::new()
            .mechanism(SchedMechanism::Tracepoints)
            .with_causes(),
        sched::ReadTarget::FileIn(&sched::disk_dir(false)),
        9,
        228,
        (1_000, 5),
        (50, 5),
    );
}

/// Five threads on two CPUs, preempted by each other's wake-ups and moved
/// between the CPUs: each span's run-queue time is schedstat's within
/// 0.2 ms + 1%.
#[test]
fn btf_preempted_threads_moving_between_cpus_queue_as_the_kernel_says() {
    sched::preempted_threads_moving_between_cpus_queue_as_the_kernel_says(
        SchedulerAccount::new().mechanism(SchedMechanism::BtfTracepoints),
        4,
        20,
        (200, 1, 1),
        (200, 1),
    );
}

#[test]
fn classic_preempted_threads_moving_between_cpus_queue_as_the_kernel_says() {
    sched::preempted_threads_moving_between_cpus_queue_as_the_kernel_says(
        SchedulerAccount::new().mechanism(SchedMechanism::Tracepoints),
        4,
        20,
        (200, 1, 1),
        (200, 1),
    );
}
