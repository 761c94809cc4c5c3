//! The bench's traced service (issue 13, `--host --only hot`): a service's
//! throughput while it makes traced calls at a fixed rate, against the same
//! service untraced, and what each exported span adds per call.
//!
//! The `traced_service` example does units of CPU work and, between
//! them, `getppid` calls paced at 10,000 and 100,000 a second (a syscall
//! source: the host kernel runs no trampolines or kprobes), each call made
//! a span through kspan's consumer and the OpenTelemetry SDK's batch
//! processor into an exporter that discards (the `exported` variant), or
//! not traced (`untraced`). Per round and rate, each variant runs once, in
//! an order that alternates with the round; the throughput ratio and the
//! added costs are paired within a round, and the medians over the rounds
//! are printed with the rounds' range.

use std::collections::BTreeMap;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::util::{median, min_max, output};

/// The variants of `traced_service`, the baseline first.
// TODO(issue 13, filters): add "rejected" (a filter that rejects every
// call) and "rate_limited" once `traced_service` has them; the report then
// compares each one's added cost per call with an exported span's (target:
// a rejected call <= 0.5x).
pub const VARIANTS: &[&str] = &["untraced", "exported"];

/// Traced calls a second.
pub const RATES: [u64; 2] = [10_000, 100_000];

/// How the bench runs.
pub struct Plan<'a> {
    /// The `traced_service` example.
    pub service: &'a str,
    pub rounds: u32,
    /// Seconds per run.
    pub seconds: f64,
    /// Hash rounds per unit of work.
    pub work_rounds: u32,
}

/// One run's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Run {
    /// Units of work a second.
    pub units_per_sec: f64,
    /// Units of work per second of the service thread's CPU time: what
    /// the service got done when it ran, whatever else the machine ran.
    pub units_per_cpu_sec: f64,
    /// Wall seconds.
    pub secs: f64,
    /// Units of work done.
    pub units: f64,
    /// CPU time of the service thread, in nanoseconds.
    pub thread_cpu_ns: f64,
    pub calls: u64,
    /// Time in the call, per call, as the calling thread saw it.
    pub call_ns: f64,
    /// CPU time of the process's other threads (kspan's consumer, the
    /// SDK's exporter thread), per call.
    pub others_cpu_ns: f64,
    pub spans: u64,
    pub lost: u64,
}

/// Reads `SERVICE <variant> rate <r> secs <s> units <n> calls <n> call_ns
/// <ns> thread_cpu_ns <ns> process_cpu_ns <ns> spans <n> lost <n>`.
pub fn parse_line(line: &str) -> Result<(String, u64, Run)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let field = |name: &str| -> Result<f64> {
        f.iter()
            .position(|w| *w == name)
            .and_then(|i| f.get(i + 1)?.parse().ok())
            .with_context(|| format!("no `{name}` in `{line}`"))
    };
    if f.first() != Some(&"SERVICE") || f.len() < 2 {
        bail!("not a SERVICE line: `{line}`");
    }
    let calls = field("calls")?;
    if calls < 1.0 {
        bail!("no call made: `{line}`");
    }
    let run = Run {
        units_per_sec: field("units")? / field("secs")?,
        units_per_cpu_sec: field("units")? / field("thread_cpu_ns")? * 1e9,
        secs: field("secs")?,
        units: field("units")?,
        thread_cpu_ns: field("thread_cpu_ns")?,
        calls: calls as u64,
        call_ns: field("call_ns")? / calls,
        others_cpu_ns: (field("process_cpu_ns")? - field("thread_cpu_ns")?) / calls,
        spans: field("spans")? as u64,
        lost: field("lost")? as u64,
    };
    Ok((f[1].to_owned(), field("rate")? as u64, run))
}

/// (rate, variant) -> one run per round.
pub type Figures = BTreeMap<(u64, String), Vec<Run>>;

/// Runs every round; fails on a run that lost a span or did not export
/// every call.
pub fn measure(p: &Plan) -> Result<Figures> {
    let mut figures = Figures::new();
    for round in 1..=p.rounds {
        for rate in RATES {
            let mut order: Vec<&str> = VARIANTS.to_vec();
            if round % 2 == 0 {
                order.reverse();
            }
            for variant in order {
                let out = output(Command::new(p.service).args([
                    variant.to_owned(),
                    rate.to_string(),
                    p.seconds.to_string(),
                    p.work_rounds.to_string(),
                ]))?;
                let line = out
                    .lines()
                    .find(|l| l.starts_with("SERVICE "))
                    .with_context(|| format!("traced_service printed no figures: {out}"))?;
                let (name, got_rate, run) = parse_line(line)?;
                check(&name, variant, got_rate, rate, &run, line)?;
                eprintln!("round {round}: {line}");
                figures.entry((rate, name)).or_default().push(run);
            }
        }
    }
    Ok(figures)
}

