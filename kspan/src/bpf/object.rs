// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Loading kspan's BPF object through its libbpf skeleton.
//!
//! The skeleton lives only for one load: the settings are written into its
//! typed `.rodata`, the programs wanted are chosen and targeted, the shared
//! maps are reused, and what outlives the load is taken out as owned
//! descriptors ([`LoadedPrograms`], [`SharedMaps`]) and program templates.
//! libbpf's object is then closed: links and copies hold their own
//! references to what they use.
//!
//! Each program gets a verifier-log buffer of its own for the load, so a
//! refusal carries its log without touching libbpf's process-wide print
//! callback, which stays the application's.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use kspan_bpf::types::kspan_config;
use kspan_bpf::{names, KspanSkelBuilder, OpenKspanProgs};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{AsRawLibbpf, MapCore, MapFlags, MapHandle, OpenObject, OpenProgramMut};

use super::config::HistogramSizes;
use super::copies::ProgramTemplate;
use super::error::{verifier_log, LoadError, MapError, VERIFIER_LOG_BYTES};
use crate::annotation::Hook;

/// kspan's programs, by role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Program {
    Fentry,
    Fexit,
    Kprobe,
    Kretprobe,
    KprobeMulti,
    KretprobeMulti,
    /// One program at both ends of a trampoline function (fsession).
    Fsession,
    /// The same, loaded with no target: one fsession.multi link attaches
    /// it to many functions.
    FsessionMulti,
    /// The same built without captures, refusals at exit, sums and
    /// histograms, for probes that have none ([`super::config::is_plain`]):
    /// a third of the instructions to verify.
    PlainFsessionMulti,
    /// One program at both ends of kprobe.multi functions.
    KprobeSession,
    SysEnter,
    SysExit,
}

impl Program {
    /// The entry program of `hook`, and its exit program when it has one.
    pub(crate) fn of(hook: Hook) -> (Program, Option<Program>) {
        let (entry, exit) = match hook {
            Hook::Fentry | Hook::Fexit => (Program::Fentry, Program::Fexit),
            Hook::Kprobe | Hook::Kretprobe => (Program::Kprobe, Program::Kretprobe),
            Hook::Syscall => (Program::SysEnter, Program::SysExit),
        };
        (entry, hook.has_return().then_some(exit))
    }

    /// The kprobe.multi programs of a kprobe `hook`.
    pub(crate) fn multi_of(hook: Hook) -> (Program, Option<Program>) {
        (
            Program::KprobeMulti,
            hook.has_return().then_some(Program::KretprobeMulti),
        )
    }

    /// The fsession.multi program that serves `config`: the plain one
    /// where it can.
    pub(crate) fn fsession_multi_for(config: &kspan_config) -> Program {
        if super::config::is_plain(config) {
            Program::PlainFsessionMulti
        } else {
            Program::FsessionMulti
        }
    }

    /// A trampoline program loaded with no target (its link names them).
    fn is_multi_trampoline(self) -> bool {
        matches!(self, Program::FsessionMulti | Program::PlainFsessionMulti)
    }

    const ALL: [Program; 12] = [
        Program::Fentry,
        Program::Fexit,
        Program::Kprobe,
        Program::Kretprobe,
        Program::KprobeMulti,
        Program::KretprobeMulti,
        Program::Fsession,
        Program::FsessionMulti,
        Program::PlainFsessionMulti,
        Program::KprobeSession,
        Program::SysEnter,
        Program::SysExit,
    ];

    fn in_skeleton<'a, 'obj>(
        self,
        progs: &'a mut OpenKspanProgs<'obj>,
    ) -> &'a mut OpenProgramMut<'obj> {
        match self {
            Program::Fentry => &mut progs.kspan_fentry,
            Program::Fexit => &mut progs.kspan_fexit,
            Program::Kprobe => &mut progs.kspan_kprobe,
            Program::Kretprobe => &mut progs.kspan_kretprobe,
            Program::KprobeMulti => &mut progs.kspan_kprobe_multi,
            Program::KretprobeMulti => &mut progs.kspan_kretprobe_multi,
            Program::Fsession => &mut progs.kspan_fsession,
            Program::FsessionMulti => &mut progs.kspan_fsession_multi,
            Program::PlainFsessionMulti => &mut progs.kspan_plain_fsession_multi,
            Program::KprobeSession => &mut progs.kspan_kprobe_session,
            Program::SysEnter => &mut progs.kspan_sys_enter,
            Program::SysExit => &mut progs.kspan_sys_exit,
        }
    }
}

