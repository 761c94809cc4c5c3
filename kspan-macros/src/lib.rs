// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The `#[kernel_span]` attribute; see `kspan::kernel_span` for the reference.
//!
//! Shaped like tracing-attributes: `attr` parses the arguments into a struct
//! (`syn::Result`, every bad key reported at once), `expand` turns the parsed
//! attribute and the function into tokens. Both work on `proc_macro2` tokens,
//! so they are unit-tested without a compiler session; this file only bridges.

use proc_macro::TokenStream;

mod attr;
mod expand;

/// Turns a function into a kernel probe. Documented in `kspan`.
#[proc_macro_attribute]
pub fn kernel_span(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::kernel_span(args.into(), item.into()).into()
}
