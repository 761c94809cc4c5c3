// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The maps every loaded program shares ([`SharedMaps`]): made once, up
//! front, from a [`MapSpec`] the runtime's settings give
//! ([`MapSpec::create`]), reused by every load, and read by user
//! space: the kernel's counters, each probe's counters and histograms, the
//! sums by application span, the switch that turns recording on and off,
//! and the scheduler account's tables when it is on.

use kspan_bpf::names;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;

use libbpf_rs::skel::OpenSkel;
use libbpf_rs::{ErrorExt as _, MapCore, MapFlags, MapHandle, OpenObject};

use super::config::{HistogramSizes, RuntimeSettings};
use super::context_records::ContextRecordMaps;
use super::counters::MappedCounters;
use super::error::MapError;
use super::program::Program;
use super::skeleton::{open_object, LoadFailure};
use super::span_table::SpanTable;

/// What the shared maps are made for: their sizes, and which optional ones
/// are made at all.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MapSpec {
    /// Bytes of the ring buffer.
    pub ring_buffer_bytes: u32,
    /// Some probe reads captures at entry (else the map carrying them has
    /// one entry).
    pub entry_values: bool,
    /// How many probes the runtime has: the per-probe maps get one slot
    /// each.
    pub probes: u32,
    /// Some probe sums its calls onto application spans: the sums map gets
    /// its full size.
    pub sums: bool,
    /// The histogram maps' sizes.
    pub histograms: HistogramSizes,
    /// The map of registered thread-context records (task-storage uptrs).
    pub context_records: bool,
    /// The scheduler account's tables.
    pub account: bool,
    /// The probes' stacks are by thread id (no task local storage), with
    /// the program that empties a thread's at its exit.
    pub stacks_by_tid: bool,
    /// The programs built for older kernels are loaded (see
    /// `kspan_bpf::LEGACY_OBJECT`).
    pub legacy_programs: bool,
    /// The kernel charges BPF memory to `RLIMIT_MEMLOCK` (before 5.11).
    pub memlock_charged: bool,
}

/// What to do where the kernel charges kspan's maps to `RLIMIT_MEMLOCK`
/// (before Linux 5.11) and refused them, with the limit now.
fn memlock_fix() -> String {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a live, writable rlimit.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } == 0;
    let now = match (read, limit.rlim_cur) {
        (false, _) => "unknown".to_owned(),
        (true, libc::RLIM_INFINITY) => "unlimited".to_owned(),
        (true, bytes) => format!("{bytes} bytes"),
    };
    format!(
        "this kernel (before 5.11) charges BPF maps to RLIMIT_MEMLOCK (now {now}), which \
         kspan could not raise: raise it for the service (systemd `LimitMEMLOCK=infinity`, \
         `ulimit -l unlimited`, `docker run --ulimit memlock=-1`) or grant it \
         CAP_SYS_RESOURCE"
    )
}

/// Threads whose open calls the map by thread id holds at once (where the
/// kernel has no task local storage): a thread past it records none,
/// counted as `no_storage`.
pub(crate) const STACKS_BY_TID_MAX: u32 = 4096;

impl MapSpec {
    /// The maps `settings` need, with the account's when `account`.
    pub(crate) fn of(settings: &RuntimeSettings, account: bool) -> Self {
        MapSpec {
            ring_buffer_bytes: settings.ring_buffer_bytes,
            entry_values: settings.entry_values,
            probes: settings.probes,
            sums: settings.sums,
            histograms: settings.histograms,
            context_records: settings.thread_context.registered_records,
            account,
            stacks_by_tid: !settings.kernel.task_storage(),
            legacy_programs: settings.kernel.legacy_programs,
            memlock_charged: settings.kernel.memlock_charged,
        }
    }

    /// Makes them ([`create_maps`]).
    pub(crate) fn create(&self) -> Result<SharedMaps, MapError> {
        let mut maps = create_maps(self).map_err(|failure| {
            // EPERM and EACCES both.
            let refused = failure.source.kind() == libbpf_rs::ErrorKind::PermissionDenied;
            MapError {
                map: "kspan's shared maps",
                source: if self.memlock_charged && refused {
                    failure.source.context(memlock_fix())
                } else {
                    failure.source
                },
            }
        })?;
        // Attached before any probe: no thread's stack outlives it.
        if let Some(prog) = maps.task_exit.take() {
            let link = super::sys::attach_raw_tracepoint(prog.as_fd(), c"sched_process_exit")
                .map_err(|e| MapError {
                    map: "kspan_stacks_by_tid",
                    source: libbpf_rs::Error::from(e).context(
                        "attaching raw_tracepoint/sched_process_exit, which empties each \
                         thread's stack at its exit",
                    ),
                })?;
            maps.task_exit = Some(link);
        }
        Ok(maps)
    }
}

