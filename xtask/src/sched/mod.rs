//! `cargo xtask bench --host --only sched` (issue 27): what kspan's
//! scheduler account costs, natively on the host, side by side with
//! bpftrace in one run. Four parts, each runnable alone, one module each:
//!
//! * `sched-others` ([`others`]): an untraced process's context switches
//!   while another process holds the account or a bpftrace script.
//! * `sched-own` ([`own`]): the traced process's own switches, with the
//!   account attached in it or under bpftrace's offcputime-like script.
//! * `sched-service` ([`service`]): a traced service's requests a second
//!   with the account on against off.
//! * `sched-causes` ([`causes`], issue 41): the causes' own workloads
//!   (block reads, lock contention, spans) against nothing attached, the
//!   account alone, bpftrace's aggregation, and another process's account.
//!
//! Every round runs each configuration once, in an order rotated by the
//! round; the ratios are paired within a round, and the medians over the
//! rounds are printed with the rounds' range. A holder that does not come
//! up, a run whose tracer did not see its events, a lost record or span
//! fails the bench rather than print figures.
//!
//! `--prog-stats` adds one pass of the first two parts (and of the causes'
//! part) with `kernel.bpf_stats_enabled=1` (set back to what it was
//! afterwards): each BPF program's runs and run time during the loop, per
//! run. The statistics' own clock reads cost each run, so these passes are
//! not in the timings.
//!
//! # Shape
//!
//! The parts share their instruments, not their figures, so each part's
//! module holds what it runs, measures and reports, and the shared pieces
//! are modules of their own: [`pingpong`], the ping-pong loop of the first
//! two parts and its per-switch report; [`holder`], another process
//! holding probes while a loop runs; [`parse`], the one reader of the lines
//! the bench programs print. This module is the command: which parts run,
//! the statistics' pass and its per-program lines, running
//! `sched_pingpong`, and the arithmetic over rounds every report uses.

mod causes;
mod holder;
mod others;
mod own;
mod parse;
mod pingpong;
mod service;

use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::util::{median, min_max, output};

/// Which parts run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    All,
    Others,
    Own,
    Service,
    Causes,
}

impl Part {
    /// From `--only`'s value.
    pub fn parse(only: &str) -> Option<Part> {
        match only {
            "sched" => Some(Part::All),
            "sched-others" => Some(Part::Others),
            "sched-own" => Some(Part::Own),
            "sched-service" => Some(Part::Service),
            "sched-causes" => Some(Part::Causes),
            _ => None,
        }
    }

    fn has(self, part: Part) -> bool {
        self == Part::All || self == part
    }
}

/// The three example programs.
pub struct Programs {
    pub idle: String,
    pub pingpong: String,
    pub service: String,
}

