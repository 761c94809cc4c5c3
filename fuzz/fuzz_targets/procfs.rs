// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Procfs and sysfs text: the preemption model's sources, `CapEff`,
//! `perf_event_paranoid`, a block device's `uevent`.
#![no_main]

libfuzzer_sys::fuzz_target!(|text: &str| {
    kspan::__fuzz::procfs(text);
});
