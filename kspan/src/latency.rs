// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Kernel latency histograms as OpenTelemetry histograms.
//!
//! A probe with `histogram` (`#[kernel_span("vfs_read", histogram)]`) has
//! every call counted in the kernel, per CPU, in a log2 bucket of its
//! duration, with the sum of the durations, apart for the calls that failed
//! (a `-errno` return) and again by errno. Nothing of it goes through the
//! ring buffer: a call costs the kernel a few map updates, whether or not
//! it also becomes a span, and calls that are not recorded as spans
//! (unsampled, orphans, overload) are counted all the same. Only the calls
//! of threads that suppress telemetry (kspan's own) are left out.
//!
//! Each such probe is published through the application's meter provider
//! (the one given to [`KspanBuilder::meter_provider`](crate::KspanBuilder::meter_provider),
//! or the global one) as one histogram, meter `kspan`:
//!
//! | metric | unit | attributes |
//! | --- | --- | --- |
//! | `kernel.<function>.duration` | `ns` | `error.type` = the errno's name (`ENOENT`) for failed calls only |
//!
//! # Why it is shaped so
//!
//! * **Explicit buckets in nanoseconds, integers.** Kernel bucket `i` holds
//!   the durations in (2^(i-1), 2^i] ns (bucket 0: 0 and 1 ns; bucket 63:
//!   above 2^62 ns). The histogram's boundaries are exactly 1, 2, 4, …,
//!   2^62 ([`boundaries`]): powers of two are exact in `f64`, so every call
//!   lands in the OpenTelemetry bucket the kernel chose, and the sum is an
//!   integer count of nanoseconds, exact. In seconds neither would hold
//!   (2^i × 10^-9 is not a binary fraction), which is why the unit is `ns`
//!   rather than the semantic conventions' `s`.
//! * **A synchronous histogram fed at collection.** The metrics API has no
//!   observable histogram, and the SDK (0.33) offers no producer hook for
//!   outside data: its metric data types cannot be built outside it, and
//!   a reader cannot be added to a provider once built. So kspan builds a
//!   `Histogram<u64>` with those boundaries and registers an observable
//!   counter (`kspan.histogram.calls`, the calls counted so far) whose
//!   callback, which the SDK runs at the start of every collection before
//!   it aggregates, reads the kernel's counts and records what was added
//!   since the last collection. The collection that runs the callback
//!   exports those calls: no lag, and with several readers each call is
//!   recorded once (the other readers see it at their next collection).
//! * **Exact counts, buckets and sum; values made up.** The API records one
//!   value at a time, so a delta of `n` calls is `n` records (about 60 ns
//!   each, measured on the host in a release build by the unit test
//!   `cost_per_recorded_call`: 6 ms of the collecting thread per 100,000
//!   calls, never on the traced thread; the kernel's own work per call is
//!   the larger part). The values are chosen per bucket ([`values`]) so that
//!   each falls in its bucket and they add up to the kernel's sum exactly;
//!   the histogram's min and max are therefore only exact to their bucket
//!   (the true minimum lies in the same power-of-two bucket as the reported
//!   one).
//! * **Nothing lost silently.** Counts accumulate in the kernel between
//!   collections; a collection takes everything up to its read. At
//!   [`Kspan::shutdown`](crate::Kspan::shutdown) kspan records the last
//!   deltas itself, so they are in the meter provider's next export (its
//!   own `shutdown` included): shut kspan down before the meter provider.
//!   Failed calls beyond the kernel's per-errno room
//!   (`KSPAN_HIST_ERRNO_ROWS` errnos per probe) are still counted, under
//!   `error.type = "_OTHER"` (the semantic conventions' fallback).
//!
//! The bucket math and the delta-to-values conversion here are pure; the
//! runtime supplies the counts through a `HistogramSource` (as it supplies
//! kspan's figures to [`telemetry`](crate::telemetry)).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use opentelemetry::metrics::{AsyncInstrument, Histogram, Meter};
use opentelemetry::KeyValue;

use crate::kernel::errno;

/// Buckets per histogram (`KSPAN_HIST_BUCKETS` of kspan.h).
pub const BUCKETS: usize = kspan_bpf::consts::KSPAN_HIST_BUCKETS as usize;

/// The attribute of failed calls (semantic conventions: set only when the
/// call failed).
pub const ERROR_TYPE: &str = "error.type";

/// The `error.type` of failed calls whose errno the kernel had no room to
/// keep apart.
pub const OTHER_ERROR: &str = "_OTHER";

