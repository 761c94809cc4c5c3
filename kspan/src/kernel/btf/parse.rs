// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Parsing a raw BTF blob into one record per type id, bounds-checked: a
//! malformed blob is an error, never a panic.

use std::collections::HashMap;

use super::{Btf, BtfError};

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RawMember {
    pub(super) name: u32,
    pub(super) ty: u32,
    pub(super) offset: u32,
}

/// One parsed BTF type: only what kspan uses is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
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
        members: Vec<RawMember>,
    },
    Enum {
        name: u32,
        size: u32,
        signed: bool,
        values: Vec<(u32, i64)>,
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
        params: Vec<(u32, u32)>,
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

struct Reader<'a> {
    data: &'a [u8],
}

impl Reader<'_> {
    fn u32_at(&self, offset: usize, what: &'static str) -> Result<u32, BtfError> {
        offset
            .checked_add(4)
            .and_then(|end| self.data.get(offset..end))
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or(BtfError::Truncated { offset, what })
    }
}

/// `a + b` as a byte offset, or a truncation error if it overflows.
fn add(a: usize, b: usize, what: &'static str) -> Result<usize, BtfError> {
    a.checked_add(b)
        .ok_or(BtfError::Truncated { offset: a, what })
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
        let str_start = add(hdr_len, str_off, "string section")?;
        let str_end = add(str_start, str_len, "string section")?;
        let strings = data
            .get(str_start..str_end)
            .ok_or(BtfError::Truncated {
                offset: str_start,
                what: "string section",
            })?
            .to_vec();
        let type_start = add(hdr_len, type_off, "type section")?;
        let type_end = add(type_start, type_len, "type section")?;
        if data.len() < type_end {
            return Err(BtfError::Truncated {
                offset: type_end,
                what: "type section",
            });
        }
        // Records are read from the type section only: one that runs past its
        // end is truncated, whatever follows in the blob.
        let r = Reader {
            data: &data[..type_end],
        };

        // About one type per 50 bytes of records in the kernel's BTF.
        let mut types = Vec::with_capacity(1 + type_len / 48);
        types.push(Type::Void);
        let mut func_count = 0;
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
                    let data = r.u32_at(pos, "int encoding")?;
                    pos += 4;
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
                KIND_ARRAY => {
                    // struct btf_array { type; index_type; nelems; }
                    let elem = r.u32_at(pos, "array")?;
                    let len = r.u32_at(pos + 8, "array")?;
                    pos += 12;
                    Type::Array { elem, len }
                }
                KIND_STRUCT | KIND_UNION => {
                    let mut members = Vec::with_capacity(vlen);
                    for _ in 0..vlen {
                        members.push(RawMember {
                            name: r.u32_at(pos, "member")?,
                            ty: r.u32_at(pos + 4, "member")?,
                            offset: r.u32_at(pos + 8, "member")?,
                        });
                        pos += 12;
                    }
                    Type::Composite {
                        name,
                        size: size_or_type,
                        union: kind == KIND_UNION,
                        bitfield_offsets: kind_flag,
                        members,
                    }
                }
                KIND_ENUM => {
                    let mut values = Vec::with_capacity(vlen);
                    for _ in 0..vlen {
                        let n = r.u32_at(pos, "enumerator")?;
                        let v = r.u32_at(pos + 4, "enumerator")?;
                        pos += 8;
                        // kind_flag: the values are signed.
                        let v = if kind_flag {
                            i64::from(v as i32)
                        } else {
                            i64::from(v)
                        };
                        values.push((n, v));
                    }
                    Type::Enum {
                        name,
                        size: size_or_type,
                        signed: kind_flag,
                        values,
                    }
                }
                KIND_ENUM64 => {
                    let mut values = Vec::with_capacity(vlen);
                    for _ in 0..vlen {
                        let n = r.u32_at(pos, "enumerator")?;
                        let lo = r.u32_at(pos + 4, "enumerator")?;
                        let hi = r.u32_at(pos + 8, "enumerator")?;
                        pos += 12;
                        // The bits as i64; unsigned values above i64::MAX
                        // come back with `as u64`.
                        values.push((n, ((u64::from(hi) << 32) | u64::from(lo)) as i64));
                    }
                    Type::Enum {
                        name,
                        size: size_or_type,
                        signed: kind_flag,
                        values,
                    }
                }
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
                KIND_FUNC => {
                    func_count += 1;
                    Type::Func {
                        name,
                        proto: size_or_type,
                    }
                }
                KIND_FUNC_PROTO => {
                    let mut params = Vec::with_capacity(vlen);
                    for _ in 0..vlen {
                        params.push((r.u32_at(pos, "parameter")?, r.u32_at(pos + 4, "parameter")?));
                        pos += 8;
                    }
                    Type::FuncProto {
                        ret: size_or_type,
                        params,
                    }
                }
                KIND_VAR | KIND_DECL_TAG => {
                    pos += 4;
                    Type::Other { name }
                }
                KIND_DATASEC => {
                    pos += 12 * vlen;
                    Type::Other { name }
                }
                KIND_FLOAT => Type::Float {
                    name,
                    size: size_or_type,
                },
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
            funcs: HashMap::default(),
        };
        let mut funcs = HashMap::with_capacity_and_hasher(func_count, Default::default());
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
}
