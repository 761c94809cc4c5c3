// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Kernel latency histograms, for real: syscall sources on the host kernel
//! (its tracepoints work, see KERNEL-LAB.md), the application's meter
//! provider with the OTLP/gRPC exporter, and a real OTLP receiver. The test
//! makes the kernel do known work and checks what the receiver got: the
//! counts, the bucket each call landed in, the sum, and `error.type`.

use std::time::{Duration, Instant};

use kspan::latency::{bucket_of, ERROR_TYPE};
use kspan_tests::latency::{check_shape, flush_metrics, otlp_meters, point};
use kspan_tests::Receiver;

#[kspan::kernel_span(syscall = "getppid", histogram)]
fn getppid() {}

#[kspan::kernel_span(syscall = "openat", histogram = true)]
fn openat(ret: i64) {}

#[kspan::kernel_span(syscall = "clock_nanosleep", histogram)]
fn clock_nanosleep() {}

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

extern "C" {
    #[link_name = "getppid"]
    fn libc_getppid() -> i32;
    #[link_name = "clock_nanosleep"]
    fn libc_clock_nanosleep(
        clock: i32,
        flags: i32,
        req: *const Timespec,
        rem: *mut Timespec,
    ) -> i32;
}

/// The tests of this file one at a time: each runtime counts the calls of
/// the whole process, the other test's included.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// CLOCK_MONOTONIC.
const MONOTONIC: i32 = 1;

fn getppid_calls(n: u64) {
    for _ in 0..n {
        // SAFETY: getppid has no arguments and cannot fail.
        unsafe { libc_getppid() };
    }
}

/// Sleeps `d` in one clock_nanosleep call; returns how long it took, seen
/// from user space (at least what the kernel measured between the
/// syscall's enter and exit).
fn sleep_once(d: Duration) -> Duration {
    let req = Timespec {
        tv_sec: d.as_secs() as i64,
        tv_nsec: i64::from(d.subsec_nanos()),
    };
    let started = Instant::now();
    // SAFETY: `req` is a valid timespec; no remainder is asked for.
    let rc = unsafe { libc_clock_nanosleep(MONOTONIC, 0, &req, std::ptr::null_mut()) };
    let took = started.elapsed();
    assert_eq!(rc, 0, "clock_nanosleep");
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histograms_reach_a_real_otlp_receiver_with_exact_counts() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let receiver = Receiver::start().await.unwrap();
    let meters = otlp_meters(&receiver.endpoint());
    let (provider, spans) = kspan_tests::in_memory_provider();
    // The default orphan policy: no application span is active, so none of
    // these calls becomes a span; the histograms count them all the same.
    let kspan = kspan::Kspan::builder(&provider)
        .probes([&getppid, &openat, &clock_nanosleep])
        .meter_provider(&meters)
        .start()
        .expect("syscall sources start on the host");

    // 1. K calls, one collection: exactly K (nothing else in this process
    // calls getppid; kspan's own threads are left out by the kernel).
    const K: u64 = 1000;
    getppid_calls(K);
    flush_metrics(&meters).await;
    let first = receiver.latest_histogram("kernel.getppid.duration");
    assert_eq!(first.len(), 1, "successes only: {first:?}");
    let p = point(&first, None).expect("a point without error.type");
    check_shape(p);
    assert_eq!(p.count, K, "{p:?}");

    // 2. More of each kind, then shutdown: the last deltas are recorded by
    // kspan's shutdown and exported by the meter provider's.
    getppid_calls(K);
    const K2: u64 = 7;
    let missing = std::env::temp_dir().join(format!("kspan-hist-missing-{}", std::process::id()));
    for _ in 0..K2 {
        assert!(std::fs::File::open(&missing).is_err());
    }
    let present = std::env::current_exe().unwrap();
    const K3: u64 = 5;
    for _ in 0..K3 {
        std::fs::File::open(&present).unwrap();
    }
    let sleep = Duration::from_millis(20);
    let took: Vec<Duration> = (0..3).map(|_| sleep_once(sleep)).collect();
    let stats = kspan.shutdown().await.expect("kspan shuts down");
    let meters_done = meters.clone();
    tokio::task::spawn_blocking(move || meters_done.shutdown())
        .await
        .unwrap()
        .expect("the meter provider shuts down");
    assert!(
        spans.get_finished_spans().unwrap().is_empty(),
        "orphans are not spans"
    );
    assert!(stats.orphans_dropped >= 2 * K + K2 + K3 + 3, "{stats:?}");

    let ppid = receiver.latest_histogram("kernel.getppid.duration");
    assert_eq!(ppid.len(), 1, "{ppid:?}");
    let p = point(&ppid, None).unwrap();
    check_shape(p);
    assert_eq!(p.count, 2 * K, "cumulative: both batches, once each");

    let opens = receiver.latest_histogram("kernel.openat.duration");
    for p in &opens {
        check_shape(p);
    }
    let enoent = point(&opens, Some("ENOENT")).expect("failed opens: {opens:?}");
    assert_eq!(enoent.count, K2, "{opens:?}");
    let ok = point(&opens, None).expect("successful opens");
    assert!(ok.count >= K3, "{opens:?}");
    assert!(
        opens
            .iter()
            .all(|p| p.str(ERROR_TYPE).is_none() || p.str(ERROR_TYPE) == Some("ENOENT")),
        "no other errno: {opens:?}"
    );

    // The sleeps: each in the bucket of its duration. The kernel measured
    // at least the 20 ms asked for and at most what user space saw.
    let sleeps = receiver.latest_histogram("kernel.clock_nanosleep.duration");
    assert_eq!(sleeps.len(), 1, "{sleeps:?}");
    let p = &sleeps[0];
    check_shape(p);
    assert_eq!(p.count, 3, "{p:?}");
    let longest = took.iter().max().unwrap().as_nanos() as u64;
    let (lowest, highest) = (bucket_of(sleep.as_nanos() as u64), bucket_of(longest));
    assert_eq!(lowest, 25, "20 ms is in (2^24, 2^25] ns");
    let outside: u64 = p
        .bucket_counts
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < lowest || *i > highest)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(outside, 0, "buckets {lowest}..={highest}: {p:?}");
    let sum = p.sum.unwrap();
    let user: u128 = took.iter().map(Duration::as_nanos).sum();
    assert!(
        sum >= 3.0 * sleep.as_nanos() as f64 && sum <= user as f64,
        "sum {sum} ns, user space saw {user} ns"
    );
}

/// A histogram and spans of the same calls: every call is a span and is in
/// the histogram, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_and_histogram_of_the_same_calls() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let receiver = Receiver::start().await.unwrap();
    let meters = otlp_meters(&receiver.endpoint());
    let (provider, spans) = kspan_tests::in_memory_provider();
    let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&getppid)
        .meter_provider(&meters)
        .start()
        .expect("syscall sources start on the host");
    const K: u64 = 200;
    getppid_calls(K);
    let stats = kspan.shutdown().await.expect("kspan shuts down");
    tokio::task::spawn_blocking(move || meters.shutdown())
        .await
        .unwrap()
        .expect("the meter provider shuts down");
    let exported = spans
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| s.name == "getppid")
        .count() as u64;
    assert_eq!(exported, K, "{stats:?}");
    let points = receiver.latest_histogram("kernel.getppid.duration");
    assert_eq!(points.len(), 1, "{points:?}");
    check_shape(&points[0]);
    assert_eq!(points[0].count, K, "{points:?}");
}
