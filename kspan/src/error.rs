// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Every way starting or running kspan can fail.

use std::path::PathBuf;

use crate::btf::BtfError;
use crate::probe::Mode;

/// An error of kspan. Each names the thing at fault and what would fix it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel's BTF could not be read (it is needed to check every probe).
    #[error(
        "cannot read the kernel's BTF at {}: {source}; kspan needs a kernel built \
         with CONFIG_DEBUG_INFO_BTF=y (or point `KspanBuilder::btf_path` at a BTF file)",
        path.display()
    )]
    NoKernelBtf {
        /// The path tried.
        path: PathBuf,
        /// Why reading it failed.
        source: std::io::Error,
    },
    /// The kernel's BTF was read but is not valid BTF.
    #[error("the kernel's BTF at {} is invalid: {source}", path.display())]
    BadKernelBtf {
        /// The path read.
        path: PathBuf,
        /// What is wrong with it.
        source: BtfError,
    },
    /// The process lacks the capabilities to load BPF programs.
    #[error(
        "missing privileges: loading BPF trampolines needs CAP_BPF and CAP_PERFMON \
         (or CAP_SYS_ADMIN), and this process has {have}; run as root or grant them \
         (e.g. `setcap cap_bpf,cap_perfmon+ep <binary>`)"
    )]
    MissingPrivileges {
        /// The relevant capabilities the process does have, or "none of them".
        have: String,
    },
    /// No probe was given to the runtime.
    #[error(
        "no probes: add at least one `#[kspan::kernel_span]` probe with `KspanBuilder::probe`"
    )]
    NoProbes,
    /// A function named by a probe is not in the kernel's BTF.
    #[error(
        "unknown kernel function `{function}` (probe at {location}): {} in this \
         kernel's BTF{}",
        if crate::denylist::is_pattern(function) { "the pattern matches no function" } else { "it is not" },
        suggest(suggestions)
    )]
    UnknownFunction {
        /// The function asked for.
        function: String,
        /// Where the probe is declared.
        location: &'static str,
        /// Real functions with close names.
        suggestions: Vec<String>,
    },
    /// A probe names a function on kspan's deny list.
    #[error("`{function}` (probe at {location}) is on kspan's deny list: {reason}")]
    Denied {
        /// The kernel function.
        function: String,
        /// Where the probe is declared.
        location: &'static str,
        /// Why it must not be traced.
        reason: &'static str,
    },
    /// A function is in BTF but the kernel cannot trace it.
    #[error(
        "`{function}` (probe at {location}) cannot be traced: it is absent from \
         available_filter_functions (inlined into its callers, or marked notrace); trace \
         a caller or a callee instead"
    )]
    NotTraceable {
        /// The kernel function.
        function: String,
        /// Where the probe is declared.
        location: &'static str,
    },
    /// A syscall source names a system call this kernel has no tracepoints for.
    #[error(
        "unknown system call `{syscall}` (probe at {location}): this kernel has no \
         syscalls:sys_enter_{syscall} tracepoint{}",
        suggest(suggestions)
    )]
    UnknownSyscall {
        /// The syscall asked for.
        syscall: String,
        /// Where the probe is declared.
        location: &'static str,
        /// Real syscalls with close names.
        suggestions: Vec<String>,
    },
    /// tracefs, needed for syscall sources, is not available.
    #[error(
        "syscall sources need tracefs at {}: {reason}; mount it with `mount -t tracefs \
         tracefs {}`",
        path.display(), path.display()
    )]
    Tracefs {
        /// Where it was looked for.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A handler parameter does not name a parameter of the kernel function.
    #[error(
        "`{function}` has no parameter `{parameter}` (probe at {location}); its \
         parameters are: {}; rename the handler parameter to one of them (or `ret` \
         for the return value)",
        available.join(", ")
    )]
    UnknownParameter {
        /// The kernel function.
        function: String,
        /// The parameter asked for.
        parameter: String,
        /// Where the probe is declared.
        location: &'static str,
        /// The function's real parameters, with their kernel types.
        available: Vec<String>,
    },
    /// A field path is not valid syntax.
    #[error("`{function}`: the path of `{parameter}` (`{path}`) is invalid: {source}")]
    PathSyntax {
        /// The kernel function.
        function: String,
        /// The handler parameter.
        parameter: String,
        /// The path as written.
        path: String,
        /// What is wrong with it.
        source: crate::fieldpath::PathSyntaxError,
    },
    /// A field path does not match the kernel's types.
    #[error("{source} (probe at {location})")]
    FieldPath {
        /// Where the probe is declared.
        location: &'static str,
        /// Which segment failed, and the members that exist there.
        source: crate::fieldpath::FieldPathError,
    },
    /// A capture cannot be made as asked (type, `user`, `len`, sizes).
    #[error("`{function}`: cannot capture `{parameter}`: {reason}")]
    Capture {
        /// The kernel function.
        function: String,
        /// The handler parameter.
        parameter: String,
        /// Why, and what to do.
        reason: String,
    },
    /// A parameter sits beyond the registers kspan captures.
    #[error(
        "parameter `{parameter}` of `{function}` is argument #{position} (counting \
         from 1); kspan captures the first {max} arguments only"
    )]
    ArgumentOutOfReach {
        /// The kernel function.
        function: String,
        /// The parameter.
        parameter: String,
        /// Its 1-based position.
        position: usize,
        /// How many arguments can be captured.
        max: usize,
    },
    /// A Rust type does not match the kernel type in width or signedness.
    #[error(
        "`{function}`: `{parameter}` is `{kernel_type}` in the kernel but {rust_type} \
         in the handler; {hint}"
    )]
    TypeMismatch {
        /// The kernel function.
        function: String,
        /// The parameter (or `ret`).
        parameter: String,
        /// The kernel type as C spells it.
        kernel_type: String,
        /// The Rust type and its width.
        rust_type: String,
        /// What to write instead.
        hint: String,
    },
    /// `ret` was asked for where there is no return value.
    #[error("`{function}`: the handler takes `ret` but {reason}")]
    NoReturnValue {
        /// The kernel function.
        function: String,
        /// Why there is none.
        reason: String,
    },
    /// Two probes name the same kernel function.
    #[error(
        "two probes trace `{function}` ({first} and {second}); a function can be traced \
         by one probe per runtime: merge the handlers"
    )]
    DuplicateProbe {
        /// The kernel function.
        function: String,
        /// Where the first probe is declared.
        first: &'static str,
        /// Where the second probe is declared.
        second: &'static str,
    },
    /// The kernel refused to load the BPF program for a function.
    #[error(
        "cannot load the {mode} program for `{function}`: {reason} ({errno_name}){}",
        verifier_log.as_deref().map(|l| format!("\nverifier log:\n{l}")).unwrap_or_default()
    )]
    LoadFailed {
        /// The kernel function.
        function: String,
        /// The attach mode.
        mode: Mode,
        /// The kernel's errno (positive), when known.
        errno: Option<i32>,
        /// Its symbolic name (`EPERM`), or "errno unknown".
        errno_name: String,
        /// What the errno means here, and what to do.
        reason: String,
        /// The verifier's log, when the verifier ran.
        verifier_log: Option<String>,
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// `auto` found no mechanism that works for a function.
    #[error(
        "cannot trace `{function}` on this kernel: every mechanism was tried or ruled out: {}",
        tried.iter().map(|(m, why)| format!("[{m}] {why}")).collect::<Vec<_>>().join("; ")
    )]
    NoMechanism {
        /// The kernel function.
        function: String,
        /// Each mode, with why it did not work.
        tried: Vec<(Mode, String)>,
    },
    /// The program loaded but the kernel refused to attach it.
    #[error("cannot attach {mode} to `{function}`: {reason} ({errno_name})")]
    AttachFailed {
        /// The kernel function.
        function: String,
        /// The attach mode.
        mode: Mode,
        /// The kernel's errno (positive), when known.
        errno: Option<i32>,
        /// Its symbolic name.
        errno_name: String,
        /// What the errno means here.
        reason: String,
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// A BPF map operation failed (creating the ring buffer, reading counters).
    #[error("BPF map `{map}`: {source}")]
    Map {
        /// The map.
        map: &'static str,
        /// The libbpf error.
        source: libbpf_rs::Error,
    },
    /// The tracer provider given to kspan does not take span ids from
    /// [`KernelSpanIds`](crate::KernelSpanIds), so kernel spans could not
    /// keep the ids their children name.
    #[error(
        "the tracer provider given to `Kspan::builder` has no `kspan::KernelSpanIds` id \
         generator, which kernel spans need to keep the ids the kernel gave them (their \
         children name them as parents); add \
         `.with_id_generator(kspan::KernelSpanIds::default())` to its \
         `SdkTracerProvider::builder()` (or `KernelSpanIds::wrap(your_generator)`)"
    )]
    NoKernelSpanIds,
    /// Another OpenTelemetry context observer is registered.
    #[error(transparent)]
    ContextObserver(#[from] crate::context::ObserverTaken),
    /// `start` was called outside a tokio runtime.
    #[error("kspan must be started from within a tokio runtime (its consumer is a tokio task)")]
    NoTokioRuntime,
    /// The consumer task ended abnormally.
    #[error("the kspan consumer task failed: {0}")]
    Consumer(String),
    /// Flushing the tracer provider failed at shutdown.
    #[error("flushing spans at shutdown failed: {0}")]
    Flush(#[source] opentelemetry_sdk::error::OTelSdkError),
}

fn suggest(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        "; check the spelling, and that the function is not inlined or static in a module".into()
    } else {
        format!(
            "; did you mean {}?",
            suggestions
                .iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// A shorthand for results of kspan.
pub type Result<T, E = Error> = std::result::Result<T, E>;
