// SPDX-License-Identifier: Apache-2.0 OR MIT
//! kspan against bpftrace, call by call, on every kernel of the matrix (run
//! in the VM by `cargo xtask test`; Debian 11's 5.10 among them, where
//! kspan loads its programs built for older kernels): one thread reads a
//! file with buffers of varied sizes, then a closed descriptor, traced by
//! a kernel function probe (`vfs_read`, `auto`) and a syscall source
//! (`read`) while bpftrace prints every return of the same function and
//! system call on that thread. The (size asked, result) pairs of each
//! must be the same, exactly (as sets with their counts: bpftrace's output
//! comes through per-CPU buffers, in order within a CPU only).
//!
//! bpftrace is the guest's (the host's root: Debian 12's), or the one
//! `KSPAN_BPFTRACE` names (`cargo xtask` sets it to the kernel's own
//! Debian release's where it has one).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kspan_tests::span_attr;

#[kspan::kernel_span("vfs_read")]
fn vfs_read(count: usize, ret: isize) {}

#[kspan::kernel_span(syscall = "read")]
fn read(fd: u32, count: usize, ret: i64) {}

/// The sizes asked for, in turn, until the file's end.
const SIZES: [usize; 7] = [1, 7, 64, 4096, 10_000, 65_536, 3];
const FILE_BYTES: usize = 300_000;

