// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Parsing of `#[kernel_span("function", key = value, ...)]`.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{LitStr, Token};

/// Keywords of the attribute.
pub(crate) mod kw {
    syn::custom_keyword!(mode);
    syn::custom_keyword!(errno);
    syn::custom_keyword!(histogram);
    syn::custom_keyword!(path);
    syn::custom_keyword!(user);
    syn::custom_keyword!(max);
    syn::custom_keyword!(len);
    syn::custom_keyword!(at);
    syn::custom_keyword!(syscall);
    syn::custom_keyword!(min_duration);
    syn::custom_keyword!(errors_only);
    syn::custom_keyword!(filter);
    syn::custom_keyword!(rate_limit);
    syn::custom_keyword!(sum);
    syn::custom_keyword!(spans);
    syn::custom_keyword!(optional);
}

/// The keys of `#[kernel_span]`, as the unknown-key message lists them.
const KEYS: &str =
    "`mode`, `errno`, `min_duration`, `errors_only`, `filter`, `rate_limit`, `sum`, \
                    `spans`, `histogram` and `optional`";

/// The parsed attribute.
#[derive(Debug)]
pub(crate) struct KernelSpanArgs {
    /// The kernel function to trace.
    pub function: LitStr,
    /// The functions to trace instead where the kernel lacks it, in order
    /// (`"do_unlinkat" | "filename_unlinkat"`).
    pub alternatives: Vec<LitStr>,
    /// Whether the runtime starts without the probe where none of its
    /// functions can be traced (default false).
    pub optional: bool,
    /// The attach mode and its token (for errors about it).
    pub mode: Mode,
    /// Whether a negative errno return fails the span (default true).
    pub errno: bool,
    /// Whether the kernel keeps a latency histogram of the calls (default
    /// false).
    pub histogram: bool,
    /// The in-kernel filters and what becomes of the calls they reject.
    pub filters: Filters,
}

/// `min_duration`, `errors_only`, `filter`, `rate_limit`, `sum`, `spans`:
/// each with the token that set it, for errors that depend on the
/// handler's parameters and the mode.
#[derive(Debug, Default)]
pub(crate) struct Filters {
    /// Nanoseconds, and the literal.
    pub min_duration: Option<(u64, LitStr)>,
    /// Set (to true) by this token.
    pub errors_only: Option<Span>,
    /// The parsed predicate and its literal.
    pub filter: Option<(kspan_dsl::Predicate, LitStr)>,
    /// Spans per second, and the literal.
    pub rate_limit: Option<(u32, syn::LitInt)>,
    /// Set (to true) by this token.
    pub sum: Option<Span>,
    /// `spans = false`, by this token.
    pub no_spans: Option<Span>,
}

/// `key` alone or `key = true|false`.
fn flag(input: ParseStream<'_>, key: &str) -> syn::Result<bool> {
    if input.peek(Token![=]) {
        input.parse::<Token![=]>()?;
        let value: syn::LitBool = input
            .parse()
            .map_err(|e| syn::Error::new(e.span(), format!("`{key}` takes `true` or `false`")))?;
        return Ok(value.value);
    }
    Ok(true)
}

/// A mode, with the token that chose it (or the call site for the default).
#[derive(Debug, Clone)]
pub(crate) struct Mode {
    pub value: kspan_dsl::Mode,
    pub span: Span,
}

