// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Why it waited: a small service with one request per cause of waiting,
//! whose spans say, from the scheduler's account with its causes on
//! (`SchedulerAccount::new().with_causes()`), why their time off CPU went
//! where it did.
//!
//! `why_it_waited [DIR]`
//!
//! The requests run one after the other on a worker thread, each inside its
//! own span `request` (attributes `app.request.number` and
//! `app.request.cause`), the first three each with a helper of its own:
//!
//! 1. `disk`: 8 `O_DIRECT` reads of 4 KiB, 64 KiB apart, of the raw disk
//!    named by `KSPAN_SLOW_DISK` (the VM's slow disk, which completes each
//!    request 10 ms after it gets it), or, without it, of a file written
//!    and synced under DIR (the temporary directory by default: it must be
//!    on a disk for the reads to reach one). The span says its block
//!    requests (`kspan.block.*`), its blocked time is I/O, and each
//!    `off-cpu blocked` wait span names the request whose completion woke
//!    it (`kspan.block.request.*`). `app.read.bytes` is the kernel's own
//!    count of the bytes the thread read from storage
//!    (`/proc/thread-self/io`'s `read_bytes`), to compare.
//! 2. `kernel-lock`: a helper thread, in its own request
//!    `kernel-lock-holder`, writes 16 MiB in one `write` to a file under
//!    DIR; once the file grows, the request writes 4 KiB to the same open
//!    file through a duplicated descriptor. With two descriptors on it, a
//!    `write` holds the open file's position lock (`f_pos_lock`, a kernel
//!    mutex) for its whole length, so the request waits for the rest of
//!    the helper's write: one mutex contention (`kspan.lock.mutex.*`), and
//!    a `kernel lock wait` span naming the lock's owner, linked to the
//!    holder's span.
//! 3. `futex`: a helper thread takes a `std` mutex and, once the request
//!    sleeps on it, keeps it 30 ms in its own request `futex-holder`: the
//!    request's time is futex time, and its wait span links to the holder's
//!    span (the unlock woke it).
//! 4. `timer`: a 40 ms sleep: timer time.
//! 5. `chain`: a chain of wake-ups, two hops from the request to the disk.
//!    A helper takes a `std` mutex and, once the request sleeps on it,
//!    makes 3 reads as the disk request does (of the next sectors) in its
//!    own request `chain-reader` (a child of this one's span, so that one
//!    trace, and one Jaeger page, holds both hops); then it lets go. The request's futex wait
//!    links to the reader's span (`kspan.link` `waker`) and to the reader's
//!    last wait before the unlock (`waker_wait`, with that wait's state,
//!    cause and time waiting): the last read's I/O wait, which names its
//!    block request (device, sector) and was woken by the disk's interrupt.
//!    Its line says the chain: each hop's span, kind and figures.
//! 6. `throttled`: 4 `O_DIRECT` reads of 128 KiB of the raw disk
//!    `KSPAN_SLOW_DISK` names, while the process is in a cgroup group
//!    of its own whose limit holds reads of that disk to 1 MiB/s (v2's
//!    `io.max`, or v1's `blkio.throttle.read_bps_device` where v1's blkio
//!    holds the controller; `kspan_examples::io_limit`: it limits whole
//!    processes, so the process goes in for this request only, and back
//!    out). blk-throttle holds the reads over the limit and its kernel
//!    worker issues them: the span counts them held, with their time held
//!    (`kspan.block.held.*`), and each I/O wait names the group that held
//!    its request (`kspan.block.request.held_by.*`). The group's own
//!    counts for the request are on the span (`app.cgroup.*`), to
//!    compare. Where the machine cannot limit it (no raw disk, not root,
//!    no io controller), the example says why on stderr
//!    and runs the other requests.
//!
//! Each request's line, at the end, says its figures as they reached the
//! exporter: the parts of its blocked and sleeping time (only those that
//! are not 0), its kernel lock contentions and block requests, and its
//! wait spans; then kspan's settled figures. The spans go out over OTLP
//! (the standard `OTEL_*` variables) through kspan's pipeline
//! (`with_kspan`), with a wrapper of this example's own around the OTLP
//! exporter that notes them (as `where_time_went` does).
//!
//! kspan needs no probe here: the account attaches the scheduler's, the
//! lock and the block tracepoints itself (root, or `CAP_BPF` and
//! `CAP_PERFMON` where they are BTF tracepoints); the guide's "Why it
//! waited" says which kernels give which cause.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{mpsc, Arc, Barrier, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kspan::sched::{attributes as a, cause_attributes as c, wait_attributes as w};
use kspan_examples::io_limit::{IoLimit, Version};
use kspan_examples::noting::{NoteSpans, Noting};
use kspan_examples::{gettid, init_telemetry_with, otlp_exporter, BoxError};
use opentelemetry::trace::{SpanId, SpanKind, TraceContextExt as _, Tracer as _};
use opentelemetry::trace::{Status, TracerProvider as _};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::{SdkTracer, SpanData};

