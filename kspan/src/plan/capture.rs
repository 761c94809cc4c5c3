// SPDX-License-Identifier: Apache-2.0 OR MIT
//! How each captured value is read: its source (a register, maybe walked
//! through memory), its kind for the BPF program, its bound, and whether
//! the Rust type reads the kernel type correctly.

use kspan_bpf::consts;
use kspan_bpf::types::kspan_capture;
use opentelemetry::StringValue;

use super::fieldpath::{self, Step};
use super::names::{arg_attribute, intern};
use super::{PlanError, Result};
use crate::annotation::{LenSource, Mode, ParamSpec, ProbeSpec, ValueKind, ValueType};
use crate::kernel::btf::{Btf, FuncSignature, KernelType, TypeClass};

// enum kspan_cap_kind and enum kspan_len_src of kspan.h, at their field width.
pub(crate) const KIND_REG: u8 = consts::KSPAN_CAP_REG as u8;
pub(crate) const KIND_MEM: u8 = consts::KSPAN_CAP_MEM as u8;
pub(crate) const KIND_KSTR: u8 = consts::KSPAN_CAP_KSTR as u8;
pub(crate) const KIND_USTR: u8 = consts::KSPAN_CAP_USTR as u8;
pub(crate) const KIND_KBYTES: u8 = consts::KSPAN_CAP_KBYTES as u8;
pub(crate) const KIND_UBYTES: u8 = consts::KSPAN_CAP_UBYTES as u8;
pub(super) const LEN_FIXED: u8 = consts::KSPAN_LEN_FIXED as u8;
pub(super) const LEN_ARG: u8 = consts::KSPAN_LEN_ARG as u8;
pub(super) const LEN_RET: u8 = consts::KSPAN_LEN_RET as u8;

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

/// Where a capture starts: an argument register, maybe walked through memory.
pub(super) struct Source {
    arg: usize,
    steps: Vec<Step>,
    /// The type of what `steps` reach (the register's type without a path).
    target: KernelType,
    /// Whether the steps end at an address in memory (a path) rather than
    /// at the register's value.
    in_memory: bool,
}

