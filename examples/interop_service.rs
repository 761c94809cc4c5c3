// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A service for readers outside the process (OTEP 4947 and 4719): its
//! tracer provider has a resource of its own and kspan's pipeline with a
//! [`kspan::context::ContextPublisher`] that copies `http.route` and
//! `http.request.method` into the thread records
//! ([`kspan::Pipeline::with_context_publisher`]), its spans go to an
//! exporter that discards them, and kspan runs with a syscall source. Three request threads each hold a request span
//! (attributes at creation); the third holds a database span under its
//! request (no route of its own: the record carries the request's), and
//! one thread holds no span.
//!
//! Each thread prints what it holds (`span TID TRACE SPAN ROUTE METHOD`
//! or `none TID`), then the service prints `ready` and waits, every thread
//! in its span, until its standard input closes: the readers' tests stop
//! it and read it meanwhile. Then it prints kspan's settled figures.

use std::io::{BufRead as _, Write as _};
use std::process::ExitCode;
use std::sync::{Arc, Barrier};

use opentelemetry::trace::{TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;

use kspan::TracerProviderBuilderExt as _;
use kspan_examples::hot::discard::DiscardExporter;
use kspan_examples::BoxError;

#[kspan::kernel_span(syscall = "getppid")]
fn getppid(ret: i64) {}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("interop_service: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), BoxError> {
    let publisher = kspan::context::ContextPublisher::new()
        .record_attributes(["http.route", "http.request.method"])?;
    let pipeline = kspan::Pipeline::new().with_context_publisher(publisher);
    let provider = SdkTracerProvider::builder()
        .with_resource(
            Resource::builder_empty()
                .with_attributes([
                    KeyValue::new("service.name", "interop-service"),
                    KeyValue::new("service.version", "1.2.3"),
                ])
                .build(),
        )
        // Nothing leaves the process: its readers read it from outside.
        .with_kspan(&pipeline, DiscardExporter::default())
        .build();
    let kspan = kspan::Kspan::builder(&provider)
        .pipeline(&pipeline)
        .probe(&getppid)
        .start()?;
    let tracer = provider.tracer("interop");

    let requests = [
        ("/users/{id}", "GET"),
        ("/orders", "POST"),
        ("/items/{id}", "GET"),
    ];
    // Every thread prints, then main prints `ready`; all wait for stdin.
    let printed = Arc::new(Barrier::new(requests.len() + 2));
    let release = Arc::new(Barrier::new(requests.len() + 2));
    let mut threads = Vec::new();
    for (i, (route, method)) in requests.into_iter().enumerate() {
        let (tracer, printed, release) = (tracer.clone(), printed.clone(), release.clone());
        threads.push(std::thread::spawn(move || {
            let request = tracer
                .span_builder(format!("{method} {route}"))
                .with_attributes([
                    KeyValue::new("http.route", route),
                    KeyValue::new("http.request.method", method),
                ])
                .start(&tracer);
            let request_cx = Context::new().with_span(request);
            let _request = request_cx.clone().attach();
            let current = if i == 2 {
                let db = tracer.start_with_context("SELECT items", &request_cx);
                Some(request_cx.with_span(db).attach())
            } else {
                None
            };
            let cx = Context::current();
            let sc = cx.span().span_context().clone();
            // A kernel span under it, so that kspan's own reader saw it too.
            // SAFETY: getppid has no preconditions.
            unsafe { libc::getppid() };
            println!(
                "span {} {} {} {route} {method}",
                kspan_examples::gettid(),
                sc.trace_id(),
                sc.span_id()
            );
            printed.wait();
            release.wait();
            drop(current);
        }));
    }
    {
        let (printed, release) = (printed.clone(), release.clone());
        threads.push(std::thread::spawn(move || {
            kspan::context::publish_current();
            println!("none {}", kspan_examples::gettid());
            printed.wait();
            release.wait();
        }));
    }
    printed.wait();
    println!("ready");
    std::io::stdout().flush()?;
    // Until the reader is done: standard input closes.
    for line in std::io::stdin().lock().lines() {
        line?;
    }
    release.wait();
    for t in threads {
        t.join().map_err(|_| "a thread panicked")?;
    }
    let settled = kspan_examples::shut_down(kspan, &provider, &pipeline).await?;
    println!("interop_service: kspan: {}", settled.stats);
    settled.result()
}
