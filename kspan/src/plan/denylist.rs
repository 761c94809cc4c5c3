// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Kernel functions kspan never traces, and why.
//!
//! Tracing some functions breaks the tracer or the kernel: the BPF and
//! tracing machinery kspan's own programs run on (recursion), the locking,
//! RCU and preemption primitives the trampolines and kprobes themselves call,
//! and code that runs where a probe cannot (NMI, the scheduler's switch).
//! The list is enforced: a probe naming one of these fails to start with the
//! reason; a pattern (`vfs_*`) skips them and reports each one skipped.

/// Groups of patterns, each with the reason.
pub const DENY_LIST: &[(&[&str], &str)] = &[
    (
        &["bpf_*", "__bpf_*", "*_bpf_*", "btf_*"],
        "the BPF machinery kspan's own programs run on: tracing it recurses into itself",
    ),
    (
        &[
            "ftrace_*",
            "__ftrace_*",
            "*fentry*",
            "*kprobe*",
            "*rethook*",
            "*fprobe*",
            "perf_*",
            "trace_*",
            "__trace_*",
        ],
        "the tracing infrastructure that attaches and runs probes",
    ),
    (
        &["rcu_*", "__rcu_*", "*_rcu_*"],
        "RCU, which trampolines and kprobes use on every hit",
    ),
    (
        &[
            "_raw_spin_*",
            "*spin_lock*",
            "*spin_unlock*",
            "*_raw_read_*",
            "*_raw_write_*",
            "queued_*",
            "native_queued_*",
            "lock_acquire",
            "lock_release",
        ],
        "locking primitives called on the tracing path: probing them deadlocks or recurses",
    ),
    (
        &[
            "preempt_*",
            "__preempt_*",
            "migrate_disable",
            "migrate_enable",
            "irq_enter*",
            "irq_exit*",
            "*_irqs_*",
        ],
        "preemption and interrupt bookkeeping done by the probes themselves",
    ),
    (
        &[
            "*nmi*",
            "do_int3*",
            "exc_*",
            "asm_exc_*",
            "do_debug",
            "poke_int3_handler",
        ],
        "exception and NMI context, where a probe must not run",
    ),
    (
        &[
            "schedule",
            "__schedule",
            "context_switch",
            "finish_task_switch*",
            "__switch_to*",
        ],
        "the scheduler's switch: a span opened there ends on another task",
    ),
];

/// Whether `name` matches the shell-style `pattern` (`*` any run, `?` one
/// character).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Whether `text` is a pattern rather than one function name.
pub fn is_pattern(text: &str) -> bool {
    text.contains(['*', '?'])
}

/// Why `function` must not be traced, if it is on the list.
pub fn denied(function: &str) -> Option<&'static str> {
    DENY_LIST
        .iter()
        .find(|(patterns, _)| patterns.iter().any(|p| glob_match(p, function)))
        .map(|(_, reason)| *reason)
}

/// Why kspan will not trace a kernel function that BTF describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotTraced {
    /// It is on kspan's deny list, for this reason.
    Denied(&'static str),
    /// It is missing from the kernel's `available_filter_functions`:
    /// inlined into its callers, or marked notrace.
    Untraceable,
    /// The kernel's symbol table places it in `__init` text, freed after
    /// boot.
    FreedInit,
    /// The kernel's symbol table has no symbol of it: inlined into every
    /// caller.
    NoSymbol,
}

/// Why a function missing from `available_filter_functions` cannot be
/// traced, for a sentence ("it is ...").
pub const ABSENT_FROM_LIST: &str =
    "absent from available_filter_functions (inlined into its callers, or marked notrace)";

impl NotTraced {
    /// Why the kernel cannot trace it, for a sentence ("it is ...");
    /// `None` for the deny list, which is kspan's choice.
    pub fn kernel_reason(&self) -> Option<&'static str> {
        match self {
            NotTraced::Denied(_) => None,
            NotTraced::Untraceable => Some(ABSENT_FROM_LIST),
            NotTraced::FreedInit => {
                Some("an __init function, whose code the kernel freed after boot")
            }
            NotTraced::NoSymbol => {
                Some("absent from the kernel's symbol table (inlined into every caller)")
            }
        }
    }
}

impl std::fmt::Display for NotTraced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self, self.kernel_reason()) {
            (NotTraced::Denied(reason), _) => write!(f, "on kspan's deny list: {reason}"),
            (_, Some(why)) => write!(f, "not traceable: {why}"),
            (_, None) => f.write_str("not traceable"),
        }
    }
}

/// Why kspan will not trace kernel function `name`, if it will not: it is
/// on the deny list, or it is missing from `traceable` (the kernel's
/// `available_filter_functions`, when readable).
pub fn not_traced(
    name: &str,
    traceable: Option<&std::collections::HashSet<String>>,
) -> Option<NotTraced> {
    if let Some(reason) = denied(name) {
        return Some(NotTraced::Denied(reason));
    }
    match traceable {
        Some(set) if !set.contains(name) => Some(NotTraced::Untraceable),
        _ => None,
    }
}

/// What kspan knows, before attaching, of which functions the kernel can
/// trace.
#[derive(Debug, Default)]
#[non_exhaustive]
pub enum Traceable {
    /// Nothing: every function BTF describes is tried, and the attach says
    /// what the kernel refuses.
    #[default]
    Unknown,
    /// The kernel's list (`available_filter_functions`).
    Listed(std::collections::HashSet<String>),
    /// The functions the kernel's symbol table shows it cannot trace, and
    /// why (`__init`, no symbol); any other is tried. Where every pattern
    /// attaches through multi-function links: one refused for a `notrace`
    /// function reads the list then.
    Excluded(std::collections::HashMap<String, NotTraced>),
}

