// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The settings a loaded program reads from its `.rodata`: `kspan_config`
//! of `kspan.h`, made from a probe's plan, the hook it is attached with and
//! what every probe of a runtime shares.

use kspan_bpf::consts as c;
use kspan_bpf::types::{kspan_capture, kspan_clause, kspan_config};

use crate::annotation::Hook;
use crate::kernel::btf::Btf;
use crate::plan::ProbePlan;

/// What happens to a kernel call made with no application span active on
/// its thread.
///
/// A long-running service does its work inside spans (requests, jobs); what
/// it calls outside them is its runtime's and its libraries' housekeeping,
/// the OTLP exporter's own sends on the runtime's threads among them.
/// Exported as traces of their own, those calls would fill the backend with
/// one-span traces, and the exporter's sends would become spans that the
/// next export sends, a loop that runs while the service idles (the host
/// test `host_export` shows both). So the default is [`Orphans::Drop`],
/// counted in [`Stats::orphans_dropped`](crate::Stats::orphans_dropped);
/// [`Orphans::NewTrace`] is for programs whose every call matters, spans or
/// not (a batch job, a benchmark).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Orphans {
    /// Its span starts a trace of its own.
    NewTrace,
    /// It is not recorded (counted in [`Stats::orphans_dropped`](crate::Stats::orphans_dropped));
    /// the default.
    #[default]
    Drop,
}

/// How the BPF programs read the application's thread context (OTEP 4947)
/// and what they do without one; the same for every probe of a runtime.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ThreadContextSettings {
    /// Byte offset in `task_struct` of the thread pointer the kernel keeps
    /// (`thread.fsbase`, `thread.uw.tp_value`); 0: do not read.
    pub task_tp_offset: u32,
    /// Offset of `otel_thread_ctx_v1` from the thread pointer.
    pub slot_offset: i64,
    /// The process whose threads publish (this one).
    pub tgid: u32,
    /// `enum kspan_orphans`.
    pub orphans: u32,
    /// Record calls under unsampled application spans too.
    pub keep_unsampled: bool,
    /// Spans are children of the application span in the thread context;
    /// without it the context is read only to skip threads that suppress
    /// telemetry (kspan's own).
    pub parent: bool,
    /// The records are registered in the kernel (`kspan_ctx_records`: task
    /// storage with a pinned pointer to each, Linux 6.13+), and programs
    /// read them from there while every one is.
    pub registered_records: bool,
}

impl ThreadContextSettings {
    /// Where the programs find the application's span: the thread pointer
    /// in `task_struct` (from `btf`), the slot from it, this process, and the
    /// policies. With `parent_from_context` off the context is still read,
    /// only to skip the calls of threads that suppress telemetry (kspan's
    /// own). Without either offset (another architecture, a kernel whose BTF
    /// lacks the member) nothing is read and every outermost call follows the
    /// orphan policy.
    pub(crate) fn new(
        btf: &Btf,
        parent_from_context: bool,
        orphans: Orphans,
        keep_unsampled: bool,
    ) -> Self {
        let mut settings = ThreadContextSettings {
            // Without parents from the context every call starts a trace:
            // none is an orphan. The programs drop orphans only of this
            // process, and only where they can read its thread context
            // (`tgid` set below).
            orphans: match orphans {
                Orphans::Drop if parent_from_context => c::KSPAN_ORPHANS_DROP,
                _ => c::KSPAN_ORPHANS_NEW_TRACE,
            } as u32,
            keep_unsampled,
            parent: parent_from_context,
            ..ThreadContextSettings::default()
        };
        let tp = crate::context::thread_pointer::TASK_THREAD_POINTER.and_then(|path| {
            crate::plan::fieldpath::member_offset(btf, "struct task_struct", path)
        });
        match (tp, crate::context::slot_offset()) {
            (Some(tp), Ok(slot)) => {
                settings.task_tp_offset = tp;
                settings.slot_offset = slot;
                settings.tgid = std::process::id();
            }
            (tp, slot) => crate::diagnostics::warn_user!(
                thread_pointer_in_btf = tp.is_some(),
                slot = ?slot.err(),
                "kspan cannot read the thread context: kernel spans start traces of their own, \
                 and the calls of kspan's own threads are traced too"
            ),
        }
        settings
    }
}

