//! `sched-causes` (issue 41): what the causes cost their own workloads,
//! each inside application spans.
//!
//! Three workloads of `sched_pingpong` ([`WORKLOADS`]): `block`
//! (`O_DIRECT` reads of 4 KiB, one block request each; biolatency's
//! aggregation), `lock` (two threads writing one open file through two
//! descriptors, contending for its `f_pos_lock`; `perf lock contention`'s)
//! and `spans` (empty spans: what a span that never leaves its CPU costs;
//! no bpftrace equivalent). Each runs with nothing attached, the account
//! alone, the account with its causes, bpftrace doing the causes'
//! aggregation in the process, and another process holding the account
//! without and with its causes ([`CONFIGS`]). The report gives each
//! operation's added time, and per event (a block request, a lock
//! contention as the tracer counted it, a span): a cause's cost goes with
//! its events, which a workload's operations have in different numbers.
//! The reads' time swings with the disk's by more than the programs take,
//! so their runs have the BPF statistics on ([`STATS_TIMED`]) and their
//! programs' time is their figure; each run is checked to have reached
//! the disk and to have been seen by its tracer.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};

use super::holder::Holder;
use super::parse::{parse_causes, prog_runs, CausesRun};
use super::{med, quantile, range, ratios, sched_pingpong, BpfStats, Programs};

/// The workloads (`sched_pingpong WORKLOAD MODE OPS BATCHES`): the
/// operations a batch and the batches a run (each run the fastest batch):
/// a batch of reads takes about 4 ms here, of writes (two threads) about
/// 3 ms, of spans about 1 to 5 ms.
const WORKLOADS: [(&str, u32, u32); 3] =
    [("block", 50, 60), ("lock", 2_000, 40), ("spans", 2_000, 50)];

/// The configurations, the baseline first: name, the workload's mode (what
/// it attaches in its own process), and the holder another process runs
/// meanwhile.
const CONFIGS: [(&str, &str, Option<&str>); 6] = [
    ("none", "none", None),
    ("tp_btf", "tp_btf", None),
    ("tp_btf_causes", "tp_btf_causes", None),
    ("bpftrace", "bpftrace", None),
    ("held_tp_btf", "none", Some("kspan_tp_btf")),
    ("held_tp_btf_causes", "none", Some("kspan_tp_btf_causes")),
];

/// The workloads whose timed runs have the BPF statistics on
/// (`kernel.bpf_stats_enabled=1`, a clock read more a program run, about
/// 45 ns here): the reads' time swings by microseconds from run to run
/// with the disk's, far more than the programs' time, which the
/// statistics measure in the same runs. The others' time resolves their
/// programs' cost, which the statistics would add to.
pub const STATS_TIMED: [&str; 1] = ["block"];

/// Whether `config` runs `workload`: the spans have no bpftrace
/// equivalent, and another process's account costs them nothing (no
/// system call, no switch).
fn applies(workload: &str, config: &str) -> bool {
    workload != "spans" || matches!(config, "none" | "tp_btf" | "tp_btf_causes")
}

/// Checks that a run measured what it is for: the reads reached a disk,
/// and the tracers saw the events.
fn check(workload: &str, mode: &str, run: &CausesRun, out: &str) -> Result<()> {
    let tracer = matches!(mode, "tp_btf_causes" | "bpftrace");
    // Each NaN (not counted) compares false: not reached, not seen.
    let reached = run.events >= 0.9 * run.ops;
    let seen_requests = run.traced >= 0.9 * run.events;
    let seen_contention = run.traced > 0.0;
    match workload {
        "block" => {
            if !reached {
                bail!(
                    "{} of {} O_DIRECT reads reached a disk (is the temporary directory on \
                     one?): {out}",
                    run.events,
                    run.ops
                );
            }
            if tracer && !seen_requests {
                bail!(
                    "{mode} saw {} of the {} block requests: {out}",
                    run.traced,
                    run.events
                );
            }
        }
        "lock" if tracer && !seen_contention => {
            bail!("{mode} saw no lock contention (did the two writers run at once?): {out}");
        }
        _ => {}
    }
    Ok(())
}

/// `sched_pingpong WORKLOAD MODE OPS BATCHES` (`stats`: with its `PROG`
/// lines).
fn run_workload(programs: &Programs, workload: &str, mode: &str, stats: bool) -> Result<String> {
    let (_, ops, batches) = WORKLOADS
        .iter()
        .find(|(w, _, _)| *w == workload)
        .with_context(|| format!("no workload `{workload}`"))?;
    let args = [
        workload.to_owned(),
        mode.to_owned(),
        ops.to_string(),
        batches.to_string(),
    ];
    sched_pingpong(programs, &args, stats)
}

