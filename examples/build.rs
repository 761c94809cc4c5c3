// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Exports kspan's OTEP 4947 thread-context symbol in the examples' dynamic
//! symbol table, so that readers other than kspan (the OpenTelemetry eBPF
//! profiler) find it: what README tells a service's `build.rs` to do.

fn main() {
    kspan_build::export_thread_context_symbol();
}
