// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Indexing a raw BTF blob, bounds-checked: one pass notes where each type
//! record starts and checks that it ends inside the type section (a
//! malformed blob is an error, never a panic), and the names of functions
//! go into a [`FunctionTable`]. Records are decoded only when asked
//! ([`Btf::ty`]), their lists (members, enumerators, parameters) read in
//! place by iterators.

use super::functions::FunctionTable;
use super::{Blob, Btf, BtfError};

pub(super) const BTF_MAGIC: u16 = 0xeb9f;

pub(super) const KIND_INT: u32 = 1;
pub(super) const KIND_PTR: u32 = 2;
pub(super) const KIND_ARRAY: u32 = 3;
pub(super) const KIND_STRUCT: u32 = 4;
pub(super) const KIND_UNION: u32 = 5;
pub(super) const KIND_ENUM: u32 = 6;
pub(super) const KIND_FWD: u32 = 7;
pub(super) const KIND_TYPEDEF: u32 = 8;
pub(super) const KIND_VOLATILE: u32 = 9;
pub(super) const KIND_CONST: u32 = 10;
pub(super) const KIND_RESTRICT: u32 = 11;
pub(super) const KIND_FUNC: u32 = 12;
pub(super) const KIND_FUNC_PROTO: u32 = 13;
pub(super) const KIND_VAR: u32 = 14;
pub(super) const KIND_DATASEC: u32 = 15;
pub(super) const KIND_FLOAT: u32 = 16;
pub(super) const KIND_DECL_TAG: u32 = 17;
pub(super) const KIND_TYPE_TAG: u32 = 18;
pub(super) const KIND_ENUM64: u32 = 19;

pub(super) const INT_SIGNED: u32 = 1 << 0;
pub(super) const INT_CHAR: u32 = 1 << 1;
pub(super) const INT_BOOL: u32 = 1 << 2;

/// Longest chain of typedefs and qualifiers (or nesting of names) followed
/// before giving up: real kernels need a handful, a cycle would need forever.
pub(super) const MAX_CHAIN: u32 = 32;

/// Size of a pointer: kspan runs on 64-bit kernels only.
pub(super) const POINTER_BYTES: u32 = 8;

/// A struct or union member as stored: `offset` is raw (see [`Btf::composite`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawMember {
    pub(super) name: u32,
    pub(super) ty: u32,
    pub(super) offset: u32,
}

/// Where the `count` entries following a type record (members,
/// enumerators, parameters) start in the blob; checked at parse time to be
/// inside the type section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entries {
    pub(super) pos: usize,
    pub(super) count: usize,
}

/// One BTF type, decoded from its record: only what kspan uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Type {
    Void,
    Int {
        name: u32,
        size: u32,
        encoding: u32,
        /// Width in bits (narrower than `size` for old-style bitfield types).
        bits: u32,
        /// Bit offset of the value inside its bytes (old-style bitfields).
        bit_offset: u32,
    },
    Ptr {
        target: u32,
    },
    Array {
        elem: u32,
        len: u32,
    },
    Composite {
        name: u32,
        size: u32,
        union: bool,
        /// BTF's kind_flag: member offsets carry the bitfield width in their
        /// high 8 bits.
        bitfield_offsets: bool,
        members: Entries,
    },
    Enum {
        name: u32,
        size: u32,
        signed: bool,
        /// ENUM64: 12-byte enumerators, the value in two halves.
        wide: bool,
        values: Entries,
    },
    /// A struct or union only declared (`struct foo;`).
    Fwd {
        name: u32,
        union: bool,
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
        params: Entries,
    },
    Float {
        name: u32,
        size: u32,
    },
    /// Variables, data sections, declaration tags.
    Other {
        name: u32,
    },
}

