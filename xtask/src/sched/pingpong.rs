//! The ping-pong loop that `sched-others` and `sched-own` time:
//! `sched_pingpong processes|threads` ping-pongs a byte over two pipes
//! between two processes or two threads pinned to one CPU (two switches
//! and two wake-ups a round trip), and prints the fastest of its batches
//! (other processes only add time); and the report that sets each
//! configuration's added time a switch against the baseline, against the
//! bpftrace yardsticks, and against another configuration.
//!
//! One module for both parts: they differ in who holds the account
//! (another process, or the looping one) and in nothing they compute, so
//! their figures read the same way.

use std::collections::BTreeMap;

use anyhow::Result;

use super::parse::{parse_pingpong, Pingpong};
use super::{med, quantile, range, ratios, sched_pingpong, Programs};

/// Round trips a batch, batches a run: about 6 to 8 ms a batch natively,
/// short enough for some batches of a run to go undisturbed on a shared
/// machine (this one's speed shifts for tenths of a second at a time).
pub const ROUNDTRIPS: u32 = 2_000;
pub const BATCHES: u32 = 75;

/// (cpu, configuration) -> one figure per round.
pub type Figures = BTreeMap<(usize, String), Vec<Pingpong>>;

/// `sched_pingpong processes`: two processes, nothing attached in either
/// (`stats`: with its `PROG` lines).
pub fn processes(programs: &Programs, cpu: usize, stats: bool) -> Result<String> {
    let args = [
        "processes".to_owned(),
        cpu.to_string(),
        ROUNDTRIPS.to_string(),
        BATCHES.to_string(),
    ];
    sched_pingpong(programs, &args, stats)
}

/// `sched_pingpong threads MODE`: two threads of a process that attaches
/// `mode` (`stats`: with its `PROG` lines).
pub fn threads(programs: &Programs, mode: &str, cpu: usize, stats: bool) -> Result<String> {
    let args = [
        "threads".to_owned(),
        mode.to_owned(),
        cpu.to_string(),
        ROUNDTRIPS.to_string(),
        BATCHES.to_string(),
    ];
    sched_pingpong(programs, &args, stats)
}

/// The rounds' figures of `name` on `cpu` (none: none measured).
pub fn runs_of(figures: &Figures, cpu: usize, name: &str) -> Vec<Pingpong> {
    figures
        .get(&(cpu, name.to_owned()))
        .cloned()
        .unwrap_or_default()
}

/// What the report says of one configuration against the baseline: the
/// added ns a switch from the lower quartiles of the rounds' round trips,
/// from the fastest round, and paired within each round.
struct Added {
    rt_q25: f64,
    q25: f64,
    fastest: f64,
    paired: Vec<f64>,
}

fn added(runs: &[Pingpong], base: &[f64]) -> Added {
    let rt: Vec<f64> = runs.iter().map(|p| p.rt_ns).collect();
    let spr = med(&runs.iter().map(|p| p.switches_per_rt).collect::<Vec<_>>());
    Added {
        rt_q25: quantile(&rt, 0.25),
        q25: (quantile(&rt, 0.25) - quantile(base, 0.25)) / spr,
        fastest: (quantile(&rt, 0.0) - quantile(base, 0.0)) / spr,
        paired: runs
            .iter()
            .zip(base)
            .map(|(p, b)| (p.rt_ns - b) / p.switches_per_rt)
            .collect(),
    }
}

