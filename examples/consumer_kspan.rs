// SPDX-License-Identifier: Apache-2.0 OR MIT
//! kspan's consumer draining a pre-filled ring buffer: the kspan side of
//! `cargo xtask bench --host --only consumer` (issue 13); `consumer_bare`
//! is the other side.
//!
//! `consumer_kspan RECORDS FILLS`: kspan traces `getppid` (a syscall
//! source) into kspan's pipeline (`with_kspan`), whose batch processor
//! holds every span and whose exporter discards them
//! ([`kspan_examples::hot::discard`]). A first
//! processor, the gate, holds kspan's consumer inside its first span; the
//! program then makes RECORDS more `getppid` calls, so that their records
//! wait in the ring buffer, opens the gate and times until the exporter
//! has every span (a `force_flush` after the last one reached the
//! pipeline). Each of FILLS fills prints `CONSUMER kspan records <n> ns
//! <ns> cpu_ns <ns> lost <n>` (`cpu_ns`: the CPU time of every thread of
//! the process meanwhile: the consumer's, the SDK's export thread's, and
//! the waiting main thread's); `lost` counts every loss kspan knows (ring
//! buffer full, overload, the SDK's queue), and the exporter must have
//! every span. At the end it prints kspan's settled figures
//! (`consumer_kspan: kspan: <figures>`).
//!
//! With `no-export` as a third argument the gate is the only processor
//! (not kspan's pipeline): what kspan and the SDK's span building cost
//! without the batch processor's queue and export thread (the report's
//! breakdown).

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kspan_examples::hot::gate::{Gate, GateProcessor};
use kspan_examples::hot::{discard, load};

/// The traced call: `getppid` as a syscall source.
#[kspan::kernel_span(syscall = "getppid")]
fn sys_getppid(ret: i64) {}

/// Ring buffer bytes, the same on both sides: room for about 420,000
/// records of this probe (160 bytes with the ring's header), of which kspan
/// fills 31/32 before it counts new calls as overload.
const RING_BYTES: u32 = 64 << 20;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("consumer_kspan: {e}");
            ExitCode::FAILURE
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn run() -> Result<(), BoxError> {
    let (records, fills, export) = args()?;
    let gate = Arc::new(Gate::default());
    let discarding = export
        .then(|| discard::provider_with((records as usize + 1) * 2, GateProcessor(gate.clone())));
    let provider = match &discarding {
        Some(d) => d.provider.clone(),
        // Hand-made on purpose: the gate alone, without kspan's pipeline
        // (its batch processor's queue and export thread), for the
        // report's breakdown. kspan's figures then end at the pipeline
        // (it warns so at start).
        None => opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_id_generator(kspan::KernelSpanIds::default())
            .with_span_processor(GateProcessor(gate.clone()))
            .build(),
    };
    let mut builder = kspan::Kspan::builder(&provider);
    if let Some(d) = &discarding {
        builder = builder.pipeline(&d.pipeline);
    }
    let kspan = builder
        .probe(&sys_getppid)
        // The calls are made under no application span.
        .orphans(kspan::Orphans::NewTrace)
        .ring_buffer_size(RING_BYTES)
        // One thread makes every call: its records go to one worker,
        // and the bench measures one consumer against a bare one.
        .span_workers(1)
        .start()?;
    let received = || discarding.as_ref().map_or(0, |d| d.exporter.received());
    let mut before = kspan.stats()?;
    for _ in 0..fills {
        gate.close();
        // The consumer takes this call's span (within its 50 ms poll) and
        // stays in the gate.
        load::call();
        if !gate.wait_holding(Duration::from_secs(5)) {
            return Err("the consumer did not reach the gate within 5 s".into());
        }
        for _ in 0..records {
            load::call();
        }
        let target = gate.ended.load(Ordering::Relaxed) + u64::from(records);
        let received_target = if export {
            received() + u64::from(records) + 1
        } else {
            0
        };
        let cpu = load::process_cpu_ns();
        let started = Instant::now();
        gate.open();
        while gate.ended.load(Ordering::Relaxed) < target {
            if started.elapsed() > Duration::from_secs(30) {
                return Err("the consumer did not drain the ring buffer within 30 s".into());
            }
            // Polled with sleeps: a spinning thread here would take a CPU
            // from the consumer or the SDK's export thread (2 CPUs).
            std::thread::sleep(Duration::from_micros(250));
        }
        provider.force_flush()?;
        let took = started.elapsed();
        let cpu = load::process_cpu_ns() - cpu;
        let after = kspan.stats()?;
        let lost = after.lost() - before.lost();
        let missing = received_target.saturating_sub(received());
        println!(
            "CONSUMER {} records {} ns {} cpu_ns {cpu} lost {}",
            if export { "kspan" } else { "kspan_no_export" },
            records + 1,
            took.as_nanos(),
            lost + missing
        );
        before = after;
    }
    let shutdown = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(kspan.shutdown());
    let shut = provider.shutdown();
    let mut stats = shutdown?;
    if let Some(d) = &discarding {
        stats = d.pipeline.ledger().final_figures(&stats);
    }
    println!("consumer_kspan: kspan: {stats}");
    if stats.lost() > 0 {
        return Err(format!("kspan lost spans: {stats}").into());
    }
    shut?;
    Ok(())
}

/// `RECORDS FILLS [no-export]`: whether spans go on to the batch
/// processor and the exporter.
fn args() -> Result<(u32, u32, bool), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize| {
        args.get(i)
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| *n > 0)
    };
    match (number(0), number(1), args.get(2).map(String::as_str)) {
        (Some(records), Some(fills), None) => Ok((records, fills, true)),
        (Some(records), Some(fills), Some("no-export")) => Ok((records, fills, false)),
        _ => Err("usage: consumer_kspan RECORDS FILLS [no-export] (positive numbers)".into()),
    }
}
