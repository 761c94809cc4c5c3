// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Compiles the OTEP 4947 thread-context slot (`csrc/thread_ctx.c`) with
//! the TLS descriptor model the OTEP asks writers for: GCC's `gnu2` dialect
//! on x86-64, `desc` (AArch64's default, said so) on arm64.

fn main() {
    println!("cargo:rerun-if-changed=csrc/thread_ctx.c");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let dialect = match arch.as_str() {
        "x86_64" => "-mtls-dialect=gnu2",
        "aarch64" => "-mtls-dialect=desc",
        other => {
            println!(
                "cargo:warning=kspan supports x86_64 and aarch64, not {other}: \
                 the thread-context slot is built with the compiler's default TLS model"
            );
            ""
        }
    };
    let mut build = cc::Build::new();
    build.file("csrc/thread_ctx.c").pic(true).warnings(true);
    if !dialect.is_empty() {
        build.flag(dialect);
    }
    build.compile("kspan_thread_ctx");
}
