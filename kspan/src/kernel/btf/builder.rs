// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Builds BTF blobs for tests (here, in the planner's and in the field paths').

use super::parse::*;

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

    /// The id the next type will get (for types that refer to later ones).
    pub fn next_id(&self) -> u32 {
        self.next_id
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

    fn words(&mut self, words: &[u32]) {
        for w in words {
            self.types.extend_from_slice(&w.to_le_bytes());
        }
    }

    pub fn int(&mut self, name: &str, size: u32, signed: bool) -> u32 {
        let enc = if signed { INT_SIGNED } else { 0 };
        self.int_bits(name, size, enc, size * 8, 0)
    }

    /// An integer with explicit encoding, width and offset in bits (an
    /// old-style bitfield type when narrower than `size`).
    pub fn int_bits(&mut self, name: &str, size: u32, enc: u32, bits: u32, offset: u32) -> u32 {
        let id = self.header(name, KIND_INT, 0, false, size);
        self.words(&[(enc << 24) | (offset << 16) | bits]);
        id
    }

    pub fn bool(&mut self) -> u32 {
        self.int_bits("_Bool", 1, INT_BOOL, 8, 0)
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

    pub fn volatile(&mut self, target: u32) -> u32 {
        self.header("", KIND_VOLATILE, 0, false, target)
    }

    pub fn type_tag(&mut self, name: &str, target: u32) -> u32 {
        self.header(name, KIND_TYPE_TAG, 0, false, target)
    }

    /// A struct with no members listed.
    pub fn strukt(&mut self, name: &str, size: u32) -> u32 {
        self.header(name, KIND_STRUCT, 0, false, size)
    }

    /// A struct or union; members are (name, type, raw offset), the raw
    /// offset carrying the bitfield width in its high 8 bits if
    /// `kind_flag`.
    pub fn composite(
        &mut self,
        union: bool,
        name: &str,
        size: u32,
        kind_flag: bool,
        members: &[(&str, u32, u32)],
    ) -> u32 {
        let kind = if union { KIND_UNION } else { KIND_STRUCT };
        let id = self.header(name, kind, members.len() as u32, kind_flag, size);
        for (n, ty, off) in members {
            let n = self.string(n);
            self.words(&[n, *ty, *off]);
        }
        id
    }

    /// A struct with members at byte offsets.
    pub fn struct_of(&mut self, name: &str, size: u32, members: &[(&str, u32, u32)]) -> u32 {
        let bits: Vec<_> = members.iter().map(|&(n, t, o)| (n, t, o * 8)).collect();
        self.composite(false, name, size, false, &bits)
    }

    /// A union (all members at offset 0).
    pub fn union_of(&mut self, name: &str, size: u32, members: &[(&str, u32)]) -> u32 {
        let bits: Vec<_> = members.iter().map(|&(n, t)| (n, t, 0)).collect();
        self.composite(true, name, size, false, &bits)
    }

    pub fn fwd(&mut self, name: &str, union: bool) -> u32 {
        self.header(name, KIND_FWD, 0, union, 0)
    }

    pub fn array(&mut self, elem: u32, index: u32, len: u32) -> u32 {
        let id = self.header("", KIND_ARRAY, 0, false, 0);
        self.words(&[elem, index, len]);
        id
    }

    pub fn enumeration(&mut self, name: &str, size: u32, values: &[(&str, i32)]) -> u32 {
        let signed = values.iter().any(|(_, v)| *v < 0);
        let id = self.header(name, KIND_ENUM, values.len() as u32, signed, size);
        for (n, v) in values {
            let n = self.string(n);
            self.words(&[n, *v as u32]);
        }
        id
    }

    pub fn enum64(&mut self, name: &str, signed: bool, values: &[(&str, u64)]) -> u32 {
        let id = self.header(name, KIND_ENUM64, values.len() as u32, signed, 8);
        for (n, v) in values {
            let n = self.string(n);
            self.words(&[n, *v as u32, (*v >> 32) as u32]);
        }
        id
    }

    pub fn func(&mut self, name: &str, ret: u32, params: &[(&str, u32)]) -> u32 {
        let proto = self.header("", KIND_FUNC_PROTO, params.len() as u32, false, ret);
        for (n, ty) in params {
            let n = self.string(n);
            self.words(&[n, *ty]);
        }
        self.header(name, KIND_FUNC, 1, false, proto)
    }

    /// A function whose type is `ty` as written, a prototype or not (a
    /// corrupt blob's).
    pub fn func_typed(&mut self, name: &str, ty: u32) -> u32 {
        self.header(name, KIND_FUNC, 0, false, ty)
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
