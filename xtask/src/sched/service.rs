//! `sched-service`: what the account costs a traced service under load, in
//! requests a second.
//!
//! `sched_service` (two clients, a pool of two workers over a channel, a
//! span per call and per request) runs with the account off, on (BTF
//! tracepoints, classic tracepoints, BTF tracepoints without wait spans,
//! with the causes) for a fixed time each. The service's work a request is
//! calibrated first so that, with the account off, it switches about
//! [`SWITCHES_PER_SEC`] times a second on this machine: the account's cost
//! goes with the switches, so a fixed work would measure another load on
//! a faster or slower machine. Requests a CPU second are reported beside
//! requests a second: they do not count the time other processes took the
//! service's CPUs.

use std::collections::BTreeMap;
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::parse::{parse_service, Service};
use super::{med, quantile, range, ratios, Programs};
use crate::util::output;

/// Seconds a run.
const RUN_SECS: f64 = 2.0;
/// The service's context switches a second the target is set at: its work
/// per request is calibrated to it (see [`calibrate`]).
const SWITCHES_PER_SEC: f64 = 10_000.0;
/// The work per request the calibration starts from.
const WORK_ROUNDS_START: u32 = 60_000;
/// Calibration runs: the first from the start, each later one from the
/// rate the one before it measured.
const CALIBRATION_RUNS: usize = 3;
/// Seconds a calibration run.
const CALIBRATION_SECS: f64 = 1.0;

/// The modes, the baseline first (`tp_btf_totals`: BTF tracepoints without
/// wait spans).
const MODES: [&str; 5] = [
    "off",
    "tp_btf",
    "tracepoint",
    "tp_btf_totals",
    "tp_btf_causes",
];

/// mode -> one figure per round.
pub type Figures = BTreeMap<String, Vec<Service>>;

/// The work per request (hash rounds) at which the service, with the
/// account off, switches [`SWITCHES_PER_SEC`] times a second on this
/// machine, and the rate the last calibration run measured. A request's
/// switches are fixed (about three), so the rate goes as the inverse of its
/// work: each run scales the work by what it measured.
pub fn calibrate(programs: &Programs) -> Result<(u32, f64)> {
    let mut work = WORK_ROUNDS_START;
    let mut switches = 0.0;
    for _ in 0..CALIBRATION_RUNS {
        let out = output(Command::new(&programs.service).args([
            "off".to_owned(),
            CALIBRATION_SECS.to_string(),
            work.to_string(),
        ]))?;
        switches = parse_service(&out, "off")?.switches_per_sec;
        work = scaled_work(work, switches)?;
    }
    eprintln!(
        "sched-service: {work} hash rounds a request for {SWITCHES_PER_SEC} switches a second (the last calibration run: {switches:.0} a second)"
    );
    Ok((work, switches))
}

/// `work` scaled so that a run measured at `switches` a second would
/// switch [`SWITCHES_PER_SEC`] times a second.
fn scaled_work(work: u32, switches: f64) -> Result<u32> {
    if !(switches.is_finite() && switches > 0.0) {
        bail!("the service switched {switches} times a second: nothing to calibrate by");
    }
    let scaled = f64::from(work) * switches / SWITCHES_PER_SEC;
    Ok(scaled.clamp(1_000.0, 100_000_000.0) as u32)
}

/// Every round: each mode once, in an order rotated by the round.
pub fn measure(programs: &Programs, rounds: u32, work: u32) -> Result<Figures> {
    let mut figures = Figures::new();
    for round in 0..rounds as usize {
        for k in 0..MODES.len() {
            let mode = MODES[(k + round) % MODES.len()];
            let out = output(Command::new(&programs.service).args([
                mode.to_owned(),
                RUN_SECS.to_string(),
                work.to_string(),
            ]))?;
            figures
                .entry(mode.to_owned())
                .or_default()
                .push(parse_service(&out, mode)?);
        }
        eprintln!("sched-service: round {} of {rounds} done", round + 1);
    }
    Ok(figures)
}

