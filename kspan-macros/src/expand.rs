// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Expansion of `#[kernel_span]` into a `static` probe definition.
//!
//! `fn vfs_read(count: usize, ret: isize) { body }` becomes
//! `static vfs_read: ::kspan::Probe`, holding the attach spec (function, mode,
//! parameter names and Rust types) and a decoder that reads each captured
//! register as the parameter's type and calls the original body.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, Pat, ReturnType, Type};

use crate::attr::{CaptureArgs, KernelSpanArgs};

/// Integer types a parameter may have.
const INTEGERS: [&str; 10] = [
    "u8", "u16", "u32", "u64", "usize", "i8", "i16", "i32", "i64", "isize",
];

/// Entry point: never fails, errors become `compile_error!`s.
pub(crate) fn kernel_span(args: TokenStream, item: TokenStream) -> TokenStream {
    let args = match syn::parse2::<KernelSpanArgs>(args) {
        Ok(args) => args,
        Err(err) => return with_item(err, item),
    };
    let func = match syn::parse2::<ItemFn>(item.clone()) {
        Ok(func) => func,
        Err(err) => return err.to_compile_error(),
    };
    match expand(&args, func) {
        Ok(tokens) => tokens,
        Err(err) => with_item(err, item),
    }
}

/// Emits the errors next to the untouched item, so that the user's function
/// still type-checks and only the macro's own errors are shown.
fn with_item(err: syn::Error, item: TokenStream) -> TokenStream {
    let errors = err.to_compile_error();
    // The `#[capture]` helper attributes mean nothing to rustc: drop them.
    let item = match syn::parse2::<ItemFn>(item.clone()) {
        Ok(mut func) => {
            for input in func.sig.inputs.iter_mut() {
                if let FnArg::Typed(p) = input {
                    p.attrs.retain(|a| !a.path().is_ident("capture"));
                }
            }
            quote!(#func)
        }
        Err(_) => item,
    };
    quote! { #errors #[allow(dead_code, unused_variables)] #item }
}

/// What a handler parameter is.
enum Role {
    /// A captured value.
    Capture,
    /// The return value.
    Ret,
    /// `span: &mut kspan::KernelSpan`.
    Span,
}

struct Param {
    name: String,
    ty: Type,
    role: Role,
    capture: CaptureArgs,
}

/// What a type captures, for checking the capture's options.
#[derive(PartialEq)]
enum TypeClass {
    Scalar,
    Str,
    Bytes,
    ByteArray,
}

fn expand(args: &KernelSpanArgs, mut func: ItemFn) -> syn::Result<TokenStream> {
    let mut errors: Option<syn::Error> = None;
    let mut push = |e: syn::Error| match errors.as_mut() {
        Some(all) => all.combine(e),
        None => errors = Some(e),
    };

    let sig = &func.sig;
    if let Some(t) = &sig.asyncness {
        push(syn::Error::new(
            t.span(),
            "a kernel span handler cannot be `async`: it runs on kspan's consumer for each record",
        ));
    }
    if !sig.generics.params.is_empty() {
        push(syn::Error::new(sig.generics.span(), "a kernel span handler cannot be generic: its parameter types decide how registers are read"));
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        push(syn::Error::new(
            ty.span(),
            "a kernel span handler returns nothing: remove the return type",
        ));
    }

    let mut params = Vec::new();
    for input in func.sig.inputs.iter_mut() {
        let FnArg::Typed(pat_ty) = input else {
            push(syn::Error::new(
                input.span(),
                "a kernel span handler is a free function: remove `self`",
            ));
            continue;
        };
        // Take our `#[capture(...)]` off the parameter; keep the others.
        let mut capture = CaptureArgs::default();
        let mut capture_attr: Option<proc_macro2::Span> = None;
        let mut kept = Vec::new();
        for attr in pat_ty.attrs.drain(..) {
            if attr.path().is_ident("capture") {
                if capture_attr.replace(attr.span()).is_some() {
                    push(syn::Error::new(
                        attr.span(),
                        "duplicate `#[capture]`: put every key in one",
                    ));
                    continue;
                }
                match attr.parse_args::<CaptureArgs>() {
                    Ok(c) => capture = c,
                    Err(e) => push(e),
                }
            } else {
                kept.push(attr);
            }
        }
        pat_ty.attrs = kept;
        let Pat::Ident(pat) = &*pat_ty.pat else {
            push(syn::Error::new(
                pat_ty.pat.span(),
                "handler parameters must be plain names, named after the kernel function's parameters",
            ));
            continue;
        };
        let name = pat.ident.to_string();
        let name = name.strip_prefix("r#").unwrap_or(&name).to_owned();
        let role = match name.as_str() {
            "ret" => Role::Ret,
            "span" => Role::Span,
            _ => Role::Capture,
        };
        let ty = (*pat_ty.ty).clone();
        match role {
            Role::Ret => {
                if !args.mode.value.has_return() {
                    push(syn::Error::new(
                        pat.ident.span(),
                        format!(
                            "`ret` needs mode = \"fexit\" or \"kretprobe\": mode `{}` attaches at entry only and sees no return value",
                            args.mode.value
                        ),
                    ));
                }
                if let Err(e) = classify(&ty).and_then(|c| {
                    (c == TypeClass::Scalar).then_some(()).ok_or_else(|| {
                        syn::Error::new(
                            ty.span(),
                            "`ret` is a register: use an integer, `bool` or a raw pointer type",
                        )
                    })
                }) {
                    push(e);
                }
                if let Some(span) = capture_attr {
                    push(syn::Error::new(span, "`ret` takes no `#[capture]`"));
                }
            }
            Role::Span => {
                if !is_span_type(&ty) {
                    push(syn::Error::new(
                        ty.span(),
                        "`span` is the span being built: its type is `&mut kspan::KernelSpan`",
                    ));
                }
                if let Some(span) = capture_attr {
                    push(syn::Error::new(span, "`span` takes no `#[capture]`"));
                }
            }
            Role::Capture => match classify(&ty) {
                Ok(class) => {
                    if let Err(e) = check_capture_args(&class, &capture, &args.mode) {
                        push(e);
                    }
                }
                Err(e) => push(e),
            },
        }
        params.push(Param {
            name,
            ty,
            role,
            capture,
        });
    }
    for e in check_filters(args, &params) {
        push(e);
    }
    if let Some(errors) = errors {
        return Err(errors);
    }

    let vis = &func.vis;
    let ident = &func.sig.ident;
    let attrs = &func.attrs;
    let handler = format_ident!("__kspan_handler");
    let mut handler_fn = func.clone();
    handler_fn.sig.ident = handler.clone();
    handler_fn.vis = syn::Visibility::Inherited;
    handler_fn.attrs.clear();

    let function = &args.function;
    let alternatives = &args.alternatives;
    let optional = args.optional;
    let errno = args.errno;
    let histogram = args.histogram;
    let mode = format_ident!("{}", args.mode.value.variant_name(), span = args.mode.span);
    let param_specs = params
        .iter()
        .filter(|p| matches!(p.role, Role::Capture))
        .map(|p| {
            let name = &p.name;
            let ty = &p.ty;
            let path = option_tokens(p.capture.path.as_ref().map(|l| quote!(#l)));
            let user = p.capture.user.is_some();
            let max = option_tokens(p.capture.max.as_ref().map(|l| quote!(#l)));
            let len = option_tokens(p.capture.len.as_ref().map(|l| {
                if l.value() == "ret" {
                    quote!(::kspan::__private::LenSource::Ret)
                } else {
                    quote!(::kspan::__private::LenSource::Param(#l))
                }
            }));
            let at_entry = matches!(p.capture.at, Some((true, _)));
            quote_spanned! {ty.span()=>
                ::kspan::__private::ParamSpec {
                    name: #name,
                    ty: <#ty as ::kspan::__private::FromCapture<'static>>::TYPE,
                    path: #path,
                    user: #user,
                    max: #max,
                    len: #len,
                    at_entry: #at_entry,
                }
            }
        });
    let f = &args.filters;
    let min_duration_ns = f.min_duration.as_ref().map_or(0, |(ns, _)| *ns);
    let errors_only = f.errors_only.is_some();
    let predicate = option_tokens(f.filter.as_ref().map(|(_, lit)| quote!(#lit)));
    let rate_limit = f.rate_limit.as_ref().map_or(0, |(n, _)| *n);
    let sum = f.sum.is_some();
    let spans = f.no_spans.is_none();
    let ret_spec = match params.iter().find(|p| matches!(p.role, Role::Ret)) {
        Some(p) => {
            let ty = &p.ty;
            quote_spanned! {ty.span()=> ::core::option::Option::Some(<#ty as ::kspan::__private::KernelValue>::TYPE) }
        }
        None => quote! { ::core::option::Option::None },
    };
    // Arguments of the handler call, in the original parameter order.
    let mut index = 0usize;
    let call_args = params.iter().map(|p| {
        let ty = &p.ty;
        match p.role {
            Role::Ret => quote! { captured.ret::<#ty>() },
            Role::Span => quote! { __kspan_span },
            Role::Capture => {
                let i = index;
                index += 1;
                quote! { captured.param::<#ty>(#i) }
            }
        }
    });
    // The function's own spelling: upper-casing it would make `seq_printf`
    // and `SEQ_printf` collide.
    let registration = format_ident!("__kspan_registered_{}", ident);

    Ok(quote! {
        #(#attrs)*
        #[allow(non_upper_case_globals)]
        #vis static #ident: ::kspan::Probe = {
            #[allow(unused_variables, clippy::unused_unit, clippy::too_many_arguments)]
            #handler_fn
            #[allow(unused_variables)]
            fn __kspan_call(captured: &::kspan::__private::Captured<'_>, __kspan_span: &mut ::kspan::KernelSpan) {
                #handler(#(#call_args),*)
            }
            ::kspan::Probe {
                spec: ::kspan::__private::ProbeSpec {
                    function: #function,
                    alternatives: &[#(#alternatives),*],
                    optional: #optional,
                    mode: ::kspan::Mode::#mode,
                    params: &[#(#param_specs),*],
                    ret: #ret_spec,
                    errno: #errno,
                    filter: ::kspan::__private::FilterSpec {
                        min_duration_ns: #min_duration_ns,
                        errors_only: #errors_only,
                        predicate: #predicate,
                        rate_limit: #rate_limit,
                    },
                    sum: #sum,
                    spans: #spans,
                    histogram: #histogram,
                    location: ::core::concat!(::core::file!(), ":", ::core::line!()),
                },
                handler: __kspan_call,
            }
        };
        #[::kspan::__private::linkme::distributed_slice(::kspan::__private::PROBES)]
        #[linkme(crate = ::kspan::__private::linkme)]
        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        static #registration: &'static ::kspan::Probe = &#ident;
    })
}

/// The filters against the mode and the handler's parameters: a filter
/// on a duration or a return value needs a span, and a predicate names
/// scalar parameters read at exit, or `ret`.
fn check_filters(args: &KernelSpanArgs, params: &[Param]) -> Vec<syn::Error> {
    let mut errors = Vec::new();
    let f = &args.filters;
    let mode = args.mode.value;
    let instant = |what: &str| {
        format!(
            "{what} needs a span with an end: mode = \"{mode}\" attaches at entry only; use \
             \"fexit\", \"kretprobe\" or \"auto\""
        )
    };
    if !mode.has_return() {
        if let Some((_, lit)) = &f.min_duration {
            errors.push(syn::Error::new(lit.span(), instant("`min_duration`")));
        }
        if let Some(span) = f.errors_only {
            errors.push(syn::Error::new(span, instant("`errors_only`")));
        }
        if let Some(span) = f.sum {
            errors.push(syn::Error::new(span, instant("`sum`")));
        }
    }
    if let Some(span) = f.no_spans {
        if f.sum.is_none() && !args.histogram {
            errors.push(syn::Error::new(
                span,
                "`spans = false` keeps nothing of the calls: add `histogram` (a latency \
                 histogram metric), `sum` (totals on the application span), or both",
            ));
        }
        if let Some((_, lit)) = &f.rate_limit {
            errors.push(syn::Error::new(
                lit.span(),
                "`rate_limit` limits spans, and `spans = false` makes none: remove one",
            ));
        }
    }
    if let Some((predicate, lit)) = &f.filter {
        let scalars: Vec<&Param> = params
            .iter()
            .filter(|p| {
                matches!(p.role, Role::Capture) && matches!(classify(&p.ty), Ok(TypeClass::Scalar))
            })
            .collect();
        for c in predicate.comparisons() {
            if c.name == "ret" {
                if !mode.has_return() {
                    errors.push(syn::Error::new(lit.span(), instant("`ret` in `filter`")));
                }
                continue;
            }
            match scalars.iter().find(|p| p.name == c.name) {
                Some(p) if matches!(p.capture.at, Some((true, _))) => errors.push(syn::Error::new(
                    lit.span(),
                    format!(
                        "`{}` is read at entry (`at = \"entry\"`): a filter compares values \
                             read at exit; capture it at exit, or filter in the handler",
                        c.name
                    ),
                )),
                Some(_) => {}
                None => {
                    let names: Vec<String> =
                        scalars.iter().map(|p| format!("`{}`", p.name)).collect();
                    let (hint, fix) = if params.iter().any(|p| p.name == c.name) {
                        (
                            format!("`{}` is not an integer, `bool` or pointer", c.name),
                            String::new(),
                        )
                    } else {
                        (
                            format!("no handler parameter is named `{}`", c.name),
                            format!(
                                "; add `{}: u64` (or its type) to the handler to capture it",
                                c.name
                            ),
                        )
                    };
                    let listed = if names.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", names.join(", "))
                    };
                    errors.push(syn::Error::new(
                        lit.span(),
                        format!(
                            "{hint}: a filter compares the handler's scalar parameters{listed} \
                             or `ret`{fix}"
                        ),
                    ));
                }
            }
        }
    }
    errors
}

fn option_tokens(value: Option<TokenStream>) -> TokenStream {
    match value {
        Some(v) => quote!(::core::option::Option::Some(#v)),
        None => quote!(::core::option::Option::None),
    }
}

fn is_span_type(ty: &Type) -> bool {
    match ty {
        Type::Reference(r) if r.mutability.is_some() => match &*r.elem {
            Type::Path(p) => p
                .path
                .segments
                .last()
                .is_some_and(|s| s.ident == "KernelSpan"),
            _ => false,
        },
        _ => false,
    }
}

/// Accepts integers, `bool`, raw pointers, `&str`, `&[u8]` and `[u8; N]`.
fn classify(ty: &Type) -> syn::Result<TypeClass> {
    match ty {
        Type::Path(p) if p.qself.is_none() => {
            if let Some(ident) = p.path.get_ident() {
                let s = ident.to_string();
                if s == "bool" || INTEGERS.contains(&s.as_str()) {
                    return Ok(TypeClass::Scalar);
                }
            }
        }
        Type::Ptr(_) => return Ok(TypeClass::Scalar),
        Type::Paren(p) => return classify(&p.elem),
        Type::Reference(r) if r.mutability.is_none() => match &*r.elem {
            Type::Path(p) if p.path.is_ident("str") => return Ok(TypeClass::Str),
            Type::Slice(s) if is_u8(&s.elem) => return Ok(TypeClass::Bytes),
            _ => {}
        },
        Type::Array(a) if is_u8(&a.elem) => return Ok(TypeClass::ByteArray),
        _ => {}
    }
    let shown = quote!(#ty)
        .to_string()
        .replace(" < ", "<")
        .replace(" >", ">");
    Err(syn::Error::new(
        ty.span(),
        format!(
            "unsupported parameter type `{shown}`: kspan captures integers (u8..u64, i8..i64, \
             usize, isize), `bool`, raw pointers (`*const T`, `*mut T`), `&str`, `&[u8]` and `[u8; N]`"
        ),
    ))
}

fn is_u8(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.path.is_ident("u8"))
}

/// The capture options that make sense for the type.
fn check_capture_args(
    class: &TypeClass,
    capture: &CaptureArgs,
    mode: &crate::attr::Mode,
) -> syn::Result<()> {
    let mut errors: Option<syn::Error> = None;
    let mut push = |e: syn::Error| match errors.as_mut() {
        Some(all) => all.combine(e),
        None => errors = Some(e),
    };
    if let Some(span) = capture.user {
        if *class == TypeClass::Scalar {
            push(syn::Error::new(
                span,
                "`user` reads memory behind a pointer: capture it as `&str`, `&[u8]` or `[u8; N]`",
            ));
        }
    }
    if let Some(max) = &capture.max {
        if matches!(class, TypeClass::Scalar | TypeClass::ByteArray) {
            push(syn::Error::new(
                max.span(),
                "`max` bounds a `&str` or `&[u8]` capture",
            ));
        }
    }
    match (&capture.len, class) {
        (Some(len), TypeClass::Bytes) => {
            if len.value() == "ret" && !mode.value.has_return() {
                push(syn::Error::new(
                    len.span(),
                    "`len = \"ret\"` needs mode = \"fexit\" or \"kretprobe\"",
                ));
            }
        }
        (Some(len), _) => push(syn::Error::new(
            len.span(),
            "`len` gives the length of a `&[u8]` capture",
        )),
        (None, TypeClass::Bytes) => {}
        (None, _) => {}
    }
    if let Some((entry, at)) = &capture.at {
        if !mode.value.has_return() {
            push(syn::Error::new(
                at.span(),
                "`at` chooses when a span's capture is read; an instant (mode = \"fentry\" or \
                 \"kprobe\") reads everything at entry: remove `at`",
            ));
        } else if *entry && capture.len.as_ref().is_some_and(|l| l.value() == "ret") {
            push(syn::Error::new(
                at.span(),
                "`len = \"ret\"` is known at exit only: remove `at = \"entry\"`, or give the \
                 length from a parameter",
            ));
        }
    }
    match errors {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(args: TokenStream, item: TokenStream) -> String {
        kernel_span(args, item).to_string()
    }

    #[test]
    fn generates_spec_and_typed_call() {
        let out = expand_str(
            quote!("vfs_read", mode = "fexit"),
            quote!(
                pub fn vfs_read(count: usize, ret: isize) {
                    println!("{count}");
                }
            ),
        );
        assert!(
            out.contains("pub static vfs_read : :: kspan :: Probe"),
            "{out}"
        );
        assert!(out.contains("function : \"vfs_read\""), "{out}");
        assert!(out.contains(":: kspan :: Mode :: Fexit"), "{out}");
        assert!(out.contains("name : \"count\""), "{out}");
        assert!(
            out.contains("< usize as :: kspan :: __private :: FromCapture < 'static >> :: TYPE"),
            "{out}"
        );
        assert!(
            out.contains("Some (< isize as :: kspan :: __private :: KernelValue > :: TYPE)"),
            "{out}"
        );
        assert!(out.contains("errno : true"), "{out}");
        assert!(out.contains("histogram : false"), "off by default: {out}");
        assert!(
            out.contains("__kspan_handler (captured . param :: < usize > (0usize) , captured . ret :: < isize > ())"),
            "{out}"
        );
        assert!(
            out.contains("distributed_slice (:: kspan :: __private :: PROBES)"),
            "{out}"
        );
        assert!(out.contains("static __kspan_registered_vfs_read"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn ret_span_and_captures_keep_their_order() {
        let out = expand_str(
            quote!("ksys_read", errno = false),
            quote!(
                fn k(ret: isize, fd: u32, span: &mut kspan::KernelSpan, buf: *const u8) {}
            ),
        );
        assert!(
            out.contains("captured . ret :: < isize > () , captured . param :: < u32 > (0usize) , __kspan_span , captured . param :: < * const u8 > (1usize)"),
            "{out}"
        );
        assert!(
            out.contains(":: kspan :: Mode :: Auto"),
            "default mode: {out}"
        );
        assert!(out.contains("errno : false"), "{out}");
    }

    #[test]
    fn alternatives_and_optional_reach_the_spec() {
        let out = expand_str(
            quote!(
                "do_unlinkat" | "filename_unlinkat",
                mode = "fexit",
                optional
            ),
            quote!(
                fn unlink(dfd: i32, ret: i32) {}
            ),
        );
        assert!(out.contains("function : \"do_unlinkat\""), "{out}");
        assert!(
            out.contains("alternatives : & [\"filename_unlinkat\"]"),
            "{out}"
        );
        assert!(out.contains("optional : true"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
        let out = expand_str(
            quote!("vfs_read"),
            quote!(
                fn v() {}
            ),
        );
        assert!(
            out.contains("alternatives : & []"),
            "none by default: {out}"
        );
        assert!(out.contains("optional : false"), "{out}");
    }

    #[test]
    fn histogram_reaches_the_spec() {
        let out = expand_str(
            quote!("vfs_read", mode = "fexit", histogram),
            quote!(
                fn v(ret: isize) {}
            ),
        );
        assert!(out.contains("histogram : true"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn capture_options_reach_the_spec() {
        let out = expand_str(
            quote!("vfs_read"),
            quote!(
                fn v(
                    #[capture(path = "file->f_path.dentry->d_name.name", max = 32)] name: &str,
                    #[capture(user, len = "ret")] buf: &[u8],
                    #[capture(len = "count")] kbuf: &[u8],
                    ret: isize,
                ) {
                }
            ),
        );
        assert!(
            out.contains(
                "path : :: core :: option :: Option :: Some (\"file->f_path.dentry->d_name.name\")"
            ),
            "{out}"
        );
        assert!(
            out.contains("max : :: core :: option :: Option :: Some (32)"),
            "{out}"
        );
        assert!(out.contains("user : true"), "{out}");
        assert!(
            out.contains(":: kspan :: __private :: LenSource :: Ret"),
            "{out}"
        );
        assert!(
            out.contains(":: kspan :: __private :: LenSource :: Param (\"count\")"),
            "{out}"
        );
        assert!(
            !out.contains("# [capture"),
            "helper attributes are removed: {out}"
        );
    }

    #[test]
    fn errors_are_collected() {
        let out = expand_str(
            quote!("vfs_read", mode = "fentry"),
            quote!(
                fn f(
                    name: String,
                    ret: isize,
                    #[capture(user)] n: u32,
                    #[capture(len = "ret")] b: &[u8],
                ) {
                }
            ),
        );
        assert!(out.contains("unsupported parameter type `String`"), "{out}");
        assert!(out.contains("`ret` needs mode = \\\"fexit\\\""), "{out}");
        assert!(
            out.contains("`user` reads memory behind a pointer"),
            "{out}"
        );
        assert!(out.contains("`len = \\\"ret\\\"` needs mode"), "{out}");
        assert!(!out.contains("# [capture"), "{out}");
    }

    #[test]
    fn rejects_async_generic_self_and_return_types() {
        let out = expand_str(
            quote!("f"),
            quote!(
                async fn f<T>(x: T) -> u32 {
                    0
                }
            ),
        );
        assert!(out.contains("cannot be `async`"), "{out}");
        assert!(out.contains("cannot be generic"), "{out}");
        assert!(out.contains("returns nothing"), "{out}");
    }

    #[test]
    fn span_parameter_type_is_checked() {
        let out = expand_str(
            quote!("f"),
            quote!(
                fn f(span: &kspan::KernelSpan) {}
            ),
        );
        assert!(out.contains("`span` is the span being built"), "{out}");
    }
}
