// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Parsing of `#[kernel_span("function", key = value, ...)]`.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{LitStr, Token};

/// Keywords of the attribute.
pub(crate) mod kw {
    syn::custom_keyword!(mode);
}

/// Attach modes the macro accepts (the runtime's `Mode` mirrors these).
pub(crate) const MODES: [&str; 2] = ["fentry", "fexit"];

/// The parsed attribute.
#[derive(Debug)]
pub(crate) struct KernelSpanArgs {
    /// The kernel function to trace.
    pub function: LitStr,
    /// The attach mode and its token (for errors about it).
    pub mode: Mode,
}

/// A mode, with the token that chose it (or the call site for the default).
#[derive(Debug, Clone)]
pub(crate) struct Mode {
    pub name: String,
    pub span: Span,
}

impl Mode {
    pub fn has_return(&self) -> bool {
        self.name == "fexit"
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
        let function: LitStr = match input.parse() {
            Ok(lit) => lit,
            Err(_) => {
                let tt: proc_macro2::TokenTree = input.parse()?;
                return Err(syn::Error::new(
                    tt.span(),
                    "the kernel function name must be a string literal first, \
                     e.g. `#[kernel_span(\"vfs_read\")]`",
                ));
            }
        };
        if function.value().is_empty() {
            return Err(syn::Error::new(
                function.span(),
                "the kernel function name is empty",
            ));
        }

        let mut mode: Option<Mode> = None;
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
                if mode.is_some() {
                    push(syn::Error::new(key.span, "duplicate key `mode`"));
                    continue;
                }
                let name = value.value();
                if !MODES.contains(&name.as_str()) {
                    push(syn::Error::new(
                        value.span(),
                        format!("unknown mode `{name}`: expected one of `fentry`, `fexit`"),
                    ));
                }
                mode = Some(Mode {
                    name,
                    span: value.span(),
                });
            } else if input.peek(syn::Ident) {
                let key: syn::Ident = input.parse()?;
                push(syn::Error::new(
                    key.span(),
                    format!("unknown key `{key}`: the only key is `mode`"),
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
            mode: mode.unwrap_or(Mode {
                name: "fexit".to_owned(),
                span: Span::call_site(),
            }),
        })
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
        assert_eq!(a.mode.name, "fexit", "fexit is the default");
    }

    #[test]
    fn every_bad_key_is_reported() {
        let err = parse(quote!("f", colour = "red", mode = "x", size = 3)).unwrap_err();
        let msgs: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(
            msgs,
            [
                "unknown key `colour`: the only key is `mode`",
                "unknown mode `x`: expected one of `fentry`, `fexit`",
                "unknown key `size`: the only key is `mode`",
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
    fn duplicate_mode() {
        let err = parse(quote!("f", mode = "fexit", mode = "fentry")).unwrap_err();
        assert_eq!(err.to_string(), "duplicate key `mode`");
    }
}
