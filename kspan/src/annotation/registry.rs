// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Every probe linked into the program, for `KspanBuilder::all_probes`.
//!
//! `#[kernel_span]` adds a reference to its probe to a linker section
//! (linkme's distributed slice), so the set is complete without any start-up
//! code or global registration call.

use super::probe::Probe;

/// The probes of the program.
#[linkme::distributed_slice]
pub static PROBES: [&'static Probe];
