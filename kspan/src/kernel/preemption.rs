// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The running kernel's preemption model: whether a task can be preempted
//! while it runs a BPF trampoline program.
//!
//! The kernel runs a program at most once at a time on a CPU. Trampoline
//! programs (fentry, fexit, fsession) run with migration off but
//! preemption on; on a kernel that preempts kernel code (`full`, `lazy`,
//! `rt`), a task preempted inside one makes every other task's run of that
//! program on that CPU a skip, and a call whose entry and exit are both
//! skipped leaves no trace at all. Kprobe programs run with preemption off;
//! the kernel skips them only while a task on their CPU is inside a BPF map
//! system call, which kspan then does not make while recording
//! (`attach::registration_skips`).
//! `auto` reads the model here to choose between them.
//!
//! The model is read, in this order, from:
//! 1. `/sys/kernel/debug/sched/preempt` (root, with debugfs mounted): the
//!    mode running now, after a boot-time `preempt=` or a later write there;
//! 2. the version string (`/proc/sys/kernel/version`, as `uname -v`):
//!    `PREEMPT_RT`, or a kernel built for one model (`PREEMPT` or
//!    `PREEMPT_LAZY`: preemptible; no such word: `none` or `voluntary`);
//! 3. for `PREEMPT_DYNAMIC` kernels, which choose at boot: `preempt=` on
//!    the command line (`/proc/cmdline`), else the build's default from the
//!    kernel's config (`/boot/config-<release>`, or `config` beside its
//!    modules);
//! 4. else unknown, and taken as preemptible: it may be (every dynamic
//!    kernel offers `full`; sid's 7.2 offers only `full` and `lazy`).
//!
//! Every file read is world-readable but the first, so an unprivileged
//! service gets the boot-time model; only a mode changed through debugfs
//! after boot is missed without root.

use std::fmt;

/// Where the running mode is, when debugfs is mounted (root only).
pub const DEBUGFS_PREEMPT: &str = "/sys/kernel/debug/sched/preempt";

/// How the kernel preempts tasks that run kernel code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PreemptionModel {
    /// `none`: only where kernel code asks for it.
    None,
    /// `voluntary`: also at the kernel's voluntary points (`cond_resched`).
    Voluntary,
    /// `full`: anywhere preemption is not turned off.
    Full,
    /// `lazy`: like `full`, but a fair-class task keeps its CPU to the next
    /// tick or return to user space.
    Lazy,
    /// `PREEMPT_RT`: full, with most locks sleeping.
    Rt,
}

impl PreemptionModel {
    /// The name, as `preempt=` and debugfs spell it (`rt` for PREEMPT_RT).
    pub fn as_str(self) -> &'static str {
        match self {
            PreemptionModel::None => "none",
            PreemptionModel::Voluntary => "voluntary",
            PreemptionModel::Full => "full",
            PreemptionModel::Lazy => "lazy",
            PreemptionModel::Rt => "rt",
        }
    }

    /// The model named `name` (`preempt=` or debugfs spelling).
    pub fn from_name(name: &str) -> Option<PreemptionModel> {
        Some(match name {
            "none" => PreemptionModel::None,
            "voluntary" => PreemptionModel::Voluntary,
            "full" => PreemptionModel::Full,
            "lazy" => PreemptionModel::Lazy,
            "rt" => PreemptionModel::Rt,
            _ => return None,
        })
    }

    /// Whether a task can be preempted inside a trampoline program.
    pub fn preempts_programs(self) -> bool {
        matches!(
            self,
            PreemptionModel::Full | PreemptionModel::Lazy | PreemptionModel::Rt
        )
    }
}

impl fmt::Display for PreemptionModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The running kernel's preemption model and where it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preemption {
    /// The model, when it could be read.
    pub model: Option<PreemptionModel>,
    /// Where it was read from, or why it is not known.
    pub source: String,
}

impl Preemption {
    /// Reads the running kernel's model (see the module's text for the
    /// order).
    pub fn read() -> Preemption {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let release = read("/proc/sys/kernel/osrelease").unwrap_or_default();
        let release = release.trim();
        let config = || {
            [
                format!("/boot/config-{release}"),
                format!("/lib/modules/{release}/config"),
            ]
            .into_iter()
            .find_map(|p| Some((std::fs::read_to_string(&p).ok()?, p)))
        };
        Preemption::from_sources(&Sources {
            debugfs: read(DEBUGFS_PREEMPT).as_deref(),
            version: read("/proc/sys/kernel/version").as_deref(),
            cmdline: read("/proc/cmdline").as_deref(),
            config: &config,
        })
    }

