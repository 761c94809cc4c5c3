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

/// Whether `t` is spelled `char *` or `const char *`: a C string (plain
/// `char`, not `u8` or `unsigned char`, which are as often bytes; a typedef
/// of a `char *` keeps its own name and is not one either).
fn is_char_pointer(t: &KernelType) -> bool {
    t.class == TypeClass::Pointer
        && t.points_to_char
        && t.c_name
            .trim_end()
            .strip_suffix('*')
            .is_some_and(|pointee| unqualified(pointee) == "char")
}

/// Names of an integer parameter that gives a buffer's size.
const SIZE_NAMES: [&str; 11] = [
    "count", "len", "length", "size", "nbytes", "bufsiz", "bufsize", "buflen", "buf_len",
    "buf_size", "nr_bytes",
];

/// A parameter that is a byte buffer ([`buffer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buffer {
    /// The parameter that gives its size (`count`).
    pub size: String,
    /// Whether the call returns how many of its bytes it used: a buffer
    /// the call may write (a pointer to non-`const`) of a function that
    /// returns a signed 64-bit count (`ssize_t`, `long`; every system
    /// call). Then `len = "ret"` reads the bytes the call produced.
    pub counted_by_ret: bool,
}

/// Whether parameter `i` of `sig` is a byte buffer rather than a string: a
/// `char *` or `void *` (one-byte integers included) with `buf` in its name
/// (`buf`, `ubuf`, `buff`), and an integer parameter that gives its size
/// ([`SIZE_NAMES`]) among the first [`MAX_ARGS`]. Read up to a NUL, a
/// buffer would give whatever precedes its first zero byte; as `&[u8]` with
/// `len` it gives its bytes. A `char *` of another name stays a string.
pub fn buffer(sig: &FuncSignature, i: usize, target: Target) -> Option<Buffer> {
    let (name, t) = sig.params.get(i)?;
    let pointee = t.c_name.trim_end().strip_suffix('*')?;
    let bytes = t.points_to_char || unqualified(pointee) == "void";
    if i >= MAX_ARGS
        || t.class != TypeClass::Pointer
        || !bytes
        || !name.to_ascii_lowercase().contains("buf")
    {
        return None;
    }
    let size = sig
        .params
        .iter()
        .take(MAX_ARGS)
        .find(|(n, t)| {
            matches!(t.class, TypeClass::Int { .. }) && SIZE_NAMES.contains(&n.as_str())
        })?
        .0
        .clone();
    let writable = !pointee.split_whitespace().any(|w| w == "const");
    let returns_count = match target {
        Target::Syscall => true,
        Target::Function(_) => matches!(
            sig.ret.class,
            TypeClass::Int {
                bytes: 8,
                signed: true
            }
        ),
    };
    Some(Buffer {
        size,
        counted_by_ret: writable && returns_count,
    })
}

/// The system calls that kernel function `function` may serve, by its
/// name, likeliest first: `read` for `vfs_read` and `ksys_read`,
/// `openat2` for `do_sys_openat2`. Whether each is one is for the caller
/// to check (its tracepoint).
pub fn syscalls_for(function: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for prefix in [
        "__x64_sys_",
        "__arm64_sys_",
        "__ia32_sys_",
        "__se_sys_",
        "__do_sys_",
        "__sys_",
        "ksys_",
        "do_sys_",
        "sys_",
        "vfs_",
        "do_",
        "",
    ] {
        if let Some(name) = function.strip_prefix(prefix).filter(|n| !n.is_empty()) {
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
    }
    names
}

/// Largest array suggested as `[u8; N]`: bigger ones take much of a
/// call's 1024 bytes of strings and buffers.
pub const MAX_ARRAY_BYTES: u32 = 64;

/// A member of a parameter's struct suggested as a field-path capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldCapture {
    /// The path from the parameter, as the DSL spells it
    /// (`file->f_path.dentry->d_name.name`).
    pub path: String,
    /// The last member's name, which names the capture unless taken.
    pub member: String,
    /// The member's type.
    pub ty: KernelType,
}

/// The Rust type that captures a struct member of type `t` by a field
/// path: `&str` for a `char *` (of any one-byte integer: it is read up to
/// its NUL) or a `char` array, `[u8; N]` for another array of `N` bytes (1
/// to [`MAX_ARRAY_BYTES`]), the register type ([`rust_type`]) for an
/// integer, enum or `bool`; `None` for anything else (other pointers are
/// addresses, structs are reached by a longer path).
pub fn field_type(t: &KernelType) -> Option<String> {
    match t.class {
        TypeClass::Pointer => t.points_to_char.then(|| "&str".to_owned()),
        TypeClass::Array {
            elem_bytes, len, ..
        } => {
            let elem = t.c_name.split('[').next().unwrap_or_default();
            if len > 0 && unqualified(elem) == "char" {
                Some("&str".to_owned())
            } else {
                let bytes = elem_bytes.checked_mul(len)?;
                (1..=MAX_ARRAY_BYTES)
                    .contains(&bytes)
                    .then(|| format!("[u8; {bytes}]"))
            }
        }
        TypeClass::Int { .. } | TypeClass::Enum { .. } | TypeClass::Bool => {
            rust_type(t, false).ok().map(str::to_owned)
        }
        _ => None,
    }
}

