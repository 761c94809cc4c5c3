//! The cost of a refused call (issue 13): what a traced `getppid` costs the
//! process that makes it when a filter in the kernel refuses it, against
//! the same call made into a span, summed only, and bpftrace testing the
//! same predicate; natively, with syscall sources (the host kernel runs
//! tracepoint programs). The `filter_cost` example is the measured process;
//! each round runs every mode once, in an order rotated by the round, so
//! that drift and order cancel out of the medians.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};

use crate::util::{cargo, run, Metadata};

/// The modes of `filter_cost`, the baseline first.
const MODES: [&str; 5] = ["none", "span", "filtered", "summed", "bpftrace"];

/// Calls per batch and batches per run: about 10 to 40 ms a batch natively.
const CALLS: u32 = 50_000;
const BATCHES: u32 = 12;

/// `cargo xtask bench --host --only filters [--rounds N]`.
pub fn bench_host(rounds: u32) -> Result<u8> {
    if !crate::util::is_root() {
        bail!("bench --only filters attaches probes: run it as root");
    }
    if crate::util::which("bpftrace").is_none() {
        bail!("bpftrace not found: run `cargo xtask deps`");
    }
    run(cargo().args([
        "build",
        "--release",
        "-p",
        crate::util::EXAMPLES_PKG,
        "--example",
        "filter_cost",
    ]))?;
    let program = Metadata::load()?
        .target_dir
        .join("release/examples/filter_cost");
    // mode -> (fastest batch ns per call, process CPU ns per call), per round.
    let mut figures: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    for round in 0..rounds as usize {
        for k in 0..MODES.len() {
            let mode = MODES[(k + round) % MODES.len()];
            let out = crate::util::output(std::process::Command::new(&program).args([
                mode,
                &CALLS.to_string(),
                &BATCHES.to_string(),
            ]))
            .with_context(|| format!("filter_cost {mode}"))?;
            let figure =
                parse(&out, mode).with_context(|| format!("filter_cost {mode} printed: {out}"))?;
            figures.entry(mode).or_default().push(figure);
        }
    }
    let kernel = crate::util::output(std::process::Command::new("uname").arg("-r"))?;
    println!(
        "host ({}), {rounds} rounds of {BATCHES} x {CALLS} getppid calls per mode, \
         `{}`:",
        kernel.trim(),
        program.display()
    );
    println!("{}", report(&figures).join("\n"));
    Ok(0)
}

/// `FILTER-COST <mode> min <ns> cpu <ns>`.
fn parse(out: &str, mode: &str) -> Option<(f64, f64)> {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("FILTER-COST {mode} ")))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        [_, _, "min", min, "cpu", cpu] => Some((min.parse().ok()?, cpu.parse().ok()?)),
        _ => None,
    }
}

/// Per mode the medians and the added cost over `none` (CPU of the whole
/// process per call, the consumer's and the SDK's included; and the
/// fastest batch's time per call on the calling thread), then the ratios
/// the issue asks for.
fn report(figures: &BTreeMap<&str, Vec<(f64, f64)>>) -> Vec<String> {
    let med = |mode: &str, pick: fn(&(f64, f64)) -> f64| match figures.get(mode) {
        Some(v) if !v.is_empty() => crate::util::median(v.iter().map(pick).collect()),
        _ => f64::NAN,
    };
    let mut lines = vec![format!(
        "  {:<10} {:>12} {:>12} {:>12} {:>12}",
        "mode", "cpu ns/call", "added cpu", "thread ns", "added"
    )];
    let (base_cpu, base_min) = (med("none", |f| f.1), med("none", |f| f.0));
    for mode in MODES {
        let (cpu, min) = (med(mode, |f| f.1), med(mode, |f| f.0));
        lines.push(format!(
            "  {mode:<10} {cpu:>12.1} {:>12.1} {min:>12.1} {:>12.1}",
            cpu - base_cpu,
            min - base_min
        ));
    }
    let added = |mode: &str| med(mode, |f| f.1) - base_cpu;
    lines.push(format!(
        "  refused / exported span (added CPU): {:.2}x (target <= 0.5x)",
        added("filtered") / added("span")
    ));
    lines.push(format!(
        "  refused / bpftrace's same predicate (added CPU): {:.2}x (target <= 1.0x)",
        added("filtered") / added("bpftrace")
    ));
    lines.push(format!(
        "  summed only / exported span (added CPU): {:.2}x",
        added("summed") / added("span")
    ));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_and_ratios_come_from_medians() {
        assert_eq!(
            parse("noise\nFILTER-COST span min 800.5 cpu 1400.0\n", "span"),
            Some((800.5, 1400.0))
        );
        assert_eq!(parse("FILTER-COST span min x cpu 1\n", "span"), None);
        let mut figures = BTreeMap::new();
        figures.insert("none", vec![(100.0, 200.0), (100.0, 200.0), (500.0, 900.0)]);
        figures.insert("span", vec![(900.0, 1200.0)]);
        figures.insert("filtered", vec![(300.0, 500.0)]);
        figures.insert("summed", vec![(300.0, 600.0)]);
        figures.insert("bpftrace", vec![(300.0, 800.0)]);
        let lines = report(&figures).join("\n");
        assert!(
            lines.contains("refused / exported span (added CPU): 0.30x"),
            "{lines}"
        );
        assert!(
            lines.contains("bpftrace's same predicate (added CPU): 0.50x"),
            "{lines}"
        );
    }
}