    /// The model from what the kernel's files say (pure, for tests).
    pub(crate) fn from_sources(s: &Sources<'_>) -> Preemption {
        let found = |model, source: String| Preemption {
            model: Some(model),
            source,
        };
        if let Some(model) = s.debugfs.and_then(parse_debugfs) {
            return found(model, DEBUGFS_PREEMPT.to_owned());
        }
        let Some(version) = s.version else {
            return Preemption {
                model: None,
                source: "neither debugfs nor /proc/sys/kernel/version is readable".to_owned(),
            };
        };
        let words: Vec<&str> = version.split_whitespace().collect();
        let has = |w: &str| words.contains(&w);
        let from_version = "the kernel's version string (uname -v)".to_owned();
        if has("PREEMPT_RT") {
            return found(PreemptionModel::Rt, from_version);
        }
        if !has("PREEMPT_DYNAMIC") {
            let model = if has("PREEMPT_LAZY") {
                PreemptionModel::Lazy
            } else if has("PREEMPT") {
                PreemptionModel::Full
            } else {
                // Built for `none` or `voluntary`: neither preempts here.
                PreemptionModel::Voluntary
            };
            return found(model, from_version);
        }
        if let Some(model) = s.cmdline.and_then(parse_cmdline) {
            return found(
                model,
                format!("preempt={model} on the kernel's command line"),
            );
        }
        if let Some((text, path)) = (s.config)() {
            if let Some(model) = parse_config(&text) {
                return found(model, format!("the build's default in {path}"));
            }
        }
        Preemption {
            model: None,
            source: format!(
                "a PREEMPT_DYNAMIC kernel whose mode is not readable here ({DEBUGFS_PREEMPT} \
                 needs root and debugfs; no preempt= on the command line, no kernel config)"
            ),
        }
    }

    /// Whether a task can be preempted inside a trampoline program here:
    /// the model's answer, and yes when it is not known.
    pub fn preempts_programs(&self) -> bool {
        self.model.is_none_or(PreemptionModel::preempts_programs)
    }
}

impl fmt::Display for Preemption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.model {
            Some(model) => write!(f, "{model} (from {})", self.source),
            None => write!(f, "unknown: {}", self.source),
        }
    }
}

/// What [`Preemption::from_sources`] reads, each `None` where unreadable.
pub(crate) struct Sources<'a> {
    pub(crate) debugfs: Option<&'a str>,
    pub(crate) version: Option<&'a str>,
    pub(crate) cmdline: Option<&'a str>,
    /// The kernel's config and its path, read only when needed.
    pub(crate) config: &'a dyn Fn() -> Option<(String, String)>,
}

/// The running mode in debugfs's list: the one in parentheses
/// (`none (voluntary) full`, `full (lazy)`).
fn parse_debugfs(text: &str) -> Option<PreemptionModel> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('(')?.strip_suffix(')'))
        .and_then(PreemptionModel::from_name)
}

/// The `preempt=` of a command line in force, as the kernel takes it:
/// each in order, one naming no mode it takes (`none`, `voluntary`,
/// `full`, `lazy`) ignored.
fn parse_cmdline(text: &str) -> Option<PreemptionModel> {
    text.split_whitespace()
        .filter_map(|w| w.strip_prefix("preempt="))
        .filter_map(PreemptionModel::from_name)
        .rfind(|&m| m != PreemptionModel::Rt)
}

