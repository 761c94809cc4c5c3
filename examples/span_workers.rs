// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Exported spans a second against the number of span workers (issue 53).
//!
//! `span_workers WORKERS THREADS SECONDS`: THREADS threads call `getppid`
//! (a syscall source, traced on the host) unpaced for SECONDS, each under
//! an application span of its own, while kspan turns the records into
//! spans on WORKERS workers (`KspanBuilder::span_workers`) and hands them
//! to kspan's pipeline (`with_kspan`: the SDK's batch processor, a queue of
//! 65,536, an exporter that discards and counts). At the window's end it
//! prints what was made and exported meanwhile:
//!
//! `WORKERS <w> threads <t> seconds <s> calls <n> exported <n> declined <n>
//! lost_after <n> service_cpu_ns <ns> kspan_cpu_ns <ns>`
//!
//! (`exported`: spans the exporter had received by the window's end;
//! `declined`: calls the kernel did not record, the ring full or over the
//! overload threshold; `lost_after`: spans dropped in the SDK's queue;
//! `service_cpu_ns`: the calling threads' CPU time; `kspan_cpu_ns`: the
//! rest of the process's, kspan's threads and the SDK's export thread).
//! Then it shuts kspan and the provider down and checks that every call is
//! exported or counted: `calls = acknowledged + lost`, exactly.
//!
//! With `roots` as a fourth argument the calls are made under no
//! application span and each is a trace of its own (`Orphans::NewTrace`):
//! under valgrind, whose threads the kernel cannot read a thread context
//! of (the callgrind figures of BENCHMARKS.md).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kspan_examples::hot::{discard, load};
use opentelemetry::trace::{Tracer as _, TracerProvider as _};

/// The traced call: `getppid` as a syscall source.
#[kspan::kernel_span(syscall = "getppid")]
fn sys_getppid(ret: i64) {}

/// The SDK's queue: large enough that it drops little at a native rate.
const QUEUE: usize = 65_536;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("span_workers: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize, name: &str| -> Result<u64, BoxError> {
        args.get(i)
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| format!("usage: span_workers WORKERS THREADS SECONDS ({name})").into())
    };
    let (workers, threads, seconds) = (
        number(0, "WORKERS")? as usize,
        number(1, "THREADS")? as usize,
        number(2, "SECONDS")?,
    );
    let roots = args.get(3).map(String::as_str) == Some("roots");
    let discarding = discard::provider(QUEUE);
    let provider = discarding.provider.clone();
    let mut kspan = kspan::Kspan::builder(&provider)
        .pipeline(&discarding.pipeline)
        .probe(&sys_getppid)
        .span_workers(workers);
    if roots {
        kspan = kspan.orphans(kspan::Orphans::NewTrace);
    }
    let kspan = kspan.start()?;

    let go = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let service_cpu = Arc::new(AtomicU64::new(0));
    let callers: Vec<_> = (0..threads)
        .map(|i| {
            let (go, stop, calls, service_cpu) =
                (go.clone(), stop.clone(), calls.clone(), service_cpu.clone());
            let tracer = provider.tracer("span_workers");
            std::thread::spawn(move || {
                while !go.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                let cpu = load::thread_cpu_ns();
                let mut made = 0u64;
                let mut call = || {
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..64 {
                            load::call();
                        }
                        made += 64;
                    }
                };
                if roots {
                    call();
                } else {
                    tracer.in_span(format!("caller {i}"), |_| call());
                }
                calls.fetch_add(made, Ordering::Relaxed);
                service_cpu.fetch_add(load::thread_cpu_ns() - cpu, Ordering::Relaxed);
            })
        })
        .collect();
    let before = kspan.stats()?;
    let received_before = discarding.exporter.received();
    let cpu_before = load::process_cpu_ns();
    let started = Instant::now();
    go.store(true, Ordering::Release);
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    for c in callers {
        c.join().map_err(|_| "a calling thread panicked")?;
    }
    let window = started.elapsed();
    let exported = discarding.exporter.received() - received_before;
    let cpu = load::process_cpu_ns() - cpu_before;
    let during = kspan.stats()?;
    let calls = calls.load(Ordering::Relaxed);
    let service_cpu = service_cpu.load(Ordering::Relaxed);
    let declined = (during.dropped_ring_buffer_full + during.dropped_overload)
        - (before.dropped_ring_buffer_full + before.dropped_overload);
    println!(
        "WORKERS {workers} threads {threads} seconds {:.3} calls {calls} exported {exported} \
         declined {declined} lost_after {} service_cpu_ns {service_cpu} kspan_cpu_ns {}",
        window.as_secs_f64(),
        during.spans_dropped_before_export - before.spans_dropped_before_export,
        cpu.saturating_sub(service_cpu),
    );

    let stats = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(kspan.shutdown_with_provider())?;
    println!("span_workers: kspan: {stats}");
    // The application's spans are one per thread; every kernel call is
    // one span, acknowledged or counted lost.
    let settled = stats.spans_acknowledged + stats.lost();
    if settled != calls {
        return Err(format!(
            "{calls} calls made, but {} acknowledged + {} lost = {settled}: {stats}",
            stats.spans_acknowledged,
            stats.lost()
        )
        .into());
    }
    Ok(())
}