/// What to load.
pub(crate) struct LoadRequest<'a> {
    /// The kernel function, for errors, and the attach target of
    /// trampolines.
    pub function: &'a str,
    /// The hook the programs are for.
    pub hook: Hook,
    /// The settings written into `.rodata`.
    pub config: &'a kspan_config,
    /// The programs to load (the others are not).
    pub programs: &'a [Program],
    /// The maps every object shares, once the first object made them.
    pub shared: Option<&'a SharedMaps>,
    /// Bytes of the ring buffer, when this load makes the shared maps.
    pub ring_buffer_bytes: u32,
    /// Whether some probe reads captures at entry (else the map carrying
    /// them is made with one entry), when this load makes the shared maps.
    pub entry_values: bool,
    /// How many probes the runtime has: the per-probe maps get one slot each.
    pub probes: u32,
    /// Some probe sums its calls onto application spans: the sums map gets
    /// its full size.
    pub sums: bool,
    /// The histogram maps' sizes, when this load makes the shared maps.
    pub histograms: HistogramSizes,
}

/// The maps every loaded program uses, made by the first object.
#[derive(Debug)]
pub(crate) struct SharedMaps {
    /// Finished spans.
    pub events: MapHandle,
    stacks: MapHandle,
    counters: MapHandle,
    control: MapHandle,
    entry_values: MapHandle,
    zero: MapHandle,
    probe_counters: MapHandle,
    rates: MapHandle,
    sums: MapHandle,
    hist: MapHandle,
    hist_errno: MapHandle,
    id_state: MapHandle,
    /// Each thread's registered context record and the count of doubts
    /// that every record is there, where the kernel has task-storage uptrs
    /// and the runtime asked for them.
    ctx_records: Option<(MapHandle, MapHandle)>,
}

/// Seeds every CPU's id state (`kspan_id_state`, SplitMix64 in
/// `kspan_new_id`) with random bits: unseeded, every CPU would hand out the
/// same ids.
fn seed_ids(map: &MapHandle) -> Result<(), libbpf_rs::Error> {
    let cpus = libbpf_rs::num_possible_cpus()?;
    let mut seeds = vec![0u8; cpus * 8];
    let mut filled = 0;
    while filled < seeds.len() {
        let rest = &mut seeds[filled..];
        // SAFETY: `rest` is a live, writable buffer of `rest.len()` bytes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(libbpf_rs::Error::from(e));
        }
        filled += n as usize;
    }
    let per_cpu: Vec<Vec<u8>> = seeds.chunks(8).map(<[u8]>::to_vec).collect();
    map.update_percpu(&0u32.to_ne_bytes(), &per_cpu, MapFlags::ANY)
}

/// The kernel's per-CPU counters, summed (`enum kspan_counter` of kspan.h).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KernelCounters {
    pub ring_buffer_full: u64,
    pub stack_depth: u64,
    pub lost_exit: u64,
    pub unmatched_exit: u64,
    pub no_storage: u64,
    pub emitted: u64,
    pub unsampled: u64,
    pub orphans: u64,
    pub overload: u64,
    pub suppressed: u64,
    pub sum_failed: u64,
}

/// Calls of one probe that were recorded but not made into spans.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ProbeCounters {
    pub filtered: u64,
    pub rate_limited: u64,
    pub no_spans: u64,
}

/// One histogram row of `kspan.h` (`struct kspan_hist_row`), summed over
/// the CPUs: calls per bucket, then the sum of their durations in ns.
pub(crate) type HistogramRow = [u64; kspan_bpf::consts::KSPAN_HIST_BUCKETS as usize + 1];

/// One probe's histogram rows, summed over the CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KernelHistogram {
    /// Calls that did not fail.
    pub succeeded: HistogramRow,
    /// Calls that returned an errno.
    pub failed: HistogramRow,
    /// The failed calls by errno, as far as `kspan_hist_errno` had room.
    pub by_errno: Vec<(u16, HistogramRow)>,
}

