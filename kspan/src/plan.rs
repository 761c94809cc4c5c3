// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The plan: every probe checked against the running kernel's BTF.
//!
//! Planning is pure: it takes a parsed [`Btf`] and the probe definitions and
//! either returns, per probe, which argument registers to capture, or an error
//! that names the function, the parameter and what would fix it. Nothing is
//! loaded until every probe has planned, so a typo never leaves half the
//! probes attached.

use std::collections::HashMap;

use crate::btf::{Btf, FuncSignature, KernelType, TypeClass};
use crate::error::{Error, Result};
use crate::probe::{Mode, Probe};
use crate::value::{ValueKind, ValueType};

/// How one probe will be attached and decoded.
#[derive(Debug)]
pub struct ProbePlan {
    /// The probe.
    pub probe: &'static Probe,
    /// The kernel function's BTF signature.
    pub signature: FuncSignature,
    /// For each handler parameter, the 0-based argument position it reads.
    pub arg_positions: Vec<usize>,
    /// How many leading arguments the BPF program must capture.
    pub nr_args: u32,
}

impl ProbePlan {
    /// The kernel function.
    pub fn function(&self) -> &'static str {
        self.probe.spec.function
    }

    /// The attach mode.
    pub fn mode(&self) -> Mode {
        self.probe.spec.mode
    }
}

