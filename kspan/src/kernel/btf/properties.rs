// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Property tests of the BTF reader (issue 52): functions, integers,
//! typedefs, qualifiers, pointers, enums and structs, written as BTF by the
//! test builder (the kernel's encoding), read back as written; and any
//! blob, a valid one garbled or cut short included, is read or refused
//! with every lookup answering, never a panic.
//!
//! `PROPTEST_CASES=10000 cargo test -p kspan --lib kernel::btf::properties`
//! runs more than the default 256 cases.

use std::collections::BTreeSet;

use proptest::prelude::*;
use proptest::test_runner::Config;

use super::builder::BtfBuilder;
use super::{Btf, TypeClass};

fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}

/// How a parameter's type is written, over one of the generated integers.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Int,
    Typedef,
    Const,
    Volatile,
    Pointer,
    /// A pointer to the generated struct.
    StructPointer,
    /// The generated enum.
    Enum,
}

/// A function's parameters: name, which integer, how its type is written.
type Params = Vec<(String, usize, Shape)>;

#[derive(Debug, Clone)]
struct Generated {
    /// (name, bytes, signed).
    ints: Vec<(String, u32, bool)>,
    /// Its enumerators (the enum is 4 bytes).
    enumerators: Vec<(String, i32)>,
    /// Members: name, which integer, byte offset.
    members: Vec<(String, usize, u32)>,
    /// Name, return type (an integer, or void), parameters.
    functions: Vec<(String, Option<usize>, Params)>,
}

fn ident() -> impl Strategy<Value = String> {
    "[a-z_][a-z0-9_]{0,8}"
}

fn shape() -> impl Strategy<Value = Shape> {
    prop::sample::select(vec![
        Shape::Int,
        Shape::Typedef,
        Shape::Const,
        Shape::Volatile,
        Shape::Pointer,
        Shape::StructPointer,
        Shape::Enum,
    ])
}

fn generated() -> impl Strategy<Value = Generated> {
    let ints = prop::collection::vec(
        (
            ident(),
            prop::sample::select(vec![1u32, 2, 4, 8]),
            any::<bool>(),
        ),
        1..4,
    );
    let enumerators = prop::collection::vec((ident(), any::<i32>()), 0..5);
    let members = prop::collection::vec((ident(), 0usize..4, 0u32..64), 0..5);
    let functions = prop::collection::btree_map(
        ident(),
        (
            prop::option::of(0usize..4),
            prop::collection::vec((ident(), 0usize..4, shape()), 0..7),
        ),
        1..6,
    );
    (ints, enumerators, members, functions).prop_map(|(ints, enumerators, members, functions)| {
        let n = ints.len();
        Generated {
            members: members.into_iter().map(|(m, i, o)| (m, i % n, o)).collect(),
            functions: functions
                .into_iter()
                .map(|(name, (ret, params))| {
                    let params = params.into_iter().map(|(p, i, s)| (p, i % n, s)).collect();
                    (name, ret.map(|r| r % n), params)
                })
                .collect(),
            ints,
            enumerators,
        }
    })
}

/// The blob, and the id of each parameter's type as written.
fn build(g: &Generated) -> (Vec<u8>, Vec<Vec<u32>>, u32, u32) {
    let mut b = BtfBuilder::new();
    let ints: Vec<u32> = g
        .ints
        .iter()
        .map(|(name, bytes, signed)| b.int(name, *bytes, *signed))
        .collect();
    let members: Vec<(&str, u32, u32)> = g
        .members
        .iter()
        .map(|(m, i, off)| (m.as_str(), ints[*i], *off))
        .collect();
    let strukt = b.struct_of("generated", 128, &members);
    let struct_ptr = b.ptr(strukt);
    let enumerators: Vec<(&str, i32)> = g
        .enumerators
        .iter()
        .map(|(n, v)| (n.as_str(), *v))
        .collect();
    let enumeration = b.enumeration("generated_enum", 4, &enumerators);
    let mut ids = Vec::new();
    for (name, ret, params) in &g.functions {
        let typed: Vec<(String, u32)> = params
            .iter()
            .map(|(p, i, shape)| {
                let int = ints[*i];
                let id = match shape {
                    Shape::Int => int,
                    Shape::Typedef => b.typedef("generated_t", int),
                    Shape::Const => b.konst(int),
                    Shape::Volatile => b.volatile(int),
                    Shape::Pointer => b.ptr(int),
                    Shape::StructPointer => struct_ptr,
                    Shape::Enum => enumeration,
                };
                (p.clone(), id)
            })
            .collect();
        ids.push(typed.iter().map(|(_, id)| *id).collect());
        let params: Vec<(&str, u32)> = typed.iter().map(|(p, id)| (p.as_str(), *id)).collect();
        b.func(name, ret.map_or(0, |r| ints[r]), &params);
    }
    (b.build(), ids, strukt, enumeration)
}

