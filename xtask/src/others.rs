//! The bench's cost to other processes (issue 12): what an untraced
//! process pays per system call while another process holds probes on the
//! same call, kspan (tracing only itself, its default) against bpftrace with
//! a pid predicate on the same hooks, side by side in one run.
//!
//! One shell script serves the guest and the host: per round, the
//! `syscall_loop` example times `getppid` and 1-byte `read`s of `/dev/zero`
//! with nothing attached (at the start and at the end of the round), then
//! while each probe is held by kspan's `hold_probes` example and by bpftrace
//! in turn (which of the two goes first alternates with the round, so that
//! order and drift cancel). The added cost is a held figure minus the
//! round's unattached one; kspan's over bpftrace's is paired within a round.

use std::collections::BTreeMap;

use anyhow::{bail, Result};

use crate::util::{median, min_max};

/// One probe held by another process while the loops run.
pub struct Held {
    /// The name in the script's output lines.
    pub name: &'static str,
    /// What is held, for the report.
    pub what: &'static str,
    /// `hold_probes`'s mode.
    pub kspan_mode: &'static str,
    /// bpftrace's program on the same hooks: `$1` is bpftrace's own pid (as
    /// kspan traces its own process), so the predicate is false for the
    /// measured process; `READY` is printed once every probe is attached.
    pub bpftrace: &'static str,
    /// The loop's call the probe is on; the other loop's figure shows what
    /// other calls pay (or, for a function probe, the noise).
    pub call: &'static str,
    /// Also on the host kernel, which runs tracepoint programs only.
    pub host: bool,
}

/// The probes, in the order they are held.
pub const HELD: &[Held] = &[
    Held {
        name: "getppid_tp",
        what: "getppid syscall tracepoints",
        kspan_mode: "getppid",
        bpftrace: "tracepoint:syscalls:sys_enter_getppid /pid == $1/ { @s[tid] = nsecs; } \
                   tracepoint:syscalls:sys_exit_getppid /pid == $1/ { @h = hist(nsecs - @s[tid]); delete(@s[tid]); } \
                   BEGIN { printf(\"READY\\n\"); }",
        call: "getppid",
        host: true,
    },
    Held {
        name: "read_tp",
        what: "read syscall tracepoints",
        kspan_mode: "read",
        bpftrace: "tracepoint:syscalls:sys_enter_read /pid == $1/ { @s[tid] = nsecs; } \
                   tracepoint:syscalls:sys_exit_read /pid == $1/ { @h = hist(nsecs - @s[tid]); delete(@s[tid]); } \
                   BEGIN { printf(\"READY\\n\"); }",
        call: "read",
        host: true,
    },
    Held {
        name: "vfs_read_fexit",
        what: "vfs_read fentry+fexit (kspan fexit, bpftrace kfunc+kretfunc)",
        kspan_mode: "fexit",
        bpftrace: "kfunc:vfs_read /pid == $1/ { @s[tid] = nsecs; } \
                   kretfunc:vfs_read /pid == $1/ { @h = hist(nsecs - @s[tid]); delete(@s[tid]); } \
                   BEGIN { printf(\"READY\\n\"); }",
        call: "read",
        host: false,
    },
    Held {
        name: "vfs_read_kretprobe",
        what: "vfs_read kprobe+kretprobe (kspan kretprobe, bpftrace kprobe+kretprobe)",
        kspan_mode: "kretprobe",
        bpftrace: "kprobe:vfs_read /pid == $1/ { @s[tid] = nsecs; } \
                   kretprobe:vfs_read /pid == $1/ { @h = hist(nsecs - @s[tid]); delete(@s[tid]); } \
                   BEGIN { printf(\"READY\\n\"); }",
        call: "read",
        host: false,
    },
];

/// The two loops' calls.
const CALLS: [&str; 2] = ["getppid", "read"];

