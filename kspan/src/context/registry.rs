// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Which thread owns which record, for readers that register records with
//! the kernel.
//!
//! Where the kernel pins user memory for BPF programs (task-storage uptrs,
//! Linux 6.13+), a runtime registers each thread's record in a task-storage
//! map, and its programs read the record with plain loads instead of two
//! user-memory copies at each call that starts a tree; a thread with no
//! registration has no record, so its calls read nothing at all. That holds
//! only if every record is registered, so the registry knows every live
//! record and tells each watcher of every record made while it watches
//! and, when it starts watching, of every live one; both happen under one
//! lock, so none slips between. A watcher is told first that a record is
//! coming ([`RecordWatcher::record_coming`]: until it is registered, the
//! programs must read user memory for threads without a registration),
//! then that it is made.
//!
//! Watchers are called on the thread that makes its record, inside its
//! first publish, with the record hooked and saying "suppressed" (so that
//! the registration's own system calls are not traced): they must not
//! publish, log or take locks that a publish might.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};

/// Where a thread's record is, as a watcher is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordPlace {
    /// In the [`super::arena`] slot at this address, whose owner is the
    /// thread.
    Slot(usize),
    /// On the heap (no arena memory could be mapped): it cannot be
    /// registered.
    Heap,
    /// Made before this process was forked from its parent: its thread id
    /// is the parent's thread's, and which of this process's threads holds
    /// it is unknown (the one that forked, if any).
    BeforeFork,
}

/// Told of thread-context records (see the module's essay).
pub(crate) trait RecordWatcher: Send + Sync {
    /// A record is about to be hooked into its thread's slot; its
    /// [`Self::record_made`] follows.
    fn record_coming(&self);

    /// The thread `tid` has its record at `place`.
    fn record_made(&self, tid: u32, place: RecordPlace);
}

/// How many times this process's ancestry forked since it started
/// (counted in the child, by a `pthread_atfork` handler: no system call).
static FORKS: AtomicU32 = AtomicU32::new(0);

extern "C" fn forked() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// A live record: where, and [`FORKS`] when it was made.
#[derive(Clone, Copy)]
struct Live {
    place: RecordPlace,
    forks: u32,
}

impl Live {
    /// Where the record is, as seen now.
    fn place(self) -> RecordPlace {
        if self.forks == FORKS.load(Ordering::Relaxed) {
            self.place
        } else {
            RecordPlace::BeforeFork
        }
    }
}

/// The live records by thread, and the watchers.
struct Registry {
    live: BTreeMap<u32, Live>,
    watchers: Vec<(u64, Arc<dyn RecordWatcher>)>,
    next_watcher: u64,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    live: BTreeMap::new(),
    watchers: Vec::new(),
    next_watcher: 0,
});

fn registry() -> MutexGuard<'static, Registry> {
    static FORK_HANDLER: Once = Once::new();
    FORK_HANDLER.call_once(|| {
        // SAFETY: registers a handler that only increments an atomic,
        // which is async-signal-safe as a fork child handler must be.
        unsafe { libc::pthread_atfork(None, None, Some(forked)) };
    });
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// The thread `tid` makes its record (see [`RecordWatcher::record_made`]):
/// `hook` hooks it into the thread's slot, between the watchers' two
/// calls.
pub(super) fn made(tid: u32, slot: Option<usize>, hook: impl FnOnce()) {
    let mut registry = registry();
    for (_, watcher) in &registry.watchers {
        watcher.record_coming();
    }
    hook();
    let place = slot.map_or(RecordPlace::Heap, RecordPlace::Slot);
    registry.live.insert(
        tid,
        Live {
            place,
            forks: FORKS.load(Ordering::Relaxed),
        },
    );
    for (_, watcher) in &registry.watchers {
        watcher.record_made(tid, place);
    }
}

/// The thread `tid` gives its record back: `unhook` takes it out of the
/// thread's slot, under the lock, so that a watcher starting now either
/// registers it or finds it gone from the slot.
pub(super) fn released(tid: u32, unhook: impl FnOnce()) {
    let mut registry = registry();
    unhook();
    registry.live.remove(&tid);
}

/// Watches records until dropped.
#[must_use = "the watcher stops watching when this is dropped"]
pub(crate) struct RecordWatch {
    id: u64,
}