impl Parse for KernelSpanArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.is_empty() {
            return Err(syn::Error::new(
                Span::call_site(),
                "missing kernel function name: write `#[kernel_span(\"vfs_read\")]`",
            ));
        }
        let mut syscall: Option<Mode> = None;
        let function: LitStr = if input.peek(kw::syscall) {
            let key = input.parse::<kw::syscall>()?;
            input.parse::<Token![=]>()?;
            let lit: LitStr = input.parse()?;
            syscall = Some(Mode {
                value: kspan_dsl::Mode::Syscall,
                span: key.span,
            });
            lit
        } else {
            match input.parse() {
                Ok(lit) => lit,
                Err(_) => {
                    let tt: proc_macro2::TokenTree = input.parse()?;
                    return Err(syn::Error::new(
                        tt.span(),
                        "the kernel function name must be a string literal first, \
                     e.g. `#[kernel_span(\"vfs_read\")]`, or a system call: \
                     `#[kernel_span(syscall = \"openat\")]`",
                    ));
                }
            }
        };
        if function.value().is_empty() {
            return Err(syn::Error::new(
                function.span(),
                "the kernel function name is empty",
            ));
        }

        let mut errors: Option<syn::Error> = None;
        let mut push = |e: syn::Error| match errors.as_mut() {
            Some(all) => all.combine(e),
            None => errors = Some(e),
        };
        let alternatives = alternatives(input, &function, syscall.is_some(), &mut push)?;
        let mut mode: Option<Mode> = None;
        let mut errno: Option<bool> = None;
        let mut optional: Option<bool> = None;
        let mut filters = Filters::default();
        let mut seen: Vec<&'static str> = Vec::new();
        let mut histogram: Option<(bool, Span)> = None;
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::mode) {
                let key = input.parse::<kw::mode>()?;
                input.parse::<Token![=]>()?;
                let value: LitStr = input.parse()?;
                if syscall.is_some() {
                    push(syn::Error::new(
                        key.span,
                        "a syscall source has its own mode (the syscall's enter and exit \
                         tracepoints): remove `mode`",
                    ));
                    continue;
                }
                if mode.is_some() {
                    push(syn::Error::new(key.span, "duplicate key `mode`"));
                    continue;
                }
                let name = value.value();
                // `syscall` parses but is written `syscall = "name"`.
                let parsed = name
                    .parse::<kspan_dsl::Mode>()
                    .ok()
                    .filter(|m| kspan_dsl::Mode::ANNOTATION_MODES.contains(m));
                let parsed = match parsed {
                    Some(m) => m,
                    None => {
                        push(syn::Error::new(value.span(), kspan_dsl::UnknownMode(name)));
                        // Never expanded (the error is returned); it makes a
                        // second `mode` a duplicate.
                        kspan_dsl::Mode::Auto
                    }
                };
                mode = Some(Mode {
                    value: parsed,
                    span: value.span(),
                });
            } else if lookahead.peek(kw::errno) {
                let key = input.parse::<kw::errno>()?;
                input.parse::<Token![=]>()?;
                let value: syn::LitBool = input
                    .parse()
                    .map_err(|e| syn::Error::new(e.span(), "`errno` takes `true` or `false`"))?;
                if errno.is_some() {
                    push(syn::Error::new(key.span, "duplicate key `errno`"));
                    continue;
                }
                errno = Some(value.value);
            } else if lookahead.peek(kw::min_duration) {
                let key = input.parse::<kw::min_duration>()?;
                input.parse::<Token![=]>()?;
                let value: LitStr = input.parse()?;
                if once(&mut seen, "min_duration") {
                    push(syn::Error::new(key.span, "duplicate key `min_duration`"));
                    continue;
                }
                match kspan_dsl::parse_duration(&value.value()) {
                    Ok(ns) => filters.min_duration = Some((ns, value)),
                    Err(e) => push(syn::Error::new(value.span(), e.message)),
                }
            } else if lookahead.peek(kw::errors_only) {
                let key = input.parse::<kw::errors_only>()?;
                let on = flag(input, "errors_only")?;
                if once(&mut seen, "errors_only") {
                    push(syn::Error::new(key.span, "duplicate key `errors_only`"));
                    continue;
                }
                filters.errors_only = on.then_some(key.span);
            } else if lookahead.peek(kw::filter) {
                let key = input.parse::<kw::filter>()?;
                input.parse::<Token![=]>()?;
                let value: LitStr = input.parse()?;
                if once(&mut seen, "filter") {
                    push(syn::Error::new(key.span, "duplicate key `filter`"));
                    continue;
                }
                match kspan_dsl::parse_predicate(&value.value()) {
                    Ok(p) => filters.filter = Some((p, value)),
                    Err(e) => push(syn::Error::new(value.span(), e.to_string())),
                }
            } else if lookahead.peek(kw::rate_limit) {
                let key = input.parse::<kw::rate_limit>()?;
                input.parse::<Token![=]>()?;
                let value: syn::LitInt = input.parse()?;
                if once(&mut seen, "rate_limit") {
                    push(syn::Error::new(key.span, "duplicate key `rate_limit`"));
                    continue;
                }
                match value.base10_parse::<u32>() {
                    Ok(n) if (1..=MAX_RATE).contains(&n) => filters.rate_limit = Some((n, value)),
                    _ => push(syn::Error::new(
                        value.span(),
                        format!("`rate_limit` is spans per second, from 1 to {MAX_RATE}"),
                    )),
                }
            } else if lookahead.peek(kw::sum) {
                let key = input.parse::<kw::sum>()?;
                let on = flag(input, "sum")?;
                if once(&mut seen, "sum") {
                    push(syn::Error::new(key.span, "duplicate key `sum`"));
                    continue;
                }
                filters.sum = on.then_some(key.span);
            } else if lookahead.peek(kw::spans) {
                let key = input.parse::<kw::spans>()?;
                input.parse::<Token![=]>()?;
                let value: syn::LitBool = input
                    .parse()
                    .map_err(|e| syn::Error::new(e.span(), "`spans` takes `true` or `false`"))?;
                if once(&mut seen, "spans") {
                    push(syn::Error::new(key.span, "duplicate key `spans`"));
                    continue;
                }
                filters.no_spans = (!value.value).then_some(value.span);
            } else if lookahead.peek(kw::optional) {
                let key = input.parse::<kw::optional>()?;
                let on = flag(input, "optional")?;
                if optional.replace(on).is_some() {
                    push(syn::Error::new(key.span, "duplicate key `optional`"));
                }
            } else if lookahead.peek(kw::histogram) {
                let key = input.parse::<kw::histogram>()?;
                // `histogram` alone means `histogram = true`.
                let value = if input.peek(Token![=]) {
                    input.parse::<Token![=]>()?;
                    let value: syn::LitBool = input.parse().map_err(|e| {
                        syn::Error::new(
                            e.span(),
                            "`histogram` takes `true` or `false`, or no value",
                        )
                    })?;
                    value.value
                } else {
                    true
                };
                if histogram.is_some() {
                    push(syn::Error::new(key.span, "duplicate key `histogram`"));
                    continue;
                }
                histogram = Some((value, key.span));
            } else if input.peek(syn::Ident) {
                let key: syn::Ident = input.parse()?;
                push(syn::Error::new(
                    key.span(),
                    format!("unknown key `{key}`: the keys are {KEYS}"),
                ));
                // Skip `= value` so that later keys are still checked.
                if input.parse::<Token![=]>().is_ok() {
                    let _: syn::Expr = input.parse()?;
                }
            } else {
                return Err(lookahead.error());
            }
        }
        let mode = syscall.or(mode).unwrap_or(Mode {
            value: kspan_dsl::Mode::Auto,
            span: Span::call_site(),
        });
        if let Some((true, span)) = histogram {
            if !mode.value.has_return() {
                push(syn::Error::new(
                    span,
                    format!(
                        "`histogram` needs a duration: mode `{}` attaches at entry only (an \
                         instant); use mode = \"fexit\" or \"kretprobe\" (or remove `mode`)",
                        mode.value
                    ),
                ));
            }
        }
        if let Some(errors) = errors {
            return Err(errors);
        }
        Ok(KernelSpanArgs {
            function,
            alternatives,
            optional: optional.unwrap_or(false),
            mode,
            errno: errno.unwrap_or(true),
            filters,
            histogram: histogram.is_some_and(|(on, _)| on),
        })
    }
}

