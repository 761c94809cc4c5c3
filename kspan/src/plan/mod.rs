// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The plan: every probe checked against the running kernel's BTF.
//!
//! Planning is pure: it takes a parsed [`Btf`] and the probe definitions and
//! either returns, per probe, which argument registers to capture, or an error
//! that names the function, the parameter and what would fix it. Nothing is
//! loaded until every probe has planned, so a typo never leaves half the
//! probes attached.

mod capture;
mod choose;
pub mod denylist;
mod error;
pub mod fieldpath;
mod filter;
mod names;

use std::collections::HashMap;

use kspan_bpf::types::kspan_record;

pub use crate::kernel::tracefs::SyscallFormats;
pub use capture::{normalize, rust_int_type, CapturePlan, DEFAULT_BYTES_MAX, DEFAULT_STR_MAX};
pub(crate) use capture::{KIND_KBYTES, KIND_KSTR, KIND_UBYTES, KIND_USTR};
pub use choose::NotAttached;
pub use denylist::{NotTraced, Traceable};
pub use error::PlanError;
pub use filter::FilterPlan;
pub use names::{closest_functions, closest_names, did_you_mean};

use crate::annotation::{Mode, Probe};
use crate::kernel::btf::{Btf, FuncSignature, TypeClass};
use capture::{capture_source, check_compatible, plan_capture};
use names::intern;

type Result<T, E = PlanError> = std::result::Result<T, E>;

/// How one probe will be attached and decoded.
#[derive(Debug)]
pub struct ProbePlan {
    /// The probe.
    pub probe: &'static Probe,
    /// The kernel function (one match of a pattern such as `vfs_*`).
    pub function: &'static str,
    /// The kernel function's BTF signature.
    pub signature: FuncSignature,
    /// One per handler parameter other than `ret` and `span`, in order.
    pub captures: Vec<CapturePlan>,
    /// How many leading arguments the BPF program must save.
    pub nr_args: u32,
    /// Bytes of one record of this probe (header and data area).
    pub record_size: u32,
    /// Whether a negative return value is an errno that fails the span.
    pub errno_status: bool,
    /// What the kernel checks before it makes a call a span.
    pub filter: FilterPlan,
    /// Why the kernel will not attach a trampoline to this function (its
    /// signature), if it will not: `auto` goes straight to kprobes, and no
    /// multi-function link takes it.
    pub trampoline_refusal: Option<String>,
    /// The probe's functions before `function` (it names alternatives)
    /// that this kernel lacks or cannot trace, each with why.
    pub passed_over: Vec<(&'static str, String)>,
}

impl ProbePlan {
    /// The kernel function.
    pub fn function(&self) -> &'static str {
        self.function
    }

    /// The attach mode.
    pub fn mode(&self) -> Mode {
        self.probe.spec.mode
    }
}

/// What planning needs besides BTF, read from the system by the runtime.
#[derive(Debug, Default)]
pub struct PlanInputs {
    /// The `sys_enter_<name>` formats of the syscall sources.
    pub syscalls: SyscallFormats,
    /// What is known of which functions the kernel can trace.
    pub traceable: Traceable,
}

/// The plans, and the functions a pattern matched but that are not traced.
#[derive(Debug)]
pub struct PlanSet {
    /// One plan per traced function.
    pub plans: Vec<ProbePlan>,
    /// `(function, why)` for each match left out: deny list, notrace, inlined.
    pub skipped: Vec<(String, String)>,
    /// Optional probes left out: this kernel can trace none of their
    /// functions.
    pub not_attached: Vec<NotAttached>,
}

