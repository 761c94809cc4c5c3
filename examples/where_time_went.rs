// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Where a request's time went: a small service whose every request span
//! says, from the scheduler's account, how long it was on a CPU, waiting
//! for one, sleeping and blocked, with a child span for every long wait.
//!
//! `where_time_went REQUESTS DIR [--busy MS] [--sleep MS] [--hold MS]`
//!
//! Each request, one after the other on a worker thread and inside its own
//! span `request` (attribute `app.request.number`), does four kinds of work:
//!
//! 1. CPU work: a checksum loop until the thread has used `--busy` ms of
//!    CPU (20 by default), measured with the thread's CPU clock, so that
//!    the span's `kspan.sched.on_cpu_ns` is at least that however the
//!    scheduler shares the CPUs;
//! 2. a `--sleep` ms sleep (30), `nanosleep`: sleeping (`S`);
//! 3. a contended `std` mutex: the service's index refresher, a thread of
//!    its own, takes the index lock inside its own span `refresh index` (a
//!    child of the request) and, once the request is waiting for it, keeps
//!    it `--hold` ms (25) more; the request waits in a futex, and its wait
//!    span links to `refresh index`, the span whose unlock woke it;
//! 4. file I/O that blocks: a 4 MiB read of a file written under `DIR` at
//!    start, with `O_DIRECT` so that it goes to the device (blocked, `D`),
//!    or with a plain read where the file system refuses `O_DIRECT` (tmpfs
//!    before Linux 6.6, some network file systems): the span's
//!    `app.read.direct` says which, and `app.read.voluntary_switches` how
//!    often the kernel says the thread gave up its CPU during the read.
//!
//! The spans go out over OTLP (the standard `OTEL_*` variables) through
//! kspan's pipeline (`with_kspan`), whose [`kspan::KernelSums`] processor
//! puts the account's figures on each span as it ends, before the batch
//! processor. The exporter is the OTLP one wrapped by one of this example's
//! own that notes the figures of every `request` span and the wait spans
//! under it as they go out, so that the service prints, at the end, one
//! line per request with what reached the exporter, and kspan's settled
//! figures. (A span processor of its own added after `with_kspan` would
//! not do: the SDK gives each processor its own copy of the span, and only
//! the one the sums processor hands on carries the account's figures.)
//!
//! The spans are made with the OpenTelemetry API rather than `tracing`:
//! the account's figures are those of the time a span was a thread's
//! current context, and `Context::attach` is where that starts and its
//! guard's drop where it stops, so the example shows exactly what is
//! measured; and the refresher gets the request's context as a value to
//! start its span under. `tracing` spans are accounted the same way
//! through tracing-opentelemetry's context activation (`file_service`).
//!
//! kspan needs no probe here: the account attaches the scheduler's
//! tracepoints itself (root, or `CAP_BPF` and `CAP_PERFMON` where they are
//! BTF tracepoints; the guide's "Where a request's time went" says more).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::Duration;

use kspan::sched::{attributes as a, wait_attributes as w};
use kspan_examples::noting::{NoteSpans, Noting};
use kspan_examples::{gettid, init_telemetry_with, otlp_exporter, BoxError};
use opentelemetry::trace::{SpanId, SpanKind, TraceContextExt as _, Tracer as _};
use opentelemetry::trace::{Status, TracerProvider as _};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::{SdkTracer, SpanData};

const USAGE: &str = "usage: where_time_went REQUESTS DIR [--busy MS] [--sleep MS] [--hold MS]";

/// The size of the file each request reads.
const FILE_BYTES: usize = 4 << 20;
/// The size of each read: a multiple of every device's logical block, as
/// `O_DIRECT` wants.
const BLOCK: usize = 1 << 20;
/// The buffer's alignment for `O_DIRECT` (a page).
const ALIGN: usize = 4096;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("where_time_went: {err}");
            ExitCode::FAILURE
        }
    }
}

/// What every request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    busy: Duration,
    sleep: Duration,
    hold: Duration,
}

