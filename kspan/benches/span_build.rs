// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What kspan adds per record in user space: decode + handler + span build,
//! for a `do_sys_openat2` record with three scalar captures (`dfd`, and the
//! `flags` and `mode` of `how`), one 64-byte string (the file name) and the
//! return value, against creating and ending an empty span with the same
//! tracer.
//!
//! `cargo bench -p kspan --bench span_build` prints both figures and their
//! ratio. Both run through the same SDK pipeline (a simple processor and an
//! exporter that keeps nothing), in many short rounds in rotating order, the
//! ratio taken within each round and summarised by its median and quartiles.
//! Needs the kernel's BTF
//! (`/sys/kernel/btf/vmlinux`) to plan the probe, nothing else.

use std::hint::black_box;
use std::time::Instant;

use kspan::consume::parse_record;
use kspan::plan::plan_probe;
use kspan::span::ClockOffset;
use kspan::SpanFactory;
use opentelemetry::trace::{Span as _, Tracer, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};

#[kspan::kernel_span("do_sys_openat2")]
fn do_sys_openat2(
    dfd: i32,
    #[capture(path = "how->flags")] flags: u64,
    #[capture(path = "how->mode")] mode: u64,
    #[capture(user, max = 64)] filename: &str,
    ret: i64,
) {
    black_box((dfd, flags, mode, filename, ret));
}

/// Takes every span and keeps nothing: the pipeline without the network.
#[derive(Debug)]
struct DiscardExporter;

impl SpanExporter for DiscardExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        black_box(batch);
        Ok(())
    }
}

/// The record of one call; `parent` is the span it was made under (0: a
/// root of its own).
fn record(plan: &kspan::plan::ProbePlan, parent: u64) -> Vec<u8> {
    let mut header = kspan_bpf::types::kspan_record {
        trace_id: [7; 16],
        span_id: 0x1122_3344_5566_7788,
        parent_span_id: parent,
        start_ns: 1_000,
        end_ns: 5_000,
        ret: 3,
        pid: 42,
        tid: 43,
        flags: kspan_bpf::REC_HAS_RET,
        ..Default::default()
    };
    let name = [b'f'; 64];
    header.vals = [
        (-100i64) as u64,
        0o2100000,
        0o644,
        name.len() as u64 + 1,
        0,
        0,
        0,
        0,
    ];
    // SAFETY: kspan_record is plain old data; viewing it as bytes is sound.
    let mut bytes = unsafe {
        std::slice::from_raw_parts(
            (&header as *const kspan_bpf::types::kspan_record).cast::<u8>(),
            std::mem::size_of::<kspan_bpf::types::kspan_record>(),
        )
    }
    .to_vec();
    bytes.resize(plan.record_size as usize, 0);
    let data = std::mem::size_of::<kspan_bpf::types::kspan_record>();
    let off = data + usize::from(plan.captures[3].bpf.data_off);
    bytes[off..off + 64].copy_from_slice(&name);
    bytes
}