/// The operations of a workload's timed batches.
fn timed_ops(workload: &str) -> f64 {
    WORKLOADS
        .iter()
        .find(|(w, _, _)| *w == workload)
        .map_or(f64::NAN, |(_, ops, batches)| {
            f64::from(*ops) * f64::from(*batches)
        })
}

/// ns of BPF programs an operation, from a run's `PROG` lines.
fn prog_ns_per_op(out: &str, timed_ops: f64) -> f64 {
    prog_runs(out)
        .iter()
        .map(|p| p.runs * p.ns_per_run)
        .sum::<f64>()
        / timed_ops
}

/// (workload, configuration) -> one figure per round.
pub type Figures = BTreeMap<(String, String), Vec<CausesRun>>;

/// Every round: each configuration once, in an order rotated by the
/// round, each workload it applies to under it.
pub fn measure(programs: &Programs, rounds: u32) -> Result<Figures> {
    let mut figures = Figures::new();
    for round in 0..rounds as usize {
        let n = CONFIGS.len();
        for k in 0..n {
            let (config, mode, holder) = CONFIGS[(k + round) % n];
            let held = holder.map(|h| Holder::start(programs, h)).transpose()?;
            for (workload, _, _) in WORKLOADS {
                if !applies(workload, config) {
                    continue;
                }
                let stats = STATS_TIMED.contains(&workload);
                let guard = stats.then(BpfStats::enable).transpose()?;
                let out = run_workload(programs, workload, mode, stats)?;
                drop(guard);
                let mut run = parse_causes(&out)?;
                if stats {
                    run.prog_ns = prog_ns_per_op(&out, timed_ops(workload));
                }
                check(workload, mode, &run, &out)?;
                figures
                    .entry((workload.to_owned(), config.to_owned()))
                    .or_default()
                    .push(run);
            }
            if let Some(h) = held {
                h.stop()?;
            }
        }
        eprintln!("sched-causes: round {} of {rounds} done", round + 1);
    }
    Ok(figures)
}

/// One configuration's added cost against the baseline, per operation and
/// per event.
struct AddedOps {
    q25: f64,
    fastest: f64,
    paired: Vec<f64>,
    /// Events an operation, the median of the runs (NaN: not counted).
    events: f64,
    /// Per event, paired within each round (each run by its own events).
    paired_event: Vec<f64>,
}

fn added_ops(runs: &[CausesRun], base: &[f64]) -> AddedOps {
    let ns: Vec<f64> = runs.iter().map(|r| r.ns_per_op).collect();
    let paired: Vec<f64> = runs
        .iter()
        .zip(base)
        .map(|(r, b)| r.ns_per_op - b)
        .collect();
    AddedOps {
        q25: quantile(&ns, 0.25) - quantile(base, 0.25),
        fastest: quantile(&ns, 0.0) - quantile(base, 0.0),
        paired_event: runs
            .iter()
            .zip(&paired)
            .map(|(r, a)| a / r.events_per_op())
            .collect(),
        paired,
        events: med(&runs
            .iter()
            .map(CausesRun::events_per_op)
            .collect::<Vec<_>>()),
    }
}

/// What each workload's operation and event are, for the report.
fn workload_words(workload: &str) -> (&'static str, &'static str, &'static str, &'static str) {
    match workload {
        "block" => (
            "an O_DIRECT read of 4 KiB of a synced file, one thread in one span",
            "a read",
            "reads",
            "a block request",
        ),
        "lock" => (
            "two threads, one on the first CPU and one on the last, each in its span, writing a byte \
             at a time to one open file through two descriptors (its f_pos_lock, a kernel mutex); an \
             operation is one write of the two's together",
            "a write",
            "writes",
            "a contention",
        ),
        _ => (
            "an empty span made current and ended, one thread, no switch",
            "a span",
            "spans",
            "a span",
        ),
    }
}