/// What every probe of a runtime shares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RuntimeSettings {
    /// The process traced; 0 for every process.
    pub target_tgid: u32,
    /// The thread context and the policies.
    pub thread_context: ThreadContextSettings,
    /// Bytes of the ring buffer (a power of two, at least a page).
    pub ring_buffer_bytes: u32,
    /// Some probe reads a capture at entry: the map that carries those
    /// values to the exit gets its full size.
    pub entry_values: bool,
    /// How many probes (per-probe maps get a slot each).
    pub probes: u32,
    /// Some probe sums its calls onto application spans.
    pub sums: bool,
    /// Histogram sizes: the probe ids with a row pair in `kspan_hist`
    /// (every probe of the runtime when one has a histogram, else 0), and
    /// the keys of `kspan_hist_errno`.
    pub histograms: HistogramSizes,
    /// What the kernel offers each kind of program (probed at start).
    pub kernel: KernelFeatureBits,
}

/// What the kernel offers each kind of kspan program, as its settings say
/// it (`enum kspan_kernel_feature`), and which build of the programs it
/// takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KernelFeatureBits {
    /// Trampolines and BTF tracepoints.
    pub tracing: ProgramKindBits,
    /// kprobes.
    pub kprobe: ProgramKindBits,
    /// Classic tracepoints.
    pub tracepoint: ProgramKindBits,
    /// The programs built for kernels without `bpf_loop` or atomics that
    /// fetch are loaded (`kspan_bpf::LEGACY_OBJECT`).
    pub legacy_programs: bool,
    /// BPF memory is charged to `RLIMIT_MEMLOCK` (before 5.11).
    pub memlock_charged: bool,
}

/// One kind's [`KernelFeatureBits`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ProgramKindBits {
    /// `enum kspan_kernel_feature` bits.
    pub bits: u32,
    /// `bpf_get_attach_cookie` is there: one program serves many
    /// functions.
    pub cookies: bool,
}

impl ProgramKindBits {
    /// Of the probed `features`.
    pub(crate) fn of(features: &super::features::ProgramFeatures) -> Self {
        ProgramKindBits {
            bits: features.bits(),
            cookies: features.attach_cookies.is_available(),
        }
    }
}

impl KernelFeatureBits {
    /// Of the probed `caps`.
    pub(crate) fn of(caps: &super::features::KernelCapabilities) -> Self {
        KernelFeatureBits {
            tracing: ProgramKindBits::of(&caps.tracing_programs),
            kprobe: ProgramKindBits::of(&caps.kprobe_programs),
            tracepoint: ProgramKindBits::of(&caps.tracepoint_programs),
            legacy_programs: caps.legacy_programs().is_some(),
            memlock_charged: !caps.memcg_accounting.is_available(),
        }
    }

    /// The bits of the programs of `hook`.
    pub(crate) fn of_hook(&self, hook: Hook) -> ProgramKindBits {
        match hook {
            Hook::Fentry | Hook::Fexit => self.tracing,
            Hook::Kprobe | Hook::Kretprobe => self.kprobe,
            Hook::Syscall => self.tracepoint,
        }
    }

    /// Every kind has task local storage: the probes' stacks are kept
    /// there, else by thread id for every kind (one place per thread).
    pub(crate) fn task_storage(&self) -> bool {
        [self.tracing, self.kprobe, self.tracepoint]
            .iter()
            .all(|k| k.bits & c::KSPAN_KF_TASK_STORAGE as u32 != 0)
    }
}

/// The sizes of the histogram maps; zeros make them one entry each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HistogramSizes {
    /// Probe ids (rows are `2 * probes` a CPU).
    pub probes: u32,
    /// Slots of the errno table (a power of two).
    pub errno_rows: u32,
}

impl HistogramSizes {
    /// The sizes for a runtime whose probes are `plans` (probe id = index).
    pub(crate) fn of(plans: &[ProbePlan]) -> Self {
        let with = plans.iter().filter(|p| p.probe.spec.histogram).count() as u32;
        if with == 0 {
            return HistogramSizes::default();
        }
        HistogramSizes {
            probes: plans.len() as u32,
            errno_rows: with
                .saturating_mul(c::KSPAN_HIST_ERRNO_ROWS as u32)
                .next_power_of_two(),
        }
    }

    /// Rows a CPU has in `kspan_hist`.
    pub(crate) fn rows(&self) -> u32 {
        self.probes.saturating_mul(2).max(1)
    }
}

/// The ring buffer's size unless the builder says otherwise: 4 MiB holds
/// about 26,000 records of scalars only (152 bytes and the ring's 8-byte
/// header), or 3,500 of the largest (1,176 bytes): a service doing 50,000
/// traced calls a second can run half a second ahead of a stalled consumer
/// before anything is dropped (and counted).
pub const DEFAULT_RING_BUFFER_BYTES: u32 = 4 << 20;

