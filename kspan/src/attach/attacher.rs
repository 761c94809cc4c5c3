// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What the attach of many functions carries from one to the next
//! ([`Attacher`]): the shared maps it is handed, the program templates
//! the first load made, the
//! kprobe programs shared by settings, the copies loaded ahead, the links
//! so far; and the steps every hook's module takes through it: its
//! programs ([`Attacher::programs`]: a copy of a program already loaded
//! when there is one, see [`crate::bpf::copies`], else a load of the object
//! through libbpf, which then gives the copies; a copy that fails is loaded
//! through libbpf instead, said at `warn` and in the decision's
//! [`AttachDecision::fallbacks`](super::AttachDecision::fallbacks)), and
//! their links, the exit program's before the entry program's
//! ([`Attacher::attach_pair`]).
//!
//! The hooks' modules build on it; the run over every plan
//! ([`super::sequence`]) drives them.

use std::collections::HashMap;
use std::os::fd::OwnedFd;

use kspan_bpf::types::kspan_config;

use super::choice::{candidates, unusable};
use super::report::AttachError;
use crate::annotation::{Attachment, Hook, Mechanism};
use crate::bpf::config::RuntimeSettings;
use crate::bpf::copies::{self, ProgramTemplate};
use crate::bpf::links::{self, Links};
use crate::bpf::maps::SharedMaps;
use crate::bpf::object::{self, LoadRequest};
use crate::bpf::program::Program;
use crate::bpf::{KernelCapabilities, LoadError};
use crate::plan::ProbePlan;

/// The kernel's list of traceable functions, as attaching needs it.
enum TraceableList {
    /// The planner applied it: a refused link is not about it.
    Applied,
    /// The planner did not have it; read when a link is refused.
    NotRead,
    /// Read (`None`: unreadable).
    Read(Option<std::collections::HashSet<String>>),
}

/// What the attach of many functions carries from one to the next.
pub(crate) struct Attacher<'a> {
    pub(super) runtime: &'a RuntimeSettings,
    pub(super) capabilities: &'a KernelCapabilities,
    pub(super) disabled: &'a [Mechanism],
    /// The maps every program shares, made up front.
    pub(super) maps: &'a SharedMaps,
    /// What copies are made from, by program.
    pub(super) templates: HashMap<Program, ProgramTemplate>,
    /// Kprobe programs serving many functions, by settings and program.
    pub(super) shared: HashMap<(Vec<u8>, Program), (OwnedFd, Option<OwnedFd>)>,
    /// Trampoline copies loaded ahead of their attach, by probe id.
    pub(super) prepared: HashMap<u32, Prepared>,
    pub(super) links: Links,
    traceable: TraceableList,
}

/// A trampoline copy loaded ahead of its attach (by
/// [`super::trampoline`], from several threads at once).
pub(super) struct Prepared {
    pub(super) hook: Hook,
    /// An fsession program (`entry`), not an fentry/fexit pair.
    pub(super) session: bool,
    pub(super) entry: OwnedFd,
    pub(super) exit: Option<OwnedFd>,
}

impl<'a> Attacher<'a> {
    pub(crate) fn new(
        runtime: &'a RuntimeSettings,
        capabilities: &'a KernelCapabilities,
        disabled: &'a [Mechanism],
        maps: &'a SharedMaps,
    ) -> Self {
        Attacher {
            runtime,
            capabilities,
            disabled,
            maps,
            templates: HashMap::new(),
            shared: HashMap::new(),
            prepared: HashMap::new(),
            links: Links::default(),
            traceable: TraceableList::Applied,
        }
    }

    /// The plans were made without the kernel's list of traceable
    /// functions (see [`super::multi_links_take_all`]): a multi-function
    /// link the kernel refuses reads it, and is made again without what it
    /// leaves out.
    pub(crate) fn planned_without_traceable_list(mut self) -> Self {
        self.traceable = TraceableList::NotRead;
        self
    }

