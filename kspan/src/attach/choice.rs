// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Which hooks and attachments a probe may use here, and in what order:
//! what the kernel lacks or the builder turned off ([`unusable`]), the
//! hooks a mode tries (`auto` puts kprobes first where the kernel preempts
//! inside trampoline programs: [`candidates`]), whether the multi-function
//! links take every probe ([`multi_links_take_all`]), and whether threads
//! may register their context records ([`registration_skips`]).
//!
//! Decided from the kernel's capabilities and the builder's settings alone,
//! before anything is loaded, so every step that attaches can ask.

use crate::annotation::{Attachment, Hook, Mechanism, Mode, Probe};
use crate::bpf::KernelCapabilities;

use super::report::AttachDecision;

/// Why `attachment` cannot be used on a kernel with `caps`, before trying
/// it: the kernel lacks it, or the builder turned it off (`disabled`).
pub(super) fn unusable(
    caps: &KernelCapabilities,
    disabled: &[Mechanism],
    attachment: Attachment,
) -> Option<String> {
    let (feature, needs): (Option<&crate::bpf::Feature>, &[Mechanism]) = match attachment {
        Attachment::FsessionMulti => (
            Some(&caps.trampoline_multi),
            &[
                Mechanism::Sessions,
                Mechanism::MultiLinks,
                Mechanism::Trampolines,
            ],
        ),
        Attachment::Fsession => (Some(&caps.trampoline_sessions), &[Mechanism::Sessions]),
        Attachment::KprobeSession => (
            Some(&caps.kprobe_sessions),
            &[Mechanism::Sessions, Mechanism::MultiLinks],
        ),
        Attachment::KprobeMulti => (Some(&caps.kprobe_multi), &[Mechanism::MultiLinks]),
        _ => (None, &[]),
    };
    if let Some(off) = needs.iter().find(|m| disabled.contains(m)) {
        return Some(format!(
            "turned off by KspanBuilder::disable(Mechanism::{off:?})"
        ));
    }
    feature.filter(|f| !f.is_available()).map(|f| f.to_string())
}

/// The hooks a probe of `mode` tries, in order, on a kernel with `caps`:
/// `auto` puts kprobes first where the kernel preempts inside trampoline
/// programs and has kprobes ([`kprobes_first`]).
pub(crate) fn candidates(
    mode: Mode,
    caps: &KernelCapabilities,
    disabled: &[Mechanism],
) -> &'static [Hook] {
    if mode == Mode::Auto && kprobes_first(caps, disabled) {
        &[Hook::Kretprobe, Hook::Fexit]
    } else {
        Hook::candidates(mode)
    }
}

/// Whether `auto` takes kprobes before trampolines here. The kernel runs a
/// program at most once at a time on a CPU; trampoline programs run with
/// preemption on, so on a kernel that preempts kernel code (`full`,
/// `lazy`, `rt`) a task preempted inside one makes other tasks' calls of
/// it on that CPU skipped: their entry, their exit, or both, and a call
/// that lost both is counted nowhere. Kprobe programs run with preemption
/// off and lose none to it (nor to kspan's own map calls:
/// [`registration_skips`]). A model that cannot be read counts as
/// preemptible.
pub(super) fn kprobes_first(caps: &KernelCapabilities, disabled: &[Mechanism]) -> bool {
    caps.preemption.preempts_programs()
        && caps.kprobes.is_available()
        && !disabled.contains(&Mechanism::Kprobes)
}

/// Why the runtime does not register thread-context records here, if it
/// should not: registering one is a BPF map update, and while it runs the
/// kernel skips every kprobe and tracepoint program on its CPU
/// ([`Attachment::skipped_during_map_calls`]). On a kernel that preempts
/// kernel code the registering thread can be preempted inside it, and the
/// calls other threads make on that CPU meanwhile lose their programs' runs
/// (measured: 64 to 201 runs at a time in sid's 7.2 guest, in 1 run of 5
/// of `vm_preempt`). Such programs then read user memory instead.
/// `account` names the scheduler account's programs when the kernel skips
/// them so (classic tracepoints).
pub(crate) fn registration_skips(
    capabilities: &KernelCapabilities,
    decisions: &[AttachDecision],
    account: Option<String>,
) -> Option<String> {
    if !capabilities.preemption.preempts_programs() {
        return None;
    }
    let guarded = decisions
        .iter()
        .filter(|d| d.not_attached.is_none())
        .find(|d| d.attachment.skipped_during_map_calls())
        .map(|d| format!("{} through {}", d.function, d.attachment.as_str()))
        .or(account)?;
    Some(format!(
        "a thread registers its record with a BPF map update, during which the kernel skips \
         kprobe and tracepoint programs on its CPU ({guarded}); this kernel's preemption is \
         {}, so a registering thread preempted there would cost other threads' calls",
        capabilities.preemption
    ))
}

