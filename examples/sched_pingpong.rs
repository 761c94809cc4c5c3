// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The context-switch-heavy load of the scheduler bench (`cargo xtask bench
//! --host --only sched`): one byte ping-ponged over a pair of pipes, both
//! ends pinned to one CPU, so that every round trip is two context switches
//! (each end blocks in `read` until the other writes) and two wake-ups.
//!
//! * `sched_pingpong processes CPU ROUNDTRIPS BATCHES`: the two ends are two
//!   processes (this one and a child running `sched_pingpong __echo CPU`),
//!   nothing of kspan in either: the untraced process whose switches run
//!   the programs of an account held by another process.
//! * `sched_pingpong threads MODE CPU ROUNDTRIPS BATCHES`: the two ends are
//!   two threads of this process, each inside an application span, with
//!   MODE `none` (nothing attached), `tp_btf` or `tracepoint` (kspan's
//!   scheduler account, started here with that mechanism) or `bpftrace`
//!   (bpftrace started on this process with [`OFFCPUTIME`], the same
//!   aggregation as offcputime: the switch-out's time and kernel stack per
//!   thread, the off-CPU time summed per thread and stack at the switch-in).
//!
//! After a warm-up it times BATCHES batches of ROUNDTRIPS round trips and
//! prints `PINGPONG <mode> cpu <cpu> rt_ns <fastest batch> median_rt_ns <ns>
//! switches_per_rt <x> switches <n> traced_switches <n>`: ns per round trip of the
//! fastest batch (other processes only add time, so the fastest batch is the
//! least disturbed) and of the median one, the two ends' context switches
//! per round trip (the kernel's own counts, `/proc/.../status`), and the
//! switches the tracer saw (the account's counts on the two spans, or
//! bpftrace's off-CPU entries for the two threads; `-` for none). With
//! `KSPAN_BENCH_PROG_STATS=1` (and `kernel.bpf_stats_enabled=1`, which the
//! caller sets) it also prints, for every BPF program of the machine that
//! ran during the batches, `PROG <id> <name> runs <n> ns_per_run <ns>`.

use std::io::{BufRead, Read, Write};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kspan::TracerProviderBuilderExt as _;
use opentelemetry::trace::{TraceContextExt as _, Tracer, TracerProvider as _};
use opentelemetry::{Context, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};

/// bpftrace's offcputime: `$1` is this process's pid. At the switch-out of
/// one of its threads, the time and the kernel stack by tid; at a switch-in
/// whose tid has a switch-out kept, the off-CPU time summed per (tid,
/// stack). The second probe runs for every switch of the machine (as
/// offcputime's switch-in half does): a hash lookup on `next_pid`.
const OFFCPUTIME: &str =
    "tracepoint:sched:sched_switch /pid == $1/ { @start[tid] = nsecs; @stack[tid] = kstack; } \
     tracepoint:sched:sched_switch /@start[args->next_pid]/ { $t = args->next_pid; \
     @off[$t, @stack[$t]] = sum(nsecs - @start[$t]); @n[$t] = count(); delete(@start[$t]); } \
     BEGIN { printf(\"READY\\n\"); }";

/// Keeps the spans it is given: the account's figures are read off them.
#[derive(Debug, Clone, Default)]
struct Keep(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Keep {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(batch);
        Ok(())
    }
}

type BoxError = Box<dyn std::error::Error>;

const USAGE: &str = "usage: sched_pingpong processes CPU ROUNDTRIPS BATCHES\n       \
                     sched_pingpong threads none|tp_btf|tracepoint|bpftrace CPU ROUNDTRIPS BATCHES";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("__echo") => echo_process(&args[1..]),
        Some("processes") => processes(&args[1..]),
        Some("threads") => threads(&args[1..]).await,
        _ => Err(USAGE.into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sched_pingpong: {e}");
            ExitCode::FAILURE
        }
    }
}

/// CPU ROUNDTRIPS BATCHES.
fn numbers(args: &[String]) -> Result<(usize, u32, u32), BoxError> {
    let positive = |i: usize, what: &str| -> Result<u32, BoxError> {
        args.get(i)
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("{what} must be a positive number\n{USAGE}").into())
    };
    let cpu = args
        .first()
        .and_then(|c| c.parse::<usize>().ok())
        .ok_or_else(|| format!("CPU must be a CPU number\n{USAGE}"))?;
    Ok((cpu, positive(1, "ROUNDTRIPS")?, positive(2, "BATCHES")?))
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) -> Result<(), BoxError> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(format!("CPU {cpu} is past the largest CPU set").into());
    }
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET gets a CPU below
    // CPU_SETSIZE (checked above); sched_setaffinity gets the set's size.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        return Err(format!(
            "cannot pin to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        )
        .into());
    }
    Ok(())
}

