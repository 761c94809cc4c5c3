// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Field paths such as `file->f_path.dentry->d_name.name`, resolved against
//! the kernel's BTF into the loads and offsets the BPF program performs.
//!
//! # Why it is shaped this way
//!
//! * **Syntax and meaning are separate.** The syntax is `kspan_dsl`'s, the
//!   same parser the `#[kernel_span]` macro rejects malformed paths with at
//!   compile time; resolving needs the running kernel's BTF and runs when
//!   kspan starts.
//! * **The output is what the kernel executes, nothing more.** A resolved path
//!   is a parameter index and a short list of [`Step`]s, each an optional
//!   8-byte load followed by an offset. The BPF program walks it in a bounded
//!   loop with no knowledge of C types; every type decision (is this a
//!   pointer, a struct, a bitfield, is that member there) is taken here, in
//!   pure code that is unit-tested on hand-built BTF.
//! * **Errors say where and what instead.** A path is written by hand against
//!   kernel headers that differ between versions, so a wrong segment names
//!   the function, the path up to and including the failing segment, what is
//!   wrong, and the members that do exist there.
//! * **C rules, read-only.** `->` follows a pointer and `.` selects a member
//!   of a struct held in memory; members of anonymous structs and unions are
//!   found as C finds them.

use std::fmt;

pub use kspan_dsl::{
    parse_field_path as parse, Access, FieldPath, PathSyntaxError, Segment, MAX_SEGMENTS,
};

use crate::kernel::btf::{Btf, Composite, KernelType, Member};

/// How deep anonymous structs and unions are searched for a member (real
/// kernels nest three or four).
const MAX_ANONYMOUS_DEPTH: u32 = 16;

/// Most members visited while searching or listing one struct's members,
/// anonymous ones included: bounds the work on a malformed BTF.
const MAX_VISITS: usize = 100_000;

/// Most member names listed in a [`SegmentProblem::UnknownMember`] error.
pub const MAX_LISTED_MEMBERS: usize = 40;

/// One step of the walk from an argument register to the final member.
///
/// The BPF program evaluates a [`ResolvedPath`] as
/// `cur = arg; for step { if step.load { cur = *(u64 *)cur } cur += step.offset }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Replace `cur` by the 8 bytes of kernel memory at `cur` (follow a
    /// pointer stored there) before adding `offset`.
    pub load: bool,
    /// Bytes added to `cur`.
    pub offset: u32,
}

/// A field path resolved against a function's signature and the kernel's
/// types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPath {
    /// Which argument register the walk starts from (below
    /// `kspan_bpf::MAX_ARGS`).
    pub arg_index: usize,
    /// The walk; after it `cur` is the ADDRESS of the final member, which is
    /// not read. The first `->` from the register needs no load; every later
    /// `->` loads the pointer stored at `cur`; a step without a load is
    /// merged into the one before. So there is one step, plus one per `->`
    /// after the first.
    pub steps: Vec<Step>,
    /// The final member's type: how to read what `cur` points at.
    pub target: KernelType,
}

impl fmt::Display for ResolvedPath {
    /// `arg 0, +16, load +40: const unsigned char *`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "arg {}", self.arg_index)?;
        for s in &self.steps {
            let load = if s.load { "load " } else { "" };
            write!(f, ", {load}+{}", s.offset)?;
        }
        write!(f, ": {}", self.target.c_name)
    }
}

/// Why a field path does not fit the kernel function or its types.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FieldPathError {
    /// The path is not well formed.
    #[error(transparent)]
    Syntax(#[from] PathSyntaxError),
    /// The function is not in the kernel's BTF.
    #[error("kernel function `{function}` is not in this kernel's BTF")]
    UnknownFunction {
        /// The function asked for.
        function: String,
    },
    /// The path's first name is not a parameter of the function.
    #[error(
        "`{function}` has no parameter `{parameter}`{}; {}",
        did_you_mean(suggestion),
        list("its parameters are", "it has no parameters", parameters, 0)
    )]
    UnknownParameter {
        /// The kernel function.
        function: String,
        /// The name asked for.
        parameter: String,
        /// The function's parameters, in order.
        parameters: Vec<String>,
        /// A parameter with a close name.
        suggestion: Option<String>,
    },
    /// The parameter is beyond the argument registers kspan captures.
    #[error(
        "in `{function}`, `{parameter}` is parameter #{} (counting from 1); kspan captures \
         the first {} parameters only",
        index + 1,
        kspan_bpf::MAX_ARGS
    )]
    ParameterNotCaptured {
        /// The kernel function.
        function: String,
        /// The parameter.
        parameter: String,
        /// Its 0-based index.
        index: usize,
    },
    /// A segment of the path cannot be followed.
    #[error("in `{function}`, `{at}`: {problem}")]
    Segment {
        /// The kernel function.
        function: String,
        /// The parameter the path starts from.
        parameter: String,
        /// The path up to and including the failing segment.
        at: String,
        /// What is wrong (boxed: it is the largest part of the error).
        problem: Box<SegmentProblem>,
    },
}

impl FieldPathError {
    /// For a [`FieldPathError::Segment`], what is wrong with the segment.
    pub fn problem(&self) -> Option<&SegmentProblem> {
        match self {
            FieldPathError::Segment { problem, .. } => Some(problem),
            _ => None,
        }
    }
}