/// Why `bytes` cannot be the ring buffer's size, if it cannot: the kernel
/// wants a power of two and at least a page.
pub(crate) fn ring_buffer_size_problem(bytes: u32) -> Option<String> {
    // SAFETY: sysconf only reads a system setting.
    let page = u32::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    if !bytes.is_power_of_two() || bytes < page {
        return Some(format!(
            "{bytes} bytes: the kernel wants a power of two of at least a page ({page} bytes), \
             e.g. {}",
            bytes
                .max(page)
                .checked_next_power_of_two()
                .unwrap_or(1 << 31)
        ));
    }
    None
}

/// `enum kspan_mode` of `hook`.
fn mode_value(hook: Hook) -> u32 {
    (match hook {
        Hook::Fentry => c::KSPAN_MODE_FENTRY,
        Hook::Fexit => c::KSPAN_MODE_FEXIT,
        Hook::Kprobe => c::KSPAN_MODE_KPROBE,
        Hook::Kretprobe => c::KSPAN_MODE_KRETPROBE,
        Hook::Syscall => c::KSPAN_MODE_SYSCALL,
    }) as u32
}

/// Where a program finds its probe id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProbeId {
    /// A constant: the program serves one function.
    Fixed(u32),
    /// Each link's BPF cookie: the program serves many functions.
    FromCookie,
}

/// Counters a CPU has in `kspan_probe_counters`: every probe's, rounded
/// up to whole 64-byte lines.
pub(crate) fn probe_counters_stride(probes: u32) -> u32 {
    (probes.max(1) * c::KSPAN_PCTR_COUNT as u32).next_multiple_of(8)
}

/// The settings of `plan`'s programs for `hook`.
pub(crate) fn probe_config(
    plan: &ProbePlan,
    hook: Hook,
    probe_id: ProbeId,
    runtime: &RuntimeSettings,
) -> kspan_config {
    let mut caps = [kspan_capture::default(); kspan_bpf::MAX_CAPS];
    for (slot, capture) in caps.iter_mut().zip(&plan.captures) {
        *slot = capture.bpf;
    }
    let context = &runtime.thread_context;
    let filter = &plan.filter;
    let mut clauses = [kspan_clause::default(); kspan_bpf::MAX_CLAUSES];
    for (slot, clause) in clauses.iter_mut().zip(&filter.clauses) {
        *slot = *clause;
    }
    // The return value's width and sign only matter to the programs that
    // ask whether a call failed (`errors_only`, the sums' error count); left
    // 0 elsewhere, so that functions of different return types share
    // programs (one verification, one multi-function link).
    let judges_ret = filter.errors_only || filter.sum;
    kspan_config {
        may_drop: u32::from(filter.may_drop()),
        errors_only: u32::from(filter.errors_only),
        ret_width: if judges_ret { filter.ret_width } else { 0 },
        ret_signed: u32::from(judges_ret && filter.ret_signed),
        nr_clauses: filter.clauses.len() as u32,
        sum: u32::from(filter.sum),
        no_spans: u32::from(filter.no_spans),
        ctx_records: u32::from(context.registered_records),
        min_duration_ns: filter.min_duration_ns,
        rate_interval_ns: filter.rate_interval_ns,
        clauses,
        target_tgid: runtime.target_tgid,
        probe_id: match probe_id {
            ProbeId::Fixed(id) => id,
            ProbeId::FromCookie => 0,
        },
        nr_args: plan.nr_args,
        mode: mode_value(hook),
        nr_caps: plan.captures.len() as u32,
        record_size: plan.record_size,
        probe_id_from_cookie: u32::from(probe_id == ProbeId::FromCookie),
        task_tp_offset: context.task_tp_offset,
        ctx_tgid: context.tgid,
        orphans: context.orphans,
        keep_unsampled: u32::from(context.keep_unsampled),
        ctx_parent: u32::from(context.parent),
        entry_caps: u32::from(plan.captures.iter().any(|c| c.bpf.at_entry != 0)),
        ring_bytes: runtime.ring_buffer_bytes,
        histogram: u32::from(plan.probe.spec.histogram),
        hist_errno_bytes: if plan.probe.spec.histogram {
            errno_bytes(plan)
        } else {
            0
        },
        thread_ctx_offset: context.slot_offset,
        wait_min_ns: 0,
        probe_counters_stride: probe_counters_stride(runtime.probes),
        hist_rows: runtime.histograms.rows(),
        hist_errno_mask: runtime.histograms.errno_rows.max(1) - 1,
        sched_causes: 0,
        kernel_features: kernel_bits(runtime, hook),
        // Read only without bpf_get_func_ret: elsewhere 0, so that
        // functions of other arities share programs (one multi link).
        ret_slot: if hook.is_trampoline()
            && kernel_bits(runtime, hook) & c::KSPAN_KF_FUNC_ARGS as u32 == 0
        {
            ret_slot(plan)
        } else {
            0
        },
        caps,
    }
}

