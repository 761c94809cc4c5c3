// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Property tests of `kspan gen`'s arguments (issue 52): `--params` names,
//! written comma-separated with any spacing, read back as written; any
//! text is read or refused naming the name at fault; `--mode` takes
//! exactly the modes it lists.
//!
//! `PROPTEST_CASES=10000 cargo test -p kspan-cli gen::properties` runs more
//! than the default 256 cases.

use proptest::prelude::*;
use proptest::test_runner::Config;

use super::{parse_mode, parse_params, GEN_MODES};

fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}

/// A parameter name: any identifier but those Rust refuses even raw.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_][a-z0-9_]{0,10}",
        prop::sample::select(vec!["type", "fn", "match", "r#x"]).prop_map(str::to_owned),
    ]
    .prop_filter("refused even raw", |n| {
        !["self", "Self", "super", "crate", "_", "r#x"].contains(&n.as_str())
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn params_read_back_as_written(
        names in prop::collection::vec((name(), " {0,2}", " {0,2}"), 1..5),
    ) {
        let text = names
            .iter()
            .map(|(n, before, after)| format!("{before}{n}{after}"))
            .collect::<Vec<_>>()
            .join(",");
        let written: Vec<String> = names.into_iter().map(|(n, ..)| n).collect();
        prop_assert_eq!(parse_params(&text), Ok(written));
    }

    #[test]
    fn any_params_are_read_or_the_bad_one_named(text in prop_oneof![
        any::<String>(),
        prop::collection::vec(
            prop::sample::select(vec!["a", "b_1", ",", " ", "1", "-", "self", "é", "", "type"]),
            0..8,
        ).prop_map(|p| p.concat()),
    ]) {
        match parse_params(&text) {
            Ok(names) => {
                prop_assert_eq!(names.len(), text.split(',').count());
                for n in &names {
                    prop_assert!(!n.is_empty() && n.chars().all(|c| c == '_' || c.is_ascii_alphanumeric()));
                }
            }
            Err(e) if e.ends_with("a name is empty (nothing given, or a comma with no name after or before it)") => {
                prop_assert!(text.split(',').any(|n| n.trim().is_empty()), "{e}");
            }
            Err(e) => {
                // `--params` takes ... (`--params dfd,name`); `BAD` is ...
                let bad = e
                    .split_once("); `")
                    .and_then(|(_, rest)| rest.strip_suffix("` is not a parameter name"))
                    .unwrap_or_default();
                prop_assert!(!bad.is_empty(), "{e}");
                prop_assert!(text.split(',').any(|n| n.trim() == bad), "{e}");
            }
        }
    }

    #[test]
    fn modes_are_exactly_those_listed(name in prop_oneof![
        prop::sample::select(kspan::Mode::ALL.map(|m| m.as_str()).to_vec()).prop_map(str::to_owned),
        "[a-z]{0,9}",
    ]) {
        match parse_mode(&name) {
            Ok(mode) => {
                prop_assert_eq!(mode.as_str(), name.as_str());
                prop_assert!(GEN_MODES.contains(&mode));
            }
            Err(e) => {
                prop_assert!(GEN_MODES.iter().all(|m| m.as_str() != name));
                prop_assert!(e.contains(&format!("`{name}`")), "{e}");
            }
        }
    }
}
