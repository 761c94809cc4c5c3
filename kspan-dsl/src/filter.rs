// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The text of a probe's in-kernel filters: `min_duration = "1ms"` and
//! `filter = "count >= 65536 || ret < 0"`.
//!
//! A predicate is an or of ands of comparisons (`a && b || c` is
//! `(a && b) || c`, as in Rust), with no parentheses: that is what the BPF
//! program evaluates, a short fixed list of clauses, and a predicate the
//! kernel could not evaluate as written is refused here rather than
//! rewritten. Names are only checked to be identifiers; which names exist
//! and their types are the macro's (the handler's parameters) and the
//! runtime's (the kernel's BTF) to check.

use std::fmt;

/// Comparisons a predicate may hold, in all (the BPF program's bound).
pub const MAX_CLAUSES: usize = 4;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

/// `name op value`, e.g. `count >= 65536`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    /// A captured parameter, or `ret`.
    pub name: String,
    /// The operator.
    pub op: CmpOp,
    /// The constant (wide enough for any `u64` and any `i64`).
    pub value: i128,
    /// Byte offset of the name in the text, for messages.
    pub at: usize,
}

/// A parsed predicate: true when every comparison of some group is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Predicate {
    /// The groups joined by `||`, each a list joined by `&&`.
    pub any_of: Vec<Vec<Comparison>>,
}

impl Predicate {
    /// Every comparison, in the order written.
    pub fn comparisons(&self) -> impl Iterator<Item = &Comparison> {
        self.any_of.iter().flatten()
    }
}

/// What is wrong with a predicate or a duration, and where (a byte offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterSyntaxError {
    /// What is wrong and what to write instead.
    pub message: String,
    /// Byte offset in the text.
    pub at: usize,
}

impl fmt::Display for FilterSyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.message, self.at)
    }
}

impl std::error::Error for FilterSyntaxError {}

fn error(at: usize, message: impl Into<String>) -> FilterSyntaxError {
    FilterSyntaxError {
        message: message.into(),
        at,
    }
}

/// Parses `filter = "..."`.
pub fn parse_predicate(text: &str) -> Result<Predicate, FilterSyntaxError> {
    let mut lexer = Lexer { text, at: 0 };
    let mut any_of = vec![Vec::new()];
    let mut count = 0;
    loop {
        let comparison = lexer.comparison()?;
        count += 1;
        if count > MAX_CLAUSES {
            return Err(error(
                comparison.at,
                format!(
                    "a filter holds at most {MAX_CLAUSES} comparisons (the kernel evaluates a \
                     fixed list); filter the rest in the handler with `span.discard()`"
                ),
            ));
        }
        if let Some(group) = any_of.last_mut() {
            group.push(comparison);
        }
        lexer.skip_spaces();
        if lexer.at == text.len() {
            break;
        }
        let rest = &text[lexer.at..];
        if rest.starts_with("&&") {
            lexer.at += 2;
        } else if rest.starts_with("||") {
            lexer.at += 2;
            any_of.push(Vec::new());
        } else if rest.starts_with('(') || rest.starts_with(')') {
            return Err(error(
                lexer.at,
                "parentheses are not supported: write an or (`||`) of ands (`&&`), e.g. \
                 `a > 1 && b < 2 || ret < 0`",
            ));
        } else {
            return Err(error(lexer.at, "expected `&&` or `||` between comparisons"));
        }
    }
    Ok(Predicate { any_of })
}

struct Lexer<'a> {
    text: &'a str,
    at: usize,
}

