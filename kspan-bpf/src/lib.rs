// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The kernel half of kspan.
//!
//! `src/bpf/probes.bpf.c` holds one generic program per hook and direction
//! (fentry/fexit, kprobe/kretprobe and their kprobe.multi forms, the syscall
//! enter/exit tracepoints). None is specialised per traced function in
//! source: the runtime writes a function's [`types::kspan_config`] into
//! `.rodata` before loading, so the verifier sees the settings as constants,
//! and every loaded copy shares the ring buffer, stacks, counters and switch
//! of the first. `src/bpf/account.bpf.c` and `src/bpf/causes.bpf.c` hold
//! the scheduler's account and its causes, over the core both sources
//! share (`src/bpf/core.bpf.h`): files of one compilation unit,
//! `src/bpf/kspan.bpf.c`, which includes them. The record layout
//! (`src/bpf/kspan.h`) exists once: the types and the skeleton
//! ([`KspanSkelBuilder`]) below are generated from the object's BTF by
//! libbpf-cargo, when `cargo xtask bpf` compiles the object, and shipped
//! beside it (`src/bpf/kspan.<arch>.skel.rs`), so that a build needs
//! neither clang nor libbpf-cargo.
//!
//! The objects are compiled by `cargo xtask bpf`, one per target
//! architecture (`-D__TARGET_ARCH_x86`, `-D__TARGET_ARCH_arm64`: the
//! kprobe register layout differs), and shipped as
//! `src/bpf/kspan.<arch>.bpf.o` (the test command fails when one is older
//! than its sources); the build script picks the target's, so that building
//! a crate that depends on kspan needs no clang.

#[allow(
    missing_docs,
    clippy::all,
    non_camel_case_types,
    unsafe_op_in_unsafe_fn
)]
#[allow(clippy::undocumented_unsafe_blocks)]
mod skel {
    include!(env!("KSPAN_BPF_SKELETON"));
}

pub use skel::{types, KspanSkel, KspanSkelBuilder, OpenKspanProgs, OpenKspanSkel};

/// The compiled BPF object (ELF) for the target architecture, built from
/// `bpf/kspan.bpf.c` (and the files it includes) by `cargo xtask bpf` and
/// shipped with the crate.
pub const OBJECT: &[u8] = include_bytes!(env!("KSPAN_BPF_OBJECT"));

/// The same compiled for kernels without `bpf_loop` or atomics that
/// fetch (before Linux 5.17 and 5.12: their verifier refuses a program
/// holding either, reachable or not): bounded loops, and loads and stores
/// in place of those atomics. Its maps, programs and globals are
/// [`OBJECT`]'s (`cargo xtask bpf` checks that their skeletons are one), so
/// [`KspanSkelBuilder`] opens either ([`use_legacy_object`]).
pub const LEGACY_OBJECT: &[u8] = include_bytes!(env!("KSPAN_BPF_LEGACY_OBJECT"));

static LEGACY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes [`KspanSkelBuilder`] open [`LEGACY_OBJECT`] (`true`) or
/// [`OBJECT`] from now on: one kernel runs the process, so the runtime
/// chooses once, from its probe of the kernel, before anything is opened.
pub fn use_legacy_object(legacy: bool) {
    LEGACY.store(legacy, std::sync::atomic::Ordering::Relaxed);
}

/// The object the skeleton opens (see [`use_legacy_object`]).
pub fn object_for_kernel() -> &'static [u8] {
    if LEGACY.load(std::sync::atomic::Ordering::Relaxed) {
        LEGACY_OBJECT
    } else {
        OBJECT
    }
}

/// The architecture [`OBJECT`] was compiled for, by libbpf's
/// `__TARGET_ARCH_` name (`x86`, `arm64`).
pub const ARCH: &str = env!("KSPAN_BPF_ARCH");