const USAGE: &str = "usage: why_it_waited [DIR]";
/// The variable naming a raw disk to read (the VM runner's slow disk).
const SLOW_DISK_ENV: &str = "KSPAN_SLOW_DISK";

/// The disk request's reads: how many, each's size, how far apart.
const READS: u64 = 8;
const READ: usize = 4096;
const STRIDE: u64 = 64 << 10;
/// The chain's reader's reads, after the disk request's.
const CHAIN_READS: u64 = 3;
/// The throttled request's reads (after the others' on the disk), and the
/// group's read limit: 512 KiB at 1 MiB/s, held about half a second.
const THROTTLED_READS: u64 = 4;
const THROTTLED_READ: usize = 128 << 10;
const THROTTLED_FIRST: u64 = 1 << 20;
const THROTTLE_BPS: u64 = 1 << 20;
/// The kernel lock's holder's one write.
const HOLDER_WRITE: usize = 16 << 20;
/// How long the futex request's holder keeps the mutex once it waits.
const HOLD: Duration = Duration::from_millis(30);
/// The timer request's sleep.
const SLEEP: Duration = Duration::from_millis(40);

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("why_it_waited: {err}");
            ExitCode::FAILURE
        }
    }
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<PathBuf, String> {
    let args: Vec<String> = args.into_iter().collect();
    match &args[..] {
        [] => Ok(std::env::temp_dir()),
        [flag, ..] if flag.starts_with('-') => Err(format!("unknown option `{flag}`; {USAGE}")),
        [dir] => Ok(PathBuf::from(dir)),
        _ => Err(format!(
            "{} arguments given, 1 at most; {USAGE}",
            args.len()
        )),
    }
}

async fn run() -> Result<(), BoxError> {
    let dir = parse_args(std::env::args().skip(1))?;
    if !dir.is_dir() {
        return Err(format!("DIR {}: not a directory", dir.display()).into());
    }
    let disk = match std::env::var_os(SLOW_DISK_ENV).filter(|v| !v.is_empty()) {
        Some(device) => Disk::Device(PathBuf::from(device)),
        None => Disk::File(DataFile::write(&dir)?),
    };
    // The throttled request's group, made before the requests start; the
    // process goes in for that request only.
    let group = format!("kspan-why-throttled-{}", std::process::id());
    let throttled = match IoLimit::new(&group, disk.path(), THROTTLE_BPS) {
        Ok(limit) => Some(limit),
        Err(why) => {
            eprintln!("why_it_waited: request throttled not run: {why}; the other requests run");
            None
        }
    };

    let figures = Figures::default();
    let telemetry = init_telemetry_with(
        "kspan-why-it-waited",
        kspan::Pipeline::new(),
        Noting {
            inner: otlp_exporter()?,
            notes: figures.clone(),
        },
    )?;
    let kspan = kspan::Kspan::builder(&telemetry.provider)
        .pipeline(&telemetry.pipeline)
        // The account, and why each wait happened.
        .scheduler_account(kspan::SchedulerAccount::new().with_causes())
        .start()?;
    let mechanism = kspan
        .scheduler_account()
        .map_or("none".to_owned(), |m| m.to_string());
    let throttled_plan = match &throttled {
        Some(limit) => format!(
            "throttled: {THROTTLED_READS} reads of {} KiB in group {} ({} {THROTTLE_BPS})",
            THROTTLED_READ >> 10,
            limit.name(),
            match limit.version() {
                Version::V2 => "io.max rbps=",
                Version::V1 => "cgroup v1 blkio.throttle.read_bps_device",
            }
        ),
        None => "throttled: not run, said why on stderr".to_owned(),
    };
    println!(
        "why_it_waited: 6 requests (disk: {READS} O_DIRECT reads of {}; kernel-lock; futex; \
         timer; chain: a futex held over {CHAIN_READS} reads; {throttled_plan}); the account \
         uses {mechanism}; its causes:",
        disk.path().display()
    );
    for cause in kspan.scheduler_causes() {
        println!("  {cause}");
    }

    // Blocking work, on a thread of its own rather than the runtime's
    // workers, which also run the OTLP exporter's connection.
    let tracer = telemetry.provider.tracer("why-it-waited");
    let lock_file = dir.join(format!("why-it-waited-lock-{}.bin", std::process::id()));
    let served = tokio::task::spawn_blocking({
        let lock_file = lock_file.clone();
        let disk = disk.path().to_owned();
        // Dropped on the request thread once served: the group removed.
        move || serve(&tracer, &disk, &lock_file, throttled.as_ref())
    })
    .await;
    let _ = std::fs::remove_file(&lock_file);
    drop(disk);

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
    println!("why_it_waited: kspan: {}", settled.stats);
    settled.result()
}