impl Lexer<'_> {
    fn skip_spaces(&mut self) {
        let rest = &self.text[self.at..];
        self.at += rest.len() - rest.trim_start().len();
    }

    fn comparison(&mut self) -> Result<Comparison, FilterSyntaxError> {
        self.skip_spaces();
        let rest = &self.text[self.at..];
        if rest.starts_with('(') {
            return Err(error(
                self.at,
                "parentheses are not supported: write an or (`||`) of ands (`&&`), e.g. \
                 `a > 1 && b < 2 || ret < 0`",
            ));
        }
        let at = self.at;
        let name_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..name_len];
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(error(
                at,
                "expected a parameter name or `ret` first, e.g. `count >= 65536`",
            ));
        }
        self.at += name_len;
        self.skip_spaces();
        let rest = &self.text[self.at..];
        let (op, len) = [
            ("==", CmpOp::Eq),
            ("!=", CmpOp::Ne),
            ("<=", CmpOp::Le),
            (">=", CmpOp::Ge),
            ("<", CmpOp::Lt),
            (">", CmpOp::Gt),
        ]
        .into_iter()
        .find(|(s, _)| rest.starts_with(s))
        .map(|(s, op)| (op, s.len()))
        .ok_or_else(|| {
            error(
                self.at,
                format!(
                    "expected a comparison after `{name}`: one of `==`, `!=`, `<`, `<=`, `>`, `>=`"
                ),
            )
        })?;
        self.at += len;
        self.skip_spaces();
        let value = self.integer()?;
        Ok(Comparison {
            name: name.to_owned(),
            op,
            value,
            at,
        })
    }

    /// A decimal or `0x` integer, maybe negative, `_` allowed between digits.
    fn integer(&mut self) -> Result<i128, FilterSyntaxError> {
        let at = self.at;
        let rest = &self.text[self.at..];
        let (negative, digits_from) = match rest.strip_prefix('-') {
            Some(_) => (true, 1),
            None => (false, 0),
        };
        let body = &rest[digits_from..];
        let len = body
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(body.len());
        let token = body[..len].replace('_', "");
        let parsed = match token
            .strip_prefix("0x")
            .or_else(|| token.strip_prefix("0X"))
        {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => token.parse::<u64>(),
        };
        let magnitude = parsed.map_err(|_| {
            error(
                at,
                "expected an integer constant (decimal or 0x hex, e.g. `65536`, `-1`, `0x40`); \
                 compare with constants only",
            )
        })?;
        self.at += digits_from + len;
        Ok(if negative {
            -i128::from(magnitude)
        } else {
            i128::from(magnitude)
        })
    }
}

