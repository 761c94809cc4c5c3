// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `kspan`: what this kernel offers for tracing, which functions it can
//! trace, and a ready-to-paste `#[kspan::kernel_span]` handler for one.
//!
//! ```text
//! kspan doctor                      # the mechanisms, each with its status and errno
//! kspan list 'vfs_rea*'             # kernel functions from BTF, with C signatures
//! kspan list --syscalls 'open*'     # syscall sources, with their arguments
//! kspan gen vfs_read                # a handler with the Rust types kspan accepts
//! kspan gen --syscall openat
//! kspan gen do_unlinkat --params dfd,name  # another kernel's name: what takes those here
//! ```
//!
//! # Why it is shaped this way
//!
//! * **Three questions, in the order they come up.** Before writing a probe
//!   one asks whether tracing works here at all (`doctor`), what can be
//!   traced (`list`), and what to write (`gen`). Each is one subcommand, so
//!   there is no configuration and nothing to remember between runs.
//! * **The same sources as the runtime.** `doctor` prints
//!   [`kspan::KernelCapabilities`], the record `auto` mode decides from, so
//!   the report and what `start` does cannot disagree. `list` and `gen` read
//!   the kernel's BTF at [`kspan::KERNEL_BTF`] and the tracefs formats that
//!   kspan plans against, so every name and type printed is this kernel's;
//!   and what `start` would refuse (kspan's deny list, functions missing
//!   from `available_filter_functions`) `list` leaves out and `gen` refuses.
//! * **A report is not a failure.** `doctor` exits 0 when features are
//!   missing: that is its answer. Exit 1 is kept for "could not do what was
//!   asked" (nothing matched, BTF unreadable, unknown function), exit 2 for
//!   a command line that does not parse (a bare `kspan` included): the
//!   mistake in a line and where the help is, not the help, which would
//!   bury it. Every error names the thing at fault and the fix. A closed
//!   output (`kspan list | head`) ends the command quietly.
//! * **No silent dead ends.** Where this kernel cannot trace kernel
//!   functions (in the mode asked), `list` and `gen` still answer, for
//!   other kernels, but repeat `doctor`'s verdict
//!   (`doctor::Verdict`, the same code) and offer the syscall
//!   source to trace instead.
//! * **Generated code is accepted as generated.** `gen` maps kernel types to
//!   the Rust types kspan's checker accepts (same width and signedness,
//!   `usize`/`isize` for `size_t`/`ssize_t`, `&str` for a `char *` where BTF tags it (kernel or
//!   `#[capture(user)]` for `__user`), `&[u8]` with its `len` for a buffer
//!   (`#[capture(user, len = "ret")] buf: &[u8]` for `vfs_read`'s), `*const u8` for other
//!   pointers), and writes what no register capture can read (structs by
//!   value, parameters past the sixth, names a handler cannot use) as
//!   `// not captured` lines rather than dropping it silently. What it
//!   cannot decide it advises in comments: field captures of a struct
//!   pointer's members, each resolved as `start` resolves a path; the
//!   kernel and user forms of a `char *` or a buffer where BTF has no
//!   `__user` tags (it stays a pointer there); `at = "entry"` for
//!   what a function's name says it releases. The layout is rustfmt's, so
//!   pasted code survives `cargo fmt`. `tests/generated.rs` holds pasted
//!   output, and probes written from its advice, and plans them against this
//!   kernel's BTF.
//! * **One file per command.** `doctor`, `list` and `gen` each hold
//!   one command whole: its arguments, what it reads of the system and
//!   what it prints; `help` holds the help. A change to one command is a
//!   change to its file. This file only hands the command line to one of
//!   them and turns the outcome into an exit status. What more than one
//!   command uses is in `common`, once: how a command ends, writing,
//!   reading BTF and tracefs, C declarations, the library's name matching.
//!   `list` and `gen` give `doctor`'s verdict through
//!   `doctor::cannot_trace_note`, so the three cannot disagree.
//! * **Pure code apart.** What `gen` writes is decided in its submodules,
//!   which touch nothing of the system: how each kernel value is captured
//!   (`gen::capture`), which struct fields to suggest (`gen::fields`),
//!   and the handler's text (`gen::handler`), all tested on hand-built
//!   types. Arguments are parsed by hand: three subcommands with a flag or
//!   two do not need a parser, and the crate depends on `kspan` and std
//!   only. [`parse`] reads a command line into a [`Command`] without
//!   touching the system (the fuzz target `cli_args` drives it), and
//!   [`run`] does what the command says.
//! * **A library with the program.** The program is this library's
//!   [`main`]; `src/main.rs` only calls it, so that the fuzz crate can
//!   link the argument parser as the program has it.

mod common;
mod doctor;
#[cfg(test)]
mod fixtures;
mod gen;
mod help;
mod list;

use std::ffi::OsString;
use std::process::ExitCode;

pub use common::Failure;
use common::{print, report, Outcome};
pub use gen::GenArgs;
use help::{SEE_HELP, SHORT_USAGE, USAGE};
pub use list::ListArgs;

