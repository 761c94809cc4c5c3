// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The scheduler's account on every kernel of the VM matrix (the cases of
//! `kspan_tests::sched`, as `host_sched` runs them on the host), with
//! wider fixed tolerances: the emulated guest's timers and scheduler run
//! about ten times slower. Run in the VM by `cargo xtask test`.

use kspan::{SchedMechanism, SchedulerAccount};
use kspan_tests::sched;

/// Milliseconds added to each tolerance in the emulated guest.
const VM_SLACK_MS: i64 = 5;

#[test]
#[ignore = "needs root and a kernel with the sched tracepoints; run by `cargo xtask test` in the VM"]
fn btf_tracepoints_figures_equal_the_kernel_s() {
    sched::a_span_s_figures_equal_the_kernel_s_own_accounting(
        SchedulerAccount::new().mechanism(SchedMechanism::BtfTracepoints),
        &sched::disk_dir(true),
        4,
        VM_SLACK_MS,
    );
}

#[test]
#[ignore = "needs root and a kernel with the sched tracepoints; run by `cargo xtask test` in the VM"]
fn classic_tracepoints_figures_equal_the_kernel_s() {
    sched::a_span_s_figures_equal_the_kernel_s_own_accounting(
        SchedulerAccount::new().mechanism(SchedMechanism::Tracepoints),
        &sched::disk_dir(true),
        4,
        VM_SLACK_MS,
    );
}

#[test]
#[ignore = "needs root and a kernel with the sched tracepoints; run by `cargo xtask test` in the VM"]
fn tokio_tasks_each_get_their_own_figures() {
    sched::tokio_tasks_each_get_their_own_figures(SchedulerAccount::new(), VM_SLACK_MS);
}

#[test]
#[ignore = "needs root and a kernel with the sched tracepoints; run by `cargo xtask test` in the VM"]
fn only_this_process_s_spans_are_accounted() {
    sched::only_this_process_s_spans_are_accounted(SchedulerAccount::new());
}

#[test]
#[ignore = "needs root and a kernel with the sched tracepoints; run by `cargo xtask test` in the VM"]
fn under_overload_wait_spans_are_whole_or_counted() {
    sched::under_overload_wait_spans_are_whole_or_counted(SchedulerAccount::new());
}
