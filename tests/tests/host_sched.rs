// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The scheduler's account of application spans, checked against the
//! kernel's own per-thread accounting (`/proc/thread-self/schedstat` and
//! `status`), on the host kernel natively (classic and BTF tracepoints
//! both work there) and in the VM (`vm_sched`, the same tests run with
//! `--ignored` there).

use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use kspan::sched::{attributes as a, wait_attributes as w};
use opentelemetry::trace::{SpanId, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::{Context, Value};
use opentelemetry_sdk::trace::{
    InMemorySpanExporter, SdkTracerProvider, SimpleSpanProcessor, SpanData,
};

/// A process runs one kspan runtime at a time: the tests take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A provider whose spans pass through `sums` into an in-memory exporter.
fn provider(sums: &kspan::KernelSums) -> (SdkTracerProvider, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(sums.processor(SimpleSpanProcessor::new(exporter.clone())))
        .with_id_generator(kspan::KernelSpanIds::default())
        .build();
    (provider, exporter)
}

fn int(span: &SpanData, key: &str) -> i64 {
    match span.attributes.iter().find(|kv| kv.key.as_str() == key) {
        Some(kv) => match kv.value {
            Value::I64(v) => v,
            ref other => panic!("{key} is {other:?} on {}", span.name),
        },
        None => panic!("{key} missing on {}: {:?}", span.name, span.attributes),
    }
}

fn string(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

/// The kernel's figures for the calling thread: on-CPU ns, run-queue ns,
/// timeslices (schedstat), voluntary and involuntary switches (status).
/// The thread's CPU clock is read first: it brings a running thread's
/// schedstat up to date (otherwise up to a tick stale).
#[derive(Debug, Clone, Copy)]
struct KernelFigures {
    on_cpu: i64,
    run_queue: i64,
    voluntary: i64,
    involuntary: i64,
}

fn kernel_figures() -> KernelFigures {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    let schedstat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    let mut words = schedstat
        .split_whitespace()
        .map(|w| w.parse::<i64>().unwrap());
    let (on_cpu, run_queue) = (words.next().unwrap(), words.next().unwrap());
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().parse::<i64>().unwrap())
            .unwrap()
    };
    KernelFigures {
        on_cpu,
        run_queue,
        voluntary: field("voluntary_ctxt_switches:"),
        involuntary: field("nonvoluntary_ctxt_switches:"),
    }
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Spins until this thread has used `cpu` more CPU time.
fn busy(cpu: Duration) {
    let until = thread_cpu_ns() + cpu.as_nanos() as u64;
    while thread_cpu_ns() < until {
        std::hint::spin_loop();
    }
}

/// Pins the calling thread to CPU `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET and
    // sched_setaffinity get valid pointers and sizes.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
}

/// Reads `path` with O_DIRECT (past the page cache, so the thread blocks
/// in D on the device), `blocks` 64 KiB blocks; false where the file
/// system refuses O_DIRECT (tmpfs).
fn direct_read(path: &std::path::Path, blocks: usize) -> bool {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    const BLOCK: usize = 64 * 1024;
    let Ok(mut file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    else {
        return false;
    };
    let layout = std::alloc::Layout::from_size_align(BLOCK, 4096).unwrap();
    // SAFETY: the layout is non-zero in size; the buffer is freed below.
    let buf = unsafe { std::alloc::alloc(layout) };
    // SAFETY: `buf` holds BLOCK bytes.
    let slice = unsafe { std::slice::from_raw_parts_mut(buf, BLOCK) };
    let mut ok = true;
    for _ in 0..blocks {
        if file.read(slice).map_or(true, |n| n == 0) {
            ok = false;
            break;
        }
    }
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(buf, layout) };
    ok
}

