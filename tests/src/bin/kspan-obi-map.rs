// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `kspan-obi-map [PIN]`: prints every entry of OBI's shared traces map
//! (OTEP 4855; `/sys/fs/bpf/otel/traces_ctx_v1` by default), one a line:
//! `<pid_tgid, 16 hex digits> <trace id, 32> <span id, 16>`. It is the other
//! process of the `vm_obi` test, reading the map as OBI or the profiler
//! would.

use std::process::ExitCode;

use libbpf_rs::{MapCore as _, MapFlags, MapHandle};

fn main() -> ExitCode {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/sys/fs/bpf/otel/traces_ctx_v1".to_owned());
    if path.contains('\0') {
        eprintln!("kspan-obi-map: the path has a NUL byte");
        return ExitCode::FAILURE;
    }
    let map = match MapHandle::from_pinned_path(&path) {
        Ok(map) => map,
        Err(e) => {
            eprintln!("kspan-obi-map: cannot open {path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    if (map.key_size(), map.value_size()) != (8, 24) {
        eprintln!(
            "kspan-obi-map: {path} has {}-byte keys and {}-byte values, not 8 and 24",
            map.key_size(),
            map.value_size()
        );
        return ExitCode::FAILURE;
    }
    for key in map.keys() {
        // An entry removed between the keys and the lookup is skipped.
        let value = match map.lookup(&key, MapFlags::ANY) {
            Ok(Some(value)) => value,
            Ok(None) => continue,
            Err(e) => {
                eprintln!("kspan-obi-map: cannot read an entry of {path}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let Ok(key) = <[u8; 8]>::try_from(key.as_slice()) else {
            continue;
        };
        println!(
            "{:016x} {} {}",
            u64::from_ne_bytes(key),
            kspan_tests::hex(&value[..16]),
            kspan_tests::hex(&value[16..])
        );
    }
    ExitCode::SUCCESS
}
