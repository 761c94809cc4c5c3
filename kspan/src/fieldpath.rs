// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Field paths such as `file->f_path.dentry->d_name.name`: parsed, then
//! resolved against the kernel's BTF into the loads and offsets the BPF
//! program performs.
//!
//! # Why it is shaped this way
//!
//! * **Syntax and meaning are separate.** [`parse`] checks the text alone and
//!   uses nothing but `std`: the `#[kernel_span]` macro must reject a
//!   malformed path at compile time, and a proc-macro crate cannot depend on
//!   kspan, so the "syntax" half of this file (down to the marker that ends
//!   it) is self-contained and can be copied verbatim. [`resolve`] needs the
//!   running kernel's BTF and runs when kspan starts.
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
//!   found as C finds them. Whitespace is rejected rather than trimmed, so a
//!   byte offset in an error always points into the text as written.

use std::fmt;

// ---------------------------------------------------------------------------
// Syntax. Uses only `std` (with `use std::fmt;`); self-contained so that the
// proc-macro crate can copy this section verbatim.
// ---------------------------------------------------------------------------

/// Most member segments (`->m` or `.m`) a path may have.
pub const MAX_SEGMENTS: usize = 8;

/// How a member is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `->member`: through a pointer to a struct or union.
    Arrow,
    /// `.member`: inside a struct or union.
    Dot,
}

impl Access {
    /// The operator as written: `->` or `.`.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Arrow => "->",
            Access::Dot => ".",
        }
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `->member` or `.member` of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// `->` or `.`.
    pub access: Access,
    /// The member's name (a C identifier).
    pub member: String,
    /// Byte offset of the operator in the path's text.
    pub at: usize,
}

/// A syntactically valid field path: a parameter name and 1 to
/// [`MAX_SEGMENTS`] member segments. Only [`parse`] makes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    text: String,
    parameter: String,
    segments: Vec<Segment>,
}

impl FieldPath {
    /// The parameter the path starts from.
    pub fn parameter(&self) -> &str {
        &self.parameter
    }

    /// The member segments, in order (at least one).
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The path up to and including segment `index` (`file->f_path` for
    /// segment 0 of `file->f_path.dentry`); the whole path for an index past
    /// the end.
    pub fn prefix(&self, index: usize) -> &str {
        let end = self
            .segments
            .get(index + 1)
            .map_or(self.text.len(), |s| s.at);
        self.text.get(..end).unwrap_or(&self.text)
    }

    /// The path before segment `index` (`file` for segment 0).
    pub fn before(&self, index: usize) -> &str {
        let end = self.segments.get(index).map_or(self.text.len(), |s| s.at);
        self.text.get(..end).unwrap_or(&self.text)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for FieldPath {
    type Err = PathSyntaxError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

/// Why a field path is not well formed. Byte offsets count from the start of
/// the text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathSyntaxError {
    /// The text is empty.
    Empty,
    /// A whitespace character (paths are written without spaces).
    Whitespace {
        /// Where.
        at: usize,
    },
    /// The text does not start with a parameter name.
    ExpectedParameter {
        /// Where (0).
        at: usize,
        /// What is there instead.
        found: char,
    },
    /// A name starts with a digit.
    NotIdentifier {
        /// Where the name starts.
        at: usize,
        /// The name as written.
        text: String,
    },
    /// After a name comes neither `->` nor `.` (or nothing, after the
    /// parameter).
    ExpectedAccess {
        /// Where.
        at: usize,
        /// The name before.
        after: String,
        /// What is there instead; `None` at the end of the text.
        found: Option<char>,
    },
    /// `->` or `.` is not followed by a member name.
    EmptyMember {
        /// Where the name should start.
        at: usize,
        /// The operator before.
        access: Access,
        /// What is there instead; `None` at the end of the text.
        found: Option<char>,
    },
    /// More than [`MAX_SEGMENTS`] segments.
    TooDeep {
        /// Where the first segment too many starts.
        at: usize,
    },
}

impl fmt::Display for PathSyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathSyntaxError::Empty => f.write_str(
                "the field path is empty: write a parameter name followed by `->member` or \
                 `.member`",
            ),
            PathSyntaxError::Whitespace { at } => write!(
                f,
                "whitespace at byte {at}: write the field path without spaces"
            ),
            PathSyntaxError::ExpectedParameter { at, found } => write!(
                f,
                "expected a parameter name at byte {at}, found `{found}`"
            ),
            PathSyntaxError::NotIdentifier { at, text } => write!(
                f,
                "`{text}` is not an identifier (at byte {at}): a name starts with a letter or `_`"
            ),
            PathSyntaxError::ExpectedAccess { at, after, found } => {
                write!(f, "expected `->` or `.` after `{after}` at byte {at}")?;
                match found {
                    Some(c) => write!(f, ", found `{c}`"),
                    None => f.write_str(", found the end of the path"),
                }
            }
            PathSyntaxError::EmptyMember {
                at,
                access,
                found: None,
            } => write!(f, "empty member name after `{access}` at byte {at}"),
            PathSyntaxError::EmptyMember {
                at,
                access,
                found: Some(c),
            } => write!(
                f,
                "empty member name after `{access}` at byte {at}: found `{c}`, expected a name"
            ),
            PathSyntaxError::TooDeep { at } => write!(
                f,
                "the field path has more than {MAX_SEGMENTS} member segments (segment {} starts \
                 at byte {at})",
                MAX_SEGMENTS + 1
            ),
        }
    }
}

