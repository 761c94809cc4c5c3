// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Least privilege on real kernels (run in the VM by `cargo xtask test`, on
//! Debian 12's 6.1 and Debian 13's 6.12): the examples as `nobody` with file
//! capabilities only, set by `setcap` on a copy in the guest's /tmp (a
//! tmpfs, which keeps `security.capability`) exactly as README documents.
//!
//! Measured here, and asserted: fexit needs CAP_BPF + CAP_PERFMON and
//! nothing else (the BTF is world-readable, BPF memory is charged to the
//! cgroup, not RLIMIT_MEMLOCK). Kprobes and syscall sources open perf
//! events, which Debian's kernels keep from CAP_PERFMON at their default
//! `kernel.perf_event_paranoid = 3` (CAP_SYS_ADMIN only); at 2 CAP_PERFMON
//! opens them. kprobe.multi (6.12) opens no perf event. Before 5.11
//! (Debian 11's 5.10) BPF memory is charged to RLIMIT_MEMLOCK: below what
//! kspan's maps need its error names the limit and the fix (asserted at
//! 1 MiB), and the runs here raise it (`prlimit`) before dropping to
//! nobody, as that error asks.

use std::path::{Path, PathBuf};

use kspan_tests::{copy_with_file_caps, example, run_via_with_receiver, ReceivedSpan, AS_NOBODY};

/// `AS_NOBODY`, with RLIMIT_MEMLOCK raised first where the kernel charges
/// BPF maps to it (before 5.11), as kspan's error there asks.
fn as_nobody_cmd() -> Vec<&'static str> {
    let mut cmd = Vec::new();
    if !kspan::KernelCapabilities::get()
        .memcg_accounting
        .is_available()
    {
        cmd.extend(["prlimit", "--memlock=unlimited", "--"]);
    }
    cmd.extend(AS_NOBODY);
    cmd
}

const FILE_SIZE: usize = 10_000;
const BUF: usize = 4096;
const TIMES: usize = 3;

/// A directory of this test's own in /tmp, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        Scratch(std::env::temp_dir().join(format!("kspan-{name}-{}", std::process::id())))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Sets `kernel.perf_event_paranoid` (the test runs as root in the guest)
/// and puts the old value back when dropped.
struct Paranoid(String);

const PARANOID: &str = "/proc/sys/kernel/perf_event_paranoid";

impl Paranoid {
    fn set(value: i32) -> Paranoid {
        let old = std::fs::read_to_string(PARANOID).expect("read perf_event_paranoid");
        std::fs::write(PARANOID, value.to_string()).expect("write perf_event_paranoid");
        Paranoid(old)
    }
}

impl Drop for Paranoid {
    fn drop(&mut self) {
        let _ = std::fs::write(PARANOID, self.0.trim());
    }
}

