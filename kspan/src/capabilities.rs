// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What the running kernel offers, probed once and cached.
//!
//! Each mechanism is checked without side effects on the traced system:
//! files that exist exactly when a kernel feature is built in (the kprobe PMU,
//! the fprobe functions behind kprobe.multi, tracefs), the capability set,
//! and for trampolines the real thing short of attaching: kspan's own fentry
//! program is loaded against a function and unloaded, so the kernel's errno
//! (EPERM on a locked-down kernel) is what is reported. `auto` mode and
//! `kspan doctor` read the same record.

use std::path::Path;
use std::sync::OnceLock;

use libbpf_rs::ObjectBuilder;

use crate::btf::Btf;
use crate::runtime::{errno_name, errno_of, KERNEL_BTF};

/// Whether a mechanism is usable, and if not why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Feature {
    /// Usable.
    Available,
    /// Not usable: why, with the kernel's errno when it said no.
    Unavailable {
        /// What was found.
        reason: String,
        /// The errno, when a system call refused.
        errno: Option<i32>,
    },
}

impl Feature {
    /// Whether it is usable.
    pub fn is_available(&self) -> bool {
        matches!(self, Feature::Available)
    }

    fn no(reason: impl Into<String>) -> Feature {
        Feature::Unavailable {
            reason: reason.into(),
            errno: None,
        }
    }
}

impl std::fmt::Display for Feature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Feature::Available => f.write_str("available"),
            Feature::Unavailable {
                reason,
                errno: Some(e),
            } => write!(f, "unavailable: {reason} ({})", errno_name(Some(*e))),
            Feature::Unavailable {
                reason,
                errno: None,
            } => write!(f, "unavailable: {reason}"),
        }
    }
}

/// The kernel's tracing mechanisms, as probed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelCapabilities {
    /// Kernel BTF at `/sys/kernel/btf/vmlinux`.
    pub btf: Feature,
    /// CAP_BPF + CAP_PERFMON or CAP_SYS_ADMIN.
    pub privileges: Feature,
    /// BPF trampolines (fentry/fexit).
    pub trampolines: Feature,
    /// kprobes and kretprobes.
    pub kprobes: Feature,
    /// kprobe.multi links (many functions in one attach).
    pub kprobe_multi: Feature,
    /// Tracepoints (syscall sources), through tracefs.
    pub tracepoints: Feature,
}

impl KernelCapabilities {
    /// The capabilities of this kernel, probed on first use.
    pub fn get() -> &'static KernelCapabilities {
        static CAPS: OnceLock<KernelCapabilities> = OnceLock::new();
        CAPS.get_or_init(KernelCapabilities::probe)
    }

    /// Probes now (prefer [`KernelCapabilities::get`]).
    pub fn probe() -> KernelCapabilities {
        let btf = std::fs::read(KERNEL_BTF)
            .map_err(|e| e.to_string())
            .and_then(|data| Btf::parse(&data).map_err(|e| e.to_string()));
        let privileges = match crate::caps::check_tracing_caps(crate::caps::effective()) {
            Ok(()) => Feature::Available,
            Err(have) => Feature::no(format!(
                "needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); the process has {have}"
            )),
        };
        let trampolines = match (&btf, &privileges) {
            (Err(e), _) => Feature::no(format!("no kernel BTF to attach against: {e}")),
            (_, Feature::Unavailable { .. }) => Feature::no("not probed: missing privileges"),
            (Ok(btf), Feature::Available) => probe_trampolines(btf),
        };
        let kprobes = if Path::new(KPROBE_PMU).exists() {
            Feature::Available
        } else {
            Feature::no(format!(
                "no kprobe PMU at {KPROBE_PMU} (kernel built without CONFIG_KPROBES)"
            ))
        };
        let kprobe_multi = match (&btf, &kprobes) {
            (_, Feature::Unavailable { .. }) => Feature::no("no kprobes"),
            (Ok(btf), _) if btf.function("register_fprobe").is_some() => Feature::Available,
            (Ok(_), _) => {
                Feature::no("kernel built without CONFIG_FPROBE (no register_fprobe in BTF)")
            }
            (Err(_), _) => Feature::no("no kernel BTF to look for fprobe"),
        };
        let tracepoints = if Path::new(crate::syscall::TRACEFS).join("events").exists() {
            Feature::Available
        } else if Path::new(crate::syscall::TRACEFS).exists() {
            Feature::no(format!(
                "tracefs is not mounted at {} (kspan mounts it when a syscall source needs it)",
                crate::syscall::TRACEFS
            ))
        } else {
            Feature::no("the kernel has no tracefs")
        };
        KernelCapabilities {
            btf: match btf {
                Ok(_) => Feature::Available,
                Err(e) => Feature::no(e),
            },
            privileges,
            trampolines,
            kprobes,
            kprobe_multi,
            tracepoints,
        }
    }

    /// Why `mode` cannot work on this kernel, if known before trying.
    pub fn refuses(&self, mode: crate::Mode) -> Option<&Feature> {
        use crate::Mode;
        let feature = match mode {
            Mode::Fentry | Mode::Fexit => &self.trampolines,
            Mode::Kprobe | Mode::Kretprobe => &self.kprobes,
            Mode::Syscall => &self.tracepoints,
            Mode::Auto => return None,
        };
        (!feature.is_available()).then_some(feature)
    }
}

/// The kprobe PMU: present exactly when the kernel has CONFIG_KPROBES.
pub(crate) const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe";

/// Loads kspan's fentry program against a function every kernel has, and
/// unloads it: nothing is attached.
fn probe_trampolines(btf: &Btf) -> Feature {
    let Some(target) = ["vfs_read", "ksys_read", "vfs_write"]
        .into_iter()
        .find(|f| btf.function(f).is_some())
    else {
        return Feature::no("no known function in BTF to load a trampoline against");
    };
    let result = (|| {
        let mut open = ObjectBuilder::default().open_memory(kspan_bpf::OBJECT)?;
        // A valid configuration: the verifier checks the program against it.
        let config = kspan_bpf::types::kspan_config {
            mode: crate::Mode::Fentry.bpf_value(),
            record_size: std::mem::size_of::<kspan_bpf::types::kspan_record>() as u32,
            ..Default::default()
        };
        for mut map in open.maps_mut() {
            if map
                .name()
                .to_string_lossy()
                .ends_with(kspan_bpf::names::RODATA_MAP_SUFFIX)
            {
                if let Some(data) = map.initial_value_mut() {
                    crate::runtime::write_config(data, &config);
                }
            }
        }
        for mut prog in open.progs_mut() {
            if prog.name() == kspan_bpf::names::FENTRY_PROG {
                prog.set_attach_target(0, Some(target.to_owned()))?;
            } else {
                prog.set_autoload(false);
            }
        }
        crate::runtime::quiet_libbpf(|| open.load()).map(drop)
    })();
    match result {
        Ok(()) => Feature::Available,
        Err(e) => Feature::Unavailable {
            reason: format!("loading an fentry program for `{target}` was refused"),
            errno: errno_of(&e),
        },
    }
}