/// The command line.
#[derive(Debug, PartialEq, Eq)]
struct Args {
    requests: u32,
    dir: PathBuf,
    plan: Plan,
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut positional = Vec::new();
    let mut plan = Plan {
        busy: Duration::from_millis(20),
        sleep: Duration::from_millis(30),
        hold: Duration::from_millis(25),
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let field = match arg.as_str() {
            "--busy" => &mut plan.busy,
            "--sleep" => &mut plan.sleep,
            "--hold" => &mut plan.hold,
            other if other.starts_with("--") => {
                return Err(format!("unknown option `{other}`; {USAGE}"))
            }
            _ => {
                positional.push(arg);
                continue;
            }
        };
        let v = args
            .next()
            .ok_or(format!("{arg} needs a number of milliseconds; {USAGE}"))?;
        let ms: u64 = v.parse().ok().filter(|ms| *ms <= 10_000).ok_or(format!(
            "{arg}: `{v}` is not a whole number of ms up to 10000"
        ))?;
        *field = Duration::from_millis(ms);
    }
    let [requests, dir] = <[String; 2]>::try_from(positional)
        .map_err(|given| format!("{} arguments given, 2 wanted; {USAGE}", given.len()))?;
    let requests = requests
        .parse()
        .ok()
        .filter(|n| (1..=10_000).contains(n))
        .ok_or(format!(
            "REQUESTS: `{requests}` is not a number from 1 to 10000"
        ))?;
    Ok(Args {
        requests,
        dir: PathBuf::from(dir),
        plan,
    })
}

async fn run() -> Result<(), BoxError> {
    let args = parse_args(std::env::args().skip(1))?;
    if !args.dir.is_dir() {
        return Err(format!("DIR {}: not a directory", args.dir.display()).into());
    }
    let data = DataFile::write(&args.dir)?;

    // The account's figures reach the spans in the pipeline's KernelSums
    // processor, before the batch processor and the exporter, where they
    // are noted.
    let figures = Figures::default();
    let telemetry = init_telemetry_with(
        "kspan-where-time-went",
        kspan::Pipeline::new(),
        Noting {
            inner: otlp_exporter()?,
            notes: figures.clone(),
        },
    )?;
    let kspan = kspan::Kspan::builder(&telemetry.provider)
        .pipeline(&telemetry.pipeline)
        .scheduler_account(kspan::SchedulerAccount::default())
        .start()?;
    let mechanism = kspan
        .scheduler_account()
        .map_or("none".to_owned(), |m| m.to_string());
    println!(
        "where_time_went: {} requests, each {} ms of CPU, a {} ms sleep, a mutex held {} ms \
         by another thread, a 4 MiB read of {}; the account uses {mechanism}",
        args.requests,
        args.plan.busy.as_millis(),
        args.plan.sleep.as_millis(),
        args.plan.hold.as_millis(),
        data.path.display(),
    );

    // Blocking work, on a thread of its own rather than the runtime's
    // workers, which also run the OTLP exporter's connection.
    let tracer = telemetry.provider.tracer("where-time-went");
    let (requests, plan, path) = (args.requests, args.plan, data.path.clone());
    let served = tokio::task::spawn_blocking(move || serve(&tracer, requests, plan, &path)).await;

    // Reached however the requests went, so that no span is left unflushed.
    let settled = telemetry.shut_down(kspan).await?;
    match served {
        Ok(Ok(())) => {}
        Ok(Err(err)) => return Err(format!("a request failed: {err}").into()),
        Err(join) => return Err(format!("the request thread failed: {join}").into()),
    }
    for line in figures.summary() {
        println!("{line}");
    }
    println!("where_time_went: kspan: {}", settled.stats);
    settled.result()
}

/// The file the requests read, removed at the end.
struct DataFile {
    path: PathBuf,
}

impl DataFile {
    /// Writes it, and waits until it is on the device: an `O_DIRECT` read
    /// of pages still dirty would write them out first.
    fn write(dir: &Path) -> std::io::Result<DataFile> {
        let path = dir.join(format!("where-time-went-{}.bin", std::process::id()));
        let mut file = std::fs::File::create(&path)?;
        let data = DataFile { path };
        let block: Vec<u8> = (0..BLOCK).map(|i| (i % 251) as u8).collect();
        for _ in 0..FILE_BYTES / BLOCK {
            file.write_all(&block)?;
        }
        file.sync_all()?;
        Ok(data)
    }
}

