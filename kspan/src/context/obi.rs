// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Each thread's span in the map that OpenTelemetry eBPF Instrumentation
//! (OBI) and the OpenTelemetry eBPF profiler share (OTEP 4855), opt-in.
//!
//! The map is pinned at `$PINPATH/otel/traces_ctx_v1` (`$PINPATH` is
//! `/sys/fs/bpf` unless configured, and must be the same for every
//! program that shares it): an LRU hash keyed by a thread's `pid_tgid` as
//! `bpf_get_current_pid_tgid()` gives it (process id in the high 32 bits,
//! thread id in the low), whose value is the span's trace id (16 bytes)
//! and span id (8), with room for 16,384 threads. Whoever comes first
//! creates and pins it; the others open it, and kspan checks that what it
//! opened has that layout.
//!
//! [`ObiTracesMap::start`] (or [`KspanBuilder::obi_traces_map`](crate::KspanBuilder::obi_traces_map))
//! turns writing on: from then on, every publication of a thread's context
//! (see [`crate::context`]) that changes the span the thread last wrote to
//! the map writes the new one (one `bpf()` system call), or removes the
//! thread's entry when the thread has no span or suppresses telemetry. A
//! thread's entry is removed when its record is released at thread exit,
//! and every entry of the process when writing stops. A publication that
//! leaves the span as written costs a thread-local comparison; with
//! writing off, one relaxed atomic load and a branch (about 3 ns a
//! publication as measured, code placement included).
//!
//! Each write is a system call, where the thread-context record costs a
//! 26-byte copy: about 0.4 us per change of span on the machine of
//! `BENCHMARKS.md`, which is why it is opt-in. A failed write or removal
//! is counted ([`failures`], [`Stats::obi_map_failures`](crate::Stats::obi_map_failures)),
//! never logged, and leaves the thread's entry as it was: the thread
//! writes again at its next change.
//!
//! A thread that published its span before writing started gets its entry
//! at its next publication (the thread that starts writing gets its own at
//! once). The system calls of a write run with the thread's record saying
//! "suppressed", so that kspan's programs do not record them as the
//! application's. Keys are the ids of the process's own PID namespace: in
//! the initial one they are the kernel's (what BPF programs see); in any
//! other (a container's), readers outside it will not find the entries,
//! and [`ObiTracesMap::start`] warns.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock, PoisonError};

use libbpf_rs::{libbpf_sys, ErrorKind, MapCore, MapFlags, MapHandle, MapType};

use super::{AttrBytes, ThreadContextRecord};

/// Where bpffs is mounted by convention, and OTEP 4855's default
/// `$PINPATH`.
pub const DEFAULT_PIN_ROOT: &str = "/sys/fs/bpf";

/// The map's name, and its pin's under `$PINPATH/otel`.
pub const MAP_NAME: &str = "traces_ctx_v1";

/// Bytes of a key: `pid_tgid`.
const KEY_SIZE: u32 = 8;
/// Bytes of a value: trace id, span id.
const VALUE_SIZE: u32 = 24;
/// Entries of a map kspan creates (OTEP 4855: `1 << 14`).
const MAX_ENTRIES: u32 = 1 << 14;

/// What OTEP 4855 specifies, as the errors say it.
const EXPECTED: &str = "an LRU hash map (BPF_MAP_TYPE_LRU_HASH) with 8-byte keys (pid_tgid) \
                        and 24-byte values (trace id, span id)";

/// The inode number of the initial PID namespace (`PROC_PID_INIT_INO`).
const INITIAL_PID_NAMESPACE: &str = "pid:[4026531836]";

/// Where OBI's shared traces map is pinned: [`DEFAULT_PIN_ROOT`] unless
/// [`Self::pin_root`] says otherwise. Pass it to
/// [`KspanBuilder::obi_traces_map`](crate::KspanBuilder::obi_traces_map),
/// or [`Self::start`] it without a runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObiTracesMap {
    pin_root: PathBuf,
}

impl Default for ObiTracesMap {
    fn default() -> Self {
        ObiTracesMap {
            pin_root: PathBuf::from(DEFAULT_PIN_ROOT),
        }
    }
}