fn check(name: &str, variant: &str, got_rate: u64, rate: u64, run: &Run, line: &str) -> Result<()> {
    if name != variant || got_rate != rate {
        bail!("asked for {variant} at {rate}/s, got `{line}`");
    }
    if run.lost > 0 {
        bail!("{line}: spans were lost, which makes traced calls look cheaper; figures void");
    }
    if variant != "untraced" && run.spans != run.calls {
        bail!("{line}: {} calls but {} spans", run.calls, run.spans);
    }
    // The pacing must have kept up: within 1% of the rate.
    if (run.calls as f64) < rate as f64 * run.secs * 0.99 {
        bail!("{line}: the service made fewer calls than its rate");
    }
    Ok(())
}

/// What an exported span adds per call to the service thread's CPU time,
/// from its CPU time and units of work in the two runs: untraced,
/// `T = W u + C c0` (units W of cost u, calls C of cost c0, timed around the
/// call); traced, `T' = W' u + C' (c0 + a)`. Unlike the time around the
/// call, it does not count the thread's waits while another process had
/// its CPU.
fn thread_added(traced: &Run, base: &Run) -> f64 {
    let c0 = base.call_ns;
    let unit = (base.thread_cpu_ns - base.calls as f64 * c0) / base.units;
    (traced.thread_cpu_ns - traced.units * unit) / traced.calls as f64 - c0
}

/// `[lo..hi]` of `v`.
fn range(v: &[f64], digits: usize) -> String {
    let (lo, hi) = min_max(v);
    format!("[{lo:.digits$}..{hi:.digits$}]")
}

