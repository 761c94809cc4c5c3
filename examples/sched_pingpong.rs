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
//!   scheduler account, started here with that mechanism), `tp_btf_causes`
//!   (the account on BTF tracepoints with its causes,
//!   `SchedulerAccount::with_causes`), `bpftrace` (bpftrace started on this
//!   process with [`OFFCPUTIME`], the same aggregation as offcputime: the
//!   switch-out's time and kernel stack per thread, the off-CPU time summed
//!   per thread and stack at the switch-in) or `bpftrace_offwake`
//!   ([`OFFWAKETIME`], offwaketime's: offcputime's with the waker's stack
//!   and name taken at the wake-up, summed per off-CPU stack, waker stack
//!   and waker).
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
//!
//! The causes' workloads (issue 41), each inside application spans, with
//! MODE `none`, `tp_btf`, `tp_btf_causes` or `bpftrace` (the script doing
//! the same aggregation as the causes for that workload):
//!
//! * `sched_pingpong block MODE READS BATCHES`: one thread reads a synced
//!   file of 4 MiB under the temporary directory (it must be on a disk)
//!   4 KiB at a time with `O_DIRECT`, each read one block request;
//!   bpftrace: [`BIOLATENCY`].
//! * `sched_pingpong lock MODE WRITES BATCHES`: two threads, each in its
//!   own span and pinned to the first CPU and the last, write a byte at a
//!   time to one open file (under `/dev/shm`, else the temporary
//!   directory) through two descriptors of it (a dup):
//!   with two descriptors on an open file, each `write` holds its position
//!   lock (`f_pos_lock`, a kernel mutex), so the writers contend for it;
//!   a batch is WRITES writes by each; bpftrace: [`LOCKCONTENTION`].
//! * `sched_pingpong spans MODE SPANS BATCHES` (MODE `none`, `tp_btf` or
//!   `tp_btf_causes`): one thread makes spans one after the other, each
//!   made current and ended (`in_span` with nothing inside): what a span
//!   that never leaves its CPU costs with the account, and with its causes.
//!
//! Each prints `CAUSES <workload> <mode> ns_per_op <fastest batch>
//! median_ns_per_op <ns> ops <n> events <n|-> traced_events <n|->`: ns a
//! read, a write of the two writers' together (the batch's time over
//! both threads' writes) or a span, the operations in all (the warm-up's
//! too), the
//! block requests the kernel counted (`read_bytes` of
//! `/proc/thread-self/io` over 4 KiB; `-` for the locks, which the kernel
//! does not count), and the events the tracer saw: block requests
//! completed (kspan's `kspan.block.requests` on the span, bpftrace's
//! count), lock contentions (kspan's `kspan.lock.*.contentions` on the
//! two spans, bpftrace's count for the two threads), spans exported; `-`
//! for none or the account alone (and for the spans, the spans made). `KSPAN_BENCH_PROG_STATS=1` adds the `PROG` lines.

use std::io::{BufRead, Read, Write};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kspan::TracerProviderBuilderExt as _;
use opentelemetry::trace::{TraceContextExt as _, Tracer, TracerProvider as _};
use opentelemetry::{Context, Value};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchConfigBuilder, SdkTracerProvider, SpanData, SpanExporter};

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

/// bpftrace's offwaketime: offcputime's aggregation ([`OFFCPUTIME`]) with
/// the waker's kernel stack and name, taken at the wake-up of a thread
/// with a switch-out kept, in the summed key. At `sched_waking`, which
/// runs in the waker's context (`sched_wakeup` can run on the wakee's CPU,
/// in the interrupt of a queued wake-up, where the stack is not the
/// waker's); both wake-up tracepoints are the account's.
const OFFWAKETIME: &str =
    "tracepoint:sched:sched_switch /pid == $1/ { @start[tid] = nsecs; @stack[tid] = kstack; } \
     tracepoint:sched:sched_waking /@start[args->pid]/ { @waker[args->pid] = kstack; \
     @wcomm[args->pid] = comm; } \
     tracepoint:sched:sched_switch /@start[args->next_pid]/ { $t = args->next_pid; \
     @off[$t, @stack[$t], @waker[$t], @wcomm[$t]] = sum(nsecs - @start[$t]); @n[$t] = count(); \
     delete(@start[$t]); } \
     BEGIN { printf(\"READY\\n\"); }";