/// Where the loop runs: pinned to CPU 0, where the probes' perf events are
/// bound (kspan and bpftrace open tracepoint and kprobe events system-wide
/// on CPU 0, as libbpf and bcc do), or to the last CPU. A tracepoint program
/// that returns non-zero (bpftrace's do, bpftrace/bpftrace#1857, so that
/// other perf users still see the event; kspan's return 0) sends the kernel
/// on to the events' own work for calls on CPU 0; on the other CPUs the
/// programs alone count. Pinned, each figure is one of the two, not a mix
/// that depends on where the scheduler put the loop.
const CPUS: [&str; 2] = ["cpu0", "last"];

/// How the script runs.
pub struct Plan<'a> {
    /// The `syscall_loop` example.
    pub syscall_loop: &'a str,
    /// The `hold_probes` example.
    pub hold_probes: &'a str,
    /// The bpftrace command.
    pub bpftrace: &'a str,
    /// The probes held.
    pub held: Vec<&'static Held>,
    pub rounds: u32,
    /// Calls per batch, and batches per loop.
    pub calls: u32,
    pub batches: u32,
    /// How long a holder may take to attach.
    pub ready_secs: u32,
}

/// Single-quotes `s` for sh.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The script: prints `OTHERS <round> <side> <held> <call> <cpu> min <ns>
/// median <ns> max <ns>` per loop (its batches' times per call) and `HELD
/// <round> kspan <held> emitted <n> handed <n> lost <n>` per kspan
/// holder; on any failure, `BENCH-FAILED`, the failing command's output,
/// and exit status 1.
pub fn script(p: &Plan) -> String {
    let mut s = format!(
        r#"fail() {{ echo "BENCH-FAILED $*"; exit 1; }}
last=$(( $(nproc) - 1 ))
[ $last -ge 1 ] || fail "the loops need two CPUs, this machine has $(nproc)"
loops() {{
  for c in {calls_list}; do
    for cpu in {cpus}; do
      on=0; [ $cpu = cpu0 ] || on=$last
      taskset -c $on {lp} $c {calls} {batches} >/tmp/others-loop.out 2>&1 || {{ cat /tmp/others-loop.out; fail "syscall_loop $c on CPU $on ($2 $3)"; }}
      sed -n "s/^SYSCALL-LOOP $c /OTHERS $1 $2 $3 $c $cpu /p" /tmp/others-loop.out
    done
  done
}}
held() {{
  r=$1; side=$2; name=$3; shift 3
  # Emptied first: the background job's own redirection can come after the
  # first poll below, which would then see the previous holder's ready line.
  : >/tmp/others-held.out
  "$@" >/tmp/others-held.out 2>&1 &
  h=$!; n=0
  until grep -qE '^(READY|HOLD-PROBES ready)' /tmp/others-held.out; do
    if ! kill -0 $h 2>/dev/null; then wait $h; st=$?; cat /tmp/others-held.out; fail "$side $name exited (status $st) before it was ready"; fi
    n=$((n + 1))
    if [ $n -gt {polls} ]; then kill -KILL $h; cat /tmp/others-held.out; fail "$side $name not ready after {ready} s"; fi
    sleep 0.1
  done
  loops $r $side $name
  kill -TERM $h; wait $h; st=$?
  if [ $st -ne 0 ]; then cat /tmp/others-held.out; fail "$side $name exited with status $st"; fi
  sed -n "s/^HOLD-PROBES done /HELD $r $side $name /p" /tmp/others-held.out
}}
for r in $(seq {rounds}); do
  loops $r none -
"#,
        calls_list = CALLS.join(" "),
        cpus = CPUS.join(" "),
        lp = quote(p.syscall_loop),
        calls = p.calls,
        batches = p.batches,
        polls = p.ready_secs * 10,
        ready = p.ready_secs,
        rounds = p.rounds,
    );
    for h in &p.held {
        let kspan = format!(
            "held $r kspan {} {} {}",
            h.name,
            quote(p.hold_probes),
            h.kspan_mode
        );
        // `exec` keeps sh's pid, `$$`, for bpftrace: its own pid is `$1`.
        let bpftrace = format!(
            "held $r bpftrace {} sh -c {} {}",
            h.name,
            quote(&format!("exec {} -e \"$0\" $$", quote(p.bpftrace))),
            quote(h.bpftrace)
        );
        // Which goes first alternates, so that order and drift cancel.
        s += &format!(
            "  if [ $((r % 2)) -eq 1 ]; then\n    {kspan}\n    {bpftrace}\n  else\n    {bpftrace}\n    {kspan}\n  fi\n"
        );
    }
    s += "  loops $r none -\ndone\n";
    s
}

