// SPDX-License-Identifier: Apache-2.0 OR MIT
//! How long each application span has been a thread's current context:
//! the scheduler's account's time base.
//!
//! The kernel measures what a span's threads spent off CPU, since a
//! thread's current span cannot change while it is off CPU; it cannot see
//! when a span becomes current or stops being so, which happens in user
//! space with no system call. So every publication of a thread's record
//! (every context switch the observer or a layer sees) stamps the thread
//! with `CLOCK_MONOTONIC` (the vDSO: no system call) and adds the time
//! since the previous stamp to the span that was current. A span's time
//! on a CPU is then this total less what the kernel saw it spend off CPU.
//!
//! With the account's causes on, each stamp also takes the thread's page
//! fault counts, so that a span's faults are the kernel's own counts of its
//! time current. The counts move only when the thread takes a fault, so
//! where the kernel says when it does ([`FaultCounts::AfterFaults`]: the
//! fault tracepoints' programs bump a word of the thread's slot in
//! `kspan_sched_open`), a stamp reads them (`getrusage(RUSAGE_THREAD)`,
//! one system call) only when that word moved since the thread's last
//! reading, and otherwise reuses that reading: a span that takes no fault
//! costs no system call. Elsewhere every stamp reads them. A fault a
//! system call takes for the thread with no exception (`get_user_pages`
//! pinning a page not yet present) moves the counts with no tracepoint:
//! it is counted with the thread's next fault, in the span current then.
//!
//! Off unless a runtime with the account runs: a publication then costs
//! one relaxed load more.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use kspan_bpf::consts as c;

use crate::bpf::counters::MappedCounters;

/// Whether publications are timed.
static ON: AtomicBool = AtomicBool::new(false);

/// Whether they also count page faults, and how ([`FaultCounts`]).
static FAULTS: AtomicU8 = AtomicU8::new(FAULTS_OFF);
const FAULTS_OFF: u8 = 0;
const FAULTS_EACH: u8 = 1;
const FAULTS_AFTER: u8 = 2;

/// With [`FaultCounts::AfterFaults`], the account's `kspan_sched_open`,
/// and which runtime's it is: each start and stop moves the epoch, so
/// that no thread compares a word of one runtime's map with its reading
/// of another's.
static FAULT_WORDS: Mutex<Option<Arc<MappedCounters>>> = Mutex::new(None);
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// How a stamp takes the thread's page fault counts.
pub(crate) enum FaultCounts {
    /// Not at all (the causes are off).
    Off,
    /// `getrusage` at each stamp: the kernel does not say when a thread
    /// faults (no fault tracepoints, or classic tracepoints).
    EachStamp,
    /// `getrusage` at a stamp after a fault of the thread only, as the
    /// fault programs count them in the `faults` word of its slot of this
    /// map (`kspan_sched_open`).
    AfterFaults(Arc<MappedCounters>),
}

/// A thread's last reading of its fault counts, and the word of its slot
/// then: while the word stands still, no fault moved them.
struct Reading {
    epoch: u64,
    words: Option<Arc<MappedCounters>>,
    /// The word's index in `words`.
    at: usize,
    /// `None` until a first reading under this epoch.
    last: Option<(u64, u64, u64)>,
}

/// What a span was current for: time, and the page faults of its threads
/// meanwhile (minor, major), as the kernel counts them per thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Current {
    pub ns: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
}

impl Current {
    fn add(&mut self, other: Current) {
        self.ns += other.ns;
        self.minor_faults += other.minor_faults;
        self.major_faults += other.major_faults;
    }
}

/// A thread's stamp: `CLOCK_MONOTONIC`, and its fault counts when counted.
#[derive(Debug, Clone, Copy, Default)]
struct Stamp {
    ns: u64,
    minor_faults: u64,
    major_faults: u64,
}

impl Stamp {
    fn now() -> Self {
        let ns = monotonic_ns();
        let (minor_faults, major_faults) = match FAULTS.load(Ordering::Relaxed) {
            FAULTS_OFF => (0, 0),
            FAULTS_AFTER => READING
                .try_with(|reading| read_after_faults(&mut reading.borrow_mut()))
                .unwrap_or_else(|_| thread_faults()),
            _ => thread_faults(),
        };
        Stamp {
            ns,
            minor_faults,
            major_faults,
        }
    }

    /// What passed from `self` to `later`.
    fn until(self, later: Stamp) -> Current {
        Current {
            ns: later.ns.saturating_sub(self.ns),
            minor_faults: later.minor_faults.saturating_sub(self.minor_faults),
            major_faults: later.major_faults.saturating_sub(self.major_faults),
        }
    }
}

/// Shards of the totals, by span id: threads switching different spans
/// rarely wait on one another.
const SHARDS: usize = 16;

/// Spans that ended lately, whose time is no longer wanted: a thread that
/// leaves one afterwards adds nothing (its total was taken at the end).
const ENDED_KEPT: usize = 4096;

#[derive(Default)]
struct Shard {
    /// What each span has been current for, on every thread, up to each
    /// thread's last switch away from it.
    totals: HashMap<u64, Current>,
    ended: HashSet<u64>,
    ended_order: VecDeque<u64>,
}

static TOTALS: LazyLock<[Mutex<Shard>; SHARDS]> =
    LazyLock::new(|| std::array::from_fn(|_| Mutex::default()));

fn shard(span: u64) -> std::sync::MutexGuard<'static, Shard> {
    TOTALS[(span as usize) % SHARDS]
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// The calling thread's page faults, minor and major, as the kernel counts
/// them.
fn thread_faults() -> (u64, u64) {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid rusage to write.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    (usage.ru_minflt as u64, usage.ru_majflt as u64)
}

