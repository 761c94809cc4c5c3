// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What attaching reports: the decision recorded for each function
//! ([`AttachDecision`]), why a function could not be attached
//! ([`AttachError`]), and what the multi-function links did ([`Batches`]).
//!
//! These are the values every later step passes on (the hooks' modules,
//! the run over every plan, the runtime's figures), so they stand apart
//! from the steps that make them and import none of them.

use std::collections::HashMap;

use crate::annotation::{Attachment, Hook, Mechanism, Mode};
use crate::bpf::{refusal_reason, LoadError};
use crate::kernel::errno;
use crate::plan::{NotAttached, ProbePlan};

/// How one probe was attached.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttachDecision {
    /// The kernel function (or syscall).
    pub function: &'static str,
    /// The mode the annotation asked for.
    pub requested: Mode,
    /// The hook in use.
    pub chosen: Hook,
    /// Hooks tried or skipped before, each with why; for `auto` on a
    /// kernel that preempts inside trampoline programs, also fexit, passed
    /// over for kprobes (see [`crate::kernel::preemption`]).
    pub rejected: Vec<(Hook, String)>,
    /// How the chosen hook's programs are attached.
    pub attachment: Attachment,
    /// The attachments of the chosen hook that cost less than
    /// `attachment` and were not used, best first, each with why (not on
    /// this kernel, turned off, refused): with `attachment`, every
    /// mechanism considered.
    pub passed_over: Vec<(Attachment, String)>,
    /// Attached together with the other functions of the same settings by
    /// one link (fsession.multi, kprobe.session, or kprobe.multi per
    /// direction).
    pub multi: bool,
    /// Faster ways that failed before the one that worked, each with why
    /// (a program copy the kernel refused, a kprobe.multi batch).
    pub fallbacks: Vec<String>,
    /// The probe's functions before `function` (it names alternatives,
    /// `"do_unlinkat" | "filename_unlinkat"`) that this kernel lacks or
    /// cannot trace, each with why; for a probe not attached, all of them.
    pub functions_passed_over: Vec<(&'static str, String)>,
    /// What this kernel's verifier lacks that the chosen hook's programs
    /// use on newer kernels, each with what they do instead (kernels before
    /// 5.17: `bpf_loop`, atomics that fetch, `bpf_get_func_arg`, task
    /// local storage, attach cookies); empty where it lacks nothing.
    pub older_kernel: Vec<String>,
    /// Why the probe is not attached at all: it is optional
    /// (`optional = true`) and this kernel can trace none of its functions.
    /// `function` is then its first function, and `chosen` and
    /// `attachment` what its mode would have used.
    pub not_attached: Option<String>,
}

impl AttachDecision {
    /// The decision for `plan`, attached on `chosen` through `attachment`.
    pub(super) fn new(
        plan: &ProbePlan,
        chosen: Hook,
        attachment: Attachment,
        passed_over: Vec<(Attachment, String)>,
    ) -> Self {
        AttachDecision {
            function: plan.function(),
            requested: plan.mode(),
            chosen,
            rejected: Vec::new(),
            attachment,
            passed_over,
            multi: attachment.is_multi(),
            fallbacks: Vec::new(),
            older_kernel: Vec::new(),
            functions_passed_over: plan.passed_over.clone(),
            not_attached: None,
        }
    }

    /// The decision for an optional probe left out.
    pub(crate) fn left_out(left_out: &NotAttached) -> Self {
        let spec = &left_out.probe.spec;
        let chosen = Hook::candidates(spec.mode)
            .first()
            .copied()
            .unwrap_or(Hook::Fexit);
        let attachment = Attachment::ladder(chosen)[0];
        AttachDecision {
            function: spec.function,
            requested: spec.mode,
            chosen,
            rejected: Vec::new(),
            attachment,
            passed_over: Vec::new(),
            multi: false,
            fallbacks: Vec::new(),
            older_kernel: Vec::new(),
            functions_passed_over: left_out.tried.clone(),
            not_attached: Some(format!(
                "an optional probe, and this kernel can trace none of its functions: {}",
                left_out.reason()
            )),
        }
    }