impl Drop for DataFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Handles the requests one after the other.
fn serve(tracer: &SdkTracer, requests: u32, plan: Plan, path: &Path) -> std::io::Result<()> {
    let index = Arc::new(Mutex::new(0u64));
    let refresher = Refresher::start(tracer.clone(), index.clone(), plan.hold)?;
    let served = (1..=requests).try_for_each(|number| {
        let span = tracer
            .span_builder("request")
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("app.request.number", i64::from(number)),
                KeyValue::new("app.plan.busy_ms", plan.busy.as_millis() as i64),
                KeyValue::new("app.plan.sleep_ms", plan.sleep.as_millis() as i64),
                KeyValue::new("app.plan.hold_ms", plan.hold.as_millis() as i64),
            ])
            .start(tracer);
        let cx = Context::current_with_span(span);
        // From here to the guard's drop the request is this thread's
        // current context: what the account measures.
        let _current = cx.clone().attach();
        let handled = handle(&cx, plan, &refresher, &index, path);
        if let Err(err) = &handled {
            cx.span().set_status(Status::error(err.to_string()));
        }
        handled
    });
    refresher.stop()?;
    served
}

/// One request's work, under `cx`.
fn handle(
    cx: &Context,
    plan: Plan,
    refresher: &Refresher,
    index: &Mutex<u64>,
    path: &Path,
) -> std::io::Result<()> {
    let checksum = busy(plan.busy);
    std::thread::sleep(plan.sleep);
    // The index is being refreshed: the request waits for its lock.
    refresher.refresh(cx)?;
    let version = *index.lock().unwrap_or_else(PoisonError::into_inner);
    let switches_before = voluntary_switches();
    let (direct, bytes) = read_past_the_cache(path)?;
    let switched = voluntary_switches()
        .zip(switches_before)
        .map(|(a, b)| a - b);
    cx.span().set_attributes([
        KeyValue::new("app.checksum", checksum as i64),
        KeyValue::new("app.index.version", version as i64),
        KeyValue::new("app.read.direct", direct),
        KeyValue::new("app.read.bytes", bytes as i64),
        // The kernel's own count, to compare with the account's: a device
        // that answers before the thread sleeps (a virtual disk whose host
        // has the data at hand, now and then) leaves it on the CPU.
        KeyValue::new("app.read.voluntary_switches", switched.unwrap_or(-1)),
    ]);
    Ok(())
}

/// The calling thread's voluntary context switches so far, as the kernel
/// counts them (`/proc/thread-self/status`).
fn voluntary_switches() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
        .trim()
        .parse()
        .ok()
}

/// The calling thread's CPU time so far.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; the clock id
    // is one every Linux has.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Checksums a buffer over and over until this thread has used `cpu`
