// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Exports kspan's OTEP 4947 thread-context slot in the examples' dynamic
//! symbol table, so that readers other than kspan (the OpenTelemetry eBPF
//! profiler) find it; a service does the same in its own build.

fn main() {
    println!("cargo:rustc-link-arg-examples=-Wl,--export-dynamic-symbol=otel_thread_ctx_v1");
}
