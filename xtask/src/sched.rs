//! `cargo xtask bench --host --only sched` (issue 27): what kspan's
//! scheduler account costs, natively on the host, side by side with
//! bpftrace in one run. Three parts, each runnable alone:
//!
//! * `sched-others`: an untraced process's context switches while another
//!   process holds the account. `sched_pingpong processes` ping-pongs a
//!   byte between two processes pinned to one CPU (two switches and two
//!   wake-ups a round trip) with nothing held, and while
//!   `sched_account_idle` holds the account (BTF tracepoints, classic
//!   ones) or bpftrace holds [`BPFTRACE_SWITCH`] (the minimal script) or
//!   [`BPFTRACE_ACCOUNT`] (what the account does for other processes);
//!   every holder traces only its own process. The loop runs pinned to CPU
//!   0, where classic tracepoints' perf events are bound (bpftrace's
//!   programs return 1, so the kernel goes on to the event there), and to
//!   the last CPU (the programs alone).
//! * `sched-own`: the traced process's own switches: `sched_pingpong
//!   threads` ping-pongs between two threads of one process, each inside an
//!   application span, with nothing attached, with the account (both
//!   mechanisms), and under bpftrace's offcputime-like script.
//! * `sched-service`: `sched_service`'s requests a second (two clients, a
//!   pool of two workers, a span per call and per request) with the
//!   account on (both mechanisms, BTF tracepoints without wait spans, and
//!   with the causes) against off.
//! * `sched-causes` (issue 41): the causes' own workloads, each inside
//!   application spans, with nothing attached, the account alone, the
//!   account with its causes, bpftrace doing the causes' aggregation in
//!   the process ([`CAUSES_CONFIGS`]), and another process holding the
//!   account without and with its causes: `sched_pingpong block`
//!   (`O_DIRECT` reads of 4 KiB, one block request each; biolatency's
//!   aggregation), `sched_pingpong lock` (two threads writing one open file
//!   through two descriptors, contending for its `f_pos_lock`; `perf lock
//!   contention`'s), and `sched_pingpong spans` (empty spans: what a span
//!   that never leaves its CPU costs; no bpftrace equivalent). Each
//!   operation's added time, and per event (a block request, a lock
//!   contention as the tracer counted it, a span).
//!
//! With the causes on (issue 41), `sched-others` also holds the account
//! with its causes (`kspan_tp_btf_causes`), and `sched-own` runs the
//! account with its causes (`tp_btf_causes`) and bpftrace's offwaketime
//! aggregation (`bpftrace_offwake`); each prints the causes against the
//! account alone, paired within the round.
//!
//! Every round runs each configuration once, in an order rotated by the
//! round; the ratios are paired within a round, and the medians over the
//! rounds are printed with the rounds' range. The per-switch figures of the
//! first two parts are the fastest of the batches of a run (other processes
//! only add time). A holder that does not come up, a run whose tracer did
//! not see the switches, a lost record or span fails the bench rather than
//! print figures.
//!
//! `--prog-stats` adds one pass of the first two parts (and of the causes'
//! part) with
//! `kernel.bpf_stats_enabled=1` (set back to what it was afterwards): each
//! BPF program's runs and run time during the loop, per run. The statistics'
//! own clock reads cost each run, so these passes are not in the timings.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::util::{median, min_max, output};

/// bpftrace's minimal sched_switch script: a timestamp per thread of its
/// own process (`$1`) at each switch-out.
pub const BPFTRACE_SWITCH: &str =
    "tracepoint:sched:sched_switch /pid == $1/ { @[tid] = nsecs; } BEGIN { printf(\"READY\\n\"); }";

/// bpftrace doing for other processes what the account does (classic
/// tracepoints): a pid test at the switch-out, a lookup of `next_pid` at
/// every switch-in, a lookup of the woken tid at every wake-up.
pub const BPFTRACE_ACCOUNT: &str = "tracepoint:sched:sched_switch /pid == $1/ { @out[tid] = nsecs; } \
     tracepoint:sched:sched_switch /@out[args->next_pid]/ { @off[args->next_pid] = sum(nsecs - @out[args->next_pid]); delete(@out[args->next_pid]); } \
     tracepoint:sched:sched_waking /@out[args->pid]/ { @wake[args->pid] = nsecs; } \
     BEGIN { printf(\"READY\\n\"); }";

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

