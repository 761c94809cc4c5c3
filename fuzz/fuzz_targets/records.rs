// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Ring-buffer records: the consumer's decoding of span and wait records,
//! the probes' handlers and the span factory, as a running kspan has them.
#![no_main]

use kspan::__fuzz::Records;

thread_local! {
    /// The processor, made once: its plans, tracer and symbol table.
    static RECORDS: Records = Records::new(
        kspan::__fuzz::plans(&kspan_fuzz::RECORD_PROBES),
        kspan::__fuzz::RECORD_KALLSYMS,
    );
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    RECORDS.with(|records| records.process(data));
});