/// What the disk request reads.
enum Disk {
    /// A raw block device.
    Device(PathBuf),
    /// A file written for it.
    File(DataFile),
}

impl Disk {
    fn path(&self) -> &Path {
        match self {
            Disk::Device(path) => path,
            Disk::File(file) => &file.path,
        }
    }
}

/// The file the disk request reads without a raw disk, removed at the end.
struct DataFile {
    path: PathBuf,
}

impl DataFile {
    /// Writes it, and waits until it is on the device: an `O_DIRECT` read
    /// of pages still dirty would write them out first, from the reader.
    fn write(dir: &Path) -> std::io::Result<DataFile> {
        let path = dir.join(format!("why-it-waited-{}.bin", std::process::id()));
        let file = File::create(&path)?;
        let data = DataFile { path };
        file.write_all_at(&vec![7u8; ((READS + CHAIN_READS) * STRIDE) as usize], 0)?;
        file.sync_all()?;
        Ok(data)
    }
}

impl Drop for DataFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A request span, root of a trace of its own: `cause` says which.
fn request(tracer: &SdkTracer, number: i64, cause: &'static str) -> Context {
    request_in(tracer, number, cause, &Context::new())
}

/// A request span, a child of `parent`'s span if it has one.
fn request_in(tracer: &SdkTracer, number: i64, cause: &'static str, parent: &Context) -> Context {
    let span = tracer
        .span_builder("request")
        .with_kind(SpanKind::Server)
        .with_attributes([
            KeyValue::new("app.request.number", number),
            KeyValue::new("app.request.cause", cause),
            KeyValue::new("app.thread.tid", gettid()),
        ])
        .start_with_context(tracer, parent);
    Context::current_with_span(span)
}

/// Runs `work` as request `number`, its span current on this thread
/// meanwhile (what the account measures).
fn handle(
    tracer: &SdkTracer,
    number: i64,
    cause: &'static str,
    work: impl FnOnce(&Context) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let cx = request(tracer, number, cause);
    let _current = cx.clone().attach();
    let done = work(&cx);
    if let Err(err) = &done {
        cx.span().set_status(Status::error(err.to_string()));
    }
    done
}

/// The six requests, one after the other. A helper starts before the
/// request it holds up (and is numbered after it), and is joined after it:
/// the request's span holds its wait and nothing else of the helper's.
fn serve(
    tracer: &SdkTracer,
    disk: &Path,
    lock_file: &Path,
    throttled: Option<&IoLimit>,
) -> std::io::Result<()> {
    handle(tracer, 1, "disk", |cx| read_disk(cx, disk, 0, READS, READ))?;
    let writer = LockHolder::start(tracer, 3, lock_file)?;
    handle(tracer, 2, "kernel-lock", |cx| writer.contend(cx))?;
    writer.join()?;
    let holder = MutexHolder::start(tracer, 5, "futex-holder", &Context::new(), |_| {
        std::thread::sleep(HOLD);
        Ok(())
    })?;
    handle(tracer, 4, "futex", |cx| {
        cx.span()
            .set_attribute(KeyValue::new("app.plan.hold_ms", HOLD.as_millis() as i64));
        holder.contend()
    })?;
    holder.join()?;
    handle(tracer, 6, "timer", |cx| {
        cx.span()
            .set_attribute(KeyValue::new("app.plan.sleep_ms", SLEEP.as_millis() as i64));
        std::thread::sleep(SLEEP);
        Ok(())
    })?;
    // The reader is in the request's trace: it starts inside the request,
    // and is joined after it.
    let mut reader = None;
    handle(tracer, 7, "chain", |cx| {
        let disk = disk.to_owned();
        let holder = MutexHolder::start(tracer, 8, "chain-reader", cx, move |cx| {
            read_disk(cx, &disk, READS * STRIDE, CHAIN_READS, READ)
        })?;
        let waited = holder.contend();
        reader = Some(holder);
        waited
    })?;
    reader.map_or(Ok(()), MutexHolder::join)?;
    // Last, with every helper joined: the whole process is in the group
    // while it runs (its other threads read no disk).
    if let Some(limit) = throttled {
        limit.enter().map_err(std::io::Error::other)?;
        let done = handle(tracer, 9, "throttled", |cx| read_throttled(cx, disk, limit));
        limit.leave().map_err(std::io::Error::other)?;
        done?;
    }
    Ok(())
}

