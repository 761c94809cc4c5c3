// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A small reader of the kernel's BTF (`/sys/kernel/btf/vmlinux`).
//!
//! kspan needs three things from BTF: does a function exist, what are its
//! parameters called and in which order, and what are their types in width and
//! signedness. That is a few hundred lines of pure code over a byte slice, so
//! it is written here and unit-tested on hand-built blobs, with no kernel and
//! no system call involved.

use std::collections::HashMap;
use std::fmt;

const BTF_MAGIC: u16 = 0xeb9f;

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

const INT_SIGNED: u32 = 1 << 0;
const INT_CHAR: u32 = 1 << 1;
const INT_BOOL: u32 = 1 << 2;

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

/// One parsed BTF type: only what kspan uses is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Type {
    Void,
    Int {
        name: u32,
        size: u32,
        encoding: u32,
    },
    Ptr {
        target: u32,
    },
    Enum {
        name: u32,
        size: u32,
        signed: bool,
    },
    /// Typedef, const, volatile, restrict, type tag: a name (maybe) over another type.
    Alias {
        name: u32,
        target: u32,
        kind: u32,
    },
    Func {
        name: u32,
        proto: u32,
    },
    FuncProto {
        ret: u32,
        params: Vec<(u32, u32)>,
    },
    Float {
        name: u32,
        size: u32,
    },
    Other {
        name: u32,
        kind: u32,
        size: u32,
    },
}

/// The kernel's type information, parsed.
pub struct Btf {
    strings: Vec<u8>,
    types: Vec<Type>,
    funcs: HashMap<String, u32>,
}

impl fmt::Debug for Btf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Btf")
            .field("types", &self.types.len())
            .field("funcs", &self.funcs.len())
            .finish()
    }
}

/// A kernel function's signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncSignature {
    /// The function's name.
    pub name: String,
    /// Parameters in order: name and type.
    pub params: Vec<(String, KernelType)>,
    /// The return type.
    pub ret: KernelType,
}

/// A kernel type, reduced to what decides how a captured register is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelType {
    /// The type as C spells it, typedef names kept (`size_t`, `struct file *`).
    pub c_name: String,
    /// What the type is underneath typedefs and qualifiers.
    pub class: TypeClass,
}

/// The shape of a kernel type underneath typedefs and qualifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeClass {
    /// `void` (only as a return type).
    Void,
    /// An integer (chars included) of `bytes` width.
    Int {
        /// Width in bytes.
        bytes: u32,
        /// Signed or not.
        signed: bool,
    },
    /// `_Bool`.
    Bool,
    /// An enum of `bytes` width.
    Enum {
        /// Width in bytes.
        bytes: u32,
        /// Whether BTF marks its values signed.
        signed: bool,
    },
    /// Any pointer.
    Pointer,
    /// A floating-point type (never in kernel function signatures in practice).
    Float,
    /// Structs, unions, arrays, function types and anything else not capturable
    /// from a register.
    Aggregate,
}

struct Reader<'a> {
    data: &'a [u8],
}

impl Reader<'_> {
    fn u32_at(&self, offset: usize, what: &'static str) -> Result<u32, BtfError> {
        self.data
            .get(offset..offset + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or(BtfError::Truncated { offset, what })
    }
}

