// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Property tests of the tracefs `format` readers (issue 52): a
//! tracepoint's fields, printed as the kernel prints them, read back with
//! their offsets and sizes, and a `sys_enter_*` event's arguments with
//! their names and C types; any text is read without a panic.
//!
//! `PROPTEST_CASES=10000 cargo test -p kspan --lib kernel::syscall::properties`
//! runs more than the default 256 cases.

use std::collections::BTreeSet;

use proptest::prelude::*;
use proptest::test_runner::Config;

use super::parse_enter_format;
use crate::kernel::tracefs::field_layout;

fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}

/// C types as the formats spell them.
const CTYPES: &[&str] = &[
    "int",
    "unsigned int",
    "long",
    "unsigned long",
    "size_t",
    "pid_t",
    "u32",
    "char *",
    "const char *",
    "const char * const *",
    "struct stat *",
    "void *",
    "unsigned short",
];

/// A field: C type, name, array length (0: not an array), signed.
type Field = (&'static str, String, u32, bool);

fn fields() -> impl Strategy<Value = Vec<Field>> {
    prop::collection::btree_map(
        "[a-z_][a-z0-9_]{0,12}",
        (
            prop::sample::select(CTYPES),
            prop_oneof![Just(0u32), 1u32..32],
            any::<bool>(),
        ),
        0..7,
    )
    .prop_map(|fields| {
        fields
            .into_iter()
            .filter(|(name, _)| !name.starts_with("common_") && name != "__syscall_nr")
            .map(|(name, (ctype, len, signed))| (ctype, name, len, signed))
            .collect()
    })
}

/// A `format` file as `print_event_fields` writes it: name, ID, the
/// common fields, a blank line, the event's fields, then `print fmt`.
fn format(event: &str, fields: &[(String, usize, usize, bool)]) -> String {
    let mut text = format!("name: {event}\nID: 42\nformat:\n");
    let common = [
        ("unsigned short common_type", 0, 2, false),
        ("unsigned char common_flags", 2, 1, false),
        ("unsigned char common_preempt_count", 3, 1, false),
        ("int common_pid", 4, 4, true),
    ];
    for (decl, offset, size, signed) in common {
        text.push_str(&format!(
            "\tfield:{decl};\toffset:{offset};\tsize:{size};\tsigned:{};\n",
            u8::from(signed)
        ));
    }
    text.push('\n');
    for (decl, offset, size, signed) in fields {
        text.push_str(&format!(
            "\tfield:{decl};\toffset:{offset};\tsize:{size};\tsigned:{};\n",
            u8::from(*signed)
        ));
    }
    text.push_str("\nprint fmt: \"...\"\n");
    text
}

/// Each field's declaration, offset and size, laid out one after another.
fn laid_out(fields: &[Field], first: usize) -> Vec<(String, usize, usize, bool)> {
    let mut offset = first;
    fields
        .iter()
        .map(|(ctype, name, len, signed)| {
            let size = if ctype.ends_with('*') || ctype.contains("long") || *ctype == "size_t" {
                8
            } else {
                4
            };
            let (decl, size) = match len {
                0 => (format!("{ctype} {name}"), size),
                n => (format!("{ctype} {name}[{n}]"), size * *n as usize),
            };
            let at = offset;
            offset += size;
            (decl, at, size, *signed)
        })
        .collect()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn fields_read_back_with_their_layout(fields in fields()) {
        let laid = laid_out(&fields, 8);
        let text = format("sched_generated", &laid);
        for ((_, name, ..), (_, offset, size, _)) in fields.iter().zip(&laid) {
            prop_assert_eq!(field_layout(&text, name), Some((*offset, *size)), "{}", text);
        }
        prop_assert_eq!(field_layout(&text, "common_pid"), Some((4, 4)));
        let names: BTreeSet<&str> = fields.iter().map(|(_, n, ..)| n.as_str()).collect();
        if !names.contains("absent") {
            prop_assert_eq!(field_layout(&text, "absent"), None);
        }
    }

    #[test]
    fn syscall_arguments_read_back_as_declared(fields in fields()) {
        // A system call's arguments are scalars or pointers, never arrays.
        let args: Vec<Field> = fields.into_iter().map(|(c, n, _, s)| (c, n, 0, s)).collect();
        let mut laid = vec![("int __syscall_nr".to_owned(), 8, 4, true)];
        laid.extend(laid_out(&args, 16));
        let text = format("sys_enter_generated", &laid);
        let read = parse_enter_format(&text)
            .ok_or_else(|| TestCaseError::fail(format!("not a sys_enter format: {text}")))?;
        let written: Vec<(String, String)> = args
            .iter()
            .map(|(ctype, name, ..)| (name.clone(), (*ctype).to_owned()))
            .collect();
        prop_assert_eq!(read, written);
    }

    #[test]
    fn any_text_is_read_without_a_panic(text in any::<String>(), name in "[a-z_]{0,6}") {
        let _ = parse_enter_format(&text);
        let _ = field_layout(&text, &name);
    }

    #[test]
    fn format_like_text_is_read_without_a_panic(
        text in prop::collection::vec(
            prop::sample::select(vec![
                "field:", "int", " ", "*", ";", "\t", "offset:", "size:", "8", "x", "[", "]",
                "__syscall_nr", "\n", "signed:1", "é",
            ]),
            0..40,
        ).prop_map(|p| p.concat()),
        name in "[a-z_]{0,3}",
    ) {
        let _ = parse_enter_format(&text);
        let _ = field_layout(&text, &name);
    }
}