/// The throttled request's reads, with the group's own counts of them
/// (`app.cgroup.*`: what the kernel's io controller counted, v2's
/// `io.stat` or v1's `blkio.throttle.*`, named by `app.cgroup.stat`).
fn read_throttled(cx: &Context, disk: &Path, limit: &IoLimit) -> std::io::Result<()> {
    let before = limit.read_stat().map_err(std::io::Error::other)?;
    read_disk(cx, disk, THROTTLED_FIRST, THROTTLED_READS, THROTTLED_READ)?;
    let after = limit.read_stat().map_err(std::io::Error::other)?;
    cx.span().set_attributes([
        KeyValue::new("app.cgroup.name", limit.name()),
        KeyValue::new(
            "app.cgroup.stat",
            match limit.version() {
                Version::V2 => "io.stat",
                Version::V1 => "blkio.throttle.io_serviced",
            },
        ),
        KeyValue::new("app.cgroup.rbps", THROTTLE_BPS as i64),
        KeyValue::new("app.cgroup.rios", (after.ios - before.ios) as i64),
        KeyValue::new("app.cgroup.rbytes", (after.bytes - before.bytes) as i64),
    ]);
    Ok(())
}

/// The calling thread's bytes read from storage (`/proc/thread-self/io`).
fn thread_read_bytes() -> std::io::Result<u64> {
    let io = std::fs::read_to_string("/proc/thread-self/io")?;
    io.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| std::io::Error::other("no read_bytes in /proc/thread-self/io"))
}

/// `count` `O_DIRECT` reads of `size` bytes of `path`, from byte `first`,
/// [`STRIDE`] apart or back to back if larger.
fn read_disk(
    cx: &Context,
    path: &Path,
    first: u64,
    count: u64,
    size: usize,
) -> std::io::Result<()> {
    let stride = STRIDE.max(size as u64);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| std::io::Error::other(format!("{} with O_DIRECT: {e}", path.display())))?;
    // O_DIRECT wants a buffer aligned to the device's block: a page.
    let mut raw = vec![0u8; size + 4096];
    let start = raw.as_ptr().align_offset(4096);
    let buf = &mut raw[start..start + size];
    let before = thread_read_bytes()?;
    let began = Instant::now();
    for i in 0..count {
        let n = file.read_at(buf, first + i * stride)?;
        if n != size {
            return Err(std::io::Error::other(format!(
                "a short read of {}: {n} bytes",
                path.display()
            )));
        }
    }
    let took = began.elapsed();
    let read = thread_read_bytes()? - before;
    cx.span().set_attributes([
        KeyValue::new("app.read.path", path.display().to_string()),
        KeyValue::new("app.read.first", first as i64),
        KeyValue::new("app.read.count", count as i64),
        KeyValue::new("app.read.size", size as i64),
        KeyValue::new("app.read.stride", stride as i64),
        KeyValue::new("app.read.bytes", read as i64),
        KeyValue::new("app.read.took_ns", took.as_nanos() as i64),
    ]);
    Ok(())
}

/// Two writers of one open file: a holder, in a request of its own on a
/// thread of its own, in one long `write`, and a request that writes a
/// little once the holder's write has begun. A dup of the descriptor makes
/// the open file's count 2, so each `write` takes its `f_pos_lock`.
struct LockHolder {
    twin: File,
    thread: std::thread::JoinHandle<std::io::Result<usize>>,
}

impl LockHolder {
    /// Starts the holder (request `number`): it writes [`HOLDER_WRITE`]
    /// bytes to `path` as soon as it is in its span.
    fn start(tracer: &SdkTracer, number: i64, path: &Path) -> std::io::Result<Self> {
        let file = File::create(path)?;
        let twin = file.try_clone()?;
        let ready = Arc::new(Barrier::new(2));
        let thread = {
            let (tracer, ready) = (tracer.clone(), ready.clone());
            std::thread::Builder::new()
                .name("lock-holder".into())
                .spawn(move || {
                    let buffer = vec![1u8; HOLDER_WRITE];
                    let cx = request(&tracer, number, "kernel-lock-holder");
                    let _current = cx.attach();
                    ready.wait();
                    // One system call: the lock is held from its start to
                    // its end.
                    (&file).write(&buffer)
                })?
        };
        ready.wait();
        Ok(LockHolder { twin, thread })
    }

    /// In the request `cx`: once the holder's write has begun (the file
    /// grows as it writes), writes 4 KiB to the same open file.
    fn contend(&self, cx: &Context) -> std::io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.twin.metadata()?.len() == 0 {
            if Instant::now() > deadline {
                return Err(std::io::Error::other("the holder never began its write"));
            }
            std::thread::yield_now();
        }
        let grown = self.twin.metadata()?.len();
        (&self.twin).write_all(&[2u8; 4096])?;
        cx.span()
            .set_attribute(KeyValue::new("app.holder.written_before", grown as i64));
        Ok(())
    }

    fn join(self) -> std::io::Result<()> {
        let written = self
            .thread
            .join()
            .map_err(|_| std::io::Error::other("the lock holder panicked"))??;
        if written != HOLDER_WRITE {
            return Err(std::io::Error::other(format!(
                "the holder wrote {written} bytes of {HOLDER_WRITE}"
            )));
        }
        Ok(())
    }
}

