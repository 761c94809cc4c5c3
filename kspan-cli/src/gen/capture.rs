// SPDX-License-Identifier: Apache-2.0 OR MIT
//! How `gen` captures each kernel value: the Rust name a kernel name is
//! written as, the Rust type that reads a kernel type from a register or
//! by a field path, which pointers are buffers with a length, and which
//! parameters a call may release (so they are read at entry).
//!
//! Nothing here touches the system: every function takes parsed types and
//! names, so all of it is tested on hand-built values.

use kspan::kernel::btf::{FuncSignature, KernelType, TypeClass};

use super::Target;

/// How many leading arguments of a kernel function a probe can capture: the
/// argument registers the BPF program saves (`kspan_bpf::MAX_ARGS`, which the
/// `kspan` crate does not re-export).
pub const MAX_ARGS: usize = 6;

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
fn is_keyword(name: &str) -> bool {
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
        // A shape this `kspan` does not know yet: not captured, said so.
        _ => Err(format!("{c}, a kind of type this kspan cannot capture")),
    }
}

/// Whether `t` is spelled `char *` or `const char *`: a C string (plain
/// `char`, not `u8` or `unsigned char`, which are as often bytes; a typedef
/// of a `char *` keeps its own name and is not one either).
pub fn is_char_pointer(t: &KernelType) -> bool {
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

/// Largest array suggested as `[u8; N]`: bigger ones take much of a
/// call's 1024 bytes of strings and buffers.
const MAX_ARRAY_BYTES: u32 = 64;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{char_ptr, int, ptr, sig, ty};

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
}
