// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Registering the process's thread-context records with the kernel, so
//! that the programs read them with plain loads (see
//! [`crate::context`]'s registry for why every record must be there).
//!
//! The registrar watches the records: each one made (and each live one
//! when the runtime starts) goes into the task-storage map under a pidfd of
//! its thread, and the kernel pins its page. While a record is on its way
//! in, the count of doubts in `kspan_ctx_pending` is raised, and the
//! programs read user memory for threads without a registration; the maps
//! are made with one doubt, which the registrar settles once the records
//! made before the runtime are in. A record that cannot be registered (one
//! on the heap, a refused pidfd or pin) leaves its doubt for good, and
//! [`ThreadContextReads::RegisteredOrUserMemory`] says why.

use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};

use crate::bpf::context_records::ContextRecordMaps;
use crate::context::{watch_records, RecordPlace, RecordWatch, RecordWatcher};
use crate::kernel::sys::thread_pidfd;

/// Where a runtime's programs read each thread's application context
/// (OTEP 4947) at the calls that start a tree of kernel spans.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ThreadContextReads {
    /// Not read: every call follows the orphan policy (no thread-context
    /// slot, or a kernel whose BTF has no thread pointer in `task_struct`).
    NotRead,
    /// From the thread's memory: two non-faulting copies per tree (one for
    /// a thread with no record).
    UserMemory {
        /// Why not from registered records.
        why: String,
    },
    /// From each thread's record as registered with the kernel
    /// (task-storage uptrs, Linux 6.13+), with plain loads; a thread with
    /// no registration has no record, and nothing is read for it.
    Registered,
    /// As [`Self::Registered`] for the threads registered, but a record
    /// could not be registered, so a thread with no registration is read
    /// from its memory.
    RegisteredOrUserMemory {
        /// Why a record is not registered.
        why: String,
    },
}

/// The runtime's record registrar, and the watch that feeds it.
pub(super) struct Registrar {
    shared: Arc<Registrations>,
    _watch: RecordWatch,
}

/// What the watcher callbacks share with the runtime.
struct Registrations {
    maps: ContextRecordMaps,
    /// The first registration that failed, with why.
    failure: Mutex<Option<String>>,
}

impl Registrar {
    /// Registers every live record and watches for new ones; then settles
    /// the doubt the maps were made with. `Err` says why threads without a
    /// registration are still read from user memory.
    pub(super) fn start(maps: ContextRecordMaps) -> (Registrar, Result<(), String>) {
        let shared = Arc::new(Registrations {
            maps,
            failure: Mutex::new(None),
        });
        let watch = watch_records(shared.clone());
        shared.maps.settle();
        let outcome = match &*shared.lock() {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        };
        (
            Registrar {
                shared,
                _watch: watch,
            },
            outcome,
        )
    }

    /// Where the programs read contexts from now.
    pub(super) fn reads(&self) -> ThreadContextReads {
        if let Some(why) = &*self.shared.lock() {
            return ThreadContextReads::RegisteredOrUserMemory { why: why.clone() };
        }
        match self.shared.maps.doubts() {
            0 => ThreadContextReads::Registered,
            n => ThreadContextReads::RegisteredOrUserMemory {
                why: format!("{n} records are being registered now"),
            },
        }
    }
}

impl Registrations {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.failure.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(&self, tid: u32, place: RecordPlace) -> Result<(), String> {
        let address = match place {
            RecordPlace::Slot(address) => address,
            RecordPlace::Heap => {
                return Err(format!(
                    "thread {tid}'s context record is on the heap (no memory could be mapped \
                     for records), where the kernel cannot pin it"
                ))
            }
            // Its thread id names the parent's thread (whose pidfd would
            // name a task of another process): the thread of this process
            // holding it stays unregistered, read from its memory.
            RecordPlace::BeforeFork => {
                return Err(format!(
                    "a context record was made before this process was forked (thread {tid} \
                     of the parent)"
                ))
            }
        };
        let pidfd = thread_pidfd(tid).map_err(|e| format!("no pidfd of thread {tid}: {e}"))?;
        self.maps
            .register(pidfd.as_fd(), address)
            .map_err(|e| format!("registering thread {tid}'s context record: {e}"))
    }
}

impl RecordWatcher for Registrations {
    fn record_coming(&self) {
        self.maps.doubt();
    }

    fn record_made(&self, tid: u32, place: RecordPlace) {
        match self.register(tid, place) {
            Ok(()) => self.maps.settle(),
            // The doubt stays, for good: this thread's record is not in
            // the map.
            Err(why) => {
                self.lock().get_or_insert(why);
            }
        }
    }
}
