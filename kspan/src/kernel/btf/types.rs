// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What the reader answers with: kernel types reduced to what decides how a
//! value is captured.

/// A kernel function's signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncSignature {
    /// The function's name.
    pub name: String,
    /// Its `FUNC` type id in the kernel's BTF (what a trampoline program is
    /// loaded against); 0 for signatures that do not come from BTF (syscall
    /// tracepoints).
    pub btf_id: u32,
    /// Parameters in order: name and type (the type's BTF id is
    /// [`KernelType::id`], where a field path starts).
    pub params: Vec<(String, KernelType)>,
    /// The return type.
    pub ret: KernelType,
}

/// A kernel type, reduced to what decides how a captured value is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelType {
    /// The type as C spells it, typedef names kept (`size_t`, `struct file *`,
    /// `char[16]`).
    pub c_name: String,
    /// What the type is underneath typedefs and qualifiers.
    pub class: TypeClass,
    /// The BTF type id (as written, typedefs and qualifiers not stripped), for
    /// [`Btf::composite`](super::Btf::composite), [`Btf::pointee`](super::Btf::pointee), [`Btf::enumerators`](super::Btf::enumerators).
    pub id: u32,
    /// A pointer (under typedefs and qualifiers) whose pointee carries the
    /// `user` type tag (`char __user *`): it holds a user-space address. Only
    /// kernels built with clang and pahole 1.23+ have these tags; elsewhere
    /// this is `false` even for user pointers.
    pub is_user_pointer: bool,
    /// A pointer (under typedefs and qualifiers) to a one-byte integer other
    /// than `_Bool` (`char`, `signed char`, `unsigned char`, `u8`, `__u8`,
    /// `s8`, ..., through typedefs and qualifiers): what a C string is.
    pub points_to_char: bool,
}

/// The shape of a kernel type underneath typedefs and qualifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Any pointer; see [`KernelType::points_to_char`] and
    /// [`KernelType::is_user_pointer`] for what it points to.
    Pointer,
    /// A fixed-size array (only as a struct member: arrays are never passed
    /// by value). `elem_bytes * len` always fits in a `u32`; an array whose
    /// size would not is classed [`TypeClass::Aggregate`].
    Array {
        /// Size of one element in bytes (0 if the element has no size, e.g.
        /// an array of arrays of unknown size).
        elem_bytes: u32,
        /// Number of elements (0 for a flexible array member `x[]`).
        len: u32,
        /// Whether the element is a one-byte integer other than `_Bool`, as
        /// for [`KernelType::points_to_char`]: a `char name[16]` buffer.
        elem_is_char: bool,
    },
    /// A floating-point type (never in kernel function signatures in practice).
    Float,
    /// Structs, unions, function types and anything else not capturable
    /// from a register.
    Aggregate,
}

/// A struct or union, as BTF lays it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Composite {
    /// The tag name (`file` for `struct file`); empty if anonymous.
    pub name: String,
    /// A union rather than a struct.
    pub is_union: bool,
    /// Size in bytes.
    pub size: u32,
    /// Members in declaration order.
    pub members: Vec<Member>,
}

/// One member of a struct or union.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The member's name; empty for an anonymous struct or union member,
    /// whose own members are reached as if they were members of the
    /// enclosing type.
    pub name: String,
    /// The member's BTF type id.
    pub type_id: u32,
    /// Offset from the start of the enclosing struct or union, in bits.
    pub bit_offset: u32,
    /// Width in bits if the member is a bitfield, 0 otherwise.
    pub bitfield_bits: u32,
}
