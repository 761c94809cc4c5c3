// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The traced service of the scheduler bench (`cargo xtask bench --host
//! --only sched`): requests per second with kspan's scheduler account on,
//! against the same service with it off.
//!
//! `sched_service off|tp_btf|tracepoint|tp_btf_totals|tp_btf_causes SECONDS WORK_ROUNDS`: two client
//! threads send requests, one at a time each, over a channel to a pool of
//! two worker threads, and wait for the reply. A client's call is an
//! application span (`call`), and the worker's handling of it a child span
//! (`request`) doing WORK_ROUNDS rounds of a 64-bit hash; every request is
//! two wake-ups (the worker's, the client's) and about two context switches
//! (a client blocks on its reply, a worker on the empty queue). Every span
//! goes through kspan's pipeline (`with_kspan`: its `KernelSums` processor
//! and the SDK's batch processor) into an exporter that discards, in every
//! mode; `tp_btf` and `tracepoint` turn
//! the account on with that mechanism, `tp_btf_totals` with BTF tracepoints
//! and no wait spans (the totals on each span only), `tp_btf_causes` with
//! BTF tracepoints and its causes (`SchedulerAccount::with_causes`, each of
//! which must be read on this kernel), `off` leaves it off
//! (kspan is not started; the context observer is registered all the same).
//!
//! After half a second of warm-up (not counted) and SECONDS, it prints `SCHED-SERVICE <mode> secs <s> requests <n>
//! cpu_ns <n> switches <n> spans <n> waits <n> accounted <n> lost <n>`:
//! requests done, the process's CPU time (every thread's), its context
//! switches (`getrusage`), the application spans the exporter got and the
//! account's wait spans (kspan's spans: off-CPU intervals of 1 ms or more,
//! the account's default, and with the causes kernel lock waits as long),
//! the application spans with switches summed by the account,
//! and the spans kspan lost (its settled figures, once the tracer provider
//! is shut down); with the account on, a line `sched_service: kspan:
//! <figures>` follows.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kspan::TracerProviderBuilderExt as _;
use kspan_examples::hot::load::work_unit;
use opentelemetry::trace::{TraceContextExt as _, Tracer, TracerProvider as _};
use opentelemetry::{Context, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchConfigBuilder, SdkTracerProvider, SpanData, SpanExporter};

const CLIENTS: usize = 2;
const WORKERS: usize = 2;
/// Requests before the measured SECONDS.
const WARM_UP: Duration = Duration::from_millis(500);

/// This program's tracer's name: the spans not of it are kspan's (its wait
/// spans).
const SCOPE: &str = "sched_service";

/// Counts the spans it is given, those the account put switches on, and
/// kspan's spans (the account's wait spans: off-CPU intervals of 1 ms or
/// more, and with the causes kernel lock waits), by name.
#[derive(Debug, Clone, Default)]
struct Count {
    spans: Arc<AtomicU64>,
    accounted: Arc<AtomicU64>,
    waits: Arc<AtomicU64>,
    waits_by_name: Arc<Mutex<std::collections::BTreeMap<String, u64>>>,
}

