// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Syscall sources on the host kernel, which refuses trampolines and has no
//! kprobes but does run tracepoint programs: the whole pipeline for real,
//! in-process and through the `syscalls` example and a real OTLP receiver.

use kspan_tests::{gettid, hex, span_attr};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

use kspan_tests::{example, run_with_receiver};
use opentelemetry::trace::Status;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData};

#[kspan::kernel_span(syscall = "openat")]
fn openat(dfd: i32, #[capture(user)] filename: &str, flags: i32, ret: i64) {}

#[kspan::kernel_span(syscall = "read")]
fn read(fd: u32, count: usize, #[capture(user, len = "ret", max = 32)] buf: &[u8], ret: i64) {}

#[kspan::kernel_span(syscall = "opennat")]
fn typo(filename: u64) {}

#[kspan::kernel_span(syscall = "openat")]
fn wrong_param(path: u64) {}

/// A process runs one kspan runtime at a time: the tests that start one
/// take turns.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "current_thread")]
async fn openat_and_read_spans_carry_what_the_test_did() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let dir = std::env::temp_dir().join(format!("kspan-sys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let present = dir.join("present.txt");
    let content: Vec<u8> = (0..100u8).map(|i| b'a' + i % 26).collect();
    std::fs::write(&present, &content).unwrap();
    let missing = dir.join("missing.txt");

    let (provider, exporter) = kspan_tests::in_memory_provider();
    let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&openat)
        .probe(&read)
        .start()
        .expect("syscall sources work on the host kernel");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(0o400000) // O_NOFOLLOW
        .open(&present)
        .unwrap();
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    loop {
        let n = f.read(&mut buf).unwrap();
        got.push(n);
        if n == 0 {
            break;
        }
    }
    assert_eq!(got, [64, 36, 0]);
    assert!(std::fs::File::open(&missing).is_err());
    let stats = kspan.shutdown().await.unwrap();
    assert_eq!(stats.lost(), 0, "{stats:?}");

    let tid = gettid();
    let spans: Vec<SpanData> = exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| span_attr(s, "kspan.tid") == Some(tid.into()))
        .collect();
    let opened: Vec<&SpanData> = spans
        .iter()
        .filter(|s| {
            s.name == "openat"
                && span_attr(s, "kernel.arg.filename") == Some(present.display().to_string().into())
        })
        .collect();
    assert_eq!(opened.len(), 1, "{spans:#?}");
    // The conventions' names: the function, and no `thread.id` (the
    // runtime's managed id, not the kernel's).
    assert_eq!(
        span_attr(opened[0], "code.function.name"),
        Some("openat".into()),
        "{:?}",
        opened[0].attributes
    );
    assert_eq!(span_attr(opened[0], "thread.id"), None);
    let fd = match span_attr(opened[0], "kernel.return_value") {
        Some(opentelemetry::Value::I64(fd)) => fd,
        other => panic!("ret: {other:?}"),
    };
    assert!(fd >= 3);
    assert_eq!(
        span_attr(opened[0], "kernel.arg.dfd"),
        Some((-100i64).into()),
        "AT_FDCWD"
    );
    let flags = match span_attr(opened[0], "kernel.arg.flags") {
        Some(opentelemetry::Value::I64(v)) => v,
        other => panic!("flags: {other:?}"),
    };
    assert_eq!(
        flags,
        0o400000 | 0o2000000,
        "O_NOFOLLOW | O_CLOEXEC as passed: {flags:#o}"
    );
    assert!(opened[0].start_time < opened[0].end_time);

    let failed: Vec<&SpanData> = spans
        .iter()
        .filter(|s| {
            span_attr(s, "kernel.arg.filename") == Some(missing.display().to_string().into())
        })
        .collect();
    assert_eq!(failed.len(), 1, "{spans:#?}");
    assert_eq!(failed[0].status, Status::error("ENOENT"));
    assert_eq!(span_attr(failed[0], "error.type"), Some("ENOENT".into()));

    let reads: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name == "read" && span_attr(s, "kernel.arg.fd") == Some(fd.into()))
        .collect();
    let rets: Vec<_> = reads
        .iter()
        .map(|s| span_attr(s, "kernel.return_value"))
        .collect();
    assert_eq!(
        rets,
        [Some(64i64.into()), Some(36i64.into()), Some(0i64.into())],
        "{spans:#?}"
    );
    assert_eq!(
        span_attr(reads[0], "kernel.arg.buf"),
        Some(hex(&content[..32]).into())
    );
    assert_eq!(
        span_attr(reads[0], "kernel.arg.buf.truncated"),
        Some(true.into())
    );
    assert_eq!(
        span_attr(reads[1], "kernel.arg.buf"),
        Some(hex(&content[64..96]).into())
    );
    for r in &reads {
        assert_eq!(span_attr(r, "kernel.arg.count"), Some(64i64.into()));
    }
}

