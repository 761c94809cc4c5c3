// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Parsing of `#[kernel_span("function", key = value, ...)]`.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{LitStr, Token};

/// Keywords of the attribute.
pub(crate) mod kw {
    syn::custom_keyword!(mode);
    syn::custom_keyword!(errno);
    syn::custom_keyword!(path);
    syn::custom_keyword!(user);
    syn::custom_keyword!(max);
    syn::custom_keyword!(len);
    syn::custom_keyword!(syscall);
}

/// Attach modes the macro accepts (the runtime's `Mode` mirrors these).
pub(crate) const MODES: [&str; 5] = ["auto", "fentry", "fexit", "kprobe", "kretprobe"];

/// The parsed attribute.
#[derive(Debug)]
pub(crate) struct KernelSpanArgs {
    /// The kernel function to trace.
    pub function: LitStr,
    /// The attach mode and its token (for errors about it).
    pub mode: Mode,
    /// Whether a negative errno return fails the span (default true).
    pub errno: bool,
}

/// A mode, with the token that chose it (or the call site for the default).
#[derive(Debug, Clone)]
pub(crate) struct Mode {
    pub name: String,
    pub span: Span,
}

impl Mode {
    pub fn has_return(&self) -> bool {
        matches!(
            self.name.as_str(),
            "auto" | "fexit" | "kretprobe" | "syscall"
        )
    }
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
                name: "syscall".to_owned(),
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

        let mut mode: Option<Mode> = None;
        let mut errno: Option<bool> = None;
        let mut errors: Option<syn::Error> = None;
        let mut push = |e: syn::Error| match errors.as_mut() {
            Some(all) => all.combine(e),
            None => errors = Some(e),
        };
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
                if !MODES.contains(&name.as_str()) {
                    push(syn::Error::new(
                        value.span(),
                        format!(
                            "unknown mode `{name}`: expected one of `auto`, `fentry`, `fexit`, `kprobe`, `kretprobe`"
                        ),
                    ));
                }
                mode = Some(Mode {
                    name,
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
            } else if input.peek(syn::Ident) {
                let key: syn::Ident = input.parse()?;
                push(syn::Error::new(
                    key.span(),
                    format!("unknown key `{key}`: the keys are `mode` and `errno`"),
                ));
                // Skip `= value` so that later keys are still checked.
                if input.parse::<Token![=]>().is_ok() {
                    let _: syn::Expr = input.parse()?;
                }
            } else {
                return Err(lookahead.error());
            }
        }
        if let Some(errors) = errors {
            return Err(errors);
        }
        Ok(KernelSpanArgs {
            function,
            mode: syscall.or(mode).unwrap_or(Mode {
                name: "auto".to_owned(),
                span: Span::call_site(),
            }),
            errno: errno.unwrap_or(true),
        })
    }
}

/// `#[capture(path = "...", user, max = N, len = "...")]` on a parameter.
#[derive(Debug, Default)]
pub(crate) struct CaptureArgs {
    pub path: Option<LitStr>,
    pub user: Option<Span>,
    pub max: Option<syn::LitInt>,
    pub len: Option<LitStr>,
}

/// Most segments (`->m` or `.m`) a field path may have.
pub(crate) const MAX_PATH_SEGMENTS: usize = 8;

/// Checks field path syntax: `param` then `->member` or `.member`, at most
/// [`MAX_PATH_SEGMENTS`] times. Types are checked at attach, against BTF.
pub(crate) fn check_path(text: &str) -> Result<(), String> {
    fn ident(s: &str) -> Option<(&str, &str)> {
        let end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        let (id, rest) = s.split_at(end);
        (!id.is_empty() && !id.starts_with(|c: char| c.is_ascii_digit())).then_some((id, rest))
    }
    let (_, mut rest) = ident(text).ok_or_else(|| {
        format!("`{text}` must start with a parameter name, e.g. `file->f_path.dentry`")
    })?;
    let mut segments = 0;
    while !rest.is_empty() {
        let after = rest
            .strip_prefix("->")
            .or_else(|| rest.strip_prefix('.'))
            .ok_or_else(|| {
                format!(
                    "expected `->` or `.` at `{rest}` in `{text}` (write `ptr->member` or `value.member`)"
                )
            })?;
        let (_, next) = ident(after)
            .ok_or_else(|| format!("expected a member name at `{after}` in `{text}`"))?;
        rest = next;
        segments += 1;
    }
    if segments == 0 {
        return Err(format!(
            "`{text}` is only a parameter: name the handler parameter `{text}` instead, or add members"
        ));
    }
    if segments > MAX_PATH_SEGMENTS {
        return Err(format!(
            "`{text}` has {segments} members; at most {MAX_PATH_SEGMENTS} are followed"
        ));
    }
    Ok(())
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
                } else if let Err(msg) = check_path(&value.value()) {
                    push(syn::Error::new(value.span(), msg));
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
            } else if input.peek(syn::Ident) {
                let key: syn::Ident = input.parse()?;
                push(syn::Error::new(
                    key.span(),
                    format!(
                        "unknown capture key `{key}`: the keys are `path`, `user`, `max` and `len`"
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
        assert_eq!(a.mode.name, "fentry");
        let a = parse(quote!("vfs_read",)).unwrap();
        assert_eq!(a.mode.name, "auto", "auto is the default");
    }

    #[test]
    fn every_bad_key_is_reported() {
        let err = parse(quote!("f", colour = "red", mode = "x", size = 3)).unwrap_err();
        let msgs: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(
            msgs,
            [
                "unknown key `colour`: the keys are `mode` and `errno`",
                "unknown mode `x`: expected one of `auto`, `fentry`, `fexit`, `kprobe`, `kretprobe`",
                "unknown key `size`: the keys are `mode` and `errno`",
            ]
        );
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
    fn paths() {
        assert!(check_path("file->f_path.dentry->d_name.name").is_ok());
        assert!(check_path("how->flags").is_ok());
        assert!(check_path("file").unwrap_err().contains("only a parameter"));
        assert!(check_path("file->")
            .unwrap_err()
            .contains("expected a member name"));
        assert!(check_path("file=>x")
            .unwrap_err()
            .contains("expected `->` or `.`"));
        assert!(check_path("1file->x")
            .unwrap_err()
            .contains("must start with a parameter"));
        assert!(check_path("a.b.c.d.e.f.g.h.i.j")
            .unwrap_err()
            .contains("at most 8"));
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
    }

    #[test]
    fn syscall_sources() {
        let a = parse(quote!(syscall = "openat", errno = false)).unwrap();
        assert_eq!(
            (a.function.value().as_str(), a.mode.name.as_str()),
            ("openat", "syscall")
        );
        assert!(a.mode.has_return() && !a.errno);
        let err = parse(quote!(syscall = "openat", mode = "fexit")).unwrap_err();
        assert!(err
            .to_string()
            .contains("a syscall source has its own mode"));
    }

    #[test]
    fn duplicate_mode() {
        let err = parse(quote!("f", mode = "fexit", mode = "fentry")).unwrap_err();
        assert_eq!(err.to_string(), "duplicate key `mode`");
    }
}
