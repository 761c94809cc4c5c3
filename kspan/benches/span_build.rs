// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What kspan adds per record in user space: decode + handler + span build,
//! for a `do_sys_openat2` record with three scalar captures (`dfd`, and the
//! `flags` and `mode` of `how`), one 64-byte string (the file name) and the
//! return value, against creating and ending an empty span with the same
//! tracer.
//!
//! `cargo bench -p kspan --bench span_build` prints both figures and their
//! ratio. Both run through the same SDK pipeline (a simple processor and an
//! exporter that keeps nothing), interleaved in rounds so that drift hits both
//! alike; each figure is the median of the rounds. Needs the kernel's BTF
//! (`/sys/kernel/btf/vmlinux`) to plan the probe, nothing else.

use std::hint::black_box;
use std::time::{Duration, Instant};

use kspan::btf::Btf;
use kspan::clock::ClockOffset;
use kspan::export::{parse_record, process};
use kspan::plan::plan_probe;
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

fn record(plan: &kspan::plan::ProbePlan) -> Vec<u8> {
    let mut header = kspan_bpf::types::kspan_record {
        trace_id: [7; 16],
        span_id: 0x1122_3344_5566_7788,
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

/// Median ns per call of `f` over `rounds` rounds of `per_round` calls.
fn per_call(samples: &mut [Duration], per_round: u32) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_nanos() as f64 / f64::from(per_round)
}

fn main() {
    let btf_blob =
        std::fs::read(kspan::KERNEL_BTF).expect("the kernel's BTF at /sys/kernel/btf/vmlinux");
    let btf = Btf::parse(&btf_blob).expect("valid BTF");
    let plan = plan_probe(&btf, &do_sys_openat2).expect("do_sys_openat2 plans on this kernel");
    let bytes = record(&plan);
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(DiscardExporter)
        .build();
    let tracer = provider.tracer("kspan-bench");
    let clock = ClockOffset::measure();

    // Check once that the record decodes into the span the bench claims.
    let view = parse_record(&bytes).expect("a whole record");
    assert_eq!(
        process(&plan, &view, &tracer, &clock),
        kspan::Outcome::Exported
    );

    let (rounds, per_round) = (41, 20_000u32);
    let mut empty = Vec::with_capacity(rounds);
    let mut same_attributes = Vec::with_capacity(rounds);
    // The SDK's own cost for a span carrying the same attributes, built by hand:
    // the floor any exporter of these values pays.
    let view = parse_record(&bytes).expect("a whole record");
    let reference: Vec<opentelemetry::KeyValue> = {
        let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
        let p = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        process(&plan, &view, &p.tracer("probe"), &clock);
        exporter.get_finished_spans().expect("one span")[0]
            .attributes
            .clone()
    };
    let mut kernel = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..per_round {
            let mut span = tracer.start("empty");
            span.end();
        }
        empty.push(t.elapsed());
        let t = Instant::now();
        for _ in 0..per_round {
            let attributes = reference.clone();
            let mut span = tracer
                .span_builder("do_sys_openat2")
                .with_attributes(attributes)
                .start(&tracer);
            span.end();
        }
        same_attributes.push(t.elapsed());
        let t = Instant::now();
        for _ in 0..per_round {
            let view = parse_record(black_box(&bytes)).expect("a whole record");
            black_box(process(&plan, &view, &tracer, &clock));
        }
        kernel.push(t.elapsed());
    }
    let empty = per_call(&mut empty, per_round);
    let kernel = per_call(&mut kernel, per_round);
    let floor = per_call(&mut same_attributes, per_round);
    println!("span_build: {rounds} rounds x {per_round} calls, medians");
    println!("  baseline  empty span start+end          {empty:8.1} ns/span");
    println!(
        "  floor     span with the same {} attributes, built by hand {floor:8.1} ns/span ({:.2}x)",
        reference.len(),
        floor / empty
    );
    println!("  kspan     decode + handler + span         {kernel:8.1} ns/record (3 scalars, a 64-byte string, ret)");
    println!(
        "  ratio     {:.2}x the empty span (target <= 1.5x)",
        kernel / empty
    );
    println!(
        "  of which  {:.2}x is the SDK's cost of the attributes, {:.2}x kspan's decode, handler and building",
        (floor - empty) / empty,
        (kernel - floor) / empty
    );
}