/// Plans every probe, expanding patterns (`vfs_*`); fails on the first probe
/// that cannot work, before anything touches the kernel.
pub fn plan_all(btf: &Btf, probes: &[&'static Probe], inputs: &PlanInputs) -> Result<PlanSet> {
    if probes.is_empty() {
        return Err(PlanError::NoProbes);
    }
    // Two probes naming one function are refused before anything else is
    // checked; matches of patterns are checked once expanded, below.
    // A function may be named by one probe, as its function or as an
    // alternative, whichever this kernel has.
    let mut named: HashMap<&str, &'static str> = HashMap::new();
    for p in probes {
        let spec = &p.spec;
        let rule = if spec.mode == Mode::Syscall && !spec.alternatives.is_empty() {
            Err(kspan_dsl::AlternativeError::Syscall)
        } else {
            kspan_dsl::check_alternatives(spec.function, spec.alternatives)
        };
        if let Err(source) = rule {
            return Err(PlanError::Alternatives {
                function: spec.function.to_owned(),
                location: spec.location,
                source,
            });
        }
        if denylist::is_pattern(spec.function) {
            continue;
        }
        for &function in std::iter::once(&spec.function).chain(spec.alternatives) {
            if let Some(first) = named.insert(function, spec.location) {
                return Err(PlanError::DuplicateProbe {
                    function: function.to_owned(),
                    first,
                    second: spec.location,
                });
            }
        }
    }
    let mut set = PlanSet {
        plans: Vec::new(),
        skipped: Vec::new(),
        not_attached: Vec::new(),
    };
    for &probe in probes {
        let spec = &probe.spec;
        if spec.mode == Mode::Syscall {
            if spec.optional && inputs.syscalls.get(spec.function).is_none() {
                let why = format!(
                    "this kernel has no syscalls:sys_enter_{} tracepoint",
                    spec.function
                );
                let suggestions = closest_names(
                    inputs.syscalls.known().iter().map(String::as_str),
                    spec.function,
                    3,
                );
                choose::not_traced(probe, vec![(spec.function, why)], suggestions, &mut set)?;
                continue;
            }
            set.plans
                .push(plan_probe_with(btf, probe, &inputs.syscalls)?);
            continue;
        }
        if !denylist::is_pattern(spec.function) && (spec.optional || !spec.alternatives.is_empty())
        {
            choose::plan_chosen(btf, probe, inputs, &mut set)?;
            continue;
        }
        if !denylist::is_pattern(spec.function) {
            if let Some(reason) = denylist::denied(spec.function) {
                return Err(PlanError::Denied {
                    function: spec.function.to_owned(),
                    location: spec.location,
                    reason,
                });
            }
            if let Some(reason) = inputs
                .traceable
                .why_not(spec.function)
                .and_then(|why| why.kernel_reason())
                .filter(|_| btf.has_function(spec.function))
            {
                return Err(PlanError::NotTraceable {
                    function: spec.function.to_owned(),
                    location: spec.location,
                    reason,
                });
            }
            set.plans
                .push(plan_probe_with(btf, probe, &inputs.syscalls)?);
            continue;
        }
        let matches = pattern_matches(btf, spec.function);
        if matches.is_empty() && spec.optional {
            let why = "the pattern matches no function in this kernel's BTF".to_owned();
            choose::not_traced(probe, vec![(spec.function, why)], Vec::new(), &mut set)?;
            continue;
        }
        if matches.is_empty() {
            return Err(PlanError::UnknownFunction {
                function: spec.function.to_owned(),
                location: spec.location,
                suggestions: Vec::new(),
            });
        }
        for name in matches {
            if let Some(why) = inputs.traceable.why_not(name) {
                set.skipped.push((name.to_owned(), why.to_string()));
                continue;
            }
            // A pattern in a trampoline mode skips what trampolines cannot
            // attach (`auto` takes kprobes for those instead).
            if matches!(spec.mode, Mode::Fexit | Mode::Fentry) {
                if let Some(why) = btf.trampoline_refusal(name) {
                    set.skipped.push((name.to_owned(), why));
                    continue;
                }
            }
            set.plans
                .push(plan_function(btf, probe, intern(name), &inputs.syscalls)?);
        }
    }
    let mut seen: HashMap<&str, &'static str> = HashMap::new();
    for plan in &set.plans {
        let location = plan.probe.spec.location;
        if let Some(first) = seen.insert(plan.function, location) {
            return Err(PlanError::DuplicateProbe {
                function: plan.function.to_owned(),
                first,
                second: location,
            });
        }
    }
    Ok(set)
}

/// The functions BTF describes that `pattern` matches, sorted.
fn pattern_matches<'b>(btf: &'b Btf, pattern: &str) -> Vec<&'b str> {
    // The pattern's literal start, compared as bytes before the rest.
    let prefix = &pattern[..pattern.find(['*', '?']).unwrap_or(pattern.len())];
    let mut matches: Vec<&str> = btf
        .function_names_starting(prefix)
        .filter(|name| denylist::glob_match(pattern, name))
        .collect();
    matches.sort_unstable();
    matches
}

