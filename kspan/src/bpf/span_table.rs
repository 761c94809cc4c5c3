// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Totals by application span, taken from a table the programs fill
//! ([`SpanTable`]): `kspan_sums` and `kspan_sched_spans`, arrays user space
//! maps, with the open addressing `kspan.h` describes.
//!
//! Taking a span's totals as it ends reads and frees at most
//! `KSPAN_TABLE_PROBES` slots of mapped memory: no system call, so no
//! moment in which the kernel skips kprobe and tracepoint programs on the
//! CPU (see [`super::counters`]), and next to no cost for a span with none.
//! The mapping itself is a [`MappedCounters`]'s: mapped, checked and
//! unmapped in one place.

use std::sync::atomic::Ordering;

use kspan_bpf::consts as c;
use libbpf_rs::MapHandle;

use super::counters::MappedCounters;
use super::error::MapError;

/// Words of a slot before its totals: the span id (0: free) and the tag.
const HEADER_WORDS: usize = 2;

/// A mapped table of totals by application span: one slot a value of the
/// mapped array, which owns the mapping.
#[derive(Debug)]
pub(crate) struct SpanTable {
    slots: MappedCounters,
}

/// The first slot the totals of `span` under `tag` may be in: the
/// programs' `kspan_table_hash`.
pub(crate) fn table_hash(span: u64, tag: u64) -> u32 {
    ((span ^ (tag << 40)).wrapping_mul(c::KSPAN_TABLE_HASH_MULTIPLIER) >> 32) as u32
}

impl SpanTable {
    /// Maps the whole of `map` (`name`, for errors): slots of the span id,
    /// the tag and the totals, all `u64`.
    pub(crate) fn new(map: &MapHandle, name: &'static str) -> Result<Self, MapError> {
        let slots = MappedCounters::with_value_words(map, name, HEADER_WORDS + 1)?;
        Ok(SpanTable { slots })
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
            let Some(words) = self.slots.value(slot) else {
                break;
            };
            let (header, values) = words.split_at(HEADER_WORDS);
            if header[0].load(Ordering::Acquire) != span || header[1].load(Ordering::Acquire) != tag
            {
                continue;
            }
            let sum = totals.get_or_insert_with(|| vec![0; values.len()]);
            for (total, value) in sum.iter_mut().zip(values) {
                *total = total.wrapping_add(value.load(Ordering::Acquire));
            }
            // No program adds here once the tag is cleared; then the slot
            // is free to claim (which zeroes the totals).
            header[1].store(0, Ordering::Release);
            header[0].store(0, Ordering::Release);
        }
        totals
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
