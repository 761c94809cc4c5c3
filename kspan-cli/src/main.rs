// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `kspan`: what this kernel offers for tracing, which functions it can
//! trace, and a ready-to-paste `#[kspan::kernel_span]` handler for one.
//! The program is the `kspan_cli` library's `main` (see the library for
//! how it is shaped).

fn main() -> std::process::ExitCode {
    kspan_cli::main()
}
