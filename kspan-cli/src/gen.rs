// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `kspan gen`: a ready-to-paste `#[kspan::kernel_span]` handler for a
//! kernel function (from BTF) or a system call (from its tracepoint
//! format). This file reads the system and prints; what the handler says
//! is decided by pure code, tested on hand-built types: [`capture`] (the
//! Rust name and type of each kernel value, buffers, what a call
//! releases), [`fields`] (the struct fields to suggest) and [`handler`]
//! (the text, laid out as rustfmt lays it out).

pub mod capture;
pub mod fields;
pub mod handler;

use std::io;

use kspan::kernel::btf::{Btf, FuncSignature};
use kspan::Mode;

use crate::common::{
    closest_functions, closest_names, did_you_mean, enter_format_path, has_wildcard, not_traced,
    print, read_btf, read_traceable, report, syscall_names, Failure, Outcome,
};
use crate::doctor::cannot_trace_note;
use capture::{rust_ident, MAX_ARGS};
use handler::{render_handler, TypeHints};

/// `kspan gen`'s arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GenArgs {
    /// `kspan gen --syscall NAME`.
    Syscall(String),
    /// `kspan gen FUNCTION [--mode MODE] [--params NAMES]`.
    Function {
        /// The kernel function.
        name: String,
        /// The mode (`auto` when not given).
        mode: Mode,
        /// The handler's parameter names, for suggestions.
        params: Vec<String>,
    },
}

/// `kspan gen`, with its arguments.
pub fn run(args: GenArgs) -> Outcome {
    match args {
        GenArgs::Syscall(name) => generate_syscall(&name),
        GenArgs::Function { name, mode, params } => generate_function(&name, mode, &params),
    }
}

/// Reads `kspan gen`'s arguments (after `gen`).
pub fn parse(args: &[String]) -> Result<GenArgs, Failure> {
    let mut mode: Option<Mode> = None;
    let mut params: Option<Vec<String>> = None;
    let mut syscall = false;
    let mut name: Option<&str> = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let arg = arg.as_str();
        if arg == "--params" || arg.starts_with("--params=") {
            let value = match arg.strip_prefix("--params=") {
                Some(value) => value,
                None => rest.next().map(String::as_str).ok_or_else(|| {
                    Failure::Usage(
                        "`--params` needs the handler's parameter names, e.g. `--params dfd,name`"
                            .to_owned(),
                    )
                })?,
            };
            if params.is_some() {
                return Err(Failure::Usage("`--params` is given twice".to_owned()));
            }
            params = Some(parse_params(value).map_err(Failure::Usage)?);
        } else if arg == "--mode" || arg.starts_with("--mode=") {
            let value = match arg.strip_prefix("--mode=") {
                Some(value) => value,
                None => rest.next().map(String::as_str).ok_or_else(|| {
                    Failure::Usage(
                        "`--mode` needs a value: auto, fentry, fexit, kprobe or kretprobe"
                            .to_owned(),
                    )
                })?,
            };
            if mode.is_some() {
                return Err(Failure::Usage("`--mode` is given twice".to_owned()));
            }
            mode = Some(parse_mode(value).map_err(Failure::Usage)?);
        } else if arg == "--syscall" {
            syscall = true;
        } else if arg.starts_with('-') && arg.len() > 1 {
            return Err(Failure::Usage(format!(
                "unknown option `{arg}` for `kspan gen`: the options are `--mode MODE`, \
                 `--params NAMES` and `--syscall`"
            )));
        } else if let Some(first) = name {
            return Err(Failure::Usage(format!(
                "`kspan gen` takes one name, got `{first}` and `{arg}`"
            )));
        } else {
            name = Some(arg);
        }
    }
    let Some(name) = name else {
        return Err(Failure::Usage(if syscall {
            "`kspan gen --syscall` needs a system call name, e.g. `kspan gen --syscall openat`"
                .to_owned()
        } else {
            "`kspan gen` needs a kernel function name, e.g. `kspan gen vfs_read`".to_owned()
        }));
    };
    if has_wildcard(name) {
        return Err(Failure::Usage(format!(
            "`kspan gen` takes one name, not a pattern (`{name}`); find names with `kspan list{} \
             '{name}'`",
            if syscall { " --syscalls" } else { "" }
        )));
    }
    if syscall {
        if params.is_some() {
            return Err(Failure::Usage(
                "`--params` chooses among kernel functions; a system call keeps its name: \
                 remove `--params`"
                    .to_owned(),
            ));
        }
        if mode.is_some() {
            return Err(Failure::Usage(
                "a syscall source has its own mode (the syscall's tracepoints): remove `--mode`"
                    .to_owned(),
            ));
        }
        Ok(GenArgs::Syscall(name.to_owned()))
    } else {
        Ok(GenArgs::Function {
            name: name.to_owned(),
            mode: mode.unwrap_or(Mode::Auto),
            params: params.unwrap_or_default(),
        })
    }
}