/// Where a trampoline's context holds `plan`'s function's return value
/// (after its arguments), or `KSPAN_NO_RET_SLOT` where it returns void.
fn ret_slot(plan: &ProbePlan) -> u32 {
    match plan.signature.ret.class {
        crate::kernel::btf::TypeClass::Void => c::KSPAN_NO_RET_SLOT as u32,
        _ => plan.signature.params.len() as u32,
    }
}

/// The feature bits of `hook`'s programs: task storage only where every
/// kind has it (the stacks must be in one place for a thread).
pub(crate) fn kernel_bits(runtime: &RuntimeSettings, hook: Hook) -> u32 {
    let bits = runtime.kernel.of_hook(hook).bits;
    if runtime.kernel.task_storage() {
        bits
    } else {
        bits & !(c::KSPAN_KF_TASK_STORAGE as u32)
    }
}

/// Whether a plain program serves `config`: one built without captures,
/// refusals at exit, sums and histograms (`KSPAN_SETTING` of kspan-bpf's
/// `probes.bpf.h`), which reads each of those settings as 0. Every one of
/// them is 0 in `config`, those read only under another included.
pub(crate) fn is_plain(config: &kspan_config) -> bool {
    config.nr_caps == 0
        && config.entry_caps == 0
        && config.may_drop == 0
        && config.errors_only == 0
        && config.nr_clauses == 0
        && config.min_duration_ns == 0
        && config.rate_interval_ns == 0
        && config.no_spans == 0
        && config.sum == 0
        && config.histogram == 0
        && config.hist_errno_bytes == 0
}

/// The width of `plan`'s return value when a negative one is an errno (the
/// histogram's failed calls), else 0.
fn errno_bytes(plan: &ProbePlan) -> u32 {
    match plan.signature.ret.class {
        crate::kernel::btf::TypeClass::Int { bytes, .. } if plan.errno_status => bytes,
        _ => 0,
    }
}

