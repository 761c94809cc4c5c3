// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A bare libbpf-rs ring-buffer consumer of kspan's own records: the
//! baseline of `cargo xtask bench --host --only consumer` (issue 13), against
//! `consumer_kspan`.
//!
//! It loads the BPF object kspan-bpf ships, with the settings kspan gives a
//! `getppid` syscall source capturing only the return value (records of
//! 152 bytes, this process only, no thread context read), attaches its
//! syscall programs to `syscalls:sys_enter_getppid`/`sys_exit_getppid`
//! with libbpf-rs, and consumes the ring buffer with a callback that only
//! reads each record (it sums the spans' durations).
//!
//! `consumer_bare RECORDS FILLS [spans]`: per fill, RECORDS + 1 `getppid`
//! calls with nobody consuming (as `consumer_kspan` makes one call, then
//! RECORDS while its consumer is held), then the time to consume them all;
//! prints `CONSUMER bare records <n> ns <ns> cpu_ns <ns> lost <n>`
//! (`cpu_ns`: the process's CPU time meanwhile), `lost` from the kernel's
//! counters (ring buffer full, overload) and any record not consumed.
//!
//! With `spans`, the callback also turns each record into the span kspan
//! makes of it (name, kind, start and end time, return value, thread id)
//! with the SDK's own `SpanBuilder`, through the same pipeline as
//! `consumer_kspan` (its gate processor, open, then kspan's pipeline: the
//! batch processor and the discarding exporter), and the time
//! runs until the exporter has every span: a hand-written records-to-spans
//! consumer, the smallest one could write on libbpf-rs, printed as
//! `CONSUMER bare_spans`.

use std::cell::Cell;
use std::mem::MaybeUninit;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kspan_bpf::consts as c;
use kspan_bpf::types::{kspan_config, kspan_record};
use kspan_bpf::KspanSkelBuilder;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, RingBufferBuilder, TracepointCategory};
use opentelemetry::trace::{Span as _, SpanBuilder, SpanKind, Tracer as _, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::SdkTracer;

use kspan_examples::hot::gate::{Gate, GateProcessor};
use kspan_examples::hot::{discard, load};

/// The ring buffer's bytes: `consumer_kspan`'s.
const RING_BYTES: u32 = 64 << 20;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("consumer_bare: {e}");
            ExitCode::FAILURE
        }
    }
}

/// kspan's settings for a `getppid` syscall source capturing the return
/// value only, tracing this process (`kspan_config` of kspan.h).
fn config() -> kspan_config {
    kspan_config {
        target_tgid: std::process::id(),
        probe_id: 0,
        nr_args: 0,
        mode: c::KSPAN_MODE_SYSCALL as u32,
        nr_caps: 0,
        record_size: std::mem::size_of::<kspan_bpf::types::kspan_record>() as u32,
        orphans: c::KSPAN_ORPHANS_NEW_TRACE as u32,
        ring_bytes: RING_BYTES,
        // No thread context: every call starts a trace of its own.
        task_tp_offset: 0,
        ..kspan_config::default()
    }
}

/// Kernel `CLOCK_MONOTONIC` nanoseconds to wall-clock time, from one
/// reading of both clocks (what kspan's clock does, without its periodic
/// re-reading).
#[derive(Clone, Copy)]
struct Clock {
    wall: SystemTime,
    monotonic_ns: u64,
}

impl Clock {
    fn now() -> Self {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the call.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        Self {
            wall: SystemTime::now(),
            monotonic_ns: ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64,
        }
    }

    fn to_system_time(self, ns: u64) -> SystemTime {
        if ns >= self.monotonic_ns {
            self.wall + Duration::from_nanos(ns - self.monotonic_ns)
        } else {
            self.wall - Duration::from_nanos(self.monotonic_ns - ns)
        }
    }
}

/// The span kspan makes of a `getppid` record, built with the SDK's
/// `SpanBuilder` and ended at the record's end time.
fn export_span(tracer: &SdkTracer, clock: Clock, record: &[u8]) {
    if record.len() < std::mem::size_of::<kspan_record>() {
        return;
    }
    // SAFETY: the ring holds `kspan_record`s (plain integers, any bit
    // pattern valid) and `record` is at least that long; read unaligned.
    let rec = unsafe { record.as_ptr().cast::<kspan_record>().read_unaligned() };
    let mut builder = SpanBuilder::from_name("getppid");
    builder.span_kind = Some(SpanKind::Internal);
    builder.start_time = Some(clock.to_system_time(rec.start_ns));
    builder.attributes = Some(vec![
        KeyValue::new("kernel.return_value", rec.ret as i64),
        KeyValue::new("kspan.tid", i64::from(rec.tid)),
        KeyValue::new("code.function.name", "getppid"),
    ]);
    let mut span = tracer.build(builder);
    span.end_with_timestamp(clock.to_system_time(rec.end_ns.max(rec.start_ns)));
}