/// What is wrong with one segment of a path (see [`FieldPathError::Segment`]).
/// `base` is the path before the segment, `base_type` its C type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SegmentProblem {
    /// `->` on something that is not a pointer.
    #[error(
        "`{member}` is reached with `->` but `{base}` is `{base_type}`, not a pointer{}",
        if *use_dot { "; use `.`" } else { "" }
    )]
    ArrowOnNonPointer {
        /// The member.
        member: String,
        /// The path before the segment.
        base: String,
        /// Its type.
        base_type: String,
        /// Whether `base` is a struct or union in memory, so `.` would work.
        use_dot: bool,
    },
    /// `->` on a pointer to something other than a struct or union.
    #[error(
        "`{member}` is reached with `->` but `{base}` is `{base_type}`, not a pointer to a \
         struct or union"
    )]
    NotStructPointer {
        /// The member.
        member: String,
        /// The path before the segment.
        base: String,
        /// Its type.
        base_type: String,
    },
    /// `->` on a pointer to user memory.
    #[error(
        "`{member}` is reached with `->` but `{base}` is `{base_type}`, a user-space \
         (`__user`) pointer; only kernel memory can be followed"
    )]
    UserPointer {
        /// The member.
        member: String,
        /// The path before the segment.
        base: String,
        /// Its type.
        base_type: String,
    },
    /// `.` on a pointer.
    #[error("`{member}` is reached with `.` but `{base}` is `{base_type}`, a pointer; use `->`")]
    DotOnPointer {
        /// The member.
        member: String,
        /// The path before the segment.
        base: String,
        /// Its type.
        base_type: String,
    },
    /// `.` on something that is neither a struct, a union nor a pointer.
    #[error("`{member}` is reached with `.` but `{base}` is `{base_type}`, not a struct or union")]
    DotOnNonStruct {
        /// The member.
        member: String,
        /// The path before the segment.
        base: String,
        /// Its type.
        base_type: String,
    },
    /// `.` or `->` directly on a struct parameter passed by value.
    #[error(
        "`{member}` is a member of parameter `{base}`, a `{base_type}` passed by value; \
         members of by-value struct parameters are not supported"
    )]
    ByValueParameter {
        /// The member.
        member: String,
        /// The parameter.
        base: String,
        /// Its type.
        base_type: String,
    },
    /// The struct is only declared in BTF.
    #[error(
        "`{container}` is only declared in this kernel's BTF, its members are unknown; \
         `{member}` cannot be found"
    )]
    DeclarationOnly {
        /// The member.
        member: String,
        /// The struct or union.
        container: String,
    },
    /// No such member.
    #[error(
        "`{container}` has no member `{member}`{}; {}",
        did_you_mean(suggestion),
        list("its members are", "it has no members", members, *more)
    )]
    UnknownMember {
        /// The member asked for.
        member: String,
        /// The struct or union.
        container: String,
        /// Its members in declaration order, members of anonymous structs
        /// and unions included in place, at most [`MAX_LISTED_MEMBERS`].
        members: Vec<String>,
        /// How many more there are.
        more: usize,
        /// A member with a close name.
        suggestion: Option<String>,
    },
    /// The member is a bitfield (or otherwise not byte-aligned).
    #[error(
        "`{member}` is {}; bitfield not supported",
        if *bits == 0 {
            format!("not byte-aligned (bit offset {bit_offset})")
        } else {
            format!("a bitfield ({bits} bits at bit offset {bit_offset})")
        }
    )]
    Bitfield {
        /// The member.
        member: String,
        /// Its width in bits (0 for a member that is not a bitfield but
        /// does not start on a byte).
        bits: u32,
        /// Its bit offset from the start of the enclosing struct.
        bit_offset: u64,
    },
    /// The member's offset does not fit 32 bits (a malformed BTF).
    #[error("the offset of `{member}` does not fit in 32 bits; this kernel's BTF is inconsistent")]
    OffsetOverflow {
        /// The member.
        member: String,
    },
}

fn did_you_mean(suggestion: &Option<String>) -> String {
    suggestion
        .as_ref()
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default()
}

fn list(some: &str, none: &str, names: &[String], more: usize) -> String {
    if names.is_empty() {
        return none.to_owned();
    }
    let names: Vec<_> = names.iter().map(|n| format!("`{n}`")).collect();
    let more = if more > 0 {
        format!(" (and {more} more)")
    } else {
        String::new()
    };
    format!("{some}: {}{more}", names.join(", "))
}

/// Resolves `path` against the parameters of kernel function `function` and
/// the kernel's types.
///
/// `->m` needs a pointer to a struct or union (through typedefs and
/// qualifiers), and not a `__user` one; `.m` needs a struct or union held in
/// kernel memory, that is reached by an earlier `->` (a struct parameter
/// passed by value is not supported). Members of anonymous structs and
/// unions are found as in C. The final member may have any type except a
/// bitfield; it is not read.
pub fn resolve(
    btf: &Btf,
    function: &str,
    path: &FieldPath,
) -> Result<ResolvedPath, FieldPathError> {
    if let Some(extra) = path.segments().get(MAX_SEGMENTS) {
        return Err(PathSyntaxError::TooDeep { at: extra.at }.into());
    }
    let parameter = path.parameter();
    let (arg_index, parameter_type) = start_parameter(btf, function, parameter)?;
    let mut walk = Walk::from_register(btf, parameter_type);
    for (i, segment) in path.segments().iter().enumerate() {
        walk.follow(segment, path.before(i))
            .map_err(|problem| FieldPathError::Segment {
                function: function.to_owned(),
                parameter: parameter.to_owned(),
                at: path.prefix(i).to_owned(),
                problem: Box::new(problem),
            })?;
    }
    Ok(ResolvedPath {
        arg_index,
        steps: walk.steps,
        target: btf.kernel_type(walk.ty),
    })
}