/// Voluntary plus involuntary context switches of a task, from its
/// `status` file (`/proc/<pid>/status` or `/proc/self/task/<tid>/status`).
fn switches(status: &str) -> Result<u64, BoxError> {
    let text = std::fs::read_to_string(status).map_err(|e| format!("cannot read {status}: {e}"))?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| format!("no {name} in {status}"))
    };
    Ok(field("voluntary_ctxt_switches:")? + field("nonvoluntary_ctxt_switches:")?)
}

fn gettid() -> i64 {
    // SAFETY: gettid has no arguments and cannot fail.
    i64::from(unsafe { libc::gettid() })
}

/// Every BPF program's (id, name, run time ns, runs), when asked for.
fn prog_stats() -> Vec<(u32, String, u64, u64)> {
    if std::env::var_os("KSPAN_BENCH_PROG_STATS").is_none_or(|v| v != "1") {
        return Vec::new();
    }
    libbpf_rs::query::ProgInfoIter::default()
        .map(|p| {
            (
                p.id,
                p.name.to_string_lossy().into_owned(),
                p.run_time_ns,
                p.run_cnt,
            )
        })
        .collect()
}

fn print_prog_stats(before: &[(u32, String, u64, u64)], after: &[(u32, String, u64, u64)]) {
    for (id, name, ns, runs) in after {
        let Some((_, _, ns0, runs0)) = before.iter().find(|b| b.0 == *id) else {
            continue;
        };
        let runs = runs.saturating_sub(*runs0);
        if runs > 0 {
            let per_run = ns.saturating_sub(*ns0) as f64 / runs as f64;
            println!("PROG {id} {name} runs {runs} ns_per_run {per_run:.1}");
        }
    }
}

/// A pipe: (read end, write end).
fn pipe() -> Result<(std::fs::File, std::fs::File), BoxError> {
    use std::os::fd::FromRawFd as _;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()).into());
    }
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    Ok(unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::fs::File::from_raw_fd(fds[1]),
        )
    })
}

/// One end of the ping-pong: writes a byte and waits for it to come back,
/// `n` times.
fn ping(out: &mut impl Write, back: &mut impl Read, n: u32) -> Result<(), BoxError> {
    let mut byte = [0u8; 1];
    for _ in 0..n {
        out.write_all(&byte)?;
        back.read_exact(&mut byte)?;
    }
    Ok(())
}

/// The other end: every byte read is written back, until end of file.
fn echo(input: &mut impl Read, output: &mut impl Write) -> Result<(), BoxError> {
    let mut byte = [0u8; 1];
    loop {
        match input.read(&mut byte)? {
            0 => return Ok(()),
            _ => output.write_all(&byte)?,
        }
    }
}

/// Times the batches: (fastest, median) ns per round trip.
fn batches(
    out: &mut impl Write,
    back: &mut impl Read,
    roundtrips: u32,
    batches: u32,
) -> Result<(f64, f64), BoxError> {
    // Warm-up: both ends on the CPU's run queue, caches and maps filled.
    ping(out, back, roundtrips.min(2_000))?;
    let mut times = Vec::with_capacity(batches as usize);
    for _ in 0..batches {
        let started = Instant::now();
        ping(out, back, roundtrips)?;
        times.push(started.elapsed().as_nanos() as f64 / f64::from(roundtrips));
    }
    times.sort_by(f64::total_cmp);
    Ok((times[0], times[times.len() / 2]))
}

/// `__echo CPU`: the child of `processes`, on its standard streams.
fn echo_process(args: &[String]) -> Result<(), BoxError> {
    let cpu = args
        .first()
        .and_then(|c| c.parse::<usize>().ok())
        .ok_or("__echo CPU")?;
    pin_to(cpu)?;
    // Unbuffered: std's stdout would keep the byte in its line buffer.
    use std::os::fd::AsFd as _;
    let mut input = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let mut output = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    echo(&mut input, &mut output)
}