/// Parses `min_duration = "..."` into nanoseconds: a number (decimals
/// allowed) and a unit, `ns`, `us` (or `µs`), `ms` or `s`; more than zero.
pub fn parse_duration(text: &str) -> Result<u64, FilterSyntaxError> {
    // Offsets count in the text as written, leading whitespace included.
    let lead = text.len() - text.trim_start().len();
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit_ns: u64 = match unit.trim() {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "" => {
            return Err(error(
                lead + split,
                "a duration needs a unit: `ns`, `us`, `ms` or `s`, e.g. \"1ms\"",
            ))
        }
        other => {
            return Err(error(
                lead + split,
                format!("unknown unit `{other}`: use `ns`, `us`, `ms` or `s`, e.g. \"250us\""),
            ))
        }
    };
    let number = number.replace('_', "");
    let (whole, fraction) = number.split_once('.').unwrap_or((&number, ""));
    let bad = || {
        error(
            lead,
            "expected a number and a unit, e.g. \"1ms\" or \"1.5us\"",
        )
    };
    if whole.is_empty() && fraction.is_empty() {
        return Err(bad());
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| bad())?
    };
    // Nanoseconds of the fraction, digit by digit; below a nanosecond is cut.
    let mut fraction_ns = 0u64;
    let mut scale = unit_ns;
    for digit in fraction.chars() {
        let d = u64::from(digit.to_digit(10).ok_or_else(bad)?);
        scale /= 10;
        fraction_ns += d * scale;
    }
    let ns = whole
        .checked_mul(unit_ns)
        .and_then(|n| n.checked_add(fraction_ns))
        .ok_or_else(|| error(lead, "the duration is too long"))?;
    if ns == 0 {
        return Err(error(
            lead,
            "a minimum duration of zero keeps every call: remove `min_duration`",
        ));
    }
    Ok(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmp(name: &str, op: CmpOp, value: i128, at: usize) -> Comparison {
        Comparison {
            name: name.into(),
            op,
            value,
            at,
        }
    }

    #[test]
    fn predicates_are_ors_of_ands() {
        let p = parse_predicate("count >= 65536").unwrap();
        assert_eq!(p.any_of, vec![vec![cmp("count", CmpOp::Ge, 65536, 0)]]);
        let p = parse_predicate("a>1&&b!=0x10 || ret < -1").unwrap();
        assert_eq!(
            p.any_of,
            vec![
                vec![cmp("a", CmpOp::Gt, 1, 0), cmp("b", CmpOp::Ne, 16, 5)],
                vec![cmp("ret", CmpOp::Lt, -1, 16)],
            ]
        );
        let p = parse_predicate(" x == 18_446_744_073_709_551_615 ").unwrap();
        assert_eq!(p.any_of[0][0].value, i128::from(u64::MAX));
        for op in ["==", "!=", "<", "<=", ">", ">="] {
            let p = parse_predicate(&format!("ret {op} 0")).unwrap();
            assert_eq!(p.any_of[0][0].op.as_str(), op);
        }
    }

    #[test]
    fn bad_predicates_say_what_and_where() {
        let e = |t: &str| parse_predicate(t).unwrap_err();
        assert_eq!(e("count >= ").at, 9);
        assert!(e("count >= n").message.contains("integer constant"));
        assert!(e("count => 1").message.contains("comparison after `count`"));
        assert!(e("(a > 1)").message.contains("parentheses"));
        assert!(e("a > 1 && (b < 2)").message.contains("parentheses"));
        assert!(e("a > 1 and b < 2").message.contains("`&&` or `||`"));
        assert!(e("1 < a").message.contains("parameter name"));
        assert!(e("").message.contains("parameter name"));
        assert!(e("a > 1 &&").message.contains("parameter name"));
        let five = e("a>1 && a>2 && a>3 && a>4 && a>5");
        assert!(five.message.contains("at most 4"), "{five}");
        assert_eq!(five.at, 28);
        assert!(e("a > 99999999999999999999").message.contains("integer"));
    }

    #[test]
    fn durations_have_units() {
        assert_eq!(parse_duration("1ms"), Ok(1_000_000));
        assert_eq!(parse_duration("250us"), Ok(250_000));
        assert_eq!(parse_duration("250µs"), Ok(250_000));
        assert_eq!(parse_duration("1.5us"), Ok(1_500));
        assert_eq!(parse_duration("2 s"), Ok(2_000_000_000));
        assert_eq!(parse_duration("10ns"), Ok(10));
        assert_eq!(parse_duration(".5ms"), Ok(500_000));
        assert!(parse_duration("1")
            .unwrap_err()
            .message
            .contains("needs a unit"));
        assert!(parse_duration("1 min")
            .unwrap_err()
            .message
            .contains("unknown unit `min`"));
        assert!(parse_duration("ms").unwrap_err().message.contains("number"));
        assert!(parse_duration("0ms").unwrap_err().message.contains("zero"));
        assert!(parse_duration("1.2.3ms").is_err());
        // Found by the property tests: offsets counted in the trimmed text
        // fell inside a leading multi-byte space.
        let e = parse_duration("\u{a0}1").unwrap_err();
        assert_eq!(e.at, 3, "{e}");
        assert_eq!(parse_duration("  1 min").unwrap_err().at, 3);
        assert_eq!(parse_duration(" 0ms").unwrap_err().at, 1);
        assert!(parse_duration("99999999999s")
            .unwrap_err()
            .message
            .contains("too long"));
    }
}
