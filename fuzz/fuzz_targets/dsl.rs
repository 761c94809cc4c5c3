// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The annotation language's strings (kspan-dsl): field paths (parsed and
//! resolved against kernel BTF), filter predicates, durations, modes and
//! alternatives.
#![no_main]

libfuzzer_sys::fuzz_target!(|text: &str| {
    kspan::__fuzz::dsl(text);
});
