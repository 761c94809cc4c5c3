// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What kspan's memory costs, measured in the process's own
//! `/proc/self/status`: a handler's panics cost nothing per panic (and no
//! backtrace symbolization even with `RUST_BACKTRACE=1`), and the ring
//! buffer shows as twice its size in RSS, as `ring_buffer_size` says.
//! Checked on the host with a syscall source.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static CALLS: AtomicU64 = AtomicU64::new(0);

/// Panics on every 1000th call it sees.
#[kspan::kernel_span(syscall = "getppid")]
fn getppid(ret: i64) {
    let n = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
    if n % 1000 == 0 {
        panic!("call {n} panics");
    }
}

extern "C" {
    #[link_name = "getppid"]
    fn libc_getppid() -> i32;
}

fn calls(n: usize) {
    for _ in 0..n {
        // SAFETY: getppid has no arguments and cannot fail.
        unsafe { libc_getppid() };
    }
}

/// A `/proc/self/status` figure, in kB.
fn status_kb(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in /proc/self/status"))
}

/// A provider that builds spans and keeps none: memory is kspan's alone.
fn provider() -> opentelemetry_sdk::trace::SdkTracerProvider {
    opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_id_generator(kspan::KernelSpanIds::default())
        .build()
}

const CHILD: &str = "KSPAN_HOST_MEMORY_CHILD";
const TOTAL_CALLS: usize = 200_000;

/// The child's part: 200,000 calls, every 1000th handler call panics;
/// prints the peak RSS before the first panic, after 20, and at the end.
fn panicking_calls() {
    let provider = provider();
    let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&getppid)
        .start()
        .expect("syscall sources start on the host");
    calls(500);
    std::thread::sleep(Duration::from_millis(200));
    let before = status_kb("VmHWM");
    let mut after_20 = None;
    for chunk in 1..=TOTAL_CALLS / 1000 {
        calls(1000);
        // Paced, so that the consumer keeps up and handlers see the calls:
        // at most 5,000 records wait (within half the ring).
        let issued = 500 + chunk as u64 * 1000;
        let waited = std::time::Instant::now();
        while CALLS.load(Ordering::Relaxed) + 5000 < issued
            && waited.elapsed() < Duration::from_secs(2)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        if after_20.is_none() && kspan.stats().unwrap().handler_panics >= 20 {
            after_20 = Some(status_kb("VmHWM"));
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let stats = runtime
        .block_on(kspan.shutdown())
        .expect("kspan shuts down");
    println!(
        "before={before} after_20={} end={} panics={}",
        after_20.unwrap_or(0),
        status_kb("VmHWM"),
        stats.handler_panics
    );
}

#[test]
fn a_handler_s_panics_cost_no_memory_per_panic_nor_a_backtrace() {
    if std::env::var_os(CHILD).is_some() {
        return panicking_calls();
    }
    // A process of its own: std's backtrace cache, once filled, stays.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_handler_s_panics_cost_no_memory_per_panic_nor_a_backtrace",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // After libtest's "test ... " on the same line.
    let line = stdout
        .lines()
        .find_map(|l| Some(&l[l.find("before=")?..]))
        .unwrap_or_else(|| panic!("no figures: {stdout}\n{stderr}"));
    let figure = |key: &str| -> i64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line}"))
    };
    let (before, after_20, end, panics) = (
        figure("before"),
        figure("after_20"),
        figure("end"),
        figure("panics"),
    );
    eprintln!("peak RSS (kB): {line}");
    assert!(panics >= 150, "{line}");
    assert!(after_20 > 0, "{line}");
    // The unwinder's pages of the binary are read in once (about 0.4 MB);
    // a backtrace's symbolization took 88 MB here. (RSS counters are
    // approximate by a few hundred kB.)
    assert!(
        end - before < 4 * 1024,
        "peak RSS grew by {} kB: {line}",
        end - before
    );
    assert!(
        end - after_20 < 1024,
        "peak RSS grew by {} kB from 20 to {panics} panics: {line}",
        end - after_20
    );
    // No handler panic reached the hook: nothing but kspan's one warning
    // of the first (with no subscriber set, on stderr) printed them.
    let hook_lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with("kspan: warning: "))
        .filter(|l| l.contains("panics at") || l.contains("call 1000 panics"))
        .collect();
    assert!(hook_lines.is_empty(), "{stderr}");
    assert_eq!(
        stderr
            .matches("kspan: warning: the handler of a kernel span panicked")
            .count(),
        1,
        "kspan says the first panic once: {stderr}"
    );
}

#[test]
fn the_ring_buffer_shows_as_twice_its_size_in_rss() {
    const RING: u64 = 64 << 20;
    let provider = provider();
    let before = status_kb("VmRSS");
    let kspan = kspan::Kspan::builder(&provider)
        .probe(&getppid)
        .ring_buffer_size(RING as u32)
        .start()
        .expect("syscall sources start on the host");
    let running = status_kb("VmRSS");
    drop(kspan);
    let after = status_kb("VmRSS");
    let grown = running - before;
    let twice = 2 * RING / 1024;
    // The rest of start: BTF, the programs, the pages of the binary it ran.
    assert!(
        (twice..twice + 16 * 1024).contains(&grown),
        "RSS grew by {grown} kB for a {RING}-byte ring"
    );
    assert!(
        after < before + 16 * 1024,
        "dropping kspan unmaps the ring: {before} kB before, {after} kB after"
    );
}