/// Asks `btf` everything a plan asks, for every name and id it might be
/// given: none of it may panic.
fn ask_everything(btf: &Btf, names: &[&str]) {
    for name in btf.function_names().map(str::to_owned).collect::<Vec<_>>() {
        let _ = btf.function(&name);
        let _ = btf.trampoline_refusal(&name);
    }
    for name in names {
        let _ = btf.function(name);
        let _ = btf.has_function(name);
        let _ = btf.type_named(name);
        let _ = btf.function_names_starting(name).count();
    }
    let _ = btf.has_user_tags();
    for id in (0..64).chain([u32::MAX, u32::MAX / 2]) {
        let _ = btf.kernel_type(id);
        let _ = btf.pointee(id);
        let _ = btf.composite(id);
        let _ = btf.is_declaration_only(id);
        let _ = btf.enumerators(id);
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn btf_reads_back_as_written(g in generated()) {
        let (blob, ids, strukt, enumeration) = build(&g);
        let btf = Btf::parse(&blob).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(btf.function_count(), g.functions.len());
        let names: BTreeSet<&str> = btf.function_names().collect();
        let written: BTreeSet<&str> = g.functions.iter().map(|(n, ..)| n.as_str()).collect();
        prop_assert_eq!(names, written);
        for ((name, ret, params), ids) in g.functions.iter().zip(&ids) {
            let f = btf.function(name).ok_or_else(|| TestCaseError::fail(format!("{name} not found")))?;
            prop_assert_eq!(&f.name, name);
            match ret {
                Some(r) => {
                    let (_, bytes, signed) = g.ints[*r];
                    prop_assert_eq!(f.ret.class, TypeClass::Int { bytes, signed });
                }
                None => prop_assert_eq!(f.ret.class, TypeClass::Void),
            }
            prop_assert_eq!(f.params.len(), params.len());
            for ((pname, ty), ((wname, i, shape), id)) in f.params.iter().zip(params.iter().zip(ids)) {
                prop_assert_eq!(pname, wname);
                prop_assert_eq!(ty.id, *id);
                let (ref int_name, bytes, signed) = g.ints[*i];
                let int = TypeClass::Int { bytes, signed };
                match shape {
                    Shape::Int => {
                        prop_assert_eq!(ty.class, int);
                        prop_assert_eq!(&ty.c_name, int_name);
                    }
                    Shape::Typedef => {
                        prop_assert_eq!(ty.class, int);
                        prop_assert_eq!(ty.c_name.as_str(), "generated_t");
                    }
                    Shape::Const | Shape::Volatile => prop_assert_eq!(ty.class, int),
                    Shape::Pointer => {
                        prop_assert_eq!(ty.class, TypeClass::Pointer);
                        let pointee = btf.pointee(ty.id);
                        prop_assert_eq!(pointee.map(|p| btf.kernel_type(p).class), Some(int));
                    }
                    Shape::StructPointer => {
                        prop_assert_eq!(ty.class, TypeClass::Pointer);
                        prop_assert_eq!(btf.pointee(ty.id), Some(strukt));
                    }
                    Shape::Enum => prop_assert_eq!(ty.class, TypeClass::Enum { bytes: 4, signed: g.enumerators.iter().any(|(_, v)| *v < 0) }),
                }
            }
        }
        let composite = btf.composite(strukt).ok_or_else(|| TestCaseError::fail("no struct"))?;
        prop_assert_eq!(composite.name.as_str(), "generated");
        prop_assert_eq!(composite.members.len(), g.members.len());
        for (m, (name, _, offset)) in composite.members.iter().zip(&g.members) {
            prop_assert_eq!(&m.name, name);
            prop_assert_eq!(m.bit_offset, offset * 8);
            prop_assert_eq!(m.bitfield_bits, 0);
        }
        let read = btf.enumerators(enumeration).ok_or_else(|| TestCaseError::fail("no enum"))?;
        let written: Vec<(String, i64)> = g
            .enumerators
            .iter()
            .map(|(n, v)| (n.clone(), i64::from(*v)))
            .collect();
        prop_assert_eq!(read, written);
    }

    /// A valid blob with bytes changed, or cut short: read or refused, and
    /// every lookup of what was read answers.
    #[test]
    fn garbled_btf_is_read_or_refused_without_a_panic(
        g in generated(),
        changes in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let (mut blob, ..) = build(&g);
        for (at, byte) in changes {
            let i = at.index(blob.len());
            blob[i] = byte;
        }
        if let Some(cut) = cut {
            blob.truncate(cut.index(blob.len()));
        }
        if let Ok(btf) = Btf::parse(&blob) {
            let names: Vec<&str> = g.functions.iter().map(|(n, ..)| n.as_str()).collect();
            ask_everything(&btf, &names);
        }
    }

    #[test]
    fn any_bytes_are_read_or_refused_without_a_panic(blob in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(btf) = Btf::parse(&blob) {
            ask_everything(&btf, &["", "a", "vfs_read"]);
        }
    }
}