/// Where the D read goes: a file on a disk-backed file system (the host's
/// /tmp is ext4; in the VM the repository's share).
fn direct_read_file() -> std::path::PathBuf {
    let dir = std::env::var_os("KSPAN_SCHED_DISK_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("kspan-sched-{}.bin", std::process::id()));
    std::fs::write(&path, vec![7u8; 4 << 20]).unwrap();
    path
}

fn start(
    provider: &SdkTracerProvider,
    sums: &kspan::KernelSums,
    account: kspan::SchedulerAccount,
) -> kspan::Kspan {
    kspan::Kspan::builder(provider)
        .kernel_sums(sums.clone())
        .scheduler_account(account)
        .start()
        .expect("the scheduler's tracepoints attach on this kernel")
}

fn span_id(span: &SpanData) -> SpanId {
    span.span_context.span_id()
}

/// Tolerances, in ns. A span's boundaries are a few µs from the kernel
/// reads around it; each switch puts the account's clock reads (at the
/// tracepoint) a few µs from the scheduler's own; and this machine is a VM
/// whose hypervisor steals time from a running thread, which the kernel
/// leaves out of the thread's on-CPU time and the account cannot tell from
/// it (up to 1.5 ms per 100 ms of CPU measured here): 1 ms plus 2% of the
/// CPU time for on-CPU, 1 ms plus 5% for the run queue.
fn close(what: &str, got: i64, want: i64, slack: i64) {
    assert!(
        (got - want).abs() <= slack,
        "{what}: the account says {got} ns, the kernel {want} ns (allowed {slack} ns)"
    );
}

fn shutdown(kspan: kspan::Kspan) -> kspan::Stats {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(kspan.shutdown())
        .expect("kspan shuts down")
}

#[test]
fn a_span_s_figures_equal_the_kernel_s_own_accounting() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let sums = kspan::KernelSums::new();
    let (provider, exporter) = provider(&sums);
    let kspan = start(&provider, &sums, kspan::SchedulerAccount::default());
    let tracer = provider.tracer("sched-test");
    let disk_file = direct_read_file();

    let lock = Arc::new(Mutex::new(()));
    let ready = Arc::new(Barrier::new(2));
    let holder = {
        let (lock, ready, tracer) = (lock.clone(), ready.clone(), tracer.clone());
        std::thread::spawn(move || {
            let span = tracer.start("holder");
            let cx = Context::current_with_span(span);
            let _attached = cx.clone().attach();
            let guard = lock.lock().unwrap();
            ready.wait();
            std::thread::sleep(Duration::from_millis(40));
            drop(guard);
            cx.span().span_context().span_id()
        })
    };

    let worker = std::thread::spawn(move || {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let before = kernel_figures();
        let started = Instant::now();
        let span = tracer.start("work");
        let cx = Context::current_with_span(span);
        let blocked_read;
        {
            let _attached = cx.clone().attach();
            busy(Duration::from_millis(30));
            std::thread::sleep(Duration::from_millis(50));
            ready.wait();
            drop(lock.lock().unwrap());
            blocked_read = direct_read(&disk_file, 16);
            // Run-queue wait: a second busy thread on this thread's CPU.
            pin_to(0);
            let rival = std::thread::spawn(move || {
                pin_to(0);
                busy(Duration::from_millis(40));
            });
            busy(Duration::from_millis(40));
            rival.join().unwrap();
            let _ = cpus;
        }
        let elapsed = started.elapsed();
        let after = kernel_figures();
        let id = cx.span().span_context().span_id();
        drop(cx);
        (before, after, elapsed, id, blocked_read)
    });
    let (before, after, elapsed, work_id, blocked_read) = worker.join().unwrap();
    let holder_id = holder.join().unwrap();
    let stats = shutdown(kspan);
    let _ = std::fs::remove_file(direct_read_file());

    let spans = exporter.get_finished_spans().unwrap();
    let work = spans
        .iter()
        .find(|s| s.name == "work")
        .expect("the work span");
    let on_cpu = int(work, a::ON_CPU_NS);
    let run_queue = int(work, a::RUN_QUEUE_NS);
    let sleeping = int(work, a::SLEEPING_NS);
    let blocked = int(work, a::BLOCKED_NS);
    let other = int(work, a::OTHER_OFF_CPU_NS);
    let current = int(work, a::CURRENT_NS);
    let want_cpu = after.on_cpu - before.on_cpu;
    let want_rq = after.run_queue - before.run_queue;
    eprintln!(
        "account: on {on_cpu} rq {run_queue} sleep {sleeping} blocked {blocked} other {other} \
         current {current}; kernel: on {want_cpu} rq {want_rq}; elapsed {elapsed:?}; \
         switches {}+{} vs {}+{}; {stats}",
        int(work, a::VOLUNTARY_SWITCHES),
        int(work, a::INVOLUNTARY_SWITCHES),
        after.voluntary - before.voluntary,
        after.involuntary - before.involuntary,
    );
    close("on CPU", on_cpu, want_cpu, 1_000_000 + want_cpu / 50);
    close("run queue", run_queue, want_rq, 1_000_000 + want_rq / 20);
    // Every nanosecond of the span is on CPU, runnable or off CPU.
    assert_eq!(on_cpu + run_queue + sleeping + blocked + other, current);
    close(
        "time current",
        current,
        elapsed.as_nanos() as i64,
        1_000_000,
    );
    // The sleep and the mutex wait (50 + 40 ms), interruptibly.
    assert!(
        (88_000_000..130_000_000).contains(&sleeping),
        "sleeping {sleeping} ns"
    );
    if blocked_read {
        assert!(blocked > 0, "an O_DIRECT read blocks in D");
    }
    let switches = |v: i64, i: i64| v + i;
    let got = switches(
        int(work, a::VOLUNTARY_SWITCHES),
        int(work, a::INVOLUNTARY_SWITCHES),
    );
    let want = switches(
        after.voluntary - before.voluntary,
        after.involuntary - before.involuntary,
    );
    assert!((got - want).abs() <= 2, "switches: {got} against {want}");

    // The waits: children of `work`.
    let waits: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.parent_span_id == work_id && s.name.starts_with("off-cpu"))
        .collect();
    for s in &waits {
        eprintln!(
            "wait {} {:?} {:?} links {:?}",
            s.name,
            s.end_time.duration_since(s.start_time).unwrap(),
            s.attributes
                .iter()
                .map(|kv| format!("{}={}", kv.key, kv.value))
                .collect::<Vec<_>>(),
            s.links
                .iter()
                .map(|l| l.span_context.span_id())
                .collect::<Vec<_>>()
        );
    }
    eprintln!("holder {holder_id:?}");
    let sleep = waits
        .iter()
        .find(|s| {
            let d = s.end_time.duration_since(s.start_time).unwrap();
            d >= Duration::from_millis(45)
                && string(s, w::STACK).is_some_and(|st| st.contains("nanosleep"))
        })
        .unwrap_or_else(|| panic!("no 50 ms sleep wait under `work`: {waits:#?}"));
    assert_eq!(string(sleep, w::STATE).as_deref(), Some("sleeping"));
    let mutex = waits
        .iter()
        .find(|s| {
            s.links
                .iter()
                .any(|l| l.span_context.span_id() == holder_id)
        })
        .unwrap_or_else(|| panic!("no wait linked to the holder's span: {waits:#?}"));
    let d = mutex.end_time.duration_since(mutex.start_time).unwrap();
    assert!(d >= Duration::from_millis(20), "the mutex wait took {d:?}");
    assert_eq!(string(mutex, w::STATE).as_deref(), Some("sleeping"));
    assert!(
        string(mutex, w::STACK).is_some_and(|s| s.contains("futex")),
        "{mutex:#?}"
    );
    let _ = span_id;
}
