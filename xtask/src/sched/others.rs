//! `sched-others`: what an untraced process's context switches cost while
//! another process holds the scheduler account.
//!
//! `sched_pingpong processes` ([`super::pingpong`]) runs with nothing
//! held, and while `sched_account_idle` holds the account (BTF
//! tracepoints, with its causes, classic tracepoints) or bpftrace holds
//! [`BPFTRACE_SWITCH`] (the minimal script) or [`BPFTRACE_ACCOUNT`] (what
//! the account does for other processes); every holder traces only its
//! own process. The loop runs pinned to CPU 0, where classic tracepoints'
//! perf events are bound (bpftrace's programs return 1, so the kernel goes
//! on to the event there), and to the last CPU (the programs alone): each
//! figure is then one of the two, not a mix that depends on where the
//! scheduler put the loop. The account with its causes is also set against
//! the account alone, paired within the round.
//!
//! [`BPFTRACE_SWITCH`]: super::holder::BPFTRACE_SWITCH
//! [`BPFTRACE_ACCOUNT`]: super::holder::BPFTRACE_ACCOUNT

use anyhow::Result;

use super::holder::Holder;
use super::parse::{parse_pingpong, Pingpong};
use super::pingpong::{self, comparison_lines, runs_of, Figures, BATCHES, ROUNDTRIPS};
use super::{med, Programs};

/// The holders, the baseline first.
const HOLDERS: [&str; 6] = [
    "none",
    "kspan_tp_btf",
    "kspan_tp_btf_causes",
    "kspan_tracepoint",
    "bpftrace_switch",
    "bpftrace_account",
];

/// Every round: nothing held, each holder in turn, nothing held again.
pub fn measure(programs: &Programs, rounds: u32, pins: &[usize]) -> Result<Figures> {
    let mut figures = Figures::new();
    for round in 0..rounds as usize {
        // Nothing held at the start and at the end of the round; the
        // holders in between, in an order rotated by the round.
        let mut order = vec!["none"];
        let held = &HOLDERS[1..];
        order.extend((0..held.len()).map(|k| held[(k + round) % held.len()]));
        order.push("none_end");
        for name in order {
            let holder = match name {
                "none" | "none_end" => None,
                _ => Some(Holder::start(programs, name)?),
            };
            for &cpu in pins {
                let out = pingpong::processes(programs, cpu, false)?;
                let p = parse_pingpong(&out)?;
                figures.entry((cpu, name.to_owned())).or_default().push(p);
            }
            if let Some(h) = holder {
                h.stop()?;
            }
        }
        eprintln!("sched-others: round {} of {rounds} done", round + 1);
    }
    Ok(figures)
}

pub fn report(figures: &Figures, rounds: u32, pins: &[usize]) -> Vec<String> {
    let mut lines = vec![format!(
        "an untraced process's context switches while another process holds the scheduler account \
         (two processes ping-ponging a byte over two pipes, both pinned to one CPU; {rounds} rounds; \
         per run the fastest of {BATCHES} batches of {ROUNDTRIPS} round trips; the baseline is nothing \
         held, at the start and the end of each round (their mean); added = held - baseline, per switch: \
         from the lower quartiles of the rounds (the shared machine's slow spells left out), from the \
         fastest rounds, and paired within each round):"
    )];
    for &cpu in pins {
        let start = runs_of(figures, cpu, "none");
        let end = runs_of(figures, cpu, "none_end");
        let base: Vec<f64> = start
            .iter()
            .zip(&end)
            .map(|(a, b)| (a.rt_ns + b.rt_ns) / 2.0)
            .collect();
        let spr = med(&start.iter().map(|p| p.switches_per_rt).collect::<Vec<_>>());
        lines.push(format!(
            "  loop pinned to CPU {cpu}{}:",
            if cpu == 0 {
                " (where classic tracepoints' perf events are bound)"
            } else {
                " (the programs alone)"
            }
        ));
        let configs: Vec<(&str, Vec<Pingpong>)> = HOLDERS[1..]
            .iter()
            .map(|h| (*h, runs_of(figures, cpu, h)))
            .collect();
        lines.extend(comparison_lines(
            &base,
            spr,
            &configs,
            &["bpftrace_switch", "bpftrace_account"],
            &[("kspan_tp_btf_causes", "kspan_tp_btf")],
        ));
    }
    lines
}

/// The statistics' pass: the loop on `cpu` once per holder.
pub fn prog_stats(programs: &Programs, cpu: usize) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    for holder in &HOLDERS[1..] {
        let held = Holder::start(programs, holder)?;
        let out = pingpong::processes(programs, cpu, true)?;
        held.stop()?;
        lines.extend(pingpong::prog_lines(
            &format!("others, {holder} held"),
            &out,
        ));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_cost_is_reported_against_the_yardsticks_and_the_account_alone() {
        let p = |rt: f64| Pingpong {
            rt_ns: rt,
            switches_per_rt: 2.0,
            switches: 1.0,
            traced: 1.0,
        };
        let mut figures = Figures::new();
        figures.insert((1, "none".into()), vec![p(1000.0), p(2000.0)]);
        figures.insert((1, "none_end".into()), vec![p(1000.0), p(2000.0)]);
        figures.insert((1, "kspan_tp_btf".into()), vec![p(1100.0), p(2300.0)]);
        figures.insert(
            (1, "kspan_tp_btf_causes".into()),
            vec![p(1120.0), p(2360.0)],
        );
        figures.insert((1, "kspan_tracepoint".into()), vec![p(1200.0), p(2400.0)]);
        figures.insert((1, "bpftrace_switch".into()), vec![p(1200.0), p(2200.0)]);
        figures.insert((1, "bpftrace_account".into()), vec![p(1400.0), p(2600.0)]);
        // tp_btf adds 50 and 150 ns a switch; bpftrace_switch 100 and 100.
        let lines = report(&figures, 2, &[1]).join("\n");
        assert!(
            lines.contains(
                "kspan_tp_btf/bpftrace_switch: 0.75x (lower quartiles), 0.50x (fastest), 1.00x [0.50..1.50] (paired)"
            ),
            "{lines}"
        );
        // The causes against the account alone: +10 and +30 ns a switch
        // (+15 between the lower quartiles).
        assert!(
            lines.contains(
                "kspan_tp_btf_causes against kspan_tp_btf: a round trip 1.022x [1.018..1.026] (paired); \
                 added a switch 1.20x (lower quartiles), 1.20x [1.20..1.20] (paired); +15 ns a switch \
                 (lower quartiles), +20 [10..30] (paired)"
            ),
            "{lines}"
        );
    }
}
