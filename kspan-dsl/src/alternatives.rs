// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Alternatives: a probe naming several kernel functions,
//! `#[kernel_span("do_unlinkat" | "filename_unlinkat")]`, of which the first
//! the running kernel has (and can trace) is traced.
//!
//! Kernels rename functions (7.x's `filename_unlinkat` is 6.x's
//! `do_unlinkat`); one binary that runs on both names both. The rules on the
//! text are here, for the macro (an error at the token) and for the runtime
//! (a spec written by hand).

use std::fmt;

/// Why a function name cannot be one of a probe's alternatives.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AlternativeError {
    /// The name is empty.
    Empty,
    /// The name was given before, in the same probe.
    Duplicate(String),
    /// The name is a pattern (`vfs_*`), or a pattern has alternatives.
    Pattern(String),
    /// A syscall source has alternatives.
    Syscall,
}

impl fmt::Display for AlternativeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AlternativeError::Empty => f.write_str("an alternative kernel function name is empty"),
            AlternativeError::Duplicate(name) => write!(
                f,
                "`{name}` is named twice: each alternative is another kernel function; remove \
                 one"
            ),
            AlternativeError::Pattern(name) => write!(
                f,
                "a pattern (`{name}`) cannot take part in alternatives: a pattern traces every \
                 function it matches, alternatives trace the first function the kernel has; \
                 write names without `*` or `?`, or a probe of its own for the pattern"
            ),
            AlternativeError::Syscall => f.write_str(
                "a syscall source traces one system call: system calls keep their names across \
                 kernels (an application that makes two, such as `open` and `openat`, needs a \
                 probe for each); alternatives (`|`) are for kernel functions",
            ),
        }
    }
}

impl std::error::Error for AlternativeError {}

/// Whether `text` is a pattern (`vfs_*`) rather than one function name.
pub fn is_pattern(text: &str) -> bool {
    text.contains(['*', '?'])
}

/// Checks `name`, the next alternative after `earlier` (the probe's
/// function first, then the alternatives before it).
pub fn check_alternative(earlier: &[&str], name: &str) -> Result<(), AlternativeError> {
    if name.is_empty() {
        return Err(AlternativeError::Empty);
    }
    if let Some(pattern) = earlier.iter().chain([&name]).find(|n| is_pattern(n)) {
        return Err(AlternativeError::Pattern((*pattern).to_owned()));
    }
    if earlier.contains(&name) {
        return Err(AlternativeError::Duplicate(name.to_owned()));
    }
    Ok(())
}

/// Checks every alternative of a probe whose function is `function`.
pub fn check_alternatives(function: &str, alternatives: &[&str]) -> Result<(), AlternativeError> {
    let mut earlier = vec![function];
    for &name in alternatives {
        check_alternative(&earlier, name)?;
        earlier.push(name);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_in_order() {
        assert_eq!(
            check_alternatives("do_unlinkat", &["filename_unlinkat"]),
            Ok(())
        );
        assert_eq!(check_alternatives("a", &[]), Ok(()));
        assert_eq!(
            check_alternatives("a", &["b", ""]),
            Err(AlternativeError::Empty)
        );
        assert_eq!(
            check_alternatives("a", &["b", "a"]),
            Err(AlternativeError::Duplicate("a".into()))
        );
        assert_eq!(
            check_alternatives("a", &["b", "b"]),
            Err(AlternativeError::Duplicate("b".into()))
        );
        assert_eq!(
            check_alternatives("vfs_*", &["b"]),
            Err(AlternativeError::Pattern("vfs_*".into()))
        );
        assert_eq!(
            check_alternatives("a", &["b?"]),
            Err(AlternativeError::Pattern("b?".into()))
        );
        assert!(is_pattern("vfs_*") && is_pattern("a?") && !is_pattern("vfs_read"));
    }

    #[test]
    fn messages_name_the_function_and_the_fix() {
        assert_eq!(
            AlternativeError::Duplicate("x".into()).to_string(),
            "`x` is named twice: each alternative is another kernel function; remove one"
        );
        assert!(AlternativeError::Pattern("vfs_*".into())
            .to_string()
            .starts_with("a pattern (`vfs_*`) cannot take part in alternatives"));
    }
}
