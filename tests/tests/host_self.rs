// SPDX-License-Identifier: Apache-2.0 OR MIT
//! kspan never traces itself: the calls of its consumer thread (waiting on
//! the ring buffer), of `stats()` and of `shutdown()` (closing its links,
//! flushing), and those that register each new thread's context record
//! with the kernel, make no kernel spans, with orphans kept (the policy
//! under which they would show). Checked on the host with syscall sources.

use std::io::Read;

use opentelemetry::trace::{TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry_sdk::trace::SpanData;

#[kspan::kernel_span(syscall = "epoll_wait")]
fn epoll_wait(epfd: i32, ret: i64) {}

#[kspan::kernel_span(syscall = "close")]
fn close(fd: u32, ret: i64) {}

#[kspan::kernel_span(syscall = "openat")]
fn openat(dfd: i32, ret: i64) {}

#[kspan::kernel_span(syscall = "read")]
fn read(fd: u32, ret: i64) {}

// What registering a thread's context record with the kernel calls, on
// the thread, while its record is not yet in the map.
#[kspan::kernel_span(syscall = "pidfd_open")]
fn pidfd_open(pid: i32, ret: i64) {}

#[kspan::kernel_span(syscall = "bpf")]
fn bpf(cmd: i32, ret: i64) {}

/// The kernel spans among `spans`.
fn kernel_spans(spans: &[SpanData]) -> Vec<&SpanData> {
    spans
        .iter()
        .filter(|s| s.instrumentation_scope.name() == "kspan")
        .collect()
}

#[test]
fn kspan_s_own_threads_and_calls_make_no_kernel_spans() {
    // No IO driver: the test's own thread never waits in epoll_wait.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (provider, exporter) = kspan_tests::in_memory_provider();
    let tracer = provider.tracer("app");
    let kspan = kspan::Kspan::builder(&provider)
        .probes([&epoll_wait, &close, &openat, &read, &pidfd_open, &bpf])
        .orphans(kspan::Orphans::NewTrace)
        .start()
        .expect("syscall sources start on the host");
    // The host's kernel (6.18) pins registered records, where the threads
    // kspan starts would register theirs through system calls this test
    // traces; but a registration is a map update, during which the kernel
    // skips tracepoint programs, and this kernel may preempt it there.
    let caps = kspan::KernelCapabilities::get();
    if caps.context_records.is_available() {
        let reads = kspan_tests::settled_context_reads(&kspan);
        if caps.preemption.preempts_programs() {
            assert!(
                matches!(&reads, kspan::ThreadContextReads::UserMemory { why }
                    if why.contains("BPF map update") && why.contains("through tracepoints")),
                "{reads:?}"
            );
        } else {
            assert_eq!(reads, kspan::ThreadContextReads::Registered);
        }
    }
    let work = tracer.in_span("work", |cx| {
        for _ in 0..3 {
            let mut text = String::new();
            std::fs::File::open("/proc/self/stat")
                .and_then(|mut f| f.read_to_string(&mut text))
                .expect("reads /proc/self/stat");
        }
        cx.span().span_context().span_id()
    });
    // The consumer waits on its ring buffer (epoll_wait) every 50 ms and
    // reads counters here; its calls and these must not be spans.
    for _ in 0..4 {
        std::thread::sleep(std::time::Duration::from_millis(60));
        kspan.stats().expect("figures");
    }
    let stats = runtime
        .block_on(kspan.shutdown())
        .expect("kspan shuts down");
    let spans = exporter.get_finished_spans().unwrap();
    let kernel = kernel_spans(&spans);
    let strays: Vec<String> = kernel
        .iter()
        .filter(|s| s.parent_span_id != work)
        .map(|s| format!("{} {:?}", s.name, s.attributes))
        .collect();
    assert!(
        strays.is_empty(),
        "kernel spans outside the application's span: {strays:#?}"
    );
    let count = |name: &str| kernel.iter().filter(|s| s.name == name).count();
    assert_eq!(
        (count("openat"), count("close"), count("epoll_wait")),
        (3, 3, 0),
        "{stats:?}"
    );
    assert!(count("read") >= 3, "{stats:?}");
    assert_eq!((count("pidfd_open"), count("bpf")), (0, 0), "{stats:?}");
    // The consumer's waits and the links closed at shutdown were seen, and
    // counted as kspan's own.
    assert!(stats.suppressed >= 4, "{stats:?}");
    assert_eq!(stats.lost(), 0, "{stats:?}");
    assert_eq!(stats.spans_to_pipeline, kernel.len() as u64, "{stats:?}");
}