/// The explicit boundaries of every kernel histogram, in ns: 1, 2, 4, …,
/// 2^62 (63 boundaries, 64 buckets).
pub fn boundaries() -> Vec<f64> {
    (0..BUCKETS - 1).map(|i| (1u64 << i) as f64).collect()
}

/// The bucket of a duration of `ns`, as the kernel computes it: 0 for 0
/// and 1 ns, else ceil(log2(ns)), at most 63.
pub fn bucket_of(ns: u64) -> usize {
    if ns <= 1 {
        return 0;
    }
    let b = (64 - (ns - 1).leading_zeros()) as usize;
    b.min(BUCKETS - 1)
}

/// The smallest and largest value of bucket `i` that an `f64` comparison
/// with [`boundaries`] still places in bucket `i`.
fn bucket_range(i: usize) -> (u64, u64) {
    match i {
        0 => (0, 1),
        _ => {
            let low = 1u64 << (i - 1);
            // Above 2^53 not every integer is an f64: the next one up.
            let step = if i > 53 { 1u64 << (i - 1 - 52) } else { 1 };
            let high = if i == BUCKETS - 1 {
                1u64 << 63
            } else {
                1u64 << i
            };
            (low + step, high)
        }
    }
}

/// Calls per bucket and the sum of their durations: one histogram series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Calls per bucket (see [`bucket_of`]).
    pub buckets: [u64; BUCKETS],
    /// Sum of the durations, ns.
    pub sum_ns: u64,
}

impl Default for Counts {
    fn default() -> Self {
        Counts {
            buckets: [0; BUCKETS],
            sum_ns: 0,
        }
    }
}

impl Counts {
    /// Calls counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// What was added since `earlier` (a counter that went back, which a
    /// kernel's counts never do, reads as 0).
    pub fn since(&self, earlier: &Counts) -> Counts {
        let mut d = Counts::default();
        for (i, slot) in d.buckets.iter_mut().enumerate() {
            *slot = self.buckets[i].saturating_sub(earlier.buckets[i]);
        }
        d.sum_ns = self.sum_ns.saturating_sub(earlier.sum_ns);
        d
    }

    /// Adds `other` to these counts.
    fn add(&mut self, other: &Counts) {
        for (slot, n) in self.buckets.iter_mut().zip(other.buckets) {
            *slot = slot.saturating_add(n);
        }
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
    }
}

/// Values to record for `counts`: `(value, times)` pairs, at most three per
/// bucket, each value inside its bucket, `times` adding up to the bucket's
/// count and `value × times` to `counts.sum_ns` (when that sum is possible
/// for those buckets; a sum read while a call was being counted is brought
/// to the nearest possible one). Returns the pairs and the sum they make.
pub fn values(counts: &Counts) -> (Vec<(u64, u64)>, u64) {
    let mut floor: u128 = 0;
    let mut room: u128 = 0;
    for (i, &n) in counts.buckets.iter().enumerate() {
        let (low, high) = bucket_range(i);
        floor += u128::from(n) * u128::from(low);
        room += u128::from(n) * u128::from(high - low);
    }
    // What is left above every call at its bucket's lowest value.
    let mut extra = u128::from(counts.sum_ns).saturating_sub(floor).min(room);
    let made = floor + extra;
    let mut out = Vec::new();
    for (i, &n) in counts.buckets.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let (low, high) = bucket_range(i);
        let width = u128::from(high - low);
        let mut left = n;
        if width > 0 && extra > 0 {
            let full = (extra / width).min(u128::from(n)) as u64;
            if full > 0 {
                out.push((high, full));
                extra -= u128::from(full) * width;
                left -= full;
            }
            if left > 0 && extra > 0 {
                // extra < width here, so low + extra < high.
                out.push((low + extra as u64, 1));
                extra = 0;
                left -= 1;
            }
        }
        if left > 0 {
            out.push((low, left));
        }
    }
    (out, u64::try_from(made).unwrap_or(u64::MAX))
}

/// One probe's counts since its programs were loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeCounts {
    /// Calls that succeeded (or whose return is not an errno).
    pub succeeded: Counts,
    /// Calls that failed, all errnos.
    pub failed: Counts,
    /// Calls that failed, by errno, as far as the kernel kept them apart.
    pub by_errno: Vec<(u16, Counts)>,
}

