// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A service making traced calls at a fixed rate: the measured side of
//! `cargo xtask bench --host --only hot` (issue 13).
//!
//! `traced_service VARIANT RATE SECONDS ROUNDS`: for SECONDS, the main
//! thread does units of CPU work (ROUNDS rounds of a 64-bit hash each) and,
//! between units, the `getppid` calls due at RATE calls a second; VARIANT
//! says how `getppid` is traced ([`VARIANTS`]): `untraced`, or `exported`
//! (every call a span, through kspan's consumer and kspan's pipeline, the
//! OpenTelemetry SDK's batch processor, to an exporter that discards, the
//! queue large enough that nothing is dropped). It prints
//!
//! `SERVICE <variant> rate <r> secs <s> units <n> calls <n> call_ns <ns>
//! thread_cpu_ns <ns> process_cpu_ns <ns> spans <n> lost <n>`
//!
//! `units` over the wall time is the service's throughput; `call_ns` the
//! time spent in the calls (each timed by the calling thread); the CPU
//! times are the service thread's and the whole process's (the consumer
//! and the exporter's thread are the difference), read once every span has
//! reached the pipeline. `spans` (handed to kspan's pipeline) must equal
//! `calls` when traced, and `lost` be 0: kspan's settled figures, once the
//! tracer provider is shut down, when every span handed is acknowledged by
//! the exporter or counted lost. A line `traced_service: kspan: <figures>`
//! follows.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use kspan_examples::hot::{discard, load};

/// Every call becomes a span.
#[kspan::kernel_span(syscall = "getppid")]
fn exported(ret: i64) {}

// What a call refused by a filter costs instead is `filter_cost`'s figure
// (`cargo xtask bench --host --only filters`).

/// Ring buffer bytes: room for 2 s of records at 100,000 calls a second
/// before kspan counts new calls as overload (at 31/32 of it), so that a
/// consumer that other processes keep from its CPU for a while on a shared
/// machine catches up rather than drops (which voids the run). The cost
/// of a call does not depend on the size.
const RING_BYTES: u32 = 64 << 20;

/// The variants by name: the probe on `getppid`, or none.
static VARIANTS: &[(&str, Option<&kspan::Probe>)] =
    &[("untraced", None), ("exported", Some(&exported))];

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("traced_service: {e}");
            ExitCode::FAILURE
        }
    }
}

struct Args {
    variant: &'static str,
    probe: Option<&'static kspan::Probe>,
    rate: u64,
    seconds: f64,
    rounds: u32,
}

fn args() -> Result<Args, BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> BoxError {
        let names: Vec<&str> = VARIANTS.iter().map(|(n, _)| *n).collect();
        format!(
            "usage: traced_service {} RATE SECONDS ROUNDS (positive numbers)",
            names.join("|")
        )
        .into()
    };
    let (variant, probe) = VARIANTS
        .iter()
        .find(|(name, _)| Some(*name) == args.first().map(String::as_str))
        .copied()
        .ok_or_else(usage)?;
    let number = |i: usize| {
        args.get(i)
            .and_then(|n| n.parse::<f64>().ok())
            .filter(|n| *n > 0.0)
            .ok_or_else(usage)
    };
    Ok(Args {
        variant,
        probe,
        rate: number(1)? as u64,
        seconds: number(2)?,
        rounds: number(3)? as u32,
    })
}

fn run() -> Result<(), BoxError> {
    let a = args()?;
    let calls_expected = (a.rate as f64 * a.seconds) as usize + 1;
    let discard::Discarding {
        provider, pipeline, ..
    } = discard::provider(calls_expected * 2);
    let kspan = match a.probe {
        Some(probe) => Some(
            kspan::Kspan::builder(&provider)
                .pipeline(&pipeline)
                .probe(probe)
                // The calls are made under no application span.
                .orphans(kspan::Orphans::NewTrace)
                .ring_buffer_size(RING_BYTES)
                .start()?,
        ),
        None => None,
    };

    let duration = Duration::from_secs_f64(a.seconds);
    let mut state = 1u64;
    let mut units = 0u64;
    let mut call_ns = 0u64;
    let (thread_cpu, process_cpu) = (load::thread_cpu_ns(), load::process_cpu_ns());
    let started = Instant::now();
    let mut pacer = load::Pacer::new(a.rate);
    let wall = loop {
        state = load::work_unit(state, a.rounds);
        units += 1;
        let now = Instant::now();
        for _ in 0..pacer.due(now) {
            let before = Instant::now();
            load::call();
            call_ns += before.elapsed().as_nanos() as u64;
        }
        // Every call due until the end is made, and timed.
        if now.duration_since(started) >= duration {
            break started.elapsed();
        }
    };
    let thread_cpu = load::thread_cpu_ns() - thread_cpu;
    let calls = pacer.made();

    let (figures, shut) = match kspan {
        Some(kspan) => {
            // Every span in the pipeline before the process's CPU time is
            // read: the consumer collects at least every 50 ms.
            let waited = Instant::now();
            loop {
                let s = kspan.stats()?;
                if s.spans_to_pipeline >= s.records_emitted || waited.elapsed() > duration {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            provider.force_flush()?;
            let process_cpu = load::process_cpu_ns() - process_cpu;
            let shutdown = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(kspan.shutdown());
            let shut = provider.shutdown();
            let stats = pipeline.ledger().final_figures(&shutdown?);
            report(&a, wall, units, calls, call_ns, thread_cpu, process_cpu);
            (Some(stats), shut)
        }
        None => {
            let process_cpu = load::process_cpu_ns() - process_cpu;
            report(&a, wall, units, calls, call_ns, thread_cpu, process_cpu);
            (None, provider.shutdown())
        }
    };
    // Settled: every span handed is acknowledged by the exporter or lost.
    let (spans, lost) = figures.map_or((0, 0), |s| (s.spans_to_pipeline, s.lost()));
    println!(" spans {spans} lost {lost}");
    if let Some(stats) = figures {
        println!("traced_service: kspan: {stats}");
    }
    std::hint::black_box(state);
    shut?;
    Ok(())
}

/// The start of the output line (the caller ends it).
fn report(
    a: &Args,
    wall: Duration,
    units: u64,
    calls: u64,
    call_ns: u64,
    thread_cpu: u64,
    process_cpu: u64,
) {
    print!(
        "SERVICE {} rate {} secs {:.6} units {units} calls {calls} call_ns {call_ns} \
         thread_cpu_ns {thread_cpu} process_cpu_ns {process_cpu}",
        a.variant,
        a.rate,
        wall.as_secs_f64()
    );
}