/// Sums per-CPU values of 8-byte slots: `per_cpu[cpu]` holds `into.len()`
/// native-endian u64s (or fewer, read as missing).
fn sum_per_cpu(per_cpu: &[Vec<u8>], into: &mut [u64]) {
    for cpu in per_cpu {
        for (slot, bytes) in into.iter_mut().zip(cpu.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(bytes);
            *slot = slot.wrapping_add(u64::from_ne_bytes(b));
        }
    }
}

/// Slot `index` of the per-CPU counter array `map`, summed over the CPUs.
fn percpu_count(map: &MapHandle, name: &'static str, index: u32) -> Result<u64, MapError> {
    let per_cpu = map
        .lookup_percpu(&index.to_ne_bytes(), MapFlags::ANY)
        .map_err(|source| MapError { map: name, source })?
        .unwrap_or_default();
    let mut total = [0u64; 1];
    sum_per_cpu(&per_cpu, &mut total);
    Ok(total[0])
}

impl SharedMaps {
    /// The histograms of `probe_ids`, summed over the CPUs, in that order.
    pub(crate) fn histograms(&self, probe_ids: &[u32]) -> Result<Vec<KernelHistogram>, MapError> {
        let hist_err = |source| MapError {
            map: "kspan_hist",
            source,
        };
        let row = |index: u32| -> Result<HistogramRow, MapError> {
            let mut out: HistogramRow = [0; kspan_bpf::consts::KSPAN_HIST_BUCKETS as usize + 1];
            let per_cpu = self
                .hist
                .lookup_percpu(&index.to_ne_bytes(), MapFlags::ANY)
                .map_err(hist_err)?
                .unwrap_or_default();
            sum_per_cpu(&per_cpu, &mut out);
            Ok(out)
        };
        let mut out: Vec<KernelHistogram> = probe_ids
            .iter()
            .map(|&id| {
                Ok(KernelHistogram {
                    succeeded: row(id.saturating_mul(2))?,
                    failed: row(id.saturating_mul(2).saturating_add(1))?,
                    by_errno: Vec::new(),
                })
            })
            .collect::<Result<_, MapError>>()?;
        // The per-errno keys: {probe_id u32, errno u16, slot u16}. Read
        // after the rows, so that calls counted in between make the errno
        // series ahead of the failed row, never behind: the failed calls
        // not kept by errno (`_OTHER`) are then under-read for a moment,
        // and made good at the next read, never over-read.
        let errno_err = |source| MapError {
            map: "kspan_hist_errno",
            source,
        };
        let buckets = kspan_bpf::consts::KSPAN_HIST_BUCKETS as usize;
        for key in self.hist_errno.keys() {
            let (Some(id), Some(nr), Some(slot)) = (
                key.get(0..4)
                    .and_then(|b| b.try_into().ok())
                    .map(u32::from_ne_bytes),
                key.get(4..6)
                    .and_then(|b| b.try_into().ok())
                    .map(u16::from_ne_bytes),
                key.get(6..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u16::from_ne_bytes),
            ) else {
                continue;
            };
            let Some(at) = probe_ids.iter().position(|&p| p == id) else {
                continue;
            };
            let slot = usize::from(slot);
            if slot > buckets {
                continue;
            }
            // A key inserted a moment ago and deleted never: absent is 0.
            let per_cpu = self
                .hist_errno
                .lookup_percpu(&key, MapFlags::ANY)
                .map_err(errno_err)?
                .unwrap_or_default();
            let mut value = [0u64; 1];
            sum_per_cpu(&per_cpu, &mut value);
            let by_errno = &mut out[at].by_errno;
            let i = match by_errno.iter().position(|(e, _)| *e == nr) {
                Some(i) => i,
                None => {
                    by_errno.push((nr, [0; kspan_bpf::consts::KSPAN_HIST_BUCKETS as usize + 1]));
                    by_errno.len() - 1
                }
            };
            let entry = &mut by_errno[i].1;
            entry[slot] = entry[slot].wrapping_add(value[0]);
        }
        Ok(out)
    }

