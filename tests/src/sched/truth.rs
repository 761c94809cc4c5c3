// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Every span's account against the kernel's own, span by span, with more
//! threads than CPUs and every kind of waker: a device's interrupt (O_DIRECT
//! reads), a timer (sleeps) and a task (a barrier), so that run-queue
//! intervals start from each. The kernel's figures: schedstat (on CPU, run
//! queue), status (switches) and taskstats' delay accounting (block I/O).

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use kspan::sched::attributes as a;
use opentelemetry::trace::{SpanId, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::Context;

use super::{
    busy, direct_read, direct_read_file, int, kernel_figures, optional_int, provider, shutdown,
    start, stolen_ns, thread_cpu_ns, Clocks, KernelFigures, ONE_AT_A_TIME,
};
use crate::taskstats::{DelayAccounting, Delays, Taskstats};

/// What one thread saw of the kernel's figures around one span.
struct Around {
    id: SpanId,
    name: String,
    before: KernelFigures,
    after: KernelFigures,
    delays_before: Delays,
    delays_after: Delays,
    elapsed: Duration,
    /// The thread's CPU time from the span's start to its end.
    on_cpu: i64,
    /// Off CPU and off the run queues in the reads, and in the sleeps and
    /// barriers, by the kernel's figures around each.
    reading: i64,
    waiting: i64,
    stolen: i64,
}

/// `threads` threads, each through `spans` spans of `rounds` rounds: an
/// O_DIRECT read, 300 us busy, a 500 us sleep, a barrier with the others.
fn phase(
    tracer: &opentelemetry_sdk::trace::SdkTracer,
    file: &Arc<std::path::PathBuf>,
    threads: usize,
    spans: usize,
    rounds: usize,
    label: &'static str,
) -> Vec<Around> {
    let barrier = Arc::new(Barrier::new(threads));
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            let (tracer, file, barrier) = (tracer.clone(), file.clone(), barrier.clone());
            std::thread::spawn(move || {
                let taskstats = Taskstats::open().expect("a taskstats netlink socket");
                let tid = crate::gettid() as u32;
                let mut read_all = true;
                let spans: Vec<Around> = (0..spans)
                    .map(|s| {
                        let name = format!("{label} t{i} s{s}");
                        let span = tracer.start(name.clone());
                        let cx = Context::current_with_span(span);
                        let id = cx.span().span_context().span_id();
                        // The costlier reads outside the span: inside it
                        // their CPU time would be the span's and not in
                        // the kernel's figures read around the work.
                        let stolen = stolen_ns();
                        let delays_before = taskstats.delays(tid).expect("taskstats");
                        let (before, after, elapsed, on_cpu);
                        let (mut reading, mut waiting) = (0, 0);
                        {
                            let _attached = cx.clone().attach();
                            // The CPU clock at the span's very edges (it
                            // is schedstat's on-CPU figure, brought up to
                            // date); the rest changes only at switches.
                            let cpu_in = thread_cpu_ns();
                            let started = Instant::now();
                            before = kernel_figures();
                            for _ in 0..rounds {
                                let t = Clocks::now();
                                read_all &= direct_read(&file, 1);
                                reading += t.off_cpu_since();
                                busy(Duration::from_micros(300));
                                let t = Clocks::now();
                                std::thread::sleep(Duration::from_micros(500));
                                barrier.wait();
                                waiting += t.off_cpu_since();
                            }
                            after = kernel_figures();
                            elapsed = started.elapsed();
                            on_cpu = (thread_cpu_ns() - cpu_in) as i64;
                        }
                        let delays_after = taskstats.delays(tid).expect("taskstats");
                        Around {
                            id,
                            name,
                            before,
                            after,
                            delays_before,
                            delays_after,
                            elapsed,
                            on_cpu,
                            reading,
                            waiting,
                            stolen: stolen_ns() - stolen,
                        }
                    })
                    .collect();
                assert!(read_all, "the file could not be read back");
                spans
            })
        })
        .collect();
    workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect()
}

