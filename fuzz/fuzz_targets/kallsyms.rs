// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `/proc/kallsyms` text: the wait spans' symbol table and stacks, and the
//! causes' check of a function's symbol. The input's last 64 bytes (when
//! it is longer) are eight addresses to look up.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let split = data.len().saturating_sub(64);
    let (text, tail) = data.split_at(if data.len() > 64 { split } else { data.len() });
    let addresses: Vec<u64> = tail
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect();
    kspan::__fuzz::kallsyms(text, &addresses);
});
