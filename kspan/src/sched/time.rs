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
//! With the account's causes on, each stamp also reads the thread's page
//! fault counts (`getrusage(RUSAGE_THREAD)`, one system call), so that a
//! span's faults are the kernel's own counts of its time current.
//!
//! Off unless a runtime with the account runs: a publication then costs
//! one relaxed load more.

use std::cell::Cell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, PoisonError};

/// Whether publications are timed.
static ON: AtomicBool = AtomicBool::new(false);

/// Whether they also count page faults.
static FAULTS: AtomicBool = AtomicBool::new(false);

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
        if !FAULTS.load(Ordering::Relaxed) {
            return Stamp {
                ns,
                ..Stamp::default()
            };
        }
        // SAFETY: an all-zero rusage is valid; getrusage fills it.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `usage` is a valid rusage to write.
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
        Stamp {
            ns,
            minor_faults: usage.ru_minflt as u64,
            major_faults: usage.ru_majflt as u64,
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

thread_local! {
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
/// with `faults` counting page faults: the thread context hands each
/// publication to [`switched`].
pub(crate) fn start(faults: bool) {
    crate::context::on_switch(switched);
    FAULTS.store(faults, Ordering::Relaxed);
    ON.store(true, Ordering::Relaxed);
}

/// Stops it (that runtime stops).
pub(crate) fn stop() {
    ON.store(false, Ordering::Relaxed);
    FAULTS.store(false, Ordering::Relaxed);
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
        start(true);
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