impl ProbeCounts {
    /// The series to publish: `(error.type, counts)`, successes first
    /// (`None`), then each errno by name, then `_OTHER` for the failed
    /// calls not kept by errno.
    pub fn series(&self) -> Vec<(Option<String>, Counts)> {
        let mut out = vec![(None, self.succeeded)];
        let mut named: HashMap<String, Counts> = HashMap::new();
        let mut kept = Counts::default();
        for (nr, counts) in &self.by_errno {
            named
                .entry(errno::name(i64::from(*nr)).into_owned())
                .or_default()
                .add(counts);
            kept.add(counts);
        }
        let mut named: Vec<_> = named.into_iter().collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        out.extend(named.into_iter().map(|(name, c)| (Some(name), c)));
        let other = self.failed.since(&kept);
        if other.count() > 0 || other.sum_ns > 0 {
            out.push((Some(OTHER_ERROR.to_owned()), other));
        }
        out
    }
}

/// Where the histograms read the kernel's counts: the runtime.
pub(crate) trait HistogramSource: Send + Sync {
    /// The counts of every histogram probe now, by probe id, or `None` when
    /// they cannot be read (the next collection tries again).
    fn histograms(&self) -> Option<Vec<(u32, ProbeCounts)>>;
}

/// One probe's instrument and what it has recorded so far.
struct Published {
    histogram: Histogram<u64>,
    /// Per series (`error.type`), the kernel counts recorded up to, and the
    /// ns the recorded values are short of the kernel's sum (a sum read
    /// mid-update, made good at the next delta).
    recorded: HashMap<Option<String>, (Counts, i128)>,
}

/// The histograms of a runtime's probes, fed from a [`HistogramSource`].
pub(crate) struct Latency {
    source: Weak<dyn HistogramSource>,
    state: Mutex<State>,
}

struct State {
    probes: HashMap<u32, Published>,
    calls: u64,
}

impl Latency {
    /// Makes one histogram per `(probe id, function)` on `meter` and the
    /// observable counter whose callback feeds them; `None` without
    /// histogram probes.
    pub(crate) fn register(
        meter: &Meter,
        probes: &[(u32, &str)],
        source: Weak<dyn HistogramSource>,
    ) -> Option<Arc<Latency>> {
        if probes.is_empty() {
            return None;
        }
        let bounds = boundaries();
        let probes = probes
            .iter()
            .map(|&(id, function)| {
                let histogram = meter
                    .u64_histogram(format!("kernel.{function}.duration"))
                    .with_description(format!(
                        "Durations of calls of the kernel function `{function}`, counted in the \
                         kernel in power-of-two buckets."
                    ))
                    .with_unit("ns")
                    .with_boundaries(bounds.clone())
                    .build();
                (
                    id,
                    Published {
                        histogram,
                        recorded: HashMap::new(),
                    },
                )
            })
            .collect();
        let latency = Arc::new(Latency {
            source,
            state: Mutex::new(State { probes, calls: 0 }),
        });
        let weak = Arc::downgrade(&latency);
        meter
            .u64_observable_counter("kspan.histogram.calls")
            .with_description(
                "Kernel calls counted in kspan's latency histograms (recorded into the \
                 `kernel.<function>.duration` histograms at each collection).",
            )
            .with_unit("{call}")
            .with_callback(move |o: &dyn AsyncInstrument<u64>| {
                if let Some(latency) = weak.upgrade() {
                    o.observe(latency.publish(), &[]);
                }
            })
            .build();
        Some(latency)
    }

    /// Records what the kernel counted since the last time; returns the
    /// calls recorded in all, ever. Called at every collection and at
    /// shutdown.
    pub(crate) fn publish(&self) -> u64 {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(counts) = self.source.upgrade().and_then(|s| s.histograms()) else {
            return state.calls;
        };
        let mut added = 0;
        for (id, probe) in counts {
            if let Some(published) = state.probes.get_mut(&id) {
                added += published.record(&probe);
            }
        }
        state.calls += added;
        state.calls
    }
}

