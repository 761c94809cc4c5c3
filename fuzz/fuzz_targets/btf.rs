// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Kernel BTF (`/sys/kernel/btf/vmlinux`): the parser, the lookups planning
//! and `kspan list`/`gen` make, and planning probes against it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    kspan::__fuzz::btf(data, &kspan_fuzz::BTF_PROBES);
});
