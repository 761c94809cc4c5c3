//! The bench's consumer (issue 13, `--host --only consumer`): records
//! drained a second from a pre-filled ring buffer by kspan's whole
//! consumer path (records to OpenTelemetry spans, through the SDK's batch
//! processor into an exporter that discards) against a bare libbpf-rs
//! ring-buffer consumer of the same records (a callback that only reads
//! each one), from the same BPF object, programs and probe (`getppid`).
//!
//! A second baseline, `bare_spans`, is the same bare consumer turning each
//! record into the same span with the SDK's `SpanBuilder` through the same
//! pipeline: what a hand-written records-to-spans consumer costs, so that
//! kspan's own share shows apart from the SDK's.
//!
//! Each side is a process of its own (the `consumer_kspan` and
//! `consumer_bare` examples) that fills the ring with its consumer held,
//! then times the drain, several fills a run; per round each side runs
//! once, in an order that alternates with the round. A fill whose records
//! were not all delivered (ring full, overload, the SDK's queue) voids the
//! run.

use std::collections::BTreeMap;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::util::{median, min_max, output};

/// The sides: a name, which program runs it (`consumer_bare`, then
/// `consumer_kspan`) and its extra argument; the baselines first. The last
/// is a breakdown: kspan's consumer without the SDK's batch processor and
/// exporter.
pub const SIDES: [(&str, usize, Option<&str>); 4] = [
    ("bare", 0, None),
    ("bare_spans", 0, Some("spans")),
    ("kspan", 1, None),
    ("kspan_no_export", 1, Some("no-export")),
];

/// How the bench runs.
pub struct Plan<'a> {
    /// The `consumer_bare` and `consumer_kspan` examples.
    pub programs: [&'a str; 2],
    pub rounds: u32,
    /// Records per fill (one more is the call that holds kspan's consumer).
    pub records: u32,
    /// Fills per run.
    pub fills: u32,
}

/// One run's figures: the medians of its fills.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Run {
    /// Records drained a second (wall time).
    pub rate: f64,
    /// CPU time of the process per record drained, in nanoseconds: not
    /// inflated while another process has the CPU.
    pub cpu_ns: f64,
}

/// One run's figures, from its `CONSUMER <side> records <n> ns <ns> cpu_ns
/// <ns> lost <n>` lines; fails on any loss.
pub fn parse_run(out: &str, side: &str, fills: u32) -> Result<Run> {
    let (mut rates, mut cpu) = (Vec::new(), Vec::new());
    for line in out.lines().filter(|l| l.starts_with("CONSUMER ")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let field = |name: &str| -> Option<f64> {
            let at = f.iter().position(|w| *w == name)?;
            f.get(at + 1)?.parse().ok()
        };
        let (Some(records), Some(ns), Some(cpu_ns), Some(lost)) = (
            field("records"),
            field("ns"),
            field("cpu_ns"),
            field("lost"),
        ) else {
            bail!("unreadable line: `{line}`");
        };
        if f[1] != side {
            bail!("`{line}` is not {side}'s");
        }
        if lost > 0.0 {
            bail!("`{line}`: records were lost during the fill or the drain; figures void");
        }
        rates.push(records / ns * 1e9);
        cpu.push(cpu_ns / records);
    }
    if rates.len() != fills as usize {
        bail!("{side}: {} fills, not {fills}:\n{out}", rates.len());
    }
    Ok(Run {
        rate: median(rates),
        cpu_ns: median(cpu),
    })
}

/// Side -> one run per round.
pub type Figures = BTreeMap<&'static str, Vec<Run>>;

/// Runs every round.
pub fn measure(p: &Plan) -> Result<Figures> {
    let mut figures = Figures::new();
    for round in 1..=p.rounds {
        let mut order = SIDES;
        if round % 2 == 0 {
            order.reverse();
        }
        for (side, program, extra) in order {
            let mut cmd = Command::new(p.programs[program]);
            cmd.args([p.records.to_string(), p.fills.to_string()]);
            cmd.args(extra);
            let out = output(&mut cmd).with_context(|| format!("the {side} consumer failed"))?;
            let run = parse_run(&out, side, p.fills)?;
            eprintln!(
                "round {round}: {side} {:.0} records/s, {:.1} ns of CPU a record",
                run.rate, run.cpu_ns
            );
            figures.entry(side).or_default().push(run);
        }
    }
    Ok(figures)
}

/// `<median><unit> [lo..hi]` of `v`.
fn spread(v: &[f64], digits: usize, unit: &str) -> String {
    let (lo, hi) = min_max(v);
    format!(
        "{:.digits$}{unit} [{lo:.digits$}..{hi:.digits$}]",
        median(v.to_vec())
    )
}

