//! `sched-own`: what the traced process's own context switches cost.
//!
//! `sched_pingpong threads` ([`super::pingpong`]) ping-pongs between two
//! threads of one process, each inside an application span, with nothing
//! attached, with the account (BTF tracepoints, with its causes, classic
//! tracepoints), under bpftrace's offcputime-like script (`bpftrace`) and
//! its offwaketime aggregation (`bpftrace_offwake`). The process attaches
//! its own mode, so the tracer's count of the loop's switches is checked:
//! a run whose tracer did not see them measured nothing. The account with
//! its causes is also set against the account alone, paired within the
//! round.

use anyhow::{bail, Result};

use super::parse::{parse_pingpong, Pingpong};
use super::pingpong::{self, comparison_lines, runs_of, Figures, BATCHES, ROUNDTRIPS};
use super::{med, Programs};

/// The modes, the baseline first.
const MODES: [&str; 6] = [
    "none",
    "tp_btf",
    "tp_btf_causes",
    "tracepoint",
    "bpftrace",
    "bpftrace_offwake",
];

/// Every round: each mode once, in an order rotated by the round.
pub fn measure(programs: &Programs, rounds: u32, pins: &[usize]) -> Result<Figures> {
    let mut figures = Figures::new();
    for round in 0..rounds as usize {
        for k in 0..MODES.len() {
            let mode = MODES[(k + round) % MODES.len()];
            for &cpu in pins {
                let out = pingpong::threads(programs, mode, cpu, false)?;
                let p = parse_pingpong(&out)?;
                // The tracer must have seen the loop's switches (its
                // counts include the warm-up's and the spans' edges; NaN,
                // nothing counted, is a failure too).
                let seen = p.traced >= 0.9 * p.switches;
                if mode != "none" && !seen {
                    bail!(
                        "{mode} saw {} of the loop's {} switches: {out}",
                        p.traced,
                        p.switches
                    );
                }
                figures.entry((cpu, mode.to_owned())).or_default().push(p);
            }
        }
        eprintln!("sched-own: round {} of {rounds} done", round + 1);
    }
    Ok(figures)
}

pub fn report(figures: &Figures, rounds: u32, pins: &[usize]) -> Vec<String> {
    let mut lines = vec![format!(
        "the traced process's own context switches (two threads ping-ponging a byte over two pipes, \
         both pinned to one CPU, each inside an application span; {rounds} rounds; per run the fastest \
         of {BATCHES} batches of {ROUNDTRIPS} round trips; the baseline is nothing attached; added per \
         switch as above; bpftrace: offcputime's aggregation, off-CPU time summed per thread and kernel \
         stack; bpftrace_offwake: offwaketime's, per thread, kernel stack, waker's stack and waker; \
         tp_btf_causes: the account with its causes):"
    )];
    for &cpu in pins {
        let none = runs_of(figures, cpu, "none");
        let base: Vec<f64> = none.iter().map(|p| p.rt_ns).collect();
        let spr = med(&none.iter().map(|p| p.switches_per_rt).collect::<Vec<_>>());
        lines.push(format!("  pinned to CPU {cpu}:"));
        let configs: Vec<(&str, Vec<Pingpong>)> = MODES[1..]
            .iter()
            .map(|m| (*m, runs_of(figures, cpu, m)))
            .collect();
        lines.extend(comparison_lines(
            &base,
            spr,
            &configs,
            &["bpftrace", "bpftrace_offwake"],
            &[("tp_btf_causes", "tp_btf")],
        ));
    }
    lines
}

/// The statistics' pass: the loop on `cpu` once per mode.
pub fn prog_stats(programs: &Programs, cpu: usize) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    for mode in &MODES[1..] {
        let out = pingpong::threads(programs, mode, cpu, true)?;
        lines.extend(pingpong::prog_lines(&format!("own, {mode}"), &out));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cpu_is_reported_against_nothing_attached() {
        let p = |rt: f64| Pingpong {
            rt_ns: rt,
            switches_per_rt: 2.0,
            switches: 1.0,
            traced: 1.0,
        };
        let mut figures = Figures::new();
        for (mode, rt) in MODES
            .iter()
            .zip([1000.0, 1100.0, 1150.0, 1300.0, 1400.0, 1600.0])
        {
            figures.insert((0, (*mode).into()), vec![p(rt), p(rt + 100.0)]);
        }
        let lines = report(&figures, 2, &[0]).join("\n");
        // tp_btf adds 50 ns a switch, bpftrace 200.
        assert!(
            lines.contains("  pinned to CPU 0:\n    baseline: 1025 ns a round trip"),
            "{lines}"
        );
        assert!(
            lines.contains("tp_btf/bpftrace: 0.25x (lower quartiles), 0.25x (fastest)"),
            "{lines}"
        );
        assert!(
            lines.contains(
                "tp_btf_causes against tp_btf: a round trip 1.044x [1.042..1.045] (paired)"
            ),
            "{lines}"
        );
    }
}