fn main() {
    let btf = kspan::kernel::read_btf(std::path::Path::new(kspan::KERNEL_BTF))
        .expect("the kernel's BTF at /sys/kernel/btf/vmlinux");
    let plan = plan_probe(&btf, &do_sys_openat2).expect("do_sys_openat2 plans on this kernel");
    let bytes = record(&plan, 0);
    // The common case: a call made under an application span.
    let child = record(&plan, 0x0102_0304_0506_0708);
    // The worst case: every record under a parent kspan no longer keeps a
    // context for (256 random parents in turn, more than it keeps).
    let strangers: Vec<Vec<u8>> = (1..=256u64)
        .map(|p| record(&plan, p.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
        .collect();
    let next_stranger = std::cell::Cell::new(0usize);
    // As at run time, kspan's context observer is registered (contexts made
    // for parents get their record prepared).
    kspan::context::register_observer().expect("the bench's only observer");
    // The provider kspan needs: ids through KernelSpanIds, for the empty
    // span and the kernel span alike.
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(DiscardExporter)
        .with_id_generator(kspan::KernelSpanIds::default())
        .build();
    let tracer = provider.tracer("kspan-bench");
    let factory = SpanFactory::new(tracer.clone(), ClockOffset::measure());

    // Check once that the record decodes into the span the bench claims,
    // with the kernel's span id.
    let view = parse_record(&bytes).expect("a whole record");
    assert_eq!(factory.process(&plan, &view), kspan::Outcome::Exported);

    // The SDK's own cost for a span carrying the same attributes, built by hand:
    // the floor any exporter of these values pays.
    let view = parse_record(&bytes).expect("a whole record");
    let reference: Vec<opentelemetry::KeyValue> = {
        let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
        let p = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .with_id_generator(kspan::KernelSpanIds::default())
            .build();
        SpanFactory::new(p.tracer("probe"), ClockOffset::measure()).process(&plan, &view);
        let span = exporter.get_finished_spans().expect("one span").remove(0);
        assert_eq!(
            span.span_context.span_id(),
            opentelemetry::trace::SpanId::from(0x1122_3344_5566_7788),
            "the kernel's span id"
        );
        span.attributes
    };

    let empty_span = || {
        let mut span = tracer.start("empty");
        span.end();
    };
    let by_hand = || {
        let mut span = tracer
            .span_builder("do_sys_openat2")
            .with_attributes(reference.clone())
            .start(&tracer);
        span.end();
    };
    let kspan_record = || {
        let view = parse_record(black_box(&bytes)).expect("a whole record");
        black_box(factory.process(&plan, &view));
    };
    let kspan_child = || {
        let view = parse_record(black_box(&child)).expect("a whole record");
        black_box(factory.process(&plan, &view));
    };
    let kspan_stranger = || {
        let i = next_stranger.get();
        next_stranger.set((i + 1) % strangers.len());
        let view = parse_record(black_box(&strangers[i])).expect("a whole record");
        black_box(factory.process(&plan, &view));
    };
    let cases: [&dyn Fn(); 5] = [
        &empty_span,
        &by_hand,
        &kspan_record,
        &kspan_child,
        &kspan_stranger,
    ];

    // One case alone, for an instruction count under callgrind (stable where
    // wall-clock time on a shared machine is not): `SPAN_BUILD_ONLY=root
    // SPAN_BUILD_CALLS=N`; two values of N cancel the set-up.
    if let Ok(only) = std::env::var("SPAN_BUILD_ONLY") {
        let names = ["empty", "by_hand", "root", "child", "stranger"];
        let Some(case) = names.iter().position(|n| *n == only) else {
            panic!("SPAN_BUILD_ONLY={only}: expected one of {names:?}");
        };
        let calls: u32 = std::env::var("SPAN_BUILD_CALLS")
            .ok()
            .and_then(|n| n.parse().ok())
            .expect("SPAN_BUILD_CALLS=<number of calls>");
        for _ in 0..calls {
            cases[case]();
        }
        return;
    }

    // Many short rounds, the cases one after the other in an order that
    // rotates, so that drift of the machine (frequency, neighbours) hits each
    // case alike; ratios are taken within a round (paired) and summarised by
    // their median and quartiles.
    let (rounds, per_round) = (201usize, 5_000u32);
    let mut times: [Vec<f64>; 5] = Default::default();
    for round in 0..rounds {
        for k in 0..cases.len() {
            let case = (round + k) % cases.len();
            let t = Instant::now();
            for _ in 0..per_round {
                cases[case]();
            }
            times[case].push(t.elapsed().as_nanos() as f64 / f64::from(per_round));
        }
    }
    let ratios = |case: usize| -> Vec<f64> {
        times[case]
            .iter()
            .zip(&times[0])
            .map(|(t, empty)| t / empty)
            .collect()
    };
    let (floor_ratio, kspan_ratio, child_ratio, stranger_ratio) = (
        quartiles(ratios(1)),
        quartiles(ratios(2)),
        quartiles(ratios(3)),
        quartiles(ratios(4)),
    );
    let [empty, floor, kernel, kernel_child, kernel_stranger] = times.map(|t| quartiles(t)[1]);
    println!("span_build: {rounds} rounds x {per_round} calls; medians, ratios paired per round");
    println!("  baseline  empty span start+end                          {empty:7.1} ns/span");
    println!(
        "  floor     span with the same {} attributes, by hand       {floor:7.1} ns/span  {:.2}x  (quartiles {:.2}..{:.2})",
        reference.len(),
        floor_ratio[1],
        floor_ratio[0],
        floor_ratio[2]
    );
    println!(
        "  kspan     decode + handler + span, one record (a root)  {kernel:7.1} ns/record {:.2}x  (quartiles {:.2}..{:.2})",
        kspan_ratio[1], kspan_ratio[0], kspan_ratio[2]
    );
    println!(
        "  kspan     the same record under an application span     {kernel_child:7.1} ns/record {:.2}x  (quartiles {:.2}..{:.2})",
        child_ratio[1], child_ratio[0], child_ratio[2]
    );
    println!(
        "  kspan     ... under a parent not kept (worst case)       {kernel_stranger:7.1} ns/record {:.2}x  (quartiles {:.2}..{:.2})",
        stranger_ratio[1], stranger_ratio[0], stranger_ratio[2]
    );
    println!(
        "  ratio     {:.2}x (a root) and {:.2}x (a child) the empty span (target <= 1.5x); the record: 3 scalars, a 64-byte string, ret",
        kspan_ratio[1], child_ratio[1]
    );
}

/// First quartile, median, third quartile.
fn quartiles(mut v: Vec<f64>) -> [f64; 3] {
    v.sort_by(f64::total_cmp);
    let at = |q: usize| v[(v.len() - 1) * q / 4];
    [at(1), at(2), at(3)]
}
