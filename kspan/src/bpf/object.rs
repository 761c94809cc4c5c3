// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Loading kspan's BPF object through its libbpf skeleton.
//!
//! Two steps, as libbpf's own open and load: the shared maps are made
//! once, up front, from the runtime's settings ([`create_maps`]: a
//! [`MapSpec`] in, [`SharedMaps`] out, the object loaded with no program);
//! then each load of programs ([`load`]) takes them as given. The
//! skeleton lives only for one load: the settings are written into its
//! typed `.rodata`, the programs wanted are chosen and targeted, the shared
//! maps are reused, and what outlives the load is taken out as owned
//! descriptors ([`LoadedPrograms`]) and program templates. libbpf's object
//! is then closed: links and copies hold their own references to what
//! they use.
//!
//! Each program gets a verifier-log buffer of its own for the load, so a
//! refusal carries its log without touching libbpf's process-wide print
//! callback, which stays the application's.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;

use kspan_bpf::types::kspan_config;
use kspan_bpf::{KspanSkel, OpenKspanSkel};
use libbpf_rs::skel::{OpenSkel, Skel};
use libbpf_rs::{AsRawLibbpf, OpenObject};

use super::copies::ProgramTemplate;
use super::error::{verifier_log, VERIFIER_LOG_BYTES};
use super::maps::SharedMaps;
use super::program::Program;
use super::skeleton::open_object;
pub(crate) use super::skeleton::LoadFailure;

/// What to load: programs of kspan's object, with their settings, over
/// the shared maps made up front ([`SharedMaps::create`]).
pub(crate) struct LoadRequest<'a> {
    /// The kernel function a trampoline program is loaded against (none
    /// for every other program).
    pub attach_target: Option<&'a str>,
    /// The settings written into `.rodata`.
    pub config: &'a kspan_config,
    /// The programs to load (the others are not).
    pub programs: &'a [Program],
    /// The maps every program shares.
    pub shared: &'a SharedMaps,
}

/// What one load leaves: the programs asked for, and what further copies
/// of them are made from.
#[derive(Debug)]
pub(crate) struct LoadedPrograms {
    /// The programs, in the order asked for.
    pub programs: Vec<(Program, OwnedFd)>,
    /// Templates of the programs loaded (see [`super::copies`]).
    pub templates: Vec<(Program, ProgramTemplate)>,
}

impl LoadedPrograms {
    /// The descriptor of `program`.
    pub(crate) fn take(&mut self, program: Program) -> Option<OwnedFd> {
        let at = self.programs.iter().position(|(p, _)| *p == program)?;
        Some(self.programs.swap_remove(at).1)
    }
}

/// Loads the programs of `request` through libbpf, over its shared maps.
pub(crate) fn load(request: &LoadRequest<'_>) -> Result<LoadedPrograms, LoadFailure> {
    let mut storage = MaybeUninit::<OpenObject>::uninit();
    let mut open = open_object(&mut storage)?;
    reuse_shared(&mut open, request)?;
    let logs = choose_programs(&mut open, request)?;
    let loaded = match open.load() {
        Ok(loaded) => loaded,
        Err(source) => {
            return Err(LoadFailure {
                source,
                verifier_log: logs.iter().find_map(|(_, log)| verifier_log(log)),
            });
        }
    };
    let lasting = lasting_maps(&loaded, request);
    let taken = take_programs(&loaded, request, &lasting);
    drop(loaded);
    drop(logs);
    taken
}

/// Writes `request`'s settings into `open`'s `.rodata` and has it reuse
/// the shared maps (the account's only where its programs are loaded; the
/// registered records only where the settings read them).
fn reuse_shared(
    open: &mut OpenKspanSkel<'_>,
    request: &LoadRequest<'_>,
) -> Result<(), LoadFailure> {
    let shared = request.shared;
    match open.maps.rodata_data.as_deref_mut() {
        Some(rodata) => rodata.kspan_cfg = *request.config,
        None => {
            return Err(LoadFailure::new(libbpf_rs::Error::from(
                std::io::Error::from(std::io::ErrorKind::InvalidData),
            )))
        }
    }
    let (stacks, unused) = if shared.stacks_by_tid {
        (
            &mut open.maps.kspan_stacks_by_tid,
            &mut open.maps.kspan_stacks,
        )
    } else {
        (
            &mut open.maps.kspan_stacks,
            &mut open.maps.kspan_stacks_by_tid,
        )
    };
    stacks.reuse_fd(shared.stacks.as_fd())?;
    // Never reached (`kernel_features`): not made, references poisoned.
    unused.set_autocreate(false)?;
    for (map, with) in [
        (&mut open.maps.kspan_events, &shared.events),
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
        map.reuse_fd(with.as_fd())?;
    }
    // Without it the programs never reach the map (`ctx_records` 0): not
    // made, libbpf poisons their references to it.
    match &shared.ctx_records {
        Some((records, pending)) if request.config.ctx_records != 0 => {
            open.maps.kspan_ctx_records.reuse_fd(records.as_fd())?;
            open.maps.kspan_ctx_pending.reuse_fd(pending.as_fd())?;
        }
        _ => {
            open.maps.kspan_ctx_records.set_autocreate(false)?;
            open.maps.kspan_ctx_pending.set_autocreate(false)?;
        }
    }
    // The account's maps: its programs alone use them.
    let account = shared
        .account
        .as_ref()
        .filter(|_| request.programs.iter().any(|p| p.is_sched()));
    for (map, with) in [
        (&mut open.maps.kspan_sched_tasks, account.map(|a| &a.tasks)),
        (&mut open.maps.kspan_sched_spans, account.map(|a| &a.spans)),
        (&mut open.maps.kspan_sched_open, account.map(|a| &a.open)),
        (
            &mut open.maps.kspan_block_requests,
            account.map(|a| &a.block_requests),
        ),
        (
            &mut open.maps.kspan_block_done,
            account.map(|a| &a.block_done),
        ),
        (
            &mut open.maps.kspan_block_bios,
            account.map(|a| &a.block_bios),
        ),
    ] {
        match with {
            Some(with) => map.reuse_fd(with.as_fd())?,
            None => map.set_autocreate(false)?,
        }
    }
    Ok(())
}

