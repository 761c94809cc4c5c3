// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Which of a probe's functions is traced, and what becomes of an optional
//! probe this kernel cannot trace.
//!
//! A probe names its function and, where kernels differ, alternatives
//! (`"do_unlinkat" | "filename_unlinkat"`). The first of them that this
//! kernel has and can trace is chosen by what is known before anything is
//! loaded: its BTF, kspan's deny list, which functions the kernel lists as
//! traceable (or its symbol table rules out), and, in a trampoline mode,
//! whether trampolines take the signature. The choice is made on the kernel's
//! facts about the function alone, never on the handler: the handler is then
//! checked against the function chosen, and one that does not fit is an
//! error naming it. Passing over a function because the handler does not fit
//! it would hide a signature change behind a different function, perhaps
//! another code path altogether; the error says what changed instead.
//!
//! `optional = true` is about the kernel, not about mistakes: a probe none
//! of whose functions this kernel can trace is left out with the reason, and
//! a handler that does not fit, a deny-listed name or bad alternatives still
//! fail the start.

use super::names::{closest_functions, intern};
use super::{denylist, plan_function, PlanError, PlanInputs, PlanSet, Result, SyscallFormats};
use crate::annotation::{Mode, Probe};
use crate::kernel::btf::Btf;

/// A probe left out because it is optional and this kernel can trace none
/// of its functions.
#[derive(Debug, Clone)]
pub struct NotAttached {
    /// The probe.
    pub probe: &'static Probe,
    /// Each of its functions (or its pattern, or its system call), with why
    /// it cannot be traced here.
    pub tried: Vec<(&'static str, String)>,
    /// Functions of this kernel that the handler fits, or with close names.
    pub suggestions: Vec<String>,
}

impl NotAttached {
    /// Why, on one line: each function with its reason, then the
    /// suggestions.
    pub fn reason(&self) -> String {
        let tried: Vec<String> = self
            .tried
            .iter()
            .map(|(f, why)| format!("`{f}`: {why}"))
            .collect();
        format!(
            "{}{}",
            tried.join("; "),
            super::names::did_you_mean(&self.suggestions)
        )
    }
}

/// Why this kernel cannot trace `function` for `probe`, if it cannot.
fn unavailable(
    btf: &Btf,
    probe: &'static Probe,
    inputs: &PlanInputs,
    function: &'static str,
) -> Option<String> {
    if !btf.has_function(function) {
        return Some("not in this kernel's BTF".to_owned());
    }
    if let Some(why) = inputs.traceable.why_not(function) {
        return Some(why.to_string());
    }
    if matches!(probe.spec.mode, Mode::Fexit | Mode::Fentry) {
        if let Some(why) = btf.trampoline_refusal(function) {
            return Some(format!("{why} (mode `{}`)", probe.spec.mode));
        }
    }
    None
}

/// Whether the handler of `probe` plans against `function`: its parameters'
/// names and types, its paths, `ret` and filters fit.
pub(super) fn fits(
    btf: &Btf,
    probe: &'static Probe,
    syscalls: &SyscallFormats,
    function: &str,
) -> bool {
    // `function`, not `has_function`: a name BTF lists without a signature
    // would fail planning as unknown, whose suggestions would ask this
    // again of every name, without end (the `btf` fuzz target's find).
    btf.function(function).is_some()
        && plan_function(btf, probe, intern(function), syscalls).is_ok()
}

/// Functions of this kernel `probe` may have meant by `function`.
pub(super) fn suggestions(
    btf: &Btf,
    probe: &'static Probe,
    syscalls: &SyscallFormats,
    function: &str,
    leave_out: &[&str],
) -> Vec<String> {
    closest_functions(
        btf.function_names().filter(|n| !leave_out.contains(n)),
        function,
        3,
        |name| fits(btf, probe, syscalls, name),
    )
}

/// Plans a probe that names alternatives or is optional: the first of its
/// functions this kernel can trace, or, for an optional probe, none.
pub(super) fn plan_chosen(
    btf: &Btf,
    probe: &'static Probe,
    inputs: &PlanInputs,
    set: &mut PlanSet,
) -> Result<()> {
    let spec = &probe.spec;
    let functions: Vec<&'static str> = std::iter::once(spec.function)
        .chain(spec.alternatives.iter().copied())
        .collect();
    // The deny list is kspan's, the same on every kernel: a name on it is
    // refused wherever it stands.
    for &function in &functions {
        if let Some(reason) = denylist::denied(function) {
            return Err(PlanError::Denied {
                function: function.to_owned(),
                location: spec.location,
                reason,
            });
        }
    }
    let mut passed_over: Vec<(&'static str, String)> = Vec::new();
    for &function in &functions {
        let Some(why) = unavailable(btf, probe, inputs, function) else {
            let mut plan = plan_function(btf, probe, function, &inputs.syscalls).map_err(|e| {
                if passed_over.is_empty() {
                    return e;
                }
                PlanError::InAlternative {
                    function: function.to_owned(),
                    location: spec.location,
                    passed_over: owned(&passed_over),
                    source: Box::new(e),
                }
            })?;
            plan.passed_over = passed_over;
            set.plans.push(plan);
            return Ok(());
        };
        passed_over.push((function, why));
    }
    let suggestions = if passed_over.iter().any(|(f, _)| !btf.has_function(f)) {
        suggestions(btf, probe, &inputs.syscalls, spec.function, &functions)
    } else {
        Vec::new()
    };
    not_traced(probe, passed_over, suggestions, set)
}

/// An optional probe that this kernel cannot trace is left out; any other
/// is an error naming each of its functions and why.
pub(super) fn not_traced(
    probe: &'static Probe,
    tried: Vec<(&'static str, String)>,
    suggestions: Vec<String>,
    set: &mut PlanSet,
) -> Result<()> {
    if probe.spec.optional {
        set.not_attached.push(NotAttached {
            probe,
            tried,
            suggestions,
        });
        return Ok(());
    }
    Err(PlanError::NoFunction {
        function: probe.spec.function.to_owned(),
        location: probe.spec.location,
        tried: owned(&tried),
        suggestions,
    })
}

fn owned(functions: &[(&'static str, String)]) -> Vec<(String, String)> {
    functions
        .iter()
        .map(|(f, why)| ((*f).to_owned(), why.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{kernel_functions, plan_all, NotTraced, PlanInputs, Traceable};
    use super::*;
    use crate::kernel::btf::builder::{sample, BtfBuilder};
    use kspan::kernel_span;

    /// Which of the unlink functions a kernel has.
    #[derive(Clone, Copy, PartialEq)]
    enum Unlink {
        /// 6.x: `do_unlinkat`.
        Do,
        /// 7.2: `filename_unlinkat`.
        Filename,
        /// Both (no real kernel; shows the order).
        Both,
    }

    /// The unlink functions as 6.1 to 7.2 declare them, with 7.2's
    /// neighbour `io_unlinkat` (the name nearest to `do_unlinkat` there).
    fn unlink_btf(which: Unlink) -> Btf {
        let mut b = BtfBuilder::new();
        let int = b.int("int", 4, true);
        let uint = b.int("unsigned int", 4, false);
        let ch = b.int("char", 1, true);
        let cchar = b.konst(ch);
        let name_ptr = b.ptr(cchar);
        let filename = b.struct_of("filename", 32, &[("name", name_ptr, 0)]);
        let filename_ptr = b.ptr(filename);
        let kiocb = b.strukt("io_kiocb", 64);
        let kiocb_ptr = b.ptr(kiocb);
        let params = [("dfd", int), ("name", filename_ptr)];
        if which != Unlink::Filename {
            b.func("do_unlinkat", int, &params);
        }
        if which != Unlink::Do {
            b.func("filename_unlinkat", int, &params);
        }
        b.func(
            "io_unlinkat",
            int,
            &[("req", kiocb_ptr), ("issue_flags", uint)],
        );
        b.func("kspan_struct_arg", int, &[("f", filename)]);
        Btf::parse(&b.build()).unwrap()
    }

    fn plan(btf: &Btf, probes: &[&'static Probe]) -> Result<PlanSet> {
        plan_all(btf, probes, &PlanInputs::default())
    }

    #[kernel_span("do_unlinkat" | "filename_unlinkat", mode = "fexit")]
    fn unlink(dfd: i32, #[capture(path = "name->name")] name: &str, ret: i32) {}

    #[test]
    fn the_first_function_the_kernel_has_is_traced() {
        let set = plan(&unlink_btf(Unlink::Do), &[&unlink]).unwrap();
        assert_eq!(set.plans[0].function, "do_unlinkat");
        assert!(set.plans[0].passed_over.is_empty());
        let set = plan(&unlink_btf(Unlink::Both), &[&unlink]).unwrap();
        assert_eq!(set.plans[0].function, "do_unlinkat", "in the order named");
        let set = plan(&unlink_btf(Unlink::Filename), &[&unlink]).unwrap();
        let chosen = &set.plans[0];
        assert_eq!(chosen.function, "filename_unlinkat");
        assert_eq!(
            chosen.passed_over,
            [("do_unlinkat", "not in this kernel's BTF".to_owned())]
        );
        assert_eq!(chosen.captures.len(), 2, "the handler planned against it");
        assert!(set.not_attached.is_empty());
    }

    #[test]
    fn a_function_the_kernel_cannot_trace_is_passed_over_with_why() {
        let inputs = PlanInputs {
            traceable: Traceable::Listed(["filename_unlinkat".to_owned()].into()),
            ..PlanInputs::default()
        };
        let set = plan_all(&unlink_btf(Unlink::Both), &[&unlink], &inputs).unwrap();
        assert_eq!(set.plans[0].function, "filename_unlinkat");
        let why = &set.plans[0].passed_over[0].1;
        assert!(
            why.contains("absent from available_filter_functions"),
            "{why}"
        );
        let inputs = PlanInputs {
            traceable: Traceable::Excluded(
                [("do_unlinkat".to_owned(), NotTraced::NoSymbol)].into(),
            ),
            ..PlanInputs::default()
        };
        let set = plan_all(&unlink_btf(Unlink::Both), &[&unlink], &inputs).unwrap();
        assert_eq!(set.plans[0].function, "filename_unlinkat");
    }

    #[kernel_span("kspan_struct_arg" | "do_unlinkat", mode = "fexit")]
    fn by_value_first() {}

    #[kernel_span("kspan_struct_arg" | "do_unlinkat", mode = "kretprobe")]
    fn by_value_kprobe() {}

    #[test]
    fn what_trampolines_refuse_is_passed_over_in_a_trampoline_mode_only() {
        let btf = unlink_btf(Unlink::Do);
        let set = plan(&btf, &[&by_value_first]).unwrap();
        assert_eq!(set.plans[0].function, "do_unlinkat");
        let why = &set.plans[0].passed_over[0].1;
        assert!(
            why.contains("by value") && why.ends_with("(mode `fexit`)"),
            "{why}"
        );
        let set = plan(&btf, &[&by_value_kprobe]).unwrap();
        assert_eq!(set.plans[0].function, "kspan_struct_arg", "kprobes take it");
    }

    #[kernel_span("do_unlinkat" | "filename_unlinkat")]
    fn unlink_fd(fd: i32) {}

    #[test]
    fn a_handler_that_does_not_fit_the_chosen_function_is_an_error_naming_it() {
        let e = plan(&unlink_btf(Unlink::Filename), &[&unlink_fd]).unwrap_err();
        assert!(matches!(e, PlanError::InAlternative { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.starts_with("`filename_unlinkat` has no parameter `fd`"),
            "{msg}"
        );
        assert!(
            msg.contains(
                "(`filename_unlinkat` is the first function of the probe at kspan/src/plan/choose.rs:"
            ) && msg.contains(
                "that this kernel can trace: `do_unlinkat`: not in this kernel's BTF; the \
                 handler's parameters must fit it)"
            ),
            "{msg}"
        );
        // Where the first is there, its own error, as for any probe.
        let msg = plan(&unlink_btf(Unlink::Do), &[&unlink_fd])
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("`do_unlinkat` has no parameter `fd`"),
            "{msg}"
        );
        assert!(!msg.contains("first function"), "{msg}");
    }

    #[kernel_span("do_unlinkat" | "do_unlinkat2", mode = "fexit")]
    fn unlink_old_names(dfd: i32, ret: i32) {}

    #[kernel_span("do_unlinkat" | "do_unlinkat2", mode = "fexit", optional)]
    fn unlink_old_names_optional(dfd: i32, ret: i32) {}

    #[kernel_span("vfs_read")]
    fn read_count(count: usize) {}

    #[test]
    fn no_function_is_an_error_naming_each_and_the_fix() {
        let e = plan(&unlink_btf(Unlink::Filename), &[&unlink_old_names]).unwrap_err();
        let PlanError::NoFunction {
            tried, suggestions, ..
        } = &e
        else {
            panic!("{e:?}")
        };
        assert_eq!(tried.len(), 2);
        assert_eq!(
            suggestions,
            &["filename_unlinkat", "io_unlinkat"],
            "the function the handler fits first"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(
                "can be traced on this kernel: `do_unlinkat`: not in this kernel's BTF; \
                 `do_unlinkat2`: not in this kernel's BTF; did you mean `filename_unlinkat`, \
                 `io_unlinkat`?; name the function this kernel has as one more alternative \
                 (`\"do_unlinkat\" | ... | \"filename_unlinkat\"`), or make the probe \
                 `optional = true` to start without it"
            ),
            "{msg}"
        );
    }

    #[test]
    fn an_optional_probe_is_left_out_with_why_and_the_others_planned() {
        let btf = Btf::parse(&sample()).unwrap();
        let set = plan(&btf, &[&unlink_old_names_optional, &read_count]).unwrap();
        assert_eq!(set.plans.len(), 1);
        assert_eq!(set.plans[0].function, "vfs_read");
        let [left_out] = &set.not_attached[..] else {
            panic!("{:?}", set.not_attached)
        };
        assert_eq!(left_out.probe.spec.function, "do_unlinkat");
        assert_eq!(
            left_out.reason(),
            "`do_unlinkat`: not in this kernel's BTF; `do_unlinkat2`: not in this kernel's BTF"
        );
        // On a kernel that has it, it is traced.
        let set = plan(&unlink_btf(Unlink::Do), &[&unlink_old_names_optional]).unwrap();
        assert_eq!(set.plans[0].function, "do_unlinkat");
        assert!(set.not_attached.is_empty());
        // On 7.2 it is left out, naming the function the handler fits.
        let set = plan(&unlink_btf(Unlink::Filename), &[&unlink_old_names_optional]).unwrap();
        assert!(set.plans.is_empty());
        assert!(
            set.not_attached[0]
                .reason()
                .ends_with("; did you mean `filename_unlinkat`, `io_unlinkat`?"),
            "{}",
            set.not_attached[0].reason()
        );
    }

    #[kernel_span("kspan_no_such_function", optional)]
    fn missing() {}

    #[kernel_span("kspan_no_such_*", optional)]
    fn missing_pattern() {}

    #[kernel_span(syscall = "kspan_no_such_call", optional)]
    fn missing_syscall() {}

    #[kernel_span("kspan_no_such_function", optional)]
    fn missing_but_wrong(#[capture(len = "ret")] buf: &[u8]) {}

    #[test]
    fn optional_names_patterns_and_syscalls() {
        let btf = Btf::parse(&sample()).unwrap();
        let set = plan(&btf, &[&missing, &missing_pattern, &missing_syscall]).unwrap();
        assert!(set.plans.is_empty());
        let reasons: Vec<String> = set.not_attached.iter().map(NotAttached::reason).collect();
        assert_eq!(
            reasons,
            [
                "`kspan_no_such_function`: not in this kernel's BTF",
                "`kspan_no_such_*`: the pattern matches no function in this kernel's BTF",
                "`kspan_no_such_call`: this kernel has no syscalls:sys_enter_kspan_no_such_call \
                 tracepoint",
            ]
        );
        // Optional is about this kernel, not about mistakes in the probe.
        let msg = plan(&btf, &[&missing, &missing_but_wrong])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("two probes trace `kspan_no_such_function`"),
            "{msg}"
        );
    }

    #[kernel_span("do_unlinkat" | "_raw_spin_lock", optional)]
    fn denied_alternative() {}

    #[kernel_span("filename_unlinkat")]
    fn filename_only() {}

    #[test]
    fn deny_list_duplicates_and_bad_alternatives_fail_on_every_kernel() {
        for which in [Unlink::Do, Unlink::Filename] {
            let btf = unlink_btf(which);
            let msg = plan(&btf, &[&denied_alternative]).unwrap_err().to_string();
            assert!(
                msg.contains("`_raw_spin_lock`") && msg.contains("deny list"),
                "{msg}"
            );
            let msg = plan(&btf, &[&unlink, &filename_only])
                .unwrap_err()
                .to_string();
            assert!(
                msg.starts_with("two probes trace `filename_unlinkat`"),
                "{msg}"
            );
        }
        static TWICE: Probe = Probe {
            spec: crate::annotation::ProbeSpec {
                alternatives: &["filename_unlinkat", "filename_unlinkat"],
                location: "made:by_hand",
                ..unlink.spec
            },
            handler: |_, _| {},
        };
        let msg = plan(&unlink_btf(Unlink::Do), &[&TWICE])
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "`do_unlinkat` (probe at made:by_hand): `filename_unlinkat` is named twice: each \
             alternative is another kernel function; remove one"
        );
        static OF_SYSCALL: Probe = Probe {
            spec: crate::annotation::ProbeSpec {
                alternatives: &["open"],
                ..missing_syscall.spec
            },
            handler: |_, _| {},
        };
        let msg = plan(&unlink_btf(Unlink::Do), &[&OF_SYSCALL])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("a syscall source traces one system call"),
            "{msg}"
        );
    }

    #[kernel_span("do_unlinkat", mode = "fexit")]
    fn unlink_6x(dfd: i32, name: *const u8, ret: i32) {}

    #[test]
    fn an_unknown_function_suggests_the_one_with_the_same_parameters() {
        let e = plan(&unlink_btf(Unlink::Filename), &[&unlink_6x]).unwrap_err();
        assert!(
            matches!(&e, PlanError::UnknownFunction { suggestions, .. }
                if suggestions == &["filename_unlinkat", "io_unlinkat"]),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(
                "did you mean `filename_unlinkat`, `io_unlinkat`?. Where other kernels have it, \
                 name this kernel's function as an alternative (`#[kernel_span(\"do_unlinkat\" | \
                 \"filename_unlinkat\")]`), or make the probe `optional = true` to start without \
                 it here"
            ),
            "{msg}"
        );
    }

    #[test]
    fn every_function_a_probe_may_trace_is_asked_about() {
        assert_eq!(
            kernel_functions(&unlink_btf(Unlink::Both), &[&unlink, &missing]),
            ["do_unlinkat", "filename_unlinkat"]
        );
        assert_eq!(
            kernel_functions(&unlink_btf(Unlink::Filename), &[&unlink]),
            ["filename_unlinkat"]
        );
    }
}