/// What `gen` knows of a signature's types beyond the signature, from the
/// rest of the kernel's BTF.
#[derive(Debug, Clone, Default)]
pub struct TypeHints {
    /// Whether the kernel's BTF has `user` type tags (`__user`): without
    /// them, a `char *` may be user memory and nothing says so.
    pub user_tags: bool,
    /// The field captures suggested for each parameter, by name.
    pub fields: Vec<(String, Vec<FieldCapture>)>,
}

/// Words in a function's name that say it releases what it is given.
const RELEASE_WORDS: [&str; 6] = ["free", "put", "release", "destroy", "unlink", "close"];

/// Words that contain one of [`RELEASE_WORDS`] and mean something else.
const NOT_RELEASE: [&str; 6] = ["input", "output", "throughput", "puts", "putc", "putchar"];

/// The word of [`RELEASE_WORDS`] that function `name` has, at the start or
/// end of one of its `_`-separated words (`kfree`, `putname`, `filp_close`,
/// `vfs_unlink`; not `input_event` or `freeze_super`).
pub fn release_word(name: &str) -> Option<&'static str> {
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !NOT_RELEASE.contains(w) && !w.starts_with("freez"))
        .find_map(|w| {
            RELEASE_WORDS
                .into_iter()
                .find(|r| w.starts_with(r) || w.ends_with(r))
        })
}

/// The struct or union tag of a pointer type's C name (`filename` for
/// `struct filename *`).
fn pointee_tag(c_name: &str) -> Option<&str> {
    let pointee = unqualified(c_name.trim_end().strip_suffix('*')?).trim_end();
    pointee
        .strip_prefix("struct ")
        .or_else(|| pointee.strip_prefix("union "))
}

/// The parameters (indices into `sig.params`) whose memory `sig` may
/// release, by its name ([`release_word`]): among its named pointer
/// parameters that a probe can capture, those whose name or struct tag is
/// in the function's name (`filp` of `filp_close`, `name` of `putname`),
/// else all of them (`object` of `kfree`; `vfs_unlink`'s four).
pub fn released_params(sig: &FuncSignature) -> Vec<usize> {
    if release_word(&sig.name).is_none() {
        return Vec::new();
    }
    let pointers: Vec<usize> = sig
        .params
        .iter()
        .enumerate()
        .take(MAX_ARGS)
        .filter(|(_, (name, t))| t.class == TypeClass::Pointer && rust_ident(name).is_ok())
        .map(|(i, _)| i)
        .collect();
    let mentioned = |word: &str| word.len() >= 3 && sig.name.contains(word);
    let named: Vec<usize> = pointers
        .iter()
        .copied()
        .filter(|&i| {
            let (name, t) = &sig.params[i];
            mentioned(name) || pointee_tag(&t.c_name).is_some_and(mentioned)
        })
        .collect();
    if named.is_empty() {
        pointers
    } else {
        named
    }
}