/// The lines of one CPU: the baseline, then per configuration its added
/// cost and, for kspan's, the ratios to each yardstick; then each of
/// `pairs`, a configuration against another (the causes against the
/// account alone), paired within each round.
pub fn comparison_lines(
    base: &[f64],
    spr: f64,
    configs: &[(&str, Vec<Pingpong>)],
    yardsticks: &[&str],
    pairs: &[(&str, &str)],
) -> Vec<String> {
    let mut lines = vec![format!(
        "    baseline: {:.0} ns a round trip (lower quartile of the rounds; fastest {:.0}, median {:.0}), \
         {spr:.2} switches a round trip",
        quantile(base, 0.25),
        quantile(base, 0.0),
        med(base)
    )];
    let all: Vec<(&str, Added)> = configs
        .iter()
        .map(|(name, runs)| (*name, added(runs, base)))
        .collect();
    let find = |name: &str| all.iter().find(|(n, _)| *n == name).map(|(_, a)| a);
    for (name, a) in &all {
        lines.push(format!(
            "    {name:<17} {:>6.0} ns a round trip; added a switch: {:>+5.0} ns (lower quartiles), \
             {:>+5.0} (fastest), {:>+5.0} {} (paired, median and range)",
            a.rt_q25,
            a.q25,
            a.fastest,
            med(&a.paired),
            range(&a.paired, 0)
        ));
        if yardsticks.contains(name) {
            continue;
        }
        for y in yardsticks {
            let Some(b) = find(y) else { continue };
            let paired = ratios(&a.paired, &b.paired);
            lines.push(format!(
                "      {name}/{y}: {:.2}x (lower quartiles), {:.2}x (fastest), {:.2}x {} (paired) (target <= 1.0x)",
                a.q25 / b.q25,
                a.fastest / b.fastest,
                med(&paired),
                range(&paired, 2)
            ));
        }
    }
    let runs = |name: &str| configs.iter().find(|(n, _)| *n == name).map(|(_, r)| r);
    for (name, reference) in pairs {
        let (Some(a), Some(b)) = (runs(name), runs(reference)) else {
            continue;
        };
        let rt = ratios(
            &a.iter().map(|p| p.rt_ns).collect::<Vec<_>>(),
            &b.iter().map(|p| p.rt_ns).collect::<Vec<_>>(),
        );
        let (added_a, added_b) = (added(a, base), added(b, base));
        let more: Vec<f64> = added_a
            .paired
            .iter()
            .zip(&added_b.paired)
            .map(|(x, y)| x - y)
            .collect();
        lines.push(format!(
            "    {name} against {reference}: a round trip {:.3}x {} (paired); added a switch {:.2}x \
             (lower quartiles), {:.2}x {} (paired); {:+.0} ns a switch (lower quartiles), {:+.0} {} (paired)",
            med(&rt),
            range(&rt, 3),
            added_a.q25 / added_b.q25,
            med(&ratios(&added_a.paired, &added_b.paired)),
            range(&ratios(&added_a.paired, &added_b.paired), 2),
            added_a.q25 - added_b.q25,
            med(&more),
            range(&more, 0)
        ));
    }
    lines
}

/// The heading of the statistics' pass over the loop, pinned to `cpu`.
pub fn prog_stats_heading(cpu: usize) -> String {
    format!(
        "BPF programs during the loop (kernel.bpf_stats_enabled=1, one pass, {} round trips, pinned to CPU {}; \
         runs on every CPU, ns a run as the statistics measure it):",
        ROUNDTRIPS * BATCHES,
        cpu
    )
}

/// The `PROG` lines of a loop's output, for the report: per round trip,
/// and all programs per switch.
pub fn prog_lines(what: &str, out: &str) -> Vec<String> {
    let rts = f64::from(ROUNDTRIPS * BATCHES);
    super::prog_lines(what, out, rts, "a round trip", 2, |per_rt| {
        let switches = parse_pingpong(out).map_or(f64::NAN, |p| p.switches_per_rt);
        format!(
            "    all programs: {per_rt:.0} ns a round trip, {:.0} ns a switch",
            per_rt / switches
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(rt: f64) -> Pingpong {
        Pingpong {
            rt_ns: rt,
            switches_per_rt: 2.0,
            switches: 1.0,
            traced: 1.0,
        }
    }

    #[test]
    fn added_cost_is_per_switch_and_paired() {
        // Adds 50 and 150 ns a switch over the baseline's round trips.
        let a = added(&[p(1100.0), p(2300.0)], &[1000.0, 2000.0]);
        assert_eq!(a.paired, vec![50.0, 150.0]);
        assert_eq!(a.fastest, 50.0);
        // Lower quartiles: 1400 against 1250.
        assert_eq!(a.q25, 75.0);
    }

    #[test]
    fn programs_are_reported_per_round_trip_and_per_switch() {
        let rts = f64::from(ROUNDTRIPS * BATCHES);
        let out = format!(
            "PROG 7 kspan_tp_sched_ runs {rts} ns_per_run 100.0\n\
             PROG 8 kspan_tp_sched_ runs {} ns_per_run 60.0\n\
             PINGPONG threads cpu 1 rt_ns 3000 median_rt_ns 3100 switches_per_rt 2.000 \
             switches 300000 traced_switches 300000\n",
            rts / 2.0
        );
        let lines = prog_lines("own, tp_btf", &out);
        assert_eq!(lines[0], "  own, tp_btf:");
        assert!(lines[1].contains("(id 7)    100.0 ns a run, 1.00 runs a round trip"));
        assert_eq!(
            lines[3],
            "    all programs: 130 ns a round trip, 65 ns a switch"
        );
        assert_eq!(prog_lines("x", "")[1], "    (no program ran)");
    }
}
