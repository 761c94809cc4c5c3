// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `kspan-jaeger [--otlp ADDR] [--ui ADDR] [--max-traces N]`: an embedded
//! Jaeger, with no container and nothing to install. It receives traces over
//! OTLP/gRPC into memory (the `otlp-embedded` crate) and serves the Jaeger
//! UI, with the part of Jaeger's HTTP API the UI uses, on `--ui`.
//!
//! It prints `kspan-jaeger: OTLP/gRPC on ADDR, Jaeger UI on http://ADDR/`
//! once both sockets are bound (port 0 picks a free one), then runs until it
//! is killed or interrupted. `cargo xtask jaeger` runs it on the host for the
//! file service in the VM; the VM test `vm_jaeger` runs it in the guest and
//! checks the span tree through its API.

use std::process::ExitCode;

use otlp_embedded::{ui_app, Config, State, TraceServiceImpl, TraceServiceServer};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

const USAGE: &str = "usage: kspan-jaeger [--otlp ADDR] [--ui ADDR] [--max-traces N]";

struct Args {
    otlp: String,
    ui: String,
    max_traces: u32,
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        otlp: "127.0.0.1:4317".into(),
        ui: "127.0.0.1:16686".into(),
        // Enough for a demo's requests and a test's, small enough for memory.
        max_traces: 1000,
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value; {USAGE}"));
        match arg.as_str() {
            "--otlp" => parsed.otlp = value("--otlp")?,
            "--ui" => parsed.ui = value("--ui")?,
            "--max-traces" => {
                let v = value("--max-traces")?;
                parsed.max_traces = v
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or(format!("--max-traces: `{v}` is not a positive number"))?;
            }
            other => return Err(format!("unknown argument `{other}`; {USAGE}")),
        }
    }
    Ok(parsed)
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("kspan-jaeger: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let args = parse_args(std::env::args().skip(1))?;
    let state = State::new(Config {
        max_length: args.max_traces,
        // 256 MiB: the oldest traces are evicted past it.
        max_memory_usage: 256 << 20,
    });
    let otlp = TcpListener::bind(&args.otlp)
        .await
        .map_err(|e| format!("--otlp {}: {e}", args.otlp))?;
    let ui = TcpListener::bind(&args.ui)
        .await
        .map_err(|e| format!("--ui {}: {e}", args.ui))?;
    let (otlp_addr, ui_addr) = (
        otlp.local_addr().map_err(|e| e.to_string())?,
        ui.local_addr().map_err(|e| e.to_string())?,
    );
    println!("kspan-jaeger: OTLP/gRPC on {otlp_addr}, Jaeger UI on http://{ui_addr}/");

    let collector = tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(TraceServiceImpl::new(
            state.clone(),
        )))
        .serve_with_incoming(TcpListenerStream::new(otlp));
    let viewer = axum::serve(ui, ui_app(state, "/"));
    tokio::select! {
        served = collector => served.map_err(|e| format!("the OTLP receiver failed: {e}")),
        served = viewer => served.map_err(|e| format!("the UI server failed: {e}")),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}