    /// Sums the per-CPU kernel counters.
    pub(crate) fn counters(&self) -> Result<KernelCounters, MapError> {
        use kspan_bpf::consts as c;
        let read = |index: u64| percpu_count(&self.counters, names::COUNTERS_MAP, index as u32);
        Ok(KernelCounters {
            sum_failed: read(c::KSPAN_CTR_SUM_FAILED)?,
            ring_buffer_full: read(c::KSPAN_CTR_RINGBUF_FULL)?,
            stack_depth: read(c::KSPAN_CTR_STACK_DEPTH)?,
            lost_exit: read(c::KSPAN_CTR_LOST_EXIT)?,
            unmatched_exit: read(c::KSPAN_CTR_UNMATCHED_EXIT)?,
            no_storage: read(c::KSPAN_CTR_NO_STORAGE)?,
            emitted: read(c::KSPAN_CTR_EMITTED)?,
            unsampled: read(c::KSPAN_CTR_UNSAMPLED)?,
            orphans: read(c::KSPAN_CTR_ORPHAN)?,
            overload: read(c::KSPAN_CTR_OVERLOAD)?,
            suppressed: read(c::KSPAN_CTR_SUPPRESSED)?,
        })
    }

    /// The per-probe counters of the first `probes` probes, summed over the
    /// CPUs.
    pub(crate) fn probe_counters(&self, probes: usize) -> Result<Vec<ProbeCounters>, MapError> {
        use kspan_bpf::consts as c;
        let per_probe = c::KSPAN_PCTR_COUNT as usize;
        let mut out = vec![ProbeCounters::default(); probes];
        for (probe, counters) in out.iter_mut().enumerate() {
            let read = |reason: u64| {
                let index = (probe * per_probe) as u32 + reason as u32;
                percpu_count(&self.probe_counters, names::PROBE_COUNTERS_MAP, index)
            };
            *counters = ProbeCounters {
                filtered: read(c::KSPAN_PCTR_FILTERED)?,
                rate_limited: read(c::KSPAN_PCTR_RATE_LIMITED)?,
                no_spans: read(c::KSPAN_PCTR_NO_SPANS)?,
            };
        }
        Ok(out)
    }

    /// A handle of its own to the table of sums by application span.
    pub(crate) fn sums_handle(&self) -> Result<MapHandle, MapError> {
        MapHandle::try_from(&self.sums).map_err(|source| MapError {
            map: names::SUMS_MAP,
            source,
        })
    }

    /// Turns recording on or off in every program at once.
    pub(crate) fn set_enabled(&self, on: bool) -> Result<(), MapError> {
        self.control
            .update(
                &0u32.to_ne_bytes(),
                &u32::from(on).to_ne_bytes(),
                MapFlags::ANY,
            )
            .map_err(|source| MapError {
                map: names::CONTROL_MAP,
                source,
            })
    }

    /// The maps of registered thread-context records, when the programs
    /// have them.
    pub(crate) fn context_records(&self) -> Option<Result<ContextRecordMaps, MapError>> {
        let (records, pending) = self.ctx_records.as_ref()?;
        Some(ContextRecordMaps::new(records, pending))
    }
}

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
    fn new(records: &MapHandle, pending: &MapHandle) -> Result<Self, MapError> {
        let handle = |map: &MapHandle, name: &'static str| {
            MapHandle::try_from(map).map_err(|source| MapError { map: name, source })
        };
        let records = handle(records, names::CTX_RECORDS_MAP)?;
        let pending_map = handle(pending, names::CTX_PENDING_MAP)?;
        let pending = super::sys::map_values(pending_map.as_fd())
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
        unsafe { super::sys::unmap_values(self.pending.cast()) };
    }
}

/// What one load leaves: the programs asked for, what further copies of them
/// are made from, and the shared maps when this load made them.
#[derive(Debug)]
pub(crate) struct LoadedPrograms {
    /// The programs, in the order asked for.
    pub programs: Vec<(Program, OwnedFd)>,
    /// Templates of the programs loaded (see [`super::copies`]).
    pub templates: Vec<(Program, ProgramTemplate)>,
    /// The shared maps, when no `shared` were given.
    pub maps: Option<SharedMaps>,
}

