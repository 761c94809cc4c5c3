//! Another process holding probes while a part's loop runs:
//! `sched_account_idle` holding the account (`sched-others`, and
//! `sched-causes`' `held_*` configurations), or bpftrace running one of the
//! scripts below on its own pid.
//!
//! A holder counts as up only once it printed its ready line (its probes
//! attached), and as done only once it ended cleanly after its signal, so
//! that a loop is never timed with nothing held while the figures say
//! otherwise; its last lines on stderr are kept to say why it failed.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::Programs;
use crate::util::output;

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

/// A process holding probes: `sched_account_idle`, or bpftrace on its own
/// pid; up once it printed its ready line.
pub struct Holder {
    name: String,
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Its last lines on stderr.
    said: Arc<Mutex<Vec<String>>>,
}

impl Holder {
    /// Starts the holder `name` (`kspan_tp_btf`, `kspan_tp_btf_causes`,
    /// `kspan_tracepoint`, `bpftrace_switch`, `bpftrace_account`) and waits
    /// up to 60 s for its ready line.
    pub fn start(programs: &Programs, name: &str) -> Result<Holder> {
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
    pub fn stop(mut self) -> Result<()> {
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
