// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Two traced functions where one calls the other: `ksys_read` (the read
//! system call's body) calls `vfs_read`, so every read is a `ksys_read` span
//! with a `vfs_read` child.
//!
//! `nested [PATH] [TIMES] [--buf BYTES]`, exported like the quickstart.

use std::process::ExitCode;

use kspan_examples::{init_telemetry, read_file, BoxError, ReadArgs};

/// The read system call's body.
#[kspan::kernel_span("ksys_read", mode = "fexit")]
fn ksys_read(fd: u32, count: usize, ret: isize) {}

/// The VFS read it calls.
#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn vfs_read(count: usize, ret: isize) {}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("nested: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), BoxError> {
    let args = ReadArgs::parse(std::env::args().skip(1))?;
    let provider = init_telemetry("nested")?;
    let kspan = kspan::Kspan::builder(&provider)
        .probe(&ksys_read)
        .probe(&vfs_read)
        .start()?;
    let (calls, bytes) = {
        let span =
            tracing::info_span!("read_file", path = %args.path.display(), times = args.times);
        let _entered = span.enter();
        read_file(&args)?
    };
    let stats = kspan.shutdown().await?;
    println!(
        "nested: {calls} read calls, {bytes} bytes; kspan exported {} spans, lost {}",
        stats.spans_exported,
        stats.lost()
    );
    provider.shutdown()?;
    Ok(())
}
