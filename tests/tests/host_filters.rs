// SPDX-License-Identifier: Apache-2.0 OR MIT
//! In-kernel filters, rate limits and sums, on the host with syscall
//! sources: exactly the calls the filters keep become spans, under the
//! application span; the rest are counted per probe, never as loss; a
//! probe with `sum` puts the calls it does not export on the application
//! span as `kernel.<function>.*` attributes.

use std::io::Read;
use std::time::{Duration, Instant};

use opentelemetry::trace::{SpanId, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SpanData;

#[kspan::kernel_span(syscall = "read", filter = "count >= 65536")]
fn read(count: usize, ret: i64) {}

#[kspan::kernel_span(syscall = "clock_nanosleep", min_duration = "5ms")]
fn clock_nanosleep(ret: i64) {}

#[kspan::kernel_span(syscall = "openat", errors_only)]
fn openat(ret: i64) {}

#[kspan::kernel_span(syscall = "getppid", rate_limit = 100)]
fn getppid() {}

#[kspan::kernel_span(syscall = "getpid", spans = false, sum)]
fn getpid() {}

#[kspan::kernel_span(syscall = "getuid", filter = "ret == 12345", sum)]
fn getuid() {}

use kspan_tests::in_memory_provider_with_sums as provider;

use kspan_tests::span_int as int;

/// `kspan.probe.calls.skipped` for `function` and `reason`, last collected.
fn skipped_metric(exporter: &InMemoryMetricExporter, function: &str, reason: &str) -> Option<u64> {
    let want = [
        KeyValue::new(kspan::telemetry::REASON, reason.to_owned()),
        KeyValue::new(kspan::telemetry::FUNCTION, function.to_owned()),
    ];
    let collections = exporter.get_finished_metrics().ok()?;
    let metric = collections
        .last()?
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .find(|m| m.name() == "kspan.probe.calls.skipped")?;
    let AggregatedMetrics::U64(MetricData::Sum(sum)) = metric.data() else {
        return None;
    };
    let value = sum
        .data_points()
        .find(|p| {
            let have: Vec<&KeyValue> = p.attributes().collect();
            have.len() == want.len() && want.iter().all(|kv| have.contains(&kv))
        })
        .map(|p| p.value());
    value
}

fn probe<'a>(stats: &'a [kspan::ProbeStats], function: &str) -> &'a kspan::ProbeStats {
    stats
        .iter()
        .find(|p| p.function == function)
        .unwrap_or_else(|| panic!("no figures for {function}: {stats:?}"))
}

/// One kspan runtime at a time in this process: each traces the whole
/// process, and the tests' figures are their own.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

const SMALL_READS: usize = 3000;
const LARGE_READS: usize = 7;
const SHORT_SLEEPS: usize = 4;
const LONG_SLEEPS: usize = 3;
const MISSING_OPENS: usize = 5;
const FOUND_OPENS: usize = 9;
const PPID_CALLS: usize = 20_000;
const PID_CALLS: usize = 1234;
const UID_CALLS: usize = 321;

fn getpid_raw() {
    // SAFETY: getpid has no arguments and cannot fail; called through
    // syscall(2) so that no libc cache answers it.
    unsafe { libc::syscall(libc::SYS_getpid) };
}