impl ObiTracesMap {
    /// The map pinned under `root` (OTEP 4855's `$PINPATH`, a directory on
    /// a BPF file system; OBI's and the profiler's must be the same).
    pub fn pin_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.pin_root = root.into();
        self
    }

    /// The map's pin: `<pin root>/otel/traces_ctx_v1`.
    pub fn path(&self) -> PathBuf {
        self.pin_root.join("otel").join(MAP_NAME)
    }

    /// Opens the pinned map (or creates and pins it when there is none)
    /// and writes every thread's span to it until the returned writer is
    /// dropped (see the module's essay). A process keeps the first map it
    /// opens for its life, and writers overlap: writing stops when the last
    /// one is dropped.
    ///
    /// Fails, naming the fix, when the pin root is not on a BPF file
    /// system, the map there has another layout, the process may not open
    /// or create it (`CAP_BPF`, or root), or the process writes another
    /// map already.
    pub fn start(&self) -> Result<ObiTracesWriter, ObiMapError> {
        let path = self.path();
        let mut control = control();
        let shared = match MAP.get() {
            Some(shared) if shared.path == path => shared,
            Some(shared) => {
                return Err(ObiMapError::OtherMap {
                    open: shared.path.clone(),
                    asked: path,
                })
            }
            None => {
                let map = open_or_create(&self.pin_root, &path)?;
                // Under the control lock: no other start sets it meanwhile.
                MAP.get_or_init(|| Shared {
                    map,
                    path: path.clone(),
                })
            }
        };
        if std::fs::read_link("/proc/self/ns/pid")
            .is_ok_and(|ns| ns.as_os_str() != INITIAL_PID_NAMESPACE)
        {
            crate::diagnostics::warn_user!(
                map = %shared.path.display(),
                "kspan writes OBI's traces map from a PID namespace other than the initial one: \
                 its keys are this namespace's process and thread ids, which OBI and the \
                 profiler, reading the kernel's, will not find"
            );
        }
        static FORK_HANDLER: Once = Once::new();
        FORK_HANDLER.call_once(|| {
            // SAFETY: registers a handler that only loads and stores
            // atomics, which is async-signal-safe as a fork child handler
            // must be.
            unsafe { libc::pthread_atfork(None, None, Some(forked)) };
        });
        control.writers += 1;
        if control.writers == 1 {
            GENERATION.store(next_generation(), Ordering::SeqCst);
        }
        drop(control);
        if let Some(record) = super::current_record() {
            published(&record, &super::publisher::of_span(record.span_key()));
        }
        Ok(ObiTracesWriter {
            path: shared.path.clone(),
        })
    }
}

/// Writes each thread's span to OBI's traces map while it lives (see
/// [`ObiTracesMap::start`]); dropping the last one stops the writing and
/// removes every entry of the process.
#[derive(Debug)]
#[must_use = "writing stops when the writer is dropped"]
pub struct ObiTracesWriter {
    path: PathBuf,
}

impl ObiTracesWriter {
    /// The map's pin.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes and removals the kernel refused so far, in this process
    /// ([`failures`]).
    pub fn failures(&self) -> u64 {
        failures()
    }
}

impl Drop for ObiTracesWriter {
    fn drop(&mut self) {
        let mut control = control();
        control.writers = control.writers.saturating_sub(1);
        if control.writers > 0 {
            return;
        }
        GENERATION.store(0, Ordering::SeqCst);
        // Under the control lock, so that a start waits for the sweep; a
        // thread that wrote just before the store above removes its entry
        // itself (see `write`).
        if let Some(shared) = MAP.get() {
            let _quiet = super::suppress();
            sweep(&shared.map);
        }
    }
}

/// Writes and removals of entries of OBI's traces map that the kernel
/// refused, in this process since it started (0 when it never wrote the
/// map). Each left its thread's entry as it was, until the thread's next
/// change of span.
pub fn failures() -> u64 {
    FAILURES.load(Ordering::Relaxed)
}

