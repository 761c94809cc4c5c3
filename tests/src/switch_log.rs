// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The kernel's own record of context switches, as a witness independent
//! of kspan's programs: the `sched_switch` event in a tracefs instance of
//! the test's own, timed by the instance's `mono` clock, so that its times
//! are `CLOCK_MONOTONIC`'s (as [`mono_ns`] reads it), the clock kspan's
//! programs read.
//!
//! The event is stamped at the same tracepoint kspan's program runs at,
//! one probe before it when the log starts before kspan (a tracepoint runs
//! its probes in the order they came), so the two see each switch at
//! nearly the same instant. A user-space measure of a sleep (its wall time
//! less the thread's CPU clock) is read elsewhere, and a guest whose vCPU
//! waits its turn on an emulator's thread can put milliseconds between any
//! two clock reads.

use std::path::{Path, PathBuf};

/// `CLOCK_MONOTONIC` now, in ns.
pub fn mono_ns() -> u64 {
    crate::clock_ns(libc::CLOCK_MONOTONIC)
}

/// One `sched_switch` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switch {
    /// `CLOCK_MONOTONIC` ns (the event's µs).
    pub at_ns: u64,
    /// The thread leaving the CPU.
    pub prev_pid: i64,
    /// As the event prints it: `R`, `R+` (preempted), `S`, `D`, ...
    pub prev_state: String,
    /// The thread coming on.
    pub next_pid: i64,
}

/// A thread's stretch off its CPU, from a switch-out to its next switch-in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffCpu {
    /// The switch-out (`CLOCK_MONOTONIC` ns).
    pub from_ns: u64,
    /// The switch-in.
    pub to_ns: u64,
    /// The state it left in, as the event prints it.
    pub state: String,
}

impl OffCpu {
    /// Its length.
    pub fn ns(&self) -> u64 {
        self.to_ns - self.from_ns
    }
}

/// Records `sched_switch` until [`SwitchLog::stop`] (the instance is
/// removed when this is dropped).
pub struct SwitchLog {
    dir: PathBuf,
}

/// Where tracefs is, mounted there if it is not yet.
fn tracefs() -> PathBuf {
    for root in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if Path::new(root).join("instances").is_dir() {
            return PathBuf::from(root);
        }
    }
    let root = "/sys/kernel/tracing";
    let status = std::process::Command::new("mount")
        .args(["-t", "tracefs", "tracefs", root])
        .status()
        .expect("mount(8) runs");
    assert!(
        status.success() && Path::new(root).join("instances").is_dir(),
        "tracefs is not mounted and `mount -t tracefs tracefs {root}` failed: the test reads the \
         kernel's own sched_switch events there"
    );
    PathBuf::from(root)
}

fn write(path: &Path, value: &str) {
    std::fs::write(path, value)
        .unwrap_or_else(|e| panic!("writing {value:?} to {}: {e}", path.display()));
}

impl SwitchLog {
    /// A new instance recording `sched_switch` from now, on the `mono`
    /// clock.
    pub fn start() -> SwitchLog {
        let dir = tracefs()
            .join("instances")
            .join(format!("kspan-switches-{}", std::process::id()));
        if dir.is_dir() {
            let _ = std::fs::remove_dir(&dir);
        }
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("making the tracefs instance {}: {e}", dir.display()));
        let log = SwitchLog { dir };
        write(&log.dir.join("trace_clock"), "mono");
        write(&log.dir.join("buffer_size_kb"), "16384");
        write(&log.dir.join("events/sched/sched_switch/enable"), "1");
        write(&log.dir.join("tracing_on"), "1");
        log
    }

    /// Stops recording and returns every switch recorded, oldest first.
    /// Panics when the buffer overran (a switch lost would make a false
    /// witness).
    pub fn stop(self) -> Vec<Switch> {
        write(&self.dir.join("tracing_on"), "0");
        let text = std::fs::read_to_string(self.dir.join("trace")).expect("the instance's trace");
        let lost: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("LOST") && l.contains("EVENTS"))
            .collect();
        assert!(lost.is_empty(), "the kernel's switch log overran: {lost:?}");
        let mut switches: Vec<Switch> = text.lines().filter_map(parse).collect();
        switches.sort_by_key(|s| s.at_ns);
        switches
    }
}

