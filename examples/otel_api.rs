// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A service on the OpenTelemetry API alone, no `tracing`: README's set-up
//! with a kernel function (`vfs_read`, fexit) where README's uses a syscall
//! source. The file is read inside `read_file` (`tracer.in_span`) on the
//! main thread; then, on a thread of its own, under `read_file`'s context
//! attached there (`Context::attach`), and inside `worker_read` started on
//! that thread. kspan's context observer publishes each, so every
//! `vfs_read` is a child of the span it was made in.
//!
//! `otel_api [PATH] [TIMES] [--buf BYTES]`; prints what it read and the
//! worker's thread id.

use std::process::ExitCode;

use kspan::TracerProviderBuilderExt as _;
use opentelemetry::trace::{Tracer as _, TracerProvider as _};
use opentelemetry_sdk::trace::SdkTracerProvider;

use kspan_examples::{read_file, BoxError, ReadArgs};

#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn vfs_read(count: usize, ret: isize) {}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("otel_api: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), BoxError> {
    let args = ReadArgs::parse(std::env::args().skip(1))?;
    let pipeline = kspan::Pipeline::new();
    let provider = SdkTracerProvider::builder()
        .with_kspan(&pipeline, kspan_examples::otlp_exporter()?)
        .build();
    let kspan = kspan::Kspan::builder(&provider)
        .pipeline(&pipeline)
        .probe(&vfs_read)
        .start()?;
    let tracer = provider.tracer("otel-api");

    let (main_reads, worker) = tracer.in_span("read_file", |cx| {
        let main_reads = read_file(&args)?;
        let tracer = tracer.clone();
        let args = args.clone();
        let worker = std::thread::spawn(move || {
            // read_file's context, attached: this thread's reads are its
            // children, then worker_read's.
            let _attached = cx.attach();
            let attached_reads = read_file(&args)?;
            let own_reads = tracer.in_span("worker_read", |_| read_file(&args))?;
            Ok::<_, std::io::Error>((attached_reads, own_reads, kspan_examples::gettid()))
        });
        let worker = worker.join().map_err(|_| "the worker thread panicked")??;
        Ok::<_, BoxError>((main_reads, worker))
    })?;
    let ((attached_calls, _), (worker_calls, worker_bytes), worker_tid) = worker;

    let settled = kspan_examples::shut_down(kspan, &provider, &pipeline).await?;
    println!(
        "otel_api: main {} read calls, {} bytes; worker {worker_tid}: {attached_calls} attached \
         read calls, {worker_calls} read calls, {worker_bytes} bytes; kspan: {}",
        main_reads.0, main_reads.1, settled.stats
    );
    settled.result()
}