#[test]
fn filters_keep_exactly_the_calls_asked_for_and_count_the_rest() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let sums = kspan::KernelSums::new();
    let (provider, exporter) = provider(&sums);
    let tracer = provider.tracer("app");
    let metrics = InMemoryMetricExporter::default();
    let meters = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(metrics.clone()).build())
        .build();
    let kspan = kspan::Kspan::builder(&provider)
        .probes([&read, &clock_nanosleep, &openat, &getppid, &getpid, &getuid])
        .kernel_sums(sums.clone())
        .meter_provider(&meters)
        .start()
        .expect("syscall sources start on the host");

    let mut zero = std::fs::File::open("/dev/zero").unwrap();
    let mut small = [0u8; 1];
    let mut large = vec![0u8; 65536];
    let started = Instant::now();
    let app: SpanId = tracer.in_span("hot_loop", |cx| {
        for _ in 0..SMALL_READS {
            zero.read_exact(&mut small).unwrap();
        }
        for _ in 0..LARGE_READS {
            zero.read_exact(&mut large).unwrap();
        }
        for _ in 0..SHORT_SLEEPS {
            std::thread::sleep(Duration::from_micros(200));
        }
        for _ in 0..LONG_SLEEPS {
            std::thread::sleep(Duration::from_millis(12));
        }
        for i in 0..MISSING_OPENS {
            assert!(std::fs::File::open(format!("/nonexistent/kspan-{i}")).is_err());
        }
        for _ in 0..FOUND_OPENS {
            std::fs::File::open("/dev/null").unwrap();
        }
        for _ in 0..PPID_CALLS {
            // SAFETY: getppid has no arguments and cannot fail.
            unsafe { libc::syscall(libc::SYS_getppid) };
        }
        for _ in 0..PID_CALLS {
            getpid_raw();
        }
        for _ in 0..UID_CALLS {
            // SAFETY: getuid has no arguments and cannot fail.
            unsafe { libc::syscall(libc::SYS_getuid) };
        }
        cx.span().span_context().span_id()
    });
    let elapsed = started.elapsed();
    meters.force_flush().expect("the reader collects");
    let per_probe = kspan.probe_stats().expect("per-probe figures");
    let stats = runtime
        .block_on(kspan.shutdown())
        .expect("kspan shuts down");
    let spans = exporter.get_finished_spans().unwrap();
    let under_app = |name: &str| {
        spans
            .iter()
            .filter(|s| s.name == name && s.parent_span_id == app)
            .collect::<Vec<_>>()
    };

    // read: only the 64 KiB reads, every one of them.
    let reads = under_app("read");
    assert_eq!(reads.len(), LARGE_READS, "{stats:?}");
    assert!(reads
        .iter()
        .all(|s| int(s, "kernel.arg.count") == Some(65536)));
    assert!(probe(&per_probe, "read").filtered >= SMALL_READS as u64);
    // clock_nanosleep: only the long sleeps.
    let sleeps = under_app("clock_nanosleep");
    assert_eq!(sleeps.len(), LONG_SLEEPS, "{per_probe:?}");
    for s in &sleeps {
        let took = s.end_time.duration_since(s.start_time).unwrap();
        assert!(took >= Duration::from_millis(5), "{took:?}");
    }
    assert!(probe(&per_probe, "clock_nanosleep").filtered >= SHORT_SLEEPS as u64);
    // openat: only the failed opens, each an ENOENT.
    let opens = under_app("openat");
    assert_eq!(opens.len(), MISSING_OPENS, "{per_probe:?}");
    assert!(opens.iter().all(|s| s
        .attributes
        .iter()
        .any(|kv| kv.key.as_str() == "error.type" && kv.value.as_str() == "ENOENT")));
    assert!(probe(&per_probe, "openat").filtered >= FOUND_OPENS as u64);
    // getppid: at most 100 a second, bursts of a second's worth.
    let ppids = under_app("getppid").len() as u64;
    let limited = probe(&per_probe, "getppid").rate_limited;
    let ceiling = 100 + (elapsed.as_secs_f64() * 100.0).ceil() as u64;
    assert!(
        (1..=ceiling).contains(&ppids),
        "{ppids} spans in {elapsed:?}, ceiling {ceiling}"
    );
    assert_eq!(
        ppids + limited,
        PPID_CALLS as u64,
        "every call a span or counted"
    );
    // getpid: no spans, every call summed on the application span.
    assert!(under_app("getpid").is_empty());
    assert_eq!(probe(&per_probe, "getpid").summary_only, PID_CALLS as u64);
    let app_span = spans
        .iter()
        .find(|s| s.span_context.span_id() == app)
        .expect("the application span is exported");
    assert_eq!(int(app_span, "kernel.getpid.calls"), Some(PID_CALLS as i64));
    assert_eq!(int(app_span, "kernel.getpid.errors"), Some(0));
    let pid_ns = int(app_span, "kernel.getpid.duration_ns").unwrap();
    assert!(
        pid_ns > 0 && (pid_ns as u128) < elapsed.as_nanos(),
        "{pid_ns}"
    );
    // getuid: filtered calls are summed too.
    assert!(under_app("getuid").is_empty());
    assert_eq!(int(app_span, "kernel.getuid.calls"), Some(UID_CALLS as i64));
    // The per-probe figures are metrics too: collected just before
    // `probe_stats` read them, with no traced call in between.
    for p in &per_probe {
        for (reason, figure) in [
            ("filtered", p.filtered),
            ("rate_limited", p.rate_limited),
            ("summary_only", p.summary_only),
        ] {
            assert_eq!(
                skipped_metric(&metrics, p.function, reason),
                Some(figure),
                "{} {reason}",
                p.function
            );
        }
    }
    // Nothing lost; the totals add up.
    assert_eq!(stats.lost(), 0, "{stats:?}");
    assert_eq!(stats.spans_parent_unresolved, 0);
    assert_eq!(
        stats.filtered,
        per_probe.iter().map(|p| p.filtered).sum::<u64>()
    );
    assert!(stats.rate_limited >= limited && stats.summary_only >= PID_CALLS as u64);
    let skipped: Vec<(&str, u64)> = stats.skips().to_vec();
    assert!(skipped.contains(&("rate_limited", stats.rate_limited)));
}