/// Opening, creating, pinning or checking OBI's traces map failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ObiMapError {
    /// The pin root is not a directory on a BPF file system.
    #[error(
        "the pin root of OBI's traces map, {root}, {found}, and BPF maps are pinned only \
         there: mount one (`mount -t bpf bpf {root}`), or choose a root on one with \
         `ObiTracesMap::default().pin_root(..)` (OBI's and the profiler's must be the same)"
    )]
    NotBpffs {
        /// The pin root.
        root: PathBuf,
        /// What is there instead.
        found: String,
    },
    /// The map pinned there does not have OTEP 4855's layout.
    #[error(
        "{path} is {found}, not OBI's traces map as OTEP 4855 specifies it ({EXPECTED}): \
         another program pinned it there; remove the pin (`rm {path}`) once nothing uses it, \
         so that the first program to start creates it anew, or give kspan, OBI and the \
         profiler another pin root (`ObiTracesMap::default().pin_root(..)`)"
    )]
    Layout {
        /// The pin.
        path: PathBuf,
        /// What it is.
        found: String,
    },
    /// The kernel refused to open, create or pin the map.
    #[error("cannot {action} OBI's traces map at {path}: {reason}")]
    System {
        /// The pin.
        path: PathBuf,
        /// What was refused.
        action: &'static str,
        /// The kernel's error and the fix.
        reason: String,
    },
    /// The process writes another pin's map already.
    #[error(
        "this process writes OBI's traces map at {open} already, and keeps that map for its \
         life: use the same pin root, not the one of {asked}"
    )]
    OtherMap {
        /// The map the process writes.
        open: PathBuf,
        /// The one asked for.
        asked: PathBuf,
    },
}

/// The map, once a writer opened it, for the process's life.
struct Shared {
    map: MapHandle,
    path: PathBuf,
}

static MAP: OnceLock<Shared> = OnceLock::new();

/// 0 while writing is off; otherwise the writing's generation, new at
/// each start and in a forked child, so that what a thread wrote before
/// counts for nothing.
static GENERATION: AtomicU32 = AtomicU32::new(0);

/// The last generation handed out.
static GENERATIONS: AtomicU32 = AtomicU32::new(0);

static FAILURES: AtomicU64 = AtomicU64::new(0);

/// How many writers live.
struct Control {
    writers: u32,
}

static CONTROL: Mutex<Control> = Mutex::new(Control { writers: 0 });

fn control() -> MutexGuard<'static, Control> {
    CONTROL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A generation never handed out before, and never 0.
fn next_generation() -> u32 {
    loop {
        let g = GENERATIONS.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        if g != 0 {
            return g;
        }
    }
}

/// In a forked child: its threads' entries are keyed by its own process
/// id, and none is written yet.
extern "C" fn forked() {
    if GENERATION.load(Ordering::Relaxed) != 0 {
        GENERATION.store(next_generation(), Ordering::SeqCst);
    }
}

/// `pid_tgid` as `bpf_get_current_pid_tgid()` gives it: the process id
/// (the kernel's tgid) in the high 32 bits, the thread id (its pid) in the
/// low.
fn pid_tgid(tgid: u32, tid: u32) -> u64 {
    (u64::from(tgid) << 32) | u64::from(tid)
}

/// The calling thread's key.
fn this_thread_key() -> u64 {
    // SAFETY: getpid and gettid have no preconditions.
    let (tgid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
    pid_tgid(tgid as u32, tid as u32)
}

/// A value of the map: trace id, span id.
type Entry = [u8; VALUE_SIZE as usize];

/// The entry `record` asks for: its ids when it is valid with a span;
/// `None` for no span, and for a thread that suppresses telemetry (the
/// all-zero ids).
fn entry_of(record: &ThreadContextRecord) -> Option<Entry> {
    if record.valid != 1 || record.span_id == [0; 8] {
        return None;
    }
    let mut entry = [0; VALUE_SIZE as usize];
    entry[..16].copy_from_slice(&record.trace_id);
    entry[16..].copy_from_slice(&record.span_id);
    Some(entry)
}

/// What a thread last wrote to the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Written {
    /// The generation it wrote in.
    generation: u32,
    /// Its key (0 until known in that generation).
    key: u64,
    /// Its entry, as far as it knows.
    entry: Option<Entry>,
}

/// A change to the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Update(Entry),
    Remove,
}

impl Written {
    const NOTHING: Written = Written {
        generation: 0,
        key: 0,
        entry: None,
    };

    /// The entry this thread has in the map in `generation`: nothing of
    /// an earlier one counts.
    fn entry_in(self, generation: u32) -> Option<Entry> {
        if self.generation == generation {
            self.entry
        } else {
            None
        }
    }

    /// The change that makes the map hold `wanted` for this thread in
    /// `generation`, if any.
    fn change(self, generation: u32, wanted: Option<Entry>) -> Option<Change> {
        if self.entry_in(generation) == wanted {
            return None;
        }
        Some(match wanted {
            Some(entry) => Change::Update(entry),
            None => Change::Remove,
        })
    }