/// A holder, on a thread of its own, takes a `std` mutex and, once the
/// request sleeps on it, begins a request of its own, in which it does its
/// work (for `futex`, a [`HOLD`] sleep; for `chain`, reads of the disk) and
/// lets go.
struct MutexHolder {
    mutex: Arc<Mutex<u64>>,
    thread: std::thread::JoinHandle<std::io::Result<()>>,
}

impl MutexHolder {
    /// Starts the holder (request `number`, `cause`, under `parent`'s span
    /// if it has one), which, once the calling thread sleeps on the mutex,
    /// does `work` in its span, then lets go; returns once it holds the
    /// mutex.
    fn start(
        tracer: &SdkTracer,
        number: i64,
        cause: &'static str,
        parent: &Context,
        work: impl FnOnce(&Context) -> std::io::Result<()> + Send + 'static,
    ) -> std::io::Result<Self> {
        let mutex = Arc::new(Mutex::new(0u64));
        let (held, is_held) = mpsc::channel();
        let waiter = gettid();
        let thread = {
            let (tracer, mutex, parent) = (tracer.clone(), mutex.clone(), parent.clone());
            std::thread::Builder::new()
                .name(cause.into())
                .spawn(move || {
                    let mut guard = mutex.lock().unwrap_or_else(PoisonError::into_inner);
                    let _ = held.send(());
                    // The waiter's next sleep is its wait for the mutex.
                    // Polled outside the request: its span holds the work
                    // and the unlock, not the polling's sleeps.
                    wait_until_asleep(waiter);
                    let cx = request_in(&tracer, number, cause, &parent);
                    let _current = cx.clone().attach();
                    let done = work(&cx);
                    if let Err(err) = &done {
                        cx.span().set_status(Status::error(err.to_string()));
                    }
                    *guard += 1;
                    // The unlock, inside the span: what wakes the waiter.
                    drop(guard);
                    done
                })?
        };
        is_held
            .recv()
            .map_err(|_| std::io::Error::other("the mutex holder is gone"))?;
        Ok(MutexHolder { mutex, thread })
    }

    /// In the request: takes the mutex.
    fn contend(&self) -> std::io::Result<()> {
        let version = *self.mutex.lock().unwrap_or_else(PoisonError::into_inner);
        if version != 1 {
            return Err(std::io::Error::other(
                "the mutex was taken before its holder",
            ));
        }
        Ok(())
    }

    fn join(self) -> std::io::Result<()> {
        self.thread
            .join()
            .map_err(|_| std::io::Error::other("the mutex holder panicked"))?
    }
}