/// Plans every probe; fails on the first probe that cannot work, before
/// anything touches the kernel.
pub fn plan_all(btf: &Btf, probes: &[&'static Probe]) -> Result<Vec<ProbePlan>> {
    if probes.is_empty() {
        return Err(Error::NoProbes);
    }
    let mut seen: HashMap<&str, &'static str> = HashMap::new();
    for p in probes {
        if let Some(first) = seen.insert(p.spec.function, p.spec.location) {
            return Err(Error::DuplicateProbe {
                function: p.spec.function.to_owned(),
                first,
                second: p.spec.location,
            });
        }
    }
    probes.iter().map(|p| plan_probe(btf, p)).collect()
}

/// Plans one probe.
pub fn plan_probe(btf: &Btf, probe: &'static Probe) -> Result<ProbePlan> {
    let spec = &probe.spec;
    let function = spec.function;
    let signature = btf
        .function(function)
        .ok_or_else(|| Error::UnknownFunction {
            function: function.to_owned(),
            location: spec.location,
            suggestions: closest_names(btf.function_names(), function, 3),
        })?;

    let mut arg_positions = Vec::with_capacity(spec.params.len());
    for param in spec.params {
        let Some(position) = signature
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
        if position >= kspan_bpf::MAX_ARGS {
            return Err(Error::ArgumentOutOfReach {
                function: function.to_owned(),
                parameter: param.name.to_owned(),
                position: position + 1,
                max: kspan_bpf::MAX_ARGS,
            });
        }
        check_compatible(
            function,
            param.name,
            &signature.params[position].1,
            param.ty,
        )?;
        arg_positions.push(position);
    }

    if let Some(ret) = spec.ret {
        if !spec.mode.has_return() {
            return Err(Error::NoReturnValue {
                function: function.to_owned(),
                reason: format!(
                    "mode `{}` attaches at entry only; use mode = \"fexit\"",
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

    let nr_args = arg_positions.iter().map(|p| p + 1).max().unwrap_or(0) as u32;
    Ok(ProbePlan {
        probe,
        signature,
        arg_positions,
        nr_args,
    })
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
        ) => bytes == u32::from(rb) && signed == rs,
        // Enum signedness in BTF only says whether some enumerator is negative;
        // the width is what decides how the register is read.
        (TypeClass::Enum { bytes, .. }, ValueKind::Int { bytes: rb, .. }) => bytes == u32::from(rb),
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
        TypeClass::Aggregate => format!(
            "`{}` is passed by value and cannot be captured from a register; capture a \
             scalar parameter instead",
            kernel.c_name
        ),
    }
}

/// Levenshtein distance, for suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
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
pub(crate) fn closest_names<'a>(
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
    use crate::probe::{Captured, ParamSpec, ProbeSpec};
    use crate::value::KernelValue;

    fn noop(_: &Captured<'_>) {}

    macro_rules! probe {
        ($func:literal, $mode:expr, [$($name:literal : $ty:ty),*], $ret:expr) => {{
            static P: Probe = Probe {
                spec: ProbeSpec {
                    function: $func,
                    mode: $mode,
                    params: &[$(ParamSpec { name: $name, ty: <$ty as KernelValue>::TYPE }),*],
                    ret: $ret,
                    location: "test.rs:1",
                },
                handler: noop,
            };
            &P
        }};
    }

    fn btf() -> Btf {
        Btf::parse(&sample()).unwrap()
    }

    #[test]
    fn plans_vfs_read_count_and_ret() {
        let p = probe!("vfs_read", Mode::Fexit, ["count": usize], Some(isize::TYPE));
        let plan = plan_probe(&btf(), p).unwrap();
        assert_eq!(plan.arg_positions, [2]);
        assert_eq!(plan.nr_args, 3);
        assert_eq!(plan.function(), "vfs_read");
    }

    #[test]
    fn pointers_bools_enums() {
        let p = probe!("vfs_read", Mode::Fentry, ["pos": *const i64, "file": u64], None);
        assert_eq!(plan_probe(&btf(), p).unwrap().arg_positions, [3, 0]);
        let p = probe!("kspan_void_fn", Mode::Fexit, ["flag": bool, "kind": u32], None);
        assert_eq!(plan_probe(&btf(), p).unwrap().nr_args, 2);
    }

    #[test]
    fn unknown_function_suggests_close_names() {
        let p = probe!("vfs_raed", Mode::Fexit, [], None);
        let err = plan_probe(&btf(), p).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(&err, Error::UnknownFunction { suggestions, .. } if suggestions[0] == "vfs_read"),
            "{msg}"
        );
        assert!(msg.contains("unknown kernel function `vfs_raed`"), "{msg}");
        assert!(msg.contains("did you mean `vfs_read`"), "{msg}");
    }

    #[test]
    fn unknown_parameter_lists_real_ones() {
        let p = probe!("vfs_read", Mode::Fexit, ["size": usize], None);
        let msg = plan_probe(&btf(), p).unwrap_err().to_string();
        assert!(msg.contains("`vfs_read` has no parameter `size`"), "{msg}");
        assert!(
            msg.contains("`file: struct file *`, `buf: char *`, `count: size_t`, `pos: loff_t *`"),
            "{msg}"
        );
    }

    #[test]
    fn type_mismatch_names_both_types() {
        let p = probe!("vfs_read", Mode::Fexit, ["count": i32], None);
        let msg = plan_probe(&btf(), p).unwrap_err().to_string();
        assert_eq!(
            msg,
            "`vfs_read`: `count` is `size_t` in the kernel but `i32` (signed 32-bit) in the \
             handler; `size_t` is unsigned 64-bit: use `u64` or `usize`"
        );
        let p = probe!("vfs_read", Mode::Fexit, [], Some(usize::TYPE));
        let msg = plan_probe(&btf(), p).unwrap_err().to_string();
        assert!(
            msg.contains("`ret` is `ssize_t` in the kernel but `usize`"),
            "{msg}"
        );
        let p = probe!("vfs_read", Mode::Fexit, ["file": bool], None);
        let msg = plan_probe(&btf(), p).unwrap_err().to_string();
        assert!(msg.contains("use a raw pointer"), "{msg}");
        let p = probe!("kspan_struct_arg", Mode::Fexit, ["f": u64], None);
        let msg = plan_probe(&btf(), p).unwrap_err().to_string();
        assert!(msg.contains("`struct file` is passed by value"), "{msg}");
    }

    #[test]
    fn ret_needs_fexit_and_a_value() {
        let p = probe!("vfs_read", Mode::Fentry, [], Some(isize::TYPE));
        assert!(plan_probe(&btf(), p)
            .unwrap_err()
            .to_string()
            .contains("use mode = \"fexit\""));
        let p = probe!("kspan_void_fn", Mode::Fexit, [], Some(isize::TYPE));
        assert!(plan_probe(&btf(), p)
            .unwrap_err()
            .to_string()
            .contains("returns `void`"));
    }

    #[test]
    fn seventh_argument_is_out_of_reach() {
        let p = probe!("kspan_seven", Mode::Fexit, ["g": i32], None);
        let msg = plan_probe(&btf(), p).unwrap_err().to_string();
        assert!(msg.contains("argument #7"), "{msg}");
    }

    #[test]
    fn duplicates_and_empty_sets_are_refused() {
        assert!(matches!(plan_all(&btf(), &[]), Err(Error::NoProbes)));
        let a = probe!("vfs_read", Mode::Fexit, [], None);
        let b = probe!("vfs_read", Mode::Fentry, [], None);
        assert!(matches!(
            plan_all(&btf(), &[a, b]),
            Err(Error::DuplicateProbe { .. })
        ));
    }

    #[test]
    fn plans_against_this_machines_kernel() {
        let data = std::fs::read("/sys/kernel/btf/vmlinux")
            .expect("the kernel BTF feature: /sys/kernel/btf/vmlinux must exist");
        let btf = Btf::parse(&data).unwrap();
        let p = probe!("vfs_read", Mode::Fexit, ["count": usize], Some(isize::TYPE));
        assert_eq!(plan_probe(&btf, p).unwrap().arg_positions, [2]);
        let p = probe!("vfs_reed", Mode::Fexit, [], None);
        let msg = plan_probe(&btf, p).unwrap_err().to_string();
        assert!(msg.contains("`vfs_read`"), "{msg}");
    }

    #[test]
    fn edit_distance_basics() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
