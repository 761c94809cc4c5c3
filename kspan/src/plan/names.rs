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

/// Up to `n` functions of `names` that a probe of `wanted`, which this
/// kernel lacks, may have meant, best first: near names (as
/// [`closest_names`]) and names that end in `wanted`'s stem (`unlinkat` of
/// `do_unlinkat`: kernels rename a function by its prefix, as 7.x's
/// `filename_unlinkat`). Those `fits` accepts (the handler's parameters,
/// names and types, plan against them) come first; a name that is only
/// alike by its stem is kept only when it fits.
pub fn closest_functions<'a>(
    names: impl Iterator<Item = &'a str>,
    wanted: &str,
    n: usize,
    fits: impl Fn(&str) -> bool,
) -> Vec<String> {
    let limit = (wanted.len() / 3).max(2);
    // The name after its first word; wrappers (`__x64_sys_...`) left out.
    let stem = wanted
        .trim_start_matches('_')
        .split_once('_')
        .map(|(_, rest)| rest)
        .filter(|rest| rest.len() >= 4);
    let same_stem = |name: &str| {
        stem.is_some_and(|stem| {
            !name.starts_with("__")
                && name != wanted
                && name
                    .strip_suffix(stem)
                    .is_some_and(|head| head.is_empty() || head.ends_with('_'))
        })
    };
    let mut scored: Vec<(bool, usize, &str)> = names
        .filter_map(|name| {
            let near = name.len().abs_diff(wanted.len()) <= limit;
            if !near && !same_stem(name) {
                return None;
            }
            let d = strsim::levenshtein(wanted, name);
            if d <= limit && name != wanted {
                return Some((!fits(name), d, name));
            }
            (same_stem(name) && fits(name)).then_some((false, d, name))
        })
        .collect();
    scored.sort();
    scored.dedup();
    scored
        .into_iter()
        .take(n)
        .map(|(_, _, s)| s.to_owned())
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

    #[test]
    fn a_function_that_fits_comes_before_a_nearer_name() {
        // 7.2's names around 6.x's `do_unlinkat`.
        let names = [
            "__x64_sys_unlinkat",
            "filename_unlinkat",
            "io_unlinkat",
            "io_unlinkat_prep",
            "do_rmdir",
        ];
        let all = |_: &str| true;
        assert_eq!(
            closest_functions(names.into_iter(), "do_unlinkat", 3, all),
            ["io_unlinkat", "filename_unlinkat"],
            "nothing tells them apart: nearest first; wrappers and other stems left out"
        );
        let only = |name: &str| name == "filename_unlinkat";
        assert_eq!(
            closest_functions(names.into_iter(), "do_unlinkat", 3, only),
            ["filename_unlinkat", "io_unlinkat"],
            "a near name is kept though it does not fit, after the one that fits"
        );
        let none = |_: &str| false;
        assert_eq!(
            closest_functions(names.into_iter(), "do_unlinkat", 3, none),
            ["io_unlinkat"],
            "a name alike by its stem only is kept only when it fits"
        );
        // A typo is still found by its distance.
        assert_eq!(
            closest_functions(["vfs_read", "ksys_read"].into_iter(), "vfs_raed", 3, all),
            ["vfs_read"]
        );
    }
}