/// The model a kernel config builds as its default.
fn parse_config(text: &str) -> Option<PreemptionModel> {
    text.lines().find_map(|line| match line.trim() {
        "CONFIG_PREEMPT_RT=y" => Some(PreemptionModel::Rt),
        "CONFIG_PREEMPT_LAZY=y" => Some(PreemptionModel::Lazy),
        "CONFIG_PREEMPT=y" => Some(PreemptionModel::Full),
        "CONFIG_PREEMPT_VOLUNTARY=y" => Some(PreemptionModel::Voluntary),
        "CONFIG_PREEMPT_NONE=y" => Some(PreemptionModel::None),
        _ => None,
    })
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use super::*;

    /// Each VM kernel's and the host's files, as read there (2026-12).
    const SID_72: &str = "#1 SMP PREEMPT_DYNAMIC Debian 7.2.13-1 (2026-10-28)";
    const TRIXIE_612: &str = "#1 SMP PREEMPT_DYNAMIC Debian 6.12.117-1 (2026-11-12)";
    const HOST_618: &str = "#1 SMP PREEMPT_DYNAMIC @0";

    fn no_config() -> Option<(String, String)> {
        None
    }

    fn sources<'a>(
        debugfs: Option<&'a str>,
        version: &'a str,
        cmdline: &'a str,
        config: &'a dyn Fn() -> Option<(String, String)>,
    ) -> Sources<'a> {
        Sources {
            debugfs,
            version: Some(version),
            cmdline: Some(cmdline),
            config,
        }
    }

    #[test]
    fn debugfs_names_the_running_mode() {
        assert_eq!(parse_debugfs("full (lazy) \n"), Some(PreemptionModel::Lazy));
        assert_eq!(
            parse_debugfs("none (voluntary) full \n"),
            Some(PreemptionModel::Voluntary)
        );
        assert_eq!(
            parse_debugfs("(none) voluntary full lazy"),
            Some(PreemptionModel::None)
        );
        assert_eq!(parse_debugfs("none voluntary full"), None);
        assert_eq!(parse_debugfs("(sometimes)"), None);
        // debugfs wins over everything else.
        let p = Preemption::from_sources(&sources(
            Some("none voluntary (full) "),
            TRIXIE_612,
            "preempt=none",
            &no_config,
        ));
        assert_eq!(p.model, Some(PreemptionModel::Full));
        assert_eq!(p.source, DEBUGFS_PREEMPT);
        assert!(p.preempts_programs());
    }

    #[test]
    fn the_command_line_overrides_a_dynamic_kernels_default() {
        assert_eq!(
            parse_cmdline("console=ttyS0 preempt=full quiet"),
            Some(PreemptionModel::Full)
        );
        assert_eq!(
            parse_cmdline("preempt=none root=/dev/vda preempt=lazy"),
            Some(PreemptionModel::Lazy),
            "the last one counts"
        );
        assert_eq!(parse_cmdline("console=ttyS0 nopreempt=full"), None);
        assert_eq!(parse_cmdline("preempt=sometimes"), None);
        // Found by the property tests: a later `preempt=` the kernel
        // refuses leaves the one before in force.
        assert_eq!(
            parse_cmdline("preempt=full preempt=sometimes"),
            Some(PreemptionModel::Full)
        );
        assert_eq!(
            parse_cmdline("preempt=none preempt=rt"),
            Some(PreemptionModel::None)
        );
        let config = || {
            Some((
                "# CONFIG_PREEMPT_NONE is not set\nCONFIG_PREEMPT_VOLUNTARY=y\n".to_owned(),
                "/boot/config-6.12.117+deb13-amd64".to_owned(),
            ))
        };
        let booted =
            |cmdline| Preemption::from_sources(&sources(None, TRIXIE_612, cmdline, &config));
        let full = booted("console=ttyS0 preempt=full");
        assert_eq!(full.model, Some(PreemptionModel::Full));
        assert_eq!(full.source, "preempt=full on the kernel's command line");
        let default = booted("console=ttyS0");
        assert_eq!(default.model, Some(PreemptionModel::Voluntary));
        assert_eq!(
            default.source,
            "the build's default in /boot/config-6.12.117+deb13-amd64"
        );
        assert!(!default.preempts_programs());
    }

    #[test]
    fn config_defaults() {
        let cases = [
            (
                "CONFIG_PREEMPT_BUILD=y\nCONFIG_PREEMPT_LAZY=y\n",
                Some(PreemptionModel::Lazy),
            ),
            (
                "CONFIG_PREEMPT_VOLUNTARY=y\nCONFIG_PREEMPT_COUNT=y\n",
                Some(PreemptionModel::Voluntary),
            ),
            ("CONFIG_PREEMPT_NONE=y\n", Some(PreemptionModel::None)),
            (
                "CONFIG_PREEMPT=y\nCONFIG_PREEMPT_COUNT=y\n",
                Some(PreemptionModel::Full),
            ),
            ("CONFIG_PREEMPT_RT=y\n", Some(PreemptionModel::Rt)),
            (
                "CONFIG_PREEMPT_COUNT=y\n# CONFIG_PREEMPT is not set\n",
                None,
            ),
        ];
        for (text, model) in cases {
            assert_eq!(parse_config(text), model, "{text}");
        }
    }

    #[test]
    fn the_version_string_names_a_fixed_model() {
        let of = |version: &'static str| {
            Preemption::from_sources(&sources(None, version, "", &no_config)).model
        };
        assert_eq!(
            of("#1 SMP PREEMPT_RT Debian 6.1.0"),
            Some(PreemptionModel::Rt)
        );
        assert_eq!(of("#1 SMP PREEMPT Tue Jan 1"), Some(PreemptionModel::Full));
        assert_eq!(
            of("#1 SMP PREEMPT_LAZY Tue Jan 1"),
            Some(PreemptionModel::Lazy)
        );
        let voluntary = of("#1 SMP Debian 5.10.0");
        assert_eq!(voluntary, Some(PreemptionModel::Voluntary));
        assert!(!voluntary.unwrap().preempts_programs());
    }

    #[test]
    fn a_dynamic_kernel_without_readable_mode() {
        // sid's 7.2 read by an unprivileged service, without its config.
        let sid = Preemption::from_sources(&sources(None, SID_72, "console=ttyS0", &no_config));
        assert_eq!(sid.model, None);
        assert!(sid.preempts_programs());
        // With the config beside its modules, as sid's packages put it.
        let config = || {
            Some((
                "CONFIG_PREEMPT_BUILD=y\nCONFIG_PREEMPT_LAZY=y\n".to_owned(),
                "/lib/modules/7.2.13+deb14-amd64/config".to_owned(),
            ))
        };
        let sid = Preemption::from_sources(&sources(None, SID_72, "console=ttyS0", &config));
        assert_eq!(sid.model, Some(PreemptionModel::Lazy));
        // The host's 6.18 without debugfs or config: not known, taken as preemptible.
        let host = Preemption::from_sources(&sources(None, HOST_618, "console=ttyS0", &no_config));
        assert_eq!(host.model, None);
        assert!(host.preempts_programs());
        assert!(host
            .to_string()
            .starts_with("unknown: a PREEMPT_DYNAMIC kernel"));
        let nothing = Preemption::from_sources(&Sources {
            debugfs: None,
            version: None,
            cmdline: None,
            config: &no_config,
        });
        assert_eq!(nothing.model, None);
    }
}
