// SPDX-License-Identifier: Apache-2.0 OR MIT
//! An unprivileged process is told it lacks privileges, before kspan reads
//! tracefs (root's only) or loads anything: run as `nobody` with no
//! capabilities through `setpriv`.

use std::process::Command;

#[test]
fn an_unprivileged_process_is_told_which_capabilities_it_lacks() {
    let example = kspan_tests::example("syscalls");
    let output = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ])
        .arg(&example)
        .output()
        .expect("setpriv (util-linux) runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("missing privileges")
            && stderr.contains("CAP_BPF and CAP_PERFMON")
            && stderr.contains("none of them"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("tracefs ") || stderr.contains("cap_dac_read_search"),
        "the privileges are named, not tracefs: {stderr}"
    );
}
