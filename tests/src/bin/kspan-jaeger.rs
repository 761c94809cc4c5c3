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
//!
//! The UI takes a span's first reference for its parent, as Jaeger's own
//! API lists the parent (`CHILD_OF`) first; `otlp-embedded` lists a span's
//! links (`FOLLOWS_FROM`) before it, which would draw a span with a link
//! (a wait span linked to its waker's span) under the span it links to.
//! The API's answers are put in Jaeger's order on their way out.

use std::process::ExitCode;

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
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
    let viewer = axum::serve(
        ui,
        ui_app(state, "/").layer(axum::middleware::map_response(parent_first)),
    );
    tokio::select! {
        served = collector => served.map_err(|e| format!("the OTLP receiver failed: {e}")),
        served = viewer => served.map_err(|e| format!("the UI server failed: {e}")),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

/// `response` with every span's parent reference first, when it is JSON.
async fn parent_first(response: Response) -> Response {
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(e) => {
            let why = format!("kspan-jaeger: reading the answer failed: {e}");
            return (StatusCode::INTERNAL_SERVER_ERROR, why).into_response();
        }
    };
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    put_parents_first(&mut value);
    // The length changes with the rewrite (axum sets the new one).
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(value.to_string()))
}

/// Moves the `CHILD_OF` entry of every `references` list in `value` to its
/// front, keeping the others' order.
fn put_parents_first(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if key == "references" {
                    if let Some(refs) = v.as_array_mut() {
                        refs.sort_by_key(|r| r["refType"] != "CHILD_OF");
                    }
                } else {
                    put_parents_first(v);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(put_parents_first),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_comes_first_and_links_keep_their_order() {
        let mut answer = serde_json::json!({"data": [{"spans": [
            {"spanID": "w", "references": [
                {"refType": "FOLLOWS_FROM", "spanID": "waker"},
                {"refType": "FOLLOWS_FROM", "spanID": "other"},
                {"refType": "CHILD_OF", "spanID": "request"}
            ]},
            {"spanID": "r", "references": null}
        ]}]});
        put_parents_first(&mut answer);
        let refs: Vec<&str> = answer["data"][0]["spans"][0]["references"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["spanID"].as_str().unwrap())
            .collect();
        assert_eq!(refs, ["request", "waker", "other"]);
        assert!(answer["data"][0]["spans"][1]["references"].is_null());
    }
}
