// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Kernel latency histograms of kernel functions on a real kernel (run in
//! the VM: trampolines and kprobes), to a real OTLP receiver: the counts,
//! the bucket of each call, the sum and `error.type` are what the test made
//! the kernel do.

use std::time::{Duration, Instant};

use kspan::latency::{bucket_of, ERROR_TYPE};
use kspan_tests::latency::{check_shape, flush_metrics, otlp_meters, point};
use kspan_tests::Receiver;

/// The getpgid system call itself (the architecture's syscall entry
/// point, one name per architecture): only this test calls it in this
/// process.
#[kspan::kernel_span("__x64_sys_getpgid" | "__arm64_sys_getpgid", mode = "fexit", histogram)]
fn getpgid_fexit() {}

#[kspan::kernel_span("__x64_sys_getpgid" | "__arm64_sys_getpgid", mode = "kretprobe", histogram)]
fn getpgid_kretprobe() {}

/// Every open of this process goes through it; returns a long, `-errno`.
#[kspan::kernel_span("do_sys_openat2", histogram)]
fn do_sys_openat2(ret: i64) {}

/// Sleeping: nanosleep and clock_nanosleep end there.
#[kspan::kernel_span("hrtimer_nanosleep", mode = "fexit", histogram)]
fn hrtimer_nanosleep() {}

/// The tests of this file one at a time: each runtime counts the calls of
/// the whole process, the other tests' included.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

extern "C" {
    #[link_name = "getpgid"]
    fn libc_getpgid(pid: i32) -> i32;
}

fn getpgid_calls(n: u64) {
    for _ in 0..n {
        // SAFETY: getpgid(0) reads this process's group; it takes no memory.
        unsafe { libc_getpgid(0) };
    }
}

/// The getpgid histogram of one probe, after K calls collected, then K
/// more at shutdown: exactly K, then 2K.
async fn getpgid_counts_exactly(probe: &'static kspan::Probe) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let receiver = Receiver::start().await.unwrap();
    let meters = otlp_meters(&receiver.endpoint());
    let (provider, _spans) = kspan_tests::in_memory_provider();
    let kspan = kspan::Kspan::builder(&provider)
        .probe(probe)
        .meter_provider(&meters)
        .start()
        .expect("kspan starts in the VM");
    const K: u64 = 300;
    getpgid_calls(K);
    flush_metrics(&meters).await;
    let name = if cfg!(target_arch = "aarch64") {
        "kernel.__arm64_sys_getpgid.duration"
    } else {
        "kernel.__x64_sys_getpgid.duration"
    };
    let first = receiver.latest_histogram(name);
    assert_eq!(first.len(), 1, "{first:?}");
    check_shape(&first[0]);
    assert_eq!(first[0].count, K, "{first:?}");
    assert_eq!(first[0].str(ERROR_TYPE), None);
    getpgid_calls(K);
    let decisions = kspan.attach_plan().to_vec();
    kspan.shutdown().await.unwrap();
    tokio::task::spawn_blocking(move || meters.shutdown())
        .await
        .unwrap()
        .unwrap();
    let last = receiver.latest_histogram(name);
    assert_eq!(last.len(), 1, "{last:?}");
    check_shape(&last[0]);
    assert_eq!(last[0].count, 2 * K, "{last:?} ({decisions:?})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a kernel with BPF trampolines; run in the VM (`cargo xtask vm`)"]
async fn fexit_histogram_counts_every_call() {
    getpgid_counts_exactly(&getpgid_fexit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a kernel with kprobes; run in the VM (`cargo xtask vm`)"]
async fn kretprobe_histogram_counts_every_call() {
    getpgid_counts_exactly(&getpgid_kretprobe).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a kernel with BPF trampolines or kprobes; run in the VM (`cargo xtask vm`)"]
async fn errors_and_slow_calls_land_where_they_belong() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let receiver = Receiver::start().await.unwrap();
    let meters = otlp_meters(&receiver.endpoint());
    let (provider, _spans) = kspan_tests::in_memory_provider();
    let kspan = kspan::Kspan::builder(&provider)
        .probes([&do_sys_openat2, &hrtimer_nanosleep])
        .meter_provider(&meters)
        .start()
        .expect("kspan starts in the VM");
    const K2: u64 = 9;
    let missing = std::env::temp_dir().join(format!("kspan-vm-hist-{}", std::process::id()));
    for _ in 0..K2 {
        assert!(std::fs::File::open(&missing).is_err());
    }
    let sleep = Duration::from_millis(20);
    let took: Vec<Duration> = (0..3)
        .map(|_| {
            let started = Instant::now();
            std::thread::sleep(sleep);
            started.elapsed()
        })
        .collect();
    kspan.shutdown().await.unwrap();
    tokio::task::spawn_blocking(move || meters.shutdown())
        .await
        .unwrap()
        .unwrap();

    let opens = receiver.latest_histogram("kernel.do_sys_openat2.duration");
    for p in &opens {
        check_shape(p);
    }
    let enoent = point(&opens, Some("ENOENT")).unwrap_or_else(|| panic!("{opens:?}"));
    assert_eq!(enoent.count, K2, "{opens:?}");

    let sleeps = receiver.latest_histogram("kernel.hrtimer_nanosleep.duration");
    assert_eq!(sleeps.len(), 1, "{sleeps:?}");
    let p = &sleeps[0];
    check_shape(p);
    assert_eq!(p.count, 3, "{p:?}");
    let longest = took.iter().max().unwrap().as_nanos() as u64;
    let (lowest, highest) = (bucket_of(sleep.as_nanos() as u64), bucket_of(longest));
    let outside: u64 = p
        .bucket_counts
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < lowest || *i > highest)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(outside, 0, "buckets {lowest}..={highest}: {p:?}");
    let user: u128 = took.iter().map(Duration::as_nanos).sum();
    let sum = p.sum.unwrap();
    assert!(
        sum >= 3.0 * sleep.as_nanos() as f64 && sum <= user as f64,
        "sum {sum} ns, user space saw {user} ns"
    );
}
