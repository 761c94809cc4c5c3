// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A small reader of the kernel's BTF (`/sys/kernel/btf/vmlinux`).
//!
//! kspan needs a handful of things from BTF: does a function exist, what are
//! its parameters called and in which order, what are their types in width
//! and signedness, and, to follow field paths such as
//! `file->f_path.dentry`, how structs and unions are laid out (members,
//! offsets, bitfields), what arrays hold and what enum values are called.
//! That is a few hundred lines of pure code over a byte slice, so it is
//! written here and unit-tested on hand-built blobs, with no kernel and no
//! system call involved. The alternatives do not fit: libbpf-rs's `Btf` is
//! `!Send`, looks names up linearly and cannot be built from a test blob,
//! and the `btf-rs` crate is LGPL.
//!
//! The blob is kept as it is (the kernel's file mapped where sysfs allows
//! it) with where each type's record starts and a table of function names;
//! a record is decoded when a question reaches it. Planning reads a few
//! hundred of the kernel's 150,000 types, so indexing is most of the work:
//! a few milliseconds, where decoding every type into its own allocations
//! cost four times as much, and as much again to free. Questions are
//! answered by id, looking through typedefs and qualifiers (`const`,
//! `volatile`, `restrict`, type tags) on the way. Every walk over type ids
//! is bounded, so a malformed blob (cycles, absurd sizes) gives odd answers
//! or an error, never a panic or a hang. Pointers are taken to be 8 bytes: kspan runs on 64-bit kernels.

use std::fmt;
use std::ops::Range;

// The unit tests' BTF blobs, also the fuzz targets' sample (which uses
// only some of the builder).
#[cfg(any(test, feature = "fuzzing"))]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod builder;
mod functions;
mod parse;
#[cfg(test)]
mod properties;
mod types;

use functions::FunctionTable;

use parse::{
    Type, INT_BOOL, INT_CHAR, INT_SIGNED, KIND_CONST, KIND_ENUM, KIND_ENUM64, KIND_INT,
    KIND_STRUCT, KIND_TYPEDEF, KIND_TYPE_TAG, KIND_UNION, KIND_VOLATILE, MAX_CHAIN, POINTER_BYTES,
};
pub use types::{Composite, FuncSignature, KernelType, Member, TypeClass};

/// Why a BTF blob could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BtfError {
    /// The blob ends before a structure it announces.
    #[error("BTF is truncated at byte {offset} (reading {what})")]
    Truncated {
        /// Where the missing bytes should have been.
        offset: usize,
        /// What was being read.
        what: &'static str,
    },
    /// The blob does not start with the BTF magic number.
    #[error("not BTF: magic is {found:#06x}, expected 0xeb9f (big-endian BTF is not supported)")]
    BadMagic {
        /// The first two bytes, little-endian.
        found: u16,
    },
    /// A type record has a kind this reader does not know.
    #[error("unknown BTF kind {kind} for type id {id}")]
    UnknownKind {
        /// The kind number.
        kind: u32,
        /// The type id.
        id: u32,
    },
}

/// The bytes of a BTF blob: a copy, or the kernel's file mapped.
pub(crate) type Blob = Box<dyn AsRef<[u8]> + Send + Sync>;

/// The kernel's type information: the blob itself, where each type's record
/// starts, and a table of function names.
pub struct Btf {
    /// Owns the bytes `bytes` points to; never read through directly (a
    /// call through `dyn` on every field read costs more than the read).
    _data: Blob,
    /// `_data`'s bytes: a `Vec`'s heap buffer or a mapping, neither of
    /// which moves or changes while `_data` lives.
    bytes: *const [u8],
    strings: Range<usize>,
    type_start: usize,
    /// Offset of each type id's record in the type section (0 for `void`).
    records: Vec<u32>,
    functions: FunctionTable,
}

impl fmt::Debug for Btf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Btf")
            .field("types", &self.records.len())
            .field("funcs", &self.functions.len())
            .finish()
    }
}

// SAFETY: `bytes` points into `_data`, which is `Send + Sync` and only
// ever read; the other fields are plain data.
unsafe impl Send for Btf {}
// SAFETY: as for `Send`: shared access reads immutable bytes only.
unsafe impl Sync for Btf {}

