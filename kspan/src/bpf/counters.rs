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

/// An mmapable array of `u64` counters, `stride` slots per CPU.
#[derive(Debug)]
pub(crate) struct MappedCounters {
    values: NonNull<AtomicU64>,
    len: usize,
    bytes: usize,
    _map: MapHandle,
}

// SAFETY: the mapping is shared memory owned by this value, read only
// through atomics.
unsafe impl Send for MappedCounters {}
// SAFETY: as above.
unsafe impl Sync for MappedCounters {}

impl MappedCounters {
    /// Maps the whole of `map` (`name`, for errors), an array of `u64`.
    pub(crate) fn new(map: &MapHandle, name: &'static str) -> Result<Self, MapError> {
        let fail = |source| MapError { map: name, source };
        let map = MapHandle::try_from(map).map_err(fail)?;
        if map.value_size() != 8 {
            return Err(fail(libbpf_rs::Error::from(std::io::Error::from(
                std::io::ErrorKind::InvalidData,
            ))));
        }
        let len = map.max_entries() as usize;
        let bytes = (len * 8).next_multiple_of(super::sys::page_bytes());
        let values = super::sys::map_values(map.as_fd(), bytes)
            .map_err(|e| fail(libbpf_rs::Error::from(e)))?
            .cast::<AtomicU64>();
        Ok(MappedCounters {
            values,
            len,
            bytes,
            _map: map,
        })
    }

    /// Slot `index` of each CPU's `stride` slots, summed over the CPUs.
    pub(crate) fn sum(&self, stride: usize, index: usize) -> u64 {
        if stride == 0 || index >= stride {
            return 0;
        }
        (index..self.len)
            .step_by(stride)
            .map(|i| {
                // SAFETY: the mapping holds `len` values and lives as long
                // as `self`; `i` is below `len`.
                unsafe { self.values.add(i).as_ref() }.load(Ordering::Relaxed)
            })
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
