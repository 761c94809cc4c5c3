//! The bench's consumer (issue 13, `--host --only consumer`): records
//! drained a second from a pre-filled ring buffer by kspan's whole
//! consumer path (records to OpenTelemetry spans, through the SDK's batch
//! processor into an exporter that discards) against a bare libbpf-rs
//! ring-buffer consumer of the same records (a callback that only reads
//! each one), from the same BPF object, programs and probe (`getppid`).
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
/// `consumer_kspan`) and its extra argument; the baseline first. The third
/// is a breakdown: kspan's consumer without the SDK's batch processor and
/// exporter.
pub const SIDES: [(&str, usize, Option<&str>); 3] = [
    ("bare", 0, None),
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

/// The median records a second of one run's fills, from its `CONSUMER
/// <side> records <n> ns <ns> lost <n>` lines; fails on any loss.
pub fn parse_run(out: &str, side: &str, fills: u32) -> Result<f64> {
    let mut rates = Vec::new();
    for line in out.lines().filter(|l| l.starts_with("CONSUMER ")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
        let (Some(records), Some(ns), Some(lost)) = (num(3), num(5), num(7)) else {
            bail!("unreadable line: `{line}`");
        };
        if f[1] != side {
            bail!("`{line}` is not {side}'s");
        }
        if lost > 0.0 {
            bail!("`{line}`: records were lost during the fill or the drain; figures void");
        }
        rates.push(records / ns * 1e9);
    }
    if rates.len() != fills as usize {
        bail!("{side}: {} fills, not {fills}:\n{out}", rates.len());
    }
    Ok(median(rates))
}

/// Records a second per side, one figure per round.
pub fn measure(p: &Plan) -> Result<BTreeMap<&'static str, Vec<f64>>> {
    let mut figures: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
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
            let rate = parse_run(&out, side, p.fills)?;
            eprintln!("round {round}: {side} {rate:.0} records/s");
            figures.entry(side).or_default().push(rate);
        }
    }
    Ok(figures)
}

/// The report's lines.
pub fn report(figures: &BTreeMap<&'static str, Vec<f64>>, p: &Plan) -> Result<Vec<String>> {
    let get = |side: &str| -> Result<&Vec<f64>> {
        figures
            .get(side)
            .filter(|v| v.len() == p.rounds as usize)
            .with_context(|| format!("not {} figures for {side}", p.rounds))
    };
    let (bare, kspan, alone) = (get("bare")?, get("kspan")?, get("kspan_no_export")?);
    let ratios: Vec<f64> = kspan.iter().zip(bare).map(|(k, b)| k / b).collect();
    let m = |v: &[f64]| -> Vec<f64> { v.iter().map(|r| r / 1e6).collect() };
    let (blo, bhi) = min_max(&m(bare));
    let (klo, khi) = min_max(&m(kspan));
    let (alo, ahi) = min_max(&m(alone));
    let (rlo, rhi) = min_max(&ratios);
    let ns = |v: &[f64]| 1e9 / median(v.to_vec());
    Ok(vec![
        format!(
            "consumer, natively: records drained a second from a ring buffer pre-filled with {} \
             getppid records ({} rounds of {} fills per side, alternating order; per run the \
             median fill, medians over the rounds, the rounds' range in brackets; no record lost):",
            p.records + 1,
            p.rounds,
            p.fills
        ),
        format!(
            "  bare libbpf-rs consumer (reads each record)            {:>7.2} M records/s [{blo:.2}..{bhi:.2}], {:.0} ns a record",
            median(m(bare)),
            ns(bare)
        ),
        format!(
            "  kspan -> OpenTelemetry SDK (batch, discarding exporter) {:>7.2} M records/s [{klo:.2}..{khi:.2}], {:.0} ns a record",
            median(m(kspan)),
            ns(kspan)
        ),
        format!(
            "  kspan -> SDK, no batch processor nor exporter           {:>7.2} M records/s [{alo:.2}..{ahi:.2}], {:.0} ns a record",
            median(m(alone)),
            ns(alone)
        ),
        format!(
            "  kspan/bare {:.3}x [{rlo:.3}..{rhi:.3}] (target >= 0.5x)",
            median(ratios.clone())
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_its_median_fill_and_losses_void_it() {
        let out = "CONSUMER kspan records 1000 ns 1000000 lost 0\n\
                   noise\n\
                   CONSUMER kspan records 1000 ns 2000000 lost 0\n\
                   CONSUMER kspan records 1000 ns 500000 lost 0\n";
        assert_eq!(parse_run(out, "kspan", 3).unwrap(), 1e6);
        assert!(parse_run(out, "kspan", 2).is_err());
        assert!(parse_run(out, "bare", 3).is_err());
        let lost = out.replace("ns 500000 lost 0", "ns 500000 lost 3");
        assert!(parse_run(&lost, "kspan", 3).is_err());
    }

    #[test]
    fn the_ratio_is_paired_within_rounds() {
        let p = Plan {
            programs: ["b", "k"],
            rounds: 2,
            records: 99,
            fills: 1,
        };
        let mut f = BTreeMap::new();
        f.insert("bare", vec![10e6, 20e6]);
        f.insert("kspan", vec![5e6, 4e6]);
        f.insert("kspan_no_export", vec![8e6, 8e6]);
        let r = report(&f, &p).unwrap().join("\n");
        assert!(r.contains("kspan/bare 0.350x [0.200..0.500]"), "{r}");
        assert!(
            r.contains("8.00 M records/s [8.00..8.00], 125 ns a record"),
            "{r}"
        );
        f.insert("kspan", vec![5e6]);
        assert!(report(&f, &p).is_err());
    }
}
