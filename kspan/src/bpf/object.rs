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
use std::sync::Arc;

use kspan_bpf::types::kspan_config;
use kspan_bpf::KspanSkelBuilder;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{AsRawLibbpf, MapCore, MapFlags, MapHandle, OpenObject};

use super::config::HistogramSizes;
use super::copies::ProgramTemplate;
use super::counters::MappedCounters;
use super::error::{verifier_log, LoadError, VERIFIER_LOG_BYTES};
use super::maps::{seed_ids, SharedMaps};
use super::program::Program;
use crate::annotation::Hook;

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
    /// The scheduler's maps, when its programs were loaded.
    pub sched: Option<SchedMaps>,
}

/// The scheduler's maps user space reads.
#[derive(Debug)]
pub(crate) struct SchedMaps {
    /// The totals per application span (`kspan_sched_spans`).
    pub spans: MapHandle,
    /// Each thread's open off-CPU interval (`kspan_sched_open`).
    pub open: MapHandle,
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
        let cpus = libbpf_rs::num_possible_cpus().map_err(|e| fail(e, None))? as u32;
        open.maps
            .kspan_counters
            .set_max_entries(cpus * kspan_bpf::consts::KSPAN_CTR_STRIDE as u32)
            .map_err(|e| fail(e, None))?;
        open.maps
            .kspan_probe_counters
            .set_max_entries(cpus * super::config::probe_counters_stride(probes))
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
            .set_max_entries(cpus * sizes.rows())
            .map_err(|e| fail(e, None))?;
        open.maps
            .kspan_hist_errno
            .set_max_entries(sizes.errno_rows.max(1))
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
    // The scheduler's maps are its load's alone: no other program reads them.
    let sched = request.programs.iter().any(|p| p.is_sched());
    if !sched {
        open.maps
            .kspan_sched_tasks
            .set_autocreate(false)
            .map_err(|e| fail(e, None))?;
        open.maps
            .kspan_sched_spans
            .set_autocreate(false)
            .map_err(|e| fail(e, None))?;
        open.maps
            .kspan_sched_open
            .set_autocreate(false)
            .map_err(|e| fail(e, None))?;
        // The causes' block requests, and the last completion the
        // wake-up program reads.
        open.maps
            .kspan_block_requests
            .set_autocreate(false)
            .map_err(|e| fail(e, None))?;
        open.maps
            .kspan_block_done
            .set_autocreate(false)
            .map_err(|e| fail(e, None))?;
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
            counter_values: MappedCounters::new(
                &map_handle(&loaded.maps.kspan_counters)?,
                kspan_bpf::names::COUNTERS_MAP,
            )
            .map_err(|e| fail(e.source, None))?,
            probe_counter_values: MappedCounters::new(
                &map_handle(&loaded.maps.kspan_probe_counters)?,
                kspan_bpf::names::PROBE_COUNTERS_MAP,
            )
            .map_err(|e| fail(e.source, None))?,
            probe_counters_stride: super::config::probe_counters_stride(request.probes),
            hist_values: MappedCounters::new(&map_handle(&loaded.maps.kspan_hist)?, "kspan_hist")
                .map_err(|e| fail(e.source, None))?,
            hist_errno_values: MappedCounters::new(
                &map_handle(&loaded.maps.kspan_hist_errno)?,
                "kspan_hist_errno",
            )
            .map_err(|e| fail(e.source, None))?,
            hist_rows: request.histograms.rows(),
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
    let sched = if sched {
        Some(SchedMaps {
            spans: map_handle(&loaded.maps.kspan_sched_spans)?,
            open: map_handle(&loaded.maps.kspan_sched_open)?,
        })
    } else {
        None
    };
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
            Program::BtfSchedSwitch => &loaded.progs.kspan_tp_sched_switch,
            Program::BtfSchedWaking => &loaded.progs.kspan_tp_sched_waking,
            Program::SchedSwitch => &loaded.progs.kspan_sched_switch,
            Program::SchedWaking => &loaded.progs.kspan_sched_waking_tp,
            Program::BtfSchedWakeup => &loaded.progs.kspan_tp_sched_wakeup,
            Program::SchedWakeup => &loaded.progs.kspan_sched_wakeup_tp,
            Program::BtfLockBegin => &loaded.progs.kspan_tp_lock_begin,
            Program::BtfLockEnd => &loaded.progs.kspan_tp_lock_end,
            Program::LockBegin => &loaded.progs.kspan_lock_begin_tp,
            Program::LockEnd => &loaded.progs.kspan_lock_end_tp,
            Program::BtfBlockInsert => &loaded.progs.kspan_tp_block_insert,
            Program::BtfBlockIssue => &loaded.progs.kspan_tp_block_issue,
            Program::BtfBlockComplete => &loaded.progs.kspan_tp_block_complete,
            Program::BtfDirectReclaimBegin => &loaded.progs.kspan_tp_mm_vmscan_direct_reclaim_begin,
            Program::BtfDirectReclaimEnd => &loaded.progs.kspan_tp_mm_vmscan_direct_reclaim_end,
            Program::BtfMemcgReclaimBegin => &loaded.progs.kspan_tp_mm_vmscan_memcg_reclaim_begin,
            Program::BtfMemcgReclaimEnd => &loaded.progs.kspan_tp_mm_vmscan_memcg_reclaim_end,
            Program::BtfCompactionBegin => &loaded.progs.kspan_tp_mm_compaction_begin,
            Program::BtfCompactionEnd => &loaded.progs.kspan_tp_mm_compaction_end,
            Program::DirectReclaimBegin => &loaded.progs.kspan_mm_vmscan_direct_reclaim_begin_tp,
            Program::DirectReclaimEnd => &loaded.progs.kspan_mm_vmscan_direct_reclaim_end_tp,
            Program::MemcgReclaimBegin => &loaded.progs.kspan_mm_vmscan_memcg_reclaim_begin_tp,
            Program::MemcgReclaimEnd => &loaded.progs.kspan_mm_vmscan_memcg_reclaim_end_tp,
            Program::CompactionBegin => &loaded.progs.kspan_mm_compaction_begin_tp,
            Program::CompactionEnd => &loaded.progs.kspan_mm_compaction_end_tp,
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
        sched,
    })
}
