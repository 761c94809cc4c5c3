// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Least privilege for syscall sources, on the host kernel (which runs
//! them): the `syscalls` example as `nobody` (through `setpriv`) with exactly
//! the capabilities README documents gets its spans; with any one of them
//! missing, it stops before reading tracefs or loading anything, with an
//! error naming exactly that capability and the mechanism that needs it.
//! (Trampolines and kprobes, refused by this kernel, are tested the same way
//! in the VM: `vm_privileges`.)

use std::process::Command;

use kspan_tests::{copy_with_file_caps, example, run_via_with_receiver, AS_NOBODY};

/// The documented set for syscall sources, in `setcap`'s words (README).
const SYSCALL_SOURCES_SETCAP: &str = "cap_bpf,cap_perfmon,cap_dac_read_search+ep";

/// Runs the `syscalls` example as `nobody` with the ambient capabilities
/// `caps` (`setpriv`'s names, `bpf,perfmon`; empty for none); returns the
/// exit code and stderr.
fn syscalls_as_nobody_with(caps: &str) -> (Option<i32>, String) {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
    if caps.is_empty() {
        cmd.args(["--inh-caps=-all", "--bounding-set=-all"]);
    } else {
        let plus: Vec<String> = caps.split(',').map(|c| format!("+{c}")).collect();
        let plus = plus.join(",");
        // Ambient capabilities survive the exec of a binary without file
        // capabilities; they must be inheritable (and permitted) first.
        cmd.arg(format!("--inh-caps=-all,{plus}"))
            .arg(format!("--ambient-caps={plus}"));
    }
    let output = cmd
        .arg("--")
        .arg(example("syscalls"))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
        .output()
        .expect("setpriv (util-linux) runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn an_unprivileged_process_is_told_every_capability_it_lacks() {
    let (code, stderr) = syscalls_as_nobody_with("");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        kspan_tests::missing_capabilities(&stderr),
        "CAP_BPF, CAP_PERFMON and CAP_DAC_READ_SEARCH",
        "{stderr}"
    );
    assert!(
        stderr.contains("it holds none of the capabilities its probes need"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("is not mounted"),
        "the privileges are named, not tracefs: {stderr}"
    );
    assert!(
        stderr.contains(&format!("`setcap {SYSCALL_SOURCES_SETCAP} <binary>`")),
        "{stderr}"
    );
}

#[test]
fn each_capability_missing_from_the_documented_set_is_named_with_its_mechanism() {
    let set = ["bpf", "perfmon", "dac_read_search"];
    for missing in set {
        let held: Vec<&str> = set.into_iter().filter(|c| *c != missing).collect();
        let (code, stderr) = syscalls_as_nobody_with(&held.join(","));
        let cap = format!("CAP_{}", missing.to_uppercase());
        assert_eq!(code, Some(1), "without {cap}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(
            kspan_tests::missing_capabilities(&stderr),
            cap,
            "exactly the one missing: {stderr}"
        );
        let held_names: Vec<String> = held
            .iter()
            .map(|c| format!("CAP_{}", c.to_uppercase()))
            .collect();
        assert!(
            stderr.contains(&format!("(it has {})", held_names.join(" and "))),
            "{stderr}"
        );
        // The mechanism, and the probe that uses it.
        assert!(
            stderr.contains(&format!("{cap}: syscall sources (`openat`) need it to")),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!("`setcap {SYSCALL_SOURCES_SETCAP} <binary>`")),
            "{stderr}"
        );
        if missing == "dac_read_search" {
            assert!(
                stderr.contains("/sys/kernel/tracing/events/syscalls/sys_enter_openat/format: Permission denied"),
                "names the file it could not read: {stderr}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_documented_file_capabilities_get_syscall_spans_as_nobody() {
    let dir = std::env::temp_dir().join(format!("kspan-priv-{}", std::process::id()));
    let program = copy_with_file_caps(&example("syscalls"), &dir, SYSCALL_SOURCES_SETCAP);
    let file = dir.join("data.txt");
    std::fs::write(&file, vec![b'p'; 5000]).unwrap();
    let run = run_via_with_receiver(
        AS_NOBODY,
        &program,
        &[file.to_str().unwrap(), "2", "--buf", "2048"],
        "kspan-privileges-test",
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        run.output.status.success(),
        "as nobody with `setcap {SYSCALL_SOURCES_SETCAP}`: {}\n{}",
        run.stdout(),
        run.stderr()
    );
    let pid = i64::from(run.pid);
    let app: Vec<_> = run.spans.iter().filter(|s| s.name == "read_file").collect();
    assert_eq!(app.len(), 1, "{:#?}", run.spans);
    let mut rets: Vec<i64> = run
        .spans
        .iter()
        .filter(|s| s.name == "read" && s.int("kernel.arg.count") == Some(2048))
        .filter(|s| s.int("kspan.tid") == Some(pid))
        .map(|s| {
            assert_eq!(
                (&s.parent_span_id, &s.trace_id),
                (&app[0].span_id, &app[0].trace_id),
                "a child of the application span: {s:?}"
            );
            s.int("kernel.return_value").unwrap()
        })
        .collect();
    rets.sort_unstable();
    assert_eq!(
        rets,
        [0, 0, 904, 904, 2048, 2048, 2048, 2048],
        "every read of the file, twice: {:#?}",
        run.spans
    );
    let opens = run
        .spans
        .iter()
        .filter(|s| s.name == "openat" && s.str("kernel.arg.filename") == file.to_str())
        .count();
    assert_eq!(opens, 2, "{:#?}", run.spans);
    kspan_tests::assert_all_acknowledged(&run.stdout());
}

/// With CAP_BPF and CAP_PERFMON alone (no tracefs: BTF tracepoints need
/// none), the scheduler account's causes that need programs of their own
/// (kernel locks, block requests) are read: their tracepoints are found in
/// the kernel's BTF, not in tracefs, which this process cannot read.
#[test]
fn the_causes_need_no_tracefs_with_btf_tracepoints() {
    let output = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg("--inh-caps=-all,+bpf,+perfmon")
        .arg("--ambient-caps=+bpf,+perfmon")
        .arg("--")
        .arg(example("why_it_waited"))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
        .env("KSPAN_LOG", "off")
        .current_dir(std::env::temp_dir())
        .output()
        .expect("setpriv (util-linux) runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    for cause in ["kernel locks", "block requests"] {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(cause))
            .unwrap_or_else(|| panic!("no `{cause}` line: {stdout}\n{stderr}"));
        assert!(
            line.contains("as BTF tracepoints"),
            "{line}\n{stdout}\n{stderr}"
        );
    }
    assert!(
        stdout.contains("kernel locks: mutex 1"),
        "the lock request's contention is read: {stdout}"
    );
}