/// Tells `watcher` of every live record now, then of every record made,
/// until the returned guard is dropped.
pub(crate) fn watch(watcher: Arc<dyn RecordWatcher>) -> RecordWatch {
    let mut registry = registry();
    for (&tid, &live) in &registry.live {
        watcher.record_coming();
        watcher.record_made(tid, live.place());
    }
    let id = registry.next_watcher;
    registry.next_watcher += 1;
    registry.watchers.push((id, watcher));
    RecordWatch { id }
}

impl Drop for RecordWatch {
    fn drop(&mut self) {
        registry().watchers.retain(|(id, _)| *id != self.id);
    }
}

impl std::fmt::Debug for RecordWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordWatch").field("id", &self.id).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::context::{publish_record, AttrBytes, ThreadContextRecord};

    /// Remembers what it was told.
    #[derive(Default)]
    struct Seen(Mutex<Vec<(u32, RecordPlace)>>, Mutex<usize>);

    impl RecordWatcher for Seen {
        fn record_coming(&self) {
            *self.1.lock().unwrap() += 1;
        }

        fn record_made(&self, tid: u32, place: RecordPlace) {
            self.0.lock().unwrap().push((tid, place));
        }
    }

    impl Seen {
        fn slot_of(&self, tid: u32) -> Option<Option<usize>> {
            let seen = self.0.lock().unwrap();
            seen.iter()
                .find(|(t, _)| *t == tid)
                .map(|(_, place)| match place {
                    RecordPlace::Slot(at) => Some(*at),
                    _ => None,
                })
        }
    }

    /// A thread that has made its record (by publishing), reports its tid,
    /// and exits when told.
    fn thread_with_record() -> (u32, mpsc::Sender<()>, std::thread::JoinHandle<()>) {
        let (tid_tx, tid_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            publish_record(&ThreadContextRecord::SUPPRESSED, &AttrBytes::EMPTY);
            // SAFETY: gettid has no preconditions.
            tid_tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = stop_rx.recv();
        });
        (tid_rx.recv().unwrap(), stop_tx, handle)
    }

    /// The owner id in the slot at `address`.
    fn owner_at(address: usize) -> u32 {
        // SAFETY: arena slots are never unmapped; the field is a u32 at its
        // aligned offset.
        unsafe { (*(address as *const super::super::arena::Slot)).owner_tid }
    }

    #[test]
    fn a_watcher_is_told_of_live_records_then_of_new_ones_and_not_of_released_ones() {
        let (before, stop_before, join_before) = thread_with_record();
        let (gone, stop_gone, join_gone) = thread_with_record();
        drop(stop_gone);
        join_gone.join().unwrap();

        let seen = Arc::new(Seen::default());
        let watch = watch(seen.clone());
        let at_start = seen
            .slot_of(before)
            .expect("a live record is reported when watching starts")
            .expect("records are in the arena");
        assert_eq!(owner_at(at_start), before, "the slot names its owner");
        assert_eq!(
            seen.slot_of(gone),
            None,
            "a released record is not reported"
        );

        let (after, stop_after, join_after) = thread_with_record();
        let made = seen
            .slot_of(after)
            .expect("a record made while watching is reported")
            .expect("records are in the arena");
        assert_eq!(owner_at(made), after);

        drop(stop_after);
        join_after.join().unwrap();
        // The released slot has no owner (or a new one): its registration
        // never reads as `after`'s.
        assert_ne!(owner_at(made), after);

        assert_eq!(
            *seen.1.lock().unwrap(),
            seen.0.lock().unwrap().len(),
            "every record made is announced first"
        );
        drop(watch);
        let (unwatched, stop_unwatched, join_unwatched) = thread_with_record();
        assert_eq!(
            seen.slot_of(unwatched),
            None,
            "a dropped watch hears of nothing"
        );

        // As seen in a forked child (the handler's count, bumped by hand):
        // the records made before are reported as such, not as slots.
        forked();
        let in_child = Arc::new(Seen::default());
        let child_watch = super::watch(in_child.clone());
        let place = in_child
            .0
            .lock()
            .unwrap()
            .iter()
            .find(|(t, _)| *t == before)
            .map(|p| p.1);
        FORKS.fetch_sub(1, Ordering::Relaxed);
        drop(child_watch);
        assert_eq!(place, Some(RecordPlace::BeforeFork));

        drop((stop_before, stop_unwatched));
        join_before.join().unwrap();
        join_unwatched.join().unwrap();
    }
}
