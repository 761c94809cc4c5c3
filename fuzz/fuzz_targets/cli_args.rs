// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The `kspan` command's command line (NUL-separated arguments), parsed
//! as the program parses it, nothing run.
#![no_main]

libfuzzer_sys::fuzz_target!(|text: &str| {
    let args: Vec<String> = text.split('\0').map(str::to_owned).collect();
    kspan_cli::__fuzz::args(&args);
});
