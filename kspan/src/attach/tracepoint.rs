// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Syscall sources: the `syscalls:sys_enter_<name>` and `sys_exit_<name>`
//! tracepoints, one program pair per syscall.

use std::os::fd::AsFd;

use super::attacher::Attacher;
use super::report::AttachError;
use crate::annotation::{Attachment, Hook};
use crate::bpf::config::{probe_config, ProbeId};
use crate::bpf::links::{Link, LinkKind};
use crate::bpf::program::Program;
use crate::bpf::sys;
use crate::plan::ProbePlan;

/// Loads and attaches the syscall source `plan`.
pub(super) fn attach(
    at: &mut Attacher<'_>,
    plan: &ProbePlan,
    probe_id: u32,
    fallbacks: &mut Vec<String>,
) -> Result<Attachment, AttachError> {
    let hook = Hook::Syscall;
    let config = probe_config(plan, hook, ProbeId::Fixed(probe_id), at.runtime);
    let (entry, exit) = at.programs(plan, hook, &config, 0, Program::of(hook), fallbacks)?;
    let syscall = plan.function();
    let link = |prog: &std::os::fd::OwnedFd, is_exit: bool| {
        let event = if is_exit { "sys_exit" } else { "sys_enter" };
        sys::attach_syscall_tracepoint(prog.as_fd(), &format!("{event}_{syscall}"))
            .map(|fd| Link::new(LinkKind::Tracepoint, fd))
            .map_err(|e| AttachError::refused(syscall, hook, e))
    };
    at.attach_pair(entry, exit, link)?;
    Ok(Attachment::Tracepoints)
}