/// Waits (up to a second) until thread `tid` of this process is sleeping
/// (`S` in its `stat`).
fn wait_until_asleep(tid: i64) {
    let stat = format!("/proc/self/task/{tid}/stat");
    for _ in 0..5000 {
        let mut text = String::new();
        let state = File::open(&stat)
            .and_then(|mut f| f.read_to_string(&mut text))
            .ok()
            .and_then(|_| {
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

/// A span as the exporter saw it: what the summary needs.
#[derive(Debug, Clone)]
struct Noted {
    name: String,
    id: SpanId,
    parent: SpanId,
    duration: Duration,
    attributes: HashMap<String, Value>,
    links: Vec<NotedLink>,
}

/// A span's link: the span it links to, and the link's attributes.
#[derive(Debug, Clone)]
struct NotedLink {
    id: SpanId,
    attributes: HashMap<String, Value>,
}

impl NotedLink {
    /// Its kind (`kspan.link`: `waker`, `owner`, `waker_wait`).
    fn kind(&self) -> String {
        self.attributes
            .get(w::LINK)
            .map(|v| v.as_str().into_owned())
            .unwrap_or_default()
    }
}

impl Noted {
    fn of(span: &SpanData) -> Noted {
        Noted {
            name: span.name.to_string(),
            id: span.span_context.span_id(),
            parent: span.parent_span_id,
            duration: span
                .end_time
                .duration_since(span.start_time)
                .unwrap_or_default(),
            attributes: span
                .attributes
                .iter()
                .map(|kv| (kv.key.as_str().to_owned(), kv.value.clone()))
                .collect(),
            links: span
                .links
                .iter()
                .map(|l| NotedLink {
                    id: l.span_context.span_id(),
                    attributes: l
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.as_str().to_owned(), kv.value.clone()))
                        .collect(),
                })
                .collect(),
        }
    }

    fn int(&self, key: &str) -> i64 {
        int_of(&self.attributes, key)
    }

    fn str(&self, key: &str) -> Option<String> {
        self.attributes.get(key).map(|v| v.as_str().into_owned())
    }

    /// Its cause, for a wait: blocked's, sleeping's or the lock's kind.
    fn cause(&self) -> Option<String> {
        self.str(w::BLOCK_CAUSE)
            .or_else(|| self.str(w::SLEEP_CAUSE))
            .or_else(|| self.str(w::LOCK_KIND))
    }

    /// Its link of `kind`.
    fn link(&self, kind: &str) -> Option<&NotedLink> {
        self.links.iter().find(|l| l.kind() == kind)
    }
}

fn int_of(attributes: &HashMap<String, Value>, key: &str) -> i64 {
    match attributes.get(key) {
        Some(Value::I64(v)) => *v,
        _ => 0,
    }
}

/// The spans that reached the example's exporter: requests and waits.
#[derive(Debug, Default, Clone)]
struct Figures(Arc<Mutex<Vec<Noted>>>);

/// Milliseconds, one decimal.
fn ms(ns: i64) -> String {
    format!("{:.1}", ns as f64 / 1e6)
}

/// `name ms` for each part not 0, joined; `-` when all are.
fn parts(span: &Noted, keys: &[(&str, &str)]) -> String {
    let said: Vec<String> = keys
        .iter()
        .filter(|(_, key)| span.int(key) != 0)
        .map(|(name, key)| format!("{name} {}", ms(span.int(key))))
        .collect();
    if said.is_empty() {
        "-".to_owned()
    } else {
        said.join(", ")
    }
}

impl NoteSpans for Figures {
    fn note(&self, span: &SpanData) {
        let wanted = span.name == "request"
            || span.name.starts_with("off-cpu ")
            || span.name == "kernel lock wait";
        if wanted {
            let mut noted = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            noted.push(Noted::of(span));
        }
    }
}

impl Figures {
    /// One line per request, in request order.
    fn summary(&self) -> Vec<String> {
        let noted = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut requests: Vec<&Noted> = noted.iter().filter(|s| s.name == "request").collect();
        requests.sort_by_key(|s| s.int("app.request.number"));
        requests
            .iter()
            .map(|req| {
                let waits: Vec<&Noted> = noted
                    .iter()
                    .filter(|s| s.parent == req.id && s.name != "request")
                    .collect();
                describe(req, &waits, &noted)
            })
            .collect()
    }
}

/// A request's line: its figures and its wait spans (`all`: every span
/// noted, for the spans they link to).
fn describe(req: &Noted, waits: &[&Noted], all: &[Noted]) -> String {
    let span_of = |id: SpanId| all.iter().find(|s| s.id == id);
    let cause_of = |id: SpanId| {
        span_of(id)
            .filter(|s| s.name == "request")
            .and_then(|s| s.str("app.request.cause"))
    };
    let mut line = format!(
        "request {} {}: {} ms; on CPU {} ms, run queue {} ms; blocked {} ms ({}); \
         sleeping {} ms ({})",
        req.int("app.request.number"),
        req.str("app.request.cause").unwrap_or_default(),
        ms(req.duration.as_nanos() as i64),
        ms(req.int(a::ON_CPU_NS)),
        ms(req.int(a::RUN_QUEUE_NS)),
        ms(req.int(a::BLOCKED_NS)),
        parts(
            req,
            &[
                ("io", c::BLOCKED_IO_NS),
                ("memory", c::BLOCKED_MEMORY_NS),
                ("lock", c::BLOCKED_LOCK_NS),
                ("unattributed", c::BLOCKED_UNATTRIBUTED_NS),
            ]
        ),
        ms(req.int(a::SLEEPING_NS)),
        parts(
            req,
            &[
                ("lock", c::SLEEPING_LOCK_NS),
                ("futex", c::SLEEPING_FUTEX_NS),
                ("poll", c::SLEEPING_POLL_NS),
                ("timer", c::SLEEPING_TIMER_NS),
                ("receive", c::SLEEPING_RECEIVE_NS),
                ("unattributed", c::SLEEPING_UNATTRIBUTED_NS),
            ]
        ),
    );
    let locks: Vec<String> = [
        ("mutex", c::LOCK_MUTEX_COUNT, c::LOCK_MUTEX_NS),
        ("rwsem", c::LOCK_RWSEM_COUNT, c::LOCK_RWSEM_NS),
        ("spin", c::LOCK_SPIN_COUNT, c::LOCK_SPIN_NS),
        ("other", c::LOCK_OTHER_COUNT, c::LOCK_OTHER_NS),
    ]
    .iter()
    .filter(|(_, count, _)| req.int(count) > 0)
    .map(|(kind, count, ns)| format!("{kind} {} in {} ms", req.int(count), ms(req.int(ns))))
    .collect();
    if !locks.is_empty() {
        line += &format!("; kernel locks: {}", locks.join(", "));
    }
    if req.int(c::BLOCK_REQUESTS) > 0 {
        let held = match req.int(c::BLOCK_HELD_REQUESTS) {
            0 => String::new(),
            n => format!(
                " ({n} held {} ms by the throttle)",
                ms(req.int(c::BLOCK_HELD_NS))
            ),
        };
        line += &format!(
            "; block requests {}{held}, {} bytes, queued {} ms, on the device {} ms",
            req.int(c::BLOCK_REQUESTS),
            req.int(c::BLOCK_BYTES),
            ms(req.int(c::BLOCK_QUEUE_NS)),
            ms(req.int(c::BLOCK_DEVICE_NS)),
        );
    }
    if req.attributes.contains_key("app.read.bytes") {
        line += &format!(" (read_bytes {})", req.int("app.read.bytes"));
    }
    if let Some(group) = req.str("app.cgroup.name") {
        line += &format!(
            "; group {group}'s {}: {} reads, {} bytes",
            req.str("app.cgroup.stat")
                .unwrap_or_else(|| "io.stat".to_owned()),
            req.int("app.cgroup.rios"),
            req.int("app.cgroup.rbytes")
        );
    }
    // The waits, counted by kind and cause, with what names them.
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for wait in waits {
        let mut kind = match wait.cause() {
            Some(cause) => format!("{} ({cause})", wait.name),
            None => wait.name.clone(),
        };
        if let Some(device) = wait.str(w::REQUEST_DEVICE) {
            kind += &format!(" naming a request on {device}");
        }
        if let Some(group) = wait.str(w::REQUEST_HELD_BY) {
            kind += &format!(" held by group {group}");
        }
        if wait.name == "kernel lock wait" {
            kind += &format!(
                " held by {} `{}`",
                wait.int(w::LOCK_OWNER_TID),
                wait.str(w::LOCK_OWNER_COMM).unwrap_or_default()
            );
        }
        if let Some(linked) = wait.links.iter().find_map(|l| cause_of(l.id)) {
            kind += &format!(" linked to request {linked}");
        }
        match kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => kinds.push((kind, 1)),
        }
    }
    let counted = if kinds.is_empty() {
        "none".to_owned()
    } else {
        kinds
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    line += &format!("; wait spans: {counted}");
    // The longest wait whose waker had waited too: its chain, hop by hop.
    let chained = waits
        .iter()
        .filter(|s| s.link("waker_wait").is_some())
        .max_by_key(|s| s.duration);
    if let Some(wait) = chained {
        line += &chain(wait, &span_of, &cause_of);
    }
    line
}

/// What the waker did over the wait, as its link says it: each part of
/// the overlap not 0 (`kspan.waker.*`), and its requests in it.
fn waker_over_the_wait(link: &HashMap<String, Value>) -> String {
    if !link.contains_key(w::WAKER_OVERLAP_NS) {
        return String::new();
    }
    let named = [
        ("on CPU", w::WAKER_ON_CPU_NS),
        ("run queue", w::WAKER_RUN_QUEUE_NS),
        ("blocked io", w::WAKER_BLOCKED_IO_NS),
        ("blocked memory", w::WAKER_BLOCKED_MEMORY_NS),
        ("blocked lock", w::WAKER_BLOCKED_LOCK_NS),
        ("blocked other", w::WAKER_BLOCKED_UNATTRIBUTED_NS),
        ("sleeping lock", w::WAKER_SLEEPING_LOCK_NS),
        ("sleeping futex", w::WAKER_SLEEPING_FUTEX_NS),
        ("sleeping poll", w::WAKER_SLEEPING_POLL_NS),
        ("sleeping timer", w::WAKER_SLEEPING_TIMER_NS),
        ("sleeping receive", w::WAKER_SLEEPING_RECEIVE_NS),
        ("sleeping other", w::WAKER_SLEEPING_UNATTRIBUTED_NS),
        ("uncovered", w::WAKER_UNCOVERED_NS),
    ];
    let mut said: Vec<String> = named
        .iter()
        .filter(|(_, key)| int_of(link, key) > 0)
        .map(|(name, key)| format!("{name} {} ms", ms(int_of(link, key))))
        .collect();
    if int_of(link, w::WAKER_BLOCK_REQUESTS) > 0 {
        said.push(format!(
            "{} block requests, on the device {} ms",
            int_of(link, w::WAKER_BLOCK_REQUESTS),
            ms(int_of(link, w::WAKER_BLOCK_DEVICE_NS))
        ));
    }
    format!(" (over the wait: {})", said.join(", "))
}

/// `wait`'s chain of wake-ups: the wait, its waker's span, and the
/// waker's own last wait, as its link and its span say it; each hop's span
/// id after `=`.
fn chain<'a>(
    wait: &Noted,
    span_of: &dyn Fn(SpanId) -> Option<&'a Noted>,
    cause_of: &dyn Fn(SpanId) -> Option<String>,
) -> String {
    let mut text = format!(
        "; chain: {} ({}) {} ms wait={}",
        wait.name,
        wait.cause().unwrap_or_default(),
        ms(wait.duration.as_nanos() as i64),
        wait.id
    );
    if let Some(waker) = wait.link("waker") {
        text += &format!(" <- waker={}", waker.id);
        if let Some(cause) = cause_of(waker.id) {
            text += &format!(" (request {cause})");
        }
        text += &waker_over_the_wait(&waker.attributes);
    }
    if let Some(hop) = wait.link("waker_wait") {
        let hop_cause = [w::BLOCK_CAUSE, w::SLEEP_CAUSE]
            .iter()
            .find_map(|key| hop.attributes.get(*key))
            .map(|v| v.as_str().into_owned())
            .unwrap_or_default();
        text += &format!(
            " <- waker_wait={} ({} {hop_cause}, waiting_ns={}",
            hop.id,
            hop.attributes
                .get(w::STATE)
                .map(|v| v.as_str().into_owned())
                .unwrap_or_default(),
            int_of(&hop.attributes, w::WAITING_NS)
        );
        if let Some(span) = span_of(hop.id) {
            if let Some(device) = span.str(w::REQUEST_DEVICE) {
                text += &format!(
                    ", its request on {device} sector {}",
                    span.int(w::REQUEST_SECTOR)
                );
            }
            if let Some(waker) = span.str(w::WAKER_KIND) {
                text += &format!(", woken by {waker}");
            }
        }
        text += ")";
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &[&str]) -> Result<PathBuf, String> {
        parse_args(s.iter().map(|s| s.to_string()))
    }

    #[test]
    fn arguments() {
        assert_eq!(parse(&[]).unwrap(), std::env::temp_dir());
        assert_eq!(parse(&["/srv"]).unwrap(), PathBuf::from("/srv"));
        assert!(parse(&["--fast"]).unwrap_err().contains("unknown option"));
        assert!(parse(&["a", "b"]).unwrap_err().contains("1 at most"));
    }

    #[test]
    fn a_line_says_the_parts_that_are_not_zero() {
        let mut attributes: HashMap<String, Value> = [
            ("app.request.number", 1),
            (a::BLOCKED_NS, 80_000_000),
            (c::BLOCKED_IO_NS, 80_000_000),
            (c::BLOCK_REQUESTS, 8),
            (c::BLOCK_BYTES, 32768),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Value::I64(v)))
        .collect();
        attributes.insert("app.request.cause".into(), Value::from("disk"));
        let req = Noted {
            name: "request".into(),
            id: SpanId::from(1),
            parent: SpanId::INVALID,
            duration: Duration::from_millis(81),
            attributes,
            links: Vec::new(),
        };
        let wait = Noted {
            name: "off-cpu blocked".into(),
            id: SpanId::from(2),
            parent: SpanId::from(1),
            duration: Duration::from_millis(10),
            attributes: [
                (w::BLOCK_CAUSE.to_owned(), Value::from("io")),
                (w::REQUEST_DEVICE.to_owned(), Value::from("vda")),
            ]
            .into_iter()
            .collect(),
            links: Vec::new(),
        };
        let line = describe(&req, &[&wait, &wait], &[]);
        assert_eq!(
            line,
            "request 1 disk: 81.0 ms; on CPU 0.0 ms, run queue 0.0 ms; blocked 80.0 ms \
             (io 80.0); sleeping 0.0 ms (-); block requests 8, 32768 bytes, queued 0.0 ms, \
             on the device 0.0 ms; wait spans: 2 off-cpu blocked (io) naming a request on vda"
        );
    }

    #[test]
    fn a_throttled_line_says_the_held_requests_and_the_group() {
        let mut attributes: HashMap<String, Value> = [
            ("app.request.number", 9),
            (c::BLOCK_REQUESTS, 4),
            (c::BLOCK_HELD_REQUESTS, 3),
            (c::BLOCK_HELD_NS, 400_000_000),
            (c::BLOCK_BYTES, 524288),
            ("app.cgroup.rios", 4),
            ("app.cgroup.rbytes", 524288),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Value::I64(v)))
        .collect();
        attributes.insert("app.request.cause".into(), Value::from("throttled"));
        attributes.insert("app.cgroup.name".into(), Value::from("g"));
        let req = Noted {
            name: "request".into(),
            id: SpanId::from(1),
            parent: SpanId::INVALID,
            duration: Duration::from_millis(450),
            attributes,
            links: Vec::new(),
        };
        let wait = Noted {
            name: "off-cpu blocked".into(),
            id: SpanId::from(2),
            parent: SpanId::from(1),
            duration: Duration::from_millis(130),
            attributes: [
                (w::BLOCK_CAUSE, "io"),
                (w::REQUEST_DEVICE, "vda"),
                (w::REQUEST_HELD_BY, "g"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), Value::from(v)))
            .collect(),
            links: Vec::new(),
        };
        let line = describe(&req, &[&wait], &[]);
        assert!(
            line.contains(
                "block requests 4 (3 held 400.0 ms by the throttle), 524288 bytes, queued 0.0 \
                 ms, on the device 0.0 ms; group g's io.stat: 4 reads, 524288 bytes; wait \
                 spans: 1 off-cpu blocked (io) naming a request on vda held by group g"
            ),
            "{line}"
        );
    }
}