    /// After `change` in `generation`, which the kernel made or (`made`
    /// false) refused; `key` is the thread's.
    fn after(self, generation: u32, key: u64, change: Change, made: bool) -> Written {
        let before = self.entry_in(generation);
        Written {
            generation,
            key,
            entry: match (change, made) {
                (Change::Update(entry), true) => Some(entry),
                (Change::Remove, true) => None,
                (_, false) => before,
            },
        }
    }
}

thread_local! {
    /// What this thread last wrote (no destructor: readable at thread
    /// exit, after the record).
    static WRITTEN: Cell<Written> = const { Cell::new(Written::NOTHING) };
}

/// The calling thread published `record` (the thread-context publish
/// path's hook).
#[inline]
pub(super) fn published(record: &ThreadContextRecord, attrs: &AttrBytes) {
    let generation = GENERATION.load(Ordering::Relaxed);
    if generation != 0 {
        write(generation, record, attrs);
    }
}

/// Writes the calling thread's entry for `record`, if it changed (out of
/// the publish path's line: `cold`).
#[cold]
#[inline(never)]
fn write(generation: u32, record: &ThreadContextRecord, attrs: &AttrBytes) {
    let Ok(written) = WRITTEN.try_with(Cell::get) else {
        return;
    };
    let Some(change) = written.change(generation, entry_of(record)) else {
        return;
    };
    let Some(shared) = MAP.get() else { return };
    // The system call is kspan's own; a thread whose record is gone (at
    // exit) writes nothing more.
    if super::RECORD
        .try_with(|r| r.publish(&ThreadContextRecord::SUPPRESSED, &AttrBytes::EMPTY))
        .is_err()
    {
        return;
    }
    let key = match written.key {
        key if key != 0 && written.generation == generation => key,
        _ => this_thread_key(),
    };
    let made = apply(&shared.map, key, change);
    let mut now = written.after(generation, key, change, made);
    // Writing stopped (or restarted) meanwhile: the sweep may have missed
    // this entry.
    if GENERATION.load(Ordering::SeqCst) != generation && now.entry.is_some() {
        apply(&shared.map, key, Change::Remove);
        now.entry = None;
    }
    let _ = super::RECORD.try_with(|r| r.publish(record, attrs));
    WRITTEN.set(now);
}

/// Makes `change` to `key`'s entry; `false` (counted) when the kernel
/// refused it. Removing an entry that is not there (evicted, or removed
/// by a reader) is no failure.
fn apply(map: &MapHandle, key: u64, change: Change) -> bool {
    let key = key.to_ne_bytes();
    let done = match change {
        Change::Update(entry) => map.update(&key, &entry, MapFlags::ANY),
        Change::Remove => match map.delete(&key) {
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            done => done,
        },
    };
    if done.is_err() {
        FAILURES.fetch_add(1, Ordering::Relaxed);
    }
    done.is_ok()
}

/// The calling thread's record is released (at thread exit): its entry
/// goes, with the record saying "suppressed" for the system call.
pub(super) fn released(record: &super::ThreadRecord) {
    let generation = GENERATION.load(Ordering::Relaxed);
    if generation == 0 {
        return;
    }
    let Ok(written) = WRITTEN.try_with(Cell::get) else {
        return;
    };
    let (Some(_), Some(shared)) = (written.entry_in(generation), MAP.get()) else {
        return;
    };
    record.publish(&ThreadContextRecord::SUPPRESSED, &AttrBytes::EMPTY);
    let made = apply(&shared.map, written.key, Change::Remove);
    WRITTEN.set(written.after(generation, written.key, Change::Remove, made));
}

/// Removes every entry of this process.
fn sweep(map: &MapHandle) {
    let tgid = std::process::id();
    let ours: Vec<u64> = map
        .keys()
        .filter_map(|key| Some(u64::from_ne_bytes(key.try_into().ok()?)))
        .filter(|key| (key >> 32) as u32 == tgid)
        .collect();
    for key in ours {
        apply(map, key, Change::Remove);
    }
}