/// bpftrace's biolatency (`-Q -D`: queue time included, per disk),
/// for the requests of this process (`$1`): a request, keyed by its device
/// and sector, from its insert into the queue on one of the process's
/// threads, its issue to the driver, and its completion: the time queued
/// and on the device in histograms, the bytes summed, per device.
const BIOLATENCY: &str =
    "tracepoint:block:block_rq_insert /pid == $1/ { @insert[args->dev, args->sector] = nsecs; } \
     tracepoint:block:block_rq_issue /@insert[args->dev, args->sector]/ { \
     @issue[args->dev, args->sector] = nsecs; } \
     tracepoint:block:block_rq_complete /@issue[args->dev, args->sector]/ { \
     $i = @issue[args->dev, args->sector]; \
     @queue_us[args->dev] = hist(($i - @insert[args->dev, args->sector]) / 1000); \
     @device_us[args->dev] = hist((nsecs - $i) / 1000); \
     @bytes[args->dev] = sum(args->nr_sector * 512); @n[args->dev] = count(); \
     delete(@insert[args->dev, args->sector]); delete(@issue[args->dev, args->sector]); } \
     BEGIN { printf(\"READY\\n\"); }";

/// Kernel lock contention as `perf lock contention` aggregates it, per
/// thread of this process (`$1`): from a thread's first
/// `lock:contention_begin` (a mutex's spinning, then its sleep, begin
/// twice) to its `contention_end`, the time and count summed by thread and
/// the lock's flags (its kind).
const LOCKCONTENTION: &str =
    "tracepoint:lock:contention_begin /pid == $1/ { if (@begin[tid] == 0) { @begin[tid] = nsecs; } \
     @flags[tid] = args->flags; } \
     tracepoint:lock:contention_end /pid == $1 && @begin[tid]/ { \
     @ns[tid, @flags[tid]] = sum(nsecs - @begin[tid]); @n[tid, @flags[tid]] = count(); \
     delete(@begin[tid]); delete(@flags[tid]); } \
     BEGIN { printf(\"READY\\n\"); }";

/// This program's tracer's name (kspan's wait spans have their own).
const SCOPE: &str = "sched_pingpong";

/// Keeps the spans it is given (the account's figures are read off them),
/// or with `discard` counts them only (the spans workload: its many spans
/// kept would cost the loop their memory); `count` is of this program's
/// spans, not kspan's wait spans.
#[derive(Debug, Clone, Default)]
struct Keep {
    kept: Arc<Mutex<Vec<SpanData>>>,
    count: Arc<std::sync::atomic::AtomicU64>,
    discard: bool,
}

impl SpanExporter for Keep {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let own = batch
            .iter()
            .filter(|s| s.instrumentation_scope.name() == SCOPE)
            .count();
        self.count
            .fetch_add(own as u64, std::sync::atomic::Ordering::Relaxed);
        if !self.discard {
            self.kept
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(batch);
        }
        Ok(())
    }
}

type BoxError = Box<dyn std::error::Error>;

const USAGE: &str = "usage: sched_pingpong processes CPU ROUNDTRIPS BATCHES\n       \
     sched_pingpong threads none|tp_btf|tp_btf_causes|tracepoint|bpftrace|bpftrace_offwake CPU \
     ROUNDTRIPS BATCHES\n       \
     sched_pingpong block none|tp_btf|tp_btf_causes|bpftrace READS BATCHES\n       \
     sched_pingpong lock none|tp_btf|tp_btf_causes|bpftrace WRITES BATCHES\n       \
     sched_pingpong spans none|tp_btf|tp_btf_causes SPANS BATCHES";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("__echo") => echo_process(&args[1..]),
        Some("processes") => processes(&args[1..]),
        Some("threads") => threads(&args[1..]).await,
        Some("block") => block(&args[1..]).await,
        Some("lock") => lock(&args[1..]).await,
        Some("spans") => spans(&args[1..]).await,
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

