// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The plan: every probe checked against the running kernel's BTF.
//!
//! Planning is pure: it takes a parsed [`Btf`] and the probe definitions and
//! either returns, per probe, which argument registers to capture, or an error
//! that names the function, the parameter and what would fix it. Nothing is
//! loaded until every probe has planned, so a typo never leaves half the
//! probes attached.

use std::collections::{HashMap, HashSet};

use kspan_bpf::types::{kspan_capture, kspan_config, kspan_record};
use opentelemetry::StringValue;

use crate::btf::{Btf, FuncSignature, KernelType, TypeClass};
use crate::denylist;
use crate::error::{Error, Result};
use crate::fieldpath::{self, Step};
use crate::probe::{LenSource, Mode, ParamSpec, Probe, ProbeSpec};
use crate::value::{ValueKind, ValueType};

use kspan_bpf::consts;

// enum kspan_cap_kind and enum kspan_len_src of kspan.h, at their field width.
pub(crate) const KIND_REG: u8 = consts::KSPAN_CAP_REG as u8;
pub(crate) const KIND_MEM: u8 = consts::KSPAN_CAP_MEM as u8;
pub(crate) const KIND_KSTR: u8 = consts::KSPAN_CAP_KSTR as u8;
pub(crate) const KIND_USTR: u8 = consts::KSPAN_CAP_USTR as u8;
pub(crate) const KIND_KBYTES: u8 = consts::KSPAN_CAP_KBYTES as u8;
pub(crate) const KIND_UBYTES: u8 = consts::KSPAN_CAP_UBYTES as u8;
const LEN_FIXED: u8 = consts::KSPAN_LEN_FIXED as u8;
const LEN_ARG: u8 = consts::KSPAN_LEN_ARG as u8;
const LEN_RET: u8 = consts::KSPAN_LEN_RET as u8;

/// Default bound of a string capture, in bytes.
pub const DEFAULT_STR_MAX: u16 = 64;
/// Default bound of a buffer capture, in bytes.
pub const DEFAULT_BYTES_MAX: u16 = 256;

/// How one value will be captured and decoded.
#[derive(Debug, Clone)]
pub struct CapturePlan {
    /// What the annotation asked for.
    pub spec: ParamSpec,
    /// The kernel type of the captured value.
    pub kernel_type: KernelType,
    /// What the BPF program does (`kspan_capture` in `kspan.h`).
    pub bpf: kspan_capture,
    /// The attribute key (`kernel.arg.<name>`), made once: a static string,
    /// so that a span's key costs a copy, not a clone.
    pub attribute: &'static str,
    /// `kernel.arg.<name>.truncated`, made once.
    pub truncated_attribute: &'static str,
    /// `kernel.arg.<name>.fault`, made once.
    pub fault_attribute: &'static str,
    /// Enumerator values and names when the kernel type is an enum (names
    /// interned: an attribute value costs no allocation per span).
    pub enum_names: Option<Vec<(i64, StringValue)>>,
    /// Bound of a string or buffer, in bytes.
    pub bound: usize,
}

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
    /// How the programs find the application's span (set by the runtime).
    pub thread_context: ThreadContextSettings,
}

/// How the BPF programs read the application's thread context (OTEP 4947)
/// and what they do without one; the same for every probe of a runtime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadContextSettings {
    /// Byte offset of `thread.fsbase` in `task_struct`; 0: do not read.
    pub task_fsbase_offset: u32,
    /// Offset of `otel_thread_ctx_v1` from the fs base.
    pub slot_offset: i64,
    /// The process whose threads publish (this one).
    pub tgid: u32,
    /// `enum kspan_orphans`.
    pub orphans: u32,
    /// Record calls under unsampled application spans too.
    pub keep_unsampled: bool,
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

    /// The settings the BPF programs get for this probe.
    pub fn bpf_config(&self, mode: Mode, probe_id: u32, target_tgid: u32) -> kspan_config {
        let mut caps = [kspan_capture::default(); kspan_bpf::MAX_CAPS];
        for (slot, c) in caps.iter_mut().zip(&self.captures) {
            *slot = c.bpf;
        }
        kspan_config {
            target_tgid,
            probe_id,
            nr_args: self.nr_args,
            mode: mode.bpf_value(),
            nr_caps: self.captures.len() as u32,
            record_size: self.record_size,
            probe_id_from_cookie: 0,
            task_fsbase_offset: self.thread_context.task_fsbase_offset,
            ctx_tgid: self.thread_context.tgid,
            orphans: self.thread_context.orphans,
            keep_unsampled: u32::from(self.thread_context.keep_unsampled),
            reserved: 0,
            thread_ctx_offset: self.thread_context.slot_offset,
            caps,
        }
    }
}