/// What a pin's map is, if it is not what OTEP 4855 specifies.
fn layout_problem(ty: MapType, key_size: u32, value_size: u32) -> Option<String> {
    if ty == MapType::LruHash && key_size == KEY_SIZE && value_size == VALUE_SIZE {
        return None;
    }
    Some(format!(
        "a BPF map of type {ty:?} with {key_size}-byte keys and {value_size}-byte values"
    ))
}

/// The fix the kernel's refusal `e` of `action` calls for.
fn refused(
    path: &Path,
    action: &'static str,
    e: impl std::fmt::Display,
    denied: bool,
) -> ObiMapError {
    let fix = if denied {
        "; kspan needs CAP_BPF (or root) to open or create BPF maps, and write access to the \
         pin root"
    } else {
        ""
    };
    ObiMapError::System {
        path: path.to_owned(),
        action,
        reason: format!("{e}{fix}"),
    }
}

/// Opens the map pinned at `path` under `root` and checks it, or creates
/// and pins it when there is none.
fn open_or_create(root: &Path, path: &Path) -> Result<MapHandle, ObiMapError> {
    let not_bpffs = |found: String| ObiMapError::NotBpffs {
        root: root.to_owned(),
        found,
    };
    match crate::kernel::sys::is_bpffs(root) {
        Ok(true) => {}
        Ok(false) => return Err(not_bpffs("is on another file system".to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(not_bpffs("does not exist".to_owned()))
        }
        Err(e) => return Err(not_bpffs(format!("cannot be examined ({e})"))),
    }
    // (libbpf-rs panics on a NUL byte; `is_bpffs` refused one in the root,
    // and the rest of the path is kspan's.)
    if let Some(map) = open(path)? {
        return Ok(map);
    }
    let dir = path.parent().unwrap_or(root);
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            let denied = e.kind() == std::io::ErrorKind::PermissionDenied;
            return Err(refused(dir, "make the directory of", e, denied));
        }
    }
    let opts = libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
        ..Default::default()
    };
    let mut map = MapHandle::create(
        MapType::LruHash,
        Some(MAP_NAME),
        KEY_SIZE,
        VALUE_SIZE,
        MAX_ENTRIES,
        &opts,
    )
    .map_err(|e| {
        let denied = e.kind() == ErrorKind::PermissionDenied;
        refused(path, "create", e, denied)
    })?;
    match map.pin(path) {
        Ok(()) => Ok(map),
        // Another program pinned one since: that one is shared.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            open(path)?.ok_or_else(|| refused(path, "pin", e, false))
        }
        Err(e) => {
            let denied = e.kind() == ErrorKind::PermissionDenied;
            Err(refused(path, "pin", e, denied))
        }
    }
}