/// Round trips a batch, batches a run: about 6 to 8 ms a batch natively,
/// short enough for some batches of a run to go undisturbed on a shared
/// machine (this one's speed shifts for tenths of a second at a time).
const ROUNDTRIPS: u32 = 2_000;
const BATCHES: u32 = 75;
/// Seconds a service run.
const SERVICE_SECS: f64 = 2.0;
/// The service's context switches a second the target is set at: its work
/// per request is calibrated to it (see [`calibrate_service`]).
const SERVICE_SWITCHES_PER_SEC: f64 = 10_000.0;
/// The work per request the calibration starts from.
const SERVICE_WORK_ROUNDS_START: u32 = 60_000;
/// Calibration runs: the first from the start, each later one from the
/// rate the one before it measured.
const CALIBRATION_RUNS: usize = 3;
/// Seconds a calibration run.
const CALIBRATION_SECS: f64 = 1.0;

/// The holders of the first part, the baseline first.
const HOLDERS: [&str; 6] = [
    "none",
    "kspan_tp_btf",
    "kspan_tp_btf_causes",
    "kspan_tracepoint",
    "bpftrace_switch",
    "bpftrace_account",
];

/// The modes of the second part, the baseline first.
const OWN_MODES: [&str; 6] = [
    "none",
    "tp_btf",
    "tp_btf_causes",
    "tracepoint",
    "bpftrace",
    "bpftrace_offwake",
];

/// The modes of the third part, the baseline first (`tp_btf_totals`: BTF
/// tracepoints without wait spans).
const SERVICE_MODES: [&str; 5] = [
    "off",
    "tp_btf",
    "tracepoint",
    "tp_btf_totals",
    "tp_btf_causes",
];

/// The causes' workloads (`sched_pingpong WORKLOAD MODE OPS BATCHES`):
/// the operations a batch and the batches a run (each run the fastest
/// batch): a batch of reads takes about 4 ms here, of writes (two
/// threads) about 3 ms, of spans about 1 to 5 ms.
const WORKLOADS: [(&str, u32, u32); 3] =
    [("block", 50, 60), ("lock", 2_000, 40), ("spans", 2_000, 50)];

