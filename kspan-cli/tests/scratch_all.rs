// SPDX-License-Identifier: Apache-2.0 OR MIT
//! scratch
#![allow(missing_docs)]
mod g {
    include!("/tmp/gen_all.rs");
}
mod s {
    include!("/tmp/gen_sys.rs");
}
#[test]
fn plan_everything() {
    let data = std::fs::read(kspan::KERNEL_BTF).unwrap();
    let btf = kspan::btf::Btf::parse(&data).unwrap();
    let mut formats = kspan::plan::SyscallFormats::new();
    for name in std::fs::read_to_string("/tmp/sys_names.txt").unwrap().lines() {
        let name: &'static str = Box::leak(name.to_owned().into_boxed_str());
        formats.insert(name, std::fs::read_to_string(format!("/sys/kernel/tracing/events/syscalls/sys_enter_{name}/format")).unwrap());
    }
    let mut bad = 0;
    let mut n = 0;
    for p in kspan::__private::PROBES.iter() {
        n += 1;
        if let Err(e) = kspan::plan::plan_probe_with(&btf, p, &formats) {
            bad += 1;
            if bad < 30 { eprintln!("{}: {e}", p.spec.function); }
        }
    }
    eprintln!("{n} probes, {bad} refused");
    assert_eq!(bad, 0);
}
