// SPDX-License-Identifier: Apache-2.0 OR MIT
/*
 * The OpenTelemetry thread-context slot (OTEP 4947): a thread-local pointer
 * named `otel_thread_ctx_v1`, pointing at the thread's context record or
 * NULL. It is defined in C because stable Rust cannot give a thread-local a
 * fixed, exported symbol name; Rust reaches it through the accessor below,
 * once per thread.
 *
 * Initial-exec: the slot lives in static TLS at one offset from the thread
 * pointer on every thread, which is what kspan's BPF reader relies on (it
 * reads the slot from the task's fs base, without walking the DTV).
 */
#include <stddef.h>

__attribute__((visibility("default"), tls_model("initial-exec")))
__thread void *otel_thread_ctx_v1 = NULL;

void **kspan_otel_thread_ctx_slot(void)
{
	return &otel_thread_ctx_v1;
}