/// more CPU time (time off CPU meanwhile does not count).
fn busy(cpu: Duration) -> u64 {
    let until = thread_cpu_time() + cpu;
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let mut sum = 0xcbf2_9ce4_8422_2325u64;
    while thread_cpu_time() < until {
        for &b in std::hint::black_box(&data) {
            sum = (sum ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    sum
}

/// The service's index refresher: a thread of its own that, asked by a
/// request, refreshes the index inside its own span `refresh index` under
/// the request's. It takes the index lock, says so, waits until the
/// request is waiting for the lock, and keeps it `hold` longer: every
/// request waits about `hold` in a futex however loaded the machine is, and
/// the refresher's unlock, inside its span, is what wakes it.
struct Refresher {
    asks: mpsc::Sender<Ask>,
    thread: std::thread::JoinHandle<()>,
}

/// A request's ask: its context, its thread, and where to say "held".
struct Ask {
    parent: Context,
    tid: i64,
    held: mpsc::Sender<()>,
}

impl Refresher {
    fn start(tracer: SdkTracer, index: Arc<Mutex<u64>>, hold: Duration) -> std::io::Result<Self> {
        let (asks, asked) = mpsc::channel::<Ask>();
        let thread = std::thread::Builder::new()
            .name("index-refresh".into())
            .spawn(move || {
                for Ask { parent, tid, held } in asked {
                    let span = tracer.start_with_context("refresh index", &parent);
                    // The request's span ends when its last context does:
                    // on the request's thread, not here a moment later.
                    drop(parent);
                    let _current = Context::current_with_span(span).attach();
                    let mut version = index.lock().unwrap_or_else(PoisonError::into_inner);
                    let _ = held.send(());
                    wait_until_asleep(tid);
                    std::thread::sleep(hold);
                    *version += 1;
                    // The guard drops here, inside the span.
                }
            })?;
        Ok(Refresher { asks, thread })
    }

    /// Has the index refreshed under `cx`; returns once the refresher holds
    /// its lock.
    fn refresh(&self, cx: &Context) -> std::io::Result<()> {
        let (held, is_held) = mpsc::channel();
        let gone = || std::io::Error::other("the index refresher is gone");
        self.asks
            .send(Ask {
                parent: cx.clone(),
                tid: gettid(),
                held,
            })
            .map_err(|_| gone())?;
        is_held.recv().map_err(|_| gone())
    }

    /// Ends the thread once it has done every ask.
    fn stop(self) -> std::io::Result<()> {
        drop(self.asks);
        self.thread
            .join()
            .map_err(|_| std::io::Error::other("the index refresher panicked"))
    }
}

/// Waits (up to a second) until thread `tid` of this process is sleeping
/// (`S` in its `stat`): after the refresher's "held", the request's next
/// sleep is its wait for the lock.
fn wait_until_asleep(tid: i64) {
    let stat = format!("/proc/self/task/{tid}/stat");
    for _ in 0..5000 {
        let state = std::fs::read_to_string(&stat).ok().and_then(|text| {
            // `tid (comm) S ...`: the name may hold spaces and parentheses.
            let (_, rest) = text.rsplit_once(')')?;
            rest.split_whitespace().next().map(str::to_owned)
        });
        if state.as_deref() == Some("S") {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Reads `path` to its end past the page cache: with `O_DIRECT` (the thread
/// blocks while the device reads), or plainly where the file system
/// refuses `O_DIRECT` (at the open or at the first read, with `EINVAL`).
/// Returns whether it was direct and the bytes read.
fn read_past_the_cache(path: &Path) -> std::io::Result<(bool, u64)> {
    let mut raw = vec![0u8; BLOCK + ALIGN];
    let start = raw.as_ptr().align_offset(ALIGN);
    let buf = &mut raw[start..start + BLOCK];
    let direct = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path);
    let refused = |e: &std::io::Error| e.raw_os_error() == Some(libc::EINVAL);
    match direct {
        Ok(mut file) => match read_to_end(&mut file, buf) {
            Ok(bytes) => return Ok((true, bytes)),
            Err(e) if refused(&e) => {}
            Err(e) => return Err(e),
        },
        Err(e) if refused(&e) => {}
        Err(e) => return Err(e),
    }
    let bytes = read_to_end(&mut std::fs::File::open(path)?, buf)?;
    Ok((false, bytes))
}

fn read_to_end(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<u64> {
    let mut bytes = 0;
    loop {
        match file.read(buf)? {
            0 => return Ok(bytes),
            n => bytes += n as u64,
        }
    }
}

/// What the example noted of the spans that reached its exporter.
#[derive(Debug, Default, Clone)]
struct Figures(Arc<Mutex<Noted>>);

#[derive(Debug, Default)]
struct Noted {
    /// Each `request` span: its number, id, duration and attributes.
    requests: Vec<(i64, SpanId, Duration, HashMap<String, Value>)>,
    /// The states of the wait spans under each span.
    waits: HashMap<SpanId, Vec<String>>,
}

impl NoteSpans for Figures {
    fn note(&self, span: &SpanData) {
        let mut noted = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if span.name.starts_with("off-cpu ") {
            let state = span
                .attributes
                .iter()
                .find(|kv| kv.key.as_str() == w::STATE)
                .map_or("?".into(), |kv| kv.value.as_str().into_owned());
            noted
                .waits
                .entry(span.parent_span_id)
                .or_default()
                .push(state);
        } else if span.name == "request" {
            let attributes: HashMap<String, Value> = span
                .attributes
                .iter()
                .map(|kv| (kv.key.as_str().to_owned(), kv.value.clone()))
                .collect();
            let number = match attributes.get("app.request.number") {
                Some(Value::I64(n)) => *n,
                _ => 0,
            };
            let duration = span
                .end_time
                .duration_since(span.start_time)
                .unwrap_or_default();
            noted
                .requests
                .push((number, span.span_context.span_id(), duration, attributes));
        }
    }
}

impl Figures {
    /// One line per request, in request order.
    fn summary(&self) -> Vec<String> {
        let mut noted = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        noted.requests.sort_by_key(|r| r.0);
        let noted = &*noted;
        noted
            .requests
            .iter()
            .map(|(number, id, duration, attrs)| {
                let int = |key: &str| match attrs.get(key) {
                    Some(Value::I64(v)) => Some(*v),
                    _ => None,
                };
                let ms = |key: &str| {
                    int(key).map_or("-".to_owned(), |ns| format!("{:.1}", ns as f64 / 1e6))
                };
                let mut waits: Vec<(String, usize)> = Vec::new();
                for state in noted.waits.get(id).into_iter().flatten() {
                    match waits.iter_mut().find(|(s, _)| s == state) {
                        Some((_, n)) => *n += 1,
                        None => waits.push((state.clone(), 1)),
                    }
                }
                let waits = if waits.is_empty() {
                    "none".to_owned()
                } else {
                    waits
                        .iter()
                        .map(|(s, n)| format!("{n} {s}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let read = match attrs.get("app.read.direct") {
                    Some(Value::Bool(true)) => "O_DIRECT",
                    Some(Value::Bool(false)) => "a plain read (O_DIRECT refused)",
                    _ => "no read",
                };
                format!(
                    "request {number}: {:.1} ms: on CPU {} ms, run queue {} ms, sleeping {} ms, \
                     blocked {} ms, other {} ms; {} voluntary and {} involuntary switches; \
                     wait spans: {waits}; read with {read}",
                    duration.as_secs_f64() * 1e3,
                    ms(a::ON_CPU_NS),
                    ms(a::RUN_QUEUE_NS),
                    ms(a::SLEEPING_NS),
                    ms(a::BLOCKED_NS),
                    ms(a::OTHER_OFF_CPU_NS),
                    int(a::VOLUNTARY_SWITCHES).unwrap_or(0),
                    int(a::INVOLUNTARY_SWITCHES).unwrap_or(0),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &[&str]) -> Result<Args, String> {
        parse_args(s.iter().map(|s| s.to_string()))
    }

    #[test]
    fn arguments() {
        let args = parse(&["3", "/tmp", "--sleep", "40"]).unwrap();
        assert_eq!((args.requests, args.dir), (3, "/tmp".into()));
        assert_eq!(args.plan.sleep, Duration::from_millis(40));
        assert_eq!(args.plan.busy, Duration::from_millis(20));
        assert!(parse(&["3"]).unwrap_err().contains("2 wanted"));
        assert!(parse(&["0", "/tmp"]).unwrap_err().contains("REQUESTS"));
        assert!(parse(&["x", "/tmp"]).unwrap_err().contains("REQUESTS"));
        assert!(parse(&["1", "/tmp", "--hold"])
            .unwrap_err()
            .contains("needs a number"));
        assert!(parse(&["1", "/tmp", "--busy", "-1"])
            .unwrap_err()
            .contains("--busy"));
        assert!(parse(&["1", "/tmp", "--fast"])
            .unwrap_err()
            .contains("unknown option"));
    }

    #[test]
    fn the_whole_file_is_read() {
        let data = DataFile::write(&std::env::temp_dir()).unwrap();
        let (_, bytes) = read_past_the_cache(&data.path).unwrap();
        assert_eq!(bytes, FILE_BYTES as u64);
        let path = data.path.clone();
        drop(data);
        assert!(!path.exists(), "the file is removed");
    }
}
