// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Error paths the host kernel produces for real. The host kernel refuses BPF
//! trampolines with EPERM and has no kprobes (see KERNEL-LAB.md), so on the
//! host the quickstart (`vfs_read`, mode `auto`) must stop with an error
//! naming each mechanism's refusal and what works instead, and not panic.

use kspan_tests::example;

fn run(cmd: &mut std::process::Command) -> (i32, String) {
    let out = cmd.output().expect("run the example");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_kernel_that_traces_no_function_is_a_clear_error() {
    let (code, stderr) = run(std::process::Command::new(example("quickstart"))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"));
    assert_eq!(code, 1, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains("cannot trace `vfs_read` on this kernel"),
        "names the function: {stderr}"
    );
    assert!(
        stderr.contains("[fexit] unavailable: this kernel refuses BPF trampolines")
            && stderr.contains("(EPERM)"),
        "names each mechanism's refusal and the errno: {stderr}"
    );
    assert!(
        stderr.contains("syscall sources work here"),
        "says what works instead: {stderr}"
    );
}

#[test]
fn missing_privileges_are_named() {
    // setpriv (util-linux) drops to nobody, which clears every capability.
    let (code, stderr) = run(std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(example("quickstart"))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"));
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(
            "missing privileges: this process lacks CAP_BPF and CAP_PERFMON (it holds none"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("CAP_PERFMON: BPF trampolines or kprobes (auto `vfs_read`) need it"),
        "names the mechanism and the probe: {stderr}"
    );
    assert!(
        stderr.contains("`setcap cap_bpf,cap_perfmon+ep <binary>`"),
        "{stderr}"
    );
}

#[test]
fn bad_arguments_are_named() {
    let (code, stderr) =
        run(std::process::Command::new(example("quickstart")).args(["/etc/hostname", "many"]));
    assert_eq!(code, 1);
    assert!(
        stderr.contains("TIMES: `many` is not a whole number"),
        "{stderr}"
    );
}