/// The report's lines.
pub fn report(figures: &Figures, p: &Plan) -> Result<Vec<String>> {
    let get = |rate: u64, variant: &str| -> Result<&Vec<Run>> {
        let runs = figures
            .get(&(rate, variant.to_owned()))
            .with_context(|| format!("no figures for {variant} at {rate}/s"))?;
        if runs.len() != p.rounds as usize {
            bail!(
                "{} runs of {variant} at {rate}/s, not {}",
                runs.len(),
                p.rounds
            );
        }
        Ok(runs)
    };
    let mut out = vec![format!(
        "traced service, natively: units of work ({} hash rounds each) a second while making \
         getppid calls at a fixed rate, every call a span (kspan's consumer, the SDK's batch \
         processor, an exporter that discards) or untraced ({} rounds of {} s per variant and \
         rate, alternating order; medians over the rounds, the rounds' range in brackets):",
        p.work_rounds, p.rounds, p.seconds
    )];
    for rate in RATES {
        let (base, traced) = (get(rate, "untraced")?, get(rate, "exported")?);
        let per_sec =
            |runs: &[Run]| -> Vec<f64> { runs.iter().map(|r| r.units_per_sec / 1e6).collect() };
        let ratios: Vec<f64> = traced
            .iter()
            .zip(base)
            .map(|(t, b)| t.units_per_sec / b.units_per_sec)
            .collect();
        let cpu_ratios: Vec<f64> = traced
            .iter()
            .zip(base)
            .map(|(t, b)| t.units_per_cpu_sec / b.units_per_cpu_sec)
            .collect();
        let target = if rate == 10_000 {
            " (target >= 0.98x)"
        } else {
            ""
        };
        out.push(format!(
            "  {rate:>7} calls/s: untraced {:.3} M units/s {}, exported {:.3} M units/s {}, \
             exported/untraced {:.3}x {}{target}; per second of the service thread's CPU \
             {:.3}x {}",
            median(per_sec(base)),
            range(&per_sec(base), 3),
            median(per_sec(traced)),
            range(&per_sec(traced), 3),
            median(ratios.clone()),
            range(&ratios, 3),
            median(cpu_ratios.clone()),
            range(&cpu_ratios, 3),
        ));
    }
    out.push(
        "  added per call by an exported span (exported - untraced in the same round):".to_owned(),
    );
    for rate in RATES {
        let (base, traced) = (get(rate, "untraced")?, get(rate, "exported")?);
        let added = |f: fn(&Run) -> f64| -> Vec<f64> {
            traced.iter().zip(base).map(|(t, b)| f(t) - f(b)).collect()
        };
        let in_call = added(|r| r.call_ns);
        let in_thread: Vec<f64> = traced
            .iter()
            .zip(base)
            .map(|(t, b)| thread_added(t, b))
            .collect();
        let others = added(|r| r.others_cpu_ns);
        let total: Vec<f64> = in_thread.iter().zip(&others).map(|(a, b)| a + b).collect();
        let untraced_call: Vec<f64> = base.iter().map(|r| r.call_ns).collect();
        out.push(format!(
            "  {rate:>7} calls/s: the service thread's CPU {:+.0} ns {} (timed around the call: \
             {:+.0} ns {}, untraced getppid {:.0} ns); kspan's consumer and the SDK (the other \
             threads' CPU) {:+.0} ns {}; total CPU {:+.0} ns {}",
            median(in_thread.clone()),
            range(&in_thread, 0),
            median(in_call.clone()),
            range(&in_call, 0),
            median(untraced_call),
            median(others.clone()),
            range(&others, 0),
            median(total.clone()),
            range(&total, 0),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(variant: &str, units: u64, call_ns: u64, cpu: (u64, u64), spans: u64) -> String {
        format!(
            "SERVICE {variant} rate 10000 secs 2.0 units {units} calls 20000 call_ns {call_ns} \
             thread_cpu_ns {} process_cpu_ns {} spans {spans} lost 0",
            cpu.0, cpu.1
        )
    }

    #[test]
    fn reads_a_run() {
        let (v, rate, run) = parse_line(&line(
            "exported",
            2_000_000,
            8_000_000,
            (2_000_000_000, 2_010_000_000),
            20000,
        ))
        .unwrap();
        assert_eq!((v.as_str(), rate), ("exported", 10_000));
        assert_eq!(run.units_per_sec, 1e6);
        assert_eq!(run.units_per_cpu_sec, 1e6);
        assert_eq!(run.call_ns, 400.0);
        assert_eq!(run.others_cpu_ns, 500.0);
        assert!(parse_line("SERVICE exported rate 1").is_err());
        assert!(parse_line("nothing").is_err());
    }

    #[test]
    fn reports_paired_ratios_and_added_costs() {
        let p = Plan {
            service: "s",
            rounds: 1,
            seconds: 2.0,
            work_rounds: 256,
        };
        let mut figures = Figures::new();
        for rate in RATES {
            for (v, units, call, cpu) in [
                (
                    "untraced",
                    2_000_000,
                    4_000_000,
                    (2_000_000_000, 2_000_000_000),
                ),
                (
                    "exported",
                    1_960_000,
                    8_000_000,
                    (2_000_000_000, 2_020_000_000),
                ),
            ] {
                let (_, _, run) = parse_line(&line(v, units, call, cpu, 20000)).unwrap();
                figures.insert((rate, v.to_owned()), vec![run]);
            }
        }
        let r = report(&figures, &p).unwrap().join("\n");
        assert!(
            r.contains("exported/untraced 0.980x [0.980..0.980] (target >= 0.98x)"),
            "{r}"
        );
        assert!(
            r.contains(
                "thread's CPU +1996 ns [1996..1996] (timed around the call: +200 ns [200..200], \
                 untraced getppid 200 ns)"
            ),
            "{r}"
        );
        assert!(
            r.contains("threads' CPU) +1000 ns [1000..1000]; total CPU +2996 ns"),
            "{r}"
        );
        figures.clear();
        assert!(report(&figures, &p).is_err());
    }

    #[test]
    fn refuses_lost_spans_and_missing_spans() {
        let (_, _, mut run) = parse_line(&line("exported", 1, 1, (1, 1), 20000)).unwrap();
        assert!(check("exported", "exported", 10_000, 10_000, &run, "l").is_ok());
        run.lost = 1;
        assert!(check("exported", "exported", 10_000, 10_000, &run, "l").is_err());
        run.lost = 0;
        run.spans = 19_999;
        assert!(check("exported", "exported", 10_000, 10_000, &run, "l").is_err());
        assert!(check("exported", "untraced", 10_000, 10_000, &run, "l").is_err());
    }
}
