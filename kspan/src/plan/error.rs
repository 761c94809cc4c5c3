// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Why a probe cannot be planned: each error names the probe's function,
//! parameter or annotation, and the fix.

use crate::annotation::Mode;

/// A probe that cannot work on this kernel, found before anything is loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// A filter that cannot be evaluated on this kernel's types.
    #[error("`{function}` (probe at {location}): {reason}")]
    Filter {
        /// The kernel function.
        function: String,
        /// Where the probe is declared.
        location: &'static str,
        /// What is wrong and the fix.
        reason: String,
    },
    /// No probe was given to the runtime.
    #[error(
        "no probes: add at least one `#[kspan::kernel_span]` probe with `KspanBuilder::probe`"
    )]
    NoProbes,
    /// A function named by a probe is not in the kernel's BTF.
    #[error(
        "unknown kernel function `{function}` (probe at {location}): {} in this \
         kernel's BTF{}{}",
        if super::denylist::is_pattern(function) { "the pattern matches no function" } else { "it is not" },
        suggest(suggestions),
        if super::denylist::is_pattern(function) { String::new() } else { other_kernels(function, suggestions) }
    )]
    UnknownFunction {
        /// The function asked for.
        function: String,
        /// Where the probe is declared.
        location: &'static str,
        /// Real functions with close names.
        suggestions: Vec<String>,
    },
    /// A probe's alternatives break a rule of their own (a spec made by
    /// hand; the macro refuses these at the token).
    #[error("`{function}` (probe at {location}): {source}")]
    Alternatives {
        /// The probe's function.
        function: String,
        /// Where the probe is declared.
        location: &'static str,
        /// Which rule.
        source: kspan_dsl::AlternativeError,
    },
    /// None of the functions of a probe with alternatives can be traced on
    /// this kernel, and the probe is not optional.
    #[error(
        "no function of the probe at {location} can be traced on this kernel: {}{}; name the \
         function this kernel has as one more alternative (`\"{function}\" | ... | \"{}\"`), \
         or make the probe `optional = true` to start without it",
        list(tried),
        super::names::did_you_mean(suggestions),
        suggestions.first().map_or("...", String::as_str)
    )]
    NoFunction {
        /// The probe's first function.
        function: String,
        /// Where the probe is declared.
        location: &'static str,
        /// Each function of the probe, with why this kernel cannot trace it.
        tried: Vec<(String, String)>,
        /// Functions of this kernel that fit the handler, or have close
        /// names.
        suggestions: Vec<String>,
    },
    /// The function chosen among a probe's alternatives does not fit the
    /// handler.
    #[error(
        "{source} (`{function}` is the first function of the probe at {location} that this \
         kernel can trace: {}; the handler's parameters must fit it)",
        list(passed_over)
    )]
    InAlternative {
        /// The function chosen.
        function: String,
        /// Where the probe is declared.
        location: &'static str,
        /// The probe's functions before it, each with why it was passed
        /// over.
        passed_over: Vec<(String, String)>,
        /// Why the handler does not fit it.
        source: Box<PlanError>,
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
        "`{function}` (probe at {location}) cannot be traced: it is {reason}; trace a \
         caller or a callee instead"
    )]
    NotTraceable {
        /// The kernel function.
        function: String,
        /// Where the probe is declared.
        location: &'static str,
        /// Why the kernel cannot trace it.
        reason: &'static str,
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
        source: super::fieldpath::PathSyntaxError,
    },
    /// A field path does not match the kernel's types.
    #[error("{source} (probe at {location})")]
    FieldPath {
        /// Where the probe is declared.
        location: &'static str,
        /// Which segment failed, and the members that exist there.
        source: super::fieldpath::FieldPathError,
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
    /// A histogram was asked of an instant, which has no duration.
    #[error(
        "`{function}` (probe at {location}): `histogram` needs a duration, and mode `{mode}` \
         attaches at entry only (an instant); use mode = \"fexit\" or \"kretprobe\", or \
         remove `histogram`"
    )]
    HistogramWithoutDuration {
        /// The kernel function.
        function: String,
        /// Where the probe is declared.
        location: &'static str,
        /// The probe's mode.
        mode: Mode,
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
}

fn suggest(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        "; check the spelling, and that the function is not inlined or static in a module".into()
    } else {
        super::names::did_you_mean(suggestions)
    }
}

/// What to do where other kernels have `function` and this one does not.
fn other_kernels(function: &str, suggestions: &[String]) -> String {
    format!(
        ". Where other kernels have it, name this kernel's function as an alternative \
         (`#[kernel_span(\"{function}\" | \"{}\")]`), or make the probe `optional = true` to \
         start without it here",
        suggestions.first().map_or("...", String::as_str)
    )
}

/// `` `a`: why; `b`: why `` (the functions in order).
fn list(functions: &[(String, String)]) -> String {
    functions
        .iter()
        .map(|(function, why)| format!("`{function}`: {why}"))
        .collect::<Vec<_>>()
        .join("; ")
}
