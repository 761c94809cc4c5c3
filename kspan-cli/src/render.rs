// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The pure half of the `kspan` command: name matching, the Rust types that
//! read kernel types, and the text of signatures and handlers.
//!
//! Nothing here touches the system: every function takes parsed data
//! ([`FuncSignature`] values, names) and returns text, so all of it is tested
//! on hand-built values. `main.rs` does the reading and printing.

use kspan::kernel::btf::{FuncSignature, KernelType, TypeClass};
use kspan::Mode;

/// How many leading arguments of a kernel function a probe can capture: the
/// argument registers the BPF program saves (`kspan_bpf::MAX_ARGS`, which the
/// `kspan` crate does not re-export).
pub const MAX_ARGS: usize = 6;

/// Where rustfmt wraps a line (its default `max_width`): generated handlers
/// are laid out as rustfmt lays them out, so pasting them changes nothing
/// under `cargo fmt`.
pub const MAX_WIDTH: usize = 100;

/// The modes `kspan gen --mode` accepts (a syscall source is `--syscall`).
pub const GEN_MODES: [Mode; 5] = [
    Mode::Auto,
    Mode::Fentry,
    Mode::Fexit,
    Mode::Kprobe,
    Mode::Kretprobe,
];

/// The mode named `name`, among [`GEN_MODES`].
pub fn parse_mode(name: &str) -> Result<Mode, String> {
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

/// Shell-style glob matching of a whole name, and whether a text is a
/// pattern: the library's, so that `kspan list` and
/// `#[kernel_span("vfs_*")]` match the same functions.
pub use kspan::plan::denylist::{glob_match, is_pattern as has_wildcard};

/// Rust's keywords (strict and reserved, through edition 2024): a parameter
/// with one of these names is written as a raw identifier (`r#type`), a
/// handler function gets a `_` appended (`yield_`).
const KEYWORDS: [&str; 52] = [
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
    "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while", "abstract", "become", "box", "do", "final", "macro",
    "override", "priv", "typeof", "unsized", "virtual", "yield", "try", "gen",
];

/// Keywords that cannot be raw identifiers either (`r#self` is an error).
const NOT_RAW: [&str; 5] = ["self", "Self", "super", "crate", "_"];

/// Whether `name` is a Rust keyword.
pub fn is_keyword(name: &str) -> bool {
    KEYWORDS.contains(&name)
}

/// `name` as a Rust identifier: itself, or `r#name` for a keyword (the
/// `kernel_span` macro strips the `r#` when it matches kernel names). An error
/// says why no Rust identifier can spell it.
pub fn rust_ident(name: &str) -> Result<String, String> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric());
    if !valid {
        return Err(format!("`{name}` is not a Rust identifier"));
    }
    if NOT_RAW.contains(&name) {
        return Err(format!(
            "`{name}` cannot be a Rust parameter name, not even as `r#{name}`"
        ));
    }
    Ok(if is_keyword(name) {
        format!("r#{name}")
    } else {
        name.to_owned()
    })
}

/// A name for the handler function (and the probe `static` the macro makes
/// of it; the attribute names the kernel function, so this name is free):
/// the kernel function's name, with anything that cannot be in an identifier
/// replaced by `_`, and a `_` appended to a keyword (`yield_`: the macro
/// cannot take a raw identifier here, it derives another name from it).
pub fn handler_name(function: &str) -> String {
    let mut name: String = function
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    if is_keyword(&name) || NOT_RAW.contains(&name.as_str()) {
        name.push('_');
    }
    name
}

/// [`handler_name`], made different from every parameter's name: a
/// parameter cannot shadow the probe `static` the macro makes of the handler
/// (`fn rseq(rseq: ...)` does not compile), so that becomes `rseq_probe`.
fn unshadowed_name(function: &str, params: &[HandlerParam]) -> String {
    let mut name = handler_name(function);
    while params.iter().any(|p| p.name == name) {
        name.push_str("_probe");
    }
    name
}

/// Whether rustc's `non_snake_case` lint accepts `name`: no uppercase
/// letter, and no `__` once leading and trailing underscores are trimmed.
pub fn is_snake_case(name: &str) -> bool {
    let mut previous_underscore = false;
    name.trim_matches('_').chars().all(|c| {
        let double_underscore = c == '_' && previous_underscore;
        let ok = !c.is_uppercase() && !double_underscore;
        previous_underscore = c == '_';
        ok
    })
}

