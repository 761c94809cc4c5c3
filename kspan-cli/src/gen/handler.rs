// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The text of a generated handler: its doc line, `// not captured` lines
//! and advice, the attribute and the function, laid out as rustfmt lays
//! them out so that pasted code is unchanged by `cargo fmt`.
//!
//! Nothing here touches the system: [`render_handler`] takes a parsed
//! signature and [`TypeHints`] and returns text, so it is tested on
//! hand-built values.

use kspan::kernel::btf::{FuncSignature, KernelType, TypeClass};
use kspan::Mode;

use super::capture::{
    buffer, field_type, handler_name, is_char_pointer, release_word, released_params, rust_ident,
    rust_type, MAX_ARGS,
};
use super::fields::FieldCapture;
use super::Target;
use crate::common::c_signature;

/// Where rustfmt wraps a line (its default `max_width`): generated handlers
/// are laid out as rustfmt lays them out, so pasting them changes nothing
/// under `cargo fmt`.
const MAX_WIDTH: usize = 100;

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
fn is_snake_case(name: &str) -> bool {
    let mut previous_underscore = false;
    name.trim_matches('_').chars().all(|c| {
        let double_underscore = c == '_' && previous_underscore;
        let ok = !c.is_uppercase() && !double_underscore;
        previous_underscore = c == '_';
        ok
    })
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

// ---------------------------------------------------------------- layout

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{char_ptr, int, ptr, sig, ty, user_char_ptr, vfs_read};
    use crate::gen::capture::{buffer, Buffer};

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
        use crate::gen::fields::Types;
        let (types, ids) = crate::gen::fields::tests::kernel();
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
                crate::gen::fields::field_captures(&types, "file", &file),
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