/// Runs `program args` as nobody with no OTLP collector (the failing runs
/// stop before exporting): exit code and stderr.
fn as_nobody(program: &Path, args: &[&str]) -> (Option<i32>, String) {
    let nobody = as_nobody_cmd();
    let out = std::process::Command::new(nobody[0])
        .args(&nobody[1..])
        .arg(program)
        .args(args)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
        .output()
        .expect("setpriv runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a kernel with BPF trampolines (fentry/fexit); run by `cargo xtask test` in the VM"]
async fn quickstart_as_nobody_with_file_capabilities_exports_vfs_read_spans() {
    let scratch = Scratch::new("priv-fexit");
    let program = copy_with_file_caps(&example("quickstart"), &scratch.0, "cap_bpf,cap_perfmon+ep");
    let file = scratch.0.join("data.bin");
    std::fs::write(
        &file,
        (0..FILE_SIZE).map(|i| (i % 251) as u8).collect::<Vec<u8>>(),
    )
    .unwrap();
    if !kspan::KernelCapabilities::get()
        .memcg_accounting
        .is_available()
    {
        // A limit below what the maps need: refused, the error says the
        // fix.
        let out = std::process::Command::new("prlimit")
            .arg("--memlock=1048576")
            .arg("--")
            .args(AS_NOBODY)
            .arg(&program)
            .arg(&file)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
            .output()
            .expect("setpriv runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && stderr.contains("charges BPF maps to RLIMIT_MEMLOCK")
                && stderr.contains("LimitMEMLOCK=infinity"),
            "quickstart as nobody, RLIMIT_MEMLOCK 1 MiB: {}\n{stderr}",
            out.status
        );
    }
    let run = run_via_with_receiver(
        &as_nobody_cmd(),
        &program,
        &[
            file.to_str().unwrap(),
            &TIMES.to_string(),
            "--buf",
            &BUF.to_string(),
        ],
        "kspan-privileges-test",
    )
    .await;
    assert!(
        run.output.status.success(),
        "quickstart as nobody with `setcap cap_bpf,cap_perfmon+ep`: {}\nstdout:\n{}\nstderr:\n{}",
        run.output.status,
        run.stdout(),
        run.stderr()
    );
    let app: Vec<&ReceivedSpan> = run.spans.iter().filter(|s| s.name == "read_file").collect();
    assert_eq!(app.len(), 1, "one application span: {:#?}", run.spans);
    let app = app[0];
    let pid = i64::from(run.pid);
    let mut reads: Vec<&ReceivedSpan> = run
        .spans
        .iter()
        .filter(|s| s.name == "vfs_read" && s.int("kspan.tid") == Some(pid))
        .filter(|s| s.start_ns >= app.start_ns && s.end_ns <= app.end_ns)
        .collect();
    reads.sort_by_key(|s| s.start_ns);
    // Each pass over the file: full buffers, the rest, then 0 at its end.
    let once: Vec<i64> = [4096, 4096, 1808, 0].into();
    let expected: Vec<i64> = (0..TIMES).flat_map(|_| once.clone()).collect();
    let rets: Vec<i64> = reads
        .iter()
        .map(|s| s.int("kernel.return_value").unwrap())
        .collect();
    assert_eq!(rets, expected, "every read's return value, in order");
    for s in &reads {
        assert_eq!(
            (&s.parent_span_id, &s.trace_id),
            (&app.span_id, &app.trace_id),
            "a child of the application span: {s:?}"
        );
        assert_eq!(s.int("kernel.arg.count"), Some(BUF as i64), "{s:?}");
        assert!(s.start_ns < s.end_ns, "start before end: {s:?}");
        assert_eq!(s.service_name.as_deref(), Some("kspan-privileges-test"));
    }
    kspan_tests::assert_all_acknowledged(&run.stdout());
}

#[test]
#[ignore = "needs a kernel with BPF trampolines (fentry/fexit); run by `cargo xtask test` in the VM"]
fn a_probe_without_one_of_its_capabilities_is_told_which() {
    let scratch = Scratch::new("priv-auto-lack");
    for (held, missing) in [("cap_bpf", "CAP_PERFMON"), ("cap_perfmon", "CAP_BPF")] {
        let program =
            copy_with_file_caps(&example("quickstart"), &scratch.0, &format!("{held}+ep"));
        let (code, stderr) = as_nobody(&program, &["/etc/os-release", "1"]);
        assert_eq!(code, Some(1), "{stderr}");
        assert_eq!(
            kspan_tests::missing_capabilities(&stderr),
            missing,
            "exactly the one missing: {stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "{missing}: BPF trampolines or kprobes (auto `vfs_read`) need it"
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains("`setcap cap_bpf,cap_perfmon+ep <binary>`"),
            "{stderr}"
        );
    }
}

/// A pattern as `nobody` with the capabilities README lists for one. On
/// 7.2, where fsession.multi would let kspan ask the kernel's symbol table
/// instead of reading `available_filter_functions`, the table's addresses
/// are kept from a process without CAP_SYSLOG at Debian's
/// `perf_event_paranoid = 3` (EPERM): kspan reads the list, which says why
/// `vfs_caches_init` is left out; as root (`vm_many`) the table says it.
#[test]
#[ignore = "needs a kernel with BPF trampolines (fentry/fexit); run by `cargo xtask test` in the VM"]
fn a_pattern_as_nobody_reads_the_traceable_list_when_the_symbol_table_is_kept_from_it() {
    let scratch = Scratch::new("priv-pattern");
    let program = copy_with_file_caps(
        &example("attach_many"),
        &scratch.0,
        "cap_bpf,cap_perfmon,cap_dac_read_search+ep",
    );
    let nobody = as_nobody_cmd();
    let out = std::process::Command::new(nobody[0])
        .args(&nobody[1..])
        .arg(&program)
        .arg("fexit")
        .output()
        .expect("setpriv runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("attached and detached"),
        "attach_many fexit as nobody: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        stderr.contains(
            "skipped vfs_caches_init: not traceable: absent from available_filter_functions"
        ),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a kernel with kprobes (CONFIG_KPROBES); run by `cargo xtask test` in the VM"]
async fn kprobes_and_syscall_sources_need_perf_events_that_debian_keeps_from_perfmon() {
    let scratch = Scratch::new("priv-perf");
    let read_loop = copy_with_file_caps(
        &example("read_loop"),
        &scratch.0.join("k"),
        "cap_bpf,cap_perfmon+ep",
    );
    let syscalls = copy_with_file_caps(
        &example("syscalls"),
        &scratch.0.join("s"),
        "cap_bpf,cap_perfmon,cap_dac_read_search+ep",
    );
    let multi = kspan::KernelCapabilities::get().kprobe_multi.is_available();
    {
        let _paranoid = Paranoid::set(3);
        let (code, stderr) = as_nobody(&read_loop, &["kretprobe", "100"]);
        if multi {
            // kprobe.multi links (6.12): no perf event to refuse.
            assert_eq!(code, Some(0), "kretprobe through kprobe.multi: {stderr}");
        } else {
            assert_eq!(code, Some(1), "{stderr}");
            assert_eq!(
                kspan_tests::missing_capabilities(&stderr),
                "CAP_SYS_ADMIN",
                "{stderr}"
            );
            assert!(
                stderr.contains(
                    "CAP_SYS_ADMIN: kprobes (kretprobe `vfs_read`) need it to open perf events, \
                     which this kernel refuses to CAP_PERFMON at kernel.perf_event_paranoid = 3"
                ),
                "{stderr}"
            );
            assert!(
                stderr.contains("`sysctl -w kernel.perf_event_paranoid=2`"),
                "{stderr}"
            );
        }
        let (code, stderr) = as_nobody(&syscalls, &["/etc/os-release", "1"]);
        assert_eq!(code, Some(1), "{stderr}");
        assert_eq!(
            kspan_tests::missing_capabilities(&stderr),
            "CAP_SYS_ADMIN",
            "{stderr}"
        );
        assert!(
            stderr
                .contains("CAP_SYS_ADMIN: syscall sources (`openat`) need it to open perf events"),
            "{stderr}"
        );
        assert!(
            stderr.contains("`sysctl -w kernel.perf_event_paranoid=2`"),
            "{stderr}"
        );
    }
    // The fix the errors give: CAP_PERFMON then opens perf events.
    let _paranoid = Paranoid::set(2);
    let (code, stderr) = as_nobody(&read_loop, &["kretprobe", "100"]);
    assert_eq!(
        code,
        Some(0),
        "kretprobe at perf_event_paranoid 2: {stderr}"
    );
    let file = scratch.0.join("data.txt");
    std::fs::write(&file, vec![b'q'; 3000]).unwrap();
    let run = run_via_with_receiver(
        &as_nobody_cmd(),
        &syscalls,
        &[file.to_str().unwrap(), "1", "--buf", "2048"],
        "kspan-privileges-test",
    )
    .await;
    assert!(
        run.output.status.success(),
        "syscall sources at perf_event_paranoid 2: {}\n{}",
        run.stdout(),
        run.stderr()
    );
    let pid = i64::from(run.pid);
    let mut rets: Vec<i64> = run
        .spans
        .iter()
        .filter(|s| s.name == "read" && s.int("kernel.arg.count") == Some(2048))
        .filter(|s| s.int("kspan.tid") == Some(pid))
        .map(|s| s.int("kernel.return_value").unwrap())
        .collect();
    rets.sort_unstable();
    assert_eq!(rets, [0, 952, 2048], "{:#?}", run.spans);
}