pub(super) fn capture_source(
    btf: &Btf,
    spec: &ProbeSpec,
    signature: &FuncSignature,
    param: &ParamSpec,
) -> Result<Source> {
    let function = signature.name.as_str();
    if let (Some(_), Mode::Syscall) = (param.path, spec.mode) {
        return Err(PlanError::Capture {
            function: function.to_owned(),
            parameter: param.name.to_owned(),
            reason: "field paths are not supported on syscall sources (their pointers are \
                     user-space memory); capture the argument itself"
                .to_owned(),
        });
    }
    if let Some(text) = param.path {
        let path = fieldpath::parse(text).map_err(|source| PlanError::PathSyntax {
            function: function.to_owned(),
            parameter: param.name.to_owned(),
            path: text.to_owned(),
            source,
        })?;
        let resolved =
            fieldpath::resolve(btf, function, &path).map_err(|source| PlanError::FieldPath {
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
        return Err(PlanError::UnknownParameter {
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
        return Err(PlanError::ArgumentOutOfReach {
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

/// Plans how `param` is read from `source`: checks that the Rust type fits
/// what the source reaches, places the value in the record's data area after
/// `data_used` bytes (and counts it in), and raises `nr_args` to the
/// arguments the BPF program must save for it.
pub(super) fn plan_capture(
    btf: &Btf,
    spec: &ProbeSpec,
    signature: &FuncSignature,
    param: &ParamSpec,
    mut source: Source,
    data_used: &mut usize,
    nr_args: &mut usize,
) -> Result<CapturePlan> {
    let capture = Capture {
        btf,
        spec,
        signature,
        param,
    };
    capture.check_user(&source.target)?;
    let at_entry = capture.at_entry()?;
    let read = match param.ty.kind {
        ValueKind::Int { .. } | ValueKind::Bool | ValueKind::Pointer => {
            capture.read_scalar(&source)?
        }
        ValueKind::Str => capture.read_str(&source)?,
        ValueKind::Bytes | ValueKind::ByteArray { .. } => capture.read_bytes(&source)?,
    };
    if read.load_pointer {
        // The member holds the address of the string or buffer.
        source.steps.push(Step {
            load: true,
            offset: 0,
        });
    }
    let bpf = capture.bpf(&source, at_entry, &read, *data_used)?;
    *data_used += read.data_len;
    if let Some(BufferLength { arg: Some(pos), .. }) = read.length {
        *nr_args = (*nr_args).max(pos + 1);
    }
    *nr_args = (*nr_args).max(source.arg + 1);
    Ok(CapturePlan {
        spec: *param,
        enum_names: btf.enumerators(source.target.id).map(|names| {
            names
                .into_iter()
                .map(|(name, value)| (value, StringValue::from(intern(&name))))
                .collect()
        }),
        kernel_type: source.target,
        bpf,
        attribute: arg_attribute(param.name, ""),
        truncated_attribute: arg_attribute(param.name, ".truncated"),
        fault_attribute: arg_attribute(param.name, ".fault"),
        bound: read.bound,
    })
}

/// One handler parameter to capture from one kernel function: what its
/// checks need, and the error they fail with.
struct Capture<'a> {
    btf: &'a Btf,
    spec: &'a ProbeSpec,
    signature: &'a FuncSignature,
    param: &'a ParamSpec,
}

/// How the BPF program reads the value a [`Source`] reaches.
struct Read {
    /// `KIND_*`.
    kind: u8,
    /// Bytes of a scalar read from memory; 0 otherwise.
    size: u8,
    /// Whether the source reaches a pointer in memory that the string or
    /// buffer is behind, so one more load is needed.
    load_pointer: bool,
    /// Where a buffer's length comes from; `None` for scalars and strings.
    length: Option<BufferLength>,
    /// Bound of a string or buffer, in bytes; 0 for a scalar.
    bound: usize,
    /// Bytes the value takes in the record's data area.
    data_len: usize,
}

/// Where a buffer's length comes from, and the most bytes read.
struct BufferLength {
    /// `LEN_*`.
    src: u8,
    /// The parameter that holds the length (`LEN_ARG`).
    arg: Option<usize>,
    bound: usize,
}

impl Capture<'_> {
    fn function(&self) -> &str {
        self.signature.name.as_str()
    }

    fn fail(&self, reason: String) -> PlanError {
        PlanError::Capture {
            function: self.function().to_owned(),
            parameter: self.param.name.to_owned(),
            reason,
        }
    }

    /// Checks `user` against the value: memory behind a user-space pointer
    /// needs it, and it needs a pointer.
    fn check_user(&self, target: &KernelType) -> Result<()> {
        let param = self.param;
        if target.is_user_pointer && !param.user && !param.ty.kind.is_scalar() {
            return Err(self.fail(format!(
                "`{}` is a user-space pointer: add `user` to read the memory behind it",
                target.c_name
            )));
        }
        if param.user && !matches!(target.class, TypeClass::Pointer) {
            return Err(self.fail(format!(
                "`user` reads memory behind a pointer, but the value is `{}`",
                target.c_name
            )));
        }
        Ok(())
    }

    /// Whether the value is read at entry (`at = "entry"`), checked against
    /// the mode and the length source.
    fn at_entry(&self) -> Result<bool> {
        if !self.param.at_entry {
            return Ok(false);
        }
        if !self.spec.mode.has_return() {
            return Err(self.fail(
                "`at = \"entry\"` applies to spans (fexit, kretprobe, syscall); an instant reads \
                 everything at entry"
                    .to_owned(),
            ));
        }
        if self.param.len == Some(LenSource::Ret) {
            return Err(self.fail(
                "`len = \"ret\"` is known at exit only: it cannot be read `at = \"entry\"`"
                    .to_owned(),
            ));
        }
        Ok(true)
    }

    /// An integer, `bool` or pointer, from the register or from memory.
    fn read_scalar(&self, source: &Source) -> Result<Read> {
        let (param, target) = (self.param, &source.target);
        if param.user {
            return Err(self.fail(
                "`user` applies to `&str`, `&[u8]` and `[u8; N]` captures, not to scalars"
                    .to_owned(),
            ));
        }
        if source.in_memory && target.class == TypeClass::Aggregate {
            if let Some(members) = self.btf.composite(target.id).map(|c| c.members) {
                let named: Vec<String> = members
                    .iter()
                    .filter(|m| !m.name.is_empty())
                    .take(8)
                    .map(|m| format!("`.{}`", m.name))
                    .collect();
                return Err(PlanError::TypeMismatch {
                    function: self.function().to_owned(),
                    parameter: param.name.to_owned(),
                    kernel_type: target.c_name.clone(),
                    rust_type: param.ty.to_string(),
                    hint: format!(
                        "`{}` is a struct or union, not a scalar: capture one of its members by \
                         adding it to the path ({})",
                        target.c_name,
                        named.join(", ")
                    ),
                });
            }
        }
        check_compatible(self.function(), param.name, target, param.ty)?;
        let (kind, size) = if source.in_memory {
            (KIND_MEM, scalar_width(target) as u8)
        } else {
            (KIND_REG, 0)
        };
        Ok(Read {
            kind,
            size,
            load_pointer: false,
            length: None,
            bound: 0,
            data_len: 0,
        })
    }

    /// A `&str`: behind a `char *`, or a `char` array in kernel memory.
    fn read_str(&self, source: &Source) -> Result<Read> {
        let (param, target) = (self.param, &source.target);
        let max = param.max.unwrap_or(DEFAULT_STR_MAX);
        let load_pointer = match target.class {
            TypeClass::Pointer if target.points_to_char => source.in_memory,
            TypeClass::Array {
                elem_is_char: true, ..
            } if source.in_memory && !param.user => false,
            _ => {
                return Err(self.fail(format!(
                    "`&str` captures a `char *` or a `char` array, but the value is `{}`",
                    target.c_name
                )))
            }
        };
        let bound = usize::from(max);
        Ok(Read {
            kind: if param.user { KIND_USTR } else { KIND_KSTR },
            size: 0,
            load_pointer,
            length: None,
            bound,
            // One more character than the bound tells a string that only
            // fits from one that was cut, plus the NUL.
            data_len: bound + 2,
        })
    }

    /// A `&[u8]` or `[u8; N]`: behind a pointer, or an array in kernel
    /// memory.
    fn read_bytes(&self, source: &Source) -> Result<Read> {
        let (param, target) = (self.param, &source.target);
        let fixed = match param.ty.kind {
            ValueKind::ByteArray { len } => Some(usize::from(len)),
            _ => None,
        };
        let load_pointer = match target.class {
            TypeClass::Pointer => source.in_memory,
            TypeClass::Array {
                elem_bytes, len, ..
            } if source.in_memory && !param.user => {
                let have = (elem_bytes * len) as usize;
                if let Some(n) = fixed {
                    // A flexible array member (`len` 0) is as long as
                    // its object: the capture says how much to read.
                    if n > have && len != 0 {
                        return Err(self.fail(format!(
                            "`[u8; {n}]` is longer than `{}` ({have} bytes)",
                            target.c_name
                        )));
                    }
                }
                false
            }
            _ => {
                return Err(self.fail(format!(
                    "byte captures read behind a pointer or from an array, but the value is `{}`",
                    target.c_name
                )))
            }
        };
        let length = self.buffer_length(target, fixed)?;
        Ok(Read {
            kind: if param.user { KIND_UBYTES } else { KIND_KBYTES },
            size: 0,
            load_pointer,
            bound: length.bound,
            data_len: length.bound,
            length: Some(length),
        })
    }

    /// Where a buffer's length comes from: the `[u8; N]` type, `len`, or
    /// the array it is.
    fn buffer_length(&self, target: &KernelType, fixed: Option<usize>) -> Result<BufferLength> {
        let (param, signature) = (self.param, self.signature);
        let max = usize::from(param.max.unwrap_or(DEFAULT_BYTES_MAX));
        match (fixed, param.len) {
            (Some(n), None) => Ok(BufferLength {
                src: LEN_FIXED,
                arg: None,
                bound: n,
            }),
            (Some(_), Some(_)) => {
                Err(self.fail("`[u8; N]` has its length already: remove `len`".to_owned()))
            }
            (None, Some(LenSource::Ret)) => {
                if !self.spec.mode.has_return() {
                    return Err(self.fail(
                        "`len = \"ret\"` needs mode = \"fexit\" or \"kretprobe\"".to_owned(),
                    ));
                }
                Ok(BufferLength {
                    src: LEN_RET,
                    arg: None,
                    bound: max,
                })
            }
            (None, Some(LenSource::Param(name))) => {
                let Some(pos) = signature.params.iter().position(|(n, _)| n == name) else {
                    let function = self.function();
                    return Err(self.fail(format!(
                        "`len = \"{name}\"` names no parameter of `{function}`; its parameters are: {}",
                        signature
                            .params
                            .iter()
                            .map(|(n, _)| format!("`{n}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                };
                if pos >= kspan_bpf::MAX_ARGS
                    || !matches!(signature.params[pos].1.class, TypeClass::Int { .. })
                {
                    return Err(self.fail(format!(
                        "`len = \"{name}\"` must name an integer among the first {} parameters",
                        kspan_bpf::MAX_ARGS
                    )));
                }
                Ok(BufferLength {
                    src: LEN_ARG,
                    arg: Some(pos),
                    bound: max,
                })
            }
            (None, None) => match target.class {
                TypeClass::Array { len: 0, .. } => Err(self.fail(format!(
                    "`{}` is a flexible array member: its length is not in the type. Capture the \
                     bytes behind it with `len = \"<parameter>\"` naming the parameter that \
                     holds the length (e.g. `addrlen`), or as `[u8; N]` for the first N bytes",
                    target.c_name
                ))),
                TypeClass::Array {
                    elem_bytes, len, ..
                } => Ok(BufferLength {
                    src: LEN_FIXED,
                    arg: None,
                    bound: ((elem_bytes * len) as usize).min(max),
                }),
                _ => Err(self.fail(
                    "a `&[u8]` buffer needs its length: `len = \"<parameter>\"` or `len = \"ret\"`"
                        .to_owned(),
                )),
            },
        }
    }

    /// What the BPF program is told: the walk from the register, the read,
    /// and where in the data area the value goes (at `data_off`).
    fn bpf(
        &self,
        source: &Source,
        at_entry: bool,
        read: &Read,
        data_off: usize,
    ) -> Result<kspan_capture> {
        if source.steps.len() > kspan_bpf::MAX_STEPS {
            return Err(self.fail(format!(
                "the path needs {} pointer hops and offsets; the limit is {}",
                source.steps.len(),
                kspan_bpf::MAX_STEPS
            )));
        }
        let mut bpf = kspan_capture {
            at_entry: u8::from(at_entry),
            kind: read.kind,
            size: read.size,
            arg: source.arg as u8,
            nsteps: source.steps.len() as u8,
            data_off: u16::try_from(data_off).unwrap_or(u16::MAX),
            data_len: u16::try_from(read.data_len).unwrap_or(u16::MAX),
            ..kspan_capture::default()
        };
        if let Some(length) = &read.length {
            bpf.len_src = length.src;
            if let Some(pos) = length.arg {
                bpf.len_arg = pos as u8;
            }
        }
        for (slot, step) in bpf.steps.iter_mut().zip(&source.steps) {
            slot.offset = step.offset;
            slot.load = u32::from(step.load);
        }
        Ok(bpf)
    }
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
pub(super) fn check_compatible(
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
    Err(PlanError::TypeMismatch {
        function: function.to_owned(),
        parameter: parameter.to_owned(),
        kernel_type: kernel.c_name.clone(),
        rust_type: rust.to_string(),
        hint: rust_types_for(kernel),
    })
}

/// The Rust integer of `bytes` width and signedness, if there is one.
pub fn rust_int_type(bytes: u32, signed: bool) -> Option<&'static str> {
    Some(match (bytes, signed) {
        (1, false) => "u8",
        (2, false) => "u16",
        (4, false) => "u32",
        (8, false) => "u64",
        (1, true) => "i8",
        (2, true) => "i16",
        (4, true) => "i32",
        (8, true) => "i64",
        _ => return None,
    })
}

/// What Rust types read `kernel`, as a hint.
fn rust_types_for(kernel: &KernelType) -> String {
    let ints = |bytes: u32, signed: bool| -> String {
        match (rust_int_type(bytes, signed), bytes) {
            (Some(ty), 8) => format!("`{ty}` or `{}`", if signed { "isize" } else { "usize" }),
            (Some(ty), _) => format!("`{ty}`"),
            (None, _) => "no Rust integer type".to_owned(),
        }
    };
    match kernel.class {
        TypeClass::Int { bytes, signed } => format!(
            "`{}` is {} {}-bit: use {}",
            kernel.c_name,
            if signed { "signed" } else { "unsigned" },
            u64::from(bytes) * 8,
            ints(bytes, signed)
        ),
        TypeClass::Enum { bytes, .. } => format!(
            "`{}` is a {}-bit enum: use {} or {}",
            kernel.c_name,
            u64::from(bytes) * 8,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The `btf` fuzz target's find: a BTF integer or enum of 2^29 bytes
    /// or more overflowed its width in bits in the type hint.
    #[test]
    fn hints_of_integers_too_wide_for_bits_in_u32() {
        let kernel = |class| KernelType {
            c_name: "huge".to_owned(),
            class,
            id: 1,
            is_user_pointer: false,
            points_to_char: false,
        };
        let int = kernel(TypeClass::Int {
            bytes: u32::MAX,
            signed: true,
        });
        assert_eq!(
            rust_types_for(&int),
            "`huge` is signed 34359738360-bit: use no Rust integer type"
        );
        let en = kernel(TypeClass::Enum {
            bytes: 1 << 29,
            signed: false,
        });
        assert!(rust_types_for(&en).contains("4294967296-bit enum"));
    }
}