/// Names of the programs and maps inside [`OBJECT`].
pub mod names {
    /// The entry program.
    pub const FENTRY_PROG: &str = "kspan_fentry";
    /// The exit program.
    pub const FEXIT_PROG: &str = "kspan_fexit";
    /// The kprobe entry program.
    pub const KPROBE_PROG: &str = "kspan_kprobe";
    /// The kretprobe exit program.
    pub const KRETPROBE_PROG: &str = "kspan_kretprobe";
    /// The kprobe entry program for kprobe.multi links.
    pub const KPROBE_MULTI_PROG: &str = "kspan_kprobe_multi";
    /// The kretprobe exit program for kprobe.multi links.
    pub const KRETPROBE_MULTI_PROG: &str = "kspan_kretprobe_multi";
    /// The syscall enter tracepoint program.
    pub const SYS_ENTER_PROG: &str = "kspan_sys_enter";
    /// The syscall exit tracepoint program.
    pub const SYS_EXIT_PROG: &str = "kspan_sys_exit";
    /// The ring buffer of finished spans.
    pub const EVENTS_MAP: &str = "kspan_events";
    /// The per-task stacks of open spans.
    pub const STACKS_MAP: &str = "kspan_stacks";
    /// The per-CPU drop counters.
    pub const COUNTERS_MAP: &str = "kspan_counters";
    /// The on/off switch (0 until the consumer runs).
    pub const CONTROL_MAP: &str = "kspan_control";
    /// Each thread's registered context record (task storage).
    pub const CTX_RECORDS_MAP: &str = "kspan_ctx_records";
    /// The count of doubts that every context record is registered.
    pub const CTX_PENDING_MAP: &str = "kspan_ctx_pending";
    /// The scheduler's totals by application span.
    pub const SCHED_SPANS_MAP: &str = "kspan_sched_spans";
    /// Each thread's open off-CPU interval of the scheduler's account.
    pub const SCHED_OPEN_MAP: &str = "kspan_sched_open";
    /// The per-probe, per-CPU counters of calls not made into spans.
    pub const PROBE_COUNTERS_MAP: &str = "kspan_probe_counters";
    /// The per-probe rate-limit slots.
    pub const RATES_MAP: &str = "kspan_rates";
    /// The totals of calls not made into spans, by application span.
    pub const SUMS_MAP: &str = "kspan_sums";
    /// The read-only settings section.
    pub const RODATA_MAP_SUFFIX: &str = ".rodata";
}

/// Every `#define KSPAN_*` number and `KSPAN_*` enumerator of `kspan.h`,
/// generated by the build script.
pub mod consts {
    include!(concat!(env!("OUT_DIR"), "/kspan_consts.rs"));
}

