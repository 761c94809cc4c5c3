// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Property tests of the annotation language's parsers (issue 52): what is
//! generated valid, rendered as text, parses back to what was generated, and
//! any text at all parses or is refused with an error that says what is
//! wrong where, never a panic.
//!
//! Each property runs proptest's default number of cases (256);
//! `PROPTEST_CASES=100000 cargo test -p kspan-dsl --test properties` runs
//! more. A failure prints the smallest input proptest could shrink it to.

use kspan_dsl::{
    check_alternatives, is_pattern, parse_duration, parse_field_path, parse_predicate, Access,
    AlternativeError, CmpOp, FilterSyntaxError, Mode, PathSyntaxError, UnknownMode, MAX_CLAUSES,
    MAX_SEGMENTS,
};
use proptest::prelude::*;
use proptest::test_runner::Config;

/// proptest's defaults (`PROPTEST_CASES` included), without the files of
/// failures it would write beside the sources: a failure found is kept as
/// a unit test instead.
fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}

/// A C identifier, as paths and filters name parameters and members.
fn ident() -> impl Strategy<Value = String> {
    "[A-Za-z_][A-Za-z0-9_]{0,10}"
}

fn access() -> impl Strategy<Value = Access> {
    prop_oneof![Just(Access::Arrow), Just(Access::Dot)]
}

/// Text made of the pieces paths and filters are made of, and of what
/// breaks them: far likelier than arbitrary text to get deep into a parser.
fn pieces(alphabet: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(alphabet), 0..max).prop_map(|p| p.concat())
}

const PATH_PIECES: &[&str] = &[
    "a", "Z", "_", "f_path", "7", "0", "-", ">", "->", ".", " ", "\t", "é", "\0", "\u{202e}",
    "\u{a0}", "[", "*",
];

const FILTER_PIECES: &[&str] = &[
    "a",
    "ret",
    "_x",
    "7",
    "0x",
    "0X",
    "ff",
    "_",
    "-",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "=",
    "!",
    "&&",
    "||",
    "&",
    "|",
    "(",
    ")",
    " ",
    "\t",
    "\u{3000}",
    "é",
    "99999999999999999999",
    "18446744073709551615",
];

const DURATION_PIECES: &[&str] = &[
    "1",
    "0",
    "9",
    ".",
    "_",
    " ",
    "\u{a0}",
    "ns",
    "us",
    "µs",
    "ms",
    "s",
    "min",
    "µ",
    "é",
    "18446744073709551615",
];

/// The character at byte `at` of `text`, if `at` is a character boundary
/// before its end.
fn char_at(text: &str, at: usize) -> Option<char> {
    text.get(at..).and_then(|t| t.chars().next())
}

// ---------------------------------------------------------------------------
// Field paths
// ---------------------------------------------------------------------------

/// `parameter` and its segments written out, with the byte offset of each
/// segment's operator.
fn render_path(parameter: &str, segments: &[(Access, String)]) -> (String, Vec<usize>) {
    let mut text = parameter.to_owned();
    let mut offsets = Vec::new();
    for (access, member) in segments {
        offsets.push(text.len());
        text.push_str(access.as_str());
        text.push_str(member);
    }
    (text, offsets)
}

/// Checks that `error`, refusing `text`, names a fault that is there.
fn path_error_names_its_fault(text: &str, error: &PathSyntaxError) -> Result<(), TestCaseError> {
    let message = error.to_string();
    match error {
        PathSyntaxError::Empty => prop_assert!(text.is_empty()),
        PathSyntaxError::Whitespace { at } => {
            prop_assert!(char_at(text, *at).is_some_and(char::is_whitespace));
        }
        PathSyntaxError::ExpectedParameter { at, found } => {
            prop_assert_eq!(*at, 0);
            prop_assert_eq!(char_at(text, 0), Some(*found));
            prop_assert!(!found.is_ascii_alphanumeric() && *found != '_');
        }
        PathSyntaxError::NotIdentifier { at, text: name } => {
            prop_assert!(text
                .get(*at..)
                .is_some_and(|t| t.starts_with(name.as_str())));
            prop_assert!(name.starts_with(|c: char| c.is_ascii_digit()));
        }
        PathSyntaxError::ExpectedAccess { at, after, found } => {
            prop_assert!(text.get(..*at).is_some_and(|t| t.ends_with(after.as_str())));
            prop_assert_eq!(char_at(text, *at), *found);
            prop_assert!(!text[*at..].starts_with("->") && !text[*at..].starts_with('.'));
        }
        PathSyntaxError::EmptyMember { at, access, found } => {
            prop_assert!(text
                .get(..*at)
                .is_some_and(|t| t.ends_with(access.as_str())));
            prop_assert_eq!(char_at(text, *at), *found);
        }
        PathSyntaxError::TooDeep { at } => {
            prop_assert!(text
                .get(*at..)
                .is_some_and(|t| t.starts_with("->") || t.starts_with('.')));
        }
        other => prop_assert!(false, "a new error, unchecked here: {other:?}"),
    }
    if let Some(at) = path_error_at(error) {
        prop_assert!(text.is_char_boundary(at) && at <= text.len());
        let where_ = format!("byte {at}");
        prop_assert!(message.contains(&where_), "{message:?} says where");
    }
    Ok(())
}

