// SPDX-License-Identifier: Apache-2.0 OR MIT
/*
 * The OpenTelemetry thread-context slot (OTEP 4947): a thread-local pointer
 * named `otel_thread_ctx_v1`, pointing at the thread's context record or
 * NULL. It is defined in C because stable Rust cannot give a thread-local a
 * fixed, exported symbol name; Rust reaches it through the accessor below,
 * once per thread.
 *
 * Compiled as position-independent code with the TLSDESC dialect
 * (`-mtls-dialect=gnu2`), the model OTEP 4947 asks writers to use. Linked
 * into an executable, as kspan is (README), the linker relaxes the access
 * to local-exec: the slot lives in static TLS at one offset from the
 * thread pointer on every thread, which is what kspan's BPF reader relies
 * on (it reads the slot from the task's thread pointer, without walking
 * the DTV), and the code is the same as initial-exec's. In a library
 * loaded at start-up the descriptor resolves to static TLS too; only a
 * `dlopen`ed library would get dynamic TLS, which kspan's reader cannot
 * find (README rules that out).
 */
#include <stddef.h>

__attribute__((visibility("default")))
__thread void *otel_thread_ctx_v1 = NULL;

void **kspan_otel_thread_ctx_slot(void)
{
	return &otel_thread_ctx_v1;
}
