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

use crate::attr::KernelSpanArgs;

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
    quote! { #errors #[allow(dead_code, unused_variables)] #item }
}

struct Param<'a> {
    name: String,
    ty: &'a Type,
}

fn expand(args: &KernelSpanArgs, func: ItemFn) -> syn::Result<TokenStream> {
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
    let mut ret: Option<&Type> = None;
    for input in &sig.inputs {
        let FnArg::Typed(pat_ty) = input else {
            push(syn::Error::new(
                input.span(),
                "a kernel span handler is a free function: remove `self`",
            ));
            continue;
        };
        let Pat::Ident(pat) = &*pat_ty.pat else {
            push(syn::Error::new(
                pat_ty.pat.span(),
                "handler parameters must be plain names, named after the kernel function's parameters",
            ));
            continue;
        };
        let name = pat.ident.to_string();
        let name = name.strip_prefix("r#").unwrap_or(&name).to_owned();
        if let Err(e) = check_type(&pat_ty.ty) {
            push(e);
        }
        if name == "ret" {
            if !args.mode.has_return() {
                push(syn::Error::new(
                    pat.ident.span(),
                    format!(
                        "`ret` needs mode = \"fexit\": mode `{}` attaches at entry only and sees no return value",
                        args.mode.name
                    ),
                ));
            }
            ret = Some(&pat_ty.ty);
        } else {
            params.push(Param {
                name,
                ty: &pat_ty.ty,
            });
        }
    }
    if let Some(errors) = errors {
        return Err(errors);
    }

    let vis = &func.vis;
    let ident = &sig.ident;
    let attrs = &func.attrs;
    let handler = format_ident!("__kspan_handler");
    let mut handler_fn = func.clone();
    handler_fn.sig.ident = handler.clone();
    handler_fn.vis = syn::Visibility::Inherited;
    handler_fn.attrs.clear();

    let function = &args.function;
    let mode = format_ident!(
        "{}",
        match args.mode.name.as_str() {
            "fentry" => "Fentry",
            _ => "Fexit",
        },
        span = args.mode.span
    );
    let param_specs = params.iter().map(|p| {
        let name = &p.name;
        let ty = p.ty;
        quote_spanned! {ty.span()=>
            ::kspan::ParamSpec { name: #name, ty: <#ty as ::kspan::KernelValue>::TYPE }
        }
    });
    let ret_spec = match ret {
        Some(ty) => {
            quote_spanned! {ty.span()=> ::core::option::Option::Some(<#ty as ::kspan::KernelValue>::TYPE) }
        }
        None => quote! { ::core::option::Option::None },
    };
    // Arguments of the handler call, in the original parameter order.
    let mut index = 0usize;
    let call_args = sig.inputs.iter().filter_map(|input| {
        let FnArg::Typed(pat_ty) = input else {
            return None;
        };
        let ty = &pat_ty.ty;
        let Pat::Ident(pat) = &*pat_ty.pat else {
            return None;
        };
        if pat.ident == "ret" {
            Some(quote! { captured.ret::<#ty>() })
        } else {
            let i = index;
            index += 1;
            Some(quote! { captured.param::<#ty>(#i) })
        }
    });

    Ok(quote! {
        #(#attrs)*
        #[allow(non_upper_case_globals)]
        #vis static #ident: ::kspan::Probe = {
            #[allow(unused_variables, clippy::unused_unit)]
            #handler_fn
            fn __kspan_call(captured: &::kspan::Captured<'_>) {
                #handler(#(#call_args),*)
            }
            ::kspan::Probe {
                spec: ::kspan::ProbeSpec {
                    function: #function,
                    mode: ::kspan::Mode::#mode,
                    params: &[#(#param_specs),*],
                    ret: #ret_spec,
                    location: ::core::concat!(::core::file!(), ":", ::core::line!()),
                },
                handler: __kspan_call,
            }
        };
    })
}

/// Accepts integers, `bool` and raw pointers.
fn check_type(ty: &Type) -> syn::Result<()> {
    match ty {
        Type::Path(p) if p.qself.is_none() => {
            if let Some(ident) = p.path.get_ident() {
                let s = ident.to_string();
                if s == "bool" || INTEGERS.contains(&s.as_str()) {
                    return Ok(());
                }
            }
        }
        Type::Ptr(_) => return Ok(()),
        Type::Paren(p) => return check_type(&p.elem),
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
             usize, isize), `bool` and raw pointers (`*const T`, `*mut T`)"
        ),
    ))
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
            out.contains("< usize as :: kspan :: KernelValue > :: TYPE"),
            "{out}"
        );
        assert!(
            out.contains("Some (< isize as :: kspan :: KernelValue > :: TYPE)"),
            "{out}"
        );
        assert!(out.contains("__kspan_handler (captured . param :: < usize > (0usize) , captured . ret :: < isize > ())"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn ret_position_is_free_and_params_keep_order() {
        let out = expand_str(
            quote!("ksys_read"),
            quote!(
                fn k(ret: isize, fd: u32, buf: *const u8) {}
            ),
        );
        assert!(out.contains("captured . ret :: < isize > () , captured . param :: < u32 > (0usize) , captured . param :: < * const u8 > (1usize)"), "{out}");
        assert!(
            out.contains(":: kspan :: Mode :: Fexit"),
            "default mode: {out}"
        );
    }

    #[test]
    fn errors_are_collected() {
        let out = expand_str(
            quote!("vfs_read", mode = "fentry"),
            quote!(
                fn f(name: String, ret: isize) {}
            ),
        );
        assert!(out.contains("unsupported parameter type `String`"), "{out}");
        assert!(out.contains("`ret` needs mode = \\\"fexit\\\""), "{out}");
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
}
