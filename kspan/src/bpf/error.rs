// SPDX-License-Identifier: Apache-2.0 OR MIT
//! How the kernel refused a program or a map, in words that name the fix.

use super::sys::KPROBE_PMU;
use crate::annotation::Hook;
use crate::kernel::errno;

/// The kernel refused to load a program for a function.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot load the {hook} program for `{function}`: {reason} ({errno_name}){}",
    verifier_log.as_deref().map(|l| format!("\nverifier log:\n{l}")).unwrap_or_default()
)]
#[non_exhaustive]
pub struct LoadError {
    /// The kernel function.
    pub function: String,
    /// The hook the program was for.
    pub hook: Hook,
    /// The kernel's errno (positive), when known.
    pub errno: Option<i32>,
    /// Its symbolic name (`EPERM`), or "errno unknown".
    pub errno_name: String,
    /// What the errno means here, and what to do.
    pub reason: String,
    /// The verifier's log, when the verifier ran.
    pub verifier_log: Option<String>,
    /// The libbpf error.
    pub source: libbpf_rs::Error,
}

impl LoadError {
    pub(crate) fn new(
        function: &str,
        hook: Hook,
        source: libbpf_rs::Error,
        verifier_log: Option<String>,
    ) -> Self {
        let errno = errno_of(&source);
        LoadError {
            function: function.to_owned(),
            hook,
            errno,
            errno_name: errno::name_of(errno).into_owned(),
            reason: refusal_reason(errno, hook, "load"),
            verifier_log,
            source,
        }
    }
}

/// A BPF map operation failed (the ring buffer, the counters, the switch).
#[derive(Debug, thiserror::Error)]
#[error("BPF map `{map}`: {source}")]
#[non_exhaustive]
pub struct MapError {
    /// The map.
    pub map: &'static str,
    /// The libbpf error.
    pub source: libbpf_rs::Error,
}

/// Bytes of verifier log kept per program and load: the end of a refusal's
/// log, where the verifier says why, fits many times over.
pub(super) const VERIFIER_LOG_BYTES: usize = 1 << 20;

/// The verifier's log in a program's buffer, if the verifier wrote one.
pub(super) fn verifier_log(buffer: &[u8]) -> Option<String> {
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    let text = String::from_utf8_lossy(&buffer[..end]);
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// Why the verifier refused a program: the last line of its log but the
/// count of instructions processed, which it writes after the reason.
pub(super) fn verifier_reason(log: &str) -> Option<&str> {
    log.lines()
        .map(str::trim)
        .rev()
        .find(|line| !line.is_empty() && !line.starts_with("processed "))
}

/// The kernel's errno inside a libbpf error.
pub(crate) fn errno_of(err: &libbpf_rs::Error) -> Option<i32> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(code) = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
        {
            return Some(code);
        }
        source = e.source();
    }
    // The message of an io::Error ends in "(os error N)".
    let text = format!("{err:#}");
    let tail = text.rsplit("os error ").next()?;
    tail.trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()
}

/// What a refusal to `step` (load, attach) a `hook` program means, and
/// what to do.
pub(crate) fn refusal_reason(errno: Option<i32>, hook: Hook, step: &str) -> String {
    if errno == Some(libc::EMFILE) {
        return format!(
            "this process has run out of file descriptors (EMFILE) while attaching {hook} \
             programs (kspan raised its soft limit to the hard one): raise the hard \
             open-files limit (`ulimit -Hn`, RLIMIT_NOFILE)"
        );
    }
    match hook {
        Hook::Kprobe | Hook::Kretprobe => {
            kprobe_refusal_reason(errno, hook, std::path::Path::new(KPROBE_PMU).exists())
        }
        Hook::Syscall if errno == Some(libc::EACCES) => perf_event_refused("syscall tracepoint"),
        Hook::Syscall => format!("the kernel refused to {step} the syscall tracepoint program"),
        Hook::Fentry | Hook::Fexit => trampoline_refusal_reason(errno, hook, step),
    }
}