/// `name` as a free capture name: lowercase, with no `__` after its
/// leading underscores (the `non_snake_case` lint's rules).
fn snake(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    let lead = lower.len() - lower.trim_start_matches('_').len();
    let mut out = lower[..lead].to_owned();
    for c in lower[lead..].chars() {
        if c == '_' && out.len() > lead && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    out
}

/// A Rust name for a field capture of `param`: the member's, else
/// `param_member`, else numbered; one of `taken` never, and added to it.
fn capture_name(member: &str, param: &str, taken: &mut Vec<String>) -> Option<String> {
    let member = snake(member);
    let both = snake(&format!("{param}_{member}"));
    let numbered = (2..10).map(|n| format!("{both}_{n}"));
    let name = [member, both.clone()]
        .into_iter()
        .chain(numbered)
        .find(|n| rust_ident(n).is_ok() && is_snake_case(n) && !taken.iter().any(|t| t == n))?;
    taken.push(name.clone());
    rust_ident(&name).ok()
}

/// `#[capture(a, b)] ` for the options, or nothing without options.
fn capture_attribute(options: &[String]) -> String {
    if options.is_empty() {
        String::new()
    } else {
        format!("#[capture({})] ", options.join(", "))
    }
}

/// The `at = "entry"` option, as the DSL spells it.
const AT_ENTRY: &str = "at = \"entry\"";

/// `a`, `a` and `b`, `a`, `b` and `c`.
fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
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
/// no register capture can read, comment lines of advice (below), the
/// attribute, and an empty function whose parameters capture everything
/// else (the first [`MAX_ARGS`] parameters at most) and the return value
/// when the mode has one.
///
/// Parameters are typed as the capture checker accepts them: integers of
/// the same width and signedness, `&str` for a `char *` of a kernel
/// function (`#[capture(user)]` when BTF marks it `__user`; a syscall
/// source's `char` pointers are always user strings), `&[u8]` for a
/// buffer ([`buffer`]: `#[capture(user, len = "ret")] buf: &[u8]` for
/// `vfs_read`'s `char __user *buf`, `len` naming its size parameter where
/// the return value does not count its bytes), `*const u8` for other
/// pointers. The advice, each a `//` line:
///
/// * `at entry:` when the function's name says it releases a parameter
///   ([`released_params`]) and the mode reads at exit: what it points to
///   is read with `at = "entry"`, which its `&str` and suggested captures
///   then carry;
/// * for a `char *` or a buffer where BTF has no `user` tags
///   ([`TypeHints::user_tags`]): it stays a pointer, and the kernel and
///   `#[capture(user)]` forms to write are both given, since which memory
///   it is cannot be known here and a read of the wrong one reads nothing;
/// * for a buffer the call fills, in a mode without a return value: that
///   it holds nothing yet at entry;
/// * for a pointer to a struct: the field captures of
///   [`TypeHints::fields`], each a line to paste into the parameter list
///   (`#[capture(path = "how->flags")] flags: u64,`), named after the
///   member unless a parameter or another suggestion has that name.
///
/// The layout is rustfmt's, so the text is stable under `cargo fmt`: one
/// line when it fits in [`MAX_WIDTH`] columns, else one parameter a line
/// with its C type in an aligned trailing comment. Comment lines are left
/// as long as they are, as rustfmt leaves them.
pub fn render_handler(sig: &FuncSignature, target: Target, hints: &TypeHints) -> String {
    let reads_at_exit = match target {
        Target::Function(mode) => mode.has_return(),
        Target::Syscall => false,
    };
    let has_return = match target {
        Target::Function(mode) => mode.has_return(),
        Target::Syscall => true,
    };
    let released: Vec<usize> = if reads_at_exit {
        released_params(sig)
    } else {
        Vec::new()
    };
    let mut skipped: Vec<String> = Vec::new();
    let mut params: Vec<HandlerParam> = Vec::new();
    // (parameter, its notes), in the parameters' order.
    let mut notes: Vec<(usize, String)> = Vec::new();
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
        let entry = released.contains(&i);
        // A buffer whose used bytes `ret` counts is read at exit, so not
        // where the function releases it: that one stays a string.
        if let Some(b) = buffer(sig, i, target).filter(|b| !(entry && b.counted_by_ret)) {
            let mut options: Vec<String> = Vec::new();
            let len = if b.counted_by_ret { "ret" } else { &b.size };
            let len = format!("len = \"{len}\"");
            let mut text = None;
            if b.counted_by_ret && !has_return {
                // Nothing is in it yet at entry, whose memory is whatever
                // it held before the call.
                notes.push((
                    i,
                    format!(
                        "// `{name}` is a buffer `{}` fills (of up to `{}` bytes): at entry it \
                         holds nothing yet; a mode with a return value reads what the call \
                         put there, with `{len}`\n",
                        sig.name, b.size
                    ),
                ));
            } else if target == Target::Syscall || t.is_user_pointer {
                options.extend(["user".to_owned(), len]);
            } else if hints.user_tags {
                options.push(len);
            } else {
                // Kernel or user memory cannot be told here, and a kernel
                // read of a user buffer reads nothing: the pointer stays,
                // both forms are offered.
                let mut user = vec!["user".to_owned(), len.clone()];
                let mut kernel = vec![len];
                if entry {
                    user.push(AT_ENTRY.to_owned());
                    kernel.push(AT_ENTRY.to_owned());
                }
                notes.push((
                    i,
                    format!(
                        "// `{name}` is a buffer of {}`{}` bytes{}; this kernel's BTF has no \
                         `__user` tags to say whose memory it is: capture it as \
                         `{}{ident}: &[u8]` if it is `__user` in the kernel's source, or \
                         `{}{ident}: &[u8]` if it is kernel memory\n",
                        if b.counted_by_ret { "up to " } else { "" },
                        b.size,
                        if b.counted_by_ret {
                            format!(", of which `{}` returns how many it used", sig.name)
                        } else {
                            String::new()
                        },
                        capture_attribute(&user),
                        capture_attribute(&kernel),
                    ),
                ));
            }
            if !options.is_empty() {
                if entry {
                    options.push(AT_ENTRY.to_owned());
                }
                text = Some(format!("{}{ident}: &[u8]", capture_attribute(&options)));
            }
            params.push(HandlerParam {
                name: name.clone(),
                text: text.unwrap_or_else(|| format!("{ident}: *const u8")),
                c_type,
            });
            continue;
        }
        let text = match (target, t.class) {
            (Target::Syscall, TypeClass::Pointer) if t.points_to_char => {
                format!("#[capture(user)] {ident}: &str")
            }
            (Target::Function(_), TypeClass::Pointer) if is_char_pointer(t) => {
                let mut options: Vec<String> = Vec::new();
                if t.is_user_pointer {
                    options.push("user".to_owned());
                } else if !hints.user_tags {
                    // Kernel or user memory cannot be told here, and a
                    // kernel-string read of a user buffer reads nothing:
                    // the pointer stays, both forms are offered.
                    let mut user = vec!["user".to_owned()];
                    let mut kernel = Vec::new();
                    if entry {
                        user.push(AT_ENTRY.to_owned());
                        kernel.push(AT_ENTRY.to_owned());
                    }
                    notes.push((
                        i,
                        format!(
                            "// `{name}` is a `char *`; this kernel's BTF has no `__user` tags \
                             to say whose memory it is: capture it as `{}{ident}: &str` if it \
                             is a kernel string, or `{}{ident}: &str` if it is `__user` in the \
                             kernel's source\n",
                            capture_attribute(&kernel),
                            capture_attribute(&user)
                        ),
                    ));
                    match rust_type(t, false) {
                        Ok(ty) => {
                            params.push(HandlerParam {
                                name: name.clone(),
                                text: format!("{ident}: {ty}"),
                                c_type,
                            });
                            continue;
                        }
                        Err(why) => {
                            skipped.push(format!("{name} ({why})"));
                            continue;
                        }
                    }
                }
                if entry {
                    options.push(AT_ENTRY.to_owned());
                }
                format!("{}{ident}: &str", capture_attribute(&options))
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
    let handler = unshadowed_name(&sig.name, &params);

    // Field captures: free names, none a parameter's (captured or not),
    // `ret`, `span`, the handler's or another suggestion's.
    let mut taken: Vec<String> = sig.params.iter().map(|(n, _)| n.clone()).collect();
    taken.extend(["ret".to_owned(), "span".to_owned(), handler.clone()]);
    let mut suggested_at_entry = false;
    if matches!(target, Target::Function(_)) {
        for (i, (name, t)) in sig.params.iter().enumerate() {
            if !params.iter().any(|p| &p.name == name) {
                continue;
            }
            let Some((_, fields)) = hints.fields.iter().find(|(p, _)| p == name) else {
                continue;
            };
            let entry = released.contains(&i);
            let lines: Vec<String> = fields
                .iter()
                .filter_map(|f| {
                    let ty = field_type(&f.ty)?;
                    let capture = capture_name(&f.member, name, &mut taken)?;
                    let mut options = vec![format!("path = \"{}\"", f.path)];
                    if f.ty.class == TypeClass::Pointer && f.ty.is_user_pointer {
                        options.push("user".to_owned());
                    }
                    if entry {
                        options.push(AT_ENTRY.to_owned());
                    }
                    Some(format!(
                        "//     {}{capture}: {ty},\n",
                        capture_attribute(&options)
                    ))
                })
                .collect();
            if lines.is_empty() {
                continue;
            }
            suggested_at_entry |= entry;
            let mut text = format!(
                "// `{name}` ({}): fields to capture, for the parameter list:\n",
                t.c_name.trim_end()
            );
            text.extend(lines);
            notes.push((i, text));
        }
    }
    notes.sort_by_key(|(i, _)| *i);

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
    if let Some(word) = release_word(&sig.name).filter(|_| !released.is_empty()) {
        let names: Vec<String> = released
            .iter()
            .map(|&i| format!("`{}`", sig.params[i].0))
            .collect();
        let below =
            suggested_at_entry || released.iter().any(|&i| is_char_pointer(&sig.params[i].1));
        out.push_str(&format!(
            "// at entry: `{}` may release what {} {} to (\"{word}\" in its name), which may be \
             invalid at exit: read it with `{AT_ENTRY}`{}\n",
            sig.name,
            and_list(&names),
            if names.len() == 1 { "points" } else { "point" },
            if below { ", as below" } else { "" }
        ));
    }
    for (_, note) in &notes {
        out.push_str(note);
    }
    out.push_str(&attribute);
    if params.iter().any(|p| !is_snake_case(&p.name)) {
        // Kernel names such as `windowBits` or `skb__nullable` are kept: the
        // macro matches them to the kernel's parameters.
        out.push_str("#[allow(non_snake_case)]\n");
    }
    out.push_str(&function_item(&handler, &params));
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

    /// `render_handler` where BTF has `user` tags and no struct is known.
    fn render(sig: &FuncSignature, target: Target) -> String {
        render_handler(
            sig,
            target,
            &TypeHints {
                user_tags: true,
                fields: Vec::new(),
            },
        )
    }

    fn vfs_read() -> FuncSignature {
        sig(
            "vfs_read",
            int("ssize_t", 8, true),
            &[
                ("file", ptr("struct file *")),
                ("buf", user_char_ptr("char *")),
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
            render(&s, Target::Function(Mode::Fentry)),
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

    /// `vfs_read`'s `char __user *buf` is a buffer of `ret` bytes, not a
    /// string: read up to a NUL it would give the bytes before the first
    /// zero, or nothing.
    #[test]
    fn renders_the_vfs_read_handler() {
        assert_eq!(
            render(&vfs_read(), Target::Function(Mode::Auto)),
            "/// ssize_t vfs_read(struct file *file, char *buf, size_t count, loff_t *pos)\n\
             #[kspan::kernel_span(\"vfs_read\")]\n\
             fn vfs_read(\n    \
                 file: *const u8,                          // struct file *\n    \
                 #[capture(user, len = \"ret\")] buf: &[u8], // char *\n    \
                 count: usize,                             // size_t\n    \
                 pos: *const u8,                           // loff_t *\n    \
                 ret: isize,                               // ssize_t\n\
             ) {\n\
             }\n"
        );
    }

    fn void_ptr(c_name: &str) -> KernelType {
        ptr(c_name)
    }

    #[test]
    fn buffers_are_bytes_of_a_length() {
        let read = vfs_read();
        assert_eq!(
            buffer(&read, 1, Target::Function(Mode::Auto)),
            Some(Buffer {
                size: "count".to_owned(),
                counted_by_ret: true
            })
        );
        // Not a buffer: not a byte pointer, or no `buf` in its name.
        assert_eq!(buffer(&read, 0, Target::Function(Mode::Auto)), None);
        assert_eq!(buffer(&read, 3, Target::Function(Mode::Auto)), None);
        let named = sig(
            "f",
            int("ssize_t", 8, true),
            &[
                ("name", char_ptr("char *")),
                ("count", int("size_t", 8, false)),
            ],
        );
        assert_eq!(buffer(&named, 0, Target::Function(Mode::Auto)), None);
        // No size parameter: a string.
        let unsized_ = sig(
            "f",
            int("ssize_t", 8, true),
            &[("ubuf", char_ptr("char *"))],
        );
        assert_eq!(buffer(&unsized_, 0, Target::Function(Mode::Auto)), None);

        // What the call is given (`const`) is as long as its size
        // parameter; so is a buffer of a function whose return value is
        // no 64-bit count.
        let write = sig(
            "vfs_write",
            int("ssize_t", 8, true),
            &[
                ("file", ptr("struct file *")),
                ("buf", user_char_ptr("const char *")),
                ("count", int("size_t", 8, false)),
            ],
        );
        let by_size = Some(Buffer {
            size: "count".to_owned(),
            counted_by_ret: false,
        });
        assert_eq!(buffer(&write, 1, Target::Function(Mode::Auto)), by_size);
        assert!(render(&write, Target::Function(Mode::Auto))
            .contains("#[capture(user, len = \"count\")] buf: &[u8]"));
        let sendto = sig(
            "__sys_sendto",
            int("int", 4, true),
            &[
                ("fd", int("int", 4, true)),
                ("buff", void_ptr("void *")),
                ("len", int("size_t", 8, false)),
            ],
        );
        assert_eq!(
            buffer(&sendto, 1, Target::Function(Mode::Auto)),
            Some(Buffer {
                size: "len".to_owned(),
                counted_by_ret: false
            })
        );
        // Kernel memory where BTF has `user` tags and the pointer has none.
        assert!(render(&sendto, Target::Function(Mode::Auto))
            .contains("fn __sys_sendto(fd: i32, #[capture(len = \"len\")] buff: &[u8], len: usize, ret: i32) {}"));

        // A system call's buffers are user memory and it returns a count.
        let syscall_read = sig(
            "read",
            int("long", 8, true),
            &[
                ("fd", int("unsigned int", 4, false)),
                ("buf", char_ptr("char *")),
                ("count", int("size_t", 8, false)),
            ],
        );
        assert_eq!(
            render_handler(&syscall_read, Target::Syscall, &TypeHints::default()),
            "/// long read(unsigned int fd, char *buf, size_t count)\n\
             #[kspan::kernel_span(syscall = \"read\")]\n\
             fn read(fd: u32, #[capture(user, len = \"ret\")] buf: &[u8], count: usize, ret: i64) {}\n"
        );
    }

    /// Without `user` tags whose memory a buffer is cannot be known: the
    /// pointer stays, and both forms are written out.
    #[test]
    fn untagged_buffers_give_both_forms() {
        let untagged = TypeHints::default();
        let mut read = vfs_read();
        read.params[1].1.is_user_pointer = false;
        assert_eq!(
            render_handler(&read, Target::Function(Mode::Auto), &untagged),
            "/// ssize_t vfs_read(struct file *file, char *buf, size_t count, loff_t *pos)\n\
             // `buf` is a buffer of up to `count` bytes, of which `vfs_read` returns how many \
             it used; this kernel's BTF has no `__user` tags to say whose memory it is: capture \
             it as `#[capture(user, len = \"ret\")] buf: &[u8]` if it is `__user` in the \
             kernel's source, or `#[capture(len = \"ret\")] buf: &[u8]` if it is kernel memory\n\
             #[kspan::kernel_span(\"vfs_read\")]\n\
             fn vfs_read(file: *const u8, buf: *const u8, count: usize, pos: *const u8, ret: isize) {}\n"
        );
        // An instant reads at entry, before the call has filled it.
        let fentry = render_handler(&read, Target::Function(Mode::Fentry), &untagged);
        assert!(
            fentry.contains(
                "// `buf` is a buffer `vfs_read` fills (of up to `count` bytes): at entry it \
                 holds nothing yet; a mode with a return value reads what the call put there, \
                 with `len = \"ret\"`\n"
            ) && fentry.contains("buf: *const u8, count: usize"),
            "{fentry}"
        );
        let tagged = render(&vfs_read(), Target::Function(Mode::Fentry));
        assert!(
            tagged.contains("holds nothing yet") && !tagged.contains("&[u8]"),
            "{tagged}"
        );
    }

    #[test]
    fn system_calls_of_a_function() {
        assert_eq!(syscalls_for("vfs_read"), ["read", "vfs_read"]);
        assert_eq!(syscalls_for("ksys_read")[0], "read");
        assert_eq!(syscalls_for("do_sys_openat2")[0], "openat2");
        assert_eq!(syscalls_for("__x64_sys_openat")[0], "openat");
        assert_eq!(syscalls_for("__sys_sendto")[0], "sendto");
        assert_eq!(syscalls_for("do_unlinkat")[0], "unlinkat");
        assert_eq!(syscalls_for("tcp_sendmsg"), ["tcp_sendmsg"]);
    }

    #[test]
    fn the_mode_decides_ret_and_is_written_unless_auto() {
        for (mode, has_ret) in [
            (Mode::Fexit, true),
            (Mode::Kretprobe, true),
            (Mode::Fentry, false),
            (Mode::Kprobe, false),
        ] {
            let text = render(&vfs_read(), Target::Function(mode));
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
        assert!(render(&void, Target::Function(Mode::Auto))
            .ends_with("#[kspan::kernel_span(\"kfree\")]\nfn kfree(objp: *const u8) {}\n"));
    }

    #[test]
    fn keyword_parameters_are_raw() {
        let s = sig(
            "f",
            int("int", 4, true),
            &[("type", int("int", 4, true)), ("ref", ptr("void *"))],
        );
        assert!(render(&s, Target::Function(Mode::Fentry))
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
            render(&s, Target::Function(Mode::Auto)),
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
            render(&s, Target::Syscall),
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
        assert!(render(&socket, Target::Syscall).contains(
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

    fn user_char_ptr(c_name: &str) -> KernelType {
        KernelType {
            is_user_pointer: true,
            ..char_ptr(c_name)
        }
    }

    #[test]
    fn char_pointers_are_strings() {
        let s = sig(
            "f",
            int("int", 4, true),
            &[
                ("name", char_ptr("const char *")),
                ("ubuf", user_char_ptr("char *")),
                ("data", char_ptr("u8 *")),
                ("raw", char_ptr("const unsigned char *")),
            ],
        );
        assert_eq!(
            render(&s, Target::Function(Mode::Auto)),
            "/// int f(const char *name, char *ubuf, u8 *data, const unsigned char *raw)\n\
             #[kspan::kernel_span(\"f\")]\n\
             fn f(name: &str, #[capture(user)] ubuf: &str, data: *const u8, raw: *const u8, ret: i32) {}\n"
        );
        // Where BTF has no `user` tags, the pointer stays and both forms
        // are written out.
        let untagged = render_handler(
            &sig(
                "getname",
                ptr("struct filename *"),
                &[("filename", char_ptr("const char *"))],
            ),
            Target::Function(Mode::Fentry),
            &TypeHints::default(),
        );
        assert_eq!(
            untagged,
            "/// struct filename *getname(const char *filename)\n\
             // `filename` is a `char *`; this kernel's BTF has no `__user` tags to say whose \
             memory it is: capture it as `filename: &str` if it is a kernel string, or \
             `#[capture(user)] filename: &str` if it is `__user` in the kernel's source\n\
             #[kspan::kernel_span(\"getname\", mode = \"fentry\")]\n\
             fn getname(filename: *const u8) {}\n"
        );
        // A syscall source's strings are user strings, without a note.
        assert!(render_handler(
            &sig(
                "unlink",
                int("long", 8, true),
                &[("pathname", char_ptr("const char *"))]
            ),
            Target::Syscall,
            &TypeHints::default(),
        )
        .contains("\nfn unlink(#[capture(user)] pathname: &str, ret: i64) {}\n"));
    }

    #[test]
    fn member_types() {
        let array = |c: &str, elem_bytes, len, elem_is_char| {
            ty(
                c,
                TypeClass::Array {
                    elem_bytes,
                    len,
                    elem_is_char,
                },
            )
        };
        let cases = [
            (array("char[16]", 1, 16, true), Some("&str")),
            (array("const char[32]", 1, 32, true), Some("&str")),
            (array("unsigned char[6]", 1, 6, true), Some("[u8; 6]")),
            (array("u32[4]", 4, 4, false), Some("[u8; 16]")),
            (array("u8[64]", 1, 64, true), Some("[u8; 64]")),
            (array("u8[65]", 1, 65, true), None),
            (array("char[0]", 1, 0, true), None),
            (array("u8[0]", 1, 0, true), None),
            (char_ptr("const unsigned char *"), Some("&str")),
            (ptr("struct dentry *"), None),
            (int("unsigned int", 4, false), Some("u32")),
            (ty("bool", TypeClass::Bool), Some("bool")),
            (ty("struct qstr", TypeClass::Aggregate), None),
        ];
        for (t, want) in cases {
            assert_eq!(field_type(&t).as_deref(), want, "{}", t.c_name);
        }
    }

    #[test]
    fn release_words() {
        for (name, word) in [
            ("kfree", "free"),
            ("kmem_cache_free", "free"),
            ("putname", "put"),
            ("fput", "put"),
            ("kobject_put", "put"),
            ("sock_release", "release"),
            ("kmem_cache_destroy", "destroy"),
            ("vfs_unlink", "unlink"),
            ("do_unlinkat", "unlink"),
            ("filp_close", "close"),
            ("__fput.cold", "put"),
        ] {
            assert_eq!(release_word(name), Some(word), "{name}");
        }
        for name in [
            "vfs_read",
            "input_event",
            "seq_puts",
            "seq_putc",
            "freeze_super",
            "compute_score",
            "do_sys_openat2",
        ] {
            assert_eq!(release_word(name), None, "{name}");
        }
    }

    #[test]
    fn what_a_function_releases() {
        let released = |name: &str, params: &[(&str, KernelType)]| {
            let s = sig(name, int("int", 4, true), params);
            released_params(&s)
                .into_iter()
                .map(|i| s.params[i].0.clone())
                .collect::<Vec<_>>()
        };
        // By name or struct tag in the function's name.
        assert_eq!(
            released(
                "filp_close",
                &[("filp", ptr("struct file *")), ("id", ptr("fl_owner_t"))]
            ),
            ["filp"]
        );
        assert_eq!(
            released(
                "kobject_put",
                &[("kobj", ptr("struct kobject *")), ("x", ptr("void *"))]
            ),
            ["kobj"]
        );
        // Else every pointer that can be captured.
        assert_eq!(
            released("kfree", &[("object", ptr("const void *"))]),
            ["object"]
        );
        assert_eq!(
            released(
                "do_unlinkat",
                &[
                    ("dfd", int("int", 4, true)),
                    ("name", ptr("struct filename *"))
                ]
            ),
            ["name"]
        );
        assert_eq!(
            released(
                "vfs_unlink",
                &[
                    ("idmap", ptr("struct mnt_idmap *")),
                    ("dir", ptr("struct inode *")),
                    ("dentry", ptr("struct dentry *")),
                ]
            ),
            ["idmap", "dir", "dentry"]
        );
        assert!(released("vfs_read", &[("file", ptr("struct file *"))]).is_empty());
    }

    fn field(path: &str, t: KernelType) -> FieldCapture {
        FieldCapture {
            member: path.rsplit(['.', '>']).next().unwrap().to_owned(),
            path: path.to_owned(),
            ty: t,
        }
    }

    fn file_fields(param: &str) -> (String, Vec<FieldCapture>) {
        (
            param.to_owned(),
            vec![
                field(
                    &format!("{param}->f_path.dentry->d_name.name"),
                    char_ptr("const unsigned char *"),
                ),
                field(&format!("{param}->f_mode"), int("fmode_t", 4, false)),
                field(&format!("{param}->f_flags"), int("unsigned int", 4, false)),
            ],
        )
    }

    #[test]
    fn struct_pointers_get_field_suggestions() {
        let hints = TypeHints {
            user_tags: true,
            fields: vec![file_fields("file")],
        };
        assert_eq!(
            render_handler(&vfs_read(), Target::Function(Mode::Auto), &hints),
            "/// ssize_t vfs_read(struct file *file, char *buf, size_t count, loff_t *pos)\n\
             // `file` (struct file *): fields to capture, for the parameter list:\n\
             //     #[capture(path = \"file->f_path.dentry->d_name.name\")] name: &str,\n\
             //     #[capture(path = \"file->f_mode\")] f_mode: u32,\n\
             //     #[capture(path = \"file->f_flags\")] f_flags: u32,\n\
             #[kspan::kernel_span(\"vfs_read\")]\n\
             fn vfs_read(\n    \
                 file: *const u8,                          // struct file *\n    \
                 #[capture(user, len = \"ret\")] buf: &[u8], // char *\n    \
                 count: usize,                             // size_t\n    \
                 pos: *const u8,                           // loff_t *\n    \
                 ret: isize,                               // ssize_t\n\
             ) {\n\
             }\n"
        );
        // No field paths on syscall sources.
        assert!(!render_handler(&vfs_read(), Target::Syscall, &hints).contains("path ="));
    }

    #[test]
    fn suggested_names_are_free() {
        // `name` and `count` are parameters, `f_mode` taken by the first
        // suggestion; `type` is a keyword.
        let s = sig(
            "f",
            int("int", 4, true),
            &[
                ("name", ptr("struct filename *")),
                ("count", int("int", 4, true)),
                ("other", ptr("struct file *")),
            ],
        );
        let hints = TypeHints {
            user_tags: true,
            fields: vec![
                (
                    "name".to_owned(),
                    vec![
                        field("name->name", char_ptr("const char *")),
                        field("name->uptr", user_char_ptr("const char *")),
                        field("name->count", int("int", 4, true)),
                    ],
                ),
                (
                    "other".to_owned(),
                    vec![
                        field("other->f_mode", int("fmode_t", 4, false)),
                        field("other->f_mode", int("fmode_t", 4, false)),
                        field("other->type", int("int", 4, true)),
                        field("other->dentry", ptr("struct dentry *")),
                    ],
                ),
            ],
        };
        assert_eq!(snake("Skc__Dport"), "skc_dport");
        assert_eq!(snake("__state"), "__state");
        let text = render_handler(&s, Target::Function(Mode::Auto), &hints);
        assert!(
            text.contains(
                "// `name` (struct filename *): fields to capture, for the parameter list:\n\
                 //     #[capture(path = \"name->name\")] name_name: &str,\n\
                 //     #[capture(path = \"name->uptr\", user)] uptr: &str,\n\
                 //     #[capture(path = \"name->count\")] name_count: i32,\n\
                 // `other` (struct file *): fields to capture, for the parameter list:\n\
                 //     #[capture(path = \"other->f_mode\")] f_mode: u32,\n\
                 //     #[capture(path = \"other->f_mode\")] other_f_mode: u32,\n\
                 //     #[capture(path = \"other->type\")] r#type: i32,\n\
                 #[kspan::kernel_span(\"f\")]\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn released_memory_is_read_at_entry() {
        let close = sig(
            "filp_close",
            int("int", 4, true),
            &[("filp", ptr("struct file *")), ("id", ptr("fl_owner_t"))],
        );
        let hints = TypeHints {
            user_tags: true,
            fields: vec![file_fields("filp")],
        };
        assert_eq!(
            render_handler(&close, Target::Function(Mode::Auto), &hints),
            "/// int filp_close(struct file *filp, fl_owner_t id)\n\
             // at entry: `filp_close` may release what `filp` points to (\"close\" in its name), \
             which may be invalid at exit: read it with `at = \"entry\"`, as below\n\
             // `filp` (struct file *): fields to capture, for the parameter list:\n\
             //     #[capture(path = \"filp->f_path.dentry->d_name.name\", at = \"entry\")] name: &str,\n\
             //     #[capture(path = \"filp->f_mode\", at = \"entry\")] f_mode: u32,\n\
             //     #[capture(path = \"filp->f_flags\", at = \"entry\")] f_flags: u32,\n\
             #[kspan::kernel_span(\"filp_close\")]\n\
             fn filp_close(filp: *const u8, id: *const u8, ret: i32) {}\n"
        );
        // An instant reads everything at entry: no hint, no `at` (which
        // the macro refuses there).
        for mode in [Mode::Fentry, Mode::Kprobe] {
            let text = render_handler(&close, Target::Function(mode), &hints);
            assert!(
                !text.contains("at entry") && !text.contains("at ="),
                "{text}"
            );
            assert!(text.contains("#[capture(path = \"filp->f_mode\")] f_mode: u32,"));
        }
        // Nothing below to carry it; several pointers.
        let kfree = sig(
            "kfree",
            ty("void", TypeClass::Void),
            &[("object", ptr("const void *"))],
        );
        assert!(render(&kfree, Target::Function(Mode::Fexit)).contains(
            "// at entry: `kfree` may release what `object` points to (\"free\" in its name), \
             which may be invalid at exit: read it with `at = \"entry\"`\n"
        ));
        let unlink = sig(
            "vfs_unlink",
            int("int", 4, true),
            &[
                ("dir", ptr("struct inode *")),
                ("dentry", ptr("struct dentry *")),
            ],
        );
        assert!(render(&unlink, Target::Function(Mode::Kretprobe)).contains(
            "// at entry: `vfs_unlink` may release what `dir` and `dentry` point to (\"unlink\" \
             in its name), which may be invalid at exit: read it with `at = \"entry\"`\n"
        ));
        // A released string is read at entry in the signature itself.
        let strings = sig(
            "kfree_name",
            ty("void", TypeClass::Void),
            &[("name", char_ptr("char *"))],
        );
        assert!(render(&strings, Target::Function(Mode::Auto)).ends_with(
            "read it with `at = \"entry\"`, as below\n\
             #[kspan::kernel_span(\"kfree_name\")]\n\
             fn kfree_name(#[capture(at = \"entry\")] name: &str) {}\n"
        ));
        let untagged = render_handler(
            &strings,
            Target::Function(Mode::Auto),
            &TypeHints::default(),
        );
        assert!(untagged.contains(
            "`#[capture(at = \"entry\")] name: &str` if it is a kernel string, or \
             `#[capture(user, at = \"entry\")] name: &str`"
        ));
        assert!(
            untagged.contains("fn kfree_name(name: *const u8)"),
            "{untagged}"
        );
        let user = sig(
            "kfree_name",
            ty("void", TypeClass::Void),
            &[("name", user_char_ptr("char *"))],
        );
        assert!(render(&user, Target::Function(Mode::Auto))
            .contains("fn kfree_name(#[capture(user, at = \"entry\")] name: &str) {}"));
    }

    /// The suggestions of hand-made type data, rendered.
    #[test]
    fn suggestions_from_type_data() {
        use crate::fields::Types;
        let (types, ids) = crate::fields::tests::kernel();
        let file = types.kernel_type(ids["struct file *"]);
        let s = sig(
            "fput",
            ty("void", TypeClass::Void),
            &[("file", file.clone())],
        );
        let hints = TypeHints {
            user_tags: false,
            fields: vec![(
                "file".to_owned(),
                crate::fields::field_captures(&types, "file", &file),
            )],
        };
        assert_eq!(
            render_handler(&s, Target::Function(Mode::Auto), &hints),
            "/// void fput(struct file *file)\n\
             // at entry: `fput` may release what `file` points to (\"put\" in its name), \
             which may be invalid at exit: read it with `at = \"entry\"`, as below\n\
             // `file` (struct file *): fields to capture, for the parameter list:\n\
             //     #[capture(path = \"file->f_path.dentry->d_name.name\", at = \"entry\")] name: &str,\n\
             //     #[capture(path = \"file->f_mode\", at = \"entry\")] f_mode: u32,\n\
             //     #[capture(path = \"file->f_flags\", at = \"entry\")] f_flags: u32,\n\
             #[kspan::kernel_span(\"fput\")]\n\
             fn fput(file: *const u8) {}\n"
        );
    }
}
