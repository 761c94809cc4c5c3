// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The kernel half of kspan.
//!
//! `src/bpf/kspan.bpf.c` holds one generic fentry program and one generic fexit
//! program. They are not specialised per traced function in source: the runtime
//! opens the compiled object once per function, sets the attach target, writes
//! the function's [`types::kspan_config`] into `.rodata` and shares the three
//! maps of the first copy with every other copy. The verifier then sees the
//! settings as constants, which keeps the programs small, and the record layout
//! (`src/bpf/kspan.h`) exists once: the types below are generated from the
//! object's BTF by libbpf-cargo's skeleton builder.

#[allow(
    missing_docs,
    clippy::all,
    non_camel_case_types,
    unsafe_op_in_unsafe_fn
)]
#[allow(clippy::undocumented_unsafe_blocks)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/kspan.skel.rs"));
}

pub use skel::types;

/// The compiled BPF object (ELF), opened once per traced function.
pub const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kspan.bpf.o"));

/// Names of the programs and maps inside [`OBJECT`].
pub mod names {
    /// The entry program.
    pub const FENTRY_PROG: &str = "kspan_fentry";
    /// The exit program.
    pub const FEXIT_PROG: &str = "kspan_fexit";
    /// The ring buffer of finished spans.
    pub const EVENTS_MAP: &str = "kspan_events";
    /// The per-task stacks of open spans.
    pub const STACKS_MAP: &str = "kspan_stacks";
    /// The per-CPU drop counters.
    pub const COUNTERS_MAP: &str = "kspan_counters";
    /// The read-only settings section.
    pub const RODATA_MAP_SUFFIX: &str = ".rodata";
}

/// Largest number of arguments captured per call (`KSPAN_MAX_ARGS`).
pub const MAX_ARGS: usize = 6;
/// Deepest nesting of open kernel spans per task (`KSPAN_MAX_DEPTH`).
pub const MAX_DEPTH: usize = 16;

/// Record flag: the record carries a return value.
pub const REC_HAS_RET: u16 = 1 << 0;
/// Record flag: an instant (fentry mode) record.
pub const REC_INSTANT: u16 = 1 << 1;

/// Number of per-CPU counters (`KSPAN_CTR_COUNT`).
pub const COUNTER_COUNT: usize = 6;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_layout_matches_the_header() {
        // 16 + 8 * 4 + 8 * MAX_ARGS + 8 + 4 * 3 + 2 * 2
        assert_eq!(
            std::mem::size_of::<types::kspan_record>(),
            16 + 32 + 48 + 8 + 12 + 4
        );
        assert_eq!(std::mem::size_of::<types::kspan_config>(), 16);
        let rec = types::kspan_record::default();
        assert_eq!(rec.args.len(), MAX_ARGS);
    }

    #[test]
    fn object_is_bpf_elf() {
        assert_eq!(&OBJECT[..4], b"\x7fELF");
        // e_machine 247 = EM_BPF
        assert_eq!(u16::from_le_bytes([OBJECT[18], OBJECT[19]]), 247);
    }
}