fn generate_function(name: &str, mode: Mode, params: &[String]) -> Outcome {
    let btf = read_btf()?;
    let Some(sig) = btf.function(name) else {
        let mut message = format!(
            "unknown kernel function `{name}`: the kernel's BTF ({}) describes no function of \
             that name",
            kspan::KERNEL_BTF,
        );
        if enter_format_path(name).exists() {
            message.push_str(&format!(
                "; `{name}` is a system call: `kspan gen --syscall {name}`"
            ));
        }
        let takes = |f: &str| {
            btf.function(f)
                .is_some_and(|sig| takes_params(&sig, params))
        };
        let suggestions = closest_functions(btf.function_names(), name, 3, takes);
        message.push_str(&format!(
            "; `kspan list '*{name}*'` lists the functions whose names contain it{}",
            did_you_mean(&suggestions)
        ));
        if let Some(first) = suggestions
            .first()
            .filter(|f| !params.is_empty() && takes(f))
        {
            message.push_str(&format!(
                "\n`{first}` takes `{}`: `kspan gen {first}`; where other kernels have \
                 `{name}`, one probe traces whichever the kernel has: \
                 `#[kspan::kernel_span(\"{name}\" | \"{first}\")]`",
                params.join("`, `")
            ));
        }
        return Err(Failure::Failed(message));
    };
    if let Some(why) = not_traced(name, read_traceable().as_ref().ok()) {
        return Err(Failure::Failed(format!(
            "`{name}` is {why}; kspan refuses a probe on it at start: trace a caller or a \
             callee instead (`kspan list '{name}*'` lists the functions it traces)"
        )));
    }
    let hints = type_hints(&btf, &sig);
    print(&render_handler(&sig, Target::Function(mode), &hints))?;
    if let Some(note) = cannot_trace_note(mode, &[name]) {
        report(&format!("kspan: {note}"));
    }
    Ok(())
}

/// What `gen` tells of `sig`'s types besides their names: whether this BTF
/// marks user pointers, and the field captures suggested for each struct
/// pointer, each one resolved as `Kspan::start` resolves a path (so only
/// paths the library accepts are printed).
fn type_hints(btf: &Btf, sig: &FuncSignature) -> TypeHints {
    use kspan::plan::fieldpath;
    let resolves = |path: &str| {
        fieldpath::parse(path).is_ok_and(|p| fieldpath::resolve(btf, &sig.name, &p).is_ok())
    };
    TypeHints {
        user_tags: btf.has_user_tags(),
        fields: sig
            .params
            .iter()
            .take(MAX_ARGS)
            .map(|(name, t)| {
                let fields: Vec<_> = fields::field_captures(btf, name, t)
                    .into_iter()
                    .filter(|f| resolves(&f.path))
                    .collect();
                (name.clone(), fields)
            })
            .filter(|(_, fields)| !fields.is_empty())
            .collect(),
    }
}

fn generate_syscall(name: &str) -> Outcome {
    let path = enter_format_path(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let names = syscall_names()?;
            let mut suggestions = closest_names(names.iter().map(String::as_str), name, 3);
            for prefix in [
                "sys_enter_",
                "__x64_sys_",
                "__arm64_sys_",
                "__se_sys_",
                "sys_",
            ] {
                if let Some(bare) = name.strip_prefix(prefix) {
                    if names.iter().any(|n| n == bare) && !suggestions.iter().any(|s| s == bare) {
                        suggestions.insert(0, bare.to_owned());
                    }
                }
            }
            return Err(Failure::Failed(format!(
                "unknown system call `{name}`: there is no tracepoint format {}; `kspan list \
                 --syscalls` lists the system calls{}",
                path.display(),
                did_you_mean(&suggestions)
            )));
        }
        Err(e) => {
            return Err(Failure::Failed(format!(
                "cannot read {}: {e}{}",
                path.display(),
                if e.kind() == io::ErrorKind::PermissionDenied {
                    "; run as root"
                } else {
                    ""
                }
            )))
        }
    };
    let btf = read_btf()?;
    let sig = kspan::kernel::syscall::signature(&btf, name, &text).ok_or_else(|| {
        Failure::Failed(format!(
            "cannot parse {}: it is not a `sys_enter_*` tracepoint format (no `__syscall_nr` \
             field)",
            path.display()
        ))
    })?;
    // Field paths are not supported on syscall sources, and their `char`
    // pointers are user strings whatever BTF says.
    let hints = TypeHints::default();
    print(&render_handler(&sig, Target::Syscall, &hints))
}

