// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The syntax of field paths such as `file->f_path.dentry->d_name.name`.
//!
//! [`parse`] checks the text alone: a parameter name, then `->member` (through
//! a pointer) or `.member` (inside a struct or union held in memory), as in C.
//! Whether the names exist and what they point to is decided by kspan against
//! the running kernel's BTF, which the macro does not have.
//!
//! Whitespace is rejected rather than trimmed, so a byte offset in an error
//! always points into the text as written.

use std::fmt;

/// Most member segments (`->m` or `.m`) a path may have.
pub const MAX_SEGMENTS: usize = 8;

/// How a member is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `->member`: through a pointer to a struct or union.
    Arrow,
    /// `.member`: inside a struct or union.
    Dot,
}

impl Access {
    /// The operator as written: `->` or `.`.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Arrow => "->",
            Access::Dot => ".",
        }
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `->member` or `.member` of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// `->` or `.`.
    pub access: Access,
    /// The member's name (a C identifier).
    pub member: String,
    /// Byte offset of the operator in the path's text.
    pub at: usize,
}

/// A syntactically valid field path: a parameter name and 1 to
/// [`MAX_SEGMENTS`] member segments. Only [`parse`] makes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    text: String,
    parameter: String,
    segments: Vec<Segment>,
}

impl FieldPath {
    /// The parameter the path starts from.
    pub fn parameter(&self) -> &str {
        &self.parameter
    }

    /// The member segments, in order (at least one).
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The path up to and including segment `index` (`file->f_path` for
    /// segment 0 of `file->f_path.dentry`); the whole path for an index past
    /// the end.
    pub fn prefix(&self, index: usize) -> &str {
        let end = self
            .segments
            .get(index + 1)
            .map_or(self.text.len(), |s| s.at);
        self.text.get(..end).unwrap_or(&self.text)
    }

    /// The path before segment `index` (`file` for segment 0).
    pub fn before(&self, index: usize) -> &str {
        let end = self.segments.get(index).map_or(self.text.len(), |s| s.at);
        self.text.get(..end).unwrap_or(&self.text)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for FieldPath {
    type Err = PathSyntaxError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

/// Why a field path is not well formed. Byte offsets count from the start of
/// the text.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathSyntaxError {
    /// The text is empty.
    Empty,
    /// A whitespace character (paths are written without spaces).
    Whitespace {
        /// Where.
        at: usize,
    },
    /// The text does not start with a parameter name.
    ExpectedParameter {
        /// Where (0).
        at: usize,
        /// What is there instead.
        found: char,
    },
    /// A name starts with a digit.
    NotIdentifier {
        /// Where the name starts.
        at: usize,
        /// The name as written.
        text: String,
    },
    /// After a name comes neither `->` nor `.` (or nothing, after the
    /// parameter).
    ExpectedAccess {
        /// Where.
        at: usize,
        /// The name before.
        after: String,
        /// What is there instead; `None` at the end of the text.
        found: Option<char>,
    },
    /// `->` or `.` is not followed by a member name.
    EmptyMember {
        /// Where the name should start.
        at: usize,
        /// The operator before.
        access: Access,
        /// What is there instead; `None` at the end of the text.
        found: Option<char>,
    },
    /// More than [`MAX_SEGMENTS`] segments.
    TooDeep {
        /// Where the first segment too many starts.
        at: usize,
    },
}

impl fmt::Display for PathSyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathSyntaxError::Empty => f.write_str(
                "the field path is empty: write a parameter name followed by `->member` or \
                 `.member`",
            ),
            PathSyntaxError::Whitespace { at } => write!(
                f,
                "whitespace at byte {at}: write the field path without spaces"
            ),
            PathSyntaxError::ExpectedParameter { at, found } => {
                write!(f, "expected a parameter name at byte {at}, found `{found}`")
            }
            PathSyntaxError::NotIdentifier { at, text } => write!(
                f,
                "`{text}` is not an identifier (at byte {at}): a name starts with a letter or `_`"
            ),
            PathSyntaxError::ExpectedAccess { at, after, found } => {
                write!(f, "expected `->` or `.` after `{after}` at byte {at}")?;
                match found {
                    Some(c) => write!(f, ", found `{c}`"),
                    None => f.write_str(", found the end of the path"),
                }
            }
            PathSyntaxError::EmptyMember {
                at,
                access,
                found: None,
            } => write!(f, "empty member name after `{access}` at byte {at}"),
            PathSyntaxError::EmptyMember {
                at,
                access,
                found: Some(c),
            } => write!(
                f,
                "empty member name after `{access}` at byte {at}: found `{c}`, expected a name"
            ),
            PathSyntaxError::TooDeep { at } => write!(
                f,
                "the field path has more than {MAX_SEGMENTS} member segments (segment {} starts \
                 at byte {at})",
                MAX_SEGMENTS + 1
            ),
        }
    }
}

