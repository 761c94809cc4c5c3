// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Totals by application span, taken from a table the programs fill
//! ([`SpanTable`]): `kspan_sums` and `kspan_sched_spans`, arrays user space
//! maps, with the open addressing `kspan.h` describes.
//!
//! Taking a span's totals as it ends reads and frees at most
//! `KSPAN_TABLE_PROBES` slots of mapped memory: no system call, so no
//! moment in which the kernel skips kprobe and tracepoint programs on the
//! CPU (see [`super::counters`]), and next to no cost for a span with none.

use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use kspan_bpf::consts as c;
use libbpf_rs::{MapCore, MapHandle};

use super::error::MapError;

/// Words of a slot before its totals: the span id (0: free) and the tag.
const HEADER_WORDS: usize = 2;

/// A mapped table of totals by application span.
#[derive(Debug)]
pub(crate) struct SpanTable {
    words: NonNull<AtomicU64>,
    /// Slots in the table, and words a slot.
    slots: usize,
    slot_words: usize,
    bytes: usize,
    _map: MapHandle,
}

// SAFETY: the mapping is shared memory owned by this value, accessed only
// through atomics.
unsafe impl Send for SpanTable {}
// SAFETY: as above.
unsafe impl Sync for SpanTable {}

/// The first slot the totals of `span` under `tag` may be in: the
/// programs' `kspan_table_hash`.
pub(crate) fn table_hash(span: u64, tag: u64) -> u32 {
    ((span ^ (tag << 40)).wrapping_mul(c::KSPAN_TABLE_HASH_MULTIPLIER) >> 32) as u32
}

impl SpanTable {
    /// Maps the whole of `map` (`name`, for errors): slots of the span id,
    /// the tag and the totals, all `u64`.
    pub(crate) fn new(map: &MapHandle, name: &'static str) -> Result<Self, MapError> {
        let fail = |source| MapError { map: name, source };
        let map = MapHandle::try_from(map).map_err(fail)?;
        let value = map.value_size() as usize;
        if value % 8 != 0 || value / 8 <= HEADER_WORDS {
            return Err(fail(libbpf_rs::Error::from(std::io::Error::from(
                std::io::ErrorKind::InvalidData,
            ))));
        }
        let slots = map.max_entries() as usize;
        let bytes = (slots * value).next_multiple_of(super::sys::page_bytes());
        let words = super::sys::map_values(map.as_fd(), bytes)
            .map_err(|e| fail(libbpf_rs::Error::from(e)))?
            .cast::<AtomicU64>();
        Ok(SpanTable {
            words,
            slots,
            slot_words: value / 8,
            bytes,
            _map: map,
        })
    }

    fn word(&self, slot: usize, word: usize) -> &AtomicU64 {
        // SAFETY: the mapping holds `slots * slot_words` words and lives as
        // long as `self`; callers pass `slot < slots` and
        // `word < slot_words`.
        unsafe { self.words.add(slot * self.slot_words + word).as_ref() }
    }

    /// Takes the totals of `span` under `tag`: every matching slot's
    /// totals, added, and the slots freed; `None` when there are none.
    pub(crate) fn take(&self, span: u64, tag: u64) -> Option<Vec<u64>> {
        if span == 0 {
            return None;
        }
        let first = table_hash(span, tag) as usize;
        let mut totals: Option<Vec<u64>> = None;
        for i in 0..c::KSPAN_TABLE_PROBES as usize {
            let slot = (first + i) & (c::KSPAN_SUMS_MAX as usize - 1);
            if slot >= self.slots {
                break;
            }
            if self.word(slot, 0).load(Ordering::Acquire) != span
                || self.word(slot, 1).load(Ordering::Acquire) != tag
            {
                continue;
            }
            let sum = totals.get_or_insert_with(|| vec![0; self.slot_words - HEADER_WORDS]);
            for (w, total) in sum.iter_mut().enumerate() {
                let value = self.word(slot, HEADER_WORDS + w).load(Ordering::Acquire);
                *total = total.wrapping_add(value);
            }
            // No program adds here once the tag is cleared; then the slot
            // is free to claim (which zeroes the totals).
            self.word(slot, 1).store(0, Ordering::Release);
            self.word(slot, 0).store(0, Ordering::Release);
        }
        totals
    }
}

impl Drop for SpanTable {
    fn drop(&mut self) {
        // SAFETY: `new` mapped `bytes` with `map_values`; nothing refers to
        // it after this.
        unsafe { super::sys::unmap_values(self.words.cast(), self.bytes) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_spreads_spans_and_tags_over_the_table() {
        let mask = c::KSPAN_SUMS_MAX as u32 - 1;
        let a = table_hash(0x1234_5678_9abc_def0, 1) & mask;
        let b = table_hash(0x1234_5678_9abc_def0, 2) & mask;
        let c2 = table_hash(0x1234_5678_9abc_def1, 1) & mask;
        assert!(a != b && a != c2, "{a} {b} {c2}");
    }
}