/// `| "name"`, each an alternative to `function`, up to the first key.
/// A wrong token ends the parse; a name that cannot be an alternative is
/// reported and the parse goes on.
fn alternatives(
    input: ParseStream<'_>,
    function: &LitStr,
    syscall: bool,
    push: &mut impl FnMut(syn::Error),
) -> syn::Result<Vec<LitStr>> {
    let mut alternatives: Vec<LitStr> = Vec::new();
    let mut primary_reported = false;
    loop {
        if input.peek(Token![||]) {
            let bars = input.parse::<Token![||]>()?;
            return Err(syn::Error::new(
                syn::spanned::Spanned::span(&bars),
                "alternatives are separated by one `|`: \
                 `#[kernel_span(\"do_unlinkat\" | \"filename_unlinkat\")]`",
            ));
        }
        if !input.peek(Token![|]) {
            return Ok(alternatives);
        }
        let bar = input.parse::<Token![|]>()?;
        let name: LitStr = input.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "after `|` comes another kernel function name, a string literal: \
                 `#[kernel_span(\"do_unlinkat\" | \"filename_unlinkat\")]`",
            )
        })?;
        if syscall {
            push(syn::Error::new(
                bar.span,
                kspan_dsl::AlternativeError::Syscall,
            ));
            continue;
        }
        let earlier: Vec<String> = std::iter::once(function)
            .chain(&alternatives)
            .map(LitStr::value)
            .collect();
        let earlier: Vec<&str> = earlier.iter().map(String::as_str).collect();
        match kspan_dsl::check_alternative(&earlier, &name.value()) {
            Ok(()) => alternatives.push(name),
            // A pattern is shown where it is written, once.
            Err(e @ kspan_dsl::AlternativeError::Pattern(_))
                if kspan_dsl::is_pattern(&function.value()) =>
            {
                if !primary_reported {
                    push(syn::Error::new(function.span(), e));
                    primary_reported = true;
                }
            }
            Err(e) => push(syn::Error::new(name.span(), e)),
        }
    }
}

