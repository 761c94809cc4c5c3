//! The lines the bench programs print, read into numbers: one reader for
//! every part, so that each line format is read in one place.
//!
//! `sched_pingpong` and `sched_service` print a figure as a tag and then
//! `name value` pairs (`PINGPONG <mode> cpu <c> rt_ns <ns> ...`); a part
//! reads the first line with its tag, by name, so that a pair more or in
//! another order leaves it readable. A value `-` is a count the program did
//! not take (no tracer attached, no kernel count): it reads as NaN, which
//! every later comparison treats as not seen. With `KSPAN_BENCH_PROG_STATS=1`
//! they also print a `PROG` line a BPF program that ran, of a fixed shape.

use anyhow::{bail, Context, Result};

/// The first line of a program's output with a given tag, split into
/// words, for its `name value` pairs.
struct Tagged<'a> {
    line: &'a str,
    words: Vec<&'a str>,
}

impl<'a> Tagged<'a> {
    /// The first line of `out` that starts with `tag` and a space.
    fn find(out: &'a str, tag: &str) -> Result<Tagged<'a>> {
        let prefix = format!("{tag} ");
        let line = out
            .lines()
            .find(|l| l.starts_with(&prefix))
            .with_context(|| format!("no {tag} line in: {out}"))?;
        Ok(Tagged {
            line,
            words: line.split_whitespace().collect(),
        })
    }

    /// The word after the first `name`.
    fn value(&self, name: &str) -> Result<&'a str> {
        self.words
            .iter()
            .position(|w| *w == name)
            .and_then(|i| self.words.get(i + 1))
            .copied()
            .with_context(|| format!("no `{name}` in `{}`", self.line))
    }

    /// `name`'s number.
    fn number(&self, name: &str) -> Result<f64> {
        self.value(name)?
            .parse()
            .with_context(|| format!("`{name}` is not a number in `{}`", self.line))
    }

    /// `name`'s number, NaN where the program printed `-` (not counted).
    fn number_or_nan(&self, name: &str) -> Result<f64> {
        if self.value(name)? == "-" {
            return Ok(f64::NAN);
        }
        self.number(name)
    }
}

/// One `PINGPONG` line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pingpong {
    /// ns a round trip, fastest batch.
    pub rt_ns: f64,
    pub switches_per_rt: f64,
    pub switches: f64,
    /// Switches the tracer saw (NaN: none attached).
    pub traced: f64,
}

/// Reads `PINGPONG <mode> cpu <c> rt_ns <ns> median_rt_ns <ns>
/// switches_per_rt <x> switches <n> traced_switches <n|->`.
pub fn parse_pingpong(out: &str) -> Result<Pingpong> {
    let line = Tagged::find(out, "PINGPONG")?;
    let p = Pingpong {
        rt_ns: line.number_or_nan("rt_ns")?,
        switches_per_rt: line.number_or_nan("switches_per_rt")?,
        switches: line.number_or_nan("switches")?,
        traced: line.number_or_nan("traced_switches")?,
    };
    if !(p.rt_ns > 0.0 && p.switches_per_rt > 0.0) {
        bail!("no round trip or no switch measured: `{}`", line.line);
    }
    Ok(p)
}

/// One `SCHED-SERVICE` line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Service {
    pub per_sec: f64,
    pub per_cpu_sec: f64,
    pub switches_per_sec: f64,
}

/// Reads `SCHED-SERVICE <mode> secs <s> requests <n> cpu_ns <n> switches
/// <n> spans <n> waits <n> accounted <n> lost <n>`, checking that the
/// account summed switches when on, none when off, and lost nothing.
pub fn parse_service(out: &str, mode: &str) -> Result<Service> {
    let line = Tagged::find(out, "SCHED-SERVICE")?;
    let (secs, requests, cpu) = (
        line.number("secs")?,
        line.number("requests")?,
        line.number("cpu_ns")?,
    );
    if requests < 1.0 || secs <= 0.0 || cpu <= 0.0 {
        bail!("no request served: `{}`", line.line);
    }
    let accounted = line.number("accounted")?;
    if (mode == "off") != (accounted == 0.0) {
        bail!(
            "the account summed switches on {accounted} spans with the account {mode}: `{}`",
            line.line
        );
    }
    if line.number("lost")? > 0.0 {
        bail!("kspan lost records: `{}`", line.line);
    }
    Ok(Service {
        per_sec: requests / secs,
        per_cpu_sec: requests / cpu * 1e9,
        switches_per_sec: line.number("switches")? / secs,
    })
}