impl Published {
    /// Records the calls of `now` not recorded yet; returns how many.
    fn record(&mut self, now: &ProbeCounts) -> u64 {
        let mut added = 0;
        for (error_type, counts) in now.series() {
            let (before, short) = self.recorded.entry(error_type.clone()).or_default();
            let mut delta = counts.since(before);
            // Make good what earlier values fell short of (or went over).
            let wanted = i128::from(delta.sum_ns) + *short;
            delta.sum_ns = u64::try_from(wanted.max(0)).unwrap_or(u64::MAX);
            if delta.count() == 0 {
                continue;
            }
            let (values, made) = values(&delta);
            *short = wanted - i128::from(made);
            *before = counts;
            let attributes: Vec<KeyValue> = error_type
                .map(|e| KeyValue::new(ERROR_TYPE, e))
                .into_iter()
                .collect();
            for (value, times) in values {
                for _ in 0..times {
                    self.histogram.record(value, &attributes);
                }
                added += times;
            }
        }
        added
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

    #[test]
    fn buckets_are_powers_of_two_upper_bounds() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 0);
        assert_eq!(bucket_of(2), 1);
        assert_eq!(bucket_of(3), 2);
        assert_eq!(bucket_of(4), 2);
        assert_eq!(bucket_of(5), 3);
        assert_eq!(bucket_of(1 << 20), 20);
        assert_eq!(bucket_of((1 << 20) + 1), 21);
        assert_eq!(bucket_of(20_000_000), 25, "20 ms: (2^24, 2^25] ns");
        assert_eq!(bucket_of(1 << 62), 62);
        assert_eq!(bucket_of((1 << 62) + 1), 63);
        assert_eq!(bucket_of(u64::MAX), 63);
        let b = boundaries();
        assert_eq!(b.len(), BUCKETS - 1);
        // The SDK's rule: a value goes to the first bucket whose upper
        // boundary is not below it. Same bucket as the kernel's, for every
        // edge.
        let sdk_bucket = |v: u64| b.partition_point(|&x| x < v as f64);
        for i in 0..BUCKETS {
            let (low, high) = bucket_range(i);
            assert_eq!(bucket_of(low), i, "lowest of {i}");
            assert_eq!(sdk_bucket(low), i, "lowest of {i} in the SDK");
            assert_eq!(sdk_bucket(high), i, "highest of {i} in the SDK");
            if i < BUCKETS - 1 {
                assert_eq!(bucket_of(high), i, "highest of {i}");
            }
        }
    }

    fn counts(pairs: &[(usize, u64)], sum_ns: u64) -> Counts {
        let mut c = Counts {
            sum_ns,
            ..Counts::default()
        };
        for &(i, n) in pairs {
            c.buckets[i] = n;
        }
        c
    }

    fn check(c: &Counts) -> u64 {
        let (vals, made) = values(c);
        let mut back = Counts::default();
        for &(v, n) in &vals {
            back.buckets[bucket_of(v)] += n;
            back.sum_ns += v * n;
        }
        assert_eq!(back.buckets, c.buckets, "{vals:?}");
        assert_eq!(back.sum_ns, made);
        made
    }

    #[test]
    fn values_keep_buckets_and_sum() {
        // Real durations, counted as the kernel counts them.
        let durations = [1u64, 2, 3, 900, 1000, 1024, 1025, 20_000_000, 0, 7];
        let mut c = Counts::default();
        for d in durations {
            c.buckets[bucket_of(d)] += 1;
            c.sum_ns += d;
        }
        assert_eq!(check(&c), c.sum_ns, "the exact sum");
        // Many calls in one bucket.
        let c = counts(&[(10, 1000), (11, 5)], 1000 * 700 + 5 * 2000);
        assert_eq!(check(&c), c.sum_ns);
        // A sum read mid-update (impossible for the buckets): the nearest.
        let c = counts(&[(10, 2)], 3);
        assert_eq!(check(&c), 2 * 513);
        let c = counts(&[(10, 2)], u64::MAX);
        assert_eq!(check(&c), 2 * 1024);
        assert_eq!(values(&Counts::default()), (vec![], 0));
    }

    #[test]
    fn series_split_by_errno_with_the_rest_as_other() {
        let p = ProbeCounts {
            succeeded: counts(&[(5, 3)], 60),
            failed: counts(&[(5, 2), (6, 2)], 150),
            by_errno: vec![(2, counts(&[(5, 1), (6, 1)], 70))],
        };
        let s = p.series();
        assert_eq!(s[0], (None, counts(&[(5, 3)], 60)));
        assert_eq!(s[1], (Some("ENOENT".into()), counts(&[(5, 1), (6, 1)], 70)));
        assert_eq!(s[2], (Some("_OTHER".into()), counts(&[(5, 1), (6, 1)], 80)));
        assert_eq!(s.len(), 3);
    }

    struct Fake(Mutex<Vec<(u32, ProbeCounts)>>);
    impl HistogramSource for Fake {
        fn histograms(&self) -> Option<Vec<(u32, ProbeCounts)>> {
            Some(self.0.lock().unwrap().clone())
        }
    }

    type Point = (Option<String>, u64, u64, Vec<u64>);

    /// The histogram points of `name` in the exporter's last export.
    fn points(exporter: &InMemoryMetricExporter, name: &str) -> Vec<Point> {
        let all = exporter.get_finished_metrics().unwrap();
        let last = all.last().expect("an export");
        let mut out = Vec::new();
        for sm in last.scope_metrics() {
            for m in sm.metrics().filter(|m| m.name() == name) {
                assert_eq!(m.unit(), "ns");
                let AggregatedMetrics::U64(MetricData::Histogram(h)) = m.data() else {
                    panic!("{name} is not a u64 histogram: {:?}", m.data());
                };
                for p in h.data_points() {
                    let error = p
                        .attributes()
                        .find(|kv| kv.key.as_str() == ERROR_TYPE)
                        .map(|kv| kv.value.as_str().into_owned());
                    assert_eq!(
                        p.bounds().collect::<Vec<_>>(),
                        boundaries(),
                        "the kernel's boundaries"
                    );
                    out.push((error, p.count(), p.sum(), p.bucket_counts().collect()));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn deltas_reach_the_sdk_exactly() {
        let exporter = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exporter.clone()).build())
            .build();
        let meter = provider.meter("kspan");
        let fake = Arc::new(Fake(Mutex::new(vec![])));
        let source: Arc<dyn HistogramSource> = fake.clone();
        let latency =
            Latency::register(&meter, &[(3, "vfs_read")], Arc::downgrade(&source)).unwrap();

        let mut first = ProbeCounts {
            succeeded: counts(&[(10, 4)], 4 * 1000),
            failed: counts(&[(25, 2)], 2 * 20_000_000),
            by_errno: vec![(11, counts(&[(25, 2)], 2 * 20_000_000))],
        };
        *fake.0.lock().unwrap() = vec![(3, first.clone()), (9, ProbeCounts::default())];
        provider.force_flush().unwrap();
        let mut want_ok = vec![0u64; BUCKETS];
        want_ok[10] = 4;
        let mut want_err = vec![0u64; BUCKETS];
        want_err[25] = 2;
        assert_eq!(
            points(&exporter, "kernel.vfs_read.duration"),
            vec![
                (None, 4, 4000, want_ok.clone()),
                (Some("EAGAIN".into()), 2, 40_000_000, want_err.clone()),
            ]
        );

        // More calls: the cumulative points grow by exactly the delta.
        first.succeeded = counts(&[(10, 5), (3, 1)], 5000 + 7);
        *fake.0.lock().unwrap() = vec![(3, first)];
        provider.force_flush().unwrap();
        want_ok[10] = 5;
        want_ok[3] = 1;
        assert_eq!(
            points(&exporter, "kernel.vfs_read.duration"),
            vec![
                (None, 6, 5007, want_ok),
                (Some("EAGAIN".into()), 2, 40_000_000, want_err),
            ]
        );
        // And the shutdown flush records what came last, once.
        assert_eq!(latency.publish(), 8);
        assert_eq!(latency.publish(), 8);
        provider.shutdown().unwrap();
    }

    /// What a record costs: the collection's price per call (printed; the
    /// module docs quote it).
    #[test]
    fn cost_per_recorded_call() {
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(InMemoryMetricExporter::default()).build())
            .build();
        let meter = provider.meter("kspan");
        let fake = Arc::new(Fake(Mutex::new(vec![])));
        let source: Arc<dyn HistogramSource> = fake.clone();
        let latency = Latency::register(&meter, &[(0, "f")], Arc::downgrade(&source)).unwrap();
        let n = 200_000u64;
        *fake.0.lock().unwrap() = vec![(
            0,
            ProbeCounts {
                succeeded: counts(&[(10, n / 2), (12, n / 4)], n * 1000),
                failed: counts(&[(11, n / 4)], n * 300),
                by_errno: vec![(2, counts(&[(11, n / 4)], n * 300))],
            },
        )];
        let started = std::time::Instant::now();
        assert_eq!(latency.publish(), n);
        let per_call = started.elapsed().as_nanos() as f64 / n as f64;
        eprintln!("kspan latency: {per_call:.1} ns per recorded call");
        provider.shutdown().unwrap();
    }
}