impl SpanExporter for Count {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let accounted = batch
            .iter()
            .filter(|s| {
                s.attributes.iter().any(|kv| {
                    kv.key.as_str() == kspan::sched::attributes::VOLUNTARY_SWITCHES
                        && matches!(kv.value, Value::I64(n) if n > 0)
                })
            })
            .count();
        let mut waits = 0;
        {
            let mut by_name = self.waits_by_name.lock().unwrap_or_else(|e| e.into_inner());
            for s in batch
                .iter()
                .filter(|s| s.instrumentation_scope.name() != SCOPE)
            {
                waits += 1;
                *by_name.entry(s.name.to_string()).or_default() += 1;
            }
        }
        self.spans.fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.waits.fetch_add(waits, Ordering::Relaxed);
        self.accounted
            .fetch_add(accounted as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// A client's call: its span's context, and which client waits.
struct Request {
    cx: Context,
    client: usize,
}

/// The process's CPU ns and context switches so far, every thread's.
fn usage() -> (u128, u64) {
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let ns = |t: libc::timeval| t.tv_sec as u128 * 1_000_000_000 + t.tv_usec as u128 * 1_000;
    (
        ns(usage.ru_utime) + ns(usage.ru_stime),
        (usage.ru_nvcsw + usage.ru_nivcsw) as u64,
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sched_service: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let usage_text =
        "usage: sched_service off|tp_btf|tracepoint|tp_btf_totals|tp_btf_causes SECONDS WORK_ROUNDS";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or_default();
    let account = kspan::SchedulerAccount::new();
    let account = match mode {
        "off" => None,
        "tp_btf" => Some(account.mechanism(kspan::SchedMechanism::BtfTracepoints)),
        "tracepoint" => Some(account.mechanism(kspan::SchedMechanism::Tracepoints)),
        "tp_btf_totals" => Some(
            account
                .mechanism(kspan::SchedMechanism::BtfTracepoints)
                .without_wait_spans(),
        ),
        "tp_btf_causes" => Some(
            account
                .mechanism(kspan::SchedMechanism::BtfTracepoints)
                .with_causes(),
        ),
        other => return Err(format!("mode `{other}`\n{usage_text}").into()),
    };
    let seconds = args
        .get(1)
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 3600.0)
        .ok_or_else(|| format!("SECONDS must be a number of seconds up to 3600\n{usage_text}"))?;
    let rounds = args
        .get(2)
        .and_then(|s| s.parse::<u32>().ok())
        .ok_or_else(|| format!("WORK_ROUNDS must be a number\n{usage_text}"))?;

    // Registered here, not only by kspan's start: the mode without the
    // account (`off`) publishes the same contexts, so that only what is
    // attached differs.
    kspan::context::register_observer()?;
    let count = Count::default();
    // Room for every span of a run: the SDK drops none (checked below).
    let pipeline = kspan::Pipeline::new().with_batch_config(
        BatchConfigBuilder::default()
            .with_max_queue_size(1 << 20)
            .build(),
    );
    let provider = SdkTracerProvider::builder()
        .with_kspan(&pipeline, count.clone())
        .build();
    let kspan = match account {
        Some(account) => Some(
            kspan::Kspan::builder(&provider)
                .pipeline(&pipeline)
                .scheduler_account(account)
                .start()?,
        ),
        None => None,
    };
    if let Some(kspan) = &kspan {
        for cause in kspan.scheduler_causes() {
            if let Err(why) = &cause.how {
                return Err(format!("the cause `{}` is not read: {why}", cause.cause).into());
            }
        }
    }
    let tracer = provider.tracer(SCOPE);

    let (queue_tx, queue_rx) = sync_channel::<Request>(CLIENTS);
    let queue_rx = Arc::new(Mutex::new(queue_rx));
    let mut reply_txs = Vec::new();
    let mut reply_rxs = Vec::new();
    for _ in 0..CLIENTS {
        let (tx, rx) = sync_channel::<u64>(1);
        reply_txs.push(tx);
        reply_rxs.push(rx);
    }
    let reply_txs = Arc::new(reply_txs);
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (queue, replies, tracer) = (queue_rx.clone(), reply_txs.clone(), tracer.clone());
            std::thread::spawn(move || worker(w as u64, &queue, &replies, &tracer, rounds))
        })
        .collect();
    drop(reply_txs);

