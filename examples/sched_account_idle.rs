// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Holds kspan's scheduler account and nothing else, tracing only this
//! process (kspan's default), until SIGTERM or SIGINT or a number of
//! seconds: the "another process has the account on" side of the
//! scheduler bench (`cargo xtask bench --host --only sched`). Every context
//! switch and wake-up of the machine runs the account's BPF programs;
//! another process's return at the first check, and what that costs the
//! other process is the figure.
//!
//! `sched_account_idle tp_btf|tp_btf_causes|tracepoint [SECONDS]`: the
//! account attached with BTF tracepoints or classic ones
//! (`SchedulerAccount::mechanism`); `tp_btf_causes`: on BTF tracepoints
//! with its causes (`SchedulerAccount::with_causes`: the lock, block and
//! memory programs then run for every process's events too), each of
//! which must be read on this kernel (`Kspan::scheduler_causes`, printed as
//! `SCHED-IDLE cause <how>` lines before the ready line).
//!
//! Once attached it proves the account live: a 2 ms sleep inside an
//! application span must come back as sleeping time on that span (the
//! pipeline's `KernelSums` processor puts the kernel's totals on it as it
//! ends). Then it prints `SCHED-IDLE ready pid <pid> mechanism <m>
//! sleeping_ns <ns>` and idles; at the signal (or after SECONDS) it shuts
//! kspan and the tracer provider down and prints `SCHED-IDLE done
//! <figures>`, kspan's settled figures.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kspan::TracerProviderBuilderExt as _;
use opentelemetry::trace::{Tracer, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tokio::signal::unix::{signal, SignalKind};

/// Keeps the spans it is given, for the liveness check.
#[derive(Debug, Clone, Default)]
struct Keep(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Keep {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(batch);
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sched_account_idle: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mechanism, causes) = match args.first().map(String::as_str) {
        Some("tp_btf") => (kspan::SchedMechanism::BtfTracepoints, false),
        Some("tp_btf_causes") => (kspan::SchedMechanism::BtfTracepoints, true),
        Some("tracepoint") => (kspan::SchedMechanism::Tracepoints, false),
        other => {
            return Err(format!(
                "mechanism {other:?}: expected `tp_btf`, `tp_btf_causes` or `tracepoint` \
                 (usage: sched_account_idle tp_btf|tp_btf_causes|tracepoint [SECONDS])"
            )
            .into())
        }
    };
    let seconds = match args.get(1) {
        None => None,
        Some(s) => Some(
            s.parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .ok_or_else(|| format!("SECONDS `{s}` is not a positive number"))?,
        ),
    };
    // Signals are set up before "ready", so that none is missed after it.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;

    let kept = Keep::default();
    let pipeline = kspan::Pipeline::new();
    let provider = SdkTracerProvider::builder()
        .with_kspan(&pipeline, kept.clone())
        .build();
    let mut account = kspan::SchedulerAccount::new().mechanism(mechanism);
    if causes {
        account = account.with_causes();
    }
    let kspan = kspan::Kspan::builder(&provider)
        .pipeline(&pipeline)
        .scheduler_account(account)
        .start()?;
    for cause in kspan.scheduler_causes() {
        println!("SCHED-IDLE cause {cause}");
        if let Err(why) = &cause.how {
            return Err(format!("the cause `{}` is not read: {why}", cause.cause).into());
        }
    }

    // The proof that the programs run: a sleep inside a span is summed.
    provider
        .tracer("sched_account_idle")
        .in_span("liveness", |_| std::thread::sleep(Duration::from_millis(2)));
    provider.force_flush()?;
    let sleeping_ns = {
        let spans = kept.0.lock().unwrap_or_else(|e| e.into_inner());
        spans
            .iter()
            .find(|s| s.name == "liveness")
            .and_then(|s| {
                s.attributes
                    .iter()
                    .find(|kv| kv.key.as_str() == kspan::sched::attributes::SLEEPING_NS)
            })
            .and_then(|kv| match kv.value {
                Value::I64(v) => Some(v),
                _ => None,
            })
    };
    let sleeping_ns = match sleeping_ns {
        Some(ns) if ns > 0 => ns,
        other => {
            return Err(format!(
                "the account did not sum a 2 ms sleep inside a span (sleeping_ns {other:?}): \
                 its programs are not running"
            )
            .into())
        }
    };
    println!(
        "SCHED-IDLE ready pid {} mechanism {} sleeping_ns {sleeping_ns}",
        std::process::id(),
        kspan.scheduler_account().map_or("none", |m| m.as_str())
    );

    let timeout = async {
        match seconds {
            Some(s) => tokio::time::sleep(Duration::from_secs_f64(s)).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        () = timeout => {}
    }
    let shutdown = kspan.shutdown().await;
    let shut = provider.shutdown();
    let stats = pipeline.ledger().final_figures(&shutdown?);
    println!("SCHED-IDLE done {stats}");
    shut?;
    Ok(())
}