/// The bytes of `config`, as a key: two probes whose programs may be shared
/// have equal keys.
pub(crate) fn config_key(config: &kspan_config) -> Vec<u8> {
    // Formatted, not transmuted: `kspan_config` is plain integers, and its
    // `Debug` prints every field.
    format!("{config:?}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::btf::builder::sample;
    use crate::plan::plan_probe;

    #[kspan::kernel_span("vfs_read")]
    fn count_and_ret(count: usize, ret: isize) {}

    #[kspan::kernel_span("vfs_read", histogram, errno = false)]
    fn histogram_of_reads(ret: isize) {}

    #[kspan::kernel_span("vfs_read", histogram)]
    fn failed_reads_by_errno(ret: isize) {}

    #[kspan::kernel_span("kspan_*", mode = "fexit")]
    fn every_kspan_function() {}

    #[test]
    fn functions_of_different_return_types_share_programs_unless_the_kernel_judges_it() {
        let btf = Btf::parse(&sample()).unwrap();
        // A kernel with bpf_get_func_ret (5.17+): the return value's place
        // is no setting.
        let mut runtime = RuntimeSettings::default();
        runtime.kernel.tracing.bits = c::KSPAN_KF_FUNC_ARGS as u32;
        let set =
            crate::plan::plan_all(&btf, &[&every_kspan_function], &Default::default()).unwrap();
        let keys: std::collections::HashSet<Vec<u8>> = set
            .plans
            .iter()
            .map(|p| config_key(&probe_config(p, Hook::Fexit, ProbeId::FromCookie, &runtime)))
            .collect();
        let returns: std::collections::HashSet<String> = set
            .plans
            .iter()
            .map(|p| p.signature.ret.c_name.clone())
            .collect();
        assert!(returns.len() > 1, "{returns:?}");
        assert_eq!(keys.len(), 1, "one program for {returns:?}");
        // Without it (5.10): after the arguments, none for void.
        let slots: std::collections::HashSet<(String, u32)> = set
            .plans
            .iter()
            .map(|p| {
                let cfg = probe_config(p, Hook::Fexit, ProbeId::Fixed(0), &Default::default());
                (p.signature.ret.c_name.clone(), cfg.ret_slot)
            })
            .collect();
        for (ret, slot) in &slots {
            if ret == "void" {
                assert_eq!(*slot, c::KSPAN_NO_RET_SLOT as u32, "{slots:?}");
            } else {
                assert!(*slot < c::KSPAN_NO_RET_SLOT as u32, "{slots:?}");
            }
        }
        let hist = probe_config(
            &plan_probe(&btf, &failed_reads_by_errno).unwrap(),
            Hook::Fexit,
            ProbeId::Fixed(0),
            &runtime,
        );
        assert_eq!(hist.hist_errno_bytes, 8, "ssize_t: an 8-byte errno return");
    }

    #[test]
    fn settings_of_a_probe() {
        let btf = Btf::parse(&sample()).unwrap();
        let plan = plan_probe(&btf, &count_and_ret).unwrap();
        let runtime = RuntimeSettings {
            target_tgid: 99,
            ..Default::default()
        };
        let cfg = probe_config(&plan, Hook::Fexit, ProbeId::Fixed(3), &runtime);
        assert_eq!(
            (cfg.probe_id, cfg.target_tgid, cfg.nr_caps, cfg.mode),
            (3, 99, 1, 1)
        );
        assert_eq!(cfg.probe_id_from_cookie, 0);
        let shared = probe_config(&plan, Hook::Kretprobe, ProbeId::FromCookie, &runtime);
        assert_eq!(
            (shared.probe_id, shared.probe_id_from_cookie, shared.mode),
            (0, 1, 3)
        );
        assert_ne!(config_key(&cfg), config_key(&shared));
        assert_eq!(
            (cfg.histogram, cfg.hist_errno_bytes, cfg.ret_width),
            (0, 0, 0),
            "no histogram, no errors_only: nothing in the kernel judges the return value"
        );
        let with = probe_config(
            &plan_probe(&btf, &histogram_of_reads).unwrap(),
            Hook::Fexit,
            ProbeId::Fixed(3),
            &runtime,
        );
        assert_eq!((with.histogram, with.hist_errno_bytes), (1, 0));
        assert_ne!(
            config_key(&cfg),
            config_key(&with),
            "a histogram probe shares no program with one without"
        );
    }

    #[test]
    fn plain_programs_serve_only_probes_with_none_of_what_they_leave_out() {
        let btf = Btf::parse(&sample()).unwrap();
        let runtime = RuntimeSettings::default();
        let config = |probe| {
            let plan = plan_probe(&btf, probe).unwrap();
            probe_config(&plan, Hook::Fexit, ProbeId::FromCookie, &runtime)
        };
        let set =
            crate::plan::plan_all(&btf, &[&every_kspan_function], &Default::default()).unwrap();
        let pattern = probe_config(&set.plans[0], Hook::Fexit, ProbeId::FromCookie, &runtime);
        assert!(is_plain(&pattern), "no captures, no filter: {pattern:?}");
        assert!(!is_plain(&config(&count_and_ret)), "a capture");
        assert!(!is_plain(&config(&histogram_of_reads)), "a histogram");
        // Each setting the C source reads through KSPAN_SETTING, set on its
        // own, rules the plain program out.
        let source = [
            include_str!("../../../kspan-bpf/src/bpf/probes.bpf.h"),
            include_str!("../../../kspan-bpf/src/bpf/probes.bpf.c"),
        ]
        .concat();
        let mut fields: Vec<&str> = source
            .split("KSPAN_SETTING(plain, ")
            .skip(1)
            .filter_map(|rest| rest.split(')').next())
            // The macro's own definition.
            .filter(|&field| field != "field")
            .collect();
        fields.sort_unstable();
        fields.dedup();
        assert!(fields.len() >= 4, "{fields:?}");
        for field in fields {
            let mut with = pattern;
            match field {
                "entry_caps" => with.entry_caps = 1,
                "may_drop" => with.may_drop = 1,
                "histogram" => with.histogram = 1,
                "sum" => with.sum = 1,
                other => {
                    panic!(
                        "`KSPAN_SETTING(plain, {other})` in probes.bpf.c: make is_plain check it"
                    )
                }
            }
            assert!(!is_plain(&with), "{field}");
        }
    }
}