/// Every kernel function `probes` name or match in BTF (syscall sources
/// and deny-listed functions left out): what [`plan_all`] asks
/// [`Traceable`] about.
pub fn kernel_functions<'b>(btf: &'b Btf, probes: &[&'static Probe]) -> Vec<&'b str> {
    let mut names = Vec::new();
    for probe in probes.iter().filter(|p| p.spec.mode != Mode::Syscall) {
        let function = probe.spec.function;
        if denylist::is_pattern(function) {
            names.extend(pattern_matches(btf, function));
            continue;
        }
        for &name in std::iter::once(&function).chain(probe.spec.alternatives) {
            if btf.has_function(name) {
                names.push(name);
            }
        }
    }
    names.retain(|name| denylist::denied(name).is_none());
    names.sort_unstable();
    names.dedup();
    names
}

/// Plans one probe that is not a syscall source.
pub fn plan_probe(btf: &Btf, probe: &'static Probe) -> Result<ProbePlan> {
    plan_probe_with(btf, probe, &SyscallFormats::new())
}

/// Plans one probe; a syscall source takes its signature from `syscalls`.
pub fn plan_probe_with(
    btf: &Btf,
    probe: &'static Probe,
    syscalls: &SyscallFormats,
) -> Result<ProbePlan> {
    plan_function(btf, probe, probe.spec.function, syscalls)
}

/// Plans `probe` on `function` (the probe's own, or one match of its pattern).
fn plan_function(
    btf: &Btf,
    probe: &'static Probe,
    function: &'static str,
    syscalls: &SyscallFormats,
) -> Result<ProbePlan> {
    let spec = &probe.spec;
    let signature = if spec.mode == Mode::Syscall {
        syscalls
            .get(function)
            .and_then(|format| crate::kernel::syscall::signature(btf, function, format))
            .ok_or_else(|| PlanError::UnknownSyscall {
                syscall: function.to_owned(),
                location: spec.location,
                suggestions: closest_names(
                    syscalls.known().iter().map(String::as_str),
                    function,
                    3,
                ),
            })?
    } else {
        btf.function(function)
            .ok_or_else(|| PlanError::UnknownFunction {
                function: function.to_owned(),
                location: spec.location,
                suggestions: choose::suggestions(btf, probe, syscalls, function, &[]),
            })?
    };
    if spec.params.len() > kspan_bpf::MAX_CAPS {
        return Err(PlanError::Capture {
            function: function.to_owned(),
            parameter: spec.params[kspan_bpf::MAX_CAPS].name.to_owned(),
            reason: format!(
                "a probe captures at most {} values; drop some parameters",
                kspan_bpf::MAX_CAPS
            ),
        });
    }

    if spec.histogram && !spec.mode.has_return() {
        // The macro refuses this at the token; a spec made by hand is
        // refused here.
        return Err(PlanError::HistogramWithoutDuration {
            function: function.to_owned(),
            location: spec.location,
            mode: spec.mode,
        });
    }

    let mut captures = Vec::with_capacity(spec.params.len());
    let mut data_used = 0usize;
    let mut nr_args = 0usize;
    for param in spec.params {
        let source = capture_source(btf, spec, &signature, param)?;
        let capture = plan_capture(
            btf,
            spec,
            &signature,
            param,
            source,
            &mut data_used,
            &mut nr_args,
        )?;
        captures.push(capture);
    }
    if data_used > kspan_bpf::MAX_DATA {
        return Err(PlanError::Capture {
            function: function.to_owned(),
            parameter: spec.params.last().map_or("", |p| p.name).to_owned(),
            reason: format!(
                "the strings and buffers of this probe need {data_used} bytes per call; the limit \
                 is {}: lower their `max`",
                kspan_bpf::MAX_DATA
            ),
        });
    }

    let ret_is_errno = matches!(
        signature.ret.class,
        TypeClass::Int {
            bytes: 4 | 8,
            signed: true
        }
    );
    if let Some(ret) = spec.ret {
        if !spec.mode.has_return() {
            return Err(PlanError::NoReturnValue {
                function: function.to_owned(),
                reason: format!(
                    "mode `{}` attaches at entry only; use mode = \"fexit\" or \"kretprobe\"",
                    spec.mode
                ),
            });
        }
        if signature.ret.class == TypeClass::Void {
            return Err(PlanError::NoReturnValue {
                function: function.to_owned(),
                reason: "the kernel function returns `void`; remove `ret`".to_owned(),
            });
        }
        check_compatible(function, "ret", &signature.ret, ret)?;
    }

    let filter = filter::plan_filter(spec, function, &signature.ret, &captures)?;
    let header = std::mem::size_of::<kspan_record>();
    let record_size = (header + data_used).next_multiple_of(8) as u32;
    Ok(ProbePlan {
        probe,
        function,
        signature,
        captures,
        nr_args: nr_args as u32,
        record_size,
        errno_status: spec.errno && spec.mode.has_return() && ret_is_errno,
        filter,
        trampoline_refusal: btf.trampoline_refusal(function),
        passed_over: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::btf::builder::sample;
    use capture::{KIND_REG, LEN_ARG, LEN_FIXED};
    use kspan::kernel_span;
    use opentelemetry::StringValue;

    fn btf() -> Btf {
        Btf::parse(&sample()).unwrap()
    }

    fn err(probe: &'static Probe) -> String {
        plan_probe(&btf(), probe).unwrap_err().to_string()
    }

    #[kernel_span("vfs_read")]
    fn count_and_ret(count: usize, ret: isize) {}

    /// The `btf` fuzz target's find: a near name that BTF lists as a
    /// function without a prototype failed planning as unknown, whose
    /// suggestions planned it again, without end (a hang, then a stack
    /// overflow).
    #[test]
    fn a_function_without_a_prototype_is_no_suggestion() {
        let mut b = crate::kernel::btf::builder::BtfBuilder::new();
        let int = b.int("int", 4, true);
        b.func_typed("vfs_reads", int);
        b.func_typed("vfs_readv", 0);
        let btf = Btf::parse(&b.build()).unwrap();
        assert!(btf.has_function("vfs_reads") && btf.function("vfs_reads").is_none());
        let e = plan_probe(&btf, &count_and_ret).unwrap_err().to_string();
        assert!(e.starts_with("unknown kernel function `vfs_read`"), "{e}");
    }

    #[kernel_span(
        "vfs_read",
        filter = "count >= 65536 && ret > 0 || ret == -11",
        min_duration = "2us",
        rate_limit = 1000,
        sum
    )]
    fn filtered_read(count: usize) {}

    #[kernel_span("kspan_void_fn", errors_only)]
    fn errors_of_void(flag: bool) {}

    #[kernel_span("kspan_void_fn", filter = "kind > 4294967296")]
    fn too_big(kind: u64) {}

    #[kernel_span("vfs_read", filter = "count > -1")]
    fn negative_of_unsigned(count: usize) {}

    #[test]
    fn filters_are_bound_to_captures_and_kernel_types() {
        use kspan_bpf::consts as c;
        let plan = plan_probe(&btf(), &filtered_read).unwrap();
        let f = &plan.filter;
        assert!(f.may_drop() && f.sum && !f.no_spans);
        assert_eq!(f.min_duration_ns, 2_000);
        assert_eq!(f.rate_interval_ns, 1_000_000);
        assert_eq!((f.ret_width, f.ret_signed), (8, true), "ssize_t");
        let clauses: Vec<(u8, u8, u8, u8, u8, u64)> = f
            .clauses
            .iter()
            .map(|c| (c.cap, c.op, c.width, c.is_signed, c.group, c.value))
            .collect();
        let ret = c::KSPAN_CLAUSE_RET as u8;
        assert_eq!(
            clauses,
            [
                (0, c::KSPAN_OP_GE as u8, 8, 0, 0, 65536),
                (ret, c::KSPAN_OP_GT as u8, 8, 1, 0, 0),
                (ret, c::KSPAN_OP_EQ as u8, 8, 1, 1, (-11i64) as u64),
            ]
        );
        let plain = plan_probe(&btf(), &count_and_ret).unwrap();
        assert!(!plain.filter.may_drop() && plain.filter.clauses.is_empty());
    }

    #[test]
    fn filters_the_kernel_types_cannot_hold_are_refused() {
        let e = err(&errors_of_void);
        assert!(
            e.contains("`errors_only`") && e.contains("returns `void`"),
            "{e}"
        );
        let e = err(&too_big);
        assert!(e.contains("4294967296 does not fit `kind`"), "{e}");
        let e = err(&negative_of_unsigned);
        assert!(
            e.contains("-1 does not fit `count`") && e.contains("unsigned 64-bit"),
            "{e}"
        );
    }

    #[test]
    fn plans_vfs_read_count_and_ret() {
        let plan = plan_probe(&btf(), &count_and_ret).unwrap();
        assert_eq!(plan.captures.len(), 1);
        assert_eq!(plan.captures[0].bpf.arg, 2);
        assert_eq!(plan.captures[0].bpf.kind, KIND_REG);
        assert_eq!(plan.captures[0].attribute, "kernel.arg.count");
        assert_eq!(plan.nr_args, 3);
        assert!(
            plan.errno_status,
            "ssize_t returns follow the errno convention"
        );
        assert_eq!(
            plan.record_size as usize,
            std::mem::size_of::<kspan_record>()
        );
    }

    #[test]
    fn a_histogram_needs_a_duration() {
        static INSTANT: Probe = Probe {
            spec: crate::annotation::ProbeSpec {
                function: "vfs_read",
                alternatives: &[],
                optional: false,
                mode: Mode::Fentry,
                params: &[],
                ret: None,
                errno: true,
                histogram: true,
                filter: crate::annotation::FilterSpec::NONE,
                sum: false,
                spans: true,
                location: "made:by_hand",
            },
            handler: |_, _| {},
        };
        assert_eq!(
            err(&INSTANT),
            "`vfs_read` (probe at made:by_hand): `histogram` needs a duration, and mode `fentry` \
             attaches at entry only (an instant); use mode = \"fexit\" or \"kretprobe\", or \
             remove `histogram`"
        );
        static SPAN: Probe = Probe {
            spec: crate::annotation::ProbeSpec {
                mode: Mode::Fexit,
                ..INSTANT.spec
            },
            handler: |_, _| {},
        };
        assert!(plan_probe(&btf(), &SPAN).is_ok());
    }

    #[kernel_span("vfs_read", mode = "fentry")]
    fn pointers(pos: *const i64, file: u64) {}

    #[kernel_span("kspan_void_fn", errno = false)]
    fn bool_and_enum(flag: bool, kind: u32) {}

    #[test]
    fn pointers_bools_enums() {
        let plan = plan_probe(&btf(), &pointers).unwrap();
        assert_eq!((plan.captures[0].bpf.arg, plan.captures[1].bpf.arg), (3, 0));
        let plan = plan_probe(&btf(), &bool_and_enum).unwrap();
        assert_eq!(plan.nr_args, 2);
        let names = plan.captures[1].enum_names.as_ref().unwrap();
        assert_eq!(names[1], (1, StringValue::from("PIDTYPE_TGID")));
        assert!(!plan.errno_status);
    }

    #[kernel_span("vfs_read")]
    fn strings_and_buffers(
        #[capture(max = 100)] buf: &str,
        #[capture(len = "count")] pos: &[u8],
        file: [u8; 16],
    ) {
    }

    #[test]
    fn strings_and_buffers_get_data_slots() {
        let plan = plan_probe(&btf(), &strings_and_buffers).unwrap();
        let [s, b, a] = &plan.captures[..] else {
            panic!()
        };
        assert_eq!(
            (s.bpf.kind, s.bpf.data_off, s.bpf.data_len),
            (KIND_KSTR, 0, 102)
        );
        assert_eq!(s.bound, 100);
        assert_eq!(
            (b.bpf.kind, b.bpf.len_src, b.bpf.len_arg),
            (KIND_KBYTES, LEN_ARG, 2)
        );
        assert_eq!((b.bpf.data_off, b.bpf.data_len), (102, 256));
        assert_eq!(
            (a.bpf.kind, a.bpf.len_src, a.bpf.data_len),
            (KIND_KBYTES, LEN_FIXED, 16)
        );
        let header = std::mem::size_of::<kspan_record>();
        assert_eq!(
            plan.record_size as usize,
            (header + 102 + 256 + 16).next_multiple_of(8)
        );
    }

    #[kernel_span("vfs_read")]
    fn no_len(buf: &[u8]) {}

    #[kernel_span("vfs_read")]
    fn str_of_int(count: &str) {}

    #[kernel_span("vfs_read")]
    fn bad_len(#[capture(len = "size")] buf: &[u8]) {}

    #[kernel_span("vfs_read")]
    fn too_much(
        #[capture(max = 1000)] buf: &str,
        #[capture(len = "count", max = 1000)] pos: &[u8],
    ) {
    }

    #[test]
    fn capture_errors_name_the_parameter_and_the_fix() {
        assert!(err(&no_len).contains("cannot capture `buf`: a `&[u8]` buffer needs its length"));
        assert!(err(&str_of_int)
            .contains("`&str` captures a `char *` or a `char` array, but the value is `size_t`"));
        assert!(err(&bad_len).contains("`len = \"size\"` names no parameter of `vfs_read`"));
        assert!(err(&too_much).contains("need 2002 bytes per call; the limit is 1024"));
    }

    #[kernel_span("vfs_raed")]
    fn typo() {}

    #[test]
    fn unknown_function_suggests_close_names() {
        let e = plan_probe(&btf(), &typo).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(&e, PlanError::UnknownFunction { suggestions, .. } if suggestions[0] == "vfs_read"),
            "{msg}"
        );
        assert!(msg.contains("unknown kernel function `vfs_raed`"), "{msg}");
        assert!(msg.contains("did you mean `vfs_read`"), "{msg}");
    }

    #[kernel_span("vfs_read")]
    fn wrong_name(size: usize) {}

    #[test]
    fn unknown_parameter_lists_real_ones() {
        let msg = err(&wrong_name);
        assert!(msg.contains("`vfs_read` has no parameter `size`"), "{msg}");
        assert!(
            msg.contains("`file: struct file *`, `buf: char *`, `count: size_t`, `pos: loff_t *`"),
            "{msg}"
        );
    }

    #[kernel_span("vfs_read")]
    fn signed_count(count: i32) {}

    #[kernel_span("vfs_read")]
    fn unsigned_ret(ret: usize) {}

    #[kernel_span("vfs_read")]
    fn bool_file(file: bool) {}

    #[kernel_span("kspan_struct_arg")]
    fn struct_by_value(f: u64) {}

    #[test]
    fn type_mismatch_names_both_types() {
        assert_eq!(
            err(&signed_count),
            "`vfs_read`: `count` is `size_t` in the kernel but `i32` (signed 32-bit) in the \
             handler; `size_t` is unsigned 64-bit: use `u64` or `usize`"
        );
        assert!(err(&unsigned_ret).contains("`ret` is `ssize_t` in the kernel but `usize`"));
        assert!(err(&bool_file).contains("use a raw pointer"));
        assert!(err(&struct_by_value).contains("`struct file` is passed by value"));
    }

    #[kernel_span("kspan_void_fn")]
    fn ret_of_void(ret: isize) {}

    #[test]
    fn ret_needs_a_value() {
        assert!(err(&ret_of_void).contains("returns `void`"));
    }

    #[kernel_span("kspan_seven")]
    fn seventh(g: i32) {}

    #[test]
    fn seventh_argument_is_out_of_reach() {
        assert!(err(&seventh).contains("argument #7"));
    }

    #[kernel_span("vfs_read", mode = "fentry")]
    fn read_entry() {}

    #[test]
    fn duplicates_and_empty_sets_are_refused() {
        let none = PlanInputs::default();
        assert!(matches!(
            plan_all(&btf(), &[], &none),
            Err(PlanError::NoProbes)
        ));
        assert!(matches!(
            plan_all(&btf(), &[&count_and_ret, &read_entry], &none),
            Err(PlanError::DuplicateProbe { .. })
        ));
    }

    #[kernel_span("vfs_*")]
    fn every_vfs_file(file: u64, ret: i64) {}

    #[kernel_span("vfs_*")]
    fn every_vfs_count(count: usize) {}

    #[kernel_span("nothing_*")]
    fn matches_nothing() {}

    #[kernel_span("_raw_spin_lock")]
    fn denied_lock() {}

    #[test]
    fn patterns_expand_to_every_match_and_check_each() {
        let set = plan_all(&btf(), &[&every_vfs_file], &PlanInputs::default()).unwrap();
        let functions: Vec<&str> = set.plans.iter().map(|p| p.function()).collect();
        assert_eq!(functions, ["vfs_read", "vfs_write"]);
        assert!(set.skipped.is_empty());
        let msg = plan_all(&btf(), &[&every_vfs_count], &PlanInputs::default())
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("`vfs_write` has no parameter `count`"),
            "{msg}"
        );
        let msg = plan_all(&btf(), &[&matches_nothing], &PlanInputs::default())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("the pattern matches no function"), "{msg}");
    }

    #[kspan::kernel_span("kspan_*", mode = "fexit")]
    fn kspan_functions_by_trampoline() {}

    #[kspan::kernel_span("kspan_*", mode = "auto")]
    fn kspan_functions_auto() {}

    #[test]
    fn trampoline_patterns_skip_what_trampolines_refuse_and_auto_keeps_it() {
        // `kspan_struct_arg` takes a `struct file` (more than 16 bytes) by value.
        let set = plan_all(
            &btf(),
            &[&kspan_functions_by_trampoline],
            &PlanInputs::default(),
        )
        .unwrap();
        let skipped: Vec<&(String, String)> = set
            .skipped
            .iter()
            .filter(|(f, _)| f == "kspan_struct_arg")
            .collect();
        assert_eq!(skipped.len(), 1, "{:?}", set.skipped);
        assert!(skipped[0].1.contains("by value"), "{}", skipped[0].1);
        assert!(set.plans.iter().all(|p| p.trampoline_refusal.is_none()));
        let set = plan_all(&btf(), &[&kspan_functions_auto], &PlanInputs::default()).unwrap();
        let kept = set
            .plans
            .iter()
            .find(|p| p.function == "kspan_struct_arg")
            .expect("auto keeps it: kprobes can take it");
        assert!(kept.trampoline_refusal.is_some());
    }

    #[test]
    fn the_deny_list_is_enforced_and_untraceable_matches_are_reported() {
        let msg = plan_all(&btf(), &[&denied_lock], &PlanInputs::default())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("`_raw_spin_lock`"), "{msg}");
        assert!(msg.contains("deny list: locking primitives"), "{msg}");
        let inputs = PlanInputs {
            traceable: Traceable::Listed(["vfs_read".to_owned()].into_iter().collect()),
            ..PlanInputs::default()
        };
        let set = plan_all(&btf(), &[&every_vfs_file], &inputs).unwrap();
        assert_eq!(set.plans.len(), 1);
        assert_eq!(set.skipped[0].0, "vfs_write");
        assert!(
            set.skipped[0]
                .1
                .contains("absent from available_filter_functions"),
            "{}",
            set.skipped[0].1
        );
        // What the symbol table rules out: skipped from a pattern, refused
        // by name; anything else is left to the kernel.
        let inputs = PlanInputs {
            traceable: Traceable::Excluded(
                [("vfs_write".to_owned(), NotTraced::FreedInit)]
                    .into_iter()
                    .collect(),
            ),
            ..PlanInputs::default()
        };
        let set = plan_all(&btf(), &[&every_vfs_file], &inputs).unwrap();
        assert_eq!(set.plans.len(), 1);
        assert_eq!(set.plans[0].function, "vfs_read");
        assert_eq!(set.skipped.len(), 1);
        assert!(set.skipped[0].1.contains("__init"), "{}", set.skipped[0].1);
        let msg = plan_all(&btf(), &[&named_write], &inputs)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("`vfs_write` (probe at") && msg.contains("an __init function"),
            "{msg}"
        );
        let msg = plan_all(
            &btf(),
            &[&strings_and_buffers],
            &PlanInputs {
                traceable: Traceable::Listed(Default::default()),
                ..PlanInputs::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(msg.contains("`vfs_read` (probe at"), "{msg}");
        assert!(msg.contains("cannot be traced"), "{msg}");
    }

    #[kernel_span("vfs_write")]
    fn named_write() {}

    #[kernel_span("vfs_read")]
    fn file_name(#[capture(path = "file->f_path.dentry->d_name.name")] name: &str, ret: isize) {}

    #[kernel_span("vfs_reed")]
    fn host_typo() {}

    #[test]
    fn plans_against_this_machines_kernel() {
        let data = std::fs::read("/sys/kernel/btf/vmlinux")
            .expect("the kernel BTF feature: /sys/kernel/btf/vmlinux must exist");
        let btf = Btf::parse(&data).unwrap();
        assert_eq!(
            plan_probe(&btf, &count_and_ret).unwrap().captures[0]
                .bpf
                .arg,
            2
        );
        let msg = plan_probe(&btf, &host_typo).unwrap_err().to_string();
        assert!(msg.contains("`vfs_read`"), "{msg}");
        let plan = plan_probe(&btf, &file_name).unwrap();
        let c = &plan.captures[0].bpf;
        // file->f_path.dentry: no load; ->d_name.name: load; then the string's address: load.
        assert_eq!(c.nsteps, 3);
        assert_eq!(
            [c.steps[0].load, c.steps[1].load, c.steps[2].load],
            [0, 1, 1]
        );
        assert_eq!((c.kind, c.steps[2].offset), (KIND_KSTR, 0));
    }

    #[kernel_span("kspan_seven")]
    fn widened(a: i64, ret: i64) {}

    #[kernel_span("ksys_read")]
    fn unsigned_to_wider_signed(fd: i64) {}

    #[kernel_span("kspan_seven")]
    fn signed_to_unsigned(a: u64) {}

    #[test]
    fn wider_rust_types_read_narrower_kernel_types() {
        assert!(plan_probe(&btf(), &widened).is_ok());
        assert!(plan_probe(&btf(), &unsigned_to_wider_signed).is_ok());
        assert!(err(&signed_to_unsigned).contains("`a` is `int` in the kernel but `u64`"));
        assert_eq!(
            normalize(
                0xdead_beef_ffff_fffe,
                TypeClass::Int {
                    bytes: 4,
                    signed: true
                }
            ),
            (-2i64) as u64
        );
        assert_eq!(
            normalize(
                0xdead_beef_ffff_fffe,
                TypeClass::Int {
                    bytes: 4,
                    signed: false
                }
            ),
            0xffff_fffe
        );
        assert_eq!(normalize(0x1ff, TypeClass::Bool), 0xff);
        assert_eq!(normalize(7, TypeClass::Pointer), 7);
    }

    #[kernel_span("kspan_connect")]
    fn flex_bytes(#[capture(path = "addr->sa_data")] sa_data: &[u8]) {}

    #[kernel_span("kspan_connect")]
    fn flex_first_bytes(#[capture(path = "addr->sa_data")] sa_data: [u8; 14]) {}

    #[kernel_span("kspan_connect")]
    fn flex_with_len(#[capture(path = "addr->sa_data", len = "addrlen")] sa_data: &[u8]) {}

    #[test]
    fn a_flexible_array_member_is_read_for_the_length_the_capture_gives() {
        use crate::kernel::btf::builder::BtfBuilder;
        let mut b = BtfBuilder::new();
        let int = b.int("int", 4, true);
        let ushort = b.int("short unsigned int", 2, false);
        let ch = b.int("char", 1, true);
        let index = b.int("int", 4, true);
        let flex = b.array(ch, index, 0);
        let sockaddr = b.struct_of(
            "sockaddr",
            2,
            &[("sa_family", ushort, 0), ("sa_data", flex, 2)],
        );
        let sockaddr_ptr = b.ptr(sockaddr);
        b.func(
            "kspan_connect",
            int,
            &[("fd", int), ("addr", sockaddr_ptr), ("addrlen", int)],
        );
        let btf = Btf::parse(&b.build()).unwrap();
        let err = plan_probe(&btf, &flex_bytes).unwrap_err().to_string();
        assert!(
            err.contains("flexible array member") && err.contains("len = \"<parameter>\""),
            "{err}"
        );
        let first = plan_probe(&btf, &flex_first_bytes).expect("`[u8; N]` reads N bytes");
        assert_eq!(first.captures[0].bpf.data_len, 14);
        plan_probe(&btf, &flex_with_len).expect("the length from a parameter");
    }

    #[kernel_span("do_unlinkat")]
    fn refcount_as_a_number(#[capture(path = "name->refcnt")] refcnt: i32) {}

    #[test]
    fn a_struct_member_that_is_a_struct_names_its_members() {
        use crate::kernel::btf::builder::BtfBuilder;
        let mut b = BtfBuilder::new();
        let int = b.int("int", 4, true);
        let ch = b.int("char", 1, true);
        let counter = b.struct_of("", 4, &[("counter", int, 0)]);
        let atomic = b.typedef("atomic_t", counter);
        let name_ptr = b.ptr(ch);
        let filename = b.struct_of(
            "filename",
            16,
            &[("name", name_ptr, 0), ("refcnt", atomic, 8)],
        );
        let filename_ptr = b.ptr(filename);
        b.func("do_unlinkat", int, &[("dfd", int), ("name", filename_ptr)]);
        let btf = Btf::parse(&b.build()).unwrap();
        let err = plan_probe(&btf, &refcount_as_a_number)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`atomic_t` is a struct or union") && err.contains("(`.counter`)"),
            "{err}"
        );
    }
}