impl std::error::Error for PathSyntaxError {}

/// Parses a field path: a C identifier (the parameter), then 1 to
/// [`MAX_SEGMENTS`] segments `->member` or `.member`, with no whitespace
/// anywhere. Identifiers are ASCII: a letter or `_`, then letters, digits or
/// `_`. Only the syntax is checked; [`resolve`] checks the names.
pub fn parse(text: &str) -> Result<FieldPath, PathSyntaxError> {
    fn is_ident_byte(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b == b'_'
    }
    // Everything before `at` is ASCII, so `at` is a character boundary.
    let char_at = |at: usize| text.get(at..).and_then(|t| t.chars().next());
    let whitespace = |at: usize| match char_at(at) {
        Some(c) if c.is_whitespace() => Err(PathSyntaxError::Whitespace { at }),
        _ => Ok(()),
    };
    // The identifier starting at `at` (maybe empty), checked not to start
    // with a digit.
    let ident = |at: usize| -> Result<&str, PathSyntaxError> {
        let len = text
            .as_bytes()
            .get(at..)
            .unwrap_or_default()
            .iter()
            .take_while(|&&b| is_ident_byte(b))
            .count();
        let name = text.get(at..at + len).unwrap_or_default();
        if name.as_bytes().first().is_some_and(u8::is_ascii_digit) {
            return Err(PathSyntaxError::NotIdentifier {
                at,
                text: name.to_owned(),
            });
        }
        Ok(name)
    };

    if text.is_empty() {
        return Err(PathSyntaxError::Empty);
    }
    whitespace(0)?;
    let parameter = ident(0)?;
    if parameter.is_empty() {
        return Err(PathSyntaxError::ExpectedParameter {
            at: 0,
            found: char_at(0).unwrap_or_default(),
        });
    }
    let mut pos = parameter.len();
    let mut last = parameter;
    let mut segments = Vec::new();
    loop {
        let rest = text.as_bytes().get(pos..).unwrap_or_default();
        let (access, op_len) = match rest {
            [] if !segments.is_empty() => break,
            [b'-', b'>', ..] => (Access::Arrow, 2),
            [b'.', ..] => (Access::Dot, 1),
            _ => {
                whitespace(pos)?;
                return Err(PathSyntaxError::ExpectedAccess {
                    at: pos,
                    after: last.to_owned(),
                    found: char_at(pos),
                });
            }
        };
        if segments.len() == MAX_SEGMENTS {
            return Err(PathSyntaxError::TooDeep { at: pos });
        }
        let at = pos;
        pos += op_len;
        whitespace(pos)?;
        let member = ident(pos)?;
        if member.is_empty() {
            return Err(PathSyntaxError::EmptyMember {
                at: pos,
                access,
                found: char_at(pos),
            });
        }
        pos += member.len();
        last = member;
        segments.push(Segment {
            access,
            member: member.to_owned(),
            at,
        });
    }
    Ok(FieldPath {
        text: text.to_owned(),
        parameter: parameter.to_owned(),
        segments,
    })
}

// ---------------------------------------------------------------------------
// End of the syntax section. Resolution against BTF follows.
// ---------------------------------------------------------------------------

use crate::btf::{Btf, Composite, KernelType, Member};

/// How deep anonymous structs and unions are searched for a member (real
/// kernels nest three or four).
const MAX_ANONYMOUS_DEPTH: u32 = 16;

/// Most members visited while searching or listing one struct's members,
/// anonymous ones included: bounds the work on a malformed BTF.
const MAX_VISITS: usize = 100_000;

