// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Which application spans have scheduler totals ([`SchedPresent`]): the
//! kernel's count per slot of span ids, mapped into user memory, so that a
//! span that never left a CPU ends with no system call.

use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use kspan_bpf::consts as c;
use kspan_bpf::names;
use libbpf_rs::MapHandle;

use super::error::MapError;

const SLOTS: usize = c::KSPAN_SCHED_PRESENT_SLOTS as usize;

/// The mapping of `kspan_sched_present` (`struct kspan_sched_present`:
/// one count a slot, the slot of a span id its low bits). The programs
/// raise a slot's count before they make a span's entry in
/// `kspan_sched_spans`, so a slot that reads 0 has no span with an entry.
#[derive(Debug)]
pub(crate) struct SchedPresent {
    slots: NonNull<AtomicU32>,
    _map: MapHandle,
}

// SAFETY: the mapping is shared memory owned by this value, accessed only
// through atomics.
unsafe impl Send for SchedPresent {}
// SAFETY: as above.
unsafe impl Sync for SchedPresent {}

const _: () = assert!(SLOTS.is_power_of_two() && SLOTS * 4 <= super::sys::VALUES_BYTES);

impl SchedPresent {
    pub(crate) fn new(map: &MapHandle) -> Result<Self, MapError> {
        let fail = |source| MapError {
            map: names::SCHED_PRESENT_MAP,
            source,
        };
        let map = MapHandle::try_from(map).map_err(fail)?;
        let slots = super::sys::map_values(map.as_fd())
            .map_err(|e| fail(libbpf_rs::Error::from(e)))?
            .cast::<AtomicU32>();
        Ok(SchedPresent { slots, _map: map })
    }

    fn slot(&self, span: u64) -> &AtomicU32 {
        let i = (span as usize) & (SLOTS - 1);
        // SAFETY: the mapping holds SLOTS counts (checked above against its
        // length) and lives as long as `self`; `i` is below SLOTS.
        unsafe { self.slots.add(i).as_ref() }
    }

    /// Whether `span` may have totals: false means it has none.
    pub(crate) fn may_have(&self, span: u64) -> bool {
        self.slot(span).load(Ordering::Acquire) != 0
    }

    /// `span`'s totals were taken out of the map: one span less in its slot.
    pub(crate) fn taken(&self, span: u64) {
        // A count already 0 (an entry made while its count was lowered
        // after a failed update elsewhere) stays 0.
        let _ = self
            .slot(span)
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

impl Drop for SchedPresent {
    fn drop(&mut self) {
        // SAFETY: `new` mapped it with `map_values`; nothing refers to it
        // after this.
        unsafe { super::sys::unmap_values(self.slots.cast()) };
    }
}
