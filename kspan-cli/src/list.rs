// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `kspan list`: the kernel functions kspan can trace whose names match a
//! pattern, with their C signatures (`--all`: also those it will not, with
//! the reason), or the system calls usable as syscall sources, with their
//! arguments (`--syscalls`). The lines go to standard output and the count
//! and notes to standard error, so a pipe gets the lines alone.

use std::io::{self, BufWriter, Write};

use kspan::Mode;

use crate::common::{
    c_declaration, c_signature, closest_functions, closest_names, did_you_mean, enter_format_path,
    glob_match, has_wildcard, not_traced, read_btf, read_traceable, report, syscall_names, Failure,
    NotTraced, Outcome,
};
use crate::doctor::cannot_trace_note;

/// `kspan list`'s arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListArgs {
    /// `--syscalls`: system calls rather than kernel functions.
    pub syscalls: bool,
    /// `--all`: also the functions kspan cannot trace.
    pub all: bool,
    /// The pattern (`*` when none is given).
    pub pattern: String,
}

/// `kspan list`, with its arguments.
pub fn run(args: &ListArgs) -> Outcome {
    if args.syscalls {
        list_syscalls(&args.pattern)
    } else {
        list_functions(&args.pattern, args.all)
    }
}

/// Reads `kspan list`'s arguments (after `list`).
pub fn parse(args: &[String]) -> Result<ListArgs, Failure> {
    let mut syscalls = false;
    let mut all = false;
    let mut pattern: Option<&str> = None;
    for arg in args {
        match arg.as_str() {
            "--syscalls" => syscalls = true,
            "--all" => all = true,
            flag if flag.starts_with('-') && flag.len() > 1 => {
                return Err(Failure::Usage(format!(
                    "unknown option `{flag}` for `kspan list`: the options are `--syscalls` \
                     and `--all`"
                )))
            }
            p => {
                if let Some(first) = pattern {
                    return Err(Failure::Usage(format!(
                        "`kspan list` takes one pattern, got `{first}` and `{p}`; quote a \
                         pattern with `*` so the shell does not expand it"
                    )));
                }
                pattern = Some(p);
            }
        }
    }
    if syscalls && all {
        return Err(Failure::Usage(
            "`--all` is for kernel functions; every system call with tracepoints is listed \
             already"
                .to_owned(),
        ));
    }
    Ok(ListArgs {
        syscalls,
        all,
        pattern: pattern.unwrap_or("*").to_owned(),
    })
}

fn list_functions(pattern: &str, all: bool) -> Outcome {
    let btf = read_btf()?;
    let traceable = read_traceable();
    let mut names: Vec<&str> = btf
        .function_names()
        .filter(|name| glob_match(pattern, name))
        .collect();
    if names.is_empty() {
        return Err(no_match(
            "kernel function",
            pattern,
            btf.function_names(),
            "kspan list",
        ));
    }
    names.sort_unstable();
    let (mut denied, mut untraceable) = (0usize, 0usize);
    let mut listed = 0usize;
    // The functions listed as traced, for the system call to offer.
    let mut traced: Vec<&str> = Vec::new();
    let mut out = BufWriter::new(io::stdout().lock());
    for name in &names {
        let Some(sig) = btf.function(name) else {
            continue;
        };
        let why_not = not_traced(name, traceable.as_ref().ok());
        match why_not {
            Some(NotTraced::Denied(_)) => denied += 1,
            Some(_) => untraceable += 1,
            None => {}
        }
        match why_not {
            None => {
                writeln!(out, "{}", c_signature(&sig))?;
                traced.push(name);
            }
            Some(why) if all => writeln!(out, "{}  // not traced: {why}", c_signature(&sig))?,
            Some(_) => continue,
        }
        listed += 1;
    }
    out.flush()?;

    let mut summary = format!(
        "{} of {} kernel functions match `{pattern}`",
        names.len(),
        btf.function_count()
    );
    let left_out = denied + untraceable;
    if left_out > 0 {
        let mut why: Vec<String> = Vec::new();
        if denied > 0 {
            why.push(format!("{denied} on its deny list"));
        }
        if untraceable > 0 {
            why.push(format!("{untraceable} inlined or notrace"));
        }
        summary.push_str(&format!(
            "; {left_out} of them kspan will not trace ({}){}",
            why.join(", "),
            if all {
                ": marked `// not traced`"
            } else {
                ": left out, `--all` lists them"
            }
        ));
    }
    if let Err(why) = &traceable {
        summary.push_str(&format!(
            "\nnote: {why}; inlined and notrace functions are listed too"
        ));
    }
    if let Some(note) = cannot_trace_note(Mode::Auto, &traced) {
        summary.push('\n');
        summary.push_str(&note);
    }
    report(&summary);
    if listed == 0 {
        return Err(Failure::Failed(format!(
            "every kernel function matching `{pattern}` is one kspan will not trace; `kspan \
             list --all '{pattern}'` shows them with the reason"
        )));
    }
    Ok(())
}

fn list_syscalls(pattern: &str) -> Outcome {
    let names = syscall_names()?;
    let mut matching: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|name| glob_match(pattern, name))
        .collect();
    if matching.is_empty() {
        return Err(no_match(
            "system call",
            pattern,
            names.iter().map(String::as_str),
            "kspan list --syscalls",
        ));
    }
    matching.sort_unstable();
    let mut out = BufWriter::new(io::stdout().lock());
    for name in &matching {
        let path = enter_format_path(name);
        let line = match std::fs::read_to_string(&path) {
            Ok(text) => match kspan::kernel::syscall::parse_enter_format(&text) {
                Some(args) => {
                    let args: Vec<String> = args
                        .iter()
                        .map(|(arg, ctype)| c_declaration(ctype, arg))
                        .collect();
                    let args = if args.is_empty() {
                        "void".to_owned()
                    } else {
                        args.join(", ")
                    };
                    format!("long {name}({args})")
                }
                None => format!("long {name}(?) (cannot parse {})", path.display()),
            },
            Err(e) => format!("long {name}(?) (cannot read {}: {e})", path.display()),
        };
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    report(&format!(
        "{} of {} system calls match `{pattern}`",
        matching.len(),
        names.len()
    ));
    Ok(())
}

/// The error for a pattern that matched nothing, with close names.
fn no_match<'a>(
    what: &str,
    pattern: &str,
    names: impl Iterator<Item = &'a str>,
    command: &str,
) -> Failure {
    let literal: String = pattern
        .chars()
        .filter(|c| !matches!(c, '*' | '?'))
        .collect();
    // A name this kernel lacks may be another kernel's: names alike by
    // their stem too (`filename_unlinkat` for `do_unlinkat`).
    let suggestions = if what == "kernel function" && !has_wildcard(pattern) {
        closest_functions(names, &literal, 5, |_| true)
    } else {
        closest_names(names, &literal, 5)
    };
    let mut message = format!("no {what} matches `{pattern}`");
    if !has_wildcard(pattern) {
        message.push_str(" (a pattern without `*` or `?` matches one name exactly)");
    }
    if suggestions.is_empty() {
        message.push_str(&format!(
            "; `{command} '*{literal}*'` lists names that contain `{literal}`"
        ));
    }
    message.push_str(&did_you_mean(&suggestions));
    Failure::Failed(message)
}