/// The parameter a path starts from: its index, which is an argument
/// register kspan captures, and its type id.
fn start_parameter(
    btf: &Btf,
    function: &str,
    parameter: &str,
) -> Result<(usize, u32), FieldPathError> {
    let Some(signature) = btf.function(function) else {
        return Err(FieldPathError::UnknownFunction {
            function: function.to_owned(),
        });
    };
    let Some(arg_index) = signature.params.iter().position(|(n, _)| n == parameter) else {
        let parameters: Vec<String> = signature.params.iter().map(|(n, _)| n.clone()).collect();
        return Err(FieldPathError::UnknownParameter {
            function: function.to_owned(),
            parameter: parameter.to_owned(),
            suggestion: closest(parameter, &parameters),
            parameters,
        });
    };
    if arg_index >= kspan_bpf::MAX_ARGS {
        return Err(FieldPathError::ParameterNotCaptured {
            function: function.to_owned(),
            parameter: parameter.to_owned(),
            index: arg_index,
        });
    }
    Ok((arg_index, signature.params[arg_index].1.id))
}

/// A path walked up to some segment: the steps so far and what they reach.
struct Walk<'b> {
    btf: &'b Btf,
    /// The type of what the walk has reached.
    ty: u32,
    /// Whether `cur` is the address of a value of type `ty` (true after the
    /// first segment) or the value itself (the register, before it).
    in_memory: bool,
    steps: Vec<Step>,
}

impl<'b> Walk<'b> {
    /// A walk that has not left the register, which holds a `ty`.
    fn from_register(btf: &'b Btf, ty: u32) -> Self {
        Walk {
            btf,
            ty,
            in_memory: false,
            steps: Vec::new(),
        }
    }

    /// Follows one segment; `base` is the path before it.
    fn follow(&mut self, segment: &Segment, base: &str) -> Result<(), SegmentProblem> {
        let member = segment.member.as_str();
        let container_id = match segment.access {
            Access::Arrow => self.arrow(member, base)?,
            Access::Dot => self.dot(member, base)?,
        };
        let (bit_offset, found) = self.find(container_id, member)?;
        self.add_offset(member, byte_offset(member, &found, bit_offset)?)?;
        self.ty = found.type_id;
        self.in_memory = true;
        Ok(())
    }

    /// `->member`: checks that `ty` is a kernel pointer to a struct or union
    /// and adds the step that follows it; returns the struct or union.
    fn arrow(&mut self, member: &str, base: &str) -> Result<u32, SegmentProblem> {
        let btf = self.btf;
        let Some(pointee) = btf.pointee(self.ty) else {
            let is_struct = btf.composite(self.ty).is_some() || btf.is_declaration_only(self.ty);
            if is_struct && !self.in_memory {
                return Err(SegmentProblem::ByValueParameter {
                    member: member.to_owned(),
                    base: base.to_owned(),
                    base_type: self.type_name(),
                });
            }
            return Err(SegmentProblem::ArrowOnNonPointer {
                member: member.to_owned(),
                base: base.to_owned(),
                base_type: self.type_name(),
                use_dot: is_struct,
            });
        };
        if btf.composite(pointee).is_none() && !btf.is_declaration_only(pointee) {
            return Err(SegmentProblem::NotStructPointer {
                member: member.to_owned(),
                base: base.to_owned(),
                base_type: self.type_name(),
            });
        }
        if btf.kernel_type(self.ty).is_user_pointer {
            return Err(SegmentProblem::UserPointer {
                member: member.to_owned(),
                base: base.to_owned(),
                base_type: self.type_name(),
            });
        }
        // From the register the pointer is already in `cur`; from
        // memory it is loaded from `cur`.
        self.steps.push(Step {
            load: self.in_memory,
            offset: 0,
        });
        Ok(pointee)
    }

    /// `.member`: checks that `ty` is a struct or union in kernel memory;
    /// returns it.
    fn dot(&self, member: &str, base: &str) -> Result<u32, SegmentProblem> {
        let btf = self.btf;
        if btf.pointee(self.ty).is_some() {
            return Err(SegmentProblem::DotOnPointer {
                member: member.to_owned(),
                base: base.to_owned(),
                base_type: self.type_name(),
            });
        }
        let is_struct = btf.composite(self.ty).is_some() || btf.is_declaration_only(self.ty);
        if !is_struct {
            return Err(SegmentProblem::DotOnNonStruct {
                member: member.to_owned(),
                base: base.to_owned(),
                base_type: self.type_name(),
            });
        }
        if !self.in_memory {
            return Err(SegmentProblem::ByValueParameter {
                member: member.to_owned(),
                base: base.to_owned(),
                base_type: self.type_name(),
            });
        }
        Ok(self.ty)
    }

    /// `member` of the struct or union `container_id`, and its bit offset
    /// from the container's start.
    fn find(&self, container_id: u32, member: &str) -> Result<(u64, Member), SegmentProblem> {
        let btf = self.btf;
        let container_name = || btf.kernel_type(container_id).c_name;
        let Some(container) = btf.composite(container_id) else {
            return Err(SegmentProblem::DeclarationOnly {
                member: member.to_owned(),
                container: container_name(),
            });
        };
        let mut budget = MAX_VISITS;
        if let Some(found) = find_member(btf, &container, member, 0, &mut budget) {
            return Ok(found);
        }
        let mut members = Vec::new();
        let mut budget = MAX_VISITS;
        member_names(btf, &container, 0, &mut budget, &mut members);
        let suggestion = closest(member, &members);
        let more = members.len().saturating_sub(MAX_LISTED_MEMBERS);
        members.truncate(MAX_LISTED_MEMBERS);
        Err(SegmentProblem::UnknownMember {
            member: member.to_owned(),
            container: container_name(),
            members,
            more,
            suggestion,
        })
    }