impl Traceable {
    /// Why kspan will not trace `name`, if it will not: the deny list, or
    /// what is known of the kernel.
    pub fn why_not(&self, name: &str) -> Option<NotTraced> {
        match self {
            Traceable::Unknown => not_traced(name, None),
            Traceable::Listed(set) => not_traced(name, Some(set)),
            Traceable::Excluded(excluded) => {
                not_traced(name, None).or_else(|| excluded.get(name).copied())
            }
        }
    }

    /// Whether this is the kernel's own list.
    pub fn is_listed(&self) -> bool {
        matches!(self, Traceable::Listed(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("vfs_*", "vfs_read"));
        assert!(glob_match("vfs_*", "vfs_"));
        assert!(!glob_match("vfs_*", "xvfs_read"));
        assert!(glob_match("*read*", "vfs_readv"));
        assert!(glob_match("vfs_rea?", "vfs_read"));
        assert!(!glob_match("vfs_rea?", "vfs_readv"));
        assert!(glob_match("vfs_read", "vfs_read"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("a*b*c", "abx"));
        assert!(glob_match("a*b*c", "aXbYc"));
        assert!(is_pattern("vfs_*") && !is_pattern("vfs_read"));
    }

    #[test]
    fn glob_corner_cases() {
        assert!(glob_match("*", ""));
        assert!(glob_match("*", "vfs_read"));
        assert!(glob_match("vfs_rea*", "vfs_read"));
        assert!(glob_match("vfs_rea*", "vfs_readv"));
        assert!(glob_match("vfs_rea*", "vfs_rea"));
        assert!(!glob_match("vfs_rea*", "do_vfs_read"));
        assert!(glob_match("*read", "vfs_read"));
        assert!(!glob_match("*read", "vfs_readv"));
        assert!(glob_match("*_read*", "ksys_readahead"));
        assert!(glob_match("v?s_read", "vfs_read"));
        assert!(!glob_match("v?s_read", "vs_read"));
        assert!(glob_match("?", "a"));
        assert!(!glob_match("?", ""));
        assert!(!glob_match("?", "ab"));
        assert!(glob_match("a*b*c", "aXbYbZc"));
        assert!(!glob_match("a*b*c", "aXbYbZ"));
        assert!(glob_match("**a**", "xax"));
        assert!(
            glob_match("*ab", "aab"),
            "the star must give back characters"
        );
        assert!(glob_match("*a?c*", "aabcab"));
    }

    #[test]
    fn functions_kspan_refuses() {
        let traceable: std::collections::HashSet<String> =
            ["vfs_read".to_owned()].into_iter().collect();
        assert_eq!(not_traced("vfs_read", Some(&traceable)), None);
        assert_eq!(not_traced("vfs_read", None), None);
        let inlined = not_traced("vfs_inlined", Some(&traceable)).unwrap();
        assert_eq!(inlined, NotTraced::Untraceable);
        assert!(inlined.to_string().starts_with("not traceable"));
        assert_eq!(
            not_traced("vfs_inlined", None),
            None,
            "unknown: not ruled out"
        );
        let denied = not_traced("rcu_read_unlock_strict", Some(&traceable)).unwrap();
        assert_eq!(
            Traceable::Listed(traceable.clone()).why_not("rcu_read_unlock_strict"),
            Some(denied)
        );
        assert!(matches!(denied, NotTraced::Denied(_)));
        assert!(
            denied.to_string().starts_with("on kspan's deny list: RCU"),
            "{denied}"
        );
    }

    #[test]
    fn what_the_symbol_table_rules_out_and_what_it_leaves_to_the_kernel() {
        let excluded = Traceable::Excluded(
            [("vfs_caches_init".to_owned(), NotTraced::FreedInit)]
                .into_iter()
                .collect(),
        );
        let init = excluded.why_not("vfs_caches_init").unwrap();
        assert_eq!(
            init.to_string(),
            "not traceable: an __init function, whose code the kernel freed after boot"
        );
        assert_eq!(excluded.why_not("vfs_read"), None, "tried, not ruled out");
        assert!(matches!(
            excluded.why_not("bpf_prog_run"),
            Some(NotTraced::Denied(_))
        ));
        assert!(!excluded.is_listed() && Traceable::Listed(Default::default()).is_listed());
        assert_eq!(Traceable::Unknown.why_not("vfs_inlined"), None);
        assert!(NotTraced::NoSymbol.to_string().contains("symbol table"));
    }

    #[test]
    fn the_deny_list_holds_what_breaks_tracing() {
        for f in [
            "bpf_ringbuf_reserve",
            "rcu_read_unlock_strict",
            "_raw_spin_lock",
            "preempt_count_add",
            "ftrace_ops_list_func",
            "__schedule",
            "kprobe_ftrace_handler",
            "default_do_nmi",
        ] {
            assert!(denied(f).is_some(), "{f}");
        }
        for f in [
            "vfs_read",
            "ksys_read",
            "tcp_sendmsg",
            "do_sys_openat2",
            "filemap_read",
        ] {
            assert_eq!(denied(f), None, "{f}");
        }
        assert!(denied("bpf_map_lookup_elem").unwrap().contains("recurses"));
    }
}