/// The map pinned at `path`, checked; `None` when nothing is pinned there.
fn open(path: &Path) -> Result<Option<MapHandle>, ObiMapError> {
    let map = match MapHandle::from_pinned_path(path) {
        Ok(map) => map,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            let denied = e.kind() == ErrorKind::PermissionDenied;
            return Err(refused(path, "open", e, denied));
        }
    };
    if let Some(found) = layout_problem(map.map_type(), map.key_size(), map.value_size()) {
        return Err(ObiMapError::Layout {
            path: path.to_owned(),
            found,
        });
    }
    Ok(Some(map))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_the_process_id_above_the_thread_id() {
        assert_eq!(pid_tgid(0x1234, 0x5678), 0x0000_1234_0000_5678);
        assert_eq!(pid_tgid(u32::MAX, 1), 0xffff_ffff_0000_0001);
        // The calling thread's, from both ids (the test thread is not the
        // process's first).
        let key = this_thread_key();
        assert_eq!((key >> 32) as u32, std::process::id());
        // SAFETY: gettid has no preconditions.
        assert_eq!(key as u32, unsafe { libc::gettid() } as u32);
        // As the map stores it: the u64 in native byte order.
        assert_eq!(
            pid_tgid(1, 2).to_ne_bytes(),
            ((1u64 << 32) | 2).to_ne_bytes()
        );
    }

    fn record(trace: u128, span: u64) -> ThreadContextRecord {
        ThreadContextRecord {
            trace_id: trace.to_be_bytes(),
            span_id: span.to_be_bytes(),
            valid: 1,
            trace_flags: 1,
            attrs_data_size: 0,
        }
    }

    #[test]
    fn an_entry_is_the_trace_id_then_the_span_id() {
        let entry = entry_of(&record(0xabc, 0x11)).unwrap();
        assert_eq!(entry[..16], 0xabc_u128.to_be_bytes());
        assert_eq!(entry[16..], 0x11_u64.to_be_bytes());
        assert_eq!(entry_of(&ThreadContextRecord::default()), None, "no span");
        assert_eq!(
            entry_of(&ThreadContextRecord::SUPPRESSED),
            None,
            "suppressed: the all-zero ids"
        );
        let mut torn = record(1, 2);
        torn.valid = 0;
        assert_eq!(entry_of(&torn), None, "not valid");
    }

    #[test]
    fn only_a_change_of_span_writes() {
        let (a, b) = (entry_of(&record(1, 2)), entry_of(&record(1, 3)));
        let g = 7;
        let start = Written::NOTHING;
        assert_eq!(start.change(g, None), None, "no span, nothing written");
        assert_eq!(start.change(g, a), Some(Change::Update(a.unwrap())));
        let w = start.after(g, 42, Change::Update(a.unwrap()), true);
        assert_eq!(w.key, 42);
        assert_eq!(w.change(g, a), None, "the same span again");
        assert_eq!(w.change(g, b), Some(Change::Update(b.unwrap())));
        assert_eq!(w.change(g, None), Some(Change::Remove));
        let removed = w.after(g, 42, Change::Remove, true);
        assert_eq!(removed.change(g, None), None, "removed already");
        // A refused change leaves what the map holds.
        let refused = w.after(g, 42, Change::Update(b.unwrap()), false);
        assert_eq!(refused.entry, a);
        assert_eq!(refused.change(g, b), Some(Change::Update(b.unwrap())));
        let refused = w.after(g, 42, Change::Remove, false);
        assert_eq!(refused.change(g, None), Some(Change::Remove), "retried");
        // What was written in another generation counts for nothing: the
        // map was swept, or this is a forked child.
        assert_eq!(w.change(g + 1, a), Some(Change::Update(a.unwrap())));
        assert_eq!(w.change(g + 1, None), None);
        assert_eq!(w.after(g + 1, 43, Change::Remove, false).entry, None);
    }

    #[test]
    fn only_otep_4855s_layout_is_taken() {
        assert_eq!(layout_problem(MapType::LruHash, 8, 24), None);
        assert_eq!(
            layout_problem(MapType::LruHash, 8, 16).as_deref(),
            Some("a BPF map of type LruHash with 8-byte keys and 16-byte values")
        );
        assert!(layout_problem(MapType::Hash, 8, 24).is_some());
        assert!(layout_problem(MapType::LruHash, 4, 24).is_some());
    }

    #[test]
    fn a_root_off_bpffs_is_refused_naming_the_fix() {
        let root = std::env::temp_dir();
        let e = ObiTracesMap::default()
            .pin_root(&root)
            .start()
            .expect_err("a temporary directory is not on bpffs");
        let text = e.to_string();
        assert!(matches!(e, ObiMapError::NotBpffs { .. }), "{e:?}");
        assert!(
            text.contains(&format!("mount -t bpf bpf {}", root.display())),
            "{text}"
        );
        assert!(text.contains("pin_root"), "{text}");
        assert!(!root.join("otel").exists(), "nothing made there");

        let missing = root.join("kspan-no-such-dir");
        let e = ObiTracesMap::default()
            .pin_root(&missing)
            .start()
            .unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        let e = ObiTracesMap::default()
            .pin_root("/tmp/a\0b")
            .start()
            .unwrap_err();
        assert!(e.to_string().contains("NUL"), "no panic: {e}");
    }

    #[test]
    fn the_errors_name_the_path_what_is_there_and_the_fix() {
        let e = ObiMapError::Layout {
            path: "/sys/fs/bpf/otel/traces_ctx_v1".into(),
            found: layout_problem(MapType::Hash, 8, 16).unwrap(),
        };
        let text = e.to_string();
        for part in [
            "/sys/fs/bpf/otel/traces_ctx_v1 is a BPF map of type Hash with 8-byte keys and \
             16-byte values",
            "BPF_MAP_TYPE_LRU_HASH",
            "24-byte values",
            "rm /sys/fs/bpf/otel/traces_ctx_v1",
            "pin_root",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
        assert_eq!(
            ObiTracesMap::default().pin_root("/run/bpf").path().to_str(),
            Some("/run/bpf/otel/traces_ctx_v1")
        );
    }
}
