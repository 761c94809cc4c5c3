// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Names made once per process (interned function names and attribute
//! keys) and suggestions for misspelt ones.

use std::collections::HashSet;

use crate::annotation::attributes::ARG_PREFIX;

/// `kernel.arg.<name><suffix>`, interned: a span's attribute key then costs
/// a copy of a static string, not a clone.
pub(super) fn arg_attribute(name: &str, suffix: &str) -> &'static str {
    intern(&format!("{ARG_PREFIX}{name}{suffix}"))
}

/// A `'static` copy of `name`, made once per distinct name.
pub(super) fn intern(name: &str) -> &'static str {
    // Leaked once per distinct name (function, attribute key, enumerator):
    // bounded by the kernel's BTF, and shared by every plan of the process.
    static NAMES: std::sync::Mutex<Option<HashSet<&'static str>>> = std::sync::Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    let names = names.get_or_insert_with(HashSet::new);
    if let Some(found) = names.get(name) {
        return found;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}

/// Up to `n` names closest to `wanted` (Levenshtein distance), nearest
/// first; only plausible ones: at most a third of the name changed.
pub fn closest_names<'a>(
    names: impl Iterator<Item = &'a str>,
    wanted: &str,
    n: usize,
) -> Vec<String> {
    let limit = (wanted.len() / 3).max(2);
    let mut scored: Vec<(usize, &str)> = names
        .filter_map(|name| {
            if name.len().abs_diff(wanted.len()) > limit {
                return None;
            }
            let d = strsim::levenshtein(wanted, name);
            (d <= limit).then_some((d, name))
        })
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(n)
        .map(|(_, s)| s.to_owned())
        .collect()
}

/// ``; did you mean `a`, `b`?`` for a non-empty list, else nothing.
pub fn did_you_mean(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        return String::new();
    }
    let names: Vec<String> = suggestions.iter().map(|s| format!("`{s}`")).collect();
    format!("; did you mean {}?", names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_are_near_and_ordered() {
        let names = ["vfs_read", "vfs_readv", "vfs_write", "ksys_read"];
        assert_eq!(
            closest_names(names.into_iter(), "vfs_raed", 3),
            ["vfs_read"]
        );
        assert!(closest_names(names.into_iter(), "tcp_sendmsg", 3).is_empty());
        assert_eq!(arg_attribute("count", ".fault"), "kernel.arg.count.fault");
    }
}