/// The configurations of the causes' part, the baseline first: name, the
/// workload's mode (what it attaches in its own process), and the holder
/// another process runs meanwhile.
const CAUSES_CONFIGS: [(&str, &str, Option<&str>); 6] = [
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
const STATS_TIMED: [&str; 1] = ["block"];

/// Whether `config` runs `workload`: the spans have no bpftrace
/// equivalent, and another process's account costs them nothing (no
/// system call, no switch).
fn applies(workload: &str, config: &str) -> bool {
    workload != "spans" || matches!(config, "none" | "tp_btf" | "tp_btf_causes")
}

/// `cargo xtask bench --host --only sched...`.
pub fn bench(programs: &Programs, rounds: u32, part: Part, prog_stats: bool) -> Result<u8> {
    if crate::util::which("bpftrace").is_none() && part != Part::Service {
        bail!("bpftrace not found: run `cargo xtask deps`");
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pins: Vec<usize> = if cpus > 1 { vec![0, cpus - 1] } else { vec![0] };
    let mut lines = Vec::new();
    if part.has(Part::Others) {
        let figures = measure_others(programs, rounds, &pins)?;
        println!("{}", report_others(&figures, rounds, &pins).join("\n"));
    }
    if part.has(Part::Own) {
        let figures = measure_own(programs, rounds, &pins)?;
        println!("{}", report_own(&figures, rounds, &pins).join("\n"));
    }
    if part.has(Part::Service) {
        let (work, switches) = calibrate_service(programs)?;
        let figures = measure_service(programs, rounds, work)?;
        println!(
            "{}",
            report_service(&figures, rounds, work, switches)?.join("\n")
        );
    }
    if part.has(Part::Causes) {
        let figures = measure_causes(programs, rounds)?;
        println!("{}", report_causes(&figures, rounds).join("\n"));
    }
    if prog_stats && part != Part::Service {
        let _stats = BpfStats::enable()?;
        if part.has(Part::Others) || part.has(Part::Own) {
            lines.push(format!(
            "BPF programs during the loop (kernel.bpf_stats_enabled=1, one pass, {} round trips, pinned to CPU {}; \
             runs on every CPU, ns a run as the statistics measure it):",
                ROUNDTRIPS * BATCHES,
                pins[pins.len() - 1]
            ));
        }
        let cpu = pins[pins.len() - 1];
        if part.has(Part::Others) {
            for holder in &HOLDERS[1..] {
                let held = Holder::start(programs, holder)?;
                let out = pingpong_processes(programs, cpu, true)?;
                held.stop()?;
                lines.extend(prog_lines(&format!("others, {holder} held"), &out));
            }
        }
        if part.has(Part::Own) {
            for mode in &OWN_MODES[1..] {
                let out = pingpong_threads(programs, mode, cpu, true)?;
                lines.extend(prog_lines(&format!("own, {mode}"), &out));
            }
        }
        if part.has(Part::Causes) {
            lines.push(
                "BPF programs during the causes' workloads (one pass; ns a run as the statistics \
                 measure it; an event: a block request, a lock contention as the tracer counted \
                 it, a span):"
                    .to_owned(),
            );
            for (config, mode, holder) in &CAUSES_CONFIGS[1..] {
                let held = holder.map(|h| Holder::start(programs, h)).transpose()?;
                for (workload, _, _) in WORKLOADS {
                    if !applies(workload, config) {
                        continue;
                    }
                    let out = causes_run(programs, workload, mode, true)?;
                    let run = parse_causes(&out)?;
                    lines.extend(causes_prog_lines(
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

/// The `PROG` lines of a loop's output, for the report.
fn prog_lines(what: &str, out: &str) -> Vec<String> {
    let mut lines = vec![format!("  {what}:")];
    let rts = f64::from(ROUNDTRIPS * BATCHES);
    let mut per_rt = 0.0;
    for line in out.lines().filter(|l| l.starts_with("PROG ")) {
        let w: Vec<&str> = line.split_whitespace().collect();
        if let [_, id, name, "runs", runs, "ns_per_run", ns] = w.as_slice() {
            let runs: f64 = runs.parse().unwrap_or(0.0);
            let ns: f64 = ns.parse().unwrap_or(0.0);
            per_rt += ns * runs / rts;
            lines.push(format!(
                "    {name:<16} (id {id}) {ns:>8.1} ns a run, {:.2} runs a round trip",
                runs / rts
            ));
        }
    }
    if lines.len() == 1 {
        lines.push("    (no program ran)".into());
    } else {
        let switches = parse_pingpong(out).map_or(f64::NAN, |p| p.switches_per_rt);
        lines.push(format!(
            "    all programs: {per_rt:.0} ns a round trip, {:.0} ns a switch",
            per_rt / switches
        ));
    }
    lines
}

/// A process holding probes: `sched_account_idle`, or bpftrace on its own
/// pid; up once it printed its ready line.
struct Holder {
    name: String,
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Its last lines on stderr.
    said: Arc<Mutex<Vec<String>>>,
}

impl Holder {
    fn start(programs: &Programs, name: &str) -> Result<Holder> {
        let mut cmd = match name {
            "kspan_tp_btf" => {
                let mut c = Command::new(&programs.idle);
                c.arg("tp_btf");
                c
            }
            "kspan_tp_btf_causes" => {
                let mut c = Command::new(&programs.idle);
                c.arg("tp_btf_causes");
                c
            }
            "kspan_tracepoint" => {
                let mut c = Command::new(&programs.idle);
                c.arg("tracepoint");
                c
            }
            // `exec` keeps the shell's pid, `$$`, for bpftrace: its own.
            "bpftrace_switch" | "bpftrace_account" => {
                let script = if name == "bpftrace_switch" {
                    BPFTRACE_SWITCH
                } else {
                    BPFTRACE_ACCOUNT
                };
                let mut c = Command::new("sh");
                c.args(["-c", "exec bpftrace -e \"$0\" $$", script]);
                c
            }
            other => bail!("no holder `{other}`"),
        };
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start holder {name}"))?;
        let stdout = child.stdout.take().context("holder without stdout")?;
        // Its last lines on stderr, kept to say why it failed.
        let stderr = child.stderr.take().context("holder without stderr")?;
        let said: Arc<Mutex<Vec<String>>> = Arc::default();
        let kept = said.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
                if kept.len() == 20 {
                    kept.remove(0);
                }
                kept.push(line);
            }
        });
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut holder = Holder {
            name: name.to_owned(),
            child,
            lines,
            said,
        };
        loop {
            match holder.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(l) if l.starts_with("SCHED-IDLE ready") || l.trim() == "READY" => {
                    return Ok(holder)
                }
                Ok(_) => {}
                Err(_) => {
                    let _ = holder.child.kill();
                    let status = holder.child.wait();
                    // The reader's last lines, once it has read them.
                    std::thread::sleep(Duration::from_millis(100));
                    bail!(
                        "holder {name} did not come up ({status:?}); its stderr: {:?}",
                        holder.said()
                    );
                }
            }
        }
    }

    fn said(&self) -> Vec<String> {
        self.said.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Signals the holder to stop and checks that it ended cleanly.
    fn stop(mut self) -> Result<()> {
        let signal = if self.name.starts_with("bpftrace") {
            "-INT"
        } else {
            "-TERM"
        };
        // bpftrace 0.17 can miss a SIGINT that arrives while it is not in
        // `epoll_wait` (it then waits on with no timeout): the signal goes
        // again every second, for up to 30 s.
        let pid = self.child.id().to_string();
        let mut status = None;
        for _ in 0..30 {
            output(Command::new("kill").args([signal, &pid]))?;
            for _ in 0..10 {
                status = self.child.try_wait()?;
                if status.is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if status.is_some() {
                break;
            }
        }
        let Some(status) = status else {
            let _ = self.child.kill();
            let _ = self.child.wait();
            bail!(
                "holder {} did not exit within 30 s of its signal",
                self.name
            );
        };
        let rest: Vec<String> = self.lines.iter().collect();
        if !status.success() {
            bail!(
                "holder {} ended with {status}; its stderr: {:?}",
                self.name,
                self.said()
            );
        }
        if self.name.starts_with("kspan") && !rest.iter().any(|l| l.starts_with("SCHED-IDLE done"))
        {
            bail!("holder {} did not shut down cleanly: {rest:?}", self.name);
        }
        Ok(())
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
    let line = out
        .lines()
        .find(|l| l.starts_with("PINGPONG "))
        .with_context(|| format!("no PINGPONG line in: {out}"))?;
    let w: Vec<&str> = line.split_whitespace().collect();
    let field = |name: &str| -> Result<f64> {
        let v = w
            .iter()
            .position(|x| *x == name)
            .and_then(|i| w.get(i + 1))
            .with_context(|| format!("no `{name}` in `{line}`"))?;
        if *v == "-" {
            return Ok(f64::NAN);
        }
        v.parse()
            .with_context(|| format!("`{name}` is not a number in `{line}`"))
    };
    let p = Pingpong {
        rt_ns: field("rt_ns")?,
        switches_per_rt: field("switches_per_rt")?,
        switches: field("switches")?,
        traced: field("traced_switches")?,
    };
    if !(p.rt_ns > 0.0 && p.switches_per_rt > 0.0) {
        bail!("no round trip or no switch measured: `{line}`");
    }
    Ok(p)
}

fn pingpong_processes(programs: &Programs, cpu: usize, stats: bool) -> Result<String> {
    let mut cmd = Command::new(&programs.pingpong);
    cmd.args([
        "processes".to_owned(),
        cpu.to_string(),
        ROUNDTRIPS.to_string(),
        BATCHES.to_string(),
    ]);
    if stats {
        cmd.env("KSPAN_BENCH_PROG_STATS", "1");
    }
    output(&mut cmd)
}

fn pingpong_threads(programs: &Programs, mode: &str, cpu: usize, stats: bool) -> Result<String> {
    let mut cmd = Command::new(&programs.pingpong);
    cmd.args([
        "threads".to_owned(),
        mode.to_owned(),
        cpu.to_string(),
        ROUNDTRIPS.to_string(),
        BATCHES.to_string(),
    ]);
    if stats {
        cmd.env("KSPAN_BENCH_PROG_STATS", "1");
    }
    output(&mut cmd)
}

/// (cpu, configuration) -> one figure per round.
pub type Figures = BTreeMap<(usize, String), Vec<Pingpong>>;

fn measure_others(programs: &Programs, rounds: u32, pins: &[usize]) -> Result<Figures> {
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
                let out = pingpong_processes(programs, cpu, false)?;
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

fn fig(figures: &Figures, cpu: usize, name: &str) -> Vec<Pingpong> {
    figures
        .get(&(cpu, name.to_owned()))
        .cloned()
        .unwrap_or_default()
}

fn range(v: &[f64]) -> String {
    let (lo, hi) = min_max(v);
    format!("[{lo:.2}..{hi:.2}]")
}

fn range0(v: &[f64]) -> String {
    let (lo, hi) = min_max(v);
    format!("[{lo:.0}..{hi:.0}]")
}

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
fn pingpong_lines(
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
            range0(&a.paired)
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
                range(&paired)
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
            range3(&rt),
            added_a.q25 / added_b.q25,
            med(&ratios(&added_a.paired, &added_b.paired)),
            range(&ratios(&added_a.paired, &added_b.paired)),
            added_a.q25 - added_b.q25,
            med(&more),
            range0(&more)
        ));
    }
    lines
}

fn range3(v: &[f64]) -> String {
    let (lo, hi) = min_max(v);
    format!("[{lo:.3}..{hi:.3}]")
}

pub fn report_others(figures: &Figures, rounds: u32, pins: &[usize]) -> Vec<String> {
    let mut lines = vec![format!(
        "an untraced process's context switches while another process holds the scheduler account \
         (two processes ping-ponging a byte over two pipes, both pinned to one CPU; {rounds} rounds; \
         per run the fastest of {BATCHES} batches of {ROUNDTRIPS} round trips; the baseline is nothing \
         held, at the start and the end of each round (their mean); added = held - baseline, per switch: \
         from the lower quartiles of the rounds (the shared machine's slow spells left out), from the \
         fastest rounds, and paired within each round):"
    )];
    for &cpu in pins {
        let start = fig(figures, cpu, "none");
        let end = fig(figures, cpu, "none_end");
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
            .map(|h| (*h, fig(figures, cpu, h)))
            .collect();
        lines.extend(pingpong_lines(
            &base,
            spr,
            &configs,
            &["bpftrace_switch", "bpftrace_account"],
            &[("kspan_tp_btf_causes", "kspan_tp_btf")],
        ));
    }
    lines
}

fn measure_own(programs: &Programs, rounds: u32, pins: &[usize]) -> Result<Figures> {
    let mut figures = Figures::new();
    for round in 0..rounds as usize {
        for k in 0..OWN_MODES.len() {
            let mode = OWN_MODES[(k + round) % OWN_MODES.len()];
            for &cpu in pins {
                let out = pingpong_threads(programs, mode, cpu, false)?;
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

pub fn report_own(figures: &Figures, rounds: u32, pins: &[usize]) -> Vec<String> {
    let mut lines = vec![format!(
        "the traced process's own context switches (two threads ping-ponging a byte over two pipes, \
         both pinned to one CPU, each inside an application span; {rounds} rounds; per run the fastest \
         of {BATCHES} batches of {ROUNDTRIPS} round trips; the baseline is nothing attached; added per \
         switch as above; bpftrace: offcputime's aggregation, off-CPU time summed per thread and kernel \
         stack; bpftrace_offwake: offwaketime's, per thread, kernel stack, waker's stack and waker; \
         tp_btf_causes: the account with its causes):"
    )];
    for &cpu in pins {
        let none = fig(figures, cpu, "none");
        let base: Vec<f64> = none.iter().map(|p| p.rt_ns).collect();
        let spr = med(&none.iter().map(|p| p.switches_per_rt).collect::<Vec<_>>());
        lines.push(format!("  pinned to CPU {cpu}:"));
        let configs: Vec<(&str, Vec<Pingpong>)> = OWN_MODES[1..]
            .iter()
            .map(|m| (*m, fig(figures, cpu, m)))
            .collect();
        lines.extend(pingpong_lines(
            &base,
            spr,
            &configs,
            &["bpftrace", "bpftrace_offwake"],
            &[("tp_btf_causes", "tp_btf")],
        ));
    }
    lines
}

/// One `SCHED-SERVICE` line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Service {
    pub per_sec: f64,
    pub per_cpu_sec: f64,
    pub switches_per_sec: f64,
}

/// Reads `SCHED-SERVICE <mode> secs <s> requests <n> cpu_ns <n> switches
/// <n> spans <n> accounted <n> lost <n>`, checking that the account summed
/// switches when on, none when off, and lost nothing.
pub fn parse_service(out: &str, mode: &str) -> Result<Service> {
    let line = out
        .lines()
        .find(|l| l.starts_with("SCHED-SERVICE "))
        .with_context(|| format!("no SCHED-SERVICE line in: {out}"))?;
    let w: Vec<&str> = line.split_whitespace().collect();
    let field = |name: &str| -> Result<f64> {
        w.iter()
            .position(|x| *x == name)
            .and_then(|i| w.get(i + 1)?.parse().ok())
            .with_context(|| format!("no `{name}` in `{line}`"))
    };
    let (secs, requests, cpu) = (field("secs")?, field("requests")?, field("cpu_ns")?);
    if requests < 1.0 || secs <= 0.0 || cpu <= 0.0 {
        bail!("no request served: `{line}`");
    }
    let accounted = field("accounted")?;
    if (mode == "off") != (accounted == 0.0) {
        bail!("the account summed switches on {accounted} spans with the account {mode}: `{line}`");
    }
    if field("lost")? > 0.0 {
        bail!("kspan lost records: `{line}`");
    }
    Ok(Service {
        per_sec: requests / secs,
        per_cpu_sec: requests / cpu * 1e9,
        switches_per_sec: field("switches")? / secs,
    })
}

/// mode -> one figure per round.
pub type ServiceFigures = BTreeMap<String, Vec<Service>>;

/// The work per request (hash rounds) at which the service, with the
/// account off, switches [`SERVICE_SWITCHES_PER_SEC`] times a second on
/// this machine, and the rate the last calibration run measured. A
/// request's switches are fixed (about three), so the rate goes as the
/// inverse of its work: each run scales the work by what it measured.
fn calibrate_service(programs: &Programs) -> Result<(u32, f64)> {
    let mut work = SERVICE_WORK_ROUNDS_START;
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
        "sched-service: {work} hash rounds a request for {SERVICE_SWITCHES_PER_SEC} switches a second (the last calibration run: {switches:.0} a second)"
    );
    Ok((work, switches))
}

/// `work` scaled so that a run measured at `switches` a second would
/// switch [`SERVICE_SWITCHES_PER_SEC`] times a second.
fn scaled_work(work: u32, switches: f64) -> Result<u32> {
    if !(switches.is_finite() && switches > 0.0) {
        bail!("the service switched {switches} times a second: nothing to calibrate by");
    }
    let scaled = f64::from(work) * switches / SERVICE_SWITCHES_PER_SEC;
    Ok(scaled.clamp(1_000.0, 100_000_000.0) as u32)
}

fn measure_service(programs: &Programs, rounds: u32, work: u32) -> Result<ServiceFigures> {
    let mut figures = ServiceFigures::new();
    for round in 0..rounds as usize {
        for k in 0..SERVICE_MODES.len() {
            let mode = SERVICE_MODES[(k + round) % SERVICE_MODES.len()];
            let out = output(Command::new(&programs.service).args([
                mode.to_owned(),
                SERVICE_SECS.to_string(),
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

pub fn report_service(
    figures: &ServiceFigures,
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
         {work} hash rounds a request, calibrated to {SERVICE_SWITCHES_PER_SEC:.0} switches a second with \
         the account off (the last calibration run: {calibrated_switches:.0}); {rounds} rounds of \
         {SERVICE_SECS} s per mode after \
         half a second of warm-up; tp_btf_totals: no wait spans; tp_btf_causes: with the causes):"
    )];
    for mode in SERVICE_MODES {
        let runs = get(mode)?;
        let per_sec: Vec<f64> = runs.iter().map(|s| s.per_sec).collect();
        let sw: Vec<f64> = runs.iter().map(|s| s.switches_per_sec).collect();
        let mut line = format!(
            "  {mode:<11} {:>7.0} requests/s {}, {:>6.0} switches/s",
            med(&per_sec),
            range0(&per_sec),
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
                range(&wall),
                med(&cpu),
                range(&cpu)
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
                range(&paired),
                med(&cpu),
                range(&cpu)
            ));
        }
        lines.push(line);
    }
    Ok(lines)
}

/// One `CAUSES` line.
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
    /// program of the machine that ran (NaN: statistics off; see
    /// [`STATS_TIMED`]).
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
/// ops <n> events <n|-> traced_events <n|->`.
pub fn parse_causes(out: &str) -> Result<CausesRun> {
    let line = out
        .lines()
        .find(|l| l.starts_with("CAUSES "))
        .with_context(|| format!("no CAUSES line in: {out}"))?;
    let w: Vec<&str> = line.split_whitespace().collect();
    let field = |name: &str| -> Result<f64> {
        let v = w
            .iter()
            .position(|x| *x == name)
            .and_then(|i| w.get(i + 1))
            .with_context(|| format!("no `{name}` in `{line}`"))?;
        if *v == "-" {
            return Ok(f64::NAN);
        }
        v.parse()
            .with_context(|| format!("`{name}` is not a number in `{line}`"))
    };
    let run = CausesRun {
        ns_per_op: field("ns_per_op")?,
        ops: field("ops")?,
        events: field("events")?,
        traced: field("traced_events")?,
        prog_ns: f64::NAN,
    };
    if !(run.ns_per_op > 0.0 && run.ops > 0.0) {
        bail!("no operation measured: `{line}`");
    }
    Ok(run)
}

/// Checks that a run measured what it is for: the reads reached a disk,
/// and the tracers saw the events.
fn check_causes(workload: &str, mode: &str, run: &CausesRun, out: &str) -> Result<()> {
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

fn causes_run(programs: &Programs, workload: &str, mode: &str, stats: bool) -> Result<String> {
    let (_, ops, batches) = WORKLOADS
        .iter()
        .find(|(w, _, _)| *w == workload)
        .with_context(|| format!("no workload `{workload}`"))?;
    let mut cmd = Command::new(&programs.pingpong);
    cmd.args([
        workload.to_owned(),
        mode.to_owned(),
        ops.to_string(),
        batches.to_string(),
    ]);
    if stats {
        cmd.env("KSPAN_BENCH_PROG_STATS", "1");
    }
    output(&mut cmd)
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
    out.lines()
        .filter(|l| l.starts_with("PROG "))
        .filter_map(|line| {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                [_, _, _, "runs", runs, "ns_per_run", ns] => {
                    Some(runs.parse::<f64>().ok()? * ns.parse::<f64>().ok()?)
                }
                _ => None,
            }
        })
        .sum::<f64>()
        / timed_ops
}

/// (workload, configuration) -> one figure per round.
pub type CausesFigures = BTreeMap<(String, String), Vec<CausesRun>>;

fn measure_causes(programs: &Programs, rounds: u32) -> Result<CausesFigures> {
    let mut figures = CausesFigures::new();
    for round in 0..rounds as usize {
        let n = CAUSES_CONFIGS.len();
        for k in 0..n {
            let (config, mode, holder) = CAUSES_CONFIGS[(k + round) % n];
            let held = holder.map(|h| Holder::start(programs, h)).transpose()?;
            for (workload, _, _) in WORKLOADS {
                if !applies(workload, config) {
                    continue;
                }
                let stats = STATS_TIMED.contains(&workload);
                let guard = stats.then(BpfStats::enable).transpose()?;
                let out = causes_run(programs, workload, mode, stats)?;
                drop(guard);
                let mut run = parse_causes(&out)?;
                if stats {
                    run.prog_ns = prog_ns_per_op(&out, timed_ops(workload));
                }
                check_causes(workload, mode, &run, &out)?;
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

pub fn report_causes(figures: &CausesFigures, rounds: u32) -> Vec<String> {
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
        for (config, _, _) in &CAUSES_CONFIGS[1..] {
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
                range0(&a.paired)
            );
            if a.events.is_finite() {
                line.push_str(&format!(
                    "; {:.3} events {op}, added {event}: {:+.0} ns (lower quartiles), {:+.0} {} (paired)",
                    a.events,
                    a.q25 / a.events,
                    med(&a.paired_event),
                    range0(&a.paired_event)
                ));
            }
            let progs: Vec<f64> = runs.iter().map(|r| r.prog_ns / r.events_per_op()).collect();
            if progs.iter().any(|p| p.is_finite()) {
                line.push_str(&format!(
                    "; BPF programs {:.0} ns {event} {} (the statistics')",
                    med(&progs),
                    range0(&progs)
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
                    range0(&base_progs)
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
                    range(&whole),
                    med(&own),
                    med(&part),
                    range(&part)
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
            range0(&own),
            if causes.events.is_finite() {
                format!(
                    "; {:+.0} ns {event} {} (paired)",
                    med(&own_event),
                    range0(&own_event)
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
                range(&whole),
                ((causes.q25 - account.q25) / causes.events) / (bt.q25 / bt.events),
                med(&part),
                range(&part)
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
                range0(&more)
            ));
        }
    }
    lines
}

/// The `PROG` lines of a causes workload's run: each program's ns a run
/// and runs an operation, and all of them an operation and an event
/// (`events`: events an operation).
fn causes_prog_lines(what: &str, out: &str, timed_ops: f64, events: f64) -> Vec<String> {
    let mut lines = vec![format!("  {what}:")];
    let mut per_op = 0.0;
    for line in out.lines().filter(|l| l.starts_with("PROG ")) {
        let w: Vec<&str> = line.split_whitespace().collect();
        if let [_, id, name, "runs", runs, "ns_per_run", ns] = w.as_slice() {
            let runs: f64 = runs.parse().unwrap_or(0.0);
            let ns: f64 = ns.parse().unwrap_or(0.0);
            per_op += ns * runs / timed_ops;
            lines.push(format!(
                "    {name:<16} (id {id}) {ns:>8.1} ns a run, {:.3} runs an operation",
                runs / timed_ops
            ));
        }
    }
    if lines.len() == 1 {
        lines.push("    (no program ran)".into());
    } else {
        lines.push(format!(
            "    all programs: {per_op:.0} ns an operation, {:.0} ns an event ({events:.3} events an operation)",
            per_op / events
        ));
    }
    lines
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
    fn quantiles() {
        assert_eq!(quantile(&[4.0, 1.0, 3.0, 2.0, 5.0], 0.25), 2.0);
        assert_eq!(quantile(&[1.0, 2.0], 0.5), 1.5);
        assert_eq!(quantile(&[7.0], 0.25), 7.0);
        assert!(quantile(&[], 0.25).is_nan());
    }

    #[test]
    fn added_cost_is_per_switch_and_paired() {
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
        let a = added(&fig(&figures, 1, "kspan_tp_btf"), &[1000.0, 2000.0]);
        assert_eq!(a.paired, vec![50.0, 150.0]);
        assert_eq!(a.fastest, 50.0);
        // Lower quartiles: 1400 against 1250.
        assert_eq!(a.q25, 75.0);
        let lines = report_others(&figures, 2, &[1]).join("\n");
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
        // A read that reached no disk, a tracer that missed the requests.
        let missed = CausesRun { traced: 100.0, ..r };
        assert!(check_causes("block", "tp_btf_causes", &r, "").is_ok());
        assert!(check_causes("block", "tp_btf_causes", &missed, "").is_err());
        assert!(check_causes("block", "tp_btf", &missed, "").is_ok());
        let cached = CausesRun { events: 0.0, ..r };
        assert!(check_causes("block", "none", &cached, "").is_err());
        let quiet = CausesRun {
            traced: 0.0,
            ..lock
        };
        assert!(check_causes("lock", "bpftrace", &quiet, "").is_err());
        assert!(check_causes("lock", "tp_btf", &quiet, "").is_ok());
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
        let mut figures = CausesFigures::new();
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
        let lines = report_causes(&figures, 2).join("\n");
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
        let mut figures = CausesFigures::new();
        for (config, ns) in [
            ("none", 0.0),
            ("tp_btf", 1000.0),
            ("tp_btf_causes", 3000.0),
            ("bpftrace", 4000.0),
        ] {
            figures.insert(("block".into(), config.into()), vec![read(ns); 2]);
        }
        let lines = report_causes(&figures, 2).join("\n");
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
}
