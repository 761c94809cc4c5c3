// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The load of the hot-function benchmarks: the traced call (`getppid`, a
//! syscall source that works on the host kernel), a unit of a service's
//! CPU work, and pacing calls at a fixed rate.

use std::time::Instant;

/// One `getppid()`, straight through libc: the traced call.
#[inline]
pub fn call() {
    // SAFETY: getppid has no arguments and cannot fail.
    unsafe { libc::getppid() };
}

/// One unit of a service's work: `rounds` rounds of a 64-bit mix (about a
/// nanosecond each), on `state`, returned so that it is not optimised away.
#[inline]
pub fn work_unit(mut state: u64, rounds: u32) -> u64 {
    for _ in 0..rounds {
        // splitmix64's finaliser.
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        state ^= z ^ (z >> 31);
    }
    std::hint::black_box(state)
}

/// Calls due at a fixed rate since a start.
#[derive(Debug, Clone, Copy)]
pub struct Pacer {
    started: Instant,
    per_sec: f64,
    made: u64,
}

impl Pacer {
    /// `per_sec` calls a second from now.
    pub fn new(per_sec: u64) -> Self {
        Pacer {
            started: Instant::now(),
            per_sec: per_sec as f64,
            made: 0,
        }
    }

    /// How many calls are due now that have not been made, and counts them
    /// as made.
    pub fn due(&mut self, now: Instant) -> u64 {
        let owed = (now.duration_since(self.started).as_secs_f64() * self.per_sec) as u64;
        let due = owed.saturating_sub(self.made);
        self.made += due;
        due
    }

    /// Calls made so far.
    pub fn made(&self) -> u64 {
        self.made
    }
}

/// CPU time (user + system) of the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    cpu_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time (user + system) of the whole process, every thread, in
/// nanoseconds.
pub fn process_cpu_ns() -> u64 {
    cpu_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn cpu_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec the call writes; the clock ids are
    // the kernel's own CPU-time clocks, which always exist.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn pacer_makes_the_calls_due() {
        let mut p = Pacer::new(1000);
        let later = p.started + Duration::from_millis(10);
        assert_eq!(p.due(later), 10);
        assert_eq!(p.due(later), 0);
        assert_eq!(p.due(later + Duration::from_millis(5)), 5);
        assert_eq!(p.made(), 15);
    }

    #[test]
    fn work_depends_on_rounds() {
        assert_ne!(work_unit(1, 10), work_unit(1, 11));
        assert_eq!(work_unit(7, 0), 7);
    }
}