/// (round, side, held, call, cpu) -> the loops' ns per call.
type Figures = BTreeMap<(u32, String, String, String, String), Vec<f64>>;

fn key(
    round: u32,
    side: &str,
    held: &str,
    call: &str,
    cpu: &str,
) -> (u32, String, String, String, String) {
    (round, side.into(), held.into(), call.into(), cpu.into())
}

/// The script's output, checked: every figure of every round present, and
/// every kspan holder's probes seen live (its own call recorded) and blind
/// to the measured process.
pub fn parse(output: &str, p: &Plan) -> Result<Figures> {
    let mut figures = Figures::new();
    let mut held_lines = BTreeMap::new();
    for line in output.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
        match f.first().copied() {
            Some("BENCH-FAILED") => bail!("the run failed: {line}"),
            Some("OTHERS") => {
                // The fastest batch: see `syscall_loop`.
                let (Some(round), Some("min"), Some(ns)) = (num(1), f.get(6).copied(), num(7))
                else {
                    bail!("unreadable line: {line}");
                };
                figures
                    .entry(key(round as u32, f[2], f[3], f[4], f[5]))
                    .or_default()
                    .push(ns);
            }
            Some("HELD") => {
                let (Some(round), Some(emitted), Some(lost)) = (num(1), num(5), num(9)) else {
                    bail!("unreadable line: {line}");
                };
                // At least the holder's own call: the probes were live.
                if emitted < 1.0 {
                    bail!(
                        "{line}: kspan's probes recorded nothing, not even the holder's own call"
                    );
                }
                // Far fewer than the loop's calls: the loop was not traced.
                if emitted >= f64::from(p.calls) || lost > 0.0 {
                    bail!("{line}: kspan recorded the measured process's calls");
                }
                held_lines.insert((round as u32, f[3].to_owned()), emitted);
            }
            _ => {}
        }
    }
    for round in 1..=p.rounds {
        let mut want = vec![("none", "-", 2)];
        for h in &p.held {
            want.push(("kspan", h.name, 1));
            want.push(("bpftrace", h.name, 1));
        }
        for (side, held, runs) in want {
            for call in CALLS {
                for cpu in CPUS {
                    let got = figures
                        .get(&key(round, side, held, call, cpu))
                        .map_or(0, Vec::len);
                    if got != runs {
                        bail!("round {round}: {got} figures, not {runs}, for the {call} loop on {cpu} with {side} {held}");
                    }
                }
            }
        }
        for h in &p.held {
            if !held_lines.contains_key(&(round, h.name.to_owned())) {
                bail!(
                    "round {round}: kspan's holder of {} printed no final line",
                    h.name
                );
            }
        }
    }
    Ok(figures)
}

