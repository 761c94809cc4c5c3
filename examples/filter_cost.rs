// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The traced side of `cargo xtask bench --only filters`: what a traced
//! `getppid` costs the process that makes it, when every call becomes a
//! span, when a filter in the kernel refuses every call, when every call is
//! only summed, and when bpftrace applies the same predicate.
//!
//! `filter_cost MODE CALLS BATCHES` makes BATCHES batches of CALLS
//! `getppid()` calls inside one application span, and prints
//! `FILTER-COST <mode> min <ns> cpu <ns>`: the time per call of the fastest
//! batch, and the process's CPU time (user and system, every thread: the
//! consumer and the SDK included) per call over the whole loop; on stderr,
//! kspan's settled figures. Modes:
//!
//! * `none`: nothing attached;
//! * `span`: every call a span, built and handed to kspan's pipeline (an
//!   SDK batch processor) whose exporter discards;
//! * `filtered`: `filter = "ret < 0"`, which refuses every call (getppid
//!   cannot fail) in the kernel at its exit;
//! * `summed`: `spans = false, sum`: every call summed onto the application
//!   span;
//! * `bpftrace`: bpftrace with the same hooks and the same predicate (the
//!   start time kept per thread at entry, the return value tested at exit),
//!   started here with this process's pid, nothing of kspan attached.

use std::process::{Child, ExitCode};
use std::time::Instant;

use kspan::TracerProviderBuilderExt as _;
use opentelemetry::trace::{Tracer, TracerProvider as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};

#[kspan::kernel_span(syscall = "getppid")]
fn every_call(ret: i64) {}

#[kspan::kernel_span(syscall = "getppid", filter = "ret < 0")]
fn refused(ret: i64) {}

#[kspan::kernel_span(syscall = "getppid", spans = false, sum)]
fn summed(ret: i64) {}

/// bpftrace's equivalent of `refused`: `$1` is the measured pid.
const BPFTRACE: &str = "tracepoint:syscalls:sys_enter_getppid /pid == $1/ { @s[tid] = nsecs; } \
     tracepoint:syscalls:sys_exit_getppid /pid == $1/ { $d = nsecs - @s[tid]; delete(@s[tid]); \
     if (args->ret < 0) { @h = hist($d); } } \
     BEGIN { printf(\"READY\\n\"); }";

/// An exporter that drops every batch: the cost measured is kspan's and the
/// SDK's, not a network's.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
        Ok(())
    }
}

fn cpu_ns() -> u128 {
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let ns = |t: libc::timeval| t.tv_sec as u128 * 1_000_000_000 + t.tv_usec as u128 * 1_000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

/// bpftrace on this process, once it says its probes are attached.
fn start_bpftrace() -> Result<Child, String> {
    use std::io::BufRead;
    let mut child = std::process::Command::new("bpftrace")
        .args(["-e", BPFTRACE, &std::process::id().to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run bpftrace: {e}"))?;
    let stdout = child.stdout.take().ok_or("bpftrace has no stdout")?;
    let ready = std::io::BufReader::new(stdout)
        .lines()
        .any(|line| line.is_ok_and(|l| l.trim() == "READY"));
    if !ready {
        let _ = child.kill();
        return Err("bpftrace exited before its probes were attached".into());
    }
    Ok(child)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize| {
        args.get(i)
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| *n > 0)
    };
    let (Some(mode), Some(calls), Some(batches)) = (args.first(), number(1), number(2)) else {
        eprintln!("usage: filter_cost none|span|filtered|summed|bpftrace CALLS BATCHES");
        return ExitCode::from(2);
    };
    let probe: Option<&'static kspan::Probe> = match mode.as_str() {
        "none" | "bpftrace" => None,
        "span" => Some(&every_call),
        "filtered" => Some(&refused),
        "summed" => Some(&summed),
        other => {
            eprintln!("filter_cost: unknown mode `{other}`");
            return ExitCode::from(2);
        }
    };
    let pipeline = kspan::Pipeline::new();
    let provider = SdkTracerProvider::builder()
        .with_kspan(&pipeline, Discard)
        .build();
    // Registered here rather than by `start`: the modes without kspan
    // (`none`, `bpftrace`) publish the loop's context all the same, so that
    // only what is attached differs.
    if let Err(e) = kspan::context::register_observer() {
        eprintln!("filter_cost: {e}");
        return ExitCode::FAILURE;
    }
    let kspan = match probe {
        Some(probe) => match kspan::Kspan::builder(&provider)
            .pipeline(&pipeline)
            .probe(probe)
            .start()
        {
            Ok(k) => Some(k),
            Err(e) => {
                eprintln!("filter_cost: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let bpftrace = if mode == "bpftrace" {
        match start_bpftrace() {
            Ok(child) => Some(child),
            Err(e) => {
                eprintln!("filter_cost: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };

    let tracer = provider.tracer("filter_cost");
    let cpu_before = cpu_ns();
    let mut fastest = f64::MAX;
    tracer.in_span("loop", |_| {
        for _ in 0..batches {
            let started = Instant::now();
            for _ in 0..calls {
                // SAFETY: no arguments, cannot fail.
                unsafe { libc::getppid() };
            }
            fastest = fastest.min(started.elapsed().as_nanos() as f64 / f64::from(calls));
        }
    });
    let cpu = (cpu_ns() - cpu_before) as f64 / (f64::from(calls) * f64::from(batches));

    if let Some(mut child) = bpftrace {
        let _ = child.kill();
        let _ = child.wait();
    }
    let shutdown = match kspan {
        Some(kspan) => Some(kspan.shutdown().await),
        None => None,
    };
    let _ = provider.shutdown();
    if let Some(shutdown) = shutdown {
        match shutdown {
            Ok(stats) => {
                let stats = pipeline.ledger().final_figures(&stats);
                eprintln!("filter_cost: kspan: {stats}");
            }
            Err(e) => {
                eprintln!("filter_cost: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!("FILTER-COST {mode} min {fastest:.1} cpu {cpu:.1}");
    ExitCode::SUCCESS
}