fn path_error_at(error: &PathSyntaxError) -> Option<usize> {
    match error {
        PathSyntaxError::Whitespace { at }
        | PathSyntaxError::ExpectedParameter { at, .. }
        | PathSyntaxError::NotIdentifier { at, .. }
        | PathSyntaxError::ExpectedAccess { at, .. }
        | PathSyntaxError::EmptyMember { at, .. }
        | PathSyntaxError::TooDeep { at } => Some(*at),
        _ => None,
    }
}

fn check_any_path(text: &str) -> Result<(), TestCaseError> {
    match parse_field_path(text) {
        Ok(path) => {
            prop_assert_eq!(path.as_str(), text);
            prop_assert!((1..=MAX_SEGMENTS).contains(&path.segments().len()));
            // What parsed is what a generated path renders as.
            let segments: Vec<_> = path
                .segments()
                .iter()
                .map(|s| (s.access, s.member.clone()))
                .collect();
            let (rendered, offsets) = render_path(path.parameter(), &segments);
            prop_assert_eq!(&rendered, text);
            let ats: Vec<_> = path.segments().iter().map(|s| s.at).collect();
            prop_assert_eq!(ats, offsets);
        }
        Err(error) => path_error_names_its_fault(text, &error)?,
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn field_paths_read_back_as_generated(
        parameter in ident(),
        segments in prop::collection::vec((access(), ident()), 1..=MAX_SEGMENTS),
    ) {
        let (text, offsets) = render_path(&parameter, &segments);
        let path = parse_field_path(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        prop_assert_eq!(path.parameter(), parameter.as_str());
        prop_assert_eq!(path.to_string(), text.clone());
        prop_assert_eq!(path.segments().len(), segments.len());
        for (i, (segment, (access, member))) in path.segments().iter().zip(&segments).enumerate() {
            prop_assert_eq!(segment.access, *access);
            prop_assert_eq!(&segment.member, member);
            prop_assert_eq!(segment.at, offsets[i]);
            // `before` and `prefix` cut the text at the segments.
            prop_assert_eq!(path.before(i), &text[..offsets[i]]);
            let end = offsets.get(i + 1).copied().unwrap_or(text.len());
            prop_assert_eq!(path.prefix(i), &text[..end]);
        }
    }

    #[test]
    fn field_paths_too_deep_are_refused_at_the_first_segment_too_many(
        parameter in ident(),
        segments in prop::collection::vec((access(), ident()), MAX_SEGMENTS + 1..MAX_SEGMENTS + 4),
    ) {
        let (text, offsets) = render_path(&parameter, &segments);
        prop_assert_eq!(
            parse_field_path(&text),
            Err(PathSyntaxError::TooDeep { at: offsets[MAX_SEGMENTS] })
        );
    }

    #[test]
    fn field_paths_from_arbitrary_text_parse_or_name_the_fault(text in any::<String>()) {
        check_any_path(&text)?;
    }

    #[test]
    fn field_paths_from_path_pieces_parse_or_name_the_fault(text in pieces(PATH_PIECES, 24)) {
        check_any_path(&text)?;
    }
}

// ---------------------------------------------------------------------------
// Filters
// ---------------------------------------------------------------------------

fn cmp_op() -> impl Strategy<Value = CmpOp> {
    prop::sample::select(vec![
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ])
}

/// Any constant a filter holds: a `u64` or the negation of one.
fn constant() -> impl Strategy<Value = i128> {
    let max = i128::from(u64::MAX);
    prop_oneof![-max..=max, -300i128..300, Just(max), Just(-max)]
}

/// How a constant is written.
#[derive(Debug, Clone, Copy)]
enum Radix {
    Decimal,
    /// `0x`, or `0X` when `true`; upper-case digits when the second is.
    Hex(bool, bool),
}

fn radix() -> impl Strategy<Value = Radix> {
    prop_oneof![
        Just(Radix::Decimal),
        (any::<bool>(), any::<bool>()).prop_map(|(x, upper)| Radix::Hex(x, upper)),
    ]
}

/// Whitespace between tokens, maybe none.
fn gap() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", "", " ", "  ", "\t", "\n", "\u{3000}"])
}

/// One generated comparison and how to write it.
#[derive(Debug, Clone)]
struct Written {
    name: String,
    op: CmpOp,
    value: i128,
    radix: Radix,
    /// Group digits with `_` every this many (0: not).
    group: usize,
    gaps: [&'static str; 3],
}

fn written() -> impl Strategy<Value = Written> {
    (
        ident(),
        cmp_op(),
        constant(),
        radix(),
        0usize..5,
        [gap(), gap(), gap()],
    )
        .prop_map(|(name, op, value, radix, group, gaps)| Written {
            name,
            op,
            value,
            radix,
            group,
            gaps,
        })
}

fn render_constant(value: i128, radix: Radix, group: usize) -> String {
    let magnitude = value.unsigned_abs();
    let (prefix, digits) = match radix {
        Radix::Decimal => ("", magnitude.to_string()),
        Radix::Hex(upper_x, upper) => (
            if upper_x { "0X" } else { "0x" },
            if upper {
                format!("{magnitude:X}")
            } else {
                format!("{magnitude:x}")
            },
        ),
    };
    let digits = if group == 0 {
        digits
    } else {
        let chars: Vec<char> = digits.chars().collect();
        chars
            .chunks(group)
            .map(|c| c.iter().collect::<String>())
            .collect::<Vec<_>>()
            .join("_")
    };
    let sign = if value < 0 { "-" } else { "" };
    format!("{sign}{prefix}{digits}")
}

/// The groups (joined by `||`, each by `&&`) written out, with the byte
/// offset of each comparison's name, in order.
fn render_predicate(groups: &[Vec<Written>], joints: &[&str]) -> (String, Vec<usize>) {
    let mut text = String::new();
    let mut names = Vec::new();
    let mut joint = joints.iter().cycle();
    for (g, group) in groups.iter().enumerate() {
        for (i, w) in group.iter().enumerate() {
            if g > 0 || i > 0 {
                text.push_str(joint.next().unwrap_or(&""));
                text.push_str(if i == 0 { "||" } else { "&&" });
            }
            text.push_str(w.gaps[0]);
            names.push(text.len());
            text.push_str(&w.name);
            text.push_str(w.gaps[1]);
            text.push_str(w.op.as_str());
            text.push_str(w.gaps[2]);
            text.push_str(&render_constant(w.value, w.radix, w.group));
        }
    }
    (text, names)
}

/// 1 to `max` comparisons, split into groups where a coin says so.
fn predicate(max: usize) -> impl Strategy<Value = Vec<Vec<Written>>> {
    prop::collection::vec((written(), any::<bool>()), 1..=max).prop_map(|flat| {
        let mut groups: Vec<Vec<Written>> = Vec::new();
        for (w, new_group) in flat {
            match groups.last_mut() {
                Some(group) if !new_group => group.push(w),
                _ => groups.push(vec![w]),
            }
        }
        groups
    })
}

fn check_filter_error(text: &str, error: &FilterSyntaxError) -> Result<(), TestCaseError> {
    prop_assert!(error.at <= text.len() && text.is_char_boundary(error.at));
    prop_assert!(!error.message.is_empty());
    let shown = error.to_string();
    let where_ = format!("(at byte {})", error.at);
    prop_assert!(shown.ends_with(&where_), "{shown:?}");
    Ok(())
}

fn check_any_predicate(text: &str) -> Result<(), TestCaseError> {
    match parse_predicate(text) {
        Ok(p) => {
            let n = p.comparisons().count();
            prop_assert!((1..=MAX_CLAUSES).contains(&n));
            prop_assert!(p.any_of.iter().all(|g| !g.is_empty()));
            for c in p.comparisons() {
                // The name is where the comparison says it is.
                prop_assert!(text[c.at..].starts_with(c.name.as_str()));
                prop_assert!(
                    !c.name.is_empty() && !c.name.starts_with(|c: char| c.is_ascii_digit())
                );
                prop_assert!(c.value.unsigned_abs() <= u128::from(u64::MAX));
            }
            // What parsed, written out plainly, parses to the same.
            let groups: Vec<Vec<Written>> = p
                .any_of
                .iter()
                .map(|g| {
                    g.iter()
                        .map(|c| Written {
                            name: c.name.clone(),
                            op: c.op,
                            value: c.value,
                            radix: Radix::Decimal,
                            group: 0,
                            gaps: [" ", " ", " "],
                        })
                        .collect()
                })
                .collect();
            let (plain, _) = render_predicate(&groups, &[" "]);
            let again = parse_predicate(&plain)
                .map_err(|e| TestCaseError::fail(format!("{plain:?}: {e}")))?;
            prop_assert_eq!(without_offsets(&again), without_offsets(&p));
        }
        Err(error) => check_filter_error(text, &error)?,
    }
    Ok(())
}

fn without_offsets(p: &kspan_dsl::Predicate) -> Vec<Vec<(String, CmpOp, i128)>> {
    p.any_of
        .iter()
        .map(|g| g.iter().map(|c| (c.name.clone(), c.op, c.value)).collect())
        .collect()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn filters_read_back_as_generated(
        groups in predicate(MAX_CLAUSES),
        joints in prop::collection::vec(gap(), 1..4),
    ) {
        let (text, names) = render_predicate(&groups, &joints);
        let p = parse_predicate(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        prop_assert_eq!(p.any_of.len(), groups.len());
        let parsed: Vec<_> = p.comparisons().collect();
        let generated: Vec<_> = groups.iter().flatten().collect();
        prop_assert_eq!(parsed.len(), generated.len());
        for ((c, w), at) in parsed.iter().zip(&generated).zip(&names) {
            prop_assert_eq!(&c.name, &w.name);
            prop_assert_eq!(c.op, w.op);
            prop_assert_eq!(c.value, w.value);
            prop_assert_eq!(c.at, *at);
        }
        for (group, generated) in p.any_of.iter().zip(&groups) {
            prop_assert_eq!(group.len(), generated.len());
        }
    }

    #[test]
    fn filters_of_too_many_comparisons_are_refused_at_the_first_too_many(
        groups in predicate(MAX_CLAUSES + 3),
    ) {
        let (text, names) = render_predicate(&groups, &[" "]);
        let n: usize = groups.iter().map(Vec::len).sum();
        match parse_predicate(&text) {
            Ok(_) => prop_assert!(n <= MAX_CLAUSES),
            Err(e) => {
                prop_assert!(n > MAX_CLAUSES, "{text:?}: {e}");
                prop_assert_eq!(e.at, names[MAX_CLAUSES]);
                prop_assert!(e.message.contains("at most"));
            }
        }
    }

    #[test]
    fn filters_from_arbitrary_text_parse_or_say_where(text in any::<String>()) {
        check_any_predicate(&text)?;
    }

    #[test]
    fn filters_from_filter_pieces_parse_or_say_where(text in pieces(FILTER_PIECES, 16)) {
        check_any_predicate(&text)?;
    }
}

// ---------------------------------------------------------------------------
// Durations
// ---------------------------------------------------------------------------

const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
];

fn check_any_duration(text: &str) -> Result<(), TestCaseError> {
    match parse_duration(text) {
        Ok(ns) => prop_assert!(ns > 0),
        Err(error) => check_filter_error(text, &error)?,
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn durations_read_back_as_generated(
        whole in prop_oneof![0u64..2_000, any::<u64>()],
        fraction in "[0-9]{0,12}",
        dot in any::<bool>(),
        unit in prop::sample::select(UNITS),
        space in gap(),
    ) {
        let (unit, unit_ns) = unit;
        let fraction = if dot { fraction } else { String::new() };
        let number = if dot { format!("{whole}.{fraction}") } else { whole.to_string() };
        let text = format!("{number}{space}{unit}");
        // Below a nanosecond is cut.
        let fraction_ns = match fraction.len() {
            0 => 0,
            len => fraction.parse::<u128>().unwrap() * unit_ns / 10u128.pow(len as u32),
        };
        let expected = u128::from(whole) * unit_ns + fraction_ns;
        match parse_duration(&text) {
            Ok(ns) => prop_assert_eq!(u128::from(ns), expected, "{:?}", text),
            Err(e) if expected == 0 => prop_assert!(e.message.contains("zero"), "{text:?}: {e}"),
            Err(e) => {
                prop_assert!(expected > u128::from(u64::MAX), "{text:?}: {e}");
                prop_assert!(e.message.contains("too long"), "{text:?}: {e}");
            }
        }
    }

    #[test]
    fn durations_from_arbitrary_text_parse_or_say_where(text in any::<String>()) {
        check_any_duration(&text)?;
    }

    #[test]
    fn durations_from_duration_pieces_parse_or_say_where(text in pieces(DURATION_PIECES, 8)) {
        check_any_duration(&text)?;
    }

    /// Whitespace around a duration changes nothing, and an error still
    /// points where the fault is in the text as written.
    #[test]
    fn durations_ignore_surrounding_whitespace(
        // Not blank: blank text has no fault to point at but its end.
        text in (pieces(DURATION_PIECES, 4), prop::sample::select(DURATION_PIECES), pieces(DURATION_PIECES, 4))
            .prop_filter_map("blank", |(a, b, c)| {
                let text = format!("{a}{b}{c}");
                (!text.trim().is_empty()).then_some(text)
            }),
        before in gap(),
        after in gap(),
    ) {
        let padded = format!("{before}{text}{after}");
        match (parse_duration(&text), parse_duration(&padded)) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(a), Err(b)) => {
                prop_assert_eq!(&a.message, &b.message);
                prop_assert_eq!(b.at, a.at + before.len(), "{:?} against {:?}", padded, text);
            }
            (a, b) => prop_assert!(false, "{text:?}: {a:?}, {padded:?}: {b:?}"),
        }
    }
}

// ---------------------------------------------------------------------------
// Modes and alternatives
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    #[test]
    fn modes_read_back_and_nothing_else_is_a_mode(text in prop_oneof![
        prop::sample::select(Mode::ALL.map(Mode::as_str).to_vec()).prop_map(str::to_owned),
        any::<String>(),
        "[a-z]{0,9}",
    ]) {
        match text.parse::<Mode>() {
            Ok(mode) => prop_assert_eq!(mode.as_str(), text.as_str()),
            Err(e) => {
                prop_assert!(Mode::ALL.iter().all(|m| m.as_str() != text));
                prop_assert_eq!(&e, &UnknownMode(text.clone()));
                let shown = e.to_string();
                let quoted = format!("`{text}`");
                prop_assert!(shown.contains(&quoted));
            }
        }
        for mode in Mode::ALL {
            prop_assert_eq!(mode.to_string().parse::<Mode>(), Ok(mode));
        }
    }

    /// A probe's names are accepted when none is empty, none a pattern and
    /// no two alike; otherwise the error names the first fault, in order.
    #[test]
    fn alternatives_are_refused_for_their_first_fault(
        names in prop::collection::vec(prop::sample::select(vec!["a", "b", "c", "", "d*", "e?"]), 1..6),
    ) {
        let (function, alternatives) = (names[0], &names[1..]);
        // The first fault as the rules state it.
        let mut expected = Ok(());
        for (i, &name) in alternatives.iter().enumerate() {
            let earlier = &names[..=i];
            if name.is_empty() {
                expected = Err(AlternativeError::Empty);
            } else if let Some(p) = earlier.iter().chain([&name]).find(|n| is_pattern(n)) {
                expected = Err(AlternativeError::Pattern((*p).to_owned()));
            } else if earlier.contains(&name) {
                expected = Err(AlternativeError::Duplicate(name.to_owned()));
            } else {
                continue;
            }
            break;
        }
        prop_assert_eq!(check_alternatives(function, alternatives), expected);
    }
}
