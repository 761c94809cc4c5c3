// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Holds kspan probes attached, tracing only this process (kspan's default),
//! until SIGTERM or SIGINT: the "another process traces this call" side of
//! `cargo xtask bench`'s cost to other processes. Another process's calls
//! still run the probes' BPF programs, which return at the process check;
//! what that costs the other process is the figure.
//!
//! `hold_probes getppid|read|fexit|kretprobe`:
//! * `getppid`, `read`: syscall sources (the `sys_enter_*`/`sys_exit_*`
//!   tracepoints; they work on the host kernel too);
//! * `fexit`, `kretprobe`: `vfs_read` through trampolines or kprobes, with
//!   the captures of `read_loop`.
//!
//! Once attached it makes one call of the traced kind itself, so that the
//! final line proves the probes were live (`emitted` >= 1), prints
//! `HOLD-PROBES ready pid <pid>`, and idles. At the signal it shuts kspan
//! and the tracer provider down and prints `HOLD-PROBES done emitted <n>
//! handed <n> lost <n>` (records the kernel emitted, spans handed to
//! kspan's pipeline, whose exporter discards them, and spans lost, settled)
//! and `hold_probes: kspan: <figures>`.

use std::io::Read;
use std::process::ExitCode;

use kspan_examples::hot::discard;
use tokio::signal::unix::{signal, SignalKind};

/// `getppid` as a syscall source.
#[kspan::kernel_span(syscall = "getppid")]
fn sys_getppid(ret: i64) {}

/// `read` as a syscall source.
#[kspan::kernel_span(syscall = "read")]
fn sys_read(fd: u32, count: usize, ret: i64) {}

/// `vfs_read` through a BPF trampoline.
#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn read_fexit(file: *const u8, count: usize, ret: isize) {}

/// `vfs_read` through kprobes.
#[kspan::kernel_span("vfs_read", mode = "kretprobe")]
fn read_kretprobe(file: *const u8, count: usize, ret: isize) {}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hold_probes: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let probe: &'static kspan::Probe = match mode.as_str() {
        "getppid" => &sys_getppid,
        "read" => &sys_read,
        "fexit" => &read_fexit,
        "kretprobe" => &read_kretprobe,
        other => {
            return Err(format!(
                "mode `{other}`: expected `getppid`, `read`, `fexit` or `kretprobe`"
            )
            .into())
        }
    };
    // Signals are set up before "ready", so that none is missed after it.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    // This process's own calls only: the SDK's default queue holds them.
    let discarding = discard::provider(2048);
    let kspan = kspan::Kspan::builder(&discarding.provider)
        .pipeline(&discarding.pipeline)
        .probe(probe)
        // Explicit, so that this process's own call is recorded whatever the
        // default: it is the proof that the probes ran.
        .orphans(kspan::Orphans::NewTrace)
        .start()?;
    if mode == "getppid" {
        // SAFETY: getppid has no arguments and cannot fail.
        unsafe { libc::getppid() };
    } else {
        std::fs::File::open("/dev/zero")?.read_exact(&mut [0u8; 1])?;
    }
    println!("HOLD-PROBES ready pid {}", std::process::id());
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    let shutdown = kspan.shutdown().await;
    let shut = discarding.provider.shutdown();
    let stats = discarding.pipeline.ledger().final_figures(&shutdown?);
    println!(
        "HOLD-PROBES done emitted {} handed {} lost {}",
        stats.records_emitted,
        stats.spans_to_pipeline,
        stats.lost()
    );
    println!("hold_probes: kspan: {stats}");
    shut?;
    Ok(())
}