pub fn report(figures: &Figures, rounds: u32) -> Vec<String> {
    let mut lines = vec![format!(
        "the causes' workloads, each inside application spans ({rounds} rounds; per run the fastest \
         batch, ns an operation; the baseline is nothing attached; added = config - baseline: from \
         the lower quartiles of the rounds, the fastest rounds, and paired within each round; per \
         event: divided by the events an operation that run counted (the kernel's block requests; \
         the tracer's lock contentions); tp_btf: the account alone; tp_btf_causes: with its causes; \
         bpftrace: the same aggregation; held_*: another process holds the account, the workload \
         attaches nothing; the block reads' runs with the BPF statistics on, whose programs' time \
         is the block figure: the disk's time swings more than the programs take):"
    )];
    let get = |workload: &str, config: &str| -> Vec<CausesRun> {
        figures
            .get(&(workload.to_owned(), config.to_owned()))
            .cloned()
            .unwrap_or_default()
    };
    for (workload, ops, batches) in WORKLOADS {
        let (what, op, ops_noun, event) = workload_words(workload);
        let base: Vec<f64> = get(workload, "none").iter().map(|r| r.ns_per_op).collect();
        lines.push(format!(
            "  {workload}: {what} ({ops} {ops_noun} a batch, {batches} batches a run):"
        ));
        lines.push(format!(
            "    baseline: {:.0} ns {op} (lower quartile of the rounds; fastest {:.0}, median {:.0})",
            quantile(&base, 0.25),
            quantile(&base, 0.0),
            med(&base)
        ));
        let mut all: Vec<(&str, AddedOps)> = Vec::new();
        let mut prog_runs: Vec<(&str, Vec<f64>)> = Vec::new();
        for (config, _, _) in &CONFIGS[1..] {
            if !applies(workload, config) {
                continue;
            }
            let runs = get(workload, config);
            let a = added_ops(&runs, &base);
            let ns: Vec<f64> = runs.iter().map(|r| r.ns_per_op).collect();
            let mut line = format!(
                "    {config:<18} {:>7.0} ns {op}; added: {:>+6.0} ns (lower quartiles), {:>+6.0} (fastest), \
                 {:>+6.0} {} (paired)",
                quantile(&ns, 0.25),
                a.q25,
                a.fastest,
                med(&a.paired),
                range(&a.paired, 0)
            );
            if a.events.is_finite() {
                line.push_str(&format!(
                    "; {:.3} events {op}, added {event}: {:+.0} ns (lower quartiles), {:+.0} {} (paired)",
                    a.events,
                    a.q25 / a.events,
                    med(&a.paired_event),
                    range(&a.paired_event, 0)
                ));
            }
            let progs: Vec<f64> = runs.iter().map(|r| r.prog_ns / r.events_per_op()).collect();
            if progs.iter().any(|p| p.is_finite()) {
                line.push_str(&format!(
                    "; BPF programs {:.0} ns {event} {} (the statistics')",
                    med(&progs),
                    range(&progs, 0)
                ));
            }
            lines.push(line);
            all.push((config, a));
            prog_runs.push((config, progs));
        }
        if !base.is_empty() {
            let base_progs: Vec<f64> = get(workload, "none")
                .iter()
                .map(|r| r.prog_ns / r.events_per_op())
                .filter(|p| p.is_finite())
                .collect();
            if !base_progs.is_empty() {
                lines.push(format!(
                    "    (BPF programs with nothing attached: {:.0} ns {event} {}: other programs of \
                     the machine)",
                    med(&base_progs),
                    range(&base_progs, 0)
                ));
            }
        }
        let progs_of = |name: &str| {
            prog_runs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, p)| p.clone())
        };
        if let (Some(c), Some(a), Some(b)) = (
            progs_of("tp_btf_causes"),
            progs_of("tp_btf"),
            progs_of("bpftrace"),
        ) {
            if c.iter().chain(&a).chain(&b).all(|p| p.is_finite()) {
                let own: Vec<f64> = c.iter().zip(&a).map(|(x, y)| x - y).collect();
                let whole = ratios(&c, &b);
                let part = ratios(&own, &b);
                lines.push(format!(
                    "    BPF programs {event}, against bpftrace's (paired): tp_btf_causes/bpftrace \
                     {:.2}x {}; the causes alone (tp_btf_causes - tp_btf, {:.0} ns)/bpftrace {:.2}x {} \
                     (target <= 1.0x)",
                    med(&whole),
                    range(&whole, 2),
                    med(&own),
                    med(&part),
                    range(&part, 2)
                ));
            }
        }
        let find = |name: &str| all.iter().find(|(n, _)| *n == name).map(|(_, a)| a);
        let (Some(causes), Some(account)) = (find("tp_btf_causes"), find("tp_btf")) else {
            continue;
        };
        // The causes' own share: what they add over the account alone.
        let own: Vec<f64> = causes
            .paired
            .iter()
            .zip(&account.paired)
            .map(|(c, a)| c - a)
            .collect();
        let own_event: Vec<f64> = own.iter().map(|x| x / causes.events).collect();
        lines.push(format!(
            "    the causes over the account alone (tp_btf_causes - tp_btf): {:+.0} ns {op} (lower \
             quartiles), {:+.0} {} (paired){}",
            causes.q25 - account.q25,
            med(&own),
            range(&own, 0),
            if causes.events.is_finite() {
                format!(
                    "; {:+.0} ns {event} {} (paired)",
                    med(&own_event),
                    range(&own_event, 0)
                )
            } else {
                String::new()
            }
        ));
        if let Some(bt) = find("bpftrace") {
            let whole = ratios(&causes.paired_event, &bt.paired_event);
            let part = ratios(&own_event, &bt.paired_event);
            lines.push(format!(
                "    per event against bpftrace: tp_btf_causes/bpftrace {:.2}x (lower quartiles), \
                 {:.2}x (fastest), {:.2}x {} (paired); the causes alone/bpftrace {:.2}x (lower \
                 quartiles), {:.2}x {} (paired) (target <= 1.0x)",
                (causes.q25 / causes.events) / (bt.q25 / bt.events),
                (causes.fastest / causes.events) / (bt.fastest / bt.events),
                med(&whole),
                range(&whole, 2),
                ((causes.q25 - account.q25) / causes.events) / (bt.q25 / bt.events),
                med(&part),
                range(&part, 2)
            ));
        }
        if let (Some(held_causes), Some(held)) = (find("held_tp_btf_causes"), find("held_tp_btf")) {
            let more: Vec<f64> = held_causes
                .paired
                .iter()
                .zip(&held.paired)
                .map(|(c, a)| c - a)
                .collect();
            lines.push(format!(
                "    another process's account, with its causes against without: {:+.0} ns {op} \
                 (lower quartiles), {:+.0} {} (paired)",
                held_causes.q25 - held.q25,
                med(&more),
                range(&more, 0)
            ));
        }
    }
    lines
}