fn run() -> Result<(), BoxError> {
    let (records, fills, spans) = args()?;
    let mut storage = MaybeUninit::uninit();
    let mut open = KspanSkelBuilder::default().open(&mut storage)?;
    open.maps
        .rodata_data
        .as_deref_mut()
        .ok_or("the object has no .rodata")?
        .kspan_cfg = config();
    open.maps.kspan_events.set_max_entries(RING_BYTES)?;
    open.maps.kspan_entry_caps.set_max_entries(1)?;
    for prog in [
        &mut open.progs.kspan_fentry,
        &mut open.progs.kspan_fexit,
        &mut open.progs.kspan_kprobe,
        &mut open.progs.kspan_kretprobe,
        &mut open.progs.kspan_kprobe_multi,
        &mut open.progs.kspan_kretprobe_multi,
    ] {
        prog.set_autoload(false);
    }
    let skel = open.load()?;
    let _links = [
        skel.progs
            .kspan_sys_exit
            .attach_tracepoint(TracepointCategory::Syscalls, "sys_exit_getppid")?,
        skel.progs
            .kspan_sys_enter
            .attach_tracepoint(TracepointCategory::Syscalls, "sys_enter_getppid")?,
    ];
    skel.maps
        .kspan_control
        .update(&0u32.to_ne_bytes(), &1u32.to_ne_bytes(), MapFlags::ANY)?;

    let consumed = Rc::new(Cell::new(0u64));
    let total_ns = Rc::new(Cell::new(0u64));
    // The pipeline `consumer_kspan` uses (its gate, never closed here, then
    // kspan's pipeline), with room for every span of a fill.
    let discard::Discarding {
        provider, exporter, ..
    } = discard::provider_with(
        (records as usize + 1) * 2,
        GateProcessor(Arc::new(Gate::default())),
    );
    let tracer = provider.tracer("consumer_bare");
    let clock = Clock::now();
    let mut builder = RingBufferBuilder::new();
    builder.add(&skel.maps.kspan_events, {
        let (consumed, total_ns) = (consumed.clone(), total_ns.clone());
        move |record: &[u8]| {
            if spans {
                export_span(&tracer, clock, record);
            }
            // start_ns and end_ns of `struct kspan_record`.
            let field = |at: usize| {
                record
                    .get(at..at + 8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_ne_bytes)
            };
            total_ns.set(
                total_ns
                    .get()
                    .wrapping_add(field(40).wrapping_sub(field(32))),
            );
            consumed.set(consumed.get() + 1);
            0
        }
    })?;
    let ring = builder.build()?;

    let counters = || -> Result<u64, BoxError> {
        let mut lost = 0;
        for index in [c::KSPAN_CTR_RINGBUF_FULL, c::KSPAN_CTR_OVERLOAD] {
            let per_cpu = skel
                .maps
                .kspan_counters
                .lookup_percpu(&(index as u32).to_ne_bytes(), MapFlags::ANY)?
                .unwrap_or_default();
            lost += per_cpu
                .iter()
                .filter_map(|v| v.get(..8)?.try_into().ok().map(u64::from_ne_bytes))
                .sum::<u64>();
        }
        Ok(lost)
    };
    let mut lost_before = counters()?;
    for _ in 0..fills {
        let from = consumed.get();
        for _ in 0..=records {
            load::call();
        }
        let target = from + u64::from(records) + 1;
        let received_target = exporter.received() + u64::from(records) + 1;
        let cpu = load::process_cpu_ns();
        let started = Instant::now();
        while consumed.get() < target {
            if started.elapsed() > Duration::from_secs(30) {
                break;
            }
            ring.consume()?;
        }
        if spans {
            provider.force_flush()?;
        }
        let took = started.elapsed();
        let cpu = load::process_cpu_ns() - cpu;
        let lost_now = counters()?;
        let mut missing = target.saturating_sub(consumed.get());
        if spans {
            missing += received_target.saturating_sub(exporter.received());
        }
        println!(
            "CONSUMER {} records {} ns {} cpu_ns {cpu} lost {}",
            if spans { "bare_spans" } else { "bare" },
            records + 1,
            took.as_nanos(),
            lost_now - lost_before + missing
        );
        lost_before = lost_now;
    }
    // What the callback read, so that reading it is not optimised away.
    std::hint::black_box(total_ns.get());
    drop(ring);
    provider.shutdown()?;
    Ok(())
}

/// `RECORDS FILLS [spans]`: whether each record becomes an SDK span.
fn args() -> Result<(u32, u32, bool), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize| {
        args.get(i)
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| *n > 0)
    };
    match (number(0), number(1), args.get(2).map(String::as_str)) {
        (Some(records), Some(fills), None) => Ok((records, fills, false)),
        (Some(records), Some(fills), Some("spans")) => Ok((records, fills, true)),
        _ => Err("usage: consumer_bare RECORDS FILLS [spans] (positive numbers)".into()),
    }
}
