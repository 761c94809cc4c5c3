// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The maps of registered thread-context records ([`ContextRecordMaps`]):
//! each thread's record, and the count of reasons to doubt that every one
//! is registered, mapped into user memory.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use kspan_bpf::names;
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::error::MapError;

/// Handles of their own to the map of each thread's registered context
/// record (`kspan_ctx_records`) and to the count of reasons to doubt that
/// it has every record (`kspan_ctx_pending`), mapped into memory so that
/// counting makes no system call.
#[derive(Debug)]
pub(crate) struct ContextRecordMaps {
    records: MapHandle,
    /// The mapping of `kspan_ctx_pending` (one page); its first 4 bytes are
    /// the count.
    pending: NonNull<AtomicU32>,
    _pending_map: MapHandle,
}

// SAFETY: the mapping is shared memory owned by this value, accessed only
// through the atomic.
unsafe impl Send for ContextRecordMaps {}
// SAFETY: as above.
unsafe impl Sync for ContextRecordMaps {}

impl ContextRecordMaps {
    pub(super) fn new(records: &MapHandle, pending: &MapHandle) -> Result<Self, MapError> {
        let handle = |map: &MapHandle, name: &'static str| {
            MapHandle::try_from(map).map_err(|source| MapError { map: name, source })
        };
        let records = handle(records, names::CTX_RECORDS_MAP)?;
        let pending_map = handle(pending, names::CTX_PENDING_MAP)?;
        let pending = super::sys::map_values(pending_map.as_fd(), super::sys::VALUES_BYTES)
            .map_err(|e| MapError {
                map: names::CTX_PENDING_MAP,
                source: libbpf_rs::Error::from(e),
            })?
            .cast::<AtomicU32>();
        Ok(ContextRecordMaps {
            records,
            pending,
            _pending_map: pending_map,
        })
    }

    /// Registers the record at `address` (a [`crate::context`] slot) as the
    /// record of the thread `pidfd` refers to; the kernel pins its page.
    pub(crate) fn register(&self, pidfd: BorrowedFd<'_>, address: usize) -> Result<(), MapError> {
        self.records
            .update(
                &pidfd.as_raw_fd().to_ne_bytes(),
                &(address as u64).to_ne_bytes(),
                MapFlags::ANY,
            )
            .map_err(|source| MapError {
                map: names::CTX_RECORDS_MAP,
                source,
            })
    }

    /// One more reason to doubt that every record is registered.
    pub(crate) fn doubt(&self) {
        // SAFETY: the mapping lives as long as `self`.
        unsafe { self.pending.as_ref() }.fetch_add(1, Ordering::SeqCst);
    }

    /// One reason less.
    pub(crate) fn settle(&self) {
        // SAFETY: the mapping lives as long as `self`.
        unsafe { self.pending.as_ref() }.fetch_sub(1, Ordering::SeqCst);
    }

    /// The count of reasons now.
    pub(crate) fn doubts(&self) -> u32 {
        // SAFETY: the mapping lives as long as `self`.
        unsafe { self.pending.as_ref() }.load(Ordering::SeqCst)
    }
}

impl Drop for ContextRecordMaps {
    fn drop(&mut self) {
        // SAFETY: `new` mapped it with `map_values`; nothing refers to it
        // after this.
        unsafe { super::sys::unmap_values(self.pending.cast(), super::sys::VALUES_BYTES) };
    }
}