/// The `PROG` lines of a causes workload's run: each program's ns a run
/// and runs an operation, and all of them an operation and an event
/// (`events`: events an operation).
fn prog_lines(what: &str, out: &str, timed_ops: f64, events: f64) -> Vec<String> {
    super::prog_lines(what, out, timed_ops, "an operation", 3, |per_op| {
        format!(
            "    all programs: {per_op:.0} ns an operation, {:.0} ns an event ({events:.3} events an operation)",
            per_op / events
        )
    })
}

/// The statistics' pass: each configuration once, each workload it
/// applies to under it.
pub fn prog_stats(programs: &Programs) -> Result<Vec<String>> {
    let mut lines = vec![
        "BPF programs during the causes' workloads (one pass; ns a run as the statistics \
         measure it; an event: a block request, a lock contention as the tracer counted \
         it, a span):"
            .to_owned(),
    ];
    for (config, mode, holder) in &CONFIGS[1..] {
        let held = holder.map(|h| Holder::start(programs, h)).transpose()?;
        for (workload, _, _) in WORKLOADS {
            if !applies(workload, config) {
                continue;
            }
            let out = run_workload(programs, workload, mode, true)?;
            let run = parse_causes(&out)?;
            lines.extend(prog_lines(
                &format!("{workload}, {config}"),
                &out,
                timed_ops(workload),
                run.events_per_op(),
            ));
        }
        if let Some(h) = held {
            h.stop()?;
        }
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_checked_to_have_reached_the_disk_and_their_tracer() {
        let r = parse_causes(
            "CAUSES block tp_btf_causes ns_per_op 80000.5 median_ns_per_op 90000.0 ops 3050 \
             events 3050 traced_events 3049",
        )
        .unwrap();
        let lock = parse_causes(
            "CAUSES lock bpftrace ns_per_op 800 median_ns_per_op 900 ops 1000 events - \
             traced_events 250",
        )
        .unwrap();
        // A read that reached no disk, a tracer that missed the requests.
        let missed = CausesRun { traced: 100.0, ..r };
        assert!(check("block", "tp_btf_causes", &r, "").is_ok());
        assert!(check("block", "tp_btf_causes", &missed, "").is_err());
        assert!(check("block", "tp_btf", &missed, "").is_ok());
        let cached = CausesRun { events: 0.0, ..r };
        assert!(check("block", "none", &cached, "").is_err());
        let quiet = CausesRun {
            traced: 0.0,
            ..lock
        };
        assert!(check("lock", "bpftrace", &quiet, "").is_err());
        assert!(check("lock", "tp_btf", &quiet, "").is_ok());
    }

    #[test]
    fn causes_are_reported_per_operation_and_per_event() {
        let run = |ns: f64, traced: f64| CausesRun {
            ns_per_op: ns,
            ops: 100.0,
            events: f64::NAN,
            traced,
            prog_ns: f64::NAN,
        };
        let mut figures = Figures::new();
        let mut put = |config: &str, runs: Vec<CausesRun>| {
            figures.insert(("lock".into(), config.into()), runs);
        };
        // Lock: no kernel count; the tracers count 50 and 25 contentions
        // (0.5 and 0.25 an operation).
        put("none", vec![run(1000.0, f64::NAN); 2]);
        put("tp_btf", vec![run(1010.0, f64::NAN); 2]);
        put("tp_btf_causes", vec![run(1060.0, 50.0); 2]);
        put("bpftrace", vec![run(1100.0, 25.0); 2]);
        put("held_tp_btf", vec![run(1001.0, f64::NAN); 2]);
        put("held_tp_btf_causes", vec![run(1004.0, f64::NAN); 2]);
        let lines = report(&figures, 2).join("\n");
        // kspan: +60 a write, 120 a contention (+100 of it the causes');
        // bpftrace: +100, 400.
        assert!(
            lines.contains(
                "0.500 events a write, added a contention: +120 ns (lower quartiles), \
                 +120 [120..120] (paired)"
            ),
            "{lines}"
        );
        assert!(
            lines.contains(
                "tp_btf_causes/bpftrace 0.30x (lower quartiles), 0.30x (fastest), 0.30x \
                 [0.30..0.30] (paired); the causes alone/bpftrace 0.25x (lower quartiles), \
                 0.25x [0.25..0.25] (paired)"
            ),
            "{lines}"
        );
        assert!(
            lines.contains("with its causes against without: +3 ns a write"),
            "{lines}"
        );
        // Block: the programs' time a request, from the statistics.
        let read = |prog_ns: f64| CausesRun {
            ns_per_op: 60_000.0,
            ops: 100.0,
            events: 100.0,
            traced: f64::NAN,
            prog_ns,
        };
        let mut figures = Figures::new();
        for (config, ns) in [
            ("none", 0.0),
            ("tp_btf", 1000.0),
            ("tp_btf_causes", 3000.0),
            ("bpftrace", 4000.0),
        ] {
            figures.insert(("block".into(), config.into()), vec![read(ns); 2]);
        }
        let lines = report(&figures, 2).join("\n");
        assert!(
            lines.contains(
                "BPF programs a block request, against bpftrace's (paired): tp_btf_causes/bpftrace \
                 0.75x [0.75..0.75]; the causes alone (tp_btf_causes - tp_btf, 2000 ns)/bpftrace \
                 0.50x [0.50..0.50]"
            ),
            "{lines}"
        );
        assert!(
            prog_ns_per_op(
                "PROG 1 a runs 10 ns_per_run 100.0\nPROG 2 b runs 5 ns_per_run 20\nother",
                10.0
            ) == 110.0
        );
        assert!(applies("spans", "tp_btf_causes") && !applies("spans", "bpftrace"));
        assert!(applies("lock", "held_tp_btf"));
    }

    #[test]
    fn programs_are_reported_per_operation_and_per_event() {
        // A block run's statistics: 3000 reads timed, two programs.
        let out = "PROG 31 kspan_tp_block_ runs 3000 ns_per_run 250.0\n\
                   PROG 32 kspan_tp_block_ runs 6000 ns_per_run 100.0\n\
                   CAUSES block tp_btf_causes ns_per_op 80000.5 median_ns_per_op 90000.0 \
                   ops 3050 events 3050 traced_events 3049\n";
        let lines = prog_lines("block, tp_btf_causes", out, timed_ops("block"), 1.0);
        assert_eq!(lines.len(), 4);
        assert!(lines[2].ends_with("100.0 ns a run, 2.000 runs an operation"));
        assert_eq!(
            lines[3],
            "    all programs: 450 ns an operation, 450 ns an event (1.000 events an operation)"
        );
        assert_eq!(prog_lines("x", "", 1.0, 1.0)[1], "    (no program ran)");
    }
}
