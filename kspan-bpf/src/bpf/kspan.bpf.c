// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * kspan's BPF programs: the one compilation unit, compiled into the one
 * object kspan-bpf ships. Its sources are files included here, in this
 * order, not separately compiled units:
 *
 * - core.bpf.h: the settings, the maps both sources share and the helpers
 *   both call;
 * - probes.bpf.c (with probes.bpf.h): the probes' programs, which pair a
 *   traced call's entry and exit into one span record;
 * - account.bpf.c (with sched.bpf.h, which the causes share): the
 *   scheduler's account, from sched_switch, sched_waking and sched_wakeup;
 * - causes.bpf.c: its causes, kernel lock contention, block requests and
 *   memory stalls.
 *
 * One unit, not units joined by libbpf's static linker: compiled apart, a
 * unit without the probes (the one caller of kspan_new_ids for two ids)
 * lets clang specialise that helper before inlining it, and lays out four
 * of the account's and causes' programs otherwise (as many instructions,
 * their blocks in another order). In one unit clang sees every caller of
 * every helper.
 */
#include "core.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Keeps the record layout in the object's BTF for the Rust skeleton. */
struct kspan_record kspan_record_layout SEC(".bss.layout");
/* A uptr's target must be a whole struct in BTF, not a declaration. */
struct kspan_ctx_slot kspan_ctx_slot_layout SEC(".bss.layout");

#include "probes.bpf.c"
#include "account.bpf.c"
#include "causes.bpf.c"
