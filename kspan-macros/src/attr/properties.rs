// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Property tests of `#[kernel_span(...)]`'s arguments (issue 52): any
//! valid set of keys, in any order and spelling, read back as written; any
//! text is parsed or refused with an error, never a panic.
//!
//! `PROPTEST_CASES=10000 cargo test -p kspan-macros --lib attr::properties`
//! runs more than the default 256 cases.

use proptest::prelude::*;
use proptest::test_runner::Config;

use super::{KernelSpanArgs, MAX_RATE};

fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}

/// The arguments of one attribute, as generated.
#[derive(Debug, Clone)]
struct Args {
    function: String,
    alternatives: Vec<String>,
    mode: Option<kspan_dsl::Mode>,
    errno: Option<bool>,
    /// The value, and whether written as the bare key.
    optional: Option<(bool, bool)>,
    histogram: Option<(bool, bool)>,
    errors_only: Option<(bool, bool)>,
    sum: Option<(bool, bool)>,
    spans: Option<bool>,
    min_duration_ns: Option<u64>,
    /// `name >= value`.
    filter: Option<(String, u64)>,
    rate_limit: Option<u32>,
    /// The order the keys are written in (a permutation seed).
    order: Vec<u8>,
    trailing_comma: bool,
}

fn name() -> impl Strategy<Value = String> {
    "[a-z_][a-z0-9_]{0,12}"
}

fn flag() -> impl Strategy<Value = Option<(bool, bool)>> {
    prop::option::of((any::<bool>(), any::<bool>()))
}

fn args() -> impl Strategy<Value = Args> {
    (
        (
            name(),
            prop::collection::btree_set(name(), 0..3),
            prop::option::of(prop::sample::select(
                kspan_dsl::Mode::ANNOTATION_MODES.to_vec(),
            )),
            prop::option::of(any::<bool>()),
            flag(),
            flag(),
            flag(),
        ),
        (
            flag(),
            prop::option::of(any::<bool>()),
            prop::option::of(1u64..1_000_000_000_000),
            prop::option::of((name(), any::<u64>())),
            prop::option::of(1..=MAX_RATE),
            prop::collection::vec(any::<u8>(), 11),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (function, alternatives, mode, errno, optional, histogram, errors_only),
                (sum, spans, min_duration_ns, filter, rate_limit, order, trailing_comma),
            )| {
                let alternatives = alternatives
                    .into_iter()
                    .filter(|a| *a != function)
                    .collect();
                // A histogram needs a duration: left out with an instant's mode.
                let histogram =
                    histogram.filter(|&(on, _)| !on || mode.is_none_or(|m| m.has_return()));
                Args {
                    function,
                    alternatives,
                    mode,
                    errno,
                    optional,
                    histogram,
                    errors_only,
                    sum,
                    spans,
                    min_duration_ns,
                    filter,
                    rate_limit,
                    order,
                    trailing_comma,
                }
            },
        )
}

fn flag_text(key: &str, flag: Option<(bool, bool)>) -> Option<String> {
    flag.map(|(on, bare)| {
        if on && bare {
            key.to_owned()
        } else {
            format!("{key} = {on}")
        }
    })
}

fn render(a: &Args) -> String {
    let mut text = format!("{:?}", a.function);
    for alternative in &a.alternatives {
        text.push_str(&format!(" | {alternative:?}"));
    }
    let mut keys: Vec<String> = [
        a.mode.map(|m| format!("mode = {:?}", m.as_str())),
        a.errno.map(|e| format!("errno = {e}")),
        flag_text("optional", a.optional),
        flag_text("histogram", a.histogram),
        flag_text("errors_only", a.errors_only),
        flag_text("sum", a.sum),
        a.spans.map(|s| format!("spans = {s}")),
        a.min_duration_ns
            .map(|ns| format!("min_duration = \"{ns}ns\"")),
        a.filter
            .as_ref()
            .map(|(n, v)| format!("filter = \"{n} >= {v:#x}\"")),
        a.rate_limit.map(|r| format!("rate_limit = {r}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    // A permutation of the keys, from the seed.
    for (i, &s) in a.order.iter().enumerate().take(keys.len()) {
        let j = i + usize::from(s) % (keys.len() - i);
        keys.swap(i, j);
    }
    for key in keys {
        text.push_str(", ");
        text.push_str(&key);
    }
    if a.trailing_comma {
        text.push(',');
    }
    text
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arguments_read_back_as_written(a in args()) {
        let text = render(&a);
        let parsed = syn::parse_str::<KernelSpanArgs>(&text)
            .map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
        prop_assert_eq!(parsed.function.value(), a.function.clone());
        let alternatives: Vec<String> = parsed.alternatives.iter().map(|l| l.value()).collect();
        prop_assert_eq!(alternatives, a.alternatives.clone());
        prop_assert_eq!(parsed.mode.value, a.mode.unwrap_or(kspan_dsl::Mode::Auto));
        prop_assert_eq!(parsed.errno, a.errno.unwrap_or(true));
        prop_assert_eq!(parsed.optional, a.optional.is_some_and(|(on, _)| on));
        prop_assert_eq!(parsed.histogram, a.histogram.is_some_and(|(on, _)| on));
        let f = &parsed.filters;
        prop_assert_eq!(f.errors_only.is_some(), a.errors_only.is_some_and(|(on, _)| on));
        prop_assert_eq!(f.sum.is_some(), a.sum.is_some_and(|(on, _)| on));
        prop_assert_eq!(f.no_spans.is_some(), a.spans == Some(false));
        prop_assert_eq!(f.min_duration.as_ref().map(|(ns, _)| *ns), a.min_duration_ns);
        prop_assert_eq!(f.rate_limit.as_ref().map(|(r, _)| *r), a.rate_limit);
        let filter = f.filter.as_ref().map(|(p, _)| {
            let c = &p.any_of[0][0];
            (c.name.clone(), c.op, c.value)
        });
        let written = a
            .filter
            .as_ref()
            .map(|(n, v)| (n.clone(), kspan_dsl::CmpOp::Ge, i128::from(*v)));
        prop_assert_eq!(filter, written);
    }

    #[test]
    fn any_text_is_parsed_or_refused_without_a_panic(text in any::<String>()) {
        let _ = syn::parse_str::<KernelSpanArgs>(&text);
    }

    #[test]
    fn attribute_like_text_is_parsed_or_refused_without_a_panic(
        text in prop::collection::vec(
            prop::sample::select(vec![
                "\"vfs_read\"", "\"\"", "\"a*\"", "|", "||", ",", "=", "mode", "\"fexit\"",
                "\"fentry\"", "syscall", "errno", "true", "false", "optional", "histogram",
                "min_duration", "\"1ms\"", "\"0ms\"", "filter", "\"ret < 0\"", "\"(\"",
                "rate_limit", "0", "1000001", "5", "sum", "spans", "errors_only", "bogus",
                "1 + 2", "(", ")", " ",
            ]),
            0..16,
        ).prop_map(|p| p.join(" ")),
    ) {
        if let Err(e) = syn::parse_str::<KernelSpanArgs>(&text) {
            prop_assert!(!e.to_string().is_empty());
        }
    }
}