/// Makes the maps every program shares, sized by `spec`, by loading kspan's
/// object with no program: every later load reuses them
/// ([`super::object::LoadRequest::shared`]).
fn create_maps(spec: &MapSpec) -> Result<SharedMaps, LoadFailure> {
    // The build of the programs this kernel takes, for this and every
    // later open: one kernel runs the process.
    kspan_bpf::use_legacy_object(spec.legacy_programs);
    let mut storage = MaybeUninit::<OpenObject>::uninit();
    let mut open = open_object(&mut storage)?;
    let maps = &mut open.maps;
    maps.kspan_events.set_max_entries(spec.ring_buffer_bytes)?;
    if !spec.entry_values {
        maps.kspan_entry_caps.set_max_entries(1)?;
    }
    let probes = spec.probes.max(1);
    let cpus = libbpf_rs::num_possible_cpus()? as u32;
    maps.kspan_counters
        .set_max_entries(cpus * kspan_bpf::consts::KSPAN_CTR_STRIDE as u32)?;
    maps.kspan_probe_counters
        .set_max_entries(cpus * super::config::probe_counters_stride(probes))?;
    maps.kspan_rates.set_max_entries(probes)?;
    if !spec.sums {
        maps.kspan_sums.set_max_entries(1)?;
    }
    maps.kspan_hist
        .set_max_entries(cpus * spec.histograms.rows())?;
    maps.kspan_hist_errno
        .set_max_entries(spec.histograms.errno_rows.max(1))?;
    // On kernels without task-storage uptrs the map of registered records
    // could not be made as declared: made only where asked for.
    maps.kspan_ctx_records
        .set_autocreate(spec.context_records)?;
    maps.kspan_ctx_pending
        .set_autocreate(spec.context_records)?;
    // The account's maps: its programs alone use them.
    for map in [
        &mut maps.kspan_sched_tasks,
        &mut maps.kspan_sched_spans,
        &mut maps.kspan_sched_open,
        &mut maps.kspan_block_requests,
        &mut maps.kspan_block_done,
        &mut maps.kspan_block_bios,
    ] {
        map.set_autocreate(spec.account)?;
    }
    maps.kspan_stacks.set_autocreate(!spec.stacks_by_tid)?;
    maps.kspan_stacks_by_tid
        .set_autocreate(spec.stacks_by_tid)?;
    if spec.stacks_by_tid {
        maps.kspan_stacks_by_tid
            .set_max_entries(STACKS_BY_TID_MAX)?;
    }
    for program in Program::ALL {
        program
            .in_skeleton(&mut open.progs)
            .set_autoload(spec.stacks_by_tid && program == Program::TaskExit);
    }
    let loaded = open.load()?;
    let task_exit = spec
        .stacks_by_tid
        .then(|| {
            Program::TaskExit
                .in_loaded(&loaded)
                .as_fd()
                .try_clone_to_owned()
        })
        .transpose()
        .map_err(|e| LoadFailure::new(libbpf_rs::Error::from(e)))?;
    let handle = |map: &libbpf_rs::MapMut<'_>| MapHandle::try_from(map);
    let maps = &loaded.maps;
    let shared = SharedMaps {
        events: handle(&maps.kspan_events)?,
        stacks: if spec.stacks_by_tid {
            handle(&maps.kspan_stacks_by_tid)?
        } else {
            handle(&maps.kspan_stacks)?
        },
        stacks_by_tid: spec.stacks_by_tid,
        task_exit,
        counters: handle(&maps.kspan_counters)?,
        counter_values: MappedCounters::new(
            &handle(&maps.kspan_counters)?,
            kspan_bpf::names::COUNTERS_MAP,
        )
        .map_err(|e| LoadFailure::new(e.source))?,
        probe_counter_values: MappedCounters::new(
            &handle(&maps.kspan_probe_counters)?,
            kspan_bpf::names::PROBE_COUNTERS_MAP,
        )
        .map_err(|e| LoadFailure::new(e.source))?,
        probe_counters_stride: super::config::probe_counters_stride(spec.probes),
        hist_values: MappedCounters::new(&handle(&maps.kspan_hist)?, "kspan_hist")
            .map_err(|e| LoadFailure::new(e.source))?,
        hist_errno_values: MappedCounters::new(
            &handle(&maps.kspan_hist_errno)?,
            "kspan_hist_errno",
        )
        .map_err(|e| LoadFailure::new(e.source))?,
        hist_rows: spec.histograms.rows(),
        control: handle(&maps.kspan_control)?,
        entry_values: handle(&maps.kspan_entry_caps)?,
        zero: handle(&maps.kspan_zero)?,
        probe_counters: handle(&maps.kspan_probe_counters)?,
        rates: handle(&maps.kspan_rates)?,
        sums: handle(&maps.kspan_sums)?,
        hist: handle(&maps.kspan_hist)?,
        hist_errno: handle(&maps.kspan_hist_errno)?,
        id_state: handle(&maps.kspan_id_state)?,
        ctx_records: if spec.context_records {
            Some((
                handle(&maps.kspan_ctx_records)?,
                handle(&maps.kspan_ctx_pending)?,
            ))
        } else {
            None
        },
        account: if spec.account {
            Some(AccountMaps {
                tasks: handle(&maps.kspan_sched_tasks)?,
                spans: handle(&maps.kspan_sched_spans)?,
                open: handle(&maps.kspan_sched_open)?,
                block_requests: handle(&maps.kspan_block_requests)?,
                block_done: handle(&maps.kspan_block_done)?,
                block_bios: handle(&maps.kspan_block_bios)?,
            })
        } else {
            None
        },
    };
    seed_ids(&shared.id_state)?;
    // In doubt until the runtime has registered the records made before
    // it (see `ContextRecordMaps`).
    if let Some((_, pending)) = &shared.ctx_records {
        pending.update(&0u32.to_ne_bytes(), &1u32.to_ne_bytes(), MapFlags::ANY)?;
    }
    Ok(shared)
}

