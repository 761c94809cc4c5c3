// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Property tests of the `/proc/kallsyms` reader (issue 52): symbols
//! written as the kernel prints them, in any order, are found by every
//! address inside them; any text is read without a panic.
//!
//! `PROPTEST_CASES=10000 cargo test -p kspan --lib kernel::ksyms::properties`
//! runs more than the default 256 cases.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::Config;

use super::{KernelSymbolTable, DATA_SYMBOL_REACH};

fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}

/// Symbols by address: kind and name, and the module a line names.
fn symbols() -> impl Strategy<Value = BTreeMap<u64, (char, String, Option<String>)>> {
    prop::collection::btree_map(
        1u64..=u64::MAX,
        (
            prop::sample::select(vec!['t', 'T', 'd', 'D', 'b', 'B', 'r', 'R', 'W', 'A', 'U']),
            "[A-Za-z_.][A-Za-z0-9_.$]{0,20}",
            prop::option::of("[a-z_][a-z0-9_]{0,8}"),
        ),
        0..12,
    )
}

/// The lines as `/proc/kallsyms` prints them (`%px %c %s`, then `\t[%s]`
/// for a module's), in `order`.
fn kallsyms(symbols: &BTreeMap<u64, (char, String, Option<String>)>, order: &[usize]) -> String {
    let lines: Vec<String> = symbols
        .iter()
        .map(|(address, (kind, name, module))| match module {
            Some(m) => format!("{address:016x} {kind} {name}\t[{m}]"),
            None => format!("{address:016x} {kind} {name}"),
        })
        .collect();
    let mut text = String::new();
    for &i in order {
        if let Some(line) = lines.get(i % lines.len().max(1)) {
            text.push_str(line);
            text.push('\n');
        }
    }
    text
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn symbols_are_found_by_their_addresses(
        symbols in symbols(),
        shuffle in Just(()).prop_perturb(|(), mut rng| {
            let mut order: Vec<usize> = (0..12).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, rng.random_range(0..=i));
            }
            order
        }),
        inside in any::<u64>(),
    ) {
        // Every line once, in a shuffled order.
        let order: Vec<usize> = shuffle.into_iter().filter(|&i| i < symbols.len()).collect();
        let table = KernelSymbolTable::parse(kallsyms(&symbols, &order).as_bytes());
        let text: Vec<(u64, &str)> = symbols
            .iter()
            .filter(|(_, (k, ..))| matches!(k, 't' | 'T'))
            .map(|(a, (_, n, _))| (*a, n.as_str()))
            .collect();
        let data: Vec<(u64, &str)> = symbols
            .iter()
            .filter(|(_, (k, ..))| matches!(k, 'd' | 'D' | 'b' | 'B'))
            .map(|(a, (_, n, _))| (*a, n.as_str()))
            .collect();
        prop_assert_eq!(table.is_empty(), text.is_empty());
        for (i, &(address, name)) in text.iter().enumerate() {
            prop_assert_eq!(table.name_of(address), Some(name));
            // Any address up to the next text symbol is in this one.
            let next = text.get(i + 1).map_or(u64::MAX, |&(a, _)| a - 1);
            let within = address + inside % (next - address).saturating_add(1).max(1);
            prop_assert_eq!(table.name_of(within), Some(name), "{:#x}", within);
        }
        if let Some(&(first, _)) = text.first() {
            prop_assert_eq!(table.name_of(first - 1), None);
        }
        for (i, &(address, name)) in data.iter().enumerate() {
            prop_assert_eq!(table.data_name_of(address), Some(name.to_owned()));
            let next = data.get(i + 1).map_or(u64::MAX, |&(a, _)| a);
            let offset = inside % DATA_SYMBOL_REACH;
            if offset > 0 && address.checked_add(offset).is_some_and(|a| a < next) {
                prop_assert_eq!(
                    table.data_name_of(address + offset),
                    Some(format!("{name}+{offset:#x}"))
                );
            }
        }
    }

    #[test]
    fn any_text_is_read_without_a_panic(text in any::<String>(), address in any::<u64>()) {
        let table = KernelSymbolTable::parse(text.as_bytes());
        let _ = table.name_of(address);
        let _ = table.data_name_of(address);
    }
}
