// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The environment settings kspan reads itself (`KSPAN_LOG`), as bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    kspan::__fuzz::env(data);
});
