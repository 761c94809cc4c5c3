// SPDX-License-Identifier: Apache-2.0 OR MIT
//! OTEP 4947 thread-context records (a span context and its attributes,
//! encoded and read back as the OTEP's readers do) and the OTEP 4719
//! process context's payload.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    kspan::__fuzz::thread_context(data);
});