/// `cargo xtask bench --host --only sched...`.
pub fn bench(programs: &Programs, rounds: u32, part: Part, prog_stats: bool) -> Result<u8> {
    if crate::util::which("bpftrace").is_none() && part != Part::Service {
        bail!("bpftrace not found: run `cargo xtask deps`");
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pins: Vec<usize> = if cpus > 1 { vec![0, cpus - 1] } else { vec![0] };
    if part.has(Part::Others) {
        let figures = others::measure(programs, rounds, &pins)?;
        println!("{}", others::report(&figures, rounds, &pins).join("\n"));
    }
    if part.has(Part::Own) {
        let figures = own::measure(programs, rounds, &pins)?;
        println!("{}", own::report(&figures, rounds, &pins).join("\n"));
    }
    if part.has(Part::Service) {
        let (work, switches) = service::calibrate(programs)?;
        let figures = service::measure(programs, rounds, work)?;
        println!(
            "{}",
            service::report(&figures, rounds, work, switches)?.join("\n")
        );
    }
    if part.has(Part::Causes) {
        let figures = causes::measure(programs, rounds)?;
        println!("{}", causes::report(&figures, rounds).join("\n"));
    }
    let mut lines = Vec::new();
    if prog_stats && part != Part::Service {
        let _stats = BpfStats::enable()?;
        let cpu = pins[pins.len() - 1];
        if part.has(Part::Others) || part.has(Part::Own) {
            lines.push(pingpong::prog_stats_heading(cpu));
        }
        if part.has(Part::Others) {
            lines.extend(others::prog_stats(programs, cpu)?);
        }
        if part.has(Part::Own) {
            lines.extend(own::prog_stats(programs, cpu)?);
        }
        if part.has(Part::Causes) {
            lines.extend(causes::prog_stats(programs)?);
        }
    }
    if !lines.is_empty() {
        println!("{}", lines.join("\n"));
    }
    Ok(0)
}

/// Sets `kernel.bpf_stats_enabled` to 1 and back to its value when dropped.
struct BpfStats {
    before: String,
}

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    fn enable() -> Result<BpfStats> {
        let before = std::fs::read_to_string(BPF_STATS)
            .with_context(|| format!("cannot read {BPF_STATS}"))?
            .trim()
            .to_owned();
        std::fs::write(BPF_STATS, "1").with_context(|| format!("cannot write {BPF_STATS}"))?;
        Ok(BpfStats { before })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(BPF_STATS, &self.before) {
            eprintln!("bench: cannot set {BPF_STATS} back to {}: {e}", self.before);
        }
    }
}

/// Runs `sched_pingpong ARGS` (`stats`: with a `PROG` line a BPF program
/// that ran, for the statistics' pass) and returns its output.
fn sched_pingpong(programs: &Programs, args: &[String], stats: bool) -> Result<String> {
    let mut cmd = Command::new(&programs.pingpong);
    cmd.args(args);
    if stats {
        cmd.env("KSPAN_BENCH_PROG_STATS", "1");
    }
    output(&mut cmd)
}

/// A run's `PROG` lines for the statistics' pass, under `what`: each
/// program's ns a run and its runs a unit (`units` of them in the run,
/// `unit` naming one, with `digits` decimals), then `total` of all
/// programs' ns a unit.
fn prog_lines(
    what: &str,
    out: &str,
    units: f64,
    unit: &str,
    digits: usize,
    total: impl FnOnce(f64) -> String,
) -> Vec<String> {
    let mut lines = vec![format!("  {what}:")];
    let mut per_unit = 0.0;
    for prog in parse::prog_runs(out) {
        let (id, name, runs, ns) = (prog.id, prog.name, prog.runs, prog.ns_per_run);
        per_unit += ns * runs / units;
        lines.push(format!(
            "    {name:<16} (id {id}) {ns:>8.1} ns a run, {:.digits$} runs {unit}",
            runs / units
        ));
    }
    if lines.len() == 1 {
        lines.push("    (no program ran)".into());
    } else {
        lines.push(total(per_unit));
    }
    lines
}

/// `[lo..hi]` of `v`, with `digits` decimals.
fn range(v: &[f64], digits: usize) -> String {
    let (lo, hi) = min_max(v);
    format!("[{lo:.digits$}..{hi:.digits$}]")
}

/// The median of `v` (NaN: none).
fn med(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        median(v.to_vec())
    }
}

/// Per-round ratios a/b.
fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x / y).collect()
}

/// The `q` quantile of `v` (0: the smallest), linear between ranks.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (rank - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles() {
        assert_eq!(quantile(&[4.0, 1.0, 3.0, 2.0, 5.0], 0.25), 2.0);
        assert_eq!(quantile(&[1.0, 2.0], 0.5), 1.5);
        assert_eq!(quantile(&[7.0], 0.25), 7.0);
        assert!(quantile(&[], 0.25).is_nan());
    }

    #[test]
    fn ranges_have_the_digits_asked_for() {
        assert_eq!(range(&[1.25, 0.5, 2.0], 2), "[0.50..2.00]");
        assert_eq!(range(&[1.25, 0.5, 2.0], 0), "[0..2]");
        assert_eq!(range(&[1.0126], 3), "[1.013..1.013]");
    }
}