/// The scheduler account's tables: made with the shared maps when the
/// account is on, used by its programs alone.
#[derive(Debug)]
pub(crate) struct AccountMaps {
    pub(super) tasks: MapHandle,
    /// The totals per application span (`kspan_sched_spans`).
    pub spans: MapHandle,
    /// Each thread's open off-CPU interval (`kspan_sched_open`).
    pub open: MapHandle,
    pub(super) block_requests: MapHandle,
    pub(super) block_done: MapHandle,
    pub(super) block_bios: MapHandle,
}

/// The maps every loaded program uses, made up front.
#[derive(Debug)]
pub(crate) struct SharedMaps {
    /// Finished spans.
    pub events: MapHandle,
    /// The probes' stacks: task storage, or by thread id
    /// (`stacks_by_tid`), emptied at each thread's exit by `task_exit`.
    pub(super) stacks: MapHandle,
    pub(super) stacks_by_tid: bool,
    /// The program that empties a thread's stack at its exit, then its
    /// link: held, it lives as long as the maps.
    pub(super) task_exit: Option<std::os::fd::OwnedFd>,
    pub(super) counters: MapHandle,
    /// `counters` and `probe_counters`, mapped: read with no system call.
    pub(super) counter_values: MappedCounters,
    pub(super) probe_counter_values: MappedCounters,
    /// Slots a CPU has in `probe_counters`.
    pub(super) probe_counters_stride: u32,
    /// `hist` and `hist_errno`, mapped, and the rows a CPU has in `hist`.
    pub(super) hist_values: MappedCounters,
    pub(super) hist_errno_values: MappedCounters,
    pub(super) hist_rows: u32,
    pub(super) control: MapHandle,
    pub(super) entry_values: MapHandle,
    pub(super) zero: MapHandle,
    pub(super) probe_counters: MapHandle,
    pub(super) rates: MapHandle,
    pub(super) sums: MapHandle,
    pub(super) hist: MapHandle,
    pub(super) hist_errno: MapHandle,
    pub(super) id_state: MapHandle,
    /// Each thread's registered context record and the count of doubts
    /// that every record is there, where the kernel has task-storage uptrs
    /// and the runtime asked for them.
    pub(super) ctx_records: Option<(MapHandle, MapHandle)>,
    /// The scheduler account's tables, when it is on.
    pub(super) account: Option<AccountMaps>,
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
    pub sched_missed: u64,
    pub descendant_dropped: u64,
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

impl SharedMaps {
    /// The histograms of `probe_ids`, summed over the CPUs, in that order
    /// (from memory: no system call).
    pub(crate) fn histograms(&self, probe_ids: &[u32]) -> Vec<KernelHistogram> {
        const ROW: usize = kspan_bpf::consts::KSPAN_HIST_BUCKETS as usize + 1;
        let rows = &self.hist_values;
        let stride = self.hist_rows as usize * ROW;
        let row = |index: u32| -> HistogramRow {
            let mut out: HistogramRow = [0; ROW];
            for (w, total) in out.iter_mut().enumerate() {
                *total = rows.sum(stride, index as usize * ROW + w);
            }
            out
        };
        let mut out: Vec<KernelHistogram> = probe_ids
            .iter()
            .map(|&id| KernelHistogram {
                succeeded: row(id.saturating_mul(2)),
                failed: row(id.saturating_mul(2).saturating_add(1)),
                by_errno: Vec::new(),
            })
            .collect();
        // The errno rows: a key of (probe id + 1) << 16 | errno, then a
        // row. Read after the rows, so that calls counted in between make
        // the errno series ahead of the failed row, never behind: the
        // failed calls not kept by errno (`_OTHER`) are then under-read
        // for a moment, and made good at the next read, never over-read.
        let table = &self.hist_errno_values;
        let words = table.value_words();
        for slot in 0..table.values() {
            let key = table.word(slot * words);
            let Some(id) = (key >> 16).checked_sub(1) else {
                continue;
            };
            let Some(at) = probe_ids.iter().position(|&p| u64::from(p) == id) else {
                continue;
            };
            let mut errno_row: HistogramRow = [0; ROW];
            for (w, value) in errno_row.iter_mut().enumerate() {
                *value = table.word(slot * words + 1 + w);
            }
            out[at].by_errno.push(((key & 0xffff) as u16, errno_row));
        }
        out
    }