/// `<by rate> by rate, <by CPU> by CPU` of `runs` against `baseline`,
/// paired by round: above 1 is faster than the baseline.
fn ratios(runs: &[Run], baseline: &[Run]) -> String {
    let by_rate: Vec<f64> = runs
        .iter()
        .zip(baseline)
        .map(|(k, b)| k.rate / b.rate)
        .collect();
    let by_cpu: Vec<f64> = runs
        .iter()
        .zip(baseline)
        .map(|(k, b)| b.cpu_ns / k.cpu_ns)
        .collect();
    format!(
        "{} by rate, {} by CPU",
        spread(&by_rate, 3, "x"),
        spread(&by_cpu, 3, "x")
    )
}

/// The report's lines.
pub fn report(figures: &Figures, p: &Plan) -> Result<Vec<String>> {
    let get = |side: &str| -> Result<&Vec<Run>> {
        figures
            .get(side)
            .filter(|v| v.len() == p.rounds as usize)
            .with_context(|| format!("not {} figures for {side}", p.rounds))
    };
    let bare = get("bare")?;
    let bare_spans = get("bare_spans")?;
    let mut out = vec![format!(
        "consumer, natively: records drained from a ring buffer pre-filled with {} getppid \
         records ({} rounds of {} fills per side, alternating order; per run the median fill; \
         medians over the rounds, the rounds' range in brackets; no record lost); kspan/bare \
         is paired within a round (target >= 0.5x), and so is kspan/bare_spans:",
        p.records + 1,
        p.rounds,
        p.fills
    )];
    for (side, what) in [
        ("bare", "bare libbpf-rs consumer (reads each record)"),
        (
            "bare_spans",
            "bare libbpf-rs consumer -> SDK spans -> batch -> discard",
        ),
        (
            "kspan",
            "kspan -> SDK batch processor -> discarding exporter",
        ),
        (
            "kspan_no_export",
            "kspan -> SDK, no batch processor nor exporter",
        ),
    ] {
        let runs = get(side)?;
        let rates: Vec<f64> = runs.iter().map(|r| r.rate / 1e6).collect();
        let cpu: Vec<f64> = runs.iter().map(|r| r.cpu_ns).collect();
        let mut line = format!(
            "  {what:<52} {}, {} of CPU a record",
            spread(&rates, 2, " M records/s"),
            spread(&cpu, 0, " ns")
        );
        let baselines: &[(&str, &Vec<Run>)] = match side {
            "bare" => &[],
            "bare_spans" => &[("bare_spans/bare", bare)],
            "kspan" => &[("kspan/bare", bare), ("kspan/bare_spans", bare_spans)],
            _ => &[("kspan/bare", bare)],
        };
        for (name, baseline) in baselines {
            line += &format!("; {name} {}", ratios(runs, baseline));
        }
        out.push(line);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_its_median_fill_and_losses_void_it() {
        let out = "CONSUMER kspan records 1000 ns 1000000 cpu_ns 500000 lost 0\n\
                   noise\n\
                   CONSUMER kspan records 1000 ns 2000000 cpu_ns 2000000 lost 0\n\
                   CONSUMER kspan records 1000 ns 500000 cpu_ns 400000 lost 0\n";
        let run = parse_run(out, "kspan", 3).unwrap();
        assert_eq!((run.rate, run.cpu_ns), (1e6, 500.0));
        assert!(parse_run(out, "kspan", 2).is_err());
        assert!(parse_run(out, "bare", 3).is_err());
        let lost = out.replace("cpu_ns 400000 lost 0", "cpu_ns 400000 lost 3");
        assert!(parse_run(&lost, "kspan", 3).is_err());
    }

    #[test]
    fn the_ratios_are_paired_within_rounds() {
        let p = Plan {
            programs: ["b", "k"],
            rounds: 2,
            records: 99,
            fills: 1,
        };
        let run = |rate: f64, cpu_ns: f64| Run { rate, cpu_ns };
        let mut f = Figures::new();
        f.insert("bare", vec![run(10e6, 10.0), run(20e6, 20.0)]);
        f.insert("kspan", vec![run(5e6, 100.0), run(4e6, 100.0)]);
        f.insert("kspan_no_export", vec![run(8e6, 50.0), run(8e6, 50.0)]);
        f.insert("bare_spans", vec![run(10e6, 50.0), run(8e6, 200.0)]);
        let r = report(&f, &p).unwrap().join("\n");
        assert!(
            r.contains("kspan/bare 0.350x [0.200..0.500] by rate, 0.150x [0.100..0.200] by CPU"),
            "{r}"
        );
        assert!(
            r.contains("8.00 M records/s [8.00..8.00], 50 ns [50..50] of CPU"),
            "{r}"
        );
        assert!(
            r.contains(
                "kspan/bare_spans 0.500x [0.500..0.500] by rate, 1.250x [0.500..2.000] by CPU"
            ),
            "{r}"
        );
        f.insert("kspan", vec![run(5e6, 1.0)]);
        assert!(report(&f, &p).is_err());
    }
}
