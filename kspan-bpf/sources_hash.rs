// SPDX-License-Identifier: Apache-2.0 OR MIT
// The stamp of the shipped BPF object's sources: `include!`d by
// kspan-bpf's build script (which refuses an object older than its
// sources) and by `kspan-bpf-object` (which writes the stamp).

/// The stamp of `kspan.bpf.c` and `kspan.h`: FNV-1a (64 bits) over both,
/// as it is written in `src/bpf/kspan.<arch>.bpf.o.sources`.
fn sources_stamp(bpf_c: &[u8], header: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bpf_c.iter().chain(b"\0kspan.h\0").chain(header) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("sources fnv1a64 {hash:016x}")
}
