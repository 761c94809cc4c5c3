// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Kernel monotonic time to wall-clock time.
//!
//! BPF programs stamp spans with `bpf_ktime_get_ns()` (CLOCK_MONOTONIC);
//! OpenTelemetry wants wall-clock times. The offset between the two clocks is
//! measured once at start, bracketing a CLOCK_REALTIME read between two
//! CLOCK_MONOTONIC reads and keeping the tightest bracket, so a span converted
//! here lines up with spans the SDK stamps with `SystemTime::now()` to within
//! the bracket width (reported by [`ClockOffset::uncertainty_ns`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Offset from CLOCK_MONOTONIC to CLOCK_REALTIME.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockOffset {
    /// realtime - monotonic, in nanoseconds.
    offset_ns: i128,
    /// Width of the bracket the offset was measured in.
    uncertainty_ns: u64,
}

fn read_clock(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock ids used are
    // always supported on Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

impl ClockOffset {
    /// Measures the offset on this machine now.
    pub fn measure() -> Self {
        let samples = (0..16).map(|_| {
            let before = read_clock(libc::CLOCK_MONOTONIC);
            let real = read_clock(libc::CLOCK_REALTIME);
            let after = read_clock(libc::CLOCK_MONOTONIC);
            (before, real, after)
        });
        Self::from_samples(samples).expect("16 samples were taken")
    }

    /// Picks the tightest `(monotonic before, realtime, monotonic after)`
    /// bracket. `None` for no samples.
    pub fn from_samples(samples: impl IntoIterator<Item = (i128, i128, i128)>) -> Option<Self> {
        samples
            .into_iter()
            .min_by_key(|(before, _, after)| after - before)
            .map(|(before, real, after)| ClockOffset {
                offset_ns: real - (before + (after - before) / 2),
                uncertainty_ns: u64::try_from(after - before).unwrap_or(u64::MAX),
            })
    }

    /// A fixed offset (for tests and replays).
    pub fn from_offset_ns(offset_ns: i128) -> Self {
        ClockOffset {
            offset_ns,
            uncertainty_ns: 0,
        }
    }

    /// Width of the measurement bracket: converted times are good to this.
    pub fn uncertainty_ns(&self) -> u64 {
        self.uncertainty_ns
    }

    /// Converts a CLOCK_MONOTONIC timestamp to wall-clock time. Times before
    /// the epoch clamp to the epoch.
    pub fn to_system_time(&self, monotonic_ns: u64) -> SystemTime {
        let real = i128::from(monotonic_ns) + self.offset_ns;
        let real = u64::try_from(real.max(0)).unwrap_or(u64::MAX);
        UNIX_EPOCH + Duration::from_nanos(real)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_tightest_bracket() {
        let off =
            ClockOffset::from_samples([(100, 1_000_150, 300), (200, 1_000_205, 210)]).unwrap();
        assert_eq!(off.uncertainty_ns(), 10);
        assert_eq!(
            off.to_system_time(205),
            UNIX_EPOCH + Duration::from_nanos(1_000_205)
        );
        assert!(ClockOffset::from_samples([]).is_none());
    }

    #[test]
    fn converts_and_clamps() {
        let off = ClockOffset::from_offset_ns(-50);
        assert_eq!(off.to_system_time(10), UNIX_EPOCH);
        assert_eq!(
            off.to_system_time(1_050),
            UNIX_EPOCH + Duration::from_nanos(1_000)
        );
    }

    #[test]
    fn measured_offset_matches_system_time_now() {
        let off = ClockOffset::measure();
        let mono = read_clock(libc::CLOCK_MONOTONIC) as u64;
        let converted = off.to_system_time(mono);
        let now = SystemTime::now();
        let diff = now
            .duration_since(converted)
            .unwrap_or_else(|e| e.duration());
        assert!(diff < Duration::from_millis(50), "{diff:?}");
        assert!(
            off.uncertainty_ns() < 10_000_000,
            "{}",
            off.uncertainty_ns()
        );
    }
}