/// Why `auto` passed over fexit for kprobes on this kernel.
pub(super) fn preemptible_trampolines(caps: &KernelCapabilities) -> String {
    format!(
        "passed over for kprobes: this kernel's preemption is {}; a task preempted inside a \
         trampoline program makes the kernel skip that program for every other task on its \
         CPU until it runs again, so calls lose their entry, exit or both, a call that lost \
         both uncounted; kprobe programs run with preemption off and lose none (ask for \
         `mode = \"fexit\"` to take trampolines anyway)",
        caps.preemption
    )
}

/// Whether every kernel function of `probes` (syscall sources aside) goes
/// to fsession.multi first here: then a link the kernel refuses can say
/// which of its functions are untraceable, and the planner needs only what
/// the symbol table rules out, not the kernel's whole traceable list.
pub(crate) fn multi_links_take_all(
    probes: &[&'static Probe],
    caps: &KernelCapabilities,
    disabled: &[Mechanism],
) -> bool {
    unusable(caps, disabled, Attachment::FsessionMulti).is_none()
        && probes
            .iter()
            .filter(|p| p.spec.mode != Mode::Syscall)
            .all(|p| candidates(p.spec.mode, caps, disabled).first() == Some(&Hook::Fexit))
}

/// The attachments of `hook` better than `chosen`, each with why it was
/// not used: `why` where the caller knows (a refusal), else [`unusable`].
pub(super) fn passed_over(
    caps: &KernelCapabilities,
    disabled: &[Mechanism],
    hook: Hook,
    chosen: Attachment,
    mut why: impl FnMut(Attachment) -> Option<String>,
) -> Vec<(Attachment, String)> {
    Attachment::ladder(hook)
        .iter()
        .take_while(|a| **a != chosen)
        .map(|&a| {
            let reason = why(a)
                .or_else(|| unusable(caps, disabled, a))
                .unwrap_or_else(|| "not tried".to_owned());
            (a, reason)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::{Feature, ProgramFeatures};
    use crate::kernel::preemption::{Preemption, PreemptionModel};

    fn caps(multi: bool, session: bool, kprobe_session: bool) -> KernelCapabilities {
        let feature = |on: bool, why: &str| {
            if on {
                Feature::Available
            } else {
                Feature::Unavailable {
                    reason: why.to_owned(),
                    errno: Some(libc::EINVAL),
                }
            }
        };
        KernelCapabilities {
            btf: Feature::Available,
            privileges: Feature::Available,
            trampolines: Feature::Available,
            kprobes: Feature::Available,
            kprobe_multi: Feature::Available,
            trampoline_sessions: feature(session, "no fsession"),
            trampoline_multi: feature(multi, "no fsession.multi"),
            kprobe_sessions: feature(kprobe_session, "no kprobe.session"),
            tracepoints: Feature::Available,
            btf_tracepoints: Feature::Available,
            context_records: Feature::Available,
            preemption: Preemption {
                model: Some(PreemptionModel::Voluntary),
                source: "a test".to_owned(),
            },
            tracing_programs: ProgramFeatures::all(),
            kprobe_programs: ProgramFeatures::all(),
            tracepoint_programs: ProgramFeatures::all(),
            fetch_atomics: Feature::Available,
            memcg_accounting: Feature::Available,
        }
    }

    fn decision(function: &'static str, attachment: Attachment) -> AttachDecision {
        AttachDecision {
            function,
            requested: Mode::Auto,
            chosen: Hook::Kretprobe,
            rejected: Vec::new(),
            attachment,
            passed_over: Vec::new(),
            multi: false,
            fallbacks: Vec::new(),
            older_kernel: Vec::new(),
            functions_passed_over: Vec::new(),
            not_attached: None,
        }
    }

    #[test]
    fn records_are_not_registered_where_a_preempted_registration_skips_programs() {
        let mut kernel = caps(true, true, true);
        let trampoline = [decision("vfs_read", Attachment::FsessionMulti)];
        let kprobe = [
            decision("vfs_read", Attachment::FsessionMulti),
            decision("noop_fsync", Attachment::KprobeSession),
        ];
        // What the account says of itself: skipped through classic
        // tracepoints, not through BTF ones (`AccountAttached::map_call_guard`).
        let sched = || Some("the scheduler's account through tracepoint".to_owned());
        // Voluntary: a registration is never preempted inside the update.
        assert_eq!(registration_skips(&kernel, &kprobe, sched()), None);
        for model in [
            Some(PreemptionModel::Full),
            Some(PreemptionModel::Lazy),
            None,
        ] {
            kernel.preemption.model = model;
            assert_eq!(registration_skips(&kernel, &trampoline, None), None);
            let why = registration_skips(&kernel, &kprobe, None).expect("kprobes are skipped");
            assert!(why.contains("noop_fsync through kprobe.session"), "{why}");
            assert!(why.contains("a test"), "{why}");
            let why = registration_skips(&kernel, &trampoline, sched())
                .expect("classic tracepoints are skipped");
            assert!(
                why.contains("the scheduler's account through tracepoint"),
                "{why}"
            );
        }
        // A probe left out attaches nothing.
        let mut left_out = decision("noop_fsync", Attachment::Kprobes);
        left_out.not_attached = Some("optional".into());
        assert_eq!(registration_skips(&kernel, &[left_out], None), None);
    }

    #[test]
    fn auto_takes_kprobes_first_where_the_kernel_preempts_programs() {
        let mut kernel = caps(true, true, true);
        let trampolines_first = [Hook::Fexit, Hook::Kretprobe];
        assert_eq!(candidates(Mode::Auto, &kernel, &[]), trampolines_first);
        for model in [
            Some(PreemptionModel::Full),
            Some(PreemptionModel::Lazy),
            Some(PreemptionModel::Rt),
            None,
        ] {
            kernel.preemption.model = model;
            assert_eq!(
                candidates(Mode::Auto, &kernel, &[]),
                [Hook::Kretprobe, Hook::Fexit],
                "{model:?}"
            );
            // Explicit modes keep their hook.
            assert_eq!(candidates(Mode::Fexit, &kernel, &[]), [Hook::Fexit]);
            // Without kprobes, trampolines: skips beat nothing.
            assert_eq!(
                candidates(Mode::Auto, &kernel, &[Mechanism::Kprobes]),
                trampolines_first
            );
        }
        kernel.preemption.model = Some(PreemptionModel::Lazy);
        let why = preemptible_trampolines(&kernel);
        assert!(
            why.starts_with(
                "passed over for kprobes: this kernel's preemption is lazy (from a test)"
            ),
            "{why}"
        );
        kernel.kprobes = Feature::Unavailable {
            reason: "no kprobe PMU".to_owned(),
            errno: None,
        };
        assert_eq!(candidates(Mode::Auto, &kernel, &[]), trampolines_first);
    }

    #[test]
    fn what_is_unusable_names_the_kernel_or_the_builder() {
        let old = caps(false, false, false);
        let (kernel, disabled): (_, &[Mechanism]) = (&old, &[]);
        assert_eq!(
            unusable(kernel, disabled, Attachment::FsessionMulti).as_deref(),
            Some("unavailable: no fsession.multi (EINVAL)")
        );
        assert_eq!(unusable(kernel, disabled, Attachment::FentryFexit), None);
        assert_eq!(
            passed_over(
                kernel,
                disabled,
                Hook::Fexit,
                Attachment::FentryFexit,
                |_| None
            ),
            [
                (
                    Attachment::FsessionMulti,
                    "unavailable: no fsession.multi (EINVAL)".to_owned()
                ),
                (
                    Attachment::Fsession,
                    "unavailable: no fsession (EINVAL)".to_owned()
                ),
            ]
        );

        let new = caps(true, true, true);
        let off = [Mechanism::MultiLinks];
        let (kernel, disabled): (_, &[Mechanism]) = (&new, &off);
        let turned_off = "turned off by KspanBuilder::disable(Mechanism::MultiLinks)";
        assert_eq!(
            unusable(kernel, disabled, Attachment::FsessionMulti).as_deref(),
            Some(turned_off)
        );
        assert_eq!(unusable(kernel, disabled, Attachment::Fsession), None);
        assert_eq!(
            unusable(kernel, disabled, Attachment::KprobeSession).as_deref(),
            Some(turned_off),
            "kprobe.session is a kprobe.multi link"
        );
        // A refusal the caller saw wins over "usable".
        let passed = passed_over(
            kernel,
            disabled,
            Hook::Fexit,
            Attachment::FentryFexit,
            |a| (a == Attachment::Fsession).then(|| "refused (E2BIG)".to_owned()),
        );
        assert_eq!(
            passed,
            [
                (Attachment::FsessionMulti, turned_off.to_owned()),
                (Attachment::Fsession, "refused (E2BIG)".to_owned()),
            ]
        );
        let (kernel, disabled): (_, &[Mechanism]) = (&new, &[]);
        assert!(passed_over(
            kernel,
            disabled,
            Hook::Fexit,
            Attachment::FsessionMulti,
            |_| None
        )
        .is_empty());
    }
}