/// bpftrace printing, for thread `tid`, each `vfs_read` return (`v COUNT
/// RET`) and each `read` system call's (`s COUNT RET`). The size asked of
/// the system call is `ksys_read`'s argument: bpftrace 0.17 cannot read
/// `sys_enter_read`'s `size_t` on 5.10 (no type for it), and kprobes and
/// kretprobes, not kfunc, so that every bpftrace of the matrix runs it.
fn start_bpftrace(tid: i64) -> (Child, BufReader<std::process::ChildStdout>) {
    let bpftrace = std::env::var("KSPAN_BPFTRACE").unwrap_or_else(|_| "bpftrace".to_owned());
    let script = format!(
        "BEGIN {{ printf(\"ready\\n\"); }}
         kprobe:vfs_read /tid == {tid}/ {{ @v[tid] = arg2; }}
         kretprobe:vfs_read /tid == {tid}/ {{ printf(\"v %d %d\\n\", @v[tid], retval); delete(@v[tid]); }}
         kprobe:ksys_read /tid == {tid}/ {{ @s[tid] = arg2; }}
         tracepoint:syscalls:sys_exit_read /tid == {tid}/ {{ printf(\"s %d %d\\n\", @s[tid], args->ret); delete(@s[tid]); }}"
    );
    let mut child = Command::new("sh")
        .arg("-c")
        // Line-buffered: each return is read as it comes.
        .arg(format!(
            "exec {bpftrace} -B line -e \"$0\"",
            bpftrace = bpftrace
        ))
        .arg(&script)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {bpftrace}: {e}"));
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    // BEGIN runs once every probe is attached ("Attaching N probes" comes
    // before).
    let started = Instant::now();
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).expect("bpftrace's output");
        assert!(n > 0, "bpftrace ended before attaching");
        if line.trim() == "ready" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "bpftrace never attached"
        );
    }
    (child, out)
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines or kprobes, tracepoints and bpftrace; run by `cargo xtask test` in the VM"]
async fn every_read_is_the_one_bpftrace_saw() {
    let bpftrace = std::env::var("KSPAN_BPFTRACE").unwrap_or_else(|_| "bpftrace".to_owned());
    let found = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {bpftrace}"))
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        // The arm64 guest's root has no bpftrace unless the VM is started
        // `--with-bpftrace` (the bench's); said, never silent.
        kspan_tests::skipped(
            "every_read_is_the_one_bpftrace_saw",
            &format!("no `{bpftrace}` in this guest's root to compare with"),
        );
        return;
    }
    let path = std::env::temp_dir().join(format!("kspan-differential-{}", std::process::id()));
    std::fs::File::create(&path)
        .unwrap()
        .write_all(&vec![b'd'; FILE_BYTES])
        .unwrap();
    let (provider, exporter) = kspan_tests::in_memory_provider();
    let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probes([&vfs_read, &read])
        .start()
        .unwrap_or_else(|e| panic!("vfs_read and the read system call: {e}"));
    // A thread of its own, which reads nothing but the file once both
    // tracers are attached (kspan's start reads files on its caller's).
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let file_path = path.clone();
    let reader = std::thread::spawn(move || {
        tid_tx.send(kspan_tests::gettid()).unwrap();
        go_rx.recv().unwrap();
        let mut asked = Vec::new();
        let mut file = std::fs::File::open(&file_path).unwrap();
        let mut buf = vec![0u8; 65_536];
        for size in SIZES.iter().cycle() {
            asked.push(*size);
            if file.read(&mut buf[..*size]).unwrap() == 0 {
                break;
            }
        }
        // A closed descriptor: the system call fails (EBADF) before any
        // vfs_read.
        // SAFETY: reads into a live buffer of its length; the descriptor
        // is not open.
        let ret = unsafe { libc::read(9999, buf.as_mut_ptr().cast(), 16) };
        assert_eq!(ret, -1);
        asked
    });
    let tid = tid_rx.recv().unwrap();
    let (mut bpftrace, out) = start_bpftrace(tid);
    go_tx.send(()).unwrap();
    let asked = reader.join().expect("the reader thread");
    let stats = kspan.shutdown().await.expect("kspan shuts down");
    assert_eq!(stats.lost(), 0, "{stats:?}");
    std::fs::remove_file(&path).unwrap();
    let spans: Vec<_> = exporter
        .get_finished_spans()
        .expect("the in-memory exporter keeps spans")
        .into_iter()
        .filter(|s| span_attr(s, "kspan.tid") == Some(tid.into()))
        .collect();

    // bpftrace prints what its perf buffers hold as it polls them: read
    // until it has printed as many returns as the thread made (the file's
    // reads, and the failed one for the system call), or 60 s.
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in out.lines() {
            if lines_tx.send(line.expect("bpftrace's output")).is_err() {
                break;
            }
        }
    });
    let expected = 2 * asked.len() + 1;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut rest = String::new();
    let mut returns = 0;
    while returns < expected {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines_rx.recv_timeout(left) {
            Ok(line) => {
                returns += usize::from(line.starts_with("v ") || line.starts_with("s "));
                rest.push_str(&line);
                rest.push('\n');
            }
            Err(_) => break,
        }
    }
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(bpftrace.id() as i32, libc::SIGINT) };
    bpftrace.wait().expect("bpftrace ends");
    let seen = |kind: &str| -> Vec<(i64, i64)> {
        rest.lines()
            .filter_map(|l| l.strip_prefix(kind)?.strip_prefix(' '))
            .map(|l| {
                let mut numbers = l.split(' ').map(|n| n.parse::<i64>().unwrap());
                (numbers.next().unwrap(), numbers.next().unwrap())
            })
            .collect()
    };
    let traced = |name: &str| -> Vec<(i64, i64)> {
        spans
            .iter()
            .filter(|s| s.name == name)
            .map(|s| {
                let int = |key: &str| match span_attr(s, key) {
                    Some(opentelemetry::Value::I64(n)) => n,
                    other => panic!("{name} span's {key}: {other:?}"),
                };
                (int("kernel.arg.count"), int("kernel.return_value"))
            })
            .collect()
    };
    let sorted = |mut pairs: Vec<(i64, i64)>| {
        pairs.sort_unstable();
        pairs
    };
    let (vfs_bt, sys_bt) = (sorted(seen("v")), sorted(seen("s")));
    let (vfs_kspan, sys_kspan) = (sorted(traced("vfs_read")), sorted(traced("read")));
    eprintln!(
        "{} reads asked; vfs_read: bpftrace {}, kspan {}; read(2): bpftrace {}, kspan {}",
        asked.len(),
        vfs_bt.len(),
        vfs_kspan.len(),
        sys_bt.len(),
        sys_kspan.len()
    );
    // Every read of the file, and the failed one, as the program asked.
    assert_eq!(sys_bt.len(), asked.len() + 1, "{sys_bt:?}");
    assert!(sys_bt.contains(&(16, -(libc::EBADF as i64))), "{sys_bt:?}");
    let mut asked_too: Vec<i64> = asked.iter().map(|&n| n as i64).chain([16]).collect();
    asked_too.sort_unstable();
    assert_eq!(
        sys_bt.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        asked_too
    );
    assert_eq!(
        sys_bt.iter().map(|(_, r)| (*r).max(0)).sum::<i64>(),
        FILE_BYTES as i64
    );
    assert_eq!(
        sys_kspan, sys_bt,
        "the read system call: kspan's spans against bpftrace"
    );
    assert_eq!(vfs_bt.len(), asked.len(), "{vfs_bt:?}");
    assert_eq!(
        vfs_kspan, vfs_bt,
        "vfs_read: kspan's spans against bpftrace"
    );
}
