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

use std::ptr::NonNull;
use std::sync::Mutex;

use super::ThreadContextRecord;

/// Bytes per chunk: 2,048 records.
const CHUNK_BYTES: usize = 64 * 1024;

/// Bytes per record slot (the record is 28 bytes; 32 keeps slots aligned).
const SLOT_BYTES: usize = 32;

const _: () = assert!(std::mem::size_of::<ThreadContextRecord>() <= SLOT_BYTES);

/// Free slots of every chunk made so far (chunks are never unmapped).
struct Slots(Vec<NonNull<ThreadContextRecord>>);

// SAFETY: the pointers are to chunk memory owned by the arena for the
// process's life; a slot is handed to one thread at a time.
unsafe impl Send for Slots {}

static FREE: Mutex<Slots> = Mutex::new(Slots(Vec::new()));

/// A zeroed record slot, or `None` when no chunk can be mapped.
pub(super) fn alloc() -> Option<NonNull<ThreadContextRecord>> {
    let mut free = FREE.lock().unwrap_or_else(|p| p.into_inner());
    if free.0.is_empty() {
        let chunk = map_chunk()?;
        free.0.extend((0..CHUNK_BYTES / SLOT_BYTES).rev().map(|i| {
            // SAFETY: `i * SLOT_BYTES` is within the chunk just mapped.
            unsafe { chunk.byte_add(i * SLOT_BYTES) }
        }));
    }
    free.0.pop()
}

/// Gives `record` (from [`alloc`], no longer reachable by any reader) back.
pub(super) fn release(record: NonNull<ThreadContextRecord>) {
    // SAFETY: the slot is the caller's until it is pushed below.
    unsafe { record.as_ptr().write(ThreadContextRecord::default()) };
    FREE.lock()
        .unwrap_or_else(|p| p.into_inner())
        .0
        .push(record);
}

/// Maps one chunk, kept out of huge pages and locked in memory where the
/// limits allow.
fn map_chunk() -> Option<NonNull<ThreadContextRecord>> {
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
        tracing::warn!(
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