#[tokio::test]
async fn unknown_syscalls_and_parameters_are_named() {
    let provider = SdkTracerProvider::builder()
        .with_id_generator(kspan::KernelSpanIds::default())
        .build();
    let err = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&typo)
        .start()
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown system call `opennat`"), "{err}");
    assert!(err.contains("did you mean `openat`"), "{err}");
    let err = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&wrong_param)
        .start()
        .unwrap_err()
        .to_string();
    assert!(err.contains("`openat` has no parameter `path`"), "{err}");
    assert!(err.contains("`filename: const char *`"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_syscalls_example_exports_over_otlp_on_the_host() {
    let dir = std::env::temp_dir().join(format!("kspan-sysex-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("data.txt");
    std::fs::write(&file, vec![b's'; 5000]).unwrap();
    let run = run_with_receiver(
        &example("syscalls"),
        &[file.to_str().unwrap(), "2", "--buf", "2048"],
        "kspan-syscalls-test",
    )
    .await;
    assert!(
        run.output.status.success(),
        "{}\n{}",
        run.stdout(),
        run.stderr()
    );
    let pid = i64::from(run.pid);
    let app: Vec<_> = run.spans.iter().filter(|s| s.name == "read_file").collect();
    assert_eq!(app.len(), 1);
    let app = app[0];
    // The reads were made inside the application span: the BPF programs read
    // it from the thread context the example publishes (OTEP 4947).
    let reads: Vec<_> = run
        .spans
        .iter()
        .filter(|s| s.name == "read" && s.int("kernel.arg.count") == Some(2048))
        .filter(|s| s.int("kspan.tid") == Some(pid))
        .collect();
    assert!(!reads.is_empty());
    for r in &reads {
        assert_eq!(
            (&r.parent_span_id, &r.trace_id),
            (&app.span_id, &app.trace_id),
            "a child of the application span: {r:?}"
        );
        assert!(
            app.start_ns <= r.start_ns && r.end_ns <= app.end_ns,
            "{r:?}"
        );
    }
    let mut rets: Vec<i64> = run
        .spans
        .iter()
        .filter(|s| s.name == "read" && s.int("kernel.arg.count") == Some(2048))
        .filter(|s| s.int("kspan.tid") == Some(pid))
        .map(|s| s.int("kernel.return_value").unwrap())
        .collect();
    rets.sort_unstable();
    assert_eq!(
        rets,
        [0, 0, 904, 904, 2048, 2048, 2048, 2048],
        "{:#?}",
        run.spans
    );
    let opens = run
        .spans
        .iter()
        .filter(|s| s.name == "openat" && s.str("kernel.arg.filename") == file.to_str())
        .count();
    assert_eq!(opens, 2);
    for s in run.spans.iter().filter(|s| s.scope == "kspan") {
        assert_eq!(
            s.int("process.pid"),
            None,
            "the application's own process is its resource's business: {s:?}"
        );
        assert_eq!(s.service_name.as_deref(), Some("kspan-syscalls-test"));
    }
}

#[test]
fn the_examples_export_the_thread_context_slot() {
    // What other OTEP 4947 readers look for: a TLS symbol in .dynsym.
    let out = std::process::Command::new("readelf")
        .args(["--dyn-syms", "--wide"])
        .arg(example("quickstart"))
        .output()
        .expect("readelf (binutils) runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.ends_with(" otel_thread_ctx_v1"))
        .unwrap_or_else(|| panic!("otel_thread_ctx_v1 in .dynsym:\n{text}"));
    assert!(line.contains(" TLS "), "{line}");
    assert!(line.contains(" GLOBAL "), "{line}");
}

#[tokio::test(flavor = "current_thread")]
async fn all_processes_spans_name_the_process_that_made_the_call() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let dir = std::env::temp_dir().join(format!("kspan-sysall-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("child.txt");
    std::fs::write(&file, b"read by another process").unwrap();

    let (provider, exporter) = kspan_tests::in_memory_provider();
    let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&openat)
        .trace_all_processes(true)
        .start()
        .expect("syscall sources work on the host kernel");
    let child = std::process::Command::new("cat")
        .arg(&file)
        .output()
        .expect("cat runs");
    assert!(child.status.success());
    let mut mine = std::fs::File::open(&file).unwrap();
    let mut text = String::new();
    mine.read_to_string(&mut text).unwrap();
    let stats = kspan.shutdown().await.unwrap();
    assert_eq!(stats.lost(), 0, "{stats:?}");

    let opens: Vec<SpanData> = exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| {
            s.name == "openat"
                && span_attr(s, "kernel.arg.filename") == Some(file.display().to_string().into())
        })
        .collect();
    let pids: Vec<Option<opentelemetry::Value>> =
        opens.iter().map(|s| span_attr(s, "process.pid")).collect();
    assert_eq!(opens.len(), 2, "cat's open and this process's: {opens:#?}");
    assert!(
        pids.contains(&Some(i64::from(std::process::id()).into())),
        "this process's open names it: {pids:?}"
    );
    let other = opens
        .iter()
        .find(|s| span_attr(s, "kspan.tid") != Some(gettid().into()))
        .expect("cat's open");
    let Some(opentelemetry::Value::I64(cat)) = span_attr(other, "process.pid") else {
        panic!("cat's span names its process: {other:?}");
    };
    assert_ne!(cat, i64::from(std::process::id()));
    assert_eq!(
        span_attr(other, "kspan.tid"),
        Some(cat.into()),
        "cat is single-threaded: its thread is its process"
    );
}