/// Most member names listed in an [`SegmentProblem::UnknownMember`] error.
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
        /// What is wrong.
        problem: SegmentProblem,
    },
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
        /// Whether `base` is a struct or union, so `.` would work.
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
    #[error(
        "`{member}` is reached with `.` but `{base}` is `{base_type}`, not a struct or union"
    )]
    DotOnNonStruct {
        /// The member.
        member: String,
        /// The path before the segment.
        base: String,
        /// Its type.
        base_type: String,
    },
    /// `.` directly on a struct parameter passed by value.
    #[error(
        "`{member}` is reached with `.` on parameter `{base}`, a `{base_type}` passed by \
         value; members of by-value struct parameters are not supported"
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
pub fn resolve(btf: &Btf, function: &str, path: &FieldPath) -> Result<ResolvedPath, FieldPathError> {
    if let Some(extra) = path.segments().get(MAX_SEGMENTS) {
        return Err(PathSyntaxError::TooDeep { at: extra.at }.into());
    }
    let Some(signature) = btf.function(function) else {
        return Err(FieldPathError::UnknownFunction {
            function: function.to_owned(),
        });
    };
    let parameter = path.parameter();
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

    let mut ty = signature.params[arg_index].1.id;
    // Whether `cur` is the address of a value of type `ty` (true after the
    // first segment) or the value itself (the register, before it).
    let mut in_memory = false;
    let mut steps: Vec<Step> = Vec::new();
    for (i, segment) in path.segments().iter().enumerate() {
        let member = segment.member.as_str();
        let fail = |problem: SegmentProblem| FieldPathError::Segment {
            function: function.to_owned(),
            parameter: parameter.to_owned(),
            at: path.prefix(i).to_owned(),
            problem,
        };
        let base = || path.before(i).to_owned();
        let base_type = || btf.kernel_type(ty).c_name;
        let container_id = match segment.access {
            Access::Arrow => {
                let Some(pointee) = btf.pointee(ty) else {
                    return Err(fail(SegmentProblem::ArrowOnNonPointer {
                        member: member.to_owned(),
                        base: base(),
                        base_type: base_type(),
                        use_dot: btf.composite(ty).is_some(),
                    }));
                };
                if btf.composite(pointee).is_none() && !btf.is_declaration_only(pointee) {
                    return Err(fail(SegmentProblem::NotStructPointer {
                        member: member.to_owned(),
                        base: base(),
                        base_type: base_type(),
                    }));
                }
                if btf.kernel_type(ty).is_user_pointer {
                    return Err(fail(SegmentProblem::UserPointer {
                        member: member.to_owned(),
                        base: base(),
                        base_type: base_type(),
                    }));
                }
                // From the register the pointer is already in `cur`; from
                // memory it is loaded from `cur`.
                steps.push(Step {
                    load: in_memory,
                    offset: 0,
                });
                pointee
            }
            Access::Dot => {
                if btf.pointee(ty).is_some() {
                    return Err(fail(SegmentProblem::DotOnPointer {
                        member: member.to_owned(),
                        base: base(),
                        base_type: base_type(),
                    }));
                }
                let is_struct = btf.composite(ty).is_some() || btf.is_declaration_only(ty);
                if !is_struct {
                    return Err(fail(SegmentProblem::DotOnNonStruct {
                        member: member.to_owned(),
                        base: base(),
                        base_type: base_type(),
                    }));
                }
                if !in_memory {
                    return Err(fail(SegmentProblem::ByValueParameter {
                        member: member.to_owned(),
                        base: base(),
                        base_type: base_type(),
                    }));
                }
                ty
            }
        };
        let container_name = || btf.kernel_type(container_id).c_name;
        let Some(container) = btf.composite(container_id) else {
            return Err(fail(SegmentProblem::DeclarationOnly {
                member: member.to_owned(),
                container: container_name(),
            }));
        };
        let mut budget = MAX_VISITS;
        let Some((bit_offset, found)) = find_member(btf, &container, member, 0, &mut budget) else {
            let mut members = Vec::new();
            let mut total = 0;
            let mut budget = MAX_VISITS;
            member_names(btf, &container, 0, &mut budget, &mut members, &mut total);
            return Err(fail(SegmentProblem::UnknownMember {
                member: member.to_owned(),
                container: container_name(),
                suggestion: closest(member, &members),
                more: total - members.len(),
                members,
            }));
        };
        if found.bitfield_bits != 0 || bit_offset % 8 != 0 {
            return Err(fail(SegmentProblem::Bitfield {
                member: member.to_owned(),
                bits: found.bitfield_bits,
                bit_offset,
            }));
        }
        let Some(offset) = u32::try_from(bit_offset / 8).ok() else {
            return Err(fail(SegmentProblem::OffsetOverflow {
                member: member.to_owned(),
            }));
        };
        // A member's offset is added to the last step (there is one: a
        // struct in memory was reached through a `->`).
        match steps.last_mut() {
            Some(last) => {
                let Some(sum) = last.offset.checked_add(offset) else {
                    return Err(fail(SegmentProblem::OffsetOverflow {
                        member: member.to_owned(),
                    }));
                };
                last.offset = sum;
            }
            None => steps.push(Step {
                load: false,
                offset,
            }),
        }
        ty = found.type_id;
        in_memory = true;
    }
    Ok(ResolvedPath {
        arg_index,
        steps,
        target: btf.kernel_type(ty),
    })
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

/// Lists the member names reachable in `container` (anonymous members'
/// members in place), keeping the first [`MAX_LISTED_MEMBERS`] and counting
/// all in `total`.
fn member_names(
    btf: &Btf,
    container: &Composite,
    depth: u32,
    budget: &mut usize,
    names: &mut Vec<String>,
    total: &mut usize,
) {
    for m in &container.members {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        if m.name.is_empty() {
            if depth < MAX_ANONYMOUS_DEPTH {
                if let Some(inner) = btf.composite(m.type_id) {
                    member_names(btf, &inner, depth + 1, budget, names, total);
                }
            }
            continue;
        }
        *total += 1;
        if names.len() < MAX_LISTED_MEMBERS {
            names.push(m.name.clone());
        }
    }
}

/// The candidate closest to `name` by edit distance, if close enough to be
/// a likely typo.
fn closest(name: &str, candidates: &[String]) -> Option<String> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c.clone())
}

/// Levenshtein distance.
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