/// What planning needs besides BTF, read from the system by the runtime.
#[derive(Debug, Default)]
pub struct PlanInputs {
    /// The `sys_enter_<name>` formats of the syscall sources.
    pub syscalls: SyscallFormats,
    /// The functions the kernel can trace (`available_filter_functions`),
    /// when it could be read: a function missing there is inlined or notrace.
    pub traceable: Option<HashSet<String>>,
}

/// The plans, and the functions a pattern matched but that are not traced.
#[derive(Debug)]
pub struct PlanSet {
    /// One plan per traced function.
    pub plans: Vec<ProbePlan>,
    /// `(function, why)` for each match left out: deny list, notrace, inlined.
    pub skipped: Vec<(String, String)>,
}

/// Plans every probe, expanding patterns (`vfs_*`); fails on the first probe
/// that cannot work, before anything touches the kernel.
pub fn plan_all(btf: &Btf, probes: &[&'static Probe], inputs: &PlanInputs) -> Result<PlanSet> {
    if probes.is_empty() {
        return Err(Error::NoProbes);
    }
    // Two probes naming one function are refused before anything else is
    // checked; matches of patterns are checked once expanded, below.
    let mut named: HashMap<&str, &'static str> = HashMap::new();
    for p in probes
        .iter()
        .filter(|p| !denylist::is_pattern(p.spec.function))
    {
        if let Some(first) = named.insert(p.spec.function, p.spec.location) {
            return Err(Error::DuplicateProbe {
                function: p.spec.function.to_owned(),
                first,
                second: p.spec.location,
            });
        }
    }
    let mut set = PlanSet {
        plans: Vec::new(),
        skipped: Vec::new(),
    };
    for &probe in probes {
        let spec = &probe.spec;
        if spec.mode == Mode::Syscall {
            set.plans
                .push(plan_probe_with(btf, probe, &inputs.syscalls)?);
            continue;
        }
        if !denylist::is_pattern(spec.function) {
            if let Some(reason) = denylist::denied(spec.function) {
                return Err(Error::Denied {
                    function: spec.function.to_owned(),
                    location: spec.location,
                    reason,
                });
            }
            if let Some(traceable) = &inputs.traceable {
                if btf.function(spec.function).is_some() && !traceable.contains(spec.function) {
                    return Err(Error::NotTraceable {
                        function: spec.function.to_owned(),
                        location: spec.location,
                    });
                }
            }
            set.plans
                .push(plan_probe_with(btf, probe, &inputs.syscalls)?);
            continue;
        }
        let mut matches: Vec<&str> = btf
            .function_names()
            .filter(|name| denylist::glob_match(spec.function, name))
            .collect();
        matches.sort_unstable();
        if matches.is_empty() {
            return Err(Error::UnknownFunction {
                function: spec.function.to_owned(),
                location: spec.location,
                suggestions: Vec::new(),
            });
        }
        for name in matches {
            if let Some(reason) = denylist::denied(name) {
                set.skipped
                    .push((name.to_owned(), format!("deny list: {reason}")));
                continue;
            }
            if let Some(traceable) = &inputs.traceable {
                if !traceable.contains(name) {
                    set.skipped.push((
                        name.to_owned(),
                        "not traceable: inlined or notrace (absent from available_filter_functions)"
                            .to_owned(),
                    ));
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
            return Err(Error::DuplicateProbe {
                function: plan.function.to_owned(),
                first,
                second: location,
            });
        }
    }
    Ok(set)
}

/// The `sys_enter_<name>` tracepoint formats of the syscall sources, by
/// syscall name (read from tracefs by the runtime).
pub type SyscallFormats = HashMap<&'static str, String>;

/// Where a capture starts: an argument register, maybe walked through memory.
struct Source {
    arg: usize,
    steps: Vec<Step>,
    /// The type of what `steps` reach (the register's type without a path).
    target: KernelType,
    /// Whether the steps end at an address in memory (a path) rather than
    /// at the register's value.
    in_memory: bool,
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
            .and_then(|format| crate::syscall::signature(btf, function, format))
            .ok_or_else(|| Error::UnknownSyscall {
                syscall: function.to_owned(),
                location: spec.location,
                suggestions: Vec::new(),
            })?
    } else {
        btf.function(function)
            .ok_or_else(|| Error::UnknownFunction {
                function: function.to_owned(),
                location: spec.location,
                suggestions: closest_names(btf.function_names(), function, 3),
            })?
    };
    if spec.params.len() > kspan_bpf::MAX_CAPS {
        return Err(Error::Capture {
            function: function.to_owned(),
            parameter: spec.params[kspan_bpf::MAX_CAPS].name.to_owned(),
            reason: format!(
                "a probe captures at most {} values; drop some parameters",
                kspan_bpf::MAX_CAPS
            ),
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
        return Err(Error::Capture {
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
            return Err(Error::NoReturnValue {
                function: function.to_owned(),
                reason: format!(
                    "mode `{}` attaches at entry only; use mode = \"fexit\" or \"kretprobe\"",
                    spec.mode
                ),
            });
        }
        if signature.ret.class == TypeClass::Void {
            return Err(Error::NoReturnValue {
                function: function.to_owned(),
                reason: "the kernel function returns `void`; remove `ret`".to_owned(),
            });
        }
        check_compatible(function, "ret", &signature.ret, ret)?;
    }

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
        thread_context: ThreadContextSettings::default(),
    })
}

fn capture_source(
    btf: &Btf,
    spec: &ProbeSpec,
    signature: &FuncSignature,
    param: &ParamSpec,
) -> Result<Source> {
    let function = signature.name.as_str();
    if let (Some(_), Mode::Syscall) = (param.path, spec.mode) {
        return Err(Error::Capture {
            function: function.to_owned(),
            parameter: param.name.to_owned(),
            reason: "field paths are not supported on syscall sources (their pointers are \
                     user-space memory); capture the argument itself"
                .to_owned(),
        });
    }
    if let Some(text) = param.path {
        let path = fieldpath::parse(text).map_err(|source| Error::PathSyntax {
            function: function.to_owned(),
            parameter: param.name.to_owned(),
            path: text.to_owned(),
            source,
        })?;
        let resolved =
            fieldpath::resolve(btf, function, &path).map_err(|source| Error::FieldPath {
                location: spec.location,
                source,
            })?;
        return Ok(Source {
            arg: resolved.arg_index,
            steps: resolved.steps,
            target: resolved.target,
            in_memory: true,
        });
    }
    let Some(arg) = signature
        .params
        .iter()
        .position(|(name, _)| name == param.name)
    else {
        return Err(Error::UnknownParameter {
            function: function.to_owned(),
            parameter: param.name.to_owned(),
            location: spec.location,
            available: signature
                .params
                .iter()
                .map(|(n, t)| format!("`{n}: {}`", t.c_name))
                .collect(),
        });
    };
    if arg >= kspan_bpf::MAX_ARGS {
        return Err(Error::ArgumentOutOfReach {
            function: function.to_owned(),
            parameter: param.name.to_owned(),
            position: arg + 1,
            max: kspan_bpf::MAX_ARGS,
        });
    }
    Ok(Source {
        arg,
        steps: Vec::new(),
        target: signature.params[arg].1.clone(),
        in_memory: false,
    })
}

fn plan_capture(
    btf: &Btf,
    spec: &ProbeSpec,
    signature: &FuncSignature,
    param: &ParamSpec,
    mut source: Source,
    data_used: &mut usize,
    nr_args: &mut usize,
) -> Result<CapturePlan> {
    let function = signature.name.as_str();
    let fail = |reason: String| Error::Capture {
        function: function.to_owned(),
        parameter: param.name.to_owned(),
        reason,
    };
    let target = source.target.clone();
    if target.is_user_pointer && !param.user && !param.ty.kind.is_scalar() {
        return Err(fail(format!(
            "`{}` is a user-space pointer: add `user` to read the memory behind it",
            target.c_name
        )));
    }
    if param.user && !matches!(target.class, TypeClass::Pointer) {
        return Err(fail(format!(
            "`user` reads memory behind a pointer, but the value is `{}`",
            target.c_name
        )));
    }
    let mut bpf = kspan_capture::default();
    let mut bound = 0usize;
    let mut data_len = 0usize;
    match param.ty.kind {
        ValueKind::Int { .. } | ValueKind::Bool | ValueKind::Pointer => {
            if param.user {
                return Err(fail(
                    "`user` applies to `&str`, `&[u8]` and `[u8; N]` captures, not to scalars"
                        .to_owned(),
                ));
            }
            check_compatible(function, param.name, &target, param.ty)?;
            if source.in_memory {
                bpf.kind = KIND_MEM;
                bpf.size = scalar_width(&target) as u8;
            } else {
                bpf.kind = KIND_REG;
            }
        }
        ValueKind::Str => {
            let max = param.max.unwrap_or(DEFAULT_STR_MAX);
            match target.class {
                TypeClass::Pointer if target.points_to_char => {
                    if source.in_memory {
                        // The member holds the string's address.
                        source.steps.push(Step {
                            load: true,
                            offset: 0,
                        });
                    }
                }
                TypeClass::Array {
                    elem_is_char: true, ..
                } if source.in_memory && !param.user => {}
                _ => {
                    return Err(fail(format!(
                        "`&str` captures a `char *` or a `char` array, but the value is `{}`",
                        target.c_name
                    )))
                }
            }
            bpf.kind = if param.user { KIND_USTR } else { KIND_KSTR };
            bound = usize::from(max);
            // One more character than the bound tells a string that only
            // fits from one that was cut, plus the NUL.
            data_len = bound + 2;
        }
        ValueKind::Bytes | ValueKind::ByteArray { .. } => {
            let fixed = match param.ty.kind {
                ValueKind::ByteArray { len } => Some(usize::from(len)),
                _ => None,
            };
            match target.class {
                TypeClass::Pointer => {
                    if source.in_memory {
                        source.steps.push(Step {
                            load: true,
                            offset: 0,
                        });
                    }
                }
                TypeClass::Array {
                    elem_bytes, len, ..
                } if source.in_memory && !param.user => {
                    let have = (elem_bytes * len) as usize;
                    if let Some(n) = fixed {
                        if n > have {
                            return Err(fail(format!(
                                "`[u8; {n}]` is longer than `{}` ({have} bytes)",
                                target.c_name
                            )));
                        }
                    }
                }
                _ => {
                    return Err(fail(format!(
                    "byte captures read behind a pointer or from an array, but the value is `{}`",
                    target.c_name
                )))
                }
            }
            bpf.kind = if param.user { KIND_UBYTES } else { KIND_KBYTES };
            match (fixed, param.len) {
                (Some(n), None) => {
                    bpf.len_src = LEN_FIXED;
                    bound = n;
                }
                (Some(_), Some(_)) => {
                    return Err(fail("`[u8; N]` has its length already: remove `len`".to_owned()))
                }
                (None, Some(LenSource::Ret)) => {
                    if !spec.mode.has_return() {
                        return Err(fail(
                            "`len = \"ret\"` needs mode = \"fexit\" or \"kretprobe\"".to_owned(),
                        ));
                    }
                    bpf.len_src = LEN_RET;
                    bound = usize::from(param.max.unwrap_or(DEFAULT_BYTES_MAX));
                }
                (None, Some(LenSource::Param(name))) => {
                    let Some(pos) = signature.params.iter().position(|(n, _)| n == name) else {
                        return Err(fail(format!(
                            "`len = \"{name}\"` names no parameter of `{function}`; its parameters are: {}",
                            signature.params.iter().map(|(n, _)| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                        )));
                    };
                    if pos >= kspan_bpf::MAX_ARGS || !matches!(signature.params[pos].1.class, TypeClass::Int { .. }) {
                        return Err(fail(format!(
                            "`len = \"{name}\"` must name an integer among the first {} parameters",
                            kspan_bpf::MAX_ARGS
                        )));
                    }
                    bpf.len_src = LEN_ARG;
                    bpf.len_arg = pos as u8;
                    *nr_args = (*nr_args).max(pos + 1);
                    bound = usize::from(param.max.unwrap_or(DEFAULT_BYTES_MAX));
                }
                (None, None) => match target.class {
                    TypeClass::Array { elem_bytes, len, .. } => {
                        bpf.len_src = LEN_FIXED;
                        bound = ((elem_bytes * len) as usize).min(usize::from(param.max.unwrap_or(DEFAULT_BYTES_MAX)));
                    }
                    _ => {
                        return Err(fail(
                            "a `&[u8]` buffer needs its length: `len = \"<parameter>\"` or `len = \"ret\"`"
                                .to_owned(),
                        ))
                    }
                },
            }
            data_len = bound;
        }
    }
    if source.steps.len() > kspan_bpf::MAX_STEPS {
        return Err(fail(format!(
            "the path needs {} pointer hops and offsets; the limit is {}",
            source.steps.len(),
            kspan_bpf::MAX_STEPS
        )));
    }
    bpf.arg = source.arg as u8;
    bpf.nsteps = source.steps.len() as u8;
    for (slot, step) in bpf.steps.iter_mut().zip(&source.steps) {
        slot.offset = step.offset;
        slot.load = u32::from(step.load);
    }
    bpf.data_off = u16::try_from(*data_used).unwrap_or(u16::MAX);
    bpf.data_len = u16::try_from(data_len).unwrap_or(u16::MAX);
    *data_used += data_len;
    *nr_args = (*nr_args).max(source.arg + 1);
    Ok(CapturePlan {
        spec: *param,
        enum_names: btf.enumerators(target.id).map(|names| {
            names
                .into_iter()
                .map(|(name, value)| (value, StringValue::from(intern(&name))))
                .collect()
        }),
        kernel_type: target,
        bpf,
        attribute: arg_attribute(param.name, ""),
        truncated_attribute: arg_attribute(param.name, ".truncated"),
        fault_attribute: arg_attribute(param.name, ".fault"),
        bound,
    })
}

/// A `'static` copy of `name`, made once per distinct name: attribute keys
/// are then static, and cloning one per span costs nothing. The set is
/// bounded by the probe parameter names of the program.
/// `kernel.arg.<name><suffix>`, interned.
fn arg_attribute(name: &str, suffix: &str) -> &'static str {
    intern(&format!(
        "{}{name}{suffix}",
        crate::export::attributes::ARG_PREFIX
    ))
}

fn intern(name: &str) -> &'static str {
    // Leaked once per distinct name (function, attribute key, enumerator):
    // bounded by the kernel's BTF, and shared by every plan of the process.
    static NAMES: std::sync::Mutex<Option<HashSet<&'static str>>> = std::sync::Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    let names = names.get_or_insert_with(HashSet::new);
    if let Some(found) = names.get(name) {
        return found;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}

/// Reads a raw register or memory value at the kernel type's width: bits
/// above it are dropped, and a signed value is sign-extended, so that a wider
/// Rust type gets the kernel's value.
pub fn normalize(raw: u64, class: TypeClass) -> u64 {
    let (bytes, signed) = match class {
        TypeClass::Int { bytes, signed } | TypeClass::Enum { bytes, signed } => (bytes, signed),
        TypeClass::Bool => (1, false),
        _ => return raw,
    };
    if bytes >= 8 || bytes == 0 {
        return raw;
    }
    let shift = 64 - bytes * 8;
    if signed {
        (((raw << shift) as i64) >> shift) as u64
    } else {
        (raw << shift) >> shift
    }
}

/// Width in bytes of a scalar kernel type.
fn scalar_width(kernel: &KernelType) -> u32 {
    match kernel.class {
        TypeClass::Int { bytes, .. } | TypeClass::Enum { bytes, .. } => bytes,
        TypeClass::Bool => 1,
        _ => 8,
    }
}

/// Checks that a Rust type reads a kernel type correctly.
fn check_compatible(
    function: &str,
    parameter: &str,
    kernel: &KernelType,
    rust: ValueType,
) -> Result<()> {
    let ok = match (kernel.class, rust.kind) {
        (
            TypeClass::Int { bytes, signed },
            ValueKind::Int {
                bytes: rb,
                signed: rs,
            },
        ) => {
            // Same width and sign, or wider where every kernel value fits:
            // kernels change `long` returns to `int` and back, and an `i64`
            // handler keeps working (values are widened from the kernel's
            // width, see `normalize`).
            let rb = u32::from(rb);
            (rb == bytes && signed == rs) || (rb > bytes && (signed == rs || rs))
        }
        // Enum signedness in BTF only says whether some enumerator is negative;
        // the width is what decides how the register is read.
        (TypeClass::Enum { bytes, .. }, ValueKind::Int { bytes: rb, .. }) => u32::from(rb) >= bytes,
        (TypeClass::Bool, ValueKind::Bool) => true,
        (TypeClass::Pointer, ValueKind::Pointer) => true,
        // An address read as a plain unsigned 64-bit integer.
        (
            TypeClass::Pointer,
            ValueKind::Int {
                bytes: 8,
                signed: false,
            },
        ) => true,
        _ => false,
    };
    if ok {
        return Ok(());
    }
    Err(Error::TypeMismatch {
        function: function.to_owned(),
        parameter: parameter.to_owned(),
        kernel_type: kernel.c_name.clone(),
        rust_type: rust.to_string(),
        hint: rust_types_for(kernel),
    })
}

/// What Rust types read `kernel`, as a hint.
fn rust_types_for(kernel: &KernelType) -> String {
    let ints = |bytes: u32, signed: bool| -> &'static str {
        match (bytes, signed) {
            (1, false) => "`u8`",
            (1, true) => "`i8`",
            (2, false) => "`u16`",
            (2, true) => "`i16`",
            (4, false) => "`u32`",
            (4, true) => "`i32`",
            (8, false) => "`u64` or `usize`",
            (8, true) => "`i64` or `isize`",
            _ => "no Rust integer type",
        }
    };
    match kernel.class {
        TypeClass::Int { bytes, signed } => format!(
            "`{}` is {} {}-bit: use {}",
            kernel.c_name,
            if signed { "signed" } else { "unsigned" },
            bytes * 8,
            ints(bytes, signed)
        ),
        TypeClass::Enum { bytes, .. } => format!(
            "`{}` is a {}-bit enum: use {} or {}",
            kernel.c_name,
            bytes * 8,
            ints(bytes, false),
            ints(bytes, true)
        ),
        TypeClass::Bool => "use `bool`".to_owned(),
        TypeClass::Pointer => {
            "use a raw pointer (`*const T`, `*mut T`) or `u64`/`usize` for the address".to_owned()
        }
        TypeClass::Void => "the kernel type is `void`".to_owned(),
        TypeClass::Float => "floating-point values cannot be captured".to_owned(),
        TypeClass::Array { .. } => format!(
            "`{}` is an array: capture it as `[u8; N]`, `&[u8]`, or `&str` for a `char` array",
            kernel.c_name
        ),
        TypeClass::Aggregate => format!(
            "`{}` is passed by value and cannot be captured from a register; capture a \
             scalar parameter instead",
            kernel.c_name
        ),
    }
}

/// Levenshtein distance, for suggestions.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// Up to `n` names closest to `wanted`, nearest first; only plausible ones.
pub fn closest_names<'a>(
    names: impl Iterator<Item = &'a str>,
    wanted: &str,
    n: usize,
) -> Vec<String> {
    let limit = (wanted.len() / 3).max(2);
    let mut scored: Vec<(usize, &str)> = names
        .filter_map(|name| {
            if name.len().abs_diff(wanted.len()) > limit {
                return None;
            }
            let d = edit_distance(wanted, name);
            (d <= limit).then_some((d, name))
        })
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(n)
        .map(|(_, s)| s.to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btf::builder::sample;
    use kspan::kernel_span;

    fn btf() -> Btf {
        Btf::parse(&sample()).unwrap()
    }

    fn err(probe: &'static Probe) -> String {
        plan_probe(&btf(), probe).unwrap_err().to_string()
    }

    #[kernel_span("vfs_read")]
    fn count_and_ret(count: usize, ret: isize) {}

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
        let cfg = plan.bpf_config(plan.mode(), 3, 99);
        assert_eq!(
            (cfg.probe_id, cfg.target_tgid, cfg.nr_caps, cfg.mode),
            (3, 99, 1, 1)
        );
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
            matches!(&e, Error::UnknownFunction { suggestions, .. } if suggestions[0] == "vfs_read"),
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
        assert!(matches!(plan_all(&btf(), &[], &none), Err(Error::NoProbes)));
        assert!(matches!(
            plan_all(&btf(), &[&count_and_ret, &read_entry], &none),
            Err(Error::DuplicateProbe { .. })
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

    #[test]
    fn the_deny_list_is_enforced_and_untraceable_matches_are_reported() {
        let msg = plan_all(&btf(), &[&denied_lock], &PlanInputs::default())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("`_raw_spin_lock`"), "{msg}");
        assert!(msg.contains("deny list: locking primitives"), "{msg}");
        let inputs = PlanInputs {
            traceable: Some(["vfs_read".to_owned()].into_iter().collect()),
            ..PlanInputs::default()
        };
        let set = plan_all(&btf(), &[&every_vfs_file], &inputs).unwrap();
        assert_eq!(set.plans.len(), 1);
        assert_eq!(set.skipped[0].0, "vfs_write");
        assert!(set.skipped[0].1.contains("inlined or notrace"));
        let msg = plan_all(
            &btf(),
            &[&strings_and_buffers],
            &PlanInputs {
                traceable: Some(Default::default()),
                ..PlanInputs::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(msg.contains("`vfs_read` (probe at"), "{msg}");
        assert!(msg.contains("cannot be traced"), "{msg}");
    }

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

    #[test]
    fn edit_distance_basics() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