fn trampoline_refusal_reason(errno: Option<i32>, hook: Hook, step: &str) -> String {
    match errno {
        Some(libc::EPERM) => format!(
            "the kernel refused to {step} the BPF trampoline: {hook} is not permitted on this \
             kernel (it is locked down, or its function tracer is disabled) although the process \
             has the capabilities; run on a kernel that allows BPF trampolines"
        ),
        Some(libc::EOPNOTSUPP) | Some(524) => format!(
            "this kernel does not support BPF trampolines ({hook} needs CONFIG_FUNCTION_TRACER \
             and CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS)"
        ),
        Some(libc::ESRCH) | Some(libc::ENOENT) => {
            "the function cannot be traced (it may be inlined, notrace, or missing from the \
             kernel's symbol table)"
                .to_owned()
        }
        Some(libc::EACCES) | Some(libc::EINVAL) => {
            format!("the kernel rejected the {hook} program (see the verifier log)")
        }
        Some(libc::EBUSY) => {
            "the function already has the most trampoline programs allowed".to_owned()
        }
        Some(libc::ENOMEM) => "the kernel is out of memory for BPF programs".to_owned(),
        _ => format!("the kernel refused to {step} the {hook} program"),
    }
}

/// What a refusal of a kprobe or kretprobe means, and what to do.
fn kprobe_refusal_reason(errno: Option<i32>, hook: Hook, kernel_has_kprobes: bool) -> String {
    if !kernel_has_kprobes {
        return format!(
            "this kernel has no kprobes (built without CONFIG_KPROBES: no kprobe PMU at \
             {KPROBE_PMU}); {hook} cannot work here, use a trampoline mode (fentry/fexit) where \
             the kernel allows it"
        );
    }
    match errno {
        Some(libc::ENOENT) | Some(libc::EINVAL) => {
            "the function cannot be probed: it is not in /proc/kallsyms (inlined or static \
             under another name), or it is on the kernel's kprobe blacklist"
                .to_owned()
        }
        Some(libc::EACCES) => perf_event_refused(hook.as_str()),
        Some(libc::EPERM) => {
            format!("the kernel refused the {hook}: kprobes are locked down here")
        }
        Some(libc::EBUSY) => "the function already has the most probes allowed".to_owned(),
        _ => format!("the kernel refused the {hook}"),
    }
}

/// A perf event (a kprobe's, a tracepoint's) refused with EACCES: the
/// process may not open perf events (the privilege check at start names
/// this first; this is for `auto`'s fallback to kprobes).
pub(crate) fn perf_event_refused(what: &str) -> String {
    format!(
        "the kernel refused to open the {what}'s perf event: this process may not open perf \
         events (they need CAP_PERFMON, and CAP_SYS_ADMIN where kernel.perf_event_paranoid is \
         above 2 on Debian's kernels, whose default is 3; {})",
        crate::kernel::privileges::PERF_PARANOID_FIX
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifier_log_is_the_text_before_the_nul() {
        let mut buffer = vec![0u8; 64];
        assert_eq!(verifier_log(&buffer), None);
        buffer[..22].copy_from_slice(b"0: R1=ctx\ninvalid mem\n");
        assert_eq!(
            verifier_log(&buffer).as_deref(),
            Some("0: R1=ctx\ninvalid mem")
        );
    }

    #[test]
    fn the_verifier_reason_is_the_last_line_before_the_count() {
        let log = "func#0 @0\n0: R1=ctx() R10=fp0\n; cfg = &kspan_cfg; @ kspan.bpf.c:1\n\
                   12: (18) r2 = 0x0\nmissing btf func_info\n\
                   processed 13 insns (limit 1000000) max_states_per_insn 0 total_states 1\n";
        assert_eq!(verifier_reason(log), Some("missing btf func_info"));
        assert_eq!(verifier_reason("\n  \n"), None);
        assert_eq!(verifier_reason("invalid mem"), Some("invalid mem"));
    }

    #[test]
    fn errno_from_libbpf_errors() {
        let e = libbpf_rs::Error::from_raw_os_error(libc::EPERM);
        assert_eq!(errno_of(&e), Some(libc::EPERM));
        assert!(refusal_reason(Some(libc::EPERM), Hook::Fexit, "load")
            .contains("fexit is not permitted"));
        assert!(
            kprobe_refusal_reason(Some(libc::ENOENT), Hook::Kprobe, false).contains("no kprobes")
        );
        let perf = kprobe_refusal_reason(Some(libc::EACCES), Hook::Kretprobe, true);
        assert!(
            perf.contains("refused to open the kretprobe's perf event")
                && perf.contains("kernel.perf_event_paranoid=2"),
            "{perf}"
        );
        assert!(refusal_reason(Some(libc::EACCES), Hook::Syscall, "attach")
            .contains("syscall tracepoint's perf event"));
    }
}
