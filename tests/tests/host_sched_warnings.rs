// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What the scheduler account's causes say at start, read through a
//! subscriber that keeps kspan's warnings (one per process: a binary of
//! its own).

use kspan::{SchedMechanism, SchedulerAccount};
use kspan_tests::sched;

/// Classic tracepoints name no block request: said at start.
#[test]
fn classic_a_cause_not_read_is_said_at_start() {
    kspan_tests::warnings::capture();
    sched::a_cause_not_read_is_said_at_start(
        SchedulerAccount::new()
            .mechanism(SchedMechanism::Tracepoints)
            .with_causes(),
        true,
    );
}

/// BTF tracepoints: whatever this kernel does not give is said, and
/// nothing else.
#[test]
fn btf_a_cause_not_read_is_said_at_start() {
    kspan_tests::warnings::capture();
    sched::a_cause_not_read_is_said_at_start(
        SchedulerAccount::new()
            .mechanism(SchedMechanism::BtfTracepoints)
            .with_causes(),
        false,
    );
}