/// Largest number of arguments captured per call.
pub const MAX_ARGS: usize = consts::KSPAN_MAX_ARGS as usize;
/// Deepest nesting of open kernel spans per task.
pub const MAX_DEPTH: usize = consts::KSPAN_MAX_DEPTH as usize;
/// Values captured per call.
pub const MAX_CAPS: usize = consts::KSPAN_MAX_CAPS as usize;
/// Steps of a field path.
pub const MAX_STEPS: usize = consts::KSPAN_MAX_STEPS as usize;
/// Bytes of strings and buffers per record.
pub const MAX_DATA: usize = consts::KSPAN_MAX_DATA as usize;
/// Record flag: the record carries a return value.
pub const REC_HAS_RET: u32 = consts::KSPAN_REC_HAS_RET as u32;
/// Record flag: the parent may still be refused; hold the span until known.
pub const REC_PARENT_PENDING: u32 = consts::KSPAN_REC_PARENT_PENDING as u32;
/// Record flag: not a span, but a refused call's parent for its children.
pub const REC_REPARENT: u32 = consts::KSPAN_REC_REPARENT as u32;
/// Comparisons of a filter.
pub const MAX_CLAUSES: usize = consts::KSPAN_MAX_CLAUSES as usize;
/// Number of per-CPU counters.
pub const COUNTER_COUNT: usize = consts::KSPAN_CTR_COUNT as usize;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_layout_matches_the_header() {
        // 16 + 8 * 4 + 8 + 4 * 3 + 4, then 8 * MAX_CAPS + MAX_CAPS, then
        // descendants_dropped and its pad
        assert_eq!(
            std::mem::size_of::<types::kspan_record>(),
            16 + 32 + 8 + 12 + 4 + 64 + 8 + 8
        );
        // 14 * 4 + 8 + MAX_CAPS * (12 + 8 * MAX_STEPS)
        // then 8 u32s, two u64s, MAX_CLAUSES clauses of 16 bytes,
        // `wait_min_ns`, then the probe counters' stride, the histogram's
        // rows and errno mask and the account's causes switch, then the
        // kernel's feature bits and the function's argument count
        assert_eq!(
            std::mem::size_of::<types::kspan_config>(),
            64 + 8 * 76 + 32 + 16 + 16 * 4 + 8 + 8 + 16 + 8
        );
        // An errno row: its key, then the row.
        assert_eq!(
            std::mem::size_of::<types::kspan_hist_errno_slot>(),
            8 + 8 * (consts::KSPAN_HIST_BUCKETS as usize + 1)
        );
        // The tables' slots: the span id and the tag, then the totals.
        assert_eq!(std::mem::size_of::<types::kspan_sum_slot>(), 16 + 24);
        // The record, then the wake-up (8), state and cause (8), the
        // waker's kind, pid and tid (12, then 4 of padding), comm (16),
        // trace id (16) and span id (8), then the stack and the waker's
        // stack, each with its count, then the lock's address (8) and
        // flags (4, then 4 of padding), then the request (6 * 8, then its
        // time held (8) and the cgroup that held it: its id (8) and name),
        // then the waker's last wait (8 + 16 + 8 + 8 + 4 + 4), then what
        // the waker did over the wait.
        assert_eq!(
            std::mem::size_of::<types::kspan_wait_record>(),
            std::mem::size_of::<types::kspan_record>()
                + 8
                + 8
                + 12
                + 4
                + 16
                + 16
                + 8
                + 8 * (1 + consts::KSPAN_WAIT_FRAMES as usize)
                + 8 * (1 + consts::KSPAN_WAKER_FRAMES as usize)
                + 16
                + 48
                + 8
                + 8
                + consts::KSPAN_CGROUP_NAME_BYTES as usize
                + 48
                + std::mem::size_of::<types::kspan_waker_during>()
        );
        assert_eq!(
            types::kspan_config::default().caps[0].steps.len(),
            MAX_STEPS
        );
        let rec = types::kspan_record::default();
        assert_eq!(rec.vals.len(), MAX_CAPS);
    }

    #[test]
    fn header_constants_are_generated() {
        assert_eq!(consts::KSPAN_MAX_ARGS, 6);
        assert_eq!(consts::KSPAN_CAP_UBYTES, 5);
        assert_eq!(consts::KSPAN_LEN_RET, 2);
        assert_eq!(consts::KSPAN_CTR_EMITTED, 5);
        assert_eq!(consts::KSPAN_CAPF_FAULT, 1);
    }

    #[test]
    fn rodata_holds_only_the_config() {
        // The runtime writes `kspan_config` at offset 0 of .rodata: any other
        // read-only variable would shift or share it.
        let open = libbpf_rs::ObjectBuilder::default()
            .open_memory(OBJECT)
            .expect("the object parses");
        let rodata: Vec<usize> = open
            .maps()
            .filter(|m| {
                m.name()
                    .to_string_lossy()
                    .ends_with(names::RODATA_MAP_SUFFIX)
            })
            .map(|m| m.initial_value().map_or(0, <[u8]>::len))
            .collect();
        assert_eq!(rodata, [std::mem::size_of::<types::kspan_config>()]);
        let progs: Vec<String> = open
            .progs()
            .map(|p| p.name().to_string_lossy().into_owned())
            .collect();
        for name in [
            names::FENTRY_PROG,
            names::FEXIT_PROG,
            names::KPROBE_PROG,
            names::KRETPROBE_PROG,
        ] {
            assert!(progs.iter().any(|p| p == name), "{name} in {progs:?}");
        }
    }

    #[test]
    fn object_is_bpf_elf() {
        assert_eq!(&OBJECT[..4], b"\x7fELF");
        // e_machine 247 = EM_BPF
        assert_eq!(u16::from_le_bytes([OBJECT[18], OBJECT[19]]), 247);
    }
}