impl Btf {
    /// Parses a raw BTF blob such as the content of `/sys/kernel/btf/vmlinux`.
    pub fn parse(data: &[u8]) -> Result<Self, BtfError> {
        let r = Reader { data };
        let magic = data
            .get(0..2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .ok_or(BtfError::Truncated {
                offset: 0,
                what: "header",
            })?;
        if magic != BTF_MAGIC {
            return Err(BtfError::BadMagic { found: magic });
        }
        let hdr_len = r.u32_at(4, "header")? as usize;
        let type_off = r.u32_at(8, "header")? as usize;
        let type_len = r.u32_at(12, "header")? as usize;
        let str_off = r.u32_at(16, "header")? as usize;
        let str_len = r.u32_at(20, "header")? as usize;
        let str_start = hdr_len + str_off;
        let strings = data
            .get(str_start..str_start + str_len)
            .ok_or(BtfError::Truncated {
                offset: str_start,
                what: "string section",
            })?
            .to_vec();
        let type_start = hdr_len + type_off;
        let type_end = type_start + type_len;
        if data.len() < type_end {
            return Err(BtfError::Truncated {
                offset: type_end,
                what: "type section",
            });
        }

        let mut types = vec![Type::Void];
        let mut pos = type_start;
        while pos < type_end {
            let id = types.len() as u32;
            let name = r.u32_at(pos, "type name")?;
            let info = r.u32_at(pos + 4, "type info")?;
            let size_or_type = r.u32_at(pos + 8, "type size")?;
            pos += 12;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            let kind_flag = info >> 31 == 1;
            let ty = match kind {
                KIND_INT => {
                    let encoding = (r.u32_at(pos, "int encoding")? >> 24) & 0xf;
                    pos += 4;
                    Type::Int {
                        name,
                        size: size_or_type,
                        encoding,
                    }
                }
                KIND_PTR => Type::Ptr {
                    target: size_or_type,
                },
                KIND_ARRAY => {
                    pos += 12;
                    Type::Other {
                        name,
                        kind,
                        size: 0,
                    }
                }
                KIND_STRUCT | KIND_UNION => {
                    pos += 12 * vlen;
                    Type::Other {
                        name,
                        kind,
                        size: size_or_type,
                    }
                }
                KIND_ENUM => {
                    pos += 8 * vlen;
                    Type::Enum {
                        name,
                        size: size_or_type,
                        signed: kind_flag,
                    }
                }
                KIND_ENUM64 => {
                    pos += 12 * vlen;
                    Type::Enum {
                        name,
                        size: size_or_type,
                        signed: kind_flag,
                    }
                }
                KIND_FWD => Type::Other {
                    name,
                    kind,
                    size: 0,
                },
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    Type::Alias {
                        name,
                        target: size_or_type,
                        kind,
                    }
                }
                KIND_FUNC => Type::Func {
                    name,
                    proto: size_or_type,
                },
                KIND_FUNC_PROTO => {
                    let mut params = Vec::with_capacity(vlen);
                    for i in 0..vlen {
                        let p = pos + 8 * i;
                        params.push((r.u32_at(p, "parameter")?, r.u32_at(p + 4, "parameter")?));
                    }
                    pos += 8 * vlen;
                    Type::FuncProto {
                        ret: size_or_type,
                        params,
                    }
                }
                KIND_VAR => {
                    pos += 4;
                    Type::Other {
                        name,
                        kind,
                        size: 0,
                    }
                }
                KIND_DATASEC => {
                    pos += 12 * vlen;
                    Type::Other {
                        name,
                        kind,
                        size: size_or_type,
                    }
                }
                KIND_FLOAT => Type::Float {
                    name,
                    size: size_or_type,
                },
                KIND_DECL_TAG => {
                    pos += 4;
                    Type::Other {
                        name,
                        kind,
                        size: 0,
                    }
                }
                _ => return Err(BtfError::UnknownKind { kind, id }),
            };
            types.push(ty);
        }
        if pos > type_end {
            return Err(BtfError::Truncated {
                offset: type_end,
                what: "last type record",
            });
        }

        let mut btf = Btf {
            strings,
            types,
            funcs: HashMap::new(),
        };
        let mut funcs = HashMap::new();
        for (id, ty) in btf.types.iter().enumerate() {
            if let Type::Func { name, .. } = ty {
                funcs
                    .entry(btf.str_at(*name).to_owned())
                    .or_insert(id as u32);
            }
        }
        btf.funcs = funcs;
        Ok(btf)
    }

    fn str_at(&self, offset: u32) -> &str {
        let start = offset as usize;
        let Some(tail) = self.strings.get(start..) else {
            return "";
        };
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        std::str::from_utf8(&tail[..end]).unwrap_or("")
    }

    fn ty(&self, id: u32) -> &Type {
        self.types.get(id as usize).unwrap_or(&Type::Void)
    }

    /// Number of functions described.
    pub fn function_count(&self) -> usize {
        self.funcs.len()
    }

    /// Names of every function described, in no particular order.
    pub fn function_names(&self) -> impl Iterator<Item = &str> {
        self.funcs.keys().map(String::as_str)
    }

    /// The signature of `name`, if BTF describes such a function.
    pub fn function(&self, name: &str) -> Option<FuncSignature> {
        let id = *self.funcs.get(name)?;
        let Type::Func { proto, .. } = self.ty(id) else {
            return None;
        };
        let Type::FuncProto { ret, params } = self.ty(*proto) else {
            return None;
        };
        let params = params
            .iter()
            // A trailing (0, 0) parameter marks a variadic function.
            .filter(|(_, ty)| *ty != 0)
            .map(|(pname, ty)| (self.str_at(*pname).to_owned(), self.kernel_type(*ty)))
            .collect();
        Some(FuncSignature {
            name: name.to_owned(),
            params,
            ret: self.kernel_type(*ret),
        })
    }

