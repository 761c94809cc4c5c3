// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Tracefs text: `sys_enter_*` formats (and the syscall's signature from
//! them and BTF), tracepoint formats' field layouts, and
//! `available_filter_functions`.
#![no_main]

libfuzzer_sys::fuzz_target!(|text: &str| {
    kspan::__fuzz::tracefs(text);
});