    /// The decision for an optional probe whose function this kernel has
    /// but no mechanism of it can trace (`refused`: the attempt's
    /// [`AttachError::NoMechanism`]).
    pub(crate) fn unattachable(plan: &ProbePlan, refused: &AttachError) -> Self {
        let chosen = Hook::candidates(plan.mode())
            .first()
            .copied()
            .unwrap_or(Hook::Fexit);
        let mut decision =
            AttachDecision::new(plan, chosen, Attachment::ladder(chosen)[0], Vec::new());
        if let AttachError::NoMechanism { tried, .. } = refused {
            decision.rejected = tried.clone();
        }
        decision.multi = false;
        decision.not_attached = Some(format!(
            "an optional probe, and no mechanism this kernel offers can trace it: {refused}"
        ));
        decision
    }

    /// The attachments passed over and why, on one line (`-` for none).
    pub fn passed_over_summary(&self) -> String {
        one_line(&self.passed_over)
    }

    /// The rejected hooks and reasons on one line (`-` for none).
    pub fn rejected_summary(&self) -> String {
        one_line(&self.rejected)
    }
}

/// `what: why` pairs joined by `; ` (`-` for none).
fn one_line<T: std::fmt::Display>(reasons: &[(T, String)]) -> String {
    if reasons.is_empty() {
        return "-".to_owned();
    }
    reasons
        .iter()
        .map(|(what, why)| format!("{what}: {why}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why a function could not be attached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttachError {
    /// The kernel refused to load a program.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The program loaded but the kernel refused to attach it.
    #[error("cannot attach {hook} to `{function}`: {reason} ({errno_name})")]
    Refused {
        /// The kernel function.
        function: String,
        /// The hook.
        hook: Hook,
        /// The kernel's errno (positive), when known.
        errno: Option<i32>,
        /// Its symbolic name.
        errno_name: String,
        /// What the errno means here.
        reason: String,
        /// The system call's error.
        source: std::io::Error,
    },
    /// `auto` found no hook that works for a function.
    #[error(
        "cannot trace `{function}` on this kernel: every mechanism was tried or ruled out: {}{hint}",
        tried.iter().map(|(hook, why)| format!("[{hook}] {why}")).collect::<Vec<_>>().join("; ")
    )]
    NoMechanism {
        /// The kernel function.
        function: String,
        /// Each hook, with why it did not work.
        tried: Vec<(Hook, String)>,
        /// What does work here, when something does (`; ...`), or nothing.
        hint: String,
    },
    /// A function a probe names is one the kernel cannot trace, found when
    /// the kernel refused the multi-function link it was in.
    #[error(
        "`{function}` (probe at {location}) cannot be traced: it is {reason}; trace a caller \
         or a callee instead"
    )]
    NotTraceable {
        /// The kernel function.
        function: String,
        /// Where the probe is declared.
        location: &'static str,
        /// Why the kernel cannot trace it.
        reason: &'static str,
    },
    /// The probe's mode needs a mechanism the builder turned off.
    #[error(
        "`{function}` asks for {hook}, and `KspanBuilder::disable({mechanism:?})` turned \
         {mechanism} off: remove that call, or give the probe another mode (`mode = \"auto\"` \
         takes what is left)"
    )]
    Disabled {
        /// The kernel function.
        function: String,
        /// The hook its mode asks for.
        hook: Hook,
        /// The mechanism turned off.
        mechanism: Mechanism,
    },
}

impl AttachError {
    /// The kernel refused to attach `hook` to `function`.
    pub(super) fn refused(function: &str, hook: Hook, source: std::io::Error) -> Self {
        let errno = source.raw_os_error();
        AttachError::Refused {
            function: function.to_owned(),
            hook,
            errno,
            errno_name: errno::name_of(errno).into_owned(),
            reason: refusal_reason(errno, hook, "attach"),
            source,
        }
    }
}

/// What the multi-function links did, by plan index.
#[derive(Default)]
pub(super) struct Batches {
    /// The functions attached.
    pub attached: HashMap<usize, AttachDecision>,
    /// The functions of batches the kernel refused, with the attachment
    /// and why: each is then attached alone, which reports errors per
    /// function.
    pub refused: HashMap<usize, (Attachment, String)>,
    /// Functions of patterns left out of a batch because the kernel cannot
    /// trace them, and why: not attached at all.
    pub skipped: HashMap<usize, String>,
    /// Functions probes name in a mode with no other mechanism, left out
    /// of a batch because the kernel cannot trace them: an error.
    pub untraceable: Vec<usize>,
}