/// One `CAUSES` line, and the BPF programs' time of its run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CausesRun {
    /// ns an operation, fastest batch.
    pub ns_per_op: f64,
    /// Operations in all (the warm-up's too).
    pub ops: f64,
    /// Events the kernel counted (NaN: not counted).
    pub events: f64,
    /// Events the tracer saw (NaN: no tracer, or none that counts them).
    pub traced: f64,
    /// ns of BPF programs an operation during the timed batches, every
    /// program of the machine that ran, from the run's `PROG` lines (NaN:
    /// statistics off; see [`super::causes::STATS_TIMED`]).
    pub prog_ns: f64,
}

impl CausesRun {
    /// Events an operation: the kernel's count where it has one, else the
    /// tracer's (NaN: neither).
    pub fn events_per_op(&self) -> f64 {
        if self.events.is_finite() {
            self.events / self.ops
        } else {
            self.traced / self.ops
        }
    }
}

/// Reads `CAUSES <workload> <mode> ns_per_op <ns> median_ns_per_op <ns>
/// ops <n> events <n|-> traced_events <n|->`; `prog_ns` is NaN.
pub fn parse_causes(out: &str) -> Result<CausesRun> {
    let line = Tagged::find(out, "CAUSES")?;
    let run = CausesRun {
        ns_per_op: line.number_or_nan("ns_per_op")?,
        ops: line.number_or_nan("ops")?,
        events: line.number_or_nan("events")?,
        traced: line.number_or_nan("traced_events")?,
        prog_ns: f64::NAN,
    };
    if !(run.ns_per_op > 0.0 && run.ops > 0.0) {
        bail!("no operation measured: `{}`", line.line);
    }
    Ok(run)
}

/// One `PROG <id> <name> runs <n> ns_per_run <ns>` line: a BPF program's
/// runs during a loop and its time a run, as the kernel's statistics
/// measured them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProgRun<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub runs: f64,
    pub ns_per_run: f64,
}