#[kspan::kernel_span(syscall = "clock_nanosleep", spans = false, sum)]
fn summed_sleep(ret: i64) {}

#[kspan::kernel_span(syscall = "clock_nanosleep")]
fn spanned_sleep(ret: i64) {}

const SLEEPS: usize = 6;
const SLEEP: Duration = Duration::from_millis(3);

/// Runs `SLEEPS` sleeps inside an application span with `probe`; returns
/// the application span and the kernel spans under it.
fn sleeps(probe: &'static kspan::Probe) -> (SpanData, Vec<SpanData>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let sums = kspan::KernelSums::new();
    let (provider, exporter) = provider(&sums);
    let tracer = provider.tracer("app");
    let kspan = kspan::Kspan::builder(&provider)
        .probe(probe)
        .kernel_sums(sums)
        .start()
        .expect("syscall sources start on the host");
    let app = tracer.in_span("sleeps", |cx| {
        for _ in 0..SLEEPS {
            std::thread::sleep(SLEEP);
        }
        cx.span().span_context().span_id()
    });
    let stats = runtime
        .block_on(kspan.shutdown())
        .expect("kspan shuts down");
    assert_eq!(stats.lost(), 0, "{stats:?}");
    let spans = exporter.get_finished_spans().unwrap();
    let app_span = spans
        .iter()
        .find(|s| s.span_context.span_id() == app)
        .cloned()
        .expect("the application span");
    let kernel = spans
        .into_iter()
        .filter(|s| s.parent_span_id == app)
        .collect();
    (app_span, kernel)
}

#[test]
fn summed_time_is_the_time_the_spans_of_the_same_calls_add_up_to() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (app, kernel) = sleeps(&summed_sleep);
    assert!(kernel.is_empty(), "a summary-only probe makes no spans");
    assert_eq!(
        int(&app, "kernel.clock_nanosleep.calls"),
        Some(SLEEPS as i64)
    );
    let summed =
        Duration::from_nanos(int(&app, "kernel.clock_nanosleep.duration_ns").unwrap() as u64);

    let (app, kernel) = sleeps(&spanned_sleep);
    assert_eq!(kernel.len(), SLEEPS);
    assert_eq!(
        int(&app, "kernel.clock_nanosleep.calls"),
        None,
        "nothing summed"
    );
    let spanned: Duration = kernel
        .iter()
        .map(|s| s.end_time.duration_since(s.start_time).unwrap())
        .sum();
    let floor = SLEEP * SLEEPS as u32;
    assert!(
        summed >= floor && spanned >= floor,
        "{summed:?} {spanned:?}"
    );
    // The same calls in two runs: the same time, give or take the
    // scheduler's wake-up latency per sleep.
    let slack = Duration::from_millis(2) * SLEEPS as u32;
    assert!(
        summed.abs_diff(spanned) <= slack,
        "summed {summed:?}, spans add up to {spanned:?}"
    );
}

#[test]
fn a_summing_probe_without_kernel_sums_is_refused_with_the_fix() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let (provider, _exporter) = kspan_tests::in_memory_provider();
    let err = kspan::Kspan::builder(&provider)
        .probe(&getpid)
        .start()
        .expect_err("nothing would put the sums on the spans");
    let text = err.to_string();
    assert!(
        text.contains("`getpid`") && text.contains("KernelSums") && text.contains(".kernel_sums("),
        "{text}"
    );
}
