// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Where thread-context records live: memory the kernel can read at any
//! moment without a page fault.
//!
//! kspan's BPF programs read a thread's record with a non-faulting copy
//! (`bpf_probe_read_user`): when the page holding it is not mapped at that
//! moment, the read fails and the call looks like one made with no span. A
//! record on the heap shares its pages with whatever the allocator put
//! there, and the kernel may unmap them for a while: khugepaged collapsing
//! them into a huge page (THP "always", Debian's default, seen in the VM:
//! 854 calls of one thread's 20,000-call loop read no context), swapping
//! them out. Records are therefore carved from chunks of their own, marked
//! `MADV_NOHUGEPAGE` and locked in memory (`mlock`; where the lock limit
//! refuses, the chunk still avoids huge pages), and reused after their
//! thread exits.
//!
//! A slot is 128 bytes: the 28-byte record, room for its attributes (OTEP
//! 4947's `attrs-data` follows the record), then the id of the thread that
//! owns it (0 while free), which programs reading a registered record
//! ([`super::registry`]) compare with the thread they run on, so that a
//! registration that outlives its thread's use of the slot reads as no
//! record. Slots are aligned to their size, so none crosses a page (the
//! kernel pins the one page a registered record is on).

use std::ptr::NonNull;
use std::sync::Mutex;

use super::{ThreadContextRecord, ATTRS_CAPACITY};

/// Bytes per chunk: 512 records.
const CHUNK_BYTES: usize = 64 * 1024;

/// A record slot: `struct kspan_ctx_slot` of kspan.h.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Slot {
    pub record: ThreadContextRecord,
    /// The record's attributes (`record.attrs_data_size` of them).
    pub attrs: [u8; ATTRS_CAPACITY],
    /// The thread the slot is lent to; 0 while free.
    pub owner_tid: u32,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            record: ThreadContextRecord::default(),
            attrs: [0; ATTRS_CAPACITY],
            owner_tid: 0,
        }
    }
}

/// Bytes per record slot.
const SLOT_BYTES: usize = 128;

const _: () = assert!(std::mem::size_of::<Slot>() == SLOT_BYTES);
const _: () = assert!(std::mem::size_of::<kspan_bpf::types::kspan_ctx_slot>() == SLOT_BYTES);
const _: () = assert!(std::mem::offset_of!(Slot, attrs) == super::RECORD_SIZE);
const _: () = assert!(
    std::mem::offset_of!(Slot, owner_tid)
        == std::mem::offset_of!(kspan_bpf::types::kspan_ctx_slot, owner_tid)
);
const _: () = assert!(CHUNK_BYTES % 4096 == 0 && 4096 % SLOT_BYTES == 0);

/// Free slots of every chunk made so far (chunks are never unmapped).
struct Slots(Vec<NonNull<Slot>>);

// SAFETY: the pointers are to chunk memory owned by the arena for the
// process's life; a slot is handed to one thread at a time.
unsafe impl Send for Slots {}

static FREE: Mutex<Slots> = Mutex::new(Slots(Vec::new()));

/// A slot with an empty record lent to thread `owner_tid`, or `None` when
/// no chunk can be mapped.
pub(super) fn alloc(owner_tid: u32) -> Option<NonNull<Slot>> {
    let mut free = FREE.lock().unwrap_or_else(|p| p.into_inner());
    if free.0.is_empty() {
        let chunk = map_chunk()?;
        free.0.extend((0..CHUNK_BYTES / SLOT_BYTES).rev().map(|i| {
            // SAFETY: `i * SLOT_BYTES` is within the chunk just mapped.
            unsafe { chunk.byte_add(i * SLOT_BYTES) }
        }));
    }
    let slot = free.0.pop()?;
    drop(free);
    // SAFETY: the slot was free (zeroed) and is the caller's from now on.
    unsafe {
        slot.as_ptr().write(Slot {
            owner_tid,
            ..Slot::default()
        })
    };
    Some(slot)
}

/// Gives `slot` (from [`alloc`]) back; its record must no longer be
/// reachable through the thread-context pointer.
pub(super) fn release(slot: NonNull<Slot>) {
    // SAFETY: the slot is the caller's until it is pushed below. Zeroing
    // the owner is what makes a registration of it read as no record.
    unsafe { slot.as_ptr().write(Slot::default()) };
    FREE.lock().unwrap_or_else(|p| p.into_inner()).0.push(slot);
}

/// Maps one chunk, kept out of huge pages and locked in memory where the
/// limits allow.
fn map_chunk() -> Option<NonNull<Slot>> {
    // SAFETY: an anonymous private mapping of fresh memory, no other effect.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            CHUNK_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if at == libc::MAP_FAILED {
        crate::diagnostics::warn_user!(
            error = %std::io::Error::last_os_error(),
            "kspan cannot map memory for thread-context records: they go on the heap"
        );
        return None;
    }
    // SAFETY: advice and locking on the mapping just made.
    unsafe {
        if libc::madvise(at, CHUNK_BYTES, libc::MADV_NOHUGEPAGE) != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "MADV_NOHUGEPAGE refused");
        }
        if libc::mlock(at, CHUNK_BYTES) != 0 {
            tracing::debug!(
                error = %std::io::Error::last_os_error(),
                "thread-context records are not locked in memory (RLIMIT_MEMLOCK)"
            );
        }
    }
    NonNull::new(at.cast())
}