/// What a mode attaches in this process.
#[derive(Debug, Clone, Copy)]
enum Attach {
    Nothing,
    /// The scheduler's account with this mechanism, with its causes or not.
    Account(kspan::SchedMechanism, bool),
    /// bpftrace with this script on this process.
    Bpftrace(&'static str),
}

impl Attach {
    /// MODE: `none`, `tp_btf`, `tp_btf_causes`, `tracepoint`, or one of
    /// `scripts`' names (bpftrace).
    fn of(mode: &str, scripts: &[(&str, &'static str)]) -> Result<Attach, BoxError> {
        Ok(match mode {
            "none" => Attach::Nothing,
            "tp_btf" => Attach::Account(kspan::SchedMechanism::BtfTracepoints, false),
            "tp_btf_causes" => Attach::Account(kspan::SchedMechanism::BtfTracepoints, true),
            "tracepoint" => Attach::Account(kspan::SchedMechanism::Tracepoints, false),
            other => match scripts.iter().find(|(name, _)| *name == other) {
                Some((_, script)) => Attach::Bpftrace(script),
                None => return Err(format!("mode `{other}`\n{USAGE}").into()),
            },
        })
    }
}

/// The tracer provider every mode has, and what the mode attached.
struct Traced {
    provider: SdkTracerProvider,
    pipeline: kspan::Pipeline,
    kept: Keep,
    kspan: Option<kspan::Kspan>,
    bpftrace: Option<(Child, std::io::BufReader<std::process::ChildStdout>)>,
}

/// What the tracer gave at the end: the spans kept, how many were
/// exported, bpftrace's printed maps.
struct Finished {
    spans: Vec<SpanData>,
    /// This program's spans exported, kept or not.
    exported: u64,
    bpftrace: Option<String>,
}

impl Traced {
    /// The same provider and context observer in every mode: only what is
    /// attached differs (so the observer is registered here, not only by
    /// kspan's start, which the modes without kspan do not reach). Call it
    /// before any thread is pinned: kspan's own threads keep every CPU.
    fn start(attach: Attach, discard: bool) -> Result<Traced, BoxError> {
        kspan::context::register_observer()?;
        let kept = Keep {
            discard,
            ..Keep::default()
        };
        // Room for every span of a run: the SDK drops none.
        let pipeline = kspan::Pipeline::new().with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(1 << 20)
                .build(),
        );
        let provider = SdkTracerProvider::builder()
            .with_kspan(&pipeline, kept.clone())
            .build();
        let kspan = match attach {
            Attach::Account(mechanism, causes) => {
                let mut account = kspan::SchedulerAccount::new().mechanism(mechanism);
                if causes {
                    account = account.with_causes();
                }
                let kspan = kspan::Kspan::builder(&provider)
                    .pipeline(&pipeline)
                    .scheduler_account(account)
                    .start()?;
                // The bench measures the causes: each must be read here.
                for cause in kspan.scheduler_causes() {
                    eprintln!("sched_pingpong: cause {cause}");
                    if let Err(why) = &cause.how {
                        return Err(
                            format!("the cause `{}` is not read: {why}", cause.cause).into()
                        );
                    }
                }
                Some(kspan)
            }
            _ => None,
        };
        let bpftrace = match attach {
            Attach::Bpftrace(script) => Some(start_bpftrace(script)?),
            _ => None,
        };
        Ok(Traced {
            provider,
            pipeline,
            kept,
            kspan,
            bpftrace,
        })
    }

    /// Stops what was attached (kspan first, then the provider) and
    /// checks that kspan lost nothing.
    async fn finish(self) -> Result<Finished, BoxError> {
        let bpftrace = match self.bpftrace {
            Some((child, stdout)) => Some(stop_bpftrace(child, stdout)?),
            None => None,
        };
        if let Some(kspan) = self.kspan {
            let shutdown = kspan.shutdown().await;
            let shut = self.provider.shutdown();
            let stats = self.pipeline.ledger().final_figures(&shutdown?);
            println!("sched_pingpong: kspan: {stats}");
            if stats.lost() > 0 {
                return Err(format!("kspan lost records: {stats}").into());
            }
            shut?;
        } else {
            let _ = self.provider.shutdown();
        }
        let spans = std::mem::take(&mut *self.kept.kept.lock().unwrap_or_else(|e| e.into_inner()));
        let exported = self.kept.count.load(std::sync::atomic::Ordering::Relaxed);
        Ok(Finished {
            spans,
            exported,
            bpftrace,
        })
    }
}

/// The sum of the integer attributes `keys` over `spans`.
fn span_sum(spans: &[SpanData], keys: &[&str]) -> i64 {
    spans
        .iter()
        .flat_map(|s| s.attributes.iter())
        .filter(|kv| keys.contains(&kv.key.as_str()))
        .map(|kv| match kv.value {
            Value::I64(v) => v,
            _ => 0,
        })
        .sum()
}

/// The sum of bpftrace's map `@name` as printed at its exit (`@n[1234]:
/// 56`, `@n[1234, 2]: 56`, `@n: 56`), over the entries whose first key is
/// one of `tids` (every entry without `tids`).
fn bpftrace_sum(printed: &str, name: &str, tids: Option<&[i64]>) -> u64 {
    let keyed = format!("@{name}[");
    let plain = format!("@{name}: ");
    printed
        .lines()
        .filter_map(|line| {
            if let Some(v) = line.strip_prefix(&plain) {
                return tids.is_none().then_some(v);
            }
            let (key, count) = line.strip_prefix(&keyed)?.split_once("]: ")?;
            let first = key.split(',').next()?.trim();
            match tids {
                Some(tids) if !tids.iter().any(|t| first == t.to_string()) => None,
                _ => Some(count),
            }
        })
        .filter_map(|v| v.trim().parse::<u64>().ok())
        .sum()
}

/// bpftrace on this process with `script`, once it says its probes are
/// attached.
fn start_bpftrace(
    script: &str,
) -> Result<(Child, std::io::BufReader<std::process::ChildStdout>), BoxError> {
    let mut child = Command::new("bpftrace")
        .args(["-e", script, &std::process::id().to_string()])
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

/// Stops bpftrace with SIGINT and returns what it printed at its exit
/// (its maps).
///
/// bpftrace 0.17 can miss a SIGINT that arrives while it is not waiting in
/// `epoll_wait` (it then waits on with no timeout), so the signal is sent
/// again every second, for up to 30 s.
fn stop_bpftrace(
    mut child: Child,
    mut stdout: std::io::BufReader<std::process::ChildStdout>,
) -> Result<String, BoxError> {
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
    Ok(printed)
}

async fn threads(args: &[String]) -> Result<(), BoxError> {
    let mode = args.first().map(String::as_str).unwrap_or_default();
    let attach = Attach::of(
        mode,
        &[("bpftrace", OFFCPUTIME), ("bpftrace_offwake", OFFWAKETIME)],
    )?;
    let (cpu, roundtrips, nbatches) = numbers(&args[1..])?;
    let traced = Traced::start(attach, false)?;

    let tracer = traced.provider.tracer(SCOPE);
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

    let finished = traced.finish().await?;
    let traced = match (&finished.bpftrace, attach) {
        (Some(printed), _) => bpftrace_sum(printed, "n", Some(&[main_tid, echo_tid])).to_string(),
        (None, Attach::Account(..)) => span_sum(
            &finished.spans,
            &[
                kspan::sched::attributes::VOLUNTARY_SWITCHES,
                kspan::sched::attributes::INVOLUNTARY_SWITCHES,
            ],
        )
        .to_string(),
        _ => "-".to_owned(),
    };
    println!(
        "PINGPONG {mode} cpu {cpu} rt_ns {fastest:.1} median_rt_ns {median:.1} \
         switches_per_rt {:.3} switches {counted} traced_switches {traced}",
        counted as f64 / rts
    );
    Ok(())
}

/// MODE OPS BATCHES of the causes' workloads.
fn workload_args(args: &[String]) -> Result<(&str, u32, u32), BoxError> {
    let positive = |i: usize, what: &str| -> Result<u32, BoxError> {
        args.get(i)
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("{what} must be a positive number\n{USAGE}").into())
    };
    let mode = args.first().map(String::as_str).unwrap_or_default();
    Ok((
        mode,
        positive(1, "the operations a batch")?,
        positive(2, "BATCHES")?,
    ))
}

/// Times `nbatches` batches of `op` (after one batch of warm-up): the
/// fastest and the median batch's ns an operation, each batch's time
/// divided by `ops_per_batch`.
fn timed_batches(
    nbatches: u32,
    ops_per_batch: f64,
    mut batch: impl FnMut() -> Result<std::time::Duration, BoxError>,
) -> Result<(f64, f64), BoxError> {
    batch()?;
    let mut times = Vec::with_capacity(nbatches as usize);
    for _ in 0..nbatches {
        times.push(batch()?.as_nanos() as f64 / ops_per_batch);
    }
    times.sort_by(f64::total_cmp);
    Ok((times[0], times[times.len() / 2]))
}

/// The calling thread's bytes read from storage, `read_bytes` of
/// `/proc/thread-self/io`.
fn read_bytes() -> Result<u64, BoxError> {
    let text = std::fs::read_to_string("/proc/thread-self/io")?;
    text.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "no read_bytes in /proc/thread-self/io".into())
}

/// Blocks of the block workload's file, 4 KiB each.
const BLOCKS: u64 = 1024;
const BLOCK: usize = 4096;

/// Removes a file when dropped.
struct Remove(std::path::PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

async fn block(args: &[String]) -> Result<(), BoxError> {
    use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
    let (mode, reads, nbatches) = workload_args(args)?;
    let attach = Attach::of(mode, &[("bpftrace", BIOLATENCY)])?;
    let path = std::env::temp_dir().join(format!("sched_pingpong-block-{}", std::process::id()));
    let _remove = Remove(path.clone());
    {
        let mut file = std::fs::File::create(&path)?;
        let data: Vec<u8> = (0..BLOCK * BLOCKS as usize)
            .map(|i| (i % 251) as u8)
            .collect();
        file.write_all(&data)?;
        file.sync_all()?;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .map_err(|e| format!("cannot open {} with O_DIRECT: {e}", path.display()))?;
    let mut buffer = vec![0u8; 2 * BLOCK];
    let at = buffer.as_ptr().align_offset(BLOCK);
    let buffer = &mut buffer[at..at + BLOCK];
    let traced = Traced::start(attach, false)?;
    let tracer = traced.provider.tracer(SCOPE);

    let mut next = 0u64;
    let ((fastest, median), requests) = {
        let cx = Context::current_with_span(tracer.start("reader"));
        let _attached = cx.attach();
        let before = read_bytes()?;
        let progs = prog_stats();
        let times = timed_batches(nbatches, f64::from(reads), || {
            let started = Instant::now();
            for _ in 0..reads {
                let n = file.read_at(buffer, (next % BLOCKS) * BLOCK as u64)?;
                if n != BLOCK {
                    return Err(format!("a read of {BLOCK} bytes read {n}").into());
                }
                next += 1;
            }
            Ok(started.elapsed())
        })?;
        let progs_after = prog_stats();
        let requests = (read_bytes()? - before) / BLOCK as u64;
        print_prog_stats(&progs, &progs_after);
        (times, requests)
    };
    let finished = traced.finish().await?;
    let traced = match (&finished.bpftrace, attach) {
        (Some(printed), _) => bpftrace_sum(printed, "n", None).to_string(),
        (None, Attach::Account(_, true)) => span_sum(
            &finished.spans,
            &[kspan::sched::cause_attributes::BLOCK_REQUESTS],
        )
        .to_string(),
        _ => "-".to_owned(),
    };
    println!(
        "CAUSES block {mode} ns_per_op {fastest:.1} median_ns_per_op {median:.1} ops {next} \
         events {requests} traced_events {traced}"
    );
    Ok(())
}

/// A directory of a memory file system for the lock workload's file (its
/// writes then never wait for a disk), else the temporary directory.
fn lock_dir() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    }
}

async fn lock(args: &[String]) -> Result<(), BoxError> {
    use std::io::Seek as _;
    use std::sync::Barrier;
    let (mode, writes, nbatches) = workload_args(args)?;
    let attach = Attach::of(mode, &[("bpftrace", LOCKCONTENTION)])?;
    let path = lock_dir().join(format!("sched_pingpong-lock-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    let traced = Traced::start(attach, false)?;
    let tracer = traced.provider.tracer(SCOPE);

    // The two writers and this thread meet before and after each batch,
    // and this one empties the file between batches. A batch's time is
    // from the first writer's start to the last one's end, as the writers
    // read them (this thread may run late after a meeting).
    let (start, end) = (Arc::new(Barrier::new(3)), Arc::new(Barrier::new(3)));
    let spans: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    // One writer on the first CPU, one on the last: both run at once (on
    // one CPU they would contend only when one is preempted holding it).
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let writers: Vec<_> = [0, cpus - 1]
        .into_iter()
        .map(|cpu| {
            let mut twin = file.try_clone()?;
            let (start, end, tid_tx, tracer, spans) = (
                start.clone(),
                end.clone(),
                tid_tx.clone(),
                tracer.clone(),
                spans.clone(),
            );
            Ok(std::thread::spawn(move || -> Result<(), String> {
                pin_to(cpu).map_err(|e| e.to_string())?;
                let _ = tid_tx.send(gettid());
                let cx = Context::current_with_span(tracer.start("writer"));
                let _attached = cx.attach();
                // The warm-up batch and the timed ones.
                for _ in 0..=nbatches {
                    start.wait();
                    let began = Instant::now();
                    for _ in 0..writes {
                        twin.write_all(b"x").map_err(|e| e.to_string())?;
                    }
                    let ended = Instant::now();
                    spans
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((began, ended));
                    end.wait();
                }
                Ok(())
            }))
        })
        .collect::<Result<_, std::io::Error>>()?;
    let tids: Vec<i64> = tid_rx.iter().take(writers.len()).collect();
    let mut own = file.try_clone()?;
    let progs = prog_stats();
    let times = timed_batches(nbatches, 2.0 * f64::from(writes), || {
        start.wait();
        end.wait();
        let took = {
            let mut both = spans.lock().unwrap_or_else(|e| e.into_inner());
            let began = both.iter().map(|b| b.0).min().ok_or("no writer ran")?;
            let ended = both.iter().map(|b| b.1).max().ok_or("no writer ran")?;
            both.clear();
            ended - began
        };
        own.set_len(0)?;
        own.rewind()?;
        Ok(took)
    });
    let progs_after = prog_stats();
    for w in writers {
        w.join()
            .map_err(|_| "a writer panicked")?
            .map_err(|e| format!("a writer failed: {e}"))?;
    }
    let (fastest, median) = times?;
    print_prog_stats(&progs, &progs_after);
    let finished = traced.finish().await?;
    use kspan::sched::cause_attributes as c;
    let traced = match (&finished.bpftrace, attach) {
        (Some(printed), _) => bpftrace_sum(printed, "n", Some(&tids)).to_string(),
        (None, Attach::Account(_, true)) => {
            let kinds = [
                ("mutex", c::LOCK_MUTEX_COUNT),
                ("rwsem", c::LOCK_RWSEM_COUNT),
                ("spin", c::LOCK_SPIN_COUNT),
                ("other", c::LOCK_OTHER_COUNT),
            ];
            let by_kind: Vec<String> = kinds
                .iter()
                .map(|(kind, key)| format!("{kind} {}", span_sum(&finished.spans, &[key])))
                .collect();
            println!(
                "sched_pingpong: contentions on the spans: {}",
                by_kind.join(", ")
            );
            let keys: Vec<&str> = kinds.iter().map(|(_, key)| *key).collect();
            span_sum(&finished.spans, &keys).to_string()
        }
        _ => "-".to_owned(),
    };
    let ops = 2 * u64::from(writes) * (u64::from(nbatches) + 1);
    println!(
        "CAUSES lock {mode} ns_per_op {fastest:.1} median_ns_per_op {median:.1} ops {ops} \
         events - traced_events {traced}"
    );
    Ok(())
}

async fn spans(args: &[String]) -> Result<(), BoxError> {
    let (mode, spans, nbatches) = workload_args(args)?;
    let attach = Attach::of(mode, &[])?;
    let traced = Traced::start(attach, true)?;
    let tracer = traced.provider.tracer(SCOPE);
    let progs = prog_stats();
    let (fastest, median) = timed_batches(nbatches, f64::from(spans), || {
        let started = Instant::now();
        for _ in 0..spans {
            tracer.in_span("op", |_| {});
        }
        Ok(started.elapsed())
    })?;
    let progs_after = prog_stats();
    print_prog_stats(&progs, &progs_after);
    let finished = traced.finish().await?;
    let ops = u64::from(spans) * (u64::from(nbatches) + 1);
    let exported = finished.exported;
    if exported != ops {
        return Err(format!("the exporter got {exported} of the {ops} spans").into());
    }
    println!(
        "CAUSES spans {mode} ns_per_op {fastest:.1} median_ns_per_op {median:.1} ops {ops} \
         events {ops} traced_events -"
    );
    Ok(())
}