/// The modes `kspan gen --mode` accepts (a syscall source is `--syscall`).
pub const GEN_MODES: [Mode; 5] = [
    Mode::Auto,
    Mode::Fentry,
    Mode::Fexit,
    Mode::Kprobe,
    Mode::Kretprobe,
];

/// The mode named `name`, among [`GEN_MODES`].
fn parse_mode(name: &str) -> Result<Mode, String> {
    if name == Mode::Syscall.as_str() {
        return Err(
            "`syscall` is not a mode of a kernel function: generate a syscall source with \
             `kspan gen --syscall NAME`"
                .to_owned(),
        );
    }
    GEN_MODES
        .into_iter()
        .find(|m| m.as_str() == name)
        .ok_or_else(|| {
            format!(
                "unknown mode `{name}`: use one of {}",
                GEN_MODES
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// What a generated handler attaches to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A kernel function from BTF, in a mode among [`GEN_MODES`].
    Function(Mode),
    /// A system call's tracepoints (`#[kernel_span(syscall = "...")]`): its
    /// pointers are user memory, and `char` pointers are read as strings.
    Syscall,
}

/// The names of `--params dfd,name`: the parameters a handler takes, for
/// suggestions of functions that take them too.
fn parse_params(text: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = text.split(',').map(|n| n.trim().to_owned()).collect();
    let usage = "`--params` takes the handler's parameter names, comma-separated (`--params \
                 dfd,name`)";
    match names
        .iter()
        .find(|n| rust_ident(n).is_err() || n.is_empty())
    {
        Some(bad) if bad.is_empty() => Err(format!(
            "{usage}; a name is empty (nothing given, or a comma with no name after or before it)"
        )),
        Some(bad) => Err(format!("{usage}; `{bad}` is not a parameter name")),
        None => Ok(names),
    }
}

/// Whether `sig` has a parameter of each of `names`.
fn takes_params(sig: &FuncSignature, names: &[String]) -> bool {
    names
        .iter()
        .all(|wanted| sig.params.iter().any(|(name, _)| name == wanted))
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{int, ty};
    use kspan::kernel::btf::TypeClass;

    #[test]
    fn parameters_for_suggestions() {
        assert_eq!(
            parse_params("dfd,name"),
            Ok(vec!["dfd".into(), "name".into()])
        );
        assert_eq!(parse_params(" dfd "), Ok(vec!["dfd".into()]));
        for bad in ["", "dfd,", "1x", "a b"] {
            let err = parse_params(bad).unwrap_err();
            assert!(err.contains("comma-separated"), "{bad}: {err}");
        }
        // Found by `any_params_are_read_or_the_bad_one_named`: an empty
        // name was named as ``.
        for empty in ["", "dfd,", ",dfd", "a,,b", " "] {
            let err = parse_params(empty).unwrap_err();
            assert!(
                err.ends_with(
                    "; a name is empty (nothing given, or a comma with no name after or before it)"
                ),
                "{empty:?}: {err}"
            );
        }
        assert!(parse_params("1x")
            .unwrap_err()
            .ends_with("; `1x` is not a parameter name"));
        let unlink = FuncSignature {
            name: "filename_unlinkat".into(),
            btf_id: 1,
            params: vec![
                ("dfd".into(), int("int", 4, true)),
                ("name".into(), ty("struct filename *", TypeClass::Pointer)),
            ],
            ret: int("int", 4, true),
        };
        assert!(takes_params(&unlink, &["name".into(), "dfd".into()]));
        assert!(takes_params(&unlink, &[]));
        assert!(!takes_params(&unlink, &["dfd".into(), "flag".into()]));
    }

    #[test]
    fn modes() {
        assert_eq!(parse_mode("auto"), Ok(Mode::Auto));
        assert_eq!(parse_mode("kretprobe"), Ok(Mode::Kretprobe));
        assert!(parse_mode("syscall").unwrap_err().contains("--syscall"));
        let err = parse_mode("fexti").unwrap_err();
        assert!(err.contains("`fexti`") && err.contains("`fexit`"), "{err}");
    }
}