/// A C type without leading `const` and `volatile` qualifiers.
fn unqualified(c_name: &str) -> &str {
    let mut t = c_name.trim();
    loop {
        match t
            .strip_prefix("const ")
            .or_else(|| t.strip_prefix("volatile "))
        {
            Some(rest) => t = rest.trim_start(),
            None => return t,
        }
    }
}

/// The Rust integer of `bytes` width and signedness: the library's, as
/// its type checks name it.
use kspan::plan::rust_int_type as int_type;

/// The Rust type that captures a value of kernel type `t` from a register:
/// the same width and signedness (`size_t` and `ssize_t` as `usize` and
/// `isize`), `u8`..`u64` for an enum, `bool`, or `*const u8` for any pointer.
///
/// A value no register holds (a struct or array by value, a float, a
/// 128-bit integer) is an error naming the kind of value, for a
/// `// not captured` comment; `returned` words it for a return value.
pub fn rust_type(t: &KernelType, returned: bool) -> Result<&'static str, String> {
    let by_value = if returned {
        "returned by value"
    } else {
        "passed by value"
    };
    let c = &t.c_name;
    match t.class {
        TypeClass::Int { bytes, signed } => match (unqualified(c), bytes, signed) {
            ("size_t", 8, false) => Ok("usize"),
            ("ssize_t", 8, true) => Ok("isize"),
            _ => int_type(bytes, signed)
                .ok_or_else(|| format!("{c}, a {}-bit integer: wider than a register", bytes * 8)),
        },
        TypeClass::Enum { bytes, .. } => int_type(bytes, false)
            .ok_or_else(|| format!("{c}, a {}-bit enum: wider than a register", bytes * 8)),
        TypeClass::Bool => Ok("bool"),
        TypeClass::Pointer => Ok("*const u8"),
        TypeClass::Void => Err("void".to_owned()),
        TypeClass::Float => Err(format!("{c}, floating point, {by_value}")),
        TypeClass::Array { .. } => Err(format!("{c}, an array {by_value}")),
        TypeClass::Aggregate if t.id == 0 => {
            Err(format!("{c}, a type the kernel's BTF does not describe"))
        }
        TypeClass::Aggregate => Err(format!("{c}, {by_value}")),
    }
}

/// A C declaration of `name` with type `c_type`: `size_t count`,
/// `struct file *file` (no space after a `*`), or the bare type if the name
/// is empty.
pub fn c_declaration(c_type: &str, name: &str) -> String {
    let c_type = c_type.trim_end();
    if name.is_empty() {
        c_type.to_owned()
    } else if c_type.ends_with('*') {
        format!("{c_type}{name}")
    } else {
        format!("{c_type} {name}")
    }
}

