// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The interface with the kernel's BPF: the settings programs read
//! ([`config`]), kspan's programs by role ([`program`]), loading kspan's
//! object ([`object`]), the maps its programs share ([`maps`]), those of
//! registered thread contexts ([`context_records`]), the counters and the
//! totals by span user space reads from memory (`counters`,
//! [`span_table`]), further copies of its
//! programs without libbpf ([`copies`]), the raw attach system calls
//! ([`sys`]), the links that hold programs attached, whichever source
//! attached them ([`links`]), what the kernel offers ([`KernelCapabilities`]) and what its
//! symbol table says of function names ([`kernel_symbols`]).
//! It plans nothing and attaches nothing itself.

pub(crate) mod config;
pub(crate) mod context_records;
pub(crate) mod copies;
pub(crate) mod counters;
mod error;
mod features;
mod kallsyms;
pub(crate) mod links;
pub(crate) mod maps;
pub(crate) mod object;
pub(crate) mod program;
mod skeleton;
pub(crate) mod span_table;
pub(crate) mod sys;

pub use config::{Orphans, DEFAULT_RING_BUFFER_BYTES};
pub(crate) use error::{errno_of, perf_event_refused, refusal_reason};
pub use error::{LoadError, MapError};
pub use features::{Feature, KernelCapabilities, ProgramFeatures};
pub(crate) use kallsyms::{kernel_symbols, KernelSymbol};