/// Each span's run-queue time within 0.2 ms + 1% of the kernel's
/// (schedstat's run_delay), its blocked and sleeping time the reads' and
/// the sleeps' time off CPU by the kernel's clocks around each (wall less
/// CPU less run queue, read as one: `Clocks`) and its I/O time taskstats'
/// block-I/O delay where that lies within the reads', all within 0.2 ms +
/// 1%, its time on CPU within 0.2 ms + 1% plus what the hypervisor stole
/// meanwhile (see `stolen_ns`), its switches the kernel's count; a span
/// that says it missed an interval is the only one allowed to differ.
///
/// Measured again (up to three times) when a span differs: about one span
/// in 160 here has its run-queue time 0.4 ms above the kernel's with its
/// switches equal, not yet explained; the last run checks everything.
pub fn every_span_s_figures_equal_the_kernel_s_under_contention(
    account: kspan::SchedulerAccount,
    disk: &std::path::Path,
) {
    super::measured_again_when_disturbed(|last| contention_once(account, disk, last));
}

fn contention_once(account: kspan::SchedulerAccount, disk: &std::path::Path, last: bool) -> bool {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let _delay_accounting =
        DelayAccounting::on().expect("switching kernel.task_delayacct on (run as root)");
    let sums = kspan::KernelSums::new();
    let (provider, exporter) = provider(&sums);
    let kspan = start(&provider, &sums, account);
    let tracer = provider.tracer("sched-truth");
    let file = Arc::new(direct_read_file(disk));
    super::CLOCKS_REREAD.store(0, std::sync::atomic::Ordering::Relaxed);
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    // A lone reader first, on idle CPUs: each completion's interrupt wakes
    // an idle CPU, whose way out of idle the kernel counts as CPU time,
    // not run-queue time. Then more threads than CPUs.
    let mut made = phase(&tracer, &file, 1, 2, 32, "lone");
    made.extend(phase(&tracer, &file, 2 * cpus + 2, 3, 8, "crowd"));
    let stats = shutdown(kspan);
    let _ = std::fs::remove_file(&*file);
    let spans = exporter.get_finished_spans().unwrap();
    let reread = super::CLOCKS_REREAD.swap(0, std::sync::atomic::Ordering::Relaxed);
    let (mut checked, mut said_missed, mut blkio_unknown) = (0, 0, 0);
    let mut disturbed = Vec::new();
    let mut failures = Vec::new();
    for around in &made {
        let span = spans
            .iter()
            .find(|s| s.span_context.span_id() == around.id)
            .unwrap_or_else(|| panic!("{} was not exported", around.name));
        let (on_cpu, run_queue, blocked) = (
            int(span, a::ON_CPU_NS),
            int(span, a::RUN_QUEUE_NS),
            int(span, a::BLOCKED_NS),
        );
        let (b, f) = (&around.before, &around.after);
        let want_cpu = around.on_cpu;
        let want_rq = f.run_queue - b.run_queue;
        let want_blocked =
            around.delays_after.blkio_ns as i64 - around.delays_before.blkio_ns as i64;
        let sleeping = int(span, a::SLEEPING_NS);
        // The causes make the whole, in every span.
        let blocked_io = super::causes::closed_split(span, blocked, sleeping);
        let off = sleeping + blocked + int(span, a::OTHER_OFF_CPU_NS);
        let want_off = around.elapsed.as_nanos() as i64 - want_cpu - want_rq;
        let switches = (
            int(span, a::VOLUNTARY_SWITCHES),
            int(span, a::INVOLUNTARY_SWITCHES),
        );
        let want_switches = (f.voluntary - b.voluntary, f.involuntary - b.involuntary);
        let line = format!(
            "{}: on {on_cpu} (kernel {want_cpu}, stolen {}) rq {run_queue} (kernel {want_rq}) \
             off {off} (kernel {want_off}) blocked {blocked} (kernel {}, taskstats \
             {want_blocked} in {} I/Os; io {blocked_io}) sleeping {sleeping} (kernel {}) \
             switches {switches:?} (kernel {want_switches:?}) elapsed {:?}",
            around.name,
            around.stolen,
            around.reading,
            around.delays_after.blkio_count - around.delays_before.blkio_count,
            around.waiting,
            around.elapsed,
        );
        eprintln!("{line}");
        if optional_int(span, a::INTERVALS_MISSED).is_some() {
            said_missed += 1;
            continue;
        }
        // A switch between the kernel's reads and the span's edge (a
        // preemption of the reads, which contend with each other here)
        // puts its interval in the account and not in the kernel's
        // figures: such a span is not compared, and most are.
        let (got_total, want_total) = (
            int(span, a::VOLUNTARY_SWITCHES) + int(span, a::INVOLUNTARY_SWITCHES),
            (around.after.voluntary - around.before.voluntary)
                + (around.after.involuntary - around.before.involuntary),
        );
        if got_total != want_total {
            disturbed.push(around.name.clone());
            continue;
        }
        checked += 1;
        let within = |got: i64, want: i64, extra: i64| {
            (got - want).abs() <= 200_000 + want.abs() / 100 + extra
        };
        let mut wrong = Vec::new();
        if !within(run_queue, want_rq, 0) {
            wrong.push("run queue");
        }
        // On CPU as the kernel counts it, but for the time the hypervisor
        // stole while the thread ran: the kernel leaves it out of the
        // thread's CPU time (PARAVIRT_TIME_ACCOUNTING), which its off-CPU
        // figure below (the rest of the time) then holds, and the account
        // cannot tell it from the thread's own. `/proc/stat` counts it in
        // 10 ms ticks: the most it can be is one more tick a CPU.
        let stolen_most = around.stolen + 10_000_000 * cpus as i64;
        let stolen = (on_cpu - want_cpu).max(0);
        if on_cpu < want_cpu - 200_000 - want_cpu / 100 || stolen > stolen_most + 200_000 {
            wrong.push("on CPU");
        }
        if !within(
            int(span, a::CURRENT_NS),
            around.elapsed.as_nanos() as i64,
            0,
        ) {
            wrong.push("time current");
        }
        // Blocked is the reads' time off CPU, sleeping the sleeps' and the
        // barrier's. The reads' time stolen after the wake-up (the vCPU
        // resuming from its halt: about 0.1 ms a completion here) is off
        // CPU to the kernel's clocks and on CPU to the account.
        if blocked > around.reading + 200_000 + around.reading / 100
            || blocked < around.reading - stolen - 200_000 - around.reading / 100
        {
            wrong.push("blocked");
        }
        // The threads block only in their O_DIRECT reads, each through
        // io_schedule: all of it is waiting on I/O.
        if !within(blocked_io, blocked, 0) {
            wrong.push("blocked on I/O");
        }
        // With more threads than CPUs the readings around each window are
        // themselves preempted: read as one (`Clocks`), the crowd's windows
        // are the account's within 20 us on the host beside two CPU hogs
        // and a disk reader (before, up to 0.7 ms apart in a span in four).
        if !within(sleeping, around.waiting, 0) {
            wrong.push("sleeping");
        }
        // Taskstats' block-I/O delay where it is the kernel's figure:
        // within the reads' time off CPU (the bracket above, schedstat's).
        // KERNEL-LAB: on 6.18 some threads get about the seconds since
        // boot, most several ms more than their reads were off CPU; beside
        // two CPU hogs and a disk reader, a crowd span in 20 got 0.6 to
        // 1.5 ms less, where the bracket and the account agreed within
        // 20 us (a start stamped late: EEVDF's delayed dequeue, 6.12+, is
        // the suspect for both, not confirmed).
        // It counts the thread's time blocked in io_schedule, as
        // `kspan.sched.blocked.io_ns` does.
        let reads_most = around.reading + 200_000 + around.reading / 100;
        let reads_least = around.reading - stolen - 200_000 - around.reading / 100;
        if (reads_least.max(0)..=reads_most).contains(&want_blocked) {
            if !within(blocked_io, want_blocked, 0) {
                wrong.push("blocked (taskstats)");
            }
        } else {
            blkio_unknown += 1;
        }
        if !wrong.is_empty() {
            failures.push(format!("{wrong:?} {line}"));
        }
    }
    eprintln!(
        "{checked} spans checked, {said_missed} say they missed an interval, \
         {} disturbed {disturbed:?}, {blkio_unknown} without a block-I/O figure from \
         taskstats; {reread} of the kernel's readings taken again for a switch among them; \
         {stats}",
        disturbed.len()
    );
    if !failures.is_empty() && !last {
        eprintln!("differs: {failures:#?}");
        return false;
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} spans differ from the kernel's figures and do not say so:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        checked >= made.len() * 2 / 3,
        "{checked} of {} spans checked",
        made.len()
    );
    true
}
