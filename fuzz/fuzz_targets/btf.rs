// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Kernel BTF (`/sys/kernel/btf/vmlinux`): the parser, the lookups planning
//! and `kspan list`/`gen` make, and planning probes against it.
//!
//! A real kernel's BTF is 4 to 6 MB: as a corpus input, every mutation
//! libFuzzer kept would be another copy of it. So an input is either a
//! whole blob (first byte even: the rest is the blob) or edits of a real
//! kernel's (first byte odd: the second picks one of the blobs in the
//! directory `KSPAN_FUZZ_BTF_DIR`, which `cargo xtask fuzz` fills with the
//! host's and the VM kernels' BTF; then each edit is a little-endian `u32`
//! offset, a length byte and that many bytes written there).
#![no_main]

use std::sync::OnceLock;

/// The real kernels' blobs, read once.
fn references() -> &'static [Vec<u8>] {
    static BLOBS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    BLOBS.get_or_init(|| {
        let Some(dir) = std::env::var_os("KSPAN_FUZZ_BTF_DIR") else {
            return Vec::new();
        };
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort();
        files.iter().filter_map(|f| std::fs::read(f).ok()).collect()
    })
}

/// `blob` with the edits of `edits` written into it.
fn edited(blob: &[u8], mut edits: &[u8]) -> Vec<u8> {
    let mut out = blob.to_vec();
    while let [a, b, c, d, len, rest @ ..] = edits {
        let len = usize::from(*len).min(rest.len());
        let (bytes, tail) = rest.split_at(len);
        if !out.is_empty() {
            let at = u32::from_le_bytes([*a, *b, *c, *d]) as usize % out.len();
            let end = (at + len).min(out.len());
            out[at..end].copy_from_slice(&bytes[..end - at]);
        }
        edits = tail;
    }
    out
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let probes = &kspan_fuzz::BTF_PROBES;
    match data {
        [mode, pick, edits @ ..] if mode % 2 == 1 && !references().is_empty() => {
            let blob = &references()[usize::from(*pick) % references().len()];
            kspan::__fuzz::btf(&edited(blob, edits), probes);
        }
        [_, blob @ ..] => kspan::__fuzz::btf(blob, probes),
        [] => {}
    }
});