    // The warm-up's one-time costs (map entries, thread records, the first
    // spans) are not in the figures: a service pays them once.
    let measured_from = Instant::now() + WARM_UP;
    let deadline = measured_from + Duration::from_secs_f64(seconds);
    let clients: Vec<_> = reply_rxs
        .into_iter()
        .enumerate()
        .map(|(client, replies)| {
            let (queue, tracer) = (queue_tx.clone(), tracer.clone());
            std::thread::spawn(move || {
                client_loop(client, &queue, &replies, &tracer, measured_from, deadline)
            })
        })
        .collect();
    drop(queue_tx);
    std::thread::sleep(measured_from.saturating_duration_since(Instant::now()));
    let (cpu0, switches0) = usage();
    let started = Instant::now();
    let mut requests = 0u64;
    let mut warm_up_requests = 0u64;
    for c in clients {
        let (warm_up, timed) = c.join().map_err(|_| "a client panicked")??;
        warm_up_requests += warm_up;
        requests += timed;
    }
    let secs = started.elapsed().as_secs_f64();
    let (cpu1, switches1) = usage();
    for w in workers {
        w.join().map_err(|_| "a worker panicked")?;
    }

    let shutdown = match kspan {
        Some(k) => Some(k.shutdown().await),
        None => None,
    };
    provider.force_flush()?;
    let shut = provider.shutdown();
    let settled = match shutdown {
        Some(shutdown) => Some(pipeline.ledger().final_figures(&shutdown?)),
        None => None,
    };
    shut?;
    let lost = settled.map_or(0, |s| s.lost());
    let waits = count.waits.load(Ordering::Relaxed);
    let spans = count.spans.load(Ordering::Relaxed) - waits;
    if spans != 2 * (requests + warm_up_requests) {
        return Err(format!(
            "the exporter got {spans} spans (and {waits} wait spans) for {requests} requests \
             (two each): the SDK dropped some"
        )
        .into());
    }
    println!(
        "SCHED-SERVICE {mode} secs {secs:.3} requests {requests} cpu_ns {} switches {} \
         spans {spans} waits {waits} accounted {} lost {lost}",
        cpu1 - cpu0,
        switches1 - switches0,
        count.accounted.load(Ordering::Relaxed)
    );
    if let Some(stats) = settled {
        println!("sched_service: kspan: {stats}");
    }
    let by_name = count
        .waits_by_name
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if !by_name.is_empty() {
        let names: Vec<String> = by_name.iter().map(|(n, c)| format!("{n} {c}")).collect();
        println!("sched_service: kspan's spans: {}", names.join(", "));
    }
    Ok(())
}

/// Sends requests until `deadline`, one at a time, each inside a `call`
/// span, and returns how many were answered before `measured_from` and
/// after it.
fn client_loop(
    client: usize,
    queue: &SyncSender<Request>,
    replies: &Receiver<u64>,
    tracer: &opentelemetry_sdk::trace::SdkTracer,
    measured_from: Instant,
    deadline: Instant,
) -> Result<(u64, u64), String> {
    let (mut warm_up, mut done) = (0u64, 0u64);
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ok((warm_up, done));
        }
        if now < measured_from {
            warm_up += 1;
        } else {
            done += 1;
        }
        tracer.in_span("call", |cx| -> Result<(), String> {
            queue
                .send(Request { cx, client })
                .map_err(|_| "the workers are gone".to_owned())?;
            replies
                .recv()
                .map(|_| ())
                .map_err(|_| "no reply".to_owned())
        })?;
    }
}

/// Serves requests until the queue closes: each one a `request` span, the
/// child of the client's call, doing `rounds` rounds of work.
fn worker(
    id: u64,
    queue: &Mutex<Receiver<Request>>,
    replies: &[SyncSender<u64>],
    tracer: &opentelemetry_sdk::trace::SdkTracer,
    rounds: u32,
) {
    let mut state = id;
    loop {
        let next = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
        let Ok(request) = next else {
            return;
        };
        let Request { cx: parent, client } = request;
        let span = tracer.start_with_context("request", &parent);
        let cx = parent.with_span(span);
        // The client's span ends in the client's thread, when its call returns.
        drop(parent);
        {
            let _attached = cx.attach();
            state = work_unit(state, rounds);
        }
        if let Some(reply) = replies.get(client) {
            let _ = reply.send(state);
        }
    }
}
