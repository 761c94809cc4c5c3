// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Build-script helpers for a service that uses kspan.
//!
//! kspan publishes each thread's current span in the OTEP 4947 thread-local
//! record, `otel_thread_ctx_v1`. Readers other than kspan (the OpenTelemetry
//! eBPF profiler, and every reader that follows the OTEP) find it in the
//! executable's dynamic symbol table, `.dynsym`, which survives `strip`.
//! The Rust toolchain puts an executable's symbols in `.symtab` only,
//! unless the linker is told to export one; and only the final link can be
//! told. A library's build script cannot pass a linker argument to the
//! executable that depends on it, so the service's own `build.rs` does,
//! through [`export_thread_context_symbol`]:
//!
//! ```text
//! // build.rs
//! fn main() {
//!     kspan_build::export_thread_context_symbol();
//! }
//! ```
//!
//! with `kspan-build` under `[build-dependencies]`. This is the route
//! that works wherever cargo is run from. The same flag in a
//! `.cargo/config.toml` (`rustflags`) is read only when cargo runs inside
//! that directory tree, and silently not otherwise; `RUSTFLAGS` replaces
//! every `rustflags` setting.
//!
//! This crate has no dependencies and does nothing at run time.

/// The OTEP 4947 thread-local record's symbol (defined by kspan's C shim).
pub const THREAD_CONTEXT_SYMBOL: &str = "otel_thread_ctx_v1";

/// The linker argument that puts [`THREAD_CONTEXT_SYMBOL`] in `.dynsym`.
pub fn thread_context_link_arg() -> String {
    format!("-Wl,--export-dynamic-symbol={THREAD_CONTEXT_SYMBOL}")
}

/// Tells cargo, from the calling build script, to export kspan's
/// thread-context symbol in everything this package links: its binaries,
/// examples, tests and benches (`cargo:rustc-link-arg`; the per-kind
/// directives are refused for a kind the package has none of).
pub fn export_thread_context_symbol() {
    println!("{}", thread_context_directive());
}

/// The directive [`export_thread_context_symbol`] prints.
fn thread_context_directive() -> String {
    format!("cargo:rustc-link-arg={}", thread_context_link_arg())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directive_exports_the_symbol_at_the_final_link() {
        assert_eq!(
            thread_context_directive(),
            "cargo:rustc-link-arg=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1"
        );
    }
}