/// The C signature of `sig`:
/// `ssize_t vfs_read(struct file *file, char *buf, size_t count, loff_t *pos)`.
pub fn c_signature(sig: &FuncSignature) -> String {
    let params = if sig.params.is_empty() {
        "void".to_owned()
    } else {
        sig.params
            .iter()
            .map(|(name, t)| c_declaration(&t.c_name, name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "{}({params})",
        c_declaration(&sig.ret.c_name, sig.name.as_str())
    )
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

/// One parameter of a generated handler.
struct HandlerParam {
    /// The Rust name without `r#`.
    name: String,
    /// `name: Type`, with its `#[capture(...)]` if any.
    text: String,
    /// The C type, for the trailing comment of a long parameter list.
    c_type: String,
}

/// A ready-to-paste handler for `sig`: a doc line with the C signature, a
/// `// not captured: ...` line per kernel parameter (or return value) that
/// no register capture can read, the attribute, and an empty function whose
/// parameters capture everything else (the first [`MAX_ARGS`] parameters at
/// most) and the return value when the mode has one.
///
/// The layout is rustfmt's, so the text is stable under `cargo fmt`: one
/// line when it fits in [`MAX_WIDTH`] columns, else one parameter a line
/// with its C type in an aligned trailing comment.
pub fn render_handler(sig: &FuncSignature, target: Target) -> String {
    let mut skipped: Vec<String> = Vec::new();
    let mut params: Vec<HandlerParam> = Vec::new();
    for (i, (name, t)) in sig.params.iter().enumerate() {
        let c_type = t.c_name.trim_end().to_owned();
        let display = if name.is_empty() {
            format!("parameter {}", i + 1)
        } else {
            name.clone()
        };
        if i >= MAX_ARGS {
            skipped.push(format!(
                "{display} ({c_type}, parameter {}: only the first {MAX_ARGS} can be captured)",
                i + 1
            ));
            continue;
        }
        if name.is_empty() {
            skipped.push(format!(
                "{display} ({c_type}, unnamed in BTF: kspan captures parameters by name)"
            ));
            continue;
        }
        if name == "ret" || name == "span" {
            skipped.push(format!(
                "{name} ({c_type}, `{name}` in a handler is the {})",
                if name == "ret" {
                    "return value"
                } else {
                    "span being built"
                }
            ));
            continue;
        }
        let ident = match rust_ident(name) {
            Ok(ident) => ident,
            Err(why) => {
                skipped.push(format!("{name} ({c_type}, {why})"));
                continue;
            }
        };
        let text = match (target, t.class) {
            (Target::Syscall, TypeClass::Pointer) if t.points_to_char => {
                format!("#[capture(user)] {ident}: &str")
            }
            _ => match rust_type(t, false) {
                Ok(ty) => format!("{ident}: {ty}"),
                Err(why) => {
                    skipped.push(format!("{name} ({why})"));
                    continue;
                }
            },
        };
        params.push(HandlerParam {
            name: name.clone(),
            text,
            c_type,
        });
    }

    let has_return = match target {
        Target::Function(mode) => mode.has_return(),
        Target::Syscall => true,
    };
    if has_return && sig.ret.class != TypeClass::Void {
        let ret = match target {
            // A system call returns `long`, whatever the format says.
            Target::Syscall => Ok("i64"),
            Target::Function(_) => rust_type(&sig.ret, true),
        };
        match ret {
            Ok(ty) => params.push(HandlerParam {
                name: "ret".to_owned(),
                text: format!("ret: {ty}"),
                c_type: sig.ret.c_name.trim_end().to_owned(),
            }),
            Err(why) => skipped.push(format!("ret ({why})")),
        }
    }

    let attribute = attribute(&match target {
        Target::Syscall => vec![format!("syscall = \"{}\"", sig.name)],
        Target::Function(Mode::Auto) => vec![format!("\"{}\"", sig.name)],
        Target::Function(mode) => vec![format!("\"{}\"", sig.name), format!("mode = \"{mode}\"")],
    });
    let doc = match target {
        // The enter format has no return type: a system call returns `long`.
        Target::Syscall => c_signature(&FuncSignature {
            ret: KernelType {
                c_name: "long".to_owned(),
                ..sig.ret.clone()
            },
            ..sig.clone()
        }),
        Target::Function(_) => c_signature(sig),
    };

    let mut out = format!("/// {doc}\n");
    for s in &skipped {
        out.push_str("// not captured: ");
        out.push_str(s);
        out.push('\n');
    }
    out.push_str(&attribute);
    if params.iter().any(|p| !is_snake_case(&p.name)) {
        // Kernel names such as `windowBits` or `skb__nullable` are kept: the
        // macro matches them to the kernel's parameters.
        out.push_str("#[allow(non_snake_case)]\n");
    }
    out.push_str(&function_item(
        &unshadowed_name(&sig.name, &params),
        &params,
    ));
    out
}

/// Widest argument list rustfmt keeps on one line in a function-like
/// attribute with several arguments (its `attr_fn_like_width`).
const ATTR_FN_LIKE_WIDTH: usize = 70;

/// `#[kspan::kernel_span(args)]` laid out as rustfmt does: on one line if it
/// fits (and, with several arguments, they take at most
/// [`ATTR_FN_LIKE_WIDTH`] columns), else one argument a line; rustfmt leaves
/// the line alone when even that does not fit, and so does this.
fn attribute(args: &[String]) -> String {
    let inline = format!("#[kspan::kernel_span({})]\n", args.join(", "));
    let args_width = args.iter().map(String::len).sum::<usize>() + 2 * args.len().saturating_sub(1);
    let fits =
        inline.len() - 1 <= MAX_WIDTH && (args.len() == 1 || args_width <= ATTR_FN_LIKE_WIDTH);
    // `    arg,`: indented, with its comma.
    let tall_fits = args.iter().all(|a| 4 + a.len() < MAX_WIDTH);
    if fits || !tall_fits {
        return inline;
    }
    let mut out = "#[kspan::kernel_span(\n".to_owned();
    for (i, arg) in args.iter().enumerate() {
        let comma = if i + 1 < args.len() { "," } else { "" };
        out.push_str(&format!("    {arg}{comma}\n"));
    }
    out.push_str(")]\n");
    out
}

/// `fn name(params) {}` laid out as rustfmt does with its defaults: on one
/// line if it fits; else with the body's braces on two lines if the rest
/// fits; else one parameter a line, each with its C type in a trailing
/// comment aligned one column after the longest parameter (dropped when a
/// commented line would not fit: the doc line has the C signature anyway).
fn function_item(name: &str, params: &[HandlerParam]) -> String {
    let inline = params
        .iter()
        .map(|p| p.text.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let head = format!("fn {name}({inline}) {{");
    if head.len() < MAX_WIDTH {
        return format!("{head}}}\n");
    }
    if head.len() <= MAX_WIDTH {
        return format!("{head}\n}}\n");
    }
    const INDENT: &str = "    ";
    let items: Vec<String> = params.iter().map(|p| format!("{},", p.text)).collect();
    let width = items.iter().map(String::len).max().unwrap_or(0);
    let commented: Vec<String> = items
        .iter()
        .zip(params)
        .map(|(item, p)| format!("{INDENT}{item:<width$} // {}", p.c_type))
        .collect();
    let lines = if commented.iter().all(|l| l.len() <= MAX_WIDTH) {
        commented
    } else {
        items.iter().map(|item| format!("{INDENT}{item}")).collect()
    };
    let mut out = format!("fn {name}(\n");
    for line in lines {
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(") {\n}\n");
    out
}

/// Why kspan will not trace a function: the library's, as `Kspan::start`
/// decides.
pub use kspan::plan::denylist::{not_traced, NotTraced};

/// Suggestions by edit distance and by the handler's parameters, and how
/// they are offered: the library's, as in its own errors.
pub use kspan::plan::{closest_functions, closest_names, did_you_mean};

/// The names of `--params dfd,name`: the parameters a handler takes, for
/// suggestions of functions that take them too.
pub fn parse_params(text: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = text.split(',').map(|n| n.trim().to_owned()).collect();
    match names
        .iter()
        .find(|n| rust_ident(n).is_err() || n.is_empty())
    {
        Some(bad) => Err(format!(
            "`--params` takes the handler's parameter names, comma-separated (`--params \
             dfd,name`); `{bad}` is not a parameter name"
        )),
        None => Ok(names),
    }
}

/// Whether `sig` has a parameter of each of `names`.
pub fn takes_params(sig: &FuncSignature, names: &[String]) -> bool {
    names
        .iter()
        .all(|wanted| sig.params.iter().any(|(name, _)| name == wanted))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(c_name: &str, bytes: u32, signed: bool) -> KernelType {
        ty(c_name, TypeClass::Int { bytes, signed })
    }

    fn ty(c_name: &str, class: TypeClass) -> KernelType {
        KernelType {
            c_name: c_name.to_owned(),
            class,
            id: 1,
            is_user_pointer: false,
            points_to_char: false,
        }
    }

    fn ptr(c_name: &str) -> KernelType {
        ty(c_name, TypeClass::Pointer)
    }

    fn char_ptr(c_name: &str) -> KernelType {
        KernelType {
            points_to_char: true,
            ..ptr(c_name)
        }
    }

    fn sig(name: &str, ret: KernelType, params: &[(&str, KernelType)]) -> FuncSignature {
        FuncSignature {
            name: name.to_owned(),
            btf_id: 0,
            params: params
                .iter()
                .map(|(n, t)| ((*n).to_owned(), t.clone()))
                .collect(),
            ret,
        }
    }

    fn vfs_read() -> FuncSignature {
        sig(
            "vfs_read",
            int("ssize_t", 8, true),
            &[
                ("file", ptr("struct file *")),
                ("buf", char_ptr("char *")),
                ("count", int("size_t", 8, false)),
                ("pos", ptr("loff_t *")),
            ],
        )
    }

    #[test]
    fn glob_without_wildcards_is_exact() {
        assert!(!has_wildcard("vfs_read"));
        assert!(has_wildcard("vfs_*"));
        assert!(has_wildcard("vfs_rea?"));
        assert!(glob_match("vfs_read", "vfs_read"));
        assert!(!glob_match("vfs_read", "vfs_readv"));
        assert!(!glob_match("vfs_read", "xvfs_read"));
        assert!(!glob_match("", "a"));
        assert!(glob_match("", ""));
    }

    #[test]
    fn keywords_become_raw_identifiers() {
        for k in [
            "type", "ref", "fn", "match", "mod", "move", "struct", "loop", "in", "where", "use",
            "impl", "dyn", "box", "priv", "final", "async", "try", "gen", "yield", "macro",
        ] {
            assert!(is_keyword(k), "{k}");
            assert_eq!(rust_ident(k).unwrap(), format!("r#{k}"));
        }
        for plain in [
            "file", "count", "union", "raw", "safe", "__user", "_x", "types",
        ] {
            assert_eq!(rust_ident(plain).unwrap(), plain);
        }
    }

    #[test]
    fn names_no_raw_identifier_can_spell() {
        for name in ["self", "Self", "super", "crate", "_"] {
            let err = rust_ident(name).unwrap_err();
            assert!(err.contains(&format!("`{name}` cannot be")), "{err}");
        }
        assert!(rust_ident("").is_err());
        assert!(rust_ident("9lives").is_err());
        assert!(rust_ident("foo.isra.0").is_err());
        assert_eq!(handler_name("foo.isra.0"), "foo_isra_0");
        assert_eq!(handler_name("self"), "self_");
        assert_eq!(handler_name("yield"), "yield_");
        assert_eq!(handler_name("_"), "__");
        assert_eq!(handler_name("vfs_read"), "vfs_read");
    }

    #[test]
    fn snake_case_as_rustc_sees_it() {
        for ok in ["count", "__data", "buf_", "_", "", "a_b_c", "x86"] {
            assert!(is_snake_case(ok), "{ok}");
        }
        for not in ["windowBits", "PREV", "S", "skb__nullable", "a__b"] {
            assert!(!is_snake_case(not), "{not}");
        }
        let s = sig(
            "zlib_inflateInit2",
            int("int", 4, true),
            &[
                ("strm", ptr("z_streamp")),
                ("windowBits", int("int", 4, true)),
            ],
        );
        assert_eq!(
            render_handler(&s, Target::Function(Mode::Fentry)),
            "/// int zlib_inflateInit2(z_streamp strm, int windowBits)\n\
             #[kspan::kernel_span(\"zlib_inflateInit2\", mode = \"fentry\")]\n\
             #[allow(non_snake_case)]\n\
             fn zlib_inflateInit2(strm: *const u8, windowBits: i32) {}\n"
        );
    }

    #[test]
    fn integer_types_keep_width_and_sign() {
        let cases = [
            (int("u8", 1, false), "u8"),
            (int("char", 1, true), "i8"),
            (int("short unsigned int", 2, false), "u16"),
            (int("s16", 2, true), "i16"),
            (int("unsigned int", 4, false), "u32"),
            (int("int", 4, true), "i32"),
            (int("long unsigned int", 8, false), "u64"),
            (int("loff_t", 8, true), "i64"),
            (int("size_t", 8, false), "usize"),
            (int("ssize_t", 8, true), "isize"),
            (int("const size_t", 8, false), "usize"),
        ];
        for (t, want) in cases {
            assert_eq!(rust_type(&t, false).unwrap(), want, "{}", t.c_name);
        }
        // A typedef name alone does not decide: the width and sign do.
        assert_eq!(rust_type(&int("size_t", 4, false), false).unwrap(), "u32");
        let err = rust_type(&int("__int128 unsigned", 16, false), false).unwrap_err();
        assert!(err.contains("128-bit"), "{err}");
    }

    #[test]
    fn other_types() {
        let e = |bytes| {
            ty(
                "enum pid_type",
                TypeClass::Enum {
                    bytes,
                    signed: false,
                },
            )
        };
        assert_eq!(rust_type(&e(4), false).unwrap(), "u32");
        assert_eq!(rust_type(&e(8), false).unwrap(), "u64");
        assert_eq!(rust_type(&e(1), false).unwrap(), "u8");
        assert_eq!(
            rust_type(&ty("bool", TypeClass::Bool), false).unwrap(),
            "bool"
        );
        assert_eq!(
            rust_type(&ptr("struct file *"), false).unwrap(),
            "*const u8"
        );
        assert_eq!(rust_type(&char_ptr("char *"), false).unwrap(), "*const u8");
        assert_eq!(
            rust_type(&ty("struct foo", TypeClass::Aggregate), false).unwrap_err(),
            "struct foo, passed by value"
        );
        assert_eq!(
            rust_type(&ty("pte_t", TypeClass::Aggregate), true).unwrap_err(),
            "pte_t, returned by value"
        );
        assert!(rust_type(&ty("double", TypeClass::Float), false)
            .unwrap_err()
            .contains("floating point"));
        let array = TypeClass::Array {
            elem_bytes: 1,
            len: 16,
            elem_is_char: true,
        };
        assert!(rust_type(&ty("char[16]", array), false)
            .unwrap_err()
            .contains("array"));
    }

    #[test]
    fn c_signatures() {
        assert_eq!(
            c_signature(&vfs_read()),
            "ssize_t vfs_read(struct file *file, char *buf, size_t count, loff_t *pos)"
        );
        assert_eq!(
            c_signature(&sig("get_task", ptr("struct task_struct *"), &[])),
            "struct task_struct *get_task(void)"
        );
        assert_eq!(
            c_signature(&sig(
                "f",
                ty("void", TypeClass::Void),
                &[("", int("int", 4, true))]
            )),
            "void f(int)"
        );
        assert_eq!(
            c_declaration("const char * ", "filename"),
            "const char *filename"
        );
    }

    #[test]
    fn renders_the_vfs_read_handler() {
        assert_eq!(
            render_handler(&vfs_read(), Target::Function(Mode::Auto)),
            "/// ssize_t vfs_read(struct file *file, char *buf, size_t count, loff_t *pos)\n\
             #[kspan::kernel_span(\"vfs_read\")]\n\
             fn vfs_read(file: *const u8, buf: *const u8, count: usize, pos: *const u8, ret: isize) {}\n"
        );
    }

    #[test]
    fn the_mode_decides_ret_and_is_written_unless_auto() {
        for (mode, has_ret) in [
            (Mode::Fexit, true),
            (Mode::Kretprobe, true),
            (Mode::Fentry, false),
            (Mode::Kprobe, false),
        ] {
            let text = render_handler(&vfs_read(), Target::Function(mode));
            assert!(
                text.contains(&format!(
                    "#[kspan::kernel_span(\"vfs_read\", mode = \"{mode}\")]"
                )),
                "{text}"
            );
            assert_eq!(text.contains("ret: isize"), has_ret, "{text}");
        }
        let void = sig(
            "kfree",
            ty("void", TypeClass::Void),
            &[("objp", ptr("const void *"))],
        );
        assert!(render_handler(&void, Target::Function(Mode::Auto))
            .ends_with("#[kspan::kernel_span(\"kfree\")]\nfn kfree(objp: *const u8) {}\n"));
    }

    #[test]
    fn keyword_parameters_are_raw() {
        let s = sig(
            "f",
            int("int", 4, true),
            &[("type", int("int", 4, true)), ("ref", ptr("void *"))],
        );
        assert!(render_handler(&s, Target::Function(Mode::Fentry))
            .contains("fn f(r#type: i32, r#ref: *const u8) {}"));
    }

    #[test]
    fn what_cannot_be_captured_is_named() {
        let s = sig(
            "f",
            ty("pte_t", TypeClass::Aggregate),
            &[
                ("foo", ty("struct foo", TypeClass::Aggregate)),
                ("self", ptr("struct s *")),
                ("ret", int("int", 4, true)),
                ("", int("int", 4, true)),
                ("flag", ty("bool", TypeClass::Bool)),
                (
                    "kind",
                    ty(
                        "enum k",
                        TypeClass::Enum {
                            bytes: 4,
                            signed: true,
                        },
                    ),
                ),
                ("seventh", int("long int", 8, true)),
                ("eighth", ptr("void *")),
            ],
        );
        assert_eq!(
            render_handler(&s, Target::Function(Mode::Auto)),
            "/// pte_t f(struct foo foo, struct s *self, int ret, int, bool flag, enum k kind, \
             long int seventh, void *eighth)\n\
             // not captured: foo (struct foo, passed by value)\n\
             // not captured: self (struct s *, `self` cannot be a Rust parameter name, not even as `r#self`)\n\
             // not captured: ret (int, `ret` in a handler is the return value)\n\
             // not captured: parameter 4 (int, unnamed in BTF: kspan captures parameters by name)\n\
             // not captured: seventh (long int, parameter 7: only the first 6 can be captured)\n\
             // not captured: eighth (void *, parameter 8: only the first 6 can be captured)\n\
             // not captured: ret (pte_t, returned by value)\n\
             #[kspan::kernel_span(\"f\")]\n\
             fn f(flag: bool, kind: u32) {}\n"
        );
    }

    #[test]
    fn syscall_sources_read_strings_from_user_memory() {
        let s = sig(
            "openat",
            int("long int", 8, true),
            &[
                ("dfd", int("int", 4, true)),
                ("filename", char_ptr("const char *")),
                ("flags", int("int", 4, true)),
                ("mode", int("umode_t", 2, false)),
            ],
        );
        assert_eq!(
            render_handler(&s, Target::Syscall),
            "/// long openat(int dfd, const char *filename, int flags, umode_t mode)\n\
             #[kspan::kernel_span(syscall = \"openat\")]\n\
             fn openat(dfd: i32, #[capture(user)] filename: &str, flags: i32, mode: u16, ret: i64) {}\n"
        );
        let socket = sig(
            "socket",
            int("long", 8, true),
            &[
                ("family", int("int", 4, true)),
                ("type", int("int", 4, true)),
                ("protocol", int("int", 4, true)),
                ("addr", ptr("struct sockaddr *")),
            ],
        );
        assert!(render_handler(&socket, Target::Syscall).contains(
            "fn socket(family: i32, r#type: i32, protocol: i32, addr: *const u8, ret: i64) {}"
        ));
    }

    /// Each case is what `rustfmt --edition 2021` printed for it.
    #[test]
    fn long_parameter_lists_are_laid_out_as_rustfmt_does() {
        let p = |text: &str, c: &str| HandlerParam {
            name: text.split(':').next().unwrap_or_default().to_owned(),
            text: text.to_owned(),
            c_type: c.to_owned(),
        };
        // 100 columns: one line.
        let fits = [
            p("sk: *const u8", "struct sock *"),
            p("msg: *const u8", "struct msghdr *"),
            p("size: usize", "size_t"),
            p("aaaaaaaaaaaaaaaaaaaaaaa: u8", "u8"),
            p("ret: i32", "int"),
        ];
        let one = function_item("tcp_sendmsg", &fits);
        assert_eq!(one.trim_end().len(), 100);
        assert!(one.ends_with(" ret: i32) {}\n"));
        // 101: the body's braces go on two lines.
        let mut braces = fits;
        braces[3] = p("aaaaaaaaaaaaaaaaaaaaaaaa: u8", "u8");
        assert!(function_item("tcp_sendmsg", &braces).ends_with(" ret: i32) {\n}\n"));
        // Longer: one parameter a line, C types aligned.
        let mut tall = braces;
        tall[3] = p("aaaaaaaaaaaaaaaaaaaaaaaaaa: u8", "u8");
        assert_eq!(
            function_item("tcp_sendmsg", &tall),
            "fn tcp_sendmsg(\n    \
             sk: *const u8,                  // struct sock *\n    \
             msg: *const u8,                 // struct msghdr *\n    \
             size: usize,                    // size_t\n    \
             aaaaaaaaaaaaaaaaaaaaaaaaaa: u8, // u8\n    \
             ret: i32,                       // int\n\
             ) {\n}\n"
        );
    }

    #[test]
    fn suggestions() {
        let names = ["vfs_read", "vfs_readv", "vfs_write", "ksys_read", "x"];
        assert_eq!(
            closest_names(names.iter().copied(), "vfs_raed", 3),
            ["vfs_read"]
        );
        assert_eq!(
            closest_names(names.iter().copied(), "vfs_reed", 3),
            ["vfs_read", "vfs_readv"]
        );
        assert!(closest_names(names.iter().copied(), "completely_else", 3).is_empty());
        assert_eq!(
            did_you_mean(&["a".to_owned(), "b".to_owned()]),
            "; did you mean `a`, `b`?"
        );
        assert_eq!(did_you_mean(&[]), "");
    }

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