/// The `PROG` lines of `out`, in order; a line of another shape is passed
/// over, and a number that does not read counts as 0 (the program then
/// adds nothing to a total).
pub fn prog_runs(out: &str) -> Vec<ProgRun<'_>> {
    out.lines()
        .filter(|l| l.starts_with("PROG "))
        .filter_map(|line| {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                [_, id, name, "runs", runs, "ns_per_run", ns] => Some(ProgRun {
                    id,
                    name,
                    runs: runs.parse().unwrap_or(0.0),
                    ns_per_run: ns.parse().unwrap_or(0.0),
                }),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pingpong_lines_are_read() {
        let p = parse_pingpong(
            "x\nPINGPONG tp_btf cpu 1 rt_ns 3000.5 median_rt_ns 3100.0 switches_per_rt 2.001 \
             switches 300000 traced_switches 300100\n",
        )
        .unwrap();
        assert_eq!(p.rt_ns, 3000.5);
        assert_eq!(p.switches_per_rt, 2.001);
        assert_eq!(p.traced, 300100.0);
        let untraced = parse_pingpong(
            "PINGPONG processes cpu 0 rt_ns 10 median_rt_ns 11 switches_per_rt 2 switches 4 \
             traced_switches -",
        )
        .unwrap();
        assert!(untraced.traced.is_nan());
        assert!(parse_pingpong(
            "PINGPONG none cpu 0 rt_ns 0 switches_per_rt 2 switches 1 traced_switches -"
        )
        .is_err());
        assert!(parse_pingpong("nothing").is_err());
    }

    #[test]
    fn a_pingpong_line_as_sched_pingpong_prints_it() {
        // `sched_pingpong processes 1 2000 75`'s line (its format, with a
        // CPU 1 round trip of BENCHMARKS.md's part 1).
        let out =
            "PINGPONG processes cpu 1 rt_ns 3086.4 median_rt_ns 3212.9 switches_per_rt 2.000 \
                   switches 304004 traced_switches -\n";
        let p = parse_pingpong(out).unwrap();
        assert_eq!(
            (p.rt_ns, p.switches_per_rt, p.switches),
            (3086.4, 2.0, 304004.0)
        );
        assert!(p.traced.is_nan());
        // A count that is not a number, a pair missing: not read.
        assert!(parse_pingpong(&out.replace("switches 304004", "switches many")).is_err());
        assert!(parse_pingpong(&out.replace("rt_ns 3086.4 ", "")).is_err());
    }

    #[test]
    fn service_lines_are_checked() {
        let on = "SCHED-SERVICE tp_btf secs 2.0 requests 10000 cpu_ns 4000000000 switches 20000 \
                  spans 20000 accounted 19000 lost 0";
        let s = parse_service(on, "tp_btf").unwrap();
        assert_eq!(s.per_sec, 5000.0);
        assert_eq!(s.per_cpu_sec, 2500.0);
        assert_eq!(s.switches_per_sec, 10000.0);
        // The account on but nothing summed, or off and something summed.
        assert!(parse_service(&on.replace("accounted 19000", "accounted 0"), "tp_btf").is_err());
        assert!(parse_service(on, "off").is_err());
        assert!(parse_service(&on.replace("lost 0", "lost 3"), "tp_btf").is_err());
    }

    #[test]
    fn a_service_line_as_sched_service_prints_it() {
        // `sched_service off 2 60000`'s line (its format, at about the
        // 5,100 requests a second of BENCHMARKS.md's part 3).
        let off = "SCHED-SERVICE off secs 2.000 requests 10200 cpu_ns 3720000000 switches 33000 \
                   spans 21400 waits 0 accounted 0 lost 0\n";
        let s = parse_service(off, "off").unwrap();
        assert_eq!((s.per_sec, s.switches_per_sec), (5100.0, 16500.0));
        assert!((s.per_cpu_sec - 10200.0 / 3.72).abs() < 1e-9);
        // A count the service must give, not given.
        assert!(parse_service(&off.replace("lost 0", "lost -"), "off").is_err());
        assert!(parse_service("sched_service: kspan: ...", "off").is_err());
    }

    #[test]
    fn causes_lines_are_read() {
        let r = parse_causes(
            "x\nCAUSES block tp_btf_causes ns_per_op 80000.5 median_ns_per_op 90000.0 ops 3050 \
             events 3050 traced_events 3049\n",
        )
        .unwrap();
        assert_eq!(r.ns_per_op, 80000.5);
        assert_eq!(r.events_per_op(), 1.0);
        assert_eq!(r.traced, 3049.0);
        assert!(r.prog_ns.is_nan());
        let lock = parse_causes(
            "CAUSES lock bpftrace ns_per_op 800 median_ns_per_op 900 ops 1000 events - \
             traced_events 250",
        )
        .unwrap();
        assert!(lock.events.is_nan());
        // Without the kernel's count, the tracer's.
        assert_eq!(lock.events_per_op(), 0.25);
        assert!(
            parse_causes("CAUSES lock none ns_per_op 0 ops 1 events - traced_events -").is_err()
        );
        assert!(parse_causes("nothing").is_err());
    }

    #[test]
    fn a_causes_line_as_sched_pingpong_prints_it() {
        // `sched_pingpong spans tp_btf 2000 50`'s line: every span an event.
        let r = parse_causes(
            "CAUSES spans tp_btf ns_per_op 412.3 median_ns_per_op 498.0 ops 102000 events 102000 \
             traced_events -\n",
        )
        .unwrap();
        assert_eq!(
            (r.ns_per_op, r.ops, r.events_per_op()),
            (412.3, 102000.0, 1.0)
        );
        assert!(r.traced.is_nan());
    }

    #[test]
    fn prog_lines_are_read() {
        // `print_prog_stats`'s lines in `sched_pingpong` (kspan's switch
        // program, its name cut to the kernel's 15 characters).
        let out = "PROG 4711 kspan_tp_sched_ runs 304120 ns_per_run 179.4\n\
                   PINGPONG tp_btf cpu 1 rt_ns 3000 switches_per_rt 2 switches 1 traced_switches 1\n\
                   PROG 4712 kspan_tp_sched_ runs 152060 ns_per_run 84.8\n\
                   PROG 4713 odd line\n\
                   PROG 4714 unread runs x ns_per_run 10.0";
        let runs = prog_runs(out);
        assert_eq!(
            runs,
            [
                ProgRun {
                    id: "4711",
                    name: "kspan_tp_sched_",
                    runs: 304120.0,
                    ns_per_run: 179.4
                },
                ProgRun {
                    id: "4712",
                    name: "kspan_tp_sched_",
                    runs: 152060.0,
                    ns_per_run: 84.8
                },
                ProgRun {
                    id: "4714",
                    name: "unread",
                    runs: 0.0,
                    ns_per_run: 10.0
                },
            ]
        );
        assert!(prog_runs("nothing\n").is_empty());
    }
}
