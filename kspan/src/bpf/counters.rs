// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The kernel's counters, read where the programs count
//! ([`MappedCounters`]): `kspan_counters` and `kspan_probe_counters` are
//! arrays user space maps, each CPU's slots apart from the others'.
//!
//! # Why not a per-CPU map
//!
//! Reading a map by system call holds the CPU's guard against BPF programs
//! (`bpf_prog_active`) while the kernel copies the values; on a kernel that
//! preempts kernel code the call can be preempted there, and every kprobe
//! and tracepoint program that fires on that CPU meanwhile is skipped (in
//! `skipped_by_kernel`). Reading mapped memory holds nothing, so
//! `Kspan::stats()` costs the traced calls nothing however often it runs.

use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use libbpf_rs::{MapCore, MapHandle};

use super::error::MapError;

/// An mmapable array map whose values are `u64`s, read as one run of
/// words: counters with `stride` words per CPU, or rows of them. The one
/// type that maps a BPF array: [`super::span_table::SpanTable`] is built on
/// it.
#[derive(Debug)]
pub(crate) struct MappedCounters {
    values: NonNull<AtomicU64>,
    /// Words in the map, and words a value.
    len: usize,
    value_words: usize,
    bytes: usize,
    _map: MapHandle,
}

// SAFETY: the mapping is shared memory owned by this value, accessed only
// through atomics.
unsafe impl Send for MappedCounters {}
// SAFETY: as above.
unsafe impl Sync for MappedCounters {}

impl MappedCounters {
    /// Maps the whole of `map` (`name`, for errors), an array whose values
    /// are `u64`s.
    pub(crate) fn new(map: &MapHandle, name: &'static str) -> Result<Self, MapError> {
        Self::with_value_words(map, name, 1)
    }

    /// Maps the whole of `map` (`name`, for errors), an array whose values
    /// are at least `min_words` `u64`s.
    pub(super) fn with_value_words(
        map: &MapHandle,
        name: &'static str,
        min_words: usize,
    ) -> Result<Self, MapError> {
        let fail = |source| MapError { map: name, source };
        let map = MapHandle::try_from(map).map_err(fail)?;
        let value = map.value_size() as usize;
        if value % 8 != 0 || value / 8 < min_words.max(1) {
            return Err(fail(libbpf_rs::Error::from(std::io::Error::from(
                std::io::ErrorKind::InvalidData,
            ))));
        }
        let len = map.max_entries() as usize * value / 8;
        let bytes = (len * 8).next_multiple_of(super::sys::page_bytes());
        let values = super::sys::map_values(map.as_fd(), bytes)
            .map_err(|e| fail(libbpf_rs::Error::from(e)))?
            .cast::<AtomicU64>();
        Ok(MappedCounters {
            values,
            len,
            value_words: value / 8,
            bytes,
            _map: map,
        })
    }

    /// Every word of the map.
    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `new` mapped `bytes >= len * 8` bytes at `values`, page
        // aligned, and the mapping lives as long as `self`; the programs
        // write it concurrently, which atomics allow.
        unsafe { std::slice::from_raw_parts(self.values.as_ptr(), self.len) }
    }

    /// Word `i` of the map (0 past its end).
    pub(crate) fn word(&self, i: usize) -> u64 {
        self.words()
            .get(i)
            .map_or(0, |word| word.load(Ordering::Relaxed))
    }

    /// Sets word `i` to `new` if it is `current`; whether it did.
    pub(crate) fn compare_exchange(&self, i: usize, current: u64, new: u64) -> bool {
        self.words().get(i).is_some_and(|word| {
            word.compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
    }

    /// The words of value `i` (`None` past the map's end).
    pub(super) fn value(&self, i: usize) -> Option<&[AtomicU64]> {
        self.words().chunks_exact(self.value_words).nth(i)
    }

    /// Words a value has.
    pub(crate) fn value_words(&self) -> usize {
        self.value_words
    }

    /// Values in the map.
    pub(crate) fn values(&self) -> usize {
        self.len / self.value_words
    }

    /// Word `index` of each CPU's `stride` words, summed over the CPUs.
    pub(crate) fn sum(&self, stride: usize, index: usize) -> u64 {
        if stride == 0 || index >= stride {
            return 0;
        }
        (index..self.len)
            .step_by(stride)
            .map(|i| self.word(i))
            .fold(0u64, u64::wrapping_add)
    }
}

impl Drop for MappedCounters {
    fn drop(&mut self) {
        // SAFETY: `new` mapped `bytes` with `map_values`; nothing refers to
        // it after this.
        unsafe { super::sys::unmap_values(self.values.cast(), self.bytes) };
    }
}