impl LoadedPrograms {
    /// The descriptor of `program`.
    pub(crate) fn take(&mut self, program: Program) -> Option<OwnedFd> {
        let at = self.programs.iter().position(|(p, _)| *p == program)?;
        Some(self.programs.swap_remove(at).1)
    }
}

/// Tells libbpf, once per process, the sections of the object it does not
/// know: `fsession.multi` (a tracing program of attach type
/// `BPF_TRACE_FSESSION_MULTI`, loaded with no target; libbpf 1.7 has
/// fsession but not its multi-function form). This is libbpf's own
/// extension point for custom sections. Without it (a libbpf that refuses
/// the registration) that program cannot load, and fsession.multi batches
/// fall back to one function at a time, saying why.
fn register_sections() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        let opts = libbpf_rs::libbpf_sys::libbpf_prog_handler_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::libbpf_prog_handler_opts>() as _,
            ..Default::default()
        };
        // SAFETY: the section name is a NUL-terminated static string and
        // `opts` is initialised with its size; libbpf copies both.
        let id = unsafe {
            libbpf_rs::libbpf_sys::libbpf_register_prog_handler(
                c"fsession.multi".as_ptr(),
                libbpf_rs::libbpf_sys::BPF_PROG_TYPE_TRACING,
                super::sys::BPF_TRACE_FSESSION_MULTI,
                &opts,
            )
        };
        if id < 0 {
            tracing::debug!(errno = -id, "libbpf refused kspan's fsession.multi section");
        }
    });
}