/// The `kspan` program: its command line run, the outcome written to
/// standard error and returned as the exit status.
pub fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let (status, message) = conclude(args_to_strings(args).and_then(|args| run(&args)));
    if let Some(message) = message {
        report(&message);
    }
    ExitCode::from(status)
}

/// The exit status of `outcome`, and what to write to standard error: a
/// usage error is its message and where the help is (the help itself would
/// bury the one line that matters), a bare `kspan` the short usage.
fn conclude(outcome: Outcome) -> (u8, Option<String>) {
    match outcome {
        Ok(()) | Err(Failure::OutputClosed) => (0, None),
        Err(Failure::Usage(message)) => (2, Some(format!("kspan: {message}\n{SEE_HELP}"))),
        Err(Failure::NoCommand) => (2, Some(SHORT_USAGE.to_owned())),
        Err(Failure::Failed(message)) => (1, Some(format!("kspan: {message}"))),
    }
}

fn args_to_strings(args: Vec<OsString>) -> Result<Vec<String>, Failure> {
    args.into_iter()
        .map(|a| {
            a.into_string().map_err(|a| {
                Failure::Usage(format!(
                    "argument {a:?} is not valid UTF-8; kernel function names are ASCII"
                ))
            })
        })
        .collect()
}

/// A command line, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `kspan help` (or `--help` anywhere): the usage.
    Help,
    /// `kspan --version`.
    Version,
    /// `kspan doctor`.
    Doctor,
    /// `kspan list ...`.
    List(ListArgs),
    /// `kspan gen ...`.
    Gen(GenArgs),
}

/// Reads the command line `args` (after the program's name), touching
/// nothing of the system; a wrong line is [`Failure::Usage`] (or
/// [`Failure::NoCommand`]) naming the mistake.
pub fn parse(args: &[String]) -> Result<Command, Failure> {
    let Some((command, rest)) = args.split_first() else {
        return Err(Failure::NoCommand);
    };
    if rest.iter().any(|a| a == "--help" || a == "-h") {
        return Ok(Command::Help);
    }
    match command.as_str() {
        "help" | "--help" | "-h" => Ok(Command::Help),
        "--version" | "-V" => Ok(Command::Version),
        "doctor" => doctor::parse(rest).map(|()| Command::Doctor),
        "list" => list::parse(rest).map(Command::List),
        "gen" => gen::parse(rest).map(Command::Gen),
        other => Err(Failure::Usage(format!(
            "unknown command `{other}`: use `doctor`, `list` or `gen`"
        ))),
    }
}

/// Runs the command line `args` (after the program's name).
pub fn run(args: &[String]) -> Outcome {
    match parse(args)? {
        Command::Help => print(USAGE),
        Command::Version => print(&format!("kspan {}\n", env!("CARGO_PKG_VERSION"))),
        Command::Doctor => doctor::run(),
        Command::List(list) => list::run(&list),
        Command::Gen(gen) => gen::run(gen),
    }
}

/// The command line parser, for the fuzz crate (`fuzz/`, target
/// `cli_args`) only.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod __fuzz {
    /// Reads `args` as a command line, running nothing.
    pub fn args(args: &[String]) {
        let _ = super::parse(args);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn a_usage_error_is_its_message_and_where_the_help_is() {
        for line in [
            &["bogus"][..],
            &["list", "a*", "b*"][..],
            &["gen", "vfs_read", "--bogus"][..],
            &["doctor", "--verbose"][..],
        ] {
            let outcome = run(&args(line));
            assert!(matches!(outcome, Err(Failure::Usage(_))), "{line:?}");
            let (status, text) = conclude(outcome);
            let text = text.unwrap();
            assert_eq!(status, 2, "{line:?}");
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), 2, "{text}");
            assert!(lines[0].starts_with("kspan: "), "{text}");
            assert_eq!(lines[1], "see `kspan --help`");
        }
        let (status, text) = conclude(Err(Failure::Usage("`--mode` is given twice".into())));
        assert_eq!(
            (status, text.as_deref()),
            (
                2,
                Some("kspan: `--mode` is given twice\nsee `kspan --help`")
            )
        );
        assert_eq!(
            conclude(Err(Failure::Failed("no luck".into()))),
            (1, Some("kspan: no luck".to_owned()))
        );
        assert_eq!(conclude(Err(Failure::OutputClosed)), (0, None));
    }

    #[test]
    fn a_bare_kspan_is_a_usage_error_with_the_short_usage() {
        let outcome = run(&[]);
        assert!(matches!(outcome, Err(Failure::NoCommand)));
        let (status, text) = conclude(outcome);
        let text = text.unwrap();
        assert_eq!(status, 2);
        assert_eq!(text, SHORT_USAGE);
        assert!(text.lines().count() <= 6, "{text}");
        assert!(text.ends_with("see `kspan --help`\n"));
        // Every form of the help is in the short usage.
        for form in [
            "kspan doctor",
            "kspan list [--all | --syscalls] [PATTERN]",
            "kspan gen FUNCTION [--mode MODE] [--params NAMES]",
            "kspan gen --syscall NAME",
        ] {
            assert!(text.contains(form), "{form}");
        }
    }
}