impl std::error::Error for PathSyntaxError {}

/// Parses a field path: a C identifier (the parameter), then 1 to
/// [`MAX_SEGMENTS`] segments `->member` or `.member`, with no whitespace
/// anywhere. Identifiers are ASCII: a letter or `_`, then letters, digits or
/// `_`. Only the syntax is checked; kspan checks the names against BTF.
pub fn parse(text: &str) -> Result<FieldPath, PathSyntaxError> {
    fn is_ident_byte(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b == b'_'
    }
    // Everything before `at` is ASCII, so `at` is a character boundary.
    let char_at = |at: usize| text.get(at..).and_then(|t| t.chars().next());
    let whitespace = |at: usize| match char_at(at) {
        Some(c) if c.is_whitespace() => Err(PathSyntaxError::Whitespace { at }),
        _ => Ok(()),
    };
    // The identifier starting at `at` (maybe empty), checked not to start
    // with a digit.
    let ident = |at: usize| -> Result<&str, PathSyntaxError> {
        let len = text
            .as_bytes()
            .get(at..)
            .unwrap_or_default()
            .iter()
            .take_while(|&&b| is_ident_byte(b))
            .count();
        let name = text.get(at..at + len).unwrap_or_default();
        if name.as_bytes().first().is_some_and(u8::is_ascii_digit) {
            return Err(PathSyntaxError::NotIdentifier {
                at,
                text: name.to_owned(),
            });
        }
        Ok(name)
    };

    if text.is_empty() {
        return Err(PathSyntaxError::Empty);
    }
    whitespace(0)?;
    let parameter = ident(0)?;
    if parameter.is_empty() {
        return Err(PathSyntaxError::ExpectedParameter {
            at: 0,
            found: char_at(0).unwrap_or_default(),
        });
    }
    let mut pos = parameter.len();
    let mut last = parameter;
    let mut segments = Vec::new();
    loop {
        let rest = text.as_bytes().get(pos..).unwrap_or_default();
        let (access, op_len) = match rest {
            [] if !segments.is_empty() => break,
            [b'-', b'>', ..] => (Access::Arrow, 2),
            [b'.', ..] => (Access::Dot, 1),
            _ => {
                whitespace(pos)?;
                return Err(PathSyntaxError::ExpectedAccess {
                    at: pos,
                    after: last.to_owned(),
                    found: char_at(pos),
                });
            }
        };
        if segments.len() == MAX_SEGMENTS {
            return Err(PathSyntaxError::TooDeep { at: pos });
        }
        let at = pos;
        pos += op_len;
        whitespace(pos)?;
        let member = ident(pos)?;
        if member.is_empty() {
            return Err(PathSyntaxError::EmptyMember {
                at: pos,
                access,
                found: char_at(pos),
            });
        }
        pos += member.len();
        last = member;
        segments.push(Segment {
            access,
            member: member.to_owned(),
            at,
        });
    }
    Ok(FieldPath {
        text: text.to_owned(),
        parameter: parameter.to_owned(),
        segments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syntax_err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn parses_members_and_prefixes() {
        let p = parse("file->f_path.dentry->d_name.name").unwrap();
        assert_eq!(p.parameter(), "file");
        let segs: Vec<_> = p
            .segments()
            .iter()
            .map(|s| (s.access, s.member.as_str(), s.at))
            .collect();
        assert_eq!(
            segs,
            [
                (Access::Arrow, "f_path", 4),
                (Access::Dot, "dentry", 12),
                (Access::Arrow, "d_name", 19),
                (Access::Dot, "name", 27),
            ]
        );
        assert_eq!(p.prefix(0), "file->f_path");
        assert_eq!(p.prefix(2), "file->f_path.dentry->d_name");
        assert_eq!(p.prefix(3), p.as_str());
        assert_eq!(p.before(0), "file");
        assert_eq!(p.before(1), "file->f_path");
        assert_eq!(p.to_string(), "file->f_path.dentry->d_name.name");
        assert_eq!("_x9.y_".parse::<FieldPath>().unwrap().segments().len(), 1);
        let deepest = "a->b.c.d.e.f.g.h.i";
        assert_eq!(parse(deepest).unwrap().segments().len(), MAX_SEGMENTS);
    }

    #[test]
    fn syntax_errors_say_what_and_where() {
        assert_eq!(
            syntax_err(""),
            "the field path is empty: write a parameter name followed by `->member` or `.member`"
        );
        assert_eq!(
            syntax_err("file"),
            "expected `->` or `.` after `file` at byte 4, found the end of the path"
        );
        assert_eq!(
            syntax_err("file-f_path"),
            "expected `->` or `.` after `file` at byte 4, found `-`"
        );
        assert_eq!(
            syntax_err("file->f_path[0]"),
            "expected `->` or `.` after `f_path` at byte 12, found `[`"
        );
        assert_eq!(
            syntax_err("file->"),
            "empty member name after `->` at byte 6"
        );
        assert_eq!(
            syntax_err("file..x"),
            "empty member name after `.` at byte 5: found `.`, expected a name"
        );
        assert_eq!(
            syntax_err("file->é"),
            "empty member name after `->` at byte 6: found `é`, expected a name"
        );
        assert_eq!(
            syntax_err("5x->y"),
            "`5x` is not an identifier (at byte 0): a name starts with a letter or `_`"
        );
        assert_eq!(
            parse("file->5x").unwrap_err(),
            PathSyntaxError::NotIdentifier {
                at: 6,
                text: "5x".to_owned()
            }
        );
        assert_eq!(
            syntax_err("->x"),
            "expected a parameter name at byte 0, found `-`"
        );
        for (text, at) in [
            (" file->x", 0),
            ("file ->x", 4),
            ("file-> x", 6),
            ("file->x ", 7),
        ] {
            assert_eq!(
                parse(text).unwrap_err(),
                PathSyntaxError::Whitespace { at },
                "{text:?}"
            );
        }
        assert_eq!(
            syntax_err("file\t->x"),
            "whitespace at byte 4: write the field path without spaces"
        );
        assert_eq!(
            syntax_err("a->b.c.d.e.f.g.h.i.j"),
            "the field path has more than 8 member segments (segment 9 starts at byte 18)"
        );
        // Errors are std errors (for `#[source]`).
        let _: &dyn std::error::Error = &PathSyntaxError::Empty;
    }

    #[test]
    fn hostile_text_never_panics_and_what_parses_reads_back() {
        // xorshift64*, fixed seed: a property test with no dependency.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            state.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        };
        let alphabet = [
            "a", "z", "_", "7", "-", ">", "->", ".", " ", "é", "\0", "\u{202e}", "x",
        ];
        let mut parsed = 0;
        for _ in 0..20_000 {
            let len = next() % 24;
            let text: String = (0..len)
                .map(|_| alphabet[next() as usize % alphabet.len()])
                .collect();
            if let Ok(path) = parse(&text) {
                parsed += 1;
                assert_eq!(path.to_string(), text);
                assert!(!path.segments().is_empty() && path.segments().len() <= MAX_SEGMENTS);
            }
        }
        assert!(parsed > 0, "some random paths are valid");
    }
}