    /// Describes type `id`.
    fn kernel_type(&self, id: u32) -> KernelType {
        KernelType {
            c_name: self.c_name(id, 0),
            class: self.class(id, 0),
        }
    }

    fn class(&self, id: u32, depth: u32) -> TypeClass {
        if depth > 32 {
            return TypeClass::Aggregate;
        }
        match self.ty(id) {
            Type::Void => TypeClass::Void,
            Type::Int { size, encoding, .. } => {
                if encoding & INT_BOOL != 0 {
                    TypeClass::Bool
                } else {
                    TypeClass::Int {
                        bytes: *size,
                        signed: encoding & INT_SIGNED != 0,
                    }
                }
            }
            Type::Ptr { .. } => TypeClass::Pointer,
            Type::Enum { size, signed, .. } => TypeClass::Enum {
                bytes: *size,
                signed: *signed,
            },
            Type::Alias { target, .. } => self.class(*target, depth + 1),
            Type::Float { .. } => TypeClass::Float,
            Type::Func { .. } | Type::FuncProto { .. } | Type::Other { .. } => TypeClass::Aggregate,
        }
    }

    fn c_name(&self, id: u32, depth: u32) -> String {
        if depth > 32 {
            return "...".to_owned();
        }
        match self.ty(id) {
            Type::Void => "void".to_owned(),
            Type::Int { name, encoding, .. } => {
                let n = self.str_at(*name);
                if n.is_empty() && encoding & INT_CHAR != 0 {
                    "char".to_owned()
                } else {
                    n.to_owned()
                }
            }
            Type::Ptr { target } => {
                let inner = self.c_name(*target, depth + 1);
                if inner.ends_with('*') {
                    format!("{inner}*")
                } else {
                    format!("{inner} *")
                }
            }
            Type::Enum { name, .. } => format!("enum {}", self.str_at(*name)),
            Type::Alias { name, target, kind } => match *kind {
                KIND_TYPEDEF => self.str_at(*name).to_owned(),
                KIND_CONST => format!("const {}", self.c_name(*target, depth + 1)),
                KIND_VOLATILE => format!("volatile {}", self.c_name(*target, depth + 1)),
                _ => self.c_name(*target, depth + 1),
            },
            Type::Func { name, .. } => self.str_at(*name).to_owned(),
            Type::FuncProto { .. } => "function".to_owned(),
            Type::Float { name, .. } => self.str_at(*name).to_owned(),
            Type::Other { name, kind, .. } => {
                let n = self.str_at(*name);
                match *kind {
                    KIND_STRUCT => format!("struct {n}"),
                    KIND_UNION => format!("union {n}"),
                    KIND_ARRAY => "array".to_owned(),
                    _ => n.to_owned(),
                }
            }
        }
    }
}

/// Builds BTF blobs for tests (here and in the planner's tests).
#[cfg(test)]
pub(crate) mod builder {
    use super::*;

    /// Accumulates types and strings and serialises them as BTF.
    #[derive(Default)]
    pub struct BtfBuilder {
        strings: Vec<u8>,
        types: Vec<u8>,
        next_id: u32,
    }

    impl BtfBuilder {
        pub fn new() -> Self {
            BtfBuilder {
                strings: vec![0],
                types: Vec::new(),
                next_id: 1,
            }
        }

        fn string(&mut self, s: &str) -> u32 {
            if s.is_empty() {
                return 0;
            }
            let off = self.strings.len() as u32;
            self.strings.extend_from_slice(s.as_bytes());
            self.strings.push(0);
            off
        }

        fn header(&mut self, name: &str, kind: u32, vlen: u32, flag: bool, size: u32) -> u32 {
            let name = self.string(name);
            let info = (vlen & 0xffff) | (kind << 24) | (u32::from(flag) << 31);
            for v in [name, info, size] {
                self.types.extend_from_slice(&v.to_le_bytes());
            }
            let id = self.next_id;
            self.next_id += 1;
            id
        }

        pub fn int(&mut self, name: &str, size: u32, signed: bool) -> u32 {
            let id = self.header(name, KIND_INT, 0, false, size);
            let enc = if signed { INT_SIGNED } else { 0 };
            self.types
                .extend_from_slice(&((enc << 24) | (size * 8)).to_le_bytes());
            id
        }

        pub fn bool(&mut self) -> u32 {
            let id = self.header("_Bool", KIND_INT, 0, false, 1);
            self.types
                .extend_from_slice(&((INT_BOOL << 24) | 8).to_le_bytes());
            id
        }

        pub fn ptr(&mut self, target: u32) -> u32 {
            self.header("", KIND_PTR, 0, false, target)
        }