impl Drop for SwitchLog {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("events/sched/sched_switch/enable"), "0");
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// One line of the trace, if it is a `sched_switch` event:
/// `  comm-297  [000] d..2.  82.859593: sched_switch: prev_comm=... prev_pid=297
/// prev_prio=120 prev_state=S ==> next_comm=... next_pid=289 next_prio=120`.
fn parse(line: &str) -> Option<Switch> {
    let (head, fields) = line.split_once(": sched_switch: ")?;
    let seconds = head.split_whitespace().last()?;
    let (whole, micros) = seconds.split_once('.')?;
    let at_ns = whole.parse::<u64>().ok()? * 1_000_000_000 + micros.parse::<u64>().ok()? * 1_000;
    // Field by field from the right of its key: a comm may hold spaces.
    let field = |key: &str| {
        let at = fields.find(key)? + key.len();
        fields[at..].split_whitespace().next()
    };
    Some(Switch {
        at_ns,
        prev_pid: field(" prev_pid=")?.parse().ok()?,
        prev_state: field(" prev_state=")?.to_owned(),
        next_pid: field(" next_pid=")?.parse().ok()?,
    })
}

/// Thread `tid`'s stretches off CPU, each from a switch-out to its next
/// switch-in (a stretch still open at the log's end is left out).
pub fn off_cpu(switches: &[Switch], tid: i64) -> Vec<OffCpu> {
    let mut out = Vec::new();
    let mut open: Option<(u64, &str)> = None;
    for s in switches {
        if s.next_pid == tid {
            if let Some((from, state)) = open.take() {
                out.push(OffCpu {
                    from_ns: from,
                    to_ns: s.at_ns,
                    state: state.to_owned(),
                });
            }
        }
        if s.prev_pid == tid {
            open = Some((s.at_ns, &s.prev_state));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_line_parses_and_other_lines_do_not() {
        let line = " tokio-rt-worker-297     [000] d..2.    82.859593: sched_switch: \
                    prev_comm=tokio rt worker prev_pid=297 prev_prio=120 prev_state=R+ ==> \
                    next_comm=kspan-consumer next_pid=289 next_prio=120";
        assert_eq!(
            parse(line),
            Some(Switch {
                at_ns: 82_859_593_000,
                prev_pid: 297,
                prev_state: "R+".into(),
                next_pid: 289,
            })
        );
        assert_eq!(parse("# tracer: nop"), None);
        assert_eq!(
            parse(" a-1 [000] d..3. 1.000001: sched_wakeup: comm=a pid=2 prio=120"),
            None
        );
    }

    #[test]
    fn stretches_off_cpu_run_from_a_switch_out_to_the_next_switch_in() {
        let sw = |at_ns, prev_pid, prev_state: &str, next_pid| Switch {
            at_ns,
            prev_pid,
            prev_state: prev_state.into(),
            next_pid,
        };
        let log = [
            sw(100, 7, "S", 0),
            sw(150, 0, "R", 9),
            sw(400, 9, "S", 7),
            sw(500, 7, "R+", 9),
            sw(900, 9, "S", 7),
            sw(1000, 7, "S", 0),
        ];
        // The stretch open at the log's end is left out.
        assert_eq!(
            off_cpu(&log, 7),
            [
                OffCpu {
                    from_ns: 100,
                    to_ns: 400,
                    state: "S".into()
                },
                OffCpu {
                    from_ns: 500,
                    to_ns: 900,
                    state: "R+".into()
                },
            ]
        );
    }
}