/// Loads only `request`'s programs, targeted where they are trampolines,
/// each with a verifier-log buffer of its own: kept, with its program,
/// until the object is loaded and dropped.
fn choose_programs(
    open: &mut OpenKspanSkel<'_>,
    request: &LoadRequest<'_>,
) -> Result<Vec<(Program, Vec<u8>)>, LoadFailure> {
    let mut logs: Vec<(Program, Vec<u8>)> = Vec::new();
    for program in Program::ALL {
        let prog = program.in_skeleton(&mut open.progs);
        if !request.programs.contains(&program) {
            prog.set_autoload(false);
            continue;
        }
        if let Some(function) = request
            .attach_target
            .filter(|_| !program.is_multi_trampoline())
        {
            prog.set_attach_target(0, Some(function.to_owned()))?;
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
            return Err(LoadFailure::new(libbpf_rs::Error::from_raw_os_error(-rc)));
        }
        logs.push((program, log));
    }
    Ok(logs)
}

/// The object's descriptors of the shared maps, each with the lasting one
/// a copy of its programs is to use instead.
fn lasting_maps(loaded: &KspanSkel<'_>, request: &LoadRequest<'_>) -> Vec<(RawFd, RawFd)> {
    let shared = request.shared;
    let account = shared
        .account
        .as_ref()
        .filter(|_| request.programs.iter().any(|p| p.is_sched()));
    {
        let stacks = if shared.stacks_by_tid {
            &loaded.maps.kspan_stacks_by_tid
        } else {
            &loaded.maps.kspan_stacks
        };
        let mut pairs = vec![
            (&loaded.maps.kspan_events, &shared.events),
            (stacks, &shared.stacks),
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
        if let Some((records, pending)) = shared
            .ctx_records
            .as_ref()
            .filter(|_| request.config.ctx_records != 0)
        {
            pairs.push((&loaded.maps.kspan_ctx_records, records));
            pairs.push((&loaded.maps.kspan_ctx_pending, pending));
        }
        if let Some(account) = account {
            pairs.extend([
                (&loaded.maps.kspan_sched_tasks, &account.tasks),
                (&loaded.maps.kspan_sched_spans, &account.spans),
                (&loaded.maps.kspan_sched_open, &account.open),
                (&loaded.maps.kspan_block_requests, &account.block_requests),
                (&loaded.maps.kspan_block_done, &account.block_done),
                (&loaded.maps.kspan_block_bios, &account.block_bios),
            ]);
        }
        pairs
            .into_iter()
            .map(|(object, kept)| (object.as_fd().as_raw_fd(), kept.as_fd().as_raw_fd()))
            .collect::<Vec<_>>()
    }
}

/// `request`'s programs out of the loaded object, in the order asked for,
/// and the templates further copies are made from.
fn take_programs(
    loaded: &KspanSkel<'_>,
    request: &LoadRequest<'_>,
    lasting: &[(RawFd, RawFd)],
) -> Result<LoadedPrograms, LoadFailure> {
    let rodata_fd = loaded.maps.rodata.as_fd().as_raw_fd();
    // A descriptor of the templates' own to the object's BTF, which their
    // records refer to: libbpf's closes with the object.
    // SAFETY: the object is live and loaded.
    let btf_fd = unsafe {
        libbpf_rs::libbpf_sys::bpf_object__btf_fd(loaded.object().as_libbpf_object().as_ptr())
    };
    let btf = if btf_fd >= 0 {
        // SAFETY: libbpf's descriptor of the object's BTF, open until the
        // object is dropped, after this, in `load`; only duplicated here.
        let borrowed = unsafe { BorrowedFd::borrow_raw(btf_fd) };
        let owned = borrowed
            .try_clone_to_owned()
            .map_err(libbpf_rs::Error::from)?;
        Some(Arc::new(owned))
    } else {
        None
    };
    let mut programs = Vec::new();
    let mut templates = Vec::new();
    for &program in request.programs {
        let prog = program.in_loaded(loaded);
        let fd = prog
            .as_fd()
            .try_clone_to_owned()
            .map_err(libbpf_rs::Error::from)?;
        programs.push((program, fd));
        if let Some(template) = ProgramTemplate::new(prog, rodata_fd, lasting, btf.clone()) {
            templates.push((program, template));
        }
    }
    Ok(LoadedPrograms {
        programs,
        templates,
    })
}
