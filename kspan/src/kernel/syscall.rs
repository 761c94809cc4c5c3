// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Syscall sources: the signature of a system call, from its tracepoint.
//!
//! The kernel's BTF does not name syscall parameters (the entry points take a
//! `struct pt_regs *`), but the `syscalls:sys_enter_<name>` tracepoint's
//! format file in tracefs does, with their C types. Parsing it is pure, so it
//! is tested on text; the types are then looked up in BTF by name for their
//! width and signedness. Every pointer argument of a system call is a
//! user-space pointer.

use super::btf::{Btf, FuncSignature, KernelType, TypeClass};

/// The arguments of a `sys_enter_*` format: `(name, C type)` after the
/// syscall number, in order. `None` if the text is not such a format.
pub fn parse_enter_format(text: &str) -> Option<Vec<(String, String)>> {
    let mut after_nr = false;
    let mut args = Vec::new();
    for line in text.lines() {
        let Some(field) = line.trim().strip_prefix("field:") else {
            continue;
        };
        let decl = field.split(';').next()?.trim();
        let split = decl.rfind([' ', '*'])?;
        let (ctype, name) = (decl[..=split].trim(), decl[split + 1..].trim());
        if name == "__syscall_nr" {
            after_nr = true;
        } else if after_nr {
            args.push((name.to_owned(), ctype.to_owned()));
        }
    }
    after_nr.then_some(args)
}

/// BTF's names for the integer types as the formats spell them.
fn btf_int_name(ctype: &str) -> &str {
    match ctype {
        "long" | "signed long" => "long int",
        "unsigned long" => "long unsigned int",
        "unsigned" => "unsigned int",
        "short" => "short int",
        "unsigned short" => "short unsigned int",
        "long long" => "long long int",
        "unsigned long long" => "long long unsigned int",
        other => other,
    }
}

/// The kernel type of a syscall argument written as `ctype`.
fn arg_type(btf: &Btf, ctype: &str) -> KernelType {
    let bare = ctype
        .replace("const ", "")
        .replace("volatile ", "")
        .replace(" __user", "")
        .trim()
        .to_owned();
    if let Some(pointee) = bare.strip_suffix('*') {
        let pointee = pointee.trim();
        return KernelType {
            c_name: ctype.to_owned(),
            class: TypeClass::Pointer,
            id: 0,
            is_user_pointer: true,
            points_to_char: matches!(
                pointee,
                "char" | "unsigned char" | "signed char" | "u8" | "__u8"
            ),
        };
    }
    match btf.type_named(btf_int_name(&bare)) {
        Some(id) => KernelType {
            c_name: ctype.to_owned(),
            ..btf.kernel_type(id)
        },
        None => KernelType {
            c_name: ctype.to_owned(),
            class: TypeClass::Aggregate,
            id: 0,
            is_user_pointer: false,
            points_to_char: false,
        },
    }
}

/// The signature of syscall `name` from its enter format; returns `long`.
pub fn signature(btf: &Btf, name: &str, enter_format: &str) -> Option<FuncSignature> {
    let args = parse_enter_format(enter_format)?;
    let ret = btf
        .type_named("long int")
        .map(|id| btf.kernel_type(id))
        .unwrap_or(KernelType {
            c_name: "long".to_owned(),
            class: TypeClass::Int {
                bytes: 8,
                signed: true,
            },
            id: 0,
            is_user_pointer: false,
            points_to_char: false,
        });
    Some(FuncSignature {
        name: name.to_owned(),
        btf_id: 0,
        params: args
            .iter()
            .map(|(n, t)| (n.clone(), arg_type(btf, t)))
            .collect(),
        ret,
    })
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use super::*;

    const OPENAT: &str = "name: sys_enter_openat
ID: 782
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;
\tfield:int dfd;\toffset:16;\tsize:8;\tsigned:0;
\tfield:const char * filename;\toffset:24;\tsize:8;\tsigned:0;
\tfield:int flags;\toffset:32;\tsize:8;\tsigned:0;
\tfield:umode_t mode;\toffset:40;\tsize:8;\tsigned:0;

print fmt: \"dfd: 0x%08lx\"
";

    #[test]
    fn parses_the_arguments_of_a_format() {
        let args = parse_enter_format(OPENAT).unwrap();
        let names: Vec<_> = args.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect();
        assert_eq!(
            names,
            [
                ("dfd", "int"),
                ("filename", "const char *"),
                ("flags", "int"),
                ("mode", "umode_t")
            ]
        );
        assert_eq!(parse_enter_format("name: x\nformat:\n"), None);
    }

    #[test]
    fn types_come_from_this_machines_btf() {
        let btf = crate::kernel::host_btf();
        let sig = signature(&btf, "openat", OPENAT).unwrap();
        assert_eq!(
            sig.params[0].1.class,
            TypeClass::Int {
                bytes: 4,
                signed: true
            }
        );
        let filename = &sig.params[1].1;
        assert_eq!(filename.class, TypeClass::Pointer);
        assert!(filename.points_to_char && filename.is_user_pointer);
        assert_eq!(
            sig.params[3].1.class,
            TypeClass::Int {
                bytes: 2,
                signed: false
            },
            "umode_t"
        );
        assert_eq!(
            sig.ret.class,
            TypeClass::Int {
                bytes: 8,
                signed: true
            }
        );
        assert!(btf.type_named("struct open_how").is_some());
        assert!(btf.type_named("no_such_type_name").is_none());
    }

    #[test]
    fn mangled_formats_never_panic() {
        let mut rng = crate::test_rng::Rng(0x9e37_79b9_7f4a_7c15);
        let mut next = move || rng.next();
        let pieces = [
            ";", ":", "\t", "\n", " ", "field:", "offset:", "size:", "é", "\0", "[",
        ];
        let mut read = 0;
        for _ in 0..5_000 {
            let mut text: Vec<char> = OPENAT.chars().collect();
            for _ in 0..next() % 6 + 1 {
                let at = next() as usize % (text.len() + 1);
                match next() % 3 {
                    0 if at < text.len() => {
                        text.remove(at);
                    }
                    _ => {
                        let piece = pieces[next() as usize % pieces.len()];
                        for (i, c) in piece.chars().enumerate() {
                            text.insert(at + i, c);
                        }
                    }
                }
            }
            let text: String = text.into_iter().collect();
            let cut = next() as usize % (text.len() + 1);
            let text = text.get(..cut).unwrap_or(&text);
            read += usize::from(parse_enter_format(text).is_some());
        }
        assert!(read > 0, "some mangled formats still read");
    }
}
