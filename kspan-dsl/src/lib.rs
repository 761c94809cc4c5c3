// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The language of `#[kernel_span]` annotations: the attach modes
//! (`mode = "fexit"`) and the field paths (`path = "file->f_path.dentry"`),
//! defined once for the macro and the runtime.
//!
//! # Why this crate exists
//!
//! The same annotation is read twice. `kspan-macros` reads it at compile
//! time, so that a typo is a compile error at the user's token. `kspan` reads
//! it again when it attaches: the generated spec names a [`Mode`], and each
//! field path is parsed again and resolved against the running kernel's BTF.
//! A proc-macro crate cannot depend on `kspan`, which depends on it, so the
//! definitions live here, below both.
//!
//! One definition, no copies: the macro must reject exactly what the runtime
//! would reject, with the same words, and two hand-kept copies of a parser
//! drift apart. Whatever both sides need to agree on about the *text* belongs
//! here; what needs a kernel (BTF, the BPF encoding of a mode, which mechanism
//! `auto` picks) stays in `kspan`.
//!
//! # What is here
//!
//! * [`Mode`]: the attach mode a probe asks for, with its names
//!   ([`Mode::as_str`], [`Mode::ANNOTATION_MODES`]) and [`UnknownMode`].
//! * [`FieldPath`]: the syntax of a field path, checked by
//!   [`parse_field_path`] into [`Segment`]s, or a [`PathSyntaxError`] that
//!   says what is wrong and at which byte.
//! * [`Predicate`] and durations: the in-kernel filters
//!   (`filter = "count >= 65536"`, `min_duration = "1ms"`), checked by
//!   [`parse_predicate`] and [`parse_duration`].
//! * Alternatives (`"do_unlinkat" | "filename_unlinkat"`): the names a
//!   probe may trace, checked by [`check_alternatives`] ([`AlternativeError`]).
//!
//! The crate uses only `std`, has no dependencies, and checks text alone: no
//! I/O, no kernel, so every rule is unit-tested here.

mod alternatives;
mod fieldpath;
mod filter;
mod mode;

pub use alternatives::{check_alternative, check_alternatives, is_pattern, AlternativeError};
pub use fieldpath::{
    parse as parse_field_path, Access, FieldPath, PathSyntaxError, Segment, MAX_SEGMENTS,
};
pub use filter::{
    parse_duration, parse_predicate, CmpOp, Comparison, FilterSyntaxError, Predicate, MAX_CLAUSES,
};
pub use mode::{Mode, UnknownMode};
