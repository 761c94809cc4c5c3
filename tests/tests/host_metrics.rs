// SPDX-License-Identifier: Apache-2.0 OR MIT
//! kspan's figures as OpenTelemetry metrics through the application's meter
//! provider: the values a reader collects are those of `Kspan::stats`,
//! losses by reason included. Checked on the host with a syscall source and
//! a ring buffer small enough to overload.

use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

#[kspan::kernel_span(syscall = "getppid")]
fn getppid(ret: i64) {}

extern "C" {
    #[link_name = "getppid"]
    fn libc_getppid() -> i32;
}

/// The value of `name` with `attributes` in the last collection.
fn value(exporter: &InMemoryMetricExporter, name: &str, attributes: &[KeyValue]) -> Option<u64> {
    let collections = exporter.get_finished_metrics().ok()?;
    let last = collections.last()?;
    let metric = last
        .scope_metrics()
        .filter(|s| s.scope().name() == "kspan")
        .flat_map(|s| s.metrics())
        .find(|m| m.name() == name)?;
    let matches = |have: Vec<&KeyValue>| {
        have.len() == attributes.len() && attributes.iter().all(|kv| have.contains(&kv))
    };
    match metric.data() {
        AggregatedMetrics::U64(MetricData::Sum(sum)) => sum
            .data_points()
            .find(|p| matches(p.attributes().collect()))
            .map(|p| p.value()),
        AggregatedMetrics::U64(MetricData::Gauge(gauge)) => gauge
            .data_points()
            .find(|p| matches(p.attributes().collect()))
            .map(|p| p.value()),
        _ => None,
    }
}

#[test]
fn kspan_s_figures_are_metrics_of_the_application_s_meter_provider() {
    let metrics = InMemoryMetricExporter::default();
    let meters = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(metrics.clone()).build())
        .build();
    let (provider, _spans) = kspan_tests::in_memory_provider();
    let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&getppid)
        .meter_provider(&meters)
        // One page: the burst overloads it, so a loss reason has a value.
        .ring_buffer_size(4096)
        .start()
        .expect("syscall sources start on the host");
    for _ in 0..5000 {
        // SAFETY: getppid has no arguments and cannot fail.
        unsafe { libc_getppid() };
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    meters.force_flush().expect("the reader collects");
    let live = kspan.stats().expect("figures");
    let overload = [KeyValue::new(kspan::telemetry::REASON, "overload")];
    assert_eq!(
        value(&metrics, "kspan.records.emitted", &[]),
        Some(live.records_emitted),
        "{live:?}"
    );
    assert_eq!(
        value(&metrics, "kspan.spans.handed", &[]),
        Some(live.spans_to_pipeline)
    );
    assert_eq!(
        value(&metrics, "kspan.spans.lost", &overload),
        Some(live.dropped_overload)
    );
    assert!(live.dropped_overload > 0, "{live:?}");
    // Tracepoint programs run with preemption off: the kernel skips none here.
    assert_eq!(
        value(&metrics, "kspan.programs.skipped", &[]),
        Some(live.skipped_by_kernel)
    );
    assert_eq!(
        live.records_emitted + live.dropped_overload,
        5000,
        "{live:?}"
    );
    assert_eq!(
        value(
            &metrics,
            "kspan.calls.skipped",
            &[KeyValue::new(kspan::telemetry::REASON, "unsampled")]
        ),
        Some(0)
    );
    // Once the runtime is gone, its callbacks (which the meter provider
    // keeps) find nothing to read, and collecting still works.
    drop(kspan);
    meters.force_flush().expect("the reader collects");
}
