// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Reads one byte from `/dev/zero` N times and prints the time per `read`:
//! the workload of `cargo xtask bench`'s per-call figures. Each `read` is
//! one `vfs_read` call.
//!
//! `read_loop none|fexit|fexit-in-span|fexit-pair|fexit-single|kretprobe|kretprobe-pair|histogram
//! [N] [PAUSE_NS]`: `none` traces nothing (the baseline, and the command
//! bpftrace runs under its latency script); `fexit` and `kretprobe` trace
//! `vfs_read` with kspan, capturing two arguments and the return value,
//! with the consumer running (spans go to kspan's pipeline, whose
//! exporter discards them),
//! through the cheapest attachment the kernel has (fsession.multi,
//! kprobe.session), on a thread with no application span (each call
//! starts a trace); `fexit-in-span` is `fexit` with the loop inside an
//! application span, the calls its children; the `-pair` modes turn session programs off (fentry +
//! fexit, kprobe + kretprobe), `fexit-single` multi-function links (an
//! fsession link of its own); `histogram` counts every call in the
//! kernel's latency histogram and makes no spans (fexit). `PAUSE_NS`
//! (default 0) spins between reads, so that the rate of spans stays within
//! what the consumer builds: under emulation a bare loop makes spans faster
//! than one emulated CPU turns them into OpenTelemetry spans, and records
//! dropped at a full ring buffer would make the traced calls look cheaper
//! than they are. The pause is in the untraced baseline
//! too, so it cancels out of the added cost; `lost` (kspan's settled
//! figures, once the tracer provider is shut down) must be 0. A line
//! `read_loop: kspan: <figures>` follows.

use std::io::Read;
use std::process::ExitCode;
use std::time::Instant;

use opentelemetry::trace::{TraceContextExt as _, Tracer as _, TracerProvider as _};

use kspan_examples::hot::discard;

/// `vfs_read` through a BPF trampoline.
#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn read_fexit(file: *const u8, count: usize, ret: isize) {}

/// `vfs_read` through kprobes.
#[kspan::kernel_span("vfs_read", mode = "kretprobe")]
fn read_kretprobe(file: *const u8, count: usize, ret: isize) {}

/// `vfs_read` through a BPF trampoline, no spans: every call counted in the
/// kernel's latency histogram only.
#[kspan::kernel_span("vfs_read", mode = "fexit", spans = false, histogram)]
fn read_histogram(ret: isize) {}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mode = args.next();
    // The probe, and the mechanism turned off to compare with `auto`'s choice.
    let (probe, off): (Option<&'static kspan::Probe>, Option<kspan::Mechanism>) =
        match mode.as_deref() {
            Some("none") => (None, None),
            Some("fexit" | "fexit-in-span") => (Some(&read_fexit), None),
            Some("fexit-pair") => (Some(&read_fexit), Some(kspan::Mechanism::Sessions)),
            Some("fexit-single") => (Some(&read_fexit), Some(kspan::Mechanism::MultiLinks)),
            Some("kretprobe") => (Some(&read_kretprobe), None),
            Some("kretprobe-pair") => (Some(&read_kretprobe), Some(kspan::Mechanism::Sessions)),
            Some("histogram") => (Some(&read_histogram), None),
            other => {
                eprintln!(
                    "read_loop: mode {other:?}: expected `none`, `fexit`, `fexit-in-span`, \
                     `fexit-pair`, `fexit-single`, `kretprobe`, `kretprobe-pair` or `histogram`"
                );
                return ExitCode::from(2);
            }
        };
    let calls: u32 = match args.next().map(|n| n.parse()) {
        None => 200_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("read_loop: N must be a positive number of calls");
            return ExitCode::from(2);
        }
    };
    let pause = match args.next().map(|n| n.parse::<u64>()) {
        None => std::time::Duration::ZERO,
        Some(Ok(ns)) => std::time::Duration::from_nanos(ns),
        Some(Err(_)) => {
            eprintln!("read_loop: PAUSE_NS must be a whole number of nanoseconds");
            return ExitCode::from(2);
        }
    };
    // Room for a span of every call (and the loop's): the SDK drops none.
    let discarding = discard::provider(calls as usize + 1024);
    let provider = &discarding.provider;
    let kspan = match probe {
        Some(probe) => match {
            let builder = kspan::Kspan::builder(provider)
                .pipeline(&discarding.pipeline)
                .orphans(kspan::Orphans::NewTrace)
                .probe(probe);
            match off {
                Some(mechanism) => builder.disable(mechanism),
                None => builder,
            }
        }
        .start()
        {
            Ok(kspan) => Some(kspan),
            Err(e) => {
                eprintln!("read_loop: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    // The loop runs on a blocking thread, so that the consumer has the
    // runtime's worker to itself; in `fexit-in-span` inside an application
    // span, whose children the kernel spans become.
    let in_span = mode.as_deref() == Some("fexit-in-span");
    let tracer = provider.tracer("read_loop");
    let timed = tokio::task::spawn_blocking(move || -> std::io::Result<f64> {
        let _span = in_span
            .then(|| opentelemetry::Context::current_with_span(tracer.start("loop")).attach());
        let mut zero = std::fs::File::open("/dev/zero")?;
        let mut byte = [0u8; 1];
        let started = Instant::now();
        for _ in 0..calls {
            zero.read_exact(&mut byte)?;
            let paused = Instant::now();
            while paused.elapsed() < pause {
                std::hint::spin_loop();
            }
        }
        Ok(started.elapsed().as_nanos() as f64 / f64::from(calls))
    })
    .await;
    let ns_per_call = match timed {
        Ok(Ok(ns)) => ns,
        Ok(Err(e)) => {
            eprintln!("read_loop: reading /dev/zero: {e}");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("read_loop: {e}");
            return ExitCode::FAILURE;
        }
    };
    let settled = match kspan {
        Some(kspan) => {
            let shutdown = kspan.shutdown().await;
            let _ = provider.shutdown();
            match shutdown {
                Ok(stats) => Some(discarding.pipeline.ledger().final_figures(&stats)),
                Err(e) => {
                    eprintln!("read_loop: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        None => None,
    };
    let lost = settled.map_or(0, |s| s.lost());
    println!("READ-LOOP ns_per_call {ns_per_call:.1} calls {calls} lost {lost}");
    if let Some(stats) = settled {
        println!("read_loop: kspan: {stats}");
    }
    ExitCode::SUCCESS
}
