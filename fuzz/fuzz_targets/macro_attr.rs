// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The `#[kernel_span]` macro: its attribute's parser and its expansion of
//! the handler (kspan-macros' own source), on lexed token streams.
#![no_main]

libfuzzer_sys::fuzz_target!(|text: &str| {
    kspan_fuzz::kernel_span_macro(text);
});