pub fn report(
    figures: &Figures,
    rounds: u32,
    work: u32,
    calibrated_switches: f64,
) -> Result<Vec<String>> {
    let get = |mode: &str| -> Result<&Vec<Service>> {
        figures
            .get(mode)
            .with_context(|| format!("no figures for {mode}"))
    };
    let off = get("off")?;
    let mut lines = vec![format!(
        "a traced service under load: requests a second, the scheduler account on against off \
         (two clients, a pool of two workers over a channel, a span per call and per request, \
         {work} hash rounds a request, calibrated to {SWITCHES_PER_SEC:.0} switches a second with \
         the account off (the last calibration run: {calibrated_switches:.0}); {rounds} rounds of \
         {RUN_SECS} s per mode after \
         half a second of warm-up; tp_btf_totals: no wait spans; tp_btf_causes: with the causes):"
    )];
    for mode in MODES {
        let runs = get(mode)?;
        let per_sec: Vec<f64> = runs.iter().map(|s| s.per_sec).collect();
        let sw: Vec<f64> = runs.iter().map(|s| s.switches_per_sec).collect();
        let mut line = format!(
            "  {mode:<11} {:>7.0} requests/s {}, {:>6.0} switches/s",
            med(&per_sec),
            range(&per_sec, 0),
            med(&sw)
        );
        if mode != "off" {
            let wall = ratios(&per_sec, &off.iter().map(|s| s.per_sec).collect::<Vec<_>>());
            let cpu = ratios(
                &runs.iter().map(|s| s.per_cpu_sec).collect::<Vec<_>>(),
                &off.iter().map(|s| s.per_cpu_sec).collect::<Vec<_>>(),
            );
            // The upper quartiles: the rounds the shared machine left alone.
            let upper = |v: Vec<f64>| quantile(&v, 0.75);
            let q75 = upper(per_sec.clone()) / upper(off.iter().map(|s| s.per_sec).collect());
            let q75_cpu = upper(runs.iter().map(|s| s.per_cpu_sec).collect())
                / upper(off.iter().map(|s| s.per_cpu_sec).collect());
            line.push_str(&format!(
                "; on/off {:.3}x {} paired, {q75:.3}x of the upper quartiles (target >= 0.97x); \
                 per CPU second {:.3}x {} paired, {q75_cpu:.3}x of the upper quartiles",
                med(&wall),
                range(&wall, 2),
                med(&cpu),
                range(&cpu, 2)
            ));
        }
        if mode == "tp_btf_causes" {
            let account = get("tp_btf")?;
            let paired = ratios(
                &per_sec,
                &account.iter().map(|s| s.per_sec).collect::<Vec<_>>(),
            );
            let cpu = ratios(
                &runs.iter().map(|s| s.per_cpu_sec).collect::<Vec<_>>(),
                &account.iter().map(|s| s.per_cpu_sec).collect::<Vec<_>>(),
            );
            let q75 = quantile(&per_sec, 0.75)
                / quantile(&account.iter().map(|s| s.per_sec).collect::<Vec<_>>(), 0.75);
            line.push_str(&format!(
                "; against tp_btf (the account without its causes) {:.3}x {} paired, {q75:.3}x of \
                 the upper quartiles, per CPU second {:.3}x {} paired",
                med(&paired),
                range(&paired, 2),
                med(&cpu),
                range(&cpu, 2)
            ));
        }
        lines.push(line);
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_s_work_is_scaled_to_the_target_s_switch_rate() {
        // Measured at 25,000 a second: 2.5 times the work gives 10,000.
        assert_eq!(scaled_work(60_000, 25_000.0).unwrap(), 150_000);
        assert_eq!(scaled_work(60_000, 10_000.0).unwrap(), 60_000);
        // Bounded both ways, and no rate is refused.
        assert_eq!(scaled_work(60_000, 1e12).unwrap(), 100_000_000);
        assert_eq!(scaled_work(2_000, 1.0).unwrap(), 1_000);
        assert!(scaled_work(60_000, 0.0).is_err());
        assert!(scaled_work(60_000, f64::NAN).is_err());
    }
}