/// The calling thread's fault counts, read again only if its slot's
/// `faults` word moved since `reading` (a fault of the thread, or of
/// another with the same slot).
fn read_after_faults(reading: &mut Reading) -> (u64, u64) {
    let epoch = EPOCH.load(Ordering::Acquire);
    if reading.epoch != epoch {
        use kspan_bpf::types::kspan_sched_open;
        const WORDS: usize = std::mem::size_of::<kspan_sched_open>() / 8;
        const FAULTS_WORD: usize = std::mem::offset_of!(kspan_sched_open, faults) / 8;
        let slot =
            crate::context::current_tid() as usize & (c::KSPAN_SCHED_OPEN_SLOTS as usize - 1);
        *reading = Reading {
            epoch,
            words: FAULT_WORDS
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            at: slot * WORDS + FAULTS_WORD,
            last: None,
        };
    }
    let Some(words) = &reading.words else {
        return thread_faults();
    };
    // Before the counts: a fault after this load moves the word again.
    let word = words.word(reading.at);
    if let Some((seen, minor, major)) = reading.last {
        if seen == word {
            return (minor, major);
        }
    }
    let (minor, major) = thread_faults();
    reading.last = Some((word, minor, major));
    (minor, major)
}

thread_local! {
    /// This thread's last reading of its fault counts.
    static READING: RefCell<Reading> = const {
        RefCell::new(Reading {
            epoch: u64::MAX,
            words: None,
            at: 0,
            last: None,
        })
    };

    /// The span current on this thread (0: none) and since when.
    static CURRENT: Cell<(u64, Stamp)> = const {
        Cell::new((
            0,
            Stamp {
                ns: 0,
                minor_faults: 0,
                major_faults: 0,
            },
        ))
    };
}

/// `CLOCK_MONOTONIC` in ns, the clock of `bpf_ktime_get_ns`.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Starts timing publications (a runtime with the account starts), and
/// counting page faults as `faults` says: the thread context hands each
/// publication to [`switched`].
pub(crate) fn start(faults: FaultCounts) {
    crate::context::on_switch(switched);
    let mode = match faults {
        FaultCounts::Off => FAULTS_OFF,
        FaultCounts::EachStamp => FAULTS_EACH,
        FaultCounts::AfterFaults(words) => {
            *FAULT_WORDS.lock().unwrap_or_else(PoisonError::into_inner) = Some(words);
            FAULTS_AFTER
        }
    };
    EPOCH.fetch_add(1, Ordering::AcqRel);
    FAULTS.store(mode, Ordering::Relaxed);
    ON.store(true, Ordering::Relaxed);
}

/// Stops it (that runtime stops). A thread's last reading keeps that
/// runtime's map mapped until the thread reads under another runtime, or
/// exits: no thread reads a word of a map that is gone.
pub(crate) fn stop() {
    ON.store(false, Ordering::Relaxed);
    FAULTS.store(FAULTS_OFF, Ordering::Relaxed);
    *FAULT_WORDS.lock().unwrap_or_else(PoisonError::into_inner) = None;
    EPOCH.fetch_add(1, Ordering::AcqRel);
}

/// The calling thread's current span is now `span` (its id as a number;
/// 0 for none, or for a thread that suppresses telemetry).
fn switched(span: u64) {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    let _ = CURRENT.try_with(|current| {
        let (was, since) = current.get();
        if was == span {
            return;
        }
        let now = Stamp::now();
        if was != 0 {
            add(was, since.until(now));
        }
        current.set((span, now));
    });
}

fn add(span: u64, current: Current) {
    let mut shard = shard(span);
    if let Some(total) = shard.totals.get_mut(&span) {
        total.add(current);
    } else if !shard.ended.contains(&span) {
        shard.totals.insert(span, current);
    }
}

/// The time `span` has been current, taken as it ends: its total so far,
/// with the calling thread's time since its last switch when the span is
/// current here (a span ended inside its own scope). Later switches away
/// from it add nothing.
pub(crate) fn take(span: u64) -> Current {
    let mut open = Current::default();
    let _ = CURRENT.try_with(|current| {
        let (now_current, since) = current.get();
        if now_current == span {
            let now = Stamp::now();
            open = since.until(now);
            current.set((0, now));
        }
    });
    let mut shard = shard(span);
    let mut total = shard.totals.remove(&span).unwrap_or_default();
    total.add(open);
    if shard.ended.insert(span) {
        shard.ended_order.push_back(span);
        if shard.ended_order.len() > ENDED_KEPT / SHARDS {
            if let Some(old) = shard.ended_order.pop_front() {
                shard.ended.remove(&old);
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_adds_its_time_current_and_nothing_after_it_ended() {
        start(FaultCounts::EachStamp);
        let span = 0x5eed_0001;
        switched(span);
        std::thread::sleep(std::time::Duration::from_millis(20));
        switched(0);
        switched(span);
        // Faults of its own: fresh pages touched while it is current,
        // mapped here (the heap may hand back pages faulted in before).
        let len = 64 << 12;
        // SAFETY: a new private anonymous mapping, unmapped below; no
        // memory of the process is touched.
        let pages = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(pages, libc::MAP_FAILED);
        for page in (0..len).step_by(4096) {
            // SAFETY: inside the mapping just made, writable.
            unsafe { pages.cast::<u8>().add(page).write_volatile(1) };
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        // Ended while current: the open interval counts.
        let total = take(span);
        assert!(
            (30_000_000..200_000_000).contains(&total.ns),
            "total {total:?}"
        );
        assert!(total.minor_faults >= 1, "{total:?}");
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(pages, len) };
        // Leaving it afterwards adds nothing, and creates no entry.
        switched(0);
        assert!(!shard(span).totals.contains_key(&span));
    }
}