    /// Adds a member's byte offset to the walk.
    fn add_offset(&mut self, member: &str, offset: u32) -> Result<(), SegmentProblem> {
        // Added to the last step when there is one (a struct in memory was
        // reached through a `->`).
        match self.steps.last_mut() {
            Some(last) => {
                let Some(sum) = last.offset.checked_add(offset) else {
                    return Err(SegmentProblem::OffsetOverflow {
                        member: member.to_owned(),
                    });
                };
                last.offset = sum;
            }
            None => self.steps.push(Step {
                load: false,
                offset,
            }),
        }
        Ok(())
    }

    /// The C name of `ty`, for errors.
    fn type_name(&self) -> String {
        self.btf.kernel_type(self.ty).c_name
    }
}

/// The byte offset of a member found at `bit_offset`: refused for a
/// bitfield or a member that does not start on a byte.
fn byte_offset(member: &str, found: &Member, bit_offset: u64) -> Result<u32, SegmentProblem> {
    if found.bitfield_bits != 0 || bit_offset % 8 != 0 {
        return Err(SegmentProblem::Bitfield {
            member: member.to_owned(),
            bits: found.bitfield_bits,
            bit_offset,
        });
    }
    u32::try_from(bit_offset / 8).map_err(|_| SegmentProblem::OffsetOverflow {
        member: member.to_owned(),
    })
}

/// Byte offset of the member reached by `path` (member names, through
/// nested structs, anonymous members searched as C does) from the start of
/// type `type_name` as C spells it: e.g. `struct task_struct` and
/// `["thread", "fsbase"]`.
/// `None` if a segment is missing or lands in a bitfield.
pub fn member_offset(btf: &Btf, type_name: &str, path: &[&str]) -> Option<u32> {
    let mut id = btf.type_named(type_name)?;
    let mut bits = 0u64;
    for segment in path {
        let container = btf.composite(id)?;
        let mut budget = MAX_VISITS;
        let (offset, member) = find_member(btf, &container, segment, 0, &mut budget)?;
        if member.bitfield_bits != 0 {
            return None;
        }
        bits += offset;
        id = member.type_id;
    }
    u32::try_from(bits / 8).ok().filter(|_| bits % 8 == 0)
}

/// Finds `name` in `container`, looking into anonymous struct and union
/// members as C does: the member and its bit offset from the container.
fn find_member(
    btf: &Btf,
    container: &Composite,
    name: &str,
    depth: u32,
    budget: &mut usize,
) -> Option<(u64, Member)> {
    for m in &container.members {
        if *budget == 0 {
            return None;
        }
        *budget -= 1;
        if m.name == name {
            return Some((u64::from(m.bit_offset), m.clone()));
        }
        if m.name.is_empty() && depth < MAX_ANONYMOUS_DEPTH {
            if let Some(inner) = btf.composite(m.type_id) {
                if let Some((offset, found)) = find_member(btf, &inner, name, depth + 1, budget) {
                    return Some((u64::from(m.bit_offset) + offset, found));
                }
            }
        }
    }
    None
}

/// Lists the member names reachable in `container`, in declaration order,
/// the members of anonymous members in place.
fn member_names(
    btf: &Btf,
    container: &Composite,
    depth: u32,
    budget: &mut usize,
    names: &mut Vec<String>,
) {
    for m in &container.members {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        if !m.name.is_empty() {
            names.push(m.name.clone());
        } else if depth < MAX_ANONYMOUS_DEPTH {
            if let Some(inner) = btf.composite(m.type_id) {
                member_names(btf, &inner, depth + 1, budget, names);
            }
        }
    }
}