/// Loads the programs of `request` through libbpf.
pub(crate) fn load(request: &LoadRequest<'_>) -> Result<LoadedPrograms, LoadError> {
    let fail = |source: libbpf_rs::Error, verifier_log: Option<String>| {
        LoadError::new(request.function, request.hook, source, verifier_log)
    };
    register_sections();
    let mut storage = MaybeUninit::<OpenObject>::uninit();
    let mut open = KspanSkelBuilder::default()
        .open(&mut storage)
        .map_err(|e| fail(e, None))?;
    match open.maps.rodata_data.as_deref_mut() {
        Some(rodata) => rodata.kspan_cfg = *request.config,
        None => {
            return Err(fail(
                libbpf_rs::Error::from(std::io::Error::from(std::io::ErrorKind::InvalidData)),
                None,
            ))
        }
    }
    if request.shared.is_none() {
        open.maps
            .kspan_events
            .set_max_entries(request.ring_buffer_bytes)
            .map_err(|e| fail(e, None))?;
        if !request.entry_values {
            open.maps
                .kspan_entry_caps
                .set_max_entries(1)
                .map_err(|e| fail(e, None))?;
        }
        let probes = request.probes.max(1);
        open.maps
            .kspan_probe_counters
            .set_max_entries(probes * kspan_bpf::consts::KSPAN_PCTR_COUNT as u32)
            .map_err(|e| fail(e, None))?;
        open.maps
            .kspan_rates
            .set_max_entries(probes)
            .map_err(|e| fail(e, None))?;
        if !request.sums {
            open.maps
                .kspan_sums
                .set_max_entries(1)
                .map_err(|e| fail(e, None))?;
        }
        let sizes = request.histograms;
        open.maps
            .kspan_hist
            .set_max_entries(sizes.probes.saturating_mul(2).max(1))
            .map_err(|e| fail(e, None))?;
        open.maps
            .kspan_hist_errno
            .set_max_entries(sizes.errno_keys.max(1))
            .map_err(|e| fail(e, None))?;
    }
    if let Some(shared) = request.shared {
        for (map, with) in [
            (&mut open.maps.kspan_events, &shared.events),
            (&mut open.maps.kspan_stacks, &shared.stacks),
            (&mut open.maps.kspan_counters, &shared.counters),
            (&mut open.maps.kspan_control, &shared.control),
            (&mut open.maps.kspan_entry_caps, &shared.entry_values),
            (&mut open.maps.kspan_zero, &shared.zero),
            (&mut open.maps.kspan_probe_counters, &shared.probe_counters),
            (&mut open.maps.kspan_rates, &shared.rates),
            (&mut open.maps.kspan_sums, &shared.sums),
            (&mut open.maps.kspan_hist, &shared.hist),
            (&mut open.maps.kspan_hist_errno, &shared.hist_errno),
            (&mut open.maps.kspan_id_state, &shared.id_state),
        ] {
            map.reuse_fd(with.as_fd()).map_err(|e| fail(e, None))?;
        }
    }
    // Without it the programs never reach the map (`ctx_records` 0): not
    // made, libbpf poisons their references to it. On kernels without
    // uptrs the map could not be made as declared anyway.
    match request
        .shared
        .and_then(|shared| shared.ctx_records.as_ref())
    {
        Some((records, pending)) if request.config.ctx_records != 0 => {
            open.maps
                .kspan_ctx_records
                .reuse_fd(records.as_fd())
                .map_err(|e| fail(e, None))?;
            open.maps
                .kspan_ctx_pending
                .reuse_fd(pending.as_fd())
                .map_err(|e| fail(e, None))?;
        }
        _ if request.config.ctx_records != 0 && request.shared.is_none() => {}
        _ => {
            open.maps
                .kspan_ctx_records
                .set_autocreate(false)
                .map_err(|e| fail(e, None))?;
            open.maps
                .kspan_ctx_pending
                .set_autocreate(false)
                .map_err(|e| fail(e, None))?;
        }
    }
    let mut logs: Vec<(Program, Vec<u8>)> = Vec::new();
    for program in Program::ALL {
        let prog = program.in_skeleton(&mut open.progs);
        if !request.programs.contains(&program) {
            prog.set_autoload(false);
            continue;
        }
        if request.hook.is_trampoline() && !program.is_multi_trampoline() {
            prog.set_attach_target(0, Some(request.function.to_owned()))
                .map_err(|e| fail(e, None))?;
        }
        let mut log = vec![0u8; VERIFIER_LOG_BYTES];
        // SAFETY: `prog` is the live libbpf program of `open`; the buffer
        // is `log`, which is kept in `logs` (its heap allocation does not
        // move) until after `open` is loaded and dropped.
        let rc = unsafe {
            libbpf_rs::libbpf_sys::bpf_program__set_log_buf(
                prog.as_libbpf_object().as_ptr(),
                log.as_mut_ptr().cast(),
                log.len() as _,
            )
        };
        if rc != 0 {
            return Err(fail(libbpf_rs::Error::from_raw_os_error(-rc), None));
        }
        logs.push((program, log));
    }
    let loaded = match open.load() {
        Ok(loaded) => loaded,
        Err(e) => {
            let verifier_log = logs.iter().find_map(|(_, log)| verifier_log(log));
            return Err(fail(e, verifier_log));
        }
    };
    let map_handle =
        |map: &libbpf_rs::MapMut<'_>| MapHandle::try_from(map).map_err(|e| fail(e, None));
    let maps = match request.shared {
        Some(_) => None,
        None => Some(SharedMaps {
            events: map_handle(&loaded.maps.kspan_events)?,
            stacks: map_handle(&loaded.maps.kspan_stacks)?,
            counters: map_handle(&loaded.maps.kspan_counters)?,
            control: map_handle(&loaded.maps.kspan_control)?,
            entry_values: map_handle(&loaded.maps.kspan_entry_caps)?,
            zero: map_handle(&loaded.maps.kspan_zero)?,
            probe_counters: map_handle(&loaded.maps.kspan_probe_counters)?,
            rates: map_handle(&loaded.maps.kspan_rates)?,
            sums: map_handle(&loaded.maps.kspan_sums)?,
            hist: map_handle(&loaded.maps.kspan_hist)?,
            hist_errno: map_handle(&loaded.maps.kspan_hist_errno)?,
            id_state: map_handle(&loaded.maps.kspan_id_state)?,
            ctx_records: if request.config.ctx_records != 0 {
                Some((
                    map_handle(&loaded.maps.kspan_ctx_records)?,
                    map_handle(&loaded.maps.kspan_ctx_pending)?,
                ))
            } else {
                None
            },
        }),
    };
    if let Some(maps) = &maps {
        seed_ids(&maps.id_state).map_err(|e| fail(e, None))?;
        // In doubt until the runtime has registered the records made
        // before it (see `ContextRecordMaps`).
        if let Some((_, pending)) = &maps.ctx_records {
            pending
                .update(&0u32.to_ne_bytes(), &1u32.to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| fail(e, None))?;
        }
    }
    let rodata_fd = loaded.maps.rodata.as_fd().as_raw_fd();
    // The object's descriptors of the shared maps, and the lasting ones.
    let lasting = request.shared.or(maps.as_ref()).map(|shared| {
        let mut pairs = vec![
            (&loaded.maps.kspan_events, &shared.events),
            (&loaded.maps.kspan_stacks, &shared.stacks),
            (&loaded.maps.kspan_counters, &shared.counters),
            (&loaded.maps.kspan_control, &shared.control),
            (&loaded.maps.kspan_entry_caps, &shared.entry_values),
            (&loaded.maps.kspan_zero, &shared.zero),
            (&loaded.maps.kspan_probe_counters, &shared.probe_counters),
            (&loaded.maps.kspan_rates, &shared.rates),
            (&loaded.maps.kspan_sums, &shared.sums),
            (&loaded.maps.kspan_hist, &shared.hist),
            (&loaded.maps.kspan_hist_errno, &shared.hist_errno),
            (&loaded.maps.kspan_id_state, &shared.id_state),
        ];
        if let Some((records, pending)) = &shared.ctx_records {
            pairs.push((&loaded.maps.kspan_ctx_records, records));
            pairs.push((&loaded.maps.kspan_ctx_pending, pending));
        }
        pairs
            .into_iter()
            .map(|(object, kept)| (object.as_fd().as_raw_fd(), kept.as_fd().as_raw_fd()))
            .collect::<Vec<_>>()
    });
    // A descriptor of the templates' own to the object's BTF, which their
    // records refer to: libbpf's closes with the object.
    // SAFETY: the object is live and loaded.
    let btf_fd = unsafe {
        libbpf_rs::libbpf_sys::bpf_object__btf_fd(loaded.object().as_libbpf_object().as_ptr())
    };
    let btf = if btf_fd >= 0 {
        // SAFETY: libbpf's descriptor of the object's BTF, open until the
        // object is dropped below; only duplicated here.
        let borrowed = unsafe { BorrowedFd::borrow_raw(btf_fd) };
        let owned = borrowed
            .try_clone_to_owned()
            .map_err(|e| fail(libbpf_rs::Error::from(e), None))?;
        Some(Arc::new(owned))
    } else {
        None
    };
    let mut programs = Vec::new();
    let mut templates = Vec::new();
    for &program in request.programs {
        let prog = match program {
            Program::Fentry => &loaded.progs.kspan_fentry,
            Program::Fexit => &loaded.progs.kspan_fexit,
            Program::Kprobe => &loaded.progs.kspan_kprobe,
            Program::Kretprobe => &loaded.progs.kspan_kretprobe,
            Program::KprobeMulti => &loaded.progs.kspan_kprobe_multi,
            Program::KretprobeMulti => &loaded.progs.kspan_kretprobe_multi,
            Program::Fsession => &loaded.progs.kspan_fsession,
            Program::FsessionMulti => &loaded.progs.kspan_fsession_multi,
            Program::PlainFsessionMulti => &loaded.progs.kspan_plain_fsession_multi,
            Program::KprobeSession => &loaded.progs.kspan_kprobe_session,
            Program::SysEnter => &loaded.progs.kspan_sys_enter,
            Program::SysExit => &loaded.progs.kspan_sys_exit,
        };
        let fd = prog
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| fail(libbpf_rs::Error::from(e), None))?;
        programs.push((program, fd));
        if let Some(template) = ProgramTemplate::new(
            prog,
            rodata_fd,
            lasting.as_ref().map_or(&[], |m| &m[..]),
            btf.clone(),
        ) {
            templates.push((program, template));
        }
    }
    drop(loaded);
    drop(logs);
    Ok(LoadedPrograms {
        programs,
        templates,
        maps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hook_has_its_programs() {
        assert_eq!(Program::of(Hook::Fentry), (Program::Fentry, None));
        assert_eq!(
            Program::of(Hook::Syscall),
            (Program::SysEnter, Some(Program::SysExit))
        );
        assert_eq!(
            Program::multi_of(Hook::Kretprobe),
            (Program::KprobeMulti, Some(Program::KretprobeMulti))
        );
    }
}