/// Kills `child` and reaps it (on the error paths).
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn processes(args: &[String]) -> Result<(), BoxError> {
    let (cpu, roundtrips, nbatches) = numbers(args)?;
    pin_to(cpu)?;
    let exe = std::env::current_exe()?;
    let mut child = Reap(
        Command::new(exe)
            .args(["__echo", &cpu.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?,
    );
    let mut out = child.0.stdin.take().ok_or("the child has no stdin")?;
    let mut back = child.0.stdout.take().ok_or("the child has no stdout")?;
    // One round trip first: the child is running and pinned.
    ping(&mut out, &mut back, 1)?;
    let child_status = format!("/proc/{}/status", child.0.id());
    let before = switches("/proc/self/status")? + switches(&child_status)?;
    let progs = prog_stats();
    let (fastest, median) = batches(&mut out, &mut back, roundtrips, nbatches)?;
    let progs_after = prog_stats();
    let after = switches("/proc/self/status")? + switches(&child_status)?;
    drop(out);
    let status = child.0.wait()?;
    if !status.success() {
        return Err(format!("the echoing child failed: {status}").into());
    }
    let rts = f64::from(roundtrips) * f64::from(nbatches) + f64::from(roundtrips.min(2_000));
    println!(
        "PINGPONG processes cpu {cpu} rt_ns {fastest:.1} median_rt_ns {median:.1} \
         switches_per_rt {:.3} switches {} traced_switches -",
        (after - before) as f64 / rts,
        after - before
    );
    print_prog_stats(&progs, &progs_after);
    Ok(())
}

/// bpftrace on this process, once it says its probes are attached.
fn start_bpftrace() -> Result<(Child, std::io::BufReader<std::process::ChildStdout>), BoxError> {
    let mut child = Command::new("bpftrace")
        .args(["-e", OFFCPUTIME, &std::process::id().to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run bpftrace: {e}"))?;
    let mut stdout = std::io::BufReader::new(child.stdout.take().ok_or("bpftrace has no stdout")?);
    let mut line = String::new();
    loop {
        line.clear();
        if stdout.read_line(&mut line)? == 0 {
            let _ = child.kill();
            let _ = child.wait();
            return Err("bpftrace exited before its probes were attached".into());
        }
        if line.trim() == "READY" {
            return Ok((child, stdout));
        }
    }
}

/// Stops bpftrace with SIGINT and counts the switch-ins of `tids` it
/// summed (its `@n` map, printed at exit).
///
/// bpftrace 0.17 can miss a SIGINT that arrives while it is not waiting in
/// `epoll_wait` (it then waits on with no timeout), so the signal is sent
/// again every second, for up to 30 s.
fn stop_bpftrace(
    mut child: Child,
    mut stdout: std::io::BufReader<std::process::ChildStdout>,
    tids: &[i64],
) -> Result<u64, BoxError> {
    let reader = std::thread::spawn(move || {
        let mut printed = String::new();
        stdout.read_to_string(&mut printed).map(|_| printed)
    });
    let mut status = None;
    for _ in 0..30 {
        // SAFETY: kill with the pid of our own child, not yet reaped, and a
        // valid signal number.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        for _ in 0..10 {
            status = child.try_wait()?;
            if status.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        if status.is_some() {
            break;
        }
    }
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        return Err("bpftrace did not exit within 30 s of SIGINT".into());
    };
    let printed = reader
        .join()
        .map_err(|_| "the reader of bpftrace's output panicked")??;
    if !status.success() {
        return Err(format!("bpftrace failed at exit: {status}").into());
    }
    let mut seen = 0;
    for line in printed.lines() {
        // @n[1234]: 56
        let Some(rest) = line.strip_prefix("@n[") else {
            continue;
        };
        let Some((tid, count)) = rest.split_once("]: ") else {
            continue;
        };
        if tids.iter().any(|t| tid.trim() == t.to_string()) {
            seen += count.trim().parse::<u64>().unwrap_or(0);
        }
    }
    Ok(seen)
}

async fn threads(args: &[String]) -> Result<(), BoxError> {
    let mode = args.first().map(String::as_str).unwrap_or_default();
    let mechanism = match mode {
        "none" | "bpftrace" => None,
        "tp_btf" => Some(kspan::SchedMechanism::BtfTracepoints),
        "tracepoint" => Some(kspan::SchedMechanism::Tracepoints),
        other => return Err(format!("mode `{other}`\n{USAGE}").into()),
    };
    let (cpu, roundtrips, nbatches) = numbers(&args[1..])?;

    // The same provider and context observer in every mode: only what is
    // attached differs (so the observer is registered here, not only by
    // kspan's start, which the modes without kspan do not reach).
    kspan::context::register_observer()?;
    let kept = Keep::default();
    let pipeline = kspan::Pipeline::new();
    let provider = SdkTracerProvider::builder()
        .with_kspan(&pipeline, kept.clone())
        .build();
    // Started before any thread is pinned: kspan's own threads keep every CPU.
    let kspan = match mechanism {
        Some(m) => Some(
            kspan::Kspan::builder(&provider)
                .pipeline(&pipeline)
                .scheduler_account(kspan::SchedulerAccount::new().mechanism(m))
                .start()?,
        ),
        None => None,
    };
    let bpftrace = if mode == "bpftrace" {
        Some(start_bpftrace()?)
    } else {
        None
    };

    let tracer = provider.tracer("sched_pingpong");
    let (to_echo_r, mut to_echo_w) = pipe()?;
    let (mut from_echo_r, from_echo_w) = pipe()?;
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let echo_tracer = tracer.clone();
    let echo_thread = std::thread::spawn(move || -> Result<(), String> {
        pin_to(cpu).map_err(|e| e.to_string())?;
        let _ = tid_tx.send(gettid());
        let cx = Context::current_with_span(echo_tracer.start("echo"));
        let _attached = cx.attach();
        let (mut input, mut output) = (to_echo_r, from_echo_w);
        echo(&mut input, &mut output).map_err(|e| e.to_string())
    });
    let echo_tid = tid_rx.recv().map_err(|_| "the echo thread did not start")?;
    pin_to(cpu)?;
    let main_tid = gettid();
    let status = |tid: i64| format!("/proc/self/task/{tid}/status");

    let ((fastest, median), counted) = {
        let cx = Context::current_with_span(tracer.start("ping"));
        let _attached = cx.attach();
        ping(&mut to_echo_w, &mut from_echo_r, 1)?;
        let before = switches(&status(main_tid))? + switches(&status(echo_tid))?;
        let progs = prog_stats();
        let times = batches(&mut to_echo_w, &mut from_echo_r, roundtrips, nbatches)?;
        let progs_after = prog_stats();
        let after = switches(&status(main_tid))? + switches(&status(echo_tid))?;
        print_prog_stats(&progs, &progs_after);
        (times, after - before)
    };
    drop(to_echo_w);
    echo_thread
        .join()
        .map_err(|_| "the echo thread panicked")?
        .map_err(|e| format!("the echo thread failed: {e}"))?;
    let rts = f64::from(roundtrips) * f64::from(nbatches) + f64::from(roundtrips.min(2_000));

    let traced = if let Some((child, stdout)) = bpftrace {
        stop_bpftrace(child, stdout, &[main_tid, echo_tid])?.to_string()
    } else if let Some(kspan) = kspan {
        let shutdown = kspan.shutdown().await;
        let shut = provider.shutdown();
        let stats = pipeline.ledger().final_figures(&shutdown?);
        println!("sched_pingpong: kspan: {stats}");
        if stats.lost() > 0 {
            return Err(format!("kspan lost records: {stats}").into());
        }
        shut?;
        let spans = kept.0.lock().unwrap_or_else(|e| e.into_inner());
        let int = |span: &SpanData, key: &str| {
            span.attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .and_then(|kv| match kv.value {
                    Value::I64(v) => Some(v),
                    _ => None,
                })
                .unwrap_or(0)
        };
        let on_spans: i64 = spans
            .iter()
            .map(|s| {
                int(s, kspan::sched::attributes::VOLUNTARY_SWITCHES)
                    + int(s, kspan::sched::attributes::INVOLUNTARY_SWITCHES)
            })
            .sum();
        on_spans.to_string()
    } else {
        "-".to_owned()
    };
    let _ = provider.shutdown();
    println!(
        "PINGPONG {mode} cpu {cpu} rt_ns {fastest:.1} median_rt_ns {median:.1} \
         switches_per_rt {:.3} switches {counted} traced_switches {traced}",
        counted as f64 / rts
    );
    Ok(())
}