    /// After a refused link: the kernel's list of traceable functions,
    /// where the planner did not apply it and it can be read.
    pub(super) fn traceable_list_after_refusal(
        &mut self,
    ) -> Option<&std::collections::HashSet<String>> {
        if let TraceableList::NotRead = self.traceable {
            let list = crate::kernel::tracefs::traceable_functions().ok();
            self.traceable = TraceableList::Read(list);
        }
        match &self.traceable {
            TraceableList::Read(list) => list.as_ref(),
            _ => None,
        }
    }

    /// The first hook `plan` tries here.
    pub(super) fn first_hook(&self, plan: &ProbePlan) -> Option<Hook> {
        candidates(plan.mode(), self.capabilities, self.disabled)
            .first()
            .copied()
    }

    /// Why `attachment` cannot be used here, before trying it: the kernel
    /// lacks it, or the builder turned it off.
    pub(super) fn unusable(&self, attachment: Attachment) -> Option<String> {
        unusable(self.capabilities, self.disabled, attachment)
    }

    /// Attaches the exit program first, so that no entry is recorded whose
    /// exit is not watched, then the entry program; keeps the links only
    /// once both are attached. `link` attaches one program (`true`: the
    /// exit).
    pub(super) fn attach_pair(
        &mut self,
        entry: OwnedFd,
        exit: Option<OwnedFd>,
        link: impl Fn(&OwnedFd, bool) -> Result<links::Link, AttachError>,
    ) -> Result<(), AttachError> {
        let exit_link = exit.as_ref().map(|prog| link(prog, true)).transpose()?;
        let entry_link = link(&entry, false)?;
        self.links.keep(exit_link, entry_link, [Some(entry), exit]);
        Ok(())
    }

    /// The programs `(entry, exit)` of `hook` with settings `config` (for
    /// trampolines, against `btf_id`): copies of the templates when there
    /// are, else loaded through libbpf.
    pub(super) fn programs(
        &mut self,
        plan: &ProbePlan,
        hook: Hook,
        config: &kspan_config,
        btf_id: u32,
        (entry, exit): (Program, Option<Program>),
        fallbacks: &mut Vec<String>,
    ) -> Result<(OwnedFd, Option<OwnedFd>), LoadError> {
        let entry_t = self.templates.get(&entry);
        let exit_t = exit.map(|p| self.templates.get(&p));
        if let (Some(entry_t), None | Some(Some(_))) = (entry_t, exit_t) {
            match copies::load_copy(config, btf_id, entry_t, exit_t.flatten()) {
                Ok(programs) => return Ok(programs),
                Err(e) => {
                    let why = format!(
                        "loading a copy of the {hook} program failed ({e}); loaded through libbpf"
                    );
                    crate::diagnostics::warn_user!(function = plan.function(), "kspan: {why}");
                    if let Some(log) = &e.verifier_log {
                        tracing::debug!(
                            function = plan.function(),
                            "kspan: the verifier's log of the refused copy:\n{log}"
                        );
                    }
                    fallbacks.push(why);
                }
            }
        }
        let wanted: Vec<Program> = std::iter::once(entry).chain(exit).collect();
        let mut loaded = object::load(&LoadRequest {
            attach_target: hook.is_trampoline().then(|| plan.function()),
            config,
            programs: &wanted,
            shared: self.maps,
        })
        .map_err(|f| LoadError::new(plan.function(), hook, f.source, f.verifier_log))?;
        for (program, template) in loaded.templates.drain(..) {
            self.templates.entry(program).or_insert(template);
        }
        let missing = || {
            LoadError::new(
                plan.function(),
                hook,
                libbpf_rs::Error::from(std::io::Error::from(std::io::ErrorKind::NotFound)),
                None,
            )
        };
        let entry_fd = loaded.take(entry).ok_or_else(missing)?;
        let exit_fd = match exit {
            Some(exit) => Some(loaded.take(exit).ok_or_else(missing)?),
            None => None,
        };
        Ok((entry_fd, exit_fd))
    }
}