/// The candidate closest to `name` by edit distance, if close enough to be
/// a likely typo.
fn closest(name: &str, candidates: &[String]) -> Option<String> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .iter()
        .map(|c| (strsim::levenshtein(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::btf::builder::BtfBuilder;
    use crate::kernel::btf::TypeClass;

    /// Kernel-shaped types: `struct file` with `f_path` in an anonymous
    /// union, `struct dentry`, `struct qstr`, `struct sock` with
    /// `skc_dport` in an anonymous struct in an anonymous union, `struct
    /// socket` with an enum, `struct open_how`, and a few odd functions.
    fn kernel() -> Btf {
        let mut b = BtfBuilder::new();
        let int = b.int("int", 4, true);
        let uint = b.int("unsigned int", 4, false);
        let ushort = b.int("short unsigned int", 2, false);
        let ulong = b.int("long long unsigned int", 8, false);
        let uchar = b.int("unsigned char", 1, false);
        let ch = b.int("char", 1, true);
        let u16_ = b.typedef("__u16", ushort);
        let be16 = b.typedef("__be16", u16_);
        let u32_ = b.typedef("u32", uint);
        let u64_ = b.typedef("__u64", ulong);
        let size_t = b.typedef("size_t", ulong);
        let cuchar = b.konst(uchar);
        let name_ptr = b.ptr(cuchar);
        let iname = b.array(ch, int, 32);
        // struct qstr { union { struct { u32 hash; u32 len; }; u64 hash_len; }; const unsigned char *name; }
        let hash_len = b.struct_of("", 8, &[("hash", u32_, 0), ("len", u32_, 4)]);
        let qstr_u = b.union_of("", 8, &[("", hash_len), ("hash_len", u64_)]);
        let qstr = b.struct_of("qstr", 16, &[("", qstr_u, 0), ("name", name_ptr, 8)]);
        let dentry = b.struct_of(
            "dentry",
            192,
            &[
                ("d_flags", uint, 0),
                ("d_name", qstr, 32),
                ("d_iname", iname, 56),
            ],
        );
        let dentry_ptr = b.ptr(dentry);
        let path = b.struct_of(
            "path",
            16,
            &[("mnt", b.next_id() + 2, 0), ("dentry", dentry_ptr, 8)],
        );
        let cpath = b.konst(path);
        let vfsmount = b.strukt("vfsmount", 16);
        b.ptr(vfsmount);
        let f_union = b.union_of("", 16, &[("f_path", cpath), ("__f_path", path)]);
        let inode = b.fwd("inode", false);
        let inode_ptr = b.ptr(inode);
        // kind_flag: offsets in the low 24 bits, bitfield widths in the high 8.
        let file = b.composite(
            false,
            "file",
            64,
            true,
            &[
                ("f_mode", uint, 0),
                ("", f_union, 16 * 8),
                ("f_inode", inode_ptr, 32 * 8),
                ("f_bits", uint, (3 << 24) | (40 * 8)),
                ("f_aligned_bits", uint, (8 << 24) | (48 * 8)),
            ],
        );
        let file_ptr = b.ptr(file);
        let file_pp = b.ptr(file_ptr);
        let state = b.enumeration(
            "socket_state",
            4,
            &[
                ("SS_FREE", 0),
                ("SS_UNCONNECTED", 1),
                ("SS_CONNECTING", 2),
                ("SS_CONNECTED", 3),
                ("SS_DISCONNECTING", 4),
            ],
        );
        let socket_state = b.typedef("socket_state", state);
        let socket = b.struct_of(
            "socket",
            128,
            &[("state", socket_state, 0), ("type", ushort, 4)],
        );
        let socket_ptr = b.ptr(socket);
        // struct sock_common { ...; union { __portpair skc_portpair; struct { __be16 skc_dport; __u16 skc_num; }; } @12 }
        let ports = b.struct_of("", 4, &[("skc_dport", be16, 0), ("skc_num", u16_, 2)]);
        let port_u = b.union_of("", 4, &[("skc_portpair", uint), ("", ports)]);
        let sock_common = b.struct_of(
            "sock_common",
            136,
            &[("skc_daddr", uint, 0), ("", port_u, 12)],
        );
        let sock = b.struct_of(
            "sock",
            760,
            &[
                ("__sk_common", sock_common, 0),
                ("sk_socket", socket_ptr, 536),
            ],
        );
        let sock_ptr = b.ptr(sock);
        let open_how = b.struct_of(
            "open_how",
            24,
            &[("flags", u64_, 0), ("mode", u64_, 8), ("resolve", u64_, 16)],
        );
        let how_ptr = b.ptr(open_how);
        let cch = b.konst(ch);
        let user = b.type_tag("user", cch);
        let ubuf = b.ptr(user);
        let upath = b.type_tag("user", path);
        let upath_ptr = b.ptr(upath);
        let many: Vec<String> = (0..45).map(|i| format!("m{i}")).collect();
        let members: Vec<_> = many.iter().map(|n| (n.as_str(), int, 0)).collect();
        let wide = b.struct_of("wide", 4, &members);
        let wide_ptr = b.ptr(wide);
        // struct r { struct { struct r r; } @ 0x1fffffff; }: offsets that
        // add up past 4 GiB.
        let r = b.next_id() + 1;
        let anon = b.composite(false, "", 8, false, &[("r", r, 0xffff_fff8)]);
        b.composite(false, "r", 8, false, &[("", anon, 0xffff_fff8)]);
        let r_ptr = b.ptr(r);

        b.func(
            "vfs_read",
            int,
            &[
                ("file", file_ptr),
                ("buf", ubuf),
                ("count", size_t),
                ("pos", int),
            ],
        );
        b.func("tcp_sendmsg", int, &[("sk", sock_ptr), ("size", size_t)]);
        b.func("do_sys_openat2", int, &[("dfd", int), ("how", how_ptr)]);
        b.func(
            "kspan_seven",
            int,
            &[
                ("a", file_ptr),
                ("b", file_ptr),
                ("c", file_ptr),
                ("d", file_ptr),
                ("e", file_ptr),
                ("f", file_ptr),
                ("g", file_ptr),
            ],
        );
        b.func("kspan_by_value", int, &[("p", path)]);
        b.func(
            "kspan_odd",
            int,
            &[("pp", file_pp), ("up", upath_ptr), ("w", wide_ptr)],
        );
        b.func("kspan_big", int, &[("x", r_ptr)]);
        b.func("kspan_none", int, &[]);
        Btf::parse(&b.build()).unwrap()
    }

    fn resolve_str(btf: &Btf, function: &str, text: &str) -> Result<ResolvedPath, FieldPathError> {
        resolve(btf, function, &parse(text)?)
    }

    fn err(function: &str, text: &str) -> String {
        resolve_str(&kernel(), function, text)
            .unwrap_err()
            .to_string()
    }

    fn step(load: bool, offset: u32) -> Step {
        Step { load, offset }
    }

    #[test]
    fn follows_pointers_and_merges_offsets() {
        let btf = kernel();
        let r = resolve_str(&btf, "vfs_read", "file->f_path.dentry->d_name.name").unwrap();
        assert_eq!(r.arg_index, 0);
        // f_path (in an anonymous union) at 16, dentry at 8; d_name at 32, name at 8.
        assert_eq!(r.steps, [step(false, 24), step(true, 40)]);
        assert_eq!(r.target.c_name, "const unsigned char *");
        assert_eq!(r.target.class, TypeClass::Pointer);
        assert!(r.target.points_to_char);
        assert_eq!(r.to_string(), "arg 0, +24, load +40: const unsigned char *");

        // Anonymous struct in an anonymous union in a struct member.
        let r = resolve_str(&btf, "tcp_sendmsg", "sk->__sk_common.skc_dport").unwrap();
        assert_eq!(r.steps, [step(false, 12)]);
        assert_eq!(r.target.c_name, "__be16");
        assert_eq!(
            r.target.class,
            TypeClass::Int {
                bytes: 2,
                signed: false
            }
        );
        let r = resolve_str(&btf, "tcp_sendmsg", "sk->__sk_common.skc_num").unwrap();
        assert_eq!(r.steps, [step(false, 14)]);

        let r = resolve_str(&btf, "tcp_sendmsg", "sk->sk_socket->state").unwrap();
        assert_eq!(r.steps, [step(false, 536), step(true, 0)]);
        assert_eq!(
            r.target.class,
            TypeClass::Enum {
                bytes: 4,
                signed: false
            }
        );
        let names = btf.enumerators(r.target.id).unwrap();
        assert!(names.contains(&("SS_CONNECTED".to_owned(), 3)));

        let r = resolve_str(&btf, "do_sys_openat2", "how->resolve").unwrap();
        assert_eq!(r.arg_index, 1);
        assert_eq!(r.steps, [step(false, 16)]);
        assert_eq!(
            r.target.class,
            TypeClass::Int {
                bytes: 8,
                signed: false
            }
        );

        let r = resolve_str(&btf, "vfs_read", "file->f_path.dentry->d_iname").unwrap();
        assert_eq!(r.steps, [step(false, 24), step(true, 56)]);
        assert_eq!(
            r.target.class,
            TypeClass::Array {
                elem_bytes: 1,
                len: 32,
                elem_is_char: true
            }
        );
        assert_eq!(r.target.c_name, "char[32]");

        // Ending on a struct or a nested anonymous member is fine: it is not read.
        let r = resolve_str(&btf, "vfs_read", "file->f_path.dentry->d_name").unwrap();
        assert_eq!(r.steps, [step(false, 24), step(true, 32)]);
        assert_eq!(r.target.class, TypeClass::Aggregate);
        let r = resolve_str(&btf, "vfs_read", "file->f_path.dentry->d_name.len").unwrap();
        assert_eq!(r.steps, [step(false, 24), step(true, 36)]);
        // A pointer member stored in memory, loaded by a later `->` only.
        let r = resolve_str(&btf, "vfs_read", "file->f_path.dentry").unwrap();
        assert_eq!(r.steps, [step(false, 24)]);
        assert_eq!(r.target.c_name, "struct dentry *");
        // The sixth parameter is still captured.
        let r = resolve_str(&btf, "kspan_seven", "f->f_mode").unwrap();
        assert_eq!(r.arg_index, 5);
        assert_eq!(r.steps, [step(false, 0)]);
    }

    #[test]
    fn function_and_parameter_errors() {
        assert_eq!(
            err("no_such_fn", "x->y"),
            "kernel function `no_such_fn` is not in this kernel's BTF"
        );
        assert_eq!(
            err("vfs_read", "fil->f_path"),
            "`vfs_read` has no parameter `fil` (did you mean `file`?); its parameters are: \
             `file`, `buf`, `count`, `pos`"
        );
        assert_eq!(
            err("kspan_none", "x->y"),
            "`kspan_none` has no parameter `x`; it has no parameters"
        );
        let e = resolve_str(&kernel(), "kspan_seven", "g->f_mode").unwrap_err();
        assert_eq!(
            e,
            FieldPathError::ParameterNotCaptured {
                function: "kspan_seven".to_owned(),
                parameter: "g".to_owned(),
                index: 6
            }
        );
        assert_eq!(
            e.to_string(),
            "in `kspan_seven`, `g` is parameter #7 (counting from 1); kspan captures the first \
             6 parameters only"
        );
        assert!(matches!(
            resolve_str(&kernel(), "vfs_read", "file"),
            Err(FieldPathError::Syntax(
                PathSyntaxError::ExpectedAccess { .. }
            ))
        ));
    }

    #[test]
    fn wrong_operator_errors() {
        assert_eq!(
            err("vfs_read", "file->f_path->dentry"),
            "in `vfs_read`, `file->f_path->dentry`: `dentry` is reached with `->` but \
             `file->f_path` is `const struct path`, not a pointer; use `.`"
        );
        assert_eq!(
            err("vfs_read", "file->f_mode->x"),
            "in `vfs_read`, `file->f_mode->x`: `x` is reached with `->` but `file->f_mode` is \
             `unsigned int`, not a pointer"
        );
        assert_eq!(
            err("kspan_by_value", "p->dentry"),
            "in `kspan_by_value`, `p->dentry`: `dentry` is a member of parameter `p`, a \
             `struct path` passed by value; members of by-value struct parameters are not \
             supported"
        );
        assert_eq!(
            err("vfs_read", "file.f_path"),
            "in `vfs_read`, `file.f_path`: `f_path` is reached with `.` but `file` is \
             `struct file *`, a pointer; use `->`"
        );
        assert_eq!(
            err("vfs_read", "file->f_path.dentry.d_name"),
            "in `vfs_read`, `file->f_path.dentry.d_name`: `d_name` is reached with `.` but \
             `file->f_path.dentry` is `struct dentry *`, a pointer; use `->`"
        );
        assert_eq!(
            err("vfs_read", "file->f_mode.x"),
            "in `vfs_read`, `file->f_mode.x`: `x` is reached with `.` but `file->f_mode` is \
             `unsigned int`, not a struct or union"
        );
        assert_eq!(
            err("vfs_read", "count.x"),
            "in `vfs_read`, `count.x`: `x` is reached with `.` but `count` is `size_t`, not a \
             struct or union"
        );
        assert_eq!(
            err("kspan_by_value", "p.dentry"),
            "in `kspan_by_value`, `p.dentry`: `dentry` is a member of parameter `p`, a \
             `struct path` passed by value; members of by-value struct parameters are not \
             supported"
        );
    }

    #[test]
    fn pointee_errors() {
        assert_eq!(
            err("kspan_odd", "pp->f_mode"),
            "in `kspan_odd`, `pp->f_mode`: `f_mode` is reached with `->` but `pp` is \
             `struct file **`, not a pointer to a struct or union"
        );
        assert_eq!(
            err("vfs_read", "buf->x"),
            "in `vfs_read`, `buf->x`: `x` is reached with `->` but `buf` is `const char *`, \
             not a pointer to a struct or union"
        );
        assert_eq!(
            err("kspan_odd", "up->dentry"),
            "in `kspan_odd`, `up->dentry`: `dentry` is reached with `->` but `up` is \
             `struct path *`, a user-space (`__user`) pointer; only kernel memory can be \
             followed"
        );
        assert_eq!(
            err("vfs_read", "file->f_inode->i_mode"),
            "in `vfs_read`, `file->f_inode->i_mode`: `struct inode` is only declared in this \
             kernel's BTF, its members are unknown; `i_mode` cannot be found"
        );
    }

    #[test]
    fn unknown_members_are_listed_with_anonymous_ones_in_place() {
        let e = resolve_str(&kernel(), "vfs_read", "file->f_pathh").unwrap_err();
        assert_eq!(
            e.to_string(),
            "in `vfs_read`, `file->f_pathh`: `struct file` has no member `f_pathh` (did you \
             mean `f_path`?); its members are: `f_mode`, `f_path`, `__f_path`, `f_inode`, \
             `f_bits`, `f_aligned_bits`"
        );
        let FieldPathError::Segment {
            function,
            parameter,
            at,
            problem,
        } = &e
        else {
            panic!("{e:?}")
        };
        assert_eq!(
            (function.as_str(), parameter.as_str(), at.as_str()),
            ("vfs_read", "file", "file->f_pathh")
        );
        let SegmentProblem::UnknownMember {
            member,
            container,
            members,
            more,
            suggestion,
        } = &**problem
        else {
            panic!("{e:?}")
        };
        assert_eq!(
            (member.as_str(), container.as_str()),
            ("f_pathh", "struct file")
        );
        assert_eq!(members.len(), 6);
        assert_eq!(*more, 0);
        assert_eq!(suggestion.as_deref(), Some("f_path"));
        // Deep in the path, in an anonymous-union struct.
        assert_eq!(
            err("vfs_read", "file->f_path.dentry->d_name.nam"),
            "in `vfs_read`, `file->f_path.dentry->d_name.nam`: `struct qstr` has no member \
             `nam` (did you mean `name`?); its members are: `hash`, `len`, `hash_len`, `name`"
        );
        // Long lists are cut.
        let e = resolve_str(&kernel(), "kspan_odd", "w->nope").unwrap_err();
        let Some(SegmentProblem::UnknownMember { members, more, .. }) = e.problem() else {
            panic!("{e:?}")
        };
        assert_eq!(members.len(), MAX_LISTED_MEMBERS);
        assert_eq!(members[39], "m39");
        assert_eq!(*more, 5);
        assert!(e.to_string().ends_with("`m38`, `m39` (and 5 more)"), "{e}");
        // Suggestions come from every member, listed or not.
        let e = resolve_str(&kernel(), "kspan_odd", "w->m44_").unwrap_err();
        assert!(
            e.to_string()
                .contains("no member `m44_` (did you mean `m44`?)"),
            "{e}"
        );
    }

    #[test]
    fn bitfields_and_impossible_offsets() {
        assert_eq!(
            err("vfs_read", "file->f_bits"),
            "in `vfs_read`, `file->f_bits`: `f_bits` is a bitfield (3 bits at bit offset 320); \
             bitfield not supported"
        );
        // Even a byte-aligned, byte-wide bitfield.
        assert!(err("vfs_read", "file->f_aligned_bits")
            .contains("a bitfield (8 bits at bit offset 384)"));
        assert_eq!(
            err("kspan_big", "x->r.r.r.r.r"),
            "in `kspan_big`, `x->r.r.r.r.r`: the offset of `r` does not fit in 32 bits; this \
             kernel's BTF is inconsistent"
        );
    }

    /// The running kernel's BTF; a machine without it fails the test.
    fn host() -> Btf {
        crate::kernel::host_btf()
    }

    #[test]
    fn resolves_paths_on_this_machines_kernel() {
        let btf = host();
        let show = |function: &str, text: &str| {
            let r = resolve_str(&btf, function, text)
                .unwrap_or_else(|e| panic!("{function} {text}: {e}"));
            println!("{function} {text}: {r} ({:?})", r.steps);
            r
        };

        let r = show("vfs_read", "file->f_path.dentry->d_name.name");
        assert_eq!(r.arg_index, 0);
        assert_eq!(r.steps.len(), 2);
        assert!(!r.steps[0].load);
        assert!(r.steps[1].load);
        assert_eq!(r.target.class, TypeClass::Pointer);
        assert!(r.target.points_to_char);
        assert!(!r.target.is_user_pointer);
        let buf = &btf.function("vfs_read").unwrap().params[1].1;
        println!(
            "vfs_read buf: `{}`, user-tagged: {} (type tags need a clang-built kernel)",
            buf.c_name, buf.is_user_pointer
        );
        // `struct qstr` ends with `const unsigned char *name` after 8 bytes of
        // hash and length; `struct path` is { mnt, dentry }.
        let name = show("vfs_read", "file->f_path.dentry->d_name");
        assert_eq!(r.steps[1].offset, name.steps[1].offset + 8);
        assert_eq!(
            r.steps[0].offset,
            show("vfs_read", "file->f_path").steps[0].offset + 8
        );

        let r = show("tcp_sendmsg", "sk->__sk_common.skc_dport");
        assert_eq!(r.arg_index, 0);
        assert_eq!(r.steps.len(), 1);
        assert!(!r.steps[0].load);
        assert_eq!(r.target.c_name, "__be16");
        assert_eq!(
            r.target.class,
            TypeClass::Int {
                bytes: 2,
                signed: false
            }
        );
        // After the 8-byte address pair and the 4-byte hash (stable layout
        // of 64-bit kernels since 3.x).
        assert_eq!(r.steps[0].offset, 12);
        // skc_num follows skc_dport in the same anonymous struct.
        let num = show("tcp_sendmsg", "sk->__sk_common.skc_num");
        assert_eq!(num.steps[0].offset, r.steps[0].offset + 2);

        let r = show("tcp_sendmsg", "sk->sk_socket->state");
        assert_eq!(r.steps.len(), 2);
        assert!(!r.steps[0].load);
        assert!(r.steps[1].load);
        assert_eq!(
            r.steps[1].offset, 0,
            "`state` is the first member of `struct socket`"
        );
        assert_eq!(
            r.target.class,
            TypeClass::Enum {
                bytes: 4,
                signed: false
            }
        );
        let values = btf
            .enumerators(r.target.id)
            .expect("socket_state is an enum");
        assert!(
            values.contains(&("SS_CONNECTED".to_owned(), 3)),
            "{values:?}"
        );
        assert!(
            values.contains(&("SS_UNCONNECTED".to_owned(), 1)),
            "{values:?}"
        );

        let r = show("do_sys_openat2", "how->flags");
        assert_eq!(r.arg_index, 2);
        // struct open_how { __u64 flags; __u64 mode; __u64 resolve; } (uapi).
        assert_eq!(r.steps, [step(false, 0)]);
        assert_eq!(
            r.target.class,
            TypeClass::Int {
                bytes: 8,
                signed: false
            }
        );
        assert_eq!(
            show("do_sys_openat2", "how->resolve").steps,
            [step(false, 16)]
        );

        // `char comm[TASK_COMM_LEN]`, 16 since Linux 2.6.
        let r = show("wake_up_process", "p->comm");
        assert_eq!(r.steps.len(), 1);
        assert_eq!(
            r.target.class,
            TypeClass::Array {
                elem_bytes: 1,
                len: 16,
                elem_is_char: true
            }
        );
    }

    #[test]
    fn misspelt_member_on_this_machines_kernel() {
        let btf = host();
        let e = resolve_str(&btf, "vfs_read", "file->f_pathh").unwrap_err();
        let msg = e.to_string();
        println!("{msg}");
        assert!(msg.starts_with("in `vfs_read`, `file->f_pathh`: `struct file` has no member `f_pathh` (did you mean `f_path`?); its members are: "), "{msg}");
        for real in ["`f_mode`", "`f_path`", "`f_inode`", "`f_flags`"] {
            assert!(msg.contains(real), "{real} missing from {msg}");
        }
        let e = resolve_str(&btf, "tcp_sendmsg", "sk->__sk_common.skc_dportt").unwrap_err();
        let msg = e.to_string();
        println!("{msg}");
        assert!(
            msg.contains(
                "`struct sock_common` has no member `skc_dportt` (did you mean `skc_dport`?)"
            ),
            "{msg}"
        );
        assert!(msg.contains("`skc_num`"), "{msg}");
        // `unsigned char skc_reuse:4;`
        let e = resolve_str(&btf, "tcp_sendmsg", "sk->__sk_common.skc_reuse").unwrap_err();
        println!("{e}");
        assert!(
            matches!(e.problem(), Some(SegmentProblem::Bitfield { bits: 4, .. })),
            "{e}"
        );
        let e = resolve_str(&btf, "vfs_read", "count->x").unwrap_err();
        assert!(matches!(
            e.problem(),
            Some(SegmentProblem::ArrowOnNonPointer { use_dot: false, .. })
        ));
    }

    #[test]
    fn member_offsets_on_this_machines_kernel() {
        let btf = crate::kernel::host_btf();
        let fsbase = member_offset(&btf, "struct task_struct", &["thread", "fsbase"]).unwrap();
        let thread = member_offset(&btf, "struct task_struct", &["thread"]).unwrap();
        assert!(
            fsbase >= thread && fsbase < thread + 256,
            "{thread} {fsbase}"
        );
        assert_eq!(
            member_offset(&btf, "struct task_struct", &["thread", "no_such"]),
            None
        );
        assert_eq!(member_offset(&btf, "struct no_such_struct", &["x"]), None);
    }
}