/// Little-endian `u32` at `offset` of `data`, if all four bytes are there.
pub(super) fn u32_at(data: &[u8], offset: usize) -> Option<u32> {
    let bytes = data.get(offset..offset.checked_add(4)?)?;
    Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// `a + b` as a byte offset, or a truncation error if it overflows.
fn add(a: usize, b: usize, what: &'static str) -> Result<usize, BtfError> {
    a.checked_add(b)
        .ok_or(BtfError::Truncated { offset: a, what })
}

/// The bytes that follow a record of `kind` with `vlen` entries, and what
/// they hold (for the error if they run past the section).
#[inline]
fn trailing_bytes(kind: u32, vlen: usize, id: u32) -> Result<(usize, &'static str), BtfError> {
    Ok(match kind {
        KIND_INT => (4, "int encoding"),
        KIND_ARRAY => (12, "array"),
        KIND_STRUCT | KIND_UNION => (12 * vlen, "member"),
        KIND_ENUM => (8 * vlen, "enumerator"),
        KIND_ENUM64 => (12 * vlen, "enumerator"),
        KIND_FUNC_PROTO => (8 * vlen, "parameter"),
        KIND_VAR | KIND_DECL_TAG => (4, "variable"),
        KIND_DATASEC => (12 * vlen, "data section"),
        KIND_PTR | KIND_FWD | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
        | KIND_TYPE_TAG | KIND_FUNC | KIND_FLOAT => (0, "type"),
        _ => return Err(BtfError::UnknownKind { kind, id }),
    })
}

impl Btf {
    /// Parses a raw BTF blob such as the content of `/sys/kernel/btf/vmlinux`
    /// (copied; `read_btf` keeps the kernel's file mapped).
    pub fn parse(data: &[u8]) -> Result<Self, BtfError> {
        Self::from_blob(Box::new(data.to_vec()))
    }

    /// Indexes the BTF blob `data`, which the result keeps.
    pub(crate) fn from_blob(data: Blob) -> Result<Self, BtfError> {
        let bytes: &[u8] = (*data).as_ref();
        let header = |offset: usize| {
            u32_at(bytes, offset)
                .map(|v| v as usize)
                .ok_or(BtfError::Truncated {
                    offset,
                    what: "header",
                })
        };
        let magic = bytes
            .get(0..2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .ok_or(BtfError::Truncated {
                offset: 0,
                what: "header",
            })?;
        if magic != BTF_MAGIC {
            return Err(BtfError::BadMagic { found: magic });
        }
        let hdr_len = header(4)?;
        let type_off = header(8)?;
        let type_len = header(12)?;
        let str_off = header(16)?;
        let str_len = header(20)?;
        let str_start = add(hdr_len, str_off, "string section")?;
        let str_end = add(str_start, str_len, "string section")?;
        if bytes.len() < str_end {
            return Err(BtfError::Truncated {
                offset: str_start,
                what: "string section",
            });
        }
        let type_start = add(hdr_len, type_off, "type section")?;
        let type_end = add(type_start, type_len, "type section")?;
        if bytes.len() < type_end {
            return Err(BtfError::Truncated {
                offset: type_end,
                what: "type section",
            });
        }

        // About one type per 50 bytes of records in the kernel's BTF. Id 0
        // is `void`, which has no record.
        let mut records = Vec::with_capacity(1 + type_len / 48);
        records.push(0);
        let mut funcs = Vec::new();
        let mut pos = type_start;
        while pos < type_end {
            let id = records.len() as u32;
            let field = |offset: usize, what| {
                // Records are read from the type section only: one that runs
                // past its end is truncated, whatever follows in the blob.
                u32_at(&bytes[..type_end], offset).ok_or(BtfError::Truncated { offset, what })
            };
            let name = field(pos, "type name")?;
            let info = field(pos + 4, "type info")?;
            field(pos + 8, "type size")?;
            let kind = (info >> 24) & 0x1f;
            let (trailing, what) = trailing_bytes(kind, (info & 0xffff) as usize, id)?;
            let end = add(pos + 12, trailing, what)?;
            if end > type_end {
                return Err(BtfError::Truncated {
                    offset: type_end,
                    what,
                });
            }
            if kind == KIND_FUNC {
                funcs.push((id, name));
            }
            // Offsets inside the type section, whose length is a `u32`.
            records.push((pos - type_start) as u32);
            pos = end;
        }

        let functions = FunctionTable::build(&bytes[str_start..str_end], &funcs);
        let bytes: *const [u8] = bytes;
        Ok(Btf {
            _data: data,
            bytes,
            strings: str_start..str_end,
            type_start,
            records,
            functions,
        })
    }

    /// Where type `id`'s record starts in the blob.
    pub(super) fn record(&self, id: u32) -> Option<usize> {
        if id == 0 {
            return None;
        }
        let offset = *self.records.get(id as usize)?;
        Some(self.type_start + offset as usize)
    }

    /// The `u32` at `pos` of the blob; 0 past its end (never, for the
    /// positions of records checked at parse time).
    pub(super) fn u32_at(&self, pos: usize) -> u32 {
        u32_at(self.bytes(), pos).unwrap_or(0)
    }

    /// Type `id`, decoded from its record (`void` for 0 or an unknown id).
    pub(super) fn ty(&self, id: u32) -> Type {
        let Some(pos) = self.record(id) else {
            return Type::Void;
        };
        let name = self.u32_at(pos);
        let info = self.u32_at(pos + 4);
        let size_or_type = self.u32_at(pos + 8);
        let extra = pos + 12;
        let entries = Entries {
            pos: extra,
            count: (info & 0xffff) as usize,
        };
        let kind = (info >> 24) & 0x1f;
        let kind_flag = info >> 31 == 1;
        match kind {
            KIND_INT => {
                let data = self.u32_at(extra);
                Type::Int {
                    name,
                    size: size_or_type,
                    encoding: (data >> 24) & 0xf,
                    bit_offset: (data >> 16) & 0xff,
                    bits: data & 0xff,
                }
            }
            KIND_PTR => Type::Ptr {
                target: size_or_type,
            },
            // struct btf_array { type; index_type; nelems; }
            KIND_ARRAY => Type::Array {
                elem: self.u32_at(extra),
                len: self.u32_at(extra + 8),
            },
            KIND_STRUCT | KIND_UNION => Type::Composite {
                name,
                size: size_or_type,
                union: kind == KIND_UNION,
                bitfield_offsets: kind_flag,
                members: entries,
            },
            KIND_ENUM | KIND_ENUM64 => Type::Enum {
                name,
                size: size_or_type,
                signed: kind_flag,
                wide: kind == KIND_ENUM64,
                values: entries,
            },
            KIND_FWD => Type::Fwd {
                name,
                union: kind_flag,
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
            KIND_FUNC_PROTO => Type::FuncProto {
                ret: size_or_type,
                params: entries,
            },
            KIND_FLOAT => Type::Float {
                name,
                size: size_or_type,
            },
            _ => Type::Other { name },
        }
    }

    /// The members of a struct or union.
    pub(super) fn members(&self, members: Entries) -> impl Iterator<Item = RawMember> + '_ {
        (0..members.count).map(move |i| {
            let pos = members.pos + 12 * i;
            RawMember {
                name: self.u32_at(pos),
                ty: self.u32_at(pos + 4),
                offset: self.u32_at(pos + 8),
            }
        })
    }

    /// A function prototype's parameters: name and type.
    pub(super) fn params(&self, params: Entries) -> impl Iterator<Item = (u32, u32)> + '_ {
        (0..params.count).map(move |i| {
            let pos = params.pos + 8 * i;
            (self.u32_at(pos), self.u32_at(pos + 4))
        })
    }

    /// An enum's values: name and value, signed ones sign-extended; an
    /// unsigned 64-bit value above `i64::MAX` comes back as its bits.
    pub(super) fn enum_values(
        &self,
        values: Entries,
        signed: bool,
        wide: bool,
    ) -> impl Iterator<Item = (u32, i64)> + '_ {
        (0..values.count).map(move |i| {
            if wide {
                let pos = values.pos + 12 * i;
                let (lo, hi) = (self.u32_at(pos + 4), self.u32_at(pos + 8));
                (
                    self.u32_at(pos),
                    ((u64::from(hi) << 32) | u64::from(lo)) as i64,
                )
            } else {
                let pos = values.pos + 8 * i;
                let v = self.u32_at(pos + 4);
                let v = if signed {
                    i64::from(v as i32)
                } else {
                    i64::from(v)
                };
                (self.u32_at(pos), v)
            }
        })
    }
}