        pub fn typedef(&mut self, name: &str, target: u32) -> u32 {
            self.header(name, KIND_TYPEDEF, 0, false, target)
        }

        pub fn konst(&mut self, target: u32) -> u32 {
            self.header("", KIND_CONST, 0, false, target)
        }

        pub fn strukt(&mut self, name: &str, size: u32) -> u32 {
            self.header(name, KIND_STRUCT, 0, false, size)
        }

        pub fn enumeration(&mut self, name: &str, size: u32, values: &[(&str, i32)]) -> u32 {
            let id = self.header(name, KIND_ENUM, values.len() as u32, false, size);
            for (n, v) in values {
                let n = self.string(n);
                self.types.extend_from_slice(&n.to_le_bytes());
                self.types.extend_from_slice(&v.to_le_bytes());
            }
            id
        }

        pub fn func(&mut self, name: &str, ret: u32, params: &[(&str, u32)]) -> u32 {
            let proto = self.header("", KIND_FUNC_PROTO, params.len() as u32, false, ret);
            for (n, ty) in params {
                let n = self.string(n);
                self.types.extend_from_slice(&n.to_le_bytes());
                self.types.extend_from_slice(&ty.to_le_bytes());
            }
            self.header(name, KIND_FUNC, 1, false, proto)
        }

        pub fn build(&self) -> Vec<u8> {
            let mut out = Vec::new();
            out.extend_from_slice(&BTF_MAGIC.to_le_bytes());
            out.push(1); // version
            out.push(0); // flags
            let hdr_len = 24u32;
            for v in [
                hdr_len,
                0,
                self.types.len() as u32,
                self.types.len() as u32,
                self.strings.len() as u32,
            ] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&self.types);
            out.extend_from_slice(&self.strings);
            out
        }
    }

    /// A blob with `vfs_read`, `ksys_read` and a few odd functions, shaped as
    /// in Linux 6.x.
    pub fn sample() -> Vec<u8> {
        let mut b = BtfBuilder::new();
        let long = b.int("long int", 8, true);
        let ulong = b.int("long unsigned int", 8, false);
        let int = b.int("int", 4, true);
        let uint = b.int("unsigned int", 4, false);
        let ch = b.int("char", 1, true);
        let boolean = b.bool();
        let size_t = b.typedef("size_t", ulong);
        let ssize_t = b.typedef("ssize_t", long);
        let loff_t = b.typedef("loff_t", long);
        let file = b.strukt("file", 256);
        let file_ptr = b.ptr(file);
        let cchar = b.konst(ch);
        let buf = b.ptr(ch);
        let cbuf = b.ptr(cchar);
        let pos = b.ptr(loff_t);
        let mode = b.enumeration("pid_type", 4, &[("PIDTYPE_PID", 0), ("PIDTYPE_TGID", 1)]);
        b.func(
            "vfs_read",
            ssize_t,
            &[
                ("file", file_ptr),
                ("buf", buf),
                ("count", size_t),
                ("pos", pos),
            ],
        );
        b.func(
            "ksys_read",
            ssize_t,
            &[("fd", uint), ("buf", buf), ("count", size_t)],
        );
        b.func("vfs_write", ssize_t, &[("file", file_ptr), ("buf", cbuf)]);
        b.func("kspan_void_fn", 0, &[("flag", boolean), ("kind", mode)]);
        b.func("kspan_struct_arg", int, &[("f", file)]);
        b.func(
            "kspan_seven",
            int,
            &[
                ("a", int),
                ("b", int),
                ("c", int),
                ("d", int),
                ("e", int),
                ("f", int),
                ("g", int),
            ],
        );
        b.build()
    }
}

#[cfg(test)]
mod tests {
    use super::builder::sample;
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

    #[test]
    fn reads_this_machines_kernel_btf() {
        // Pure parsing of the real blob; /sys/kernel/btf/vmlinux is world-readable
        // and every machine kspan is tested on has it (CONFIG_DEBUG_INFO_BTF=y).
        let data = std::fs::read("/sys/kernel/btf/vmlinux")
            .expect("the kernel BTF feature: /sys/kernel/btf/vmlinux must exist");
        let btf = Btf::parse(&data).unwrap();
        assert!(btf.function_count() > 10_000);
        let sig = btf.function("vfs_read").expect("vfs_read in kernel BTF");
        let names: Vec<_> = sig.params.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["file", "buf", "count", "pos"]);
        assert_eq!(sig.params[2].1.c_name, "size_t");
        assert_eq!(sig.ret.c_name, "ssize_t");
    }
}