/// The highest `rate_limit`: past a million spans a second the limit is
/// the consumer's own rate.
pub(crate) const MAX_RATE: u32 = 1_000_000;

/// Notes `key` as seen; true when it was already.
fn once(seen: &mut Vec<&'static str>, key: &'static str) -> bool {
    if seen.contains(&key) {
        return true;
    }
    seen.push(key);
    false
}

/// `#[capture(path = "...", user, max = N, len = "...", at = "entry")]` on
/// a parameter.
#[derive(Debug, Default)]
pub(crate) struct CaptureArgs {
    pub path: Option<LitStr>,
    pub user: Option<Span>,
    pub max: Option<syn::LitInt>,
    pub len: Option<LitStr>,
    /// `at = "entry"` (`Some(true)`) or `"exit"` (`Some(false)`), with its
    /// token.
    pub at: Option<(bool, LitStr)>,
}

impl Parse for CaptureArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = CaptureArgs::default();
        let mut errors: Option<syn::Error> = None;
        let mut push = |e: syn::Error| match errors.as_mut() {
            Some(all) => all.combine(e),
            None => errors = Some(e),
        };
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::path) {
                let key = input.parse::<kw::path>()?;
                input.parse::<Token![=]>()?;
                let value: LitStr = input.parse()?;
                if args.path.is_some() {
                    push(syn::Error::new(key.span, "duplicate key `path`"));
                } else if let Err(e) = kspan_dsl::parse_field_path(&value.value()) {
                    // The syntax alone: names and types are checked at
                    // attach, against the kernel's BTF.
                    push(syn::Error::new(value.span(), e));
                } else {
                    args.path = Some(value);
                }
            } else if lookahead.peek(kw::user) {
                let key = input.parse::<kw::user>()?;
                if args.user.replace(key.span).is_some() {
                    push(syn::Error::new(key.span, "duplicate key `user`"));
                }
            } else if lookahead.peek(kw::max) {
                let key = input.parse::<kw::max>()?;
                input.parse::<Token![=]>()?;
                let value: syn::LitInt = input.parse()?;
                match value.base10_parse::<u16>() {
                    Ok(n) if (1..=1022).contains(&n) => {}
                    _ => push(syn::Error::new(
                        value.span(),
                        "`max` is a size in bytes from 1 to 1022",
                    )),
                }
                if args.max.replace(value).is_some() {
                    push(syn::Error::new(key.span, "duplicate key `max`"));
                }
            } else if lookahead.peek(kw::len) {
                let key = input.parse::<kw::len>()?;
                input.parse::<Token![=]>()?;
                let value: LitStr = input.parse()?;
                if args.len.replace(value).is_some() {
                    push(syn::Error::new(key.span, "duplicate key `len`"));
                }
            } else if lookahead.peek(kw::at) {
                let key = input.parse::<kw::at>()?;
                input.parse::<Token![=]>()?;
                let value: LitStr = input.parse()?;
                let entry = match value.value().as_str() {
                    "entry" => Some(true),
                    "exit" => Some(false),
                    _ => {
                        push(syn::Error::new(
                            value.span(),
                            "`at` is \"entry\" (read when the call begins) or \"exit\" (when it \
                             returns, the default)",
                        ));
                        None
                    }
                };
                if let Some(entry) = entry {
                    if args.at.replace((entry, value)).is_some() {
                        push(syn::Error::new(key.span, "duplicate key `at`"));
                    }
                }
            } else if input.peek(syn::Ident) {
                let key: syn::Ident = input.parse()?;
                push(syn::Error::new(
                    key.span(),
                    format!(
                        "unknown capture key `{key}`: the keys are `path`, `user`, `max`, `len` \
                         and `at`"
                    ),
                ));
                if input.parse::<Token![=]>().is_ok() {
                    let _: syn::Expr = input.parse()?;
                }
            } else {
                return Err(lookahead.error());
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        match errors {
            Some(e) => Err(e),
            None => Ok(args),
        }
    }
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn parse(tokens: proc_macro2::TokenStream) -> syn::Result<KernelSpanArgs> {
        syn::parse2(tokens)
    }

    #[test]
    fn function_and_mode() {
        let a = parse(quote!("vfs_read", mode = "fentry")).unwrap();
        assert_eq!(a.function.value(), "vfs_read");
        assert_eq!(a.mode.value, kspan_dsl::Mode::Fentry);
        let a = parse(quote!("vfs_read",)).unwrap();
        assert_eq!(a.mode.value, kspan_dsl::Mode::Auto, "auto is the default");
    }

    #[test]
    fn every_bad_key_is_reported() {
        let err = parse(quote!("f", colour = "red", mode = "x", size = 3)).unwrap_err();
        let msgs: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(
            msgs,
            [
                "unknown key `colour`: the keys are `mode`, `errno`, `min_duration`, `errors_only`, `filter`, `rate_limit`, `sum`, `spans`, `histogram` and `optional`",
                "unknown mode `x`: expected one of `auto`, `fentry`, `fexit`, `kprobe`, `kretprobe`",
                "unknown key `size`: the keys are `mode`, `errno`, `min_duration`, `errors_only`, `filter`, `rate_limit`, `sum`, `spans`, `histogram` and `optional`",
            ]
        );
    }

    #[test]
    fn filters_and_sums() {
        let a = parse(quote!(
            "vfs_read",
            min_duration = "1.5ms",
            errors_only,
            filter = "count >= 65536 || ret < 0",
            rate_limit = 250,
            sum = true,
            spans = false
        ))
        .unwrap();
        let f = &a.filters;
        assert_eq!(f.min_duration.as_ref().map(|(ns, _)| *ns), Some(1_500_000));
        assert!(f.errors_only.is_some() && f.sum.is_some() && f.no_spans.is_some());
        assert_eq!(f.rate_limit.as_ref().map(|(n, _)| *n), Some(250));
        let predicate = &f.filter.as_ref().unwrap().0;
        assert_eq!(predicate.any_of.len(), 2);
        let a = parse(quote!("f", errors_only = false, sum = false, spans = true)).unwrap();
        assert!(a.filters.errors_only.is_none() && a.filters.sum.is_none());
        assert!(a.filters.no_spans.is_none());
    }

    #[test]
    fn every_bad_filter_is_reported() {
        let err = parse(quote!(
            "f",
            min_duration = "1",
            filter = "a >",
            rate_limit = 2000000,
            sum,
            sum
        ))
        .unwrap_err();
        let msgs: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(msgs.len(), 4, "{msgs:?}");
        assert!(msgs[0].contains("needs a unit"));
        assert!(msgs[1].contains("integer constant"));
        assert!(msgs[2].contains("from 1 to 1000000"));
        assert_eq!(msgs[3], "duplicate key `sum`");
    }

    #[test]
    fn missing_or_non_string_name() {
        assert!(parse(quote!())
            .unwrap_err()
            .to_string()
            .starts_with("missing kernel function name"));
        assert!(parse(quote!(vfs_read))
            .unwrap_err()
            .to_string()
            .contains("string literal"));
        assert!(parse(quote!(mode = "fexit"))
            .unwrap_err()
            .to_string()
            .contains("string literal"));
    }

    #[test]
    fn errno_key() {
        assert!(!parse(quote!("f", errno = false)).unwrap().errno);
        assert!(parse(quote!("f")).unwrap().errno);
        let err = parse(quote!("f", errno = 1)).unwrap_err();
        assert_eq!(err.to_string(), "`errno` takes `true` or `false`");
    }

    #[test]
    fn histogram_key() {
        assert!(!parse(quote!("f")).unwrap().histogram, "off by default");
        assert!(parse(quote!("f", histogram)).unwrap().histogram);
        assert!(
            parse(quote!("f", mode = "fexit", histogram, errno = false))
                .unwrap()
                .histogram
        );
        assert!(parse(quote!("f", histogram = true)).unwrap().histogram);
        assert!(!parse(quote!("f", histogram = false)).unwrap().histogram);
        assert!(
            parse(quote!(syscall = "read", histogram))
                .unwrap()
                .histogram
        );
        assert!(
            parse(quote!("f", mode = "kretprobe", histogram))
                .unwrap()
                .histogram
        );
        let err = parse(quote!("f", histogram = 1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`histogram` takes `true` or `false`, or no value"
        );
        let err = parse(quote!("f", histogram, histogram = false)).unwrap_err();
        assert_eq!(err.to_string(), "duplicate key `histogram`");
    }

    #[test]
    fn histogram_of_an_instant_is_refused() {
        for mode in ["fentry", "kprobe"] {
            let lit = LitStr::new(mode, Span::call_site());
            let err = parse(quote!("f", mode = #lit, histogram)).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "`histogram` needs a duration: mode `{mode}` attaches at entry only (an \
                     instant); use mode = \"fexit\" or \"kretprobe\" (or remove `mode`)"
                )
            );
        }
        // Off is no histogram: nothing to refuse.
        assert!(
            !parse(quote!("f", mode = "fentry", histogram = false))
                .unwrap()
                .histogram
        );
    }

    fn path_err(text: &str) -> String {
        let lit = LitStr::new(text, Span::call_site());
        syn::parse2::<CaptureArgs>(quote!(path = #lit))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn paths() {
        let ok = |text: &str| {
            let lit = LitStr::new(text, Span::call_site());
            syn::parse2::<CaptureArgs>(quote!(path = #lit))
                .unwrap()
                .path
                .unwrap()
                .value()
        };
        assert_eq!(
            ok("file->f_path.dentry->d_name.name"),
            "file->f_path.dentry->d_name.name"
        );
        assert_eq!(ok("how->flags"), "how->flags");
        // The runtime's words, from the shared parser.
        assert_eq!(
            path_err("file"),
            "expected `->` or `.` after `file` at byte 4, found the end of the path"
        );
        assert_eq!(path_err("file->"), "empty member name after `->` at byte 6");
        assert_eq!(
            path_err("file=>x"),
            "expected `->` or `.` after `file` at byte 4, found `=`"
        );
        assert_eq!(
            path_err("1file->x"),
            "`1file` is not an identifier (at byte 0): a name starts with a letter or `_`"
        );
        assert_eq!(
            path_err("a.b.c.d.e.f.g.h.i.j"),
            "the field path has more than 8 member segments (segment 9 starts at byte 17)"
        );
    }

    #[test]
    fn capture_args() {
        let a: CaptureArgs =
            syn::parse2(quote!(path = "a->b", user, max = 100, len = "ret")).unwrap();
        assert_eq!(a.path.unwrap().value(), "a->b");
        assert!(a.user.is_some());
        let err = syn::parse2::<CaptureArgs>(quote!(pth = "a", max = 0, max = 5)).unwrap_err();
        let msgs: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(msgs.len(), 3, "{msgs:?}");
        let at: CaptureArgs = syn::parse2(quote!(path = "n->name", at = "entry")).unwrap();
        assert!(matches!(at.at, Some((true, _))));
        let at: CaptureArgs = syn::parse2(quote!(at = "exit")).unwrap();
        assert!(matches!(at.at, Some((false, _))));
        let err =
            syn::parse2::<CaptureArgs>(quote!(at = "soon", at = "entry", at = "exit")).unwrap_err();
        let msgs: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(msgs.len(), 2, "a bad value and a duplicate: {msgs:?}");
    }

    #[test]
    fn syscall_sources() {
        let a = parse(quote!(syscall = "openat", errno = false)).unwrap();
        assert_eq!(
            (a.function.value().as_str(), a.mode.value),
            ("openat", kspan_dsl::Mode::Syscall)
        );
        assert!(a.mode.value.has_return() && !a.errno);
        let err = parse(quote!(syscall = "openat", mode = "fexit")).unwrap_err();
        assert!(err
            .to_string()
            .contains("a syscall source has its own mode"));
    }

    #[test]
    fn syscall_is_not_a_mode_name() {
        let err = parse(quote!("f", mode = "syscall")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown mode `syscall`: expected one of `auto`, `fentry`, `fexit`, `kprobe`, `kretprobe`"
        );
    }

    fn messages(tokens: proc_macro2::TokenStream) -> Vec<String> {
        parse(tokens)
            .unwrap_err()
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn alternatives_and_optional() {
        let a = parse(quote!(
            "do_unlinkat" | "filename_unlinkat",
            mode = "fexit",
            optional
        ))
        .unwrap();
        assert_eq!(a.function.value(), "do_unlinkat");
        let names: Vec<String> = a.alternatives.iter().map(LitStr::value).collect();
        assert_eq!(names, ["filename_unlinkat"]);
        assert!(a.optional);
        assert_eq!(a.mode.value, kspan_dsl::Mode::Fexit);
        let a = parse(quote!("a" | "b" | "c")).unwrap();
        assert_eq!(a.alternatives.len(), 2);
        assert!(!a.optional, "not optional by default");
        assert!(!parse(quote!("a", optional = false)).unwrap().optional);
        assert!(parse(quote!("a", optional = true)).unwrap().optional);
        let a = parse(quote!(syscall = "openat2", optional)).unwrap();
        assert!(a.optional && a.alternatives.is_empty());
    }

    #[test]
    fn bad_alternatives_are_reported_at_their_tokens() {
        assert_eq!(
            messages(quote!("a" | "", mode = "fexit")),
            ["an alternative kernel function name is empty"]
        );
        assert_eq!(
            messages(quote!("a" | "b" | "a" | "b")),
            [
                "`a` is named twice: each alternative is another kernel function; remove one",
                "`b` is named twice: each alternative is another kernel function; remove one",
            ]
        );
        let msgs = messages(quote!("vfs_*" | "a" | "b"));
        assert_eq!(msgs.len(), 1, "the pattern once: {msgs:?}");
        assert!(msgs[0].starts_with("a pattern (`vfs_*`) cannot take part in alternatives"));
        let msgs = messages(quote!("a" | "b_*"));
        assert!(msgs[0].starts_with("a pattern (`b_*`)"), "{msgs:?}");
        let msgs = messages(quote!(syscall = "openat" | "open"));
        assert!(
            msgs[0].starts_with("a syscall source traces one system call"),
            "{msgs:?}"
        );
        let msgs = messages(quote!("a" || "b"));
        assert!(
            msgs[0].starts_with("alternatives are separated by one `|`"),
            "{msgs:?}"
        );
        let msgs = messages(quote!("a" | b));
        assert!(
            msgs[0].starts_with("after `|` comes another kernel function name"),
            "{msgs:?}"
        );
        assert!(messages(quote!("a" |))[0].starts_with("after `|`"));
        // Alternatives come before the keys, and the keys are still checked.
        assert_eq!(
            messages(quote!("a" | "a", optional, optional)),
            [
                "`a` is named twice: each alternative is another kernel function; remove one",
                "duplicate key `optional`",
            ]
        );
        assert_eq!(
            messages(quote!("a", optional = 1)),
            ["`optional` takes `true` or `false`"]
        );
        assert_eq!(
            messages(quote!("a", optional, optional = false)),
            ["duplicate key `optional`"]
        );
    }

    #[test]
    fn duplicate_mode() {
        let err = parse(quote!("f", mode = "fexit", mode = "fentry")).unwrap_err();
        assert_eq!(err.to_string(), "duplicate key `mode`");
    }
}