impl Btf {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `bytes` is `_data`'s slice, taken when `self` was made;
        // `_data` is owned by `self` and keeps its storage (a heap buffer
        // or a mapping, behind a `Box` whose move does not move it) alive
        // and unchanged until `self` is dropped.
        unsafe { &*self.bytes }
    }

    /// The string section.
    fn strings(&self) -> &[u8] {
        self.bytes().get(self.strings.clone()).unwrap_or_default()
    }

    /// The NUL-terminated string at `offset` of the string section.
    fn str_bytes(&self, offset: u32) -> &[u8] {
        let tail = self.strings().get(offset as usize..).unwrap_or_default();
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        &tail[..end]
    }

    fn str_at(&self, offset: u32) -> &str {
        std::str::from_utf8(self.str_bytes(offset)).unwrap_or("")
    }

    /// The `FUNC` id of function `name`.
    fn func_id(&self, name: &str) -> Option<u32> {
        self.functions.find(self.strings(), name.as_bytes())
    }

    /// The id under typedefs and qualifiers (`void`, id 0, for a chain too
    /// long to be real).
    fn strip(&self, mut id: u32) -> u32 {
        for _ in 0..MAX_CHAIN {
            match self.ty(id) {
                Type::Alias { target, .. } => id = target,
                _ => return id,
            }
        }
        0
    }

    /// Number of functions described.
    pub fn function_count(&self) -> usize {
        self.functions.len()
    }

    /// Names of every function described, each once, in the order of the
    /// types.
    pub fn function_names(&self) -> impl Iterator<Item = &str> {
        self.function_names_starting("")
    }

    /// Names of the functions whose names start with `prefix`, in the
    /// order of the types: what a pattern's literal start narrows a search
    /// of every name to, compared before any name is read as text.
    pub fn function_names_starting<'a, 'p>(
        &'a self,
        prefix: &'p str,
    ) -> impl Iterator<Item = &'a str> + 'p
    where
        'a: 'p,
    {
        let strings = self.strings();
        self.functions
            .names()
            .filter(move |&name| {
                let tail = strings.get(name as usize..).unwrap_or_default();
                // The first byte inline: most names differ there.
                prefix.is_empty()
                    || (tail.first() == prefix.as_bytes().first()
                        && tail.starts_with(prefix.as_bytes()))
            })
            .filter_map(|name| std::str::from_utf8(self.str_bytes(name)).ok())
    }

    /// The id of the integer, enum, typedef or struct/union named `name` as C
    /// spells it (`int`, `umode_t`, `struct open_how`), if BTF has one. A
    /// linear scan: for the few names of syscall formats, not a hot path.
    pub fn type_named(&self, name: &str) -> Option<u32> {
        let (want_struct, bare) = match name.strip_prefix("struct ") {
            Some(rest) => (Some(false), rest),
            None => match name.strip_prefix("union ") {
                Some(rest) => (Some(true), rest),
                None => (None, name.strip_prefix("enum ").unwrap_or(name)),
            },
        };
        let bare = bare.as_bytes();
        (1..self.records.len() as u32).find(|&id| {
            // Kind and name from the record first: most types fail there.
            let Some(pos) = self.record(id) else {
                return false;
            };
            let kind = (self.u32_at(pos + 4) >> 24) & 0x1f;
            let wanted = match want_struct {
                None => matches!(kind, KIND_INT | KIND_ENUM | KIND_ENUM64 | KIND_TYPEDEF),
                Some(union) => kind == if union { KIND_UNION } else { KIND_STRUCT },
            };
            let name = self.u32_at(pos);
            wanted && name != 0 && self.str_bytes(name) == bare
        })
    }

    /// Whether any type carries the `user` type tag (`__user` in the kernel's
    /// source): kernels built with clang and pahole 1.23+ have them. Where
    /// none does, [`KernelType::is_user_pointer`] is `false` for every
    /// pointer, user pointers included, so a `char *` may be either. A
    /// linear scan of the records, for the command line, not a hot path.
    pub fn has_user_tags(&self) -> bool {
        (1..self.records.len() as u32).any(|id| {
            let Some(pos) = self.record(id) else {
                return false;
            };
            let kind = (self.u32_at(pos + 4) >> 24) & 0x1f;
            kind == KIND_TYPE_TAG && self.str_bytes(self.u32_at(pos)) == b"user"
        })
    }

    /// Whether BTF describes a function `name`.
    pub fn has_function(&self, name: &str) -> bool {
        self.func_id(name).is_some()
    }

    /// The signature of function `name`, if BTF describes it.
    pub fn function(&self, name: &str) -> Option<FuncSignature> {
        let id = self.func_id(name)?;
        let Type::Func { proto, .. } = self.ty(id) else {
            return None;
        };
        let Type::FuncProto { ret, params } = self.ty(proto) else {
            return None;
        };
        let params = self
            .params(params)
            // A trailing (0, 0) parameter marks a variadic function.
            .filter(|&(_, ty)| ty != 0)
            .map(|(pname, ty)| (self.str_at(pname).to_owned(), self.kernel_type(ty)))
            .collect();
        Some(FuncSignature {
            name: name.to_owned(),
            btf_id: id,
            params,
            ret: self.kernel_type(ret),
        })
    }

    /// Why the kernel will not attach a BPF trampoline to `name`, from its
    /// BTF signature as the verifier judges it (`btf_distill_func_proto`):
    /// more than 12 parameters, variable arguments, a struct or union
    /// returned, or one larger than 16 bytes passed by value. `None` when
    /// the signature is fine (or `name` is not a function here).
    pub fn trampoline_refusal(&self, name: &str) -> Option<String> {
        let id = self.func_id(name)?;
        let Type::Func { proto, .. } = self.ty(id) else {
            return None;
        };
        let Type::FuncProto { ret, params } = self.ty(proto) else {
            return None;
        };
        if self.params(params).last().is_some_and(|(_, ty)| ty == 0) {
            return Some("trampolines cannot attach to variadic functions".to_owned());
        }
        if params.count > 12 {
            return Some(format!(
                "trampolines take at most 12 parameters; it has {}",
                params.count
            ));
        }
        let by_value = |ty: u32| matches!(self.ty(self.strip(ty)), Type::Composite { .. });
        if by_value(ret) {
            return Some(format!(
                "trampolines cannot attach to a function returning `{}` (a struct or union)",
                self.c_name(ret, 0)
            ));
        }
        self.params(params).find_map(|(pname, ty)| {
            let size = self.size_of(ty, 0).unwrap_or(0);
            (by_value(ty) && size > 16).then(|| {
                format!(
                    "trampolines cannot attach to a function taking `{} {}` ({size} bytes) by value",
                    self.c_name(ty, 0),
                    self.str_at(pname)
                )
            })
        })
    }

    /// Describes type `id` (an unknown id describes as `void`).
    pub fn kernel_type(&self, id: u32) -> KernelType {
        let pointee = self.pointee(id);
        KernelType {
            c_name: self.c_name(id, 0),
            class: self.class(id),
            id,
            is_user_pointer: pointee.is_some_and(|p| self.has_user_tag(p)),
            points_to_char: pointee.is_some_and(|p| self.is_char(p)),
        }
    }

    /// If `id` is a pointer (under typedefs and qualifiers), the id of what
    /// it points to, as written (qualifiers and type tags included).
    pub fn pointee(&self, id: u32) -> Option<u32> {
        match self.ty(self.strip(id)) {
            Type::Ptr { target } => Some(target),
            _ => None,
        }
    }

    /// If `id` is a struct or union (under typedefs and qualifiers) with its
    /// members known, its layout. A struct only declared (`struct foo;`) is
    /// `None`.
    ///
    /// Bitfields are recognised in both BTF encodings: with the struct's
    /// kind_flag set, a member offset's high 8 bits are the bitfield width and
    /// its low 24 bits the bit offset; without it, a bitfield member's type is
    /// an integer narrower than its size.
    pub fn composite(&self, id: u32) -> Option<Composite> {
        let Type::Composite {
            name,
            size,
            union,
            bitfield_offsets,
            members,
        } = self.ty(self.strip(id))
        else {
            return None;
        };
        let members = self
            .members(members)
            .map(|m| {
                let (bit_offset, bitfield_bits) = if bitfield_offsets {
                    (m.offset & 0x00ff_ffff, m.offset >> 24)
                } else {
                    match self.ty(m.ty) {
                        Type::Int {
                            size,
                            bits,
                            bit_offset,
                            ..
                        } if u64::from(bits) != u64::from(size) * 8 || bit_offset != 0 => {
                            (m.offset.saturating_add(bit_offset), bits)
                        }
                        _ => (m.offset, 0),
                    }
                };
                Member {
                    name: self.str_at(m.name).to_owned(),
                    type_id: m.ty,
                    bit_offset,
                    bitfield_bits,
                }
            })
            .collect();
        Some(Composite {
            name: self.str_at(name).to_owned(),
            is_union: union,
            size,
            members,
        })
    }

    /// Whether `id` (under typedefs and qualifiers) is a struct or union that
    /// is only declared, its members unknown.
    pub fn is_declaration_only(&self, id: u32) -> bool {
        matches!(self.ty(self.strip(id)), Type::Fwd { .. })
    }

    /// If `id` is an enum (under typedefs and qualifiers), its enumerators in
    /// declaration order: name and value. Values of signed enums are
    /// sign-extended; a value of an unsigned 64-bit enum above `i64::MAX`
    /// comes back as its bits (recover it with `as u64`).
    pub fn enumerators(&self, id: u32) -> Option<Vec<(String, i64)>> {
        match self.ty(self.strip(id)) {
            Type::Enum {
                values,
                signed,
                wide,
                ..
            } => Some(
                self.enum_values(values, signed, wide)
                    .map(|(n, v)| (self.str_at(n).to_owned(), v))
                    .collect(),
            ),
            _ => None,
        }
    }

    /// Size in bytes of type `id`, if it has one.
    fn size_of(&self, id: u32, depth: u32) -> Option<u32> {
        if depth > MAX_CHAIN {
            return None;
        }
        match self.ty(self.strip(id)) {
            Type::Int { size, .. }
            | Type::Enum { size, .. }
            | Type::Composite { size, .. }
            | Type::Float { size, .. } => Some(size),
            Type::Ptr { .. } => Some(POINTER_BYTES),
            Type::Array { elem, len } => self.size_of(elem, depth + 1)?.checked_mul(len),
            _ => None,
        }
    }

    /// Whether `id` is, under typedefs and qualifiers, a one-byte integer
    /// other than `_Bool`.
    fn is_char(&self, id: u32) -> bool {
        matches!(self.ty(self.strip(id)), Type::Int { size: 1, encoding, .. } if encoding & INT_BOOL == 0)
    }

    /// Whether the chain of qualifiers starting at `id` has a `user` type tag.
    fn has_user_tag(&self, mut id: u32) -> bool {
        for _ in 0..MAX_CHAIN {
            match self.ty(id) {
                Type::Alias { name, target, kind } => {
                    if kind == KIND_TYPE_TAG && self.str_at(name) == "user" {
                        return true;
                    }
                    id = target;
                }
                _ => return false,
            }
        }
        false
    }

    fn class(&self, id: u32) -> TypeClass {
        let id = self.strip(id);
        match self.ty(id) {
            Type::Void => TypeClass::Void,
            Type::Int { size, encoding, .. } => {
                if encoding & INT_BOOL != 0 {
                    TypeClass::Bool
                } else {
                    TypeClass::Int {
                        bytes: size,
                        signed: encoding & INT_SIGNED != 0,
                    }
                }
            }
            Type::Ptr { .. } => TypeClass::Pointer,
            Type::Enum { size, signed, .. } => TypeClass::Enum {
                bytes: size,
                signed,
            },
            Type::Array { elem, len } => {
                let elem_bytes = self.size_of(elem, 1).unwrap_or(0);
                if elem_bytes.checked_mul(len).is_none() {
                    return TypeClass::Aggregate;
                }
                TypeClass::Array {
                    elem_bytes,
                    len,
                    elem_is_char: self.is_char(elem),
                }
            }
            Type::Float { .. } => TypeClass::Float,
            // `strip` only returns an alias for chains too long to be real.
            Type::Alias { .. } => TypeClass::Aggregate,
            Type::Composite { .. }
            | Type::Fwd { .. }
            | Type::Func { .. }
            | Type::FuncProto { .. }
            | Type::Other { .. } => TypeClass::Aggregate,
        }
    }

    fn c_name(&self, id: u32, depth: u32) -> String {
        if depth > MAX_CHAIN {
            return "...".to_owned();
        }
        let tagged = |keyword: &str, name: u32| {
            let n = self.str_at(name);
            if n.is_empty() {
                format!("{keyword} (anonymous)")
            } else {
                format!("{keyword} {n}")
            }
        };
        match self.ty(id) {
            Type::Void => "void".to_owned(),
            Type::Int { name, encoding, .. } => {
                let n = self.str_at(name);
                if n.is_empty() && encoding & INT_CHAR != 0 {
                    "char".to_owned()
                } else {
                    n.to_owned()
                }
            }
            Type::Ptr { target } => {
                let inner = self.c_name(target, depth + 1);
                if inner.ends_with('*') {
                    format!("{inner}*")
                } else {
                    format!("{inner} *")
                }
            }
            Type::Array { elem, len } => format!("{}[{len}]", self.c_name(elem, depth + 1)),
            Type::Composite {
                name, union: true, ..
            }
            | Type::Fwd { name, union: true } => tagged("union", name),
            Type::Composite { name, .. } | Type::Fwd { name, .. } => tagged("struct", name),
            Type::Enum { name, .. } => tagged("enum", name),
            Type::Alias { name, target, kind } => match kind {
                KIND_TYPEDEF => self.str_at(name).to_owned(),
                KIND_CONST => format!("const {}", self.c_name(target, depth + 1)),
                KIND_VOLATILE => format!("volatile {}", self.c_name(target, depth + 1)),
                _ => self.c_name(target, depth + 1),
            },
            Type::Func { name, .. } => self.str_at(name).to_owned(),
            Type::FuncProto { .. } => "function".to_owned(),
            Type::Float { name, .. } | Type::Other { name } => self.str_at(name).to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::builder::{sample, BtfBuilder};
    use super::*;

    #[test]
    fn reads_a_function_signature() {
        let btf = Btf::parse(&sample()).unwrap();
        let sig = btf.function("vfs_read").unwrap();
        let names: Vec<_> = sig.params.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["file", "buf", "count", "pos"]);
        assert_eq!(sig.params[0].1.c_name, "struct file *");
        assert_eq!(sig.params[0].1.class, TypeClass::Pointer);
        assert_eq!(sig.params[2].1.c_name, "size_t");
        assert_eq!(
            sig.params[2].1.class,
            TypeClass::Int {
                bytes: 8,
                signed: false
            }
        );
        assert_eq!(sig.params[3].1.c_name, "loff_t *");
        assert_eq!(sig.ret.c_name, "ssize_t");
        assert_eq!(
            sig.ret.class,
            TypeClass::Int {
                bytes: 8,
                signed: true
            }
        );
    }

    #[test]
    fn qualifiers_bool_enum_and_void() {
        let btf = Btf::parse(&sample()).unwrap();
        let w = btf.function("vfs_write").unwrap();
        assert_eq!(w.params[1].1.c_name, "const char *");
        let v = btf.function("kspan_void_fn").unwrap();
        assert_eq!(v.ret.class, TypeClass::Void);
        assert_eq!(v.params[0].1.class, TypeClass::Bool);
        assert_eq!(
            v.params[1].1.class,
            TypeClass::Enum {
                bytes: 4,
                signed: false
            }
        );
        assert_eq!(v.params[1].1.c_name, "enum pid_type");
        let s = btf.function("kspan_struct_arg").unwrap();
        assert_eq!(s.params[0].1.class, TypeClass::Aggregate);
        assert_eq!(s.params[0].1.c_name, "struct file");
    }

    #[test]
    fn unknown_function_is_none() {
        let btf = Btf::parse(&sample()).unwrap();
        assert!(btf.function("no_such_fn").is_none());
        assert_eq!(btf.function_count(), 6);
    }

    #[test]
    fn rejects_garbage_and_truncation() {
        assert_eq!(
            Btf::parse(b"\x00\x01rest").unwrap_err(),
            BtfError::BadMagic { found: 0x0100 }
        );
        assert!(matches!(
            Btf::parse(&[0x9f]).unwrap_err(),
            BtfError::Truncated { .. }
        ));
        let blob = sample();
        for cut in [10, 30, blob.len() - 40] {
            assert!(
                matches!(Btf::parse(&blob[..cut]), Err(BtfError::Truncated { .. })),
                "cut at {cut}"
            );
        }
    }

    /// Sets the type section's length in a built blob.
    fn with_type_len(mut blob: Vec<u8>, type_len: u32) -> Vec<u8> {
        blob[12..16].copy_from_slice(&type_len.to_le_bytes());
        blob
    }

    #[test]
    fn a_record_running_past_the_type_section_is_truncated() {
        let mut b = BtfBuilder::new();
        let int = b.int("int", 4, true);
        b.struct_of("pair", 8, &[("a", int, 0), ("b", int, 4)]);
        let blob = b.build();
        // int: 16 bytes; struct: 12 + 2 * 12. Cut the second member off.
        let blob = with_type_len(blob, 16 + 12 + 12);
        assert!(matches!(
            Btf::parse(&blob),
            Err(BtfError::Truncated { what: "member", .. })
        ));
        // Header offsets that overflow are truncation, not a panic.
        let mut blob = sample();
        blob[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        blob[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Btf::parse(&blob), Err(BtfError::Truncated { .. })));
    }

    #[test]
    fn signatures_trampolines_refuse_are_named() {
        let mut b = BtfBuilder::new();
        let int = b.int("int", 4, true);
        let pair = b.struct_of("pair", 8, &[("a", int, 0), ("b", int, 4)]);
        let big = b.struct_of("big", 24, &[("a", int, 0)]);
        let u = b.union_of("u", 8, &[("a", int)]);
        let twelve: Vec<(&str, u32)> = (0..13).map(|_| ("x", int)).collect();
        b.func("plain", int, &[("p", pair)]);
        b.func("returns_union", u, &[]);
        b.func("takes_big", int, &[("b", big)]);
        b.func("variadic", int, &[("fmt", int), ("", 0)]);
        b.func("thirteen", int, &twelve);
        let btf = Btf::parse(&b.build()).unwrap();
        assert_eq!(
            btf.trampoline_refusal("plain"),
            None,
            "16 bytes or less pass"
        );
        assert_eq!(btf.trampoline_refusal("absent"), None);
        let why = |f| btf.trampoline_refusal(f).unwrap();
        assert!(
            why("returns_union").contains("returning `union u`"),
            "{}",
            why("returns_union")
        );
        assert!(
            why("takes_big").contains("`struct big b` (24 bytes)"),
            "{}",
            why("takes_big")
        );
        assert!(why("variadic").contains("variadic"));
        assert!(why("thirteen").contains("at most 12 parameters; it has 13"));
    }

    /// `struct inner { int x; char name[16]; }`, a union, anonymous members,
    /// bitfields in both encodings, enums, type tags.
    fn layouts() -> Btf {
        let mut b = BtfBuilder::new();
        let int = b.int("int", 4, true);
        let uchar = b.int("unsigned char", 1, false);
        let u8_ = b.typedef("u8", uchar);
        let cu8 = b.konst(u8_);
        let boolean = b.bool();
        let arr = b.array(uchar, int, 16);
        let arr2 = b.array(arr, int, 3);
        let bools = b.array(boolean, int, 4);
        let inner = b.struct_of("inner", 20, &[("x", int, 0), ("name", arr, 4)]);
        let anon_union = b.union_of("", 4, &[("as_int", int), ("as_bytes", u8_)]);
        // kind_flag bitfields: `int flag:1` at bit 64, `int mode:3` at 65.
        let bits = b.composite(
            false,
            "bits",
            12,
            true,
            &[
                ("y", int, 0),
                ("flag", int, (1 << 24) | 64),
                ("mode", int, (3 << 24) | 65),
            ],
        );
        // Old encoding: the member's type is an int 3 bits wide.
        let int3 = b.int_bits("int", 4, INT_SIGNED, 3, 0);
        let old_bits = b.composite(false, "old_bits", 4, false, &[("z", int3, 5)]);
        let outer = b.struct_of(
            "outer",
            64,
            &[
                ("head", int, 0),
                ("", anon_union, 4),
                ("in", inner, 8),
                ("rows", arr2, 28),
            ],
        );
        let fwd = b.fwd("opaque", false);
        let user = b.type_tag("user", uchar);
        let ubuf = b.ptr(user);
        let cubuf = b.ptr(b.next_id() + 1);
        b.konst(user);
        let u8p = b.ptr(cu8);
        let vol = b.volatile(int);
        let td_chain = b.typedef("outer_t", outer);
        let td_chain2 = b.typedef("outer_tt", td_chain);
        let state = b.enumeration("state", 4, &[("IDLE", 0), ("BUSY", 3), ("GONE", -1)]);
        let big = b.enum64("big", false, &[("SMALL", 1), ("HUGE", u64::MAX)]);
        b.func(
            "f",
            0,
            &[
                ("o", b.next_id() + 2),
                ("ubuf", ubuf),
                ("cubuf", cubuf),
                ("u8p", u8p),
                ("vol", vol),
                ("state", state),
                ("big", big),
                ("bits", bits),
                ("old", old_bits),
                ("fwd", fwd),
                ("bools", bools),
                ("outer", td_chain2),
            ],
        );
        // Ids of f's prototype and function, then the pointer used by "o".
        b.ptr(td_chain2);
        Btf::parse(&b.build()).unwrap()
    }

    fn param(btf: &Btf, name: &str) -> KernelType {
        let sig = btf.function("f").unwrap();
        sig.params.into_iter().find(|(n, _)| n == name).unwrap().1
    }

    #[test]
    fn struct_members_offsets_and_unions() {
        let btf = layouts();
        let o = param(&btf, "o");
        assert_eq!(o.c_name, "outer_tt *");
        assert_eq!(o.class, TypeClass::Pointer);
        assert!(!o.points_to_char);
        let outer_id = btf.pointee(o.id).unwrap();
        let outer = btf.composite(outer_id).unwrap();
        assert_eq!(outer.name, "outer");
        assert!(!outer.is_union);
        assert_eq!(outer.size, 64);
        let names: Vec<_> = outer.members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["head", "", "in", "rows"]);
        let offsets: Vec<_> = outer.members.iter().map(|m| m.bit_offset).collect();
        assert_eq!(offsets, [0, 32, 64, 224]);
        assert!(outer.members.iter().all(|m| m.bitfield_bits == 0));
        let anon = btf.composite(outer.members[1].type_id).unwrap();
        assert!(anon.is_union);
        assert_eq!(anon.name, "");
        assert_eq!(
            btf.kernel_type(outer.members[1].type_id).c_name,
            "union (anonymous)"
        );
        assert_eq!(
            btf.kernel_type(outer.members[2].type_id).c_name,
            "struct inner"
        );
        // Not a struct: no layout. Through typedefs: the same layout.
        assert!(btf.composite(o.id).is_none());
        assert_eq!(btf.composite(param(&btf, "outer").id).unwrap(), outer);
    }

    #[test]
    fn arrays_and_char_pointers() {
        let btf = layouts();
        let outer = btf.composite(param(&btf, "outer").id).unwrap();
        let inner = btf.composite(outer.members[2].type_id).unwrap();
        let name = btf.kernel_type(inner.members[1].type_id);
        assert_eq!(name.c_name, "unsigned char[16]");
        assert_eq!(
            name.class,
            TypeClass::Array {
                elem_bytes: 1,
                len: 16,
                elem_is_char: true
            }
        );
        let rows = btf.kernel_type(outer.members[3].type_id);
        assert_eq!(rows.c_name, "unsigned char[16][3]");
        assert_eq!(
            rows.class,
            TypeClass::Array {
                elem_bytes: 16,
                len: 3,
                elem_is_char: false
            }
        );
        // `_Bool` is one byte but not a character.
        assert_eq!(
            param(&btf, "bools").class,
            TypeClass::Array {
                elem_bytes: 1,
                len: 4,
                elem_is_char: false
            }
        );
        let u8p = param(&btf, "u8p");
        assert_eq!(u8p.c_name, "const u8 *");
        assert!(u8p.points_to_char);
        assert!(!u8p.is_user_pointer);
        assert!(!param(&btf, "vol").points_to_char);
        assert_eq!(param(&btf, "vol").c_name, "volatile int");
    }

    #[test]
    fn user_type_tags_mark_user_pointers() {
        let btf = layouts();
        let ubuf = param(&btf, "ubuf");
        assert!(ubuf.is_user_pointer);
        assert!(ubuf.points_to_char);
        assert_eq!(ubuf.c_name, "unsigned char *");
        let cubuf = param(&btf, "cubuf");
        assert!(cubuf.is_user_pointer, "{cubuf:?}");
        assert!(cubuf.points_to_char);
        assert_eq!(cubuf.c_name, "const unsigned char *");
        assert!(!param(&btf, "o").is_user_pointer);
        assert!(btf.has_user_tags());
        // Another type tag is not `user`; the sample has no tags at all.
        let mut b = BtfBuilder::new();
        let int = b.int("int", 4, true);
        let rcu = b.type_tag("rcu", int);
        let p = b.ptr(rcu);
        b.func("g", 0, &[("p", p)]);
        assert!(!Btf::parse(&b.build()).unwrap().has_user_tags());
        assert!(!Btf::parse(&sample()).unwrap().has_user_tags());
    }

    #[test]
    fn bitfields_in_both_encodings() {
        let btf = layouts();
        let bits = btf.composite(param(&btf, "bits").id).unwrap();
        let got: Vec<_> = bits
            .members
            .iter()
            .map(|m| (m.name.as_str(), m.bit_offset, m.bitfield_bits))
            .collect();
        assert_eq!(got, [("y", 0, 0), ("flag", 64, 1), ("mode", 65, 3)]);
        let old = btf.composite(param(&btf, "old").id).unwrap();
        assert_eq!(old.members[0].bit_offset, 5);
        assert_eq!(old.members[0].bitfield_bits, 3);
    }

    #[test]
    fn enumerators_signed_unsigned_and_64_bit() {
        let btf = layouts();
        let state = param(&btf, "state");
        assert_eq!(
            state.class,
            TypeClass::Enum {
                bytes: 4,
                signed: true
            }
        );
        let values = btf.enumerators(state.id).unwrap();
        assert_eq!(
            values,
            [
                ("IDLE".to_owned(), 0),
                ("BUSY".to_owned(), 3),
                ("GONE".to_owned(), -1)
            ]
        );
        let big = param(&btf, "big");
        assert_eq!(big.c_name, "enum big");
        assert_eq!(
            big.class,
            TypeClass::Enum {
                bytes: 8,
                signed: false
            }
        );
        let values = btf.enumerators(big.id).unwrap();
        assert_eq!(values[1].1 as u64, u64::MAX);
        assert!(btf.enumerators(param(&btf, "o").id).is_none());
        // Unsigned 32-bit values stay positive.
        let sample = Btf::parse(&sample()).unwrap();
        let kind = &sample.function("kspan_void_fn").unwrap().params[1].1;
        assert_eq!(
            sample.enumerators(kind.id).unwrap()[1],
            ("PIDTYPE_TGID".to_owned(), 1)
        );
    }

    #[test]
    fn declarations_only_have_no_layout() {
        let btf = layouts();
        let fwd = param(&btf, "fwd");
        assert_eq!(fwd.c_name, "struct opaque");
        assert_eq!(fwd.class, TypeClass::Aggregate);
        assert!(btf.composite(fwd.id).is_none());
        assert!(btf.is_declaration_only(fwd.id));
        assert!(!btf.is_declaration_only(param(&btf, "outer").id));
    }

    #[test]
    fn cycles_and_bad_ids_do_not_hang_or_panic() {
        let mut b = BtfBuilder::new();
        // A typedef naming itself, an array of itself, a pointer to an unknown id.
        let me = b.next_id();
        b.typedef("loop_t", me);
        let arr = b.next_id();
        b.array(arr, 0, u32::MAX);
        let wild = b.ptr(9999);
        let int = b.int("int", 4, true);
        let huge = b.array(int, int, u32::MAX);
        b.func("g", 0, &[("l", me), ("a", arr), ("w", wild), ("h", huge)]);
        let btf = Btf::parse(&b.build()).unwrap();
        let sig = btf.function("g").unwrap();
        assert_eq!(sig.params[0].1.class, TypeClass::Void);
        assert!(btf.composite(me).is_none());
        assert!(btf.enumerators(me).is_none());
        assert!(matches!(
            sig.params[1].1.class,
            TypeClass::Array { elem_bytes: 0, .. }
        ));
        assert_eq!(sig.params[2].1.c_name, "void *");
        assert_eq!(btf.kernel_type(9999).class, TypeClass::Void);
        // 4 * u32::MAX bytes does not fit: not an array one could read.
        assert_eq!(sig.params[3].1.class, TypeClass::Aggregate);
    }

    #[test]
    fn an_unknown_kind_is_named_with_its_id() {
        let mut b = BtfBuilder::new();
        b.int("int", 4, true);
        let mut blob = b.build();
        // The int's record starts the type section (after the 24-byte
        // header); its info word's kind bits say 31.
        blob[24 + 4..24 + 8].copy_from_slice(&(31u32 << 24).to_le_bytes());
        assert_eq!(
            Btf::parse(&blob).unwrap_err(),
            BtfError::UnknownKind { kind: 31, id: 1 }
        );
    }

    #[test]
    fn names_by_prefix_are_the_names_that_start_so() {
        let btf = crate::kernel::host_btf();
        assert_eq!(btf.function_names().count(), btf.function_count());
        let mut by_prefix: Vec<&str> = btf.function_names_starting("vfs_").collect();
        let mut filtered: Vec<&str> = btf
            .function_names()
            .filter(|name| name.starts_with("vfs_"))
            .collect();
        by_prefix.sort_unstable();
        filtered.sort_unstable();
        assert!(by_prefix.len() > 20, "{by_prefix:?}");
        assert_eq!(by_prefix, filtered);
        // Every name listed is found, and found as that function.
        for name in by_prefix {
            assert_eq!(btf.function(name).map(|f| f.name), Some(name.to_owned()));
        }
        assert!(btf.type_named("struct file").is_some());
        assert!(btf.type_named("union file").is_none());
        assert!(btf.type_named("enum bpf_attach_type").is_some());
    }

    #[test]
    fn reads_this_machines_kernel_btf() {
        // Pure parsing of the real blob; /sys/kernel/btf/vmlinux is world-readable
        // and every machine kspan is tested on has it (CONFIG_DEBUG_INFO_BTF=y).
        let btf = crate::kernel::host_btf();
        assert!(btf.function_count() > 10_000);
        let sig = btf.function("vfs_read").expect("vfs_read in kernel BTF");
        let names: Vec<_> = sig.params.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["file", "buf", "count", "pos"]);
        assert_eq!(sig.params[2].1.c_name, "size_t");
        assert_eq!(sig.ret.c_name, "ssize_t");
        // `char __user *buf`: a pointer to char, user-tagged where the kernel
        // was built with type tags.
        assert!(sig.params[1].1.points_to_char);
        let file = btf
            .composite(btf.pointee(sig.params[0].1.id).unwrap())
            .unwrap();
        assert_eq!(file.name, "file");
        assert!(file.members.iter().any(|m| m.name == "f_inode"));
        let sk = btf
            .function("tcp_sendmsg")
            .expect("tcp_sendmsg in kernel BTF");
        let sock = btf
            .composite(btf.pointee(sk.params[0].1.id).unwrap())
            .unwrap();
        assert_eq!(sock.members[0].name, "__sk_common");
        assert_eq!(sock.members[0].bit_offset, 0);
    }
}
