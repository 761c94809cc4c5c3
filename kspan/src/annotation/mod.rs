// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The contract between the `#[kernel_span]` macro and the runtime: what a
//! probe asks for ([`Probe`], [`ProbeSpec`], [`Mode`]), the values its
//! handler receives ([`Captured`], [`value`]) and the span it may change
//! ([`KernelSpan`]). Everything else in the crate reads these; they read
//! nothing of the crate.

mod hook;
pub mod kernel_span;
mod probe;
mod registry;
mod value;

pub use hook::{Attachment, Hook, Mechanism};
pub(crate) use kernel_span::KernelSpanParts;
pub use kernel_span::{attributes, KernelSpan};
pub use kspan_dsl::{Mode, UnknownMode};
pub use probe::{Captured, FilterSpec, LenSource, ParamSpec, Probe, ProbeSpec};
pub use registry::PROBES;
pub use value::{Capture, FromCapture, KernelValue, Value, ValueKind, ValueType};