    /// Sums the per-CPU kernel counters (from memory: no system call).
    pub(crate) fn counters(&self) -> KernelCounters {
        use kspan_bpf::consts as c;
        let read = |index: u64| {
            self.counter_values
                .sum(c::KSPAN_CTR_STRIDE as usize, index as usize)
        };
        KernelCounters {
            sum_failed: read(c::KSPAN_CTR_SUM_FAILED),
            sched_missed: read(c::KSPAN_CTR_SCHED_MISSED),
            descendant_dropped: read(c::KSPAN_CTR_DESCENDANT_DROPPED),
            ring_buffer_full: read(c::KSPAN_CTR_RINGBUF_FULL),
            stack_depth: read(c::KSPAN_CTR_STACK_DEPTH),
            lost_exit: read(c::KSPAN_CTR_LOST_EXIT),
            unmatched_exit: read(c::KSPAN_CTR_UNMATCHED_EXIT),
            no_storage: read(c::KSPAN_CTR_NO_STORAGE),
            emitted: read(c::KSPAN_CTR_EMITTED),
            unsampled: read(c::KSPAN_CTR_UNSAMPLED),
            orphans: read(c::KSPAN_CTR_ORPHAN),
            overload: read(c::KSPAN_CTR_OVERLOAD),
            suppressed: read(c::KSPAN_CTR_SUPPRESSED),
        }
    }

    /// The per-probe counters of the first `probes` probes, summed over the
    /// CPUs (from memory: no system call).
    pub(crate) fn probe_counters(&self, probes: usize) -> Vec<ProbeCounters> {
        use kspan_bpf::consts as c;
        let per_probe = c::KSPAN_PCTR_COUNT as usize;
        let stride = self.probe_counters_stride as usize;
        (0..probes)
            .map(|probe| {
                let read = |reason: u64| {
                    self.probe_counter_values
                        .sum(stride, probe * per_probe + reason as usize)
                };
                ProbeCounters {
                    filtered: read(c::KSPAN_PCTR_FILTERED),
                    rate_limited: read(c::KSPAN_PCTR_RATE_LIMITED),
                    no_spans: read(c::KSPAN_PCTR_NO_SPANS),
                }
            })
            .collect()
    }

    /// The table of sums by application span, mapped.
    pub(crate) fn sums_table(&self) -> Result<SpanTable, MapError> {
        SpanTable::new(&self.sums, names::SUMS_MAP)
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
    /// The scheduler account's tables, when they were made.
    pub(crate) fn account(&self) -> Option<&AccountMaps> {
        self.account.as_ref()
    }

    /// Lets go of the map of registered records: programs loaded from now
    /// on read thread contexts from user memory.
    pub(crate) fn without_context_records(&mut self) {
        self.ctx_records = None;
    }

    /// have them.
    pub(crate) fn context_records(&self) -> Option<Result<ContextRecordMaps, MapError>> {
        let (records, pending) = self.ctx_records.as_ref()?;
        Some(ContextRecordMaps::new(records, pending))
    }
}