/// The report's lines, from checked figures.
pub fn report(figures: &Figures, p: &Plan) -> Vec<String> {
    // The mean of a round's runs (the unattached loop runs twice a round).
    let get = |round: u32, side: &str, held: &str, call: &str, cpu: &str| -> f64 {
        let v = &figures[&key(round, side, held, call, cpu)];
        v.iter().sum::<f64>() / v.len() as f64
    };
    let rounds: Vec<u32> = (1..=p.rounds).collect();
    let mut out = vec![format!(
        "cost to an untraced process per call, while another process holds probes on the call \
         ({} rounds; per loop the fastest of {} batches of {} calls; added = held - nothing held \
         in the same round; medians over the rounds, the rounds' range in brackets):",
        p.rounds, p.batches, p.calls
    )];
    for cpu in CPUS {
        out.push(if cpu == "cpu0" {
            "  loop pinned to CPU 0, where the probes' perf events are bound (bpftrace's \
             tracepoint programs return 1: the kernel goes on to the perf event there):"
                .to_owned()
        } else {
            "  loop pinned to the last CPU (the probes' programs alone):".to_owned()
        });
        let bases: Vec<String> = CALLS
            .iter()
            .map(|call| {
                let base: Vec<f64> = rounds
                    .iter()
                    .map(|&r| get(r, "none", "-", call, cpu))
                    .collect();
                let (lo, hi) = min_max(&base);
                format!("{call} {:.0} ns [{lo:.0}..{hi:.0}]", median(base.clone()))
            })
            .collect();
        out.push(format!("    nothing held: {}", bases.join(", ")));
        for h in &p.held {
            for call in CALLS {
                let added = |side: &str| -> Vec<f64> {
                    rounds
                        .iter()
                        .map(|&r| get(r, side, h.name, call, cpu) - get(r, "none", "-", call, cpu))
                        .collect()
                };
                let (k, b) = (added("kspan"), added("bpftrace"));
                let mut line = format!(
                    "    {:<18} {call:<7} loop: kspan {:>+6.0} ns, bpftrace {:>+6.0} ns",
                    h.name,
                    median(k.clone()),
                    median(b.clone())
                );
                if call == h.call {
                    // Paired within a round: drift between rounds cancels.
                    let ratios: Vec<f64> = k.iter().zip(&b).map(|(k, b)| k / b).collect();
                    let (lo, hi) = min_max(&ratios);
                    line += &format!(
                        ", kspan/bpftrace {:.2}x [{lo:.2}..{hi:.2}] (target <= 1.0x)",
                        median(ratios)
                    );
                } else {
                    // Syscall tracepoints slow every system call down; a
                    // function probe only its function.
                    line += " (another call)";
                }
                out.push(line);
            }
        }
    }
    out.push(
        "  held: ".to_owned()
            + &p.held
                .iter()
                .map(|h| format!("{} = {}", h.name, h.what))
                .collect::<Vec<_>>()
                .join("; "),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn plan<'a>(lp: &'a str, hold: &'a str, bt: &'a str, rounds: u32) -> Plan<'a> {
        Plan {
            syscall_loop: lp,
            hold_probes: hold,
            bpftrace: bt,
            held: vec![&HELD[0]],
            rounds,
            calls: 100,
            batches: 3,
            ready_secs: 5,
        }
    }

    /// The lines of one round: `base` with nothing held, `k` and `b` added
    /// by kspan and bpftrace on the held call, nothing on the other one.
    fn round(r: u32, base: f64, k: f64, b: f64) -> String {
        let mut s = String::new();
        for (side, held, add) in [
            ("none", "-", 0.0),
            ("kspan", "getppid_tp", k),
            ("bpftrace", "getppid_tp", b),
            ("none", "-", 0.0),
        ] {
            for call in CALLS {
                for cpu in CPUS {
                    let ns = base + if call == "getppid" { add } else { 0.0 };
                    s +=
                        &format!("OTHERS {r} {side} {held} {call} {cpu} min {ns} median 0 max 0\n");
                }
            }
        }
        s + &format!("HELD {r} kspan getppid_tp emitted 1 handed 1 lost 0\n")
    }

    #[test]
    fn ratios_are_paired_within_rounds() {
        let p = plan("l", "h", "b", 3);
        let out = round(1, 400.0, 100.0, 200.0)
            + &round(2, 800.0, 300.0, 300.0)
            + &round(3, 400.0, 90.0, 100.0);
        let report = report(&parse(&out, &p).unwrap(), &p).join("\n");
        assert!(
            report
                .contains("kspan   +100 ns, bpftrace   +200 ns, kspan/bpftrace 0.90x [0.50..1.00]"),
            "{report}"
        );
        assert!(
            report.contains("read    loop: kspan     +0 ns, bpftrace     +0 ns (another call)"),
            "{report}"
        );
    }

    #[test]
    fn missing_or_failed_runs_are_errors() {
        let p = plan("l", "h", "b", 2);
        let one = round(1, 400.0, 100.0, 200.0);
        let err = parse(&one, &p).unwrap_err().to_string();
        assert!(err.contains("round 2"), "{err}");
        let failed = one.clone() + "BENCH-FAILED kspan getppid_tp exited with status 1\n";
        assert!(parse(&failed, &plan("l", "h", "b", 1)).is_err());
        let dead = one.replace("emitted 1", "emitted 0");
        let err = parse(&dead, &plan("l", "h", "b", 1))
            .unwrap_err()
            .to_string();
        assert!(err.contains("recorded nothing"), "{err}");
        let traced = one.replace("emitted 1", "emitted 5000");
        assert!(parse(&traced, &plan("l", "h", "b", 1)).is_err());
    }

    /// Fake programs in a fresh directory, for the host's sh.
    struct Fakes(PathBuf);

    impl Fakes {
        fn new(name: &str) -> Fakes {
            let dir =
                std::env::temp_dir().join(format!("xtask-others-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Fakes(dir)
        }

        fn add(&self, name: &str, body: &str) -> String {
            use std::os::unix::fs::PermissionsExt;
            let path = self.0.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            path.to_string_lossy().into_owned()
        }

        fn run(&self, p: &Plan) -> (bool, String) {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(script(p).replace("/tmp/others-", &format!("{}/", self.0.display())))
                .output()
                .unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        }
    }

    impl Drop for Fakes {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const LOOP: &str = r#"echo "SYSCALL-LOOP $1 min 100 median 110 max 120""#;
    /// A holder that says ready, then waits for TERM like the real ones.
    fn holder(ready: &str, done: &str) -> String {
        format!(
            "trap 'echo \"{done}\"; exit 0' TERM\necho \"{ready}\"\nwhile :; do sleep 0.05; done"
        )
    }

    fn two_cpus() -> bool {
        std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2)
            && Path::new("/usr/bin/taskset").exists()
    }

    #[test]
    fn the_script_runs_every_loop_and_fails_loudly() {
        if !two_cpus() {
            eprintln!("skipped: the script needs two CPUs and taskset");
            return;
        }
        let f = Fakes::new("script");
        let lp = f.add("loop", LOOP);
        let hold = f.add(
            "hold",
            &holder(
                "HOLD-PROBES ready pid 1",
                "HOLD-PROBES done emitted 1 handed 1 lost 0",
            ),
        );
        let bt = f.add("bt", &holder("READY", ""));
        let p = plan(&lp, &hold, &bt, 2);
        let (ok, out) = f.run(&p);
        assert!(ok, "{out}");
        parse(&out, &p).unwrap();

        // A holder that cannot attach, one that never gets ready, one that
        // fails at the end, a loop that fails: each stops the run.
        let broken = f.add("broken", "echo cannot attach; exit 1");
        let (ok, out) = f.run(&plan(&lp, &broken, &bt, 1));
        assert!(
            !ok && out
                .contains("BENCH-FAILED kspan getppid_tp exited (status 1) before it was ready")
                && out.contains("cannot attach"),
            "{out}"
        );
        let mute = f.add("mute", "sleep 30");
        let mut slow = plan(&lp, &hold, &mute, 1);
        slow.ready_secs = 1;
        let (ok, out) = f.run(&slow);
        assert!(
            !ok && out.contains("BENCH-FAILED bpftrace getppid_tp not ready after 1 s"),
            "{out}"
        );
        let bad_end = f.add("bad_end", &holder("READY", "").replace("exit 0", "exit 3"));
        let (ok, out) = f.run(&plan(&lp, &hold, &bad_end, 1));
        assert!(
            !ok && out.contains("BENCH-FAILED bpftrace getppid_tp exited with status 3"),
            "{out}"
        );
        let bad_loop = f.add("bad_loop", "exit 1");
        let (ok, out) = f.run(&plan(&bad_loop, &hold, &bt, 1));
        assert!(
            !ok && out.contains("BENCH-FAILED syscall_loop getppid on CPU 0 (none -)"),
            "{out}"
        );
    }
}
