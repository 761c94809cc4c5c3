// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Compiles the OTEP 4947 thread-context slot (`csrc/thread_ctx.c`).

fn main() {
    println!("cargo:rerun-if-changed=csrc/thread_ctx.c");
    cc::Build::new()
        .file("csrc/thread_ctx.c")
        .pic(true)
        .flag("-mtls-dialect=gnu2")
        .warnings(true)
        .compile("kspan_thread_ctx");
}
