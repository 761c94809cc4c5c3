// SPDX-License-Identifier: Apache-2.0 OR MIT
//! One binary across kernel versions: the unlink system call's body is
//! `do_unlinkat` up to 6.x and `filename_unlinkat` in 7.x, and one probe
//! names both; the first the running kernel has is traced. A second probe,
//! on a function no kernel has, is optional: the service starts without it
//! and says why.
//!
//! `unlinks DIR COUNT` makes COUNT files in DIR, then removes them and one
//! that does not exist (an `ENOENT` span) inside an application span
//! `remove_files`; prints one line per probe of the attach plan
//! (`plan\tFUNCTION\tHOOK\tpassed over: ...\tnot attached: ...`) and a
//! summary with `Stats::probes_not_attached` and kspan's settled figures;
//! exports over OTLP/gRPC to `OTEL_EXPORTER_OTLP_ENDPOINT`.

use std::path::PathBuf;
use std::process::ExitCode;

use kspan_examples::BoxError;

/// Each unlink: the directory fd it is relative to, the path as the kernel
/// copied it, and the result (an `int` on 6.x, a `long` on 5.10: `i64`
/// reads either).
#[kspan::kernel_span("do_unlinkat" | "filename_unlinkat", mode = "fexit")]
fn unlinkat(dfd: i32, #[capture(path = "name->name")] name: &str, ret: i64) {}

/// No kernel has this function: left out, with why.
#[kspan::kernel_span("kspan_example_no_such_function", mode = "fexit", optional)]
fn not_on_any_kernel(ret: i32) {}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("unlinks: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: unlinks DIR COUNT";
    let dir = PathBuf::from(args.next().ok_or(usage)?);
    let count: usize = args
        .next()
        .ok_or(usage)?
        .parse()
        .map_err(|_| format!("COUNT is a whole number; {usage}"))?;
    let telemetry = kspan_examples::init_telemetry("kspan-examples")?;
    let kspan = kspan::Kspan::builder(&telemetry.provider)
        .pipeline(&telemetry.pipeline)
        .probes([&unlinkat, &not_on_any_kernel])
        .start()?;
    for decision in kspan.attach_plan() {
        let passed_over: Vec<String> = decision
            .functions_passed_over
            .iter()
            .map(|(f, why)| format!("`{f}`: {why}"))
            .collect();
        println!(
            "plan\t{}\t{}\tpassed over: {}\tnot attached: {}",
            decision.function,
            decision.chosen,
            if passed_over.is_empty() {
                "-".to_owned()
            } else {
                passed_over.join("; ")
            },
            decision.not_attached.as_deref().unwrap_or("-")
        );
    }

    std::fs::create_dir_all(&dir)?;
    let files: Vec<PathBuf> = (0..count)
        .map(|i| dir.join(format!("unlink-{i}.txt")))
        .collect();
    for file in &files {
        std::fs::write(file, b"x")?;
    }
    let missing = dir.join("unlink-missing.txt");
    {
        let span = tracing::info_span!("remove_files", count);
        let _entered = span.enter();
        for file in &files {
            std::fs::remove_file(file)?;
        }
        if std::fs::remove_file(&missing).is_ok() {
            return Err(format!("{} existed", missing.display()).into());
        }
    }

    let settled = telemetry.shut_down(kspan).await?;
    println!(
        "unlinks: removed {count} files and 1 missing; {} probes not attached; kspan: {}",
        settled.stats.probes_not_attached, settled.stats
    );
    settled.result()?;
    Ok(())
}
