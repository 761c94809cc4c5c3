// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Many functions from one pattern on a real kernel (run in the VM by `cargo
//! xtask test`): every `vfs_*` function the kernel can trace, attached and
//! detached, with the untraceable and denied matches reported, not dropped.

use std::time::Instant;

#[kspan::kernel_span("vfs_*")]
fn every_vfs() {}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines; run by `cargo xtask test` in the VM"]
async fn a_pattern_attaches_every_traceable_match() {
    let (provider, exporter) = kspan_tests::in_memory_provider();
    let started = Instant::now();
    let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&every_vfs)
        .start()
        .unwrap();
    let attach = started.elapsed();
    let plan = kspan.attach_plan().to_vec();
    let skipped = kspan.skipped().to_vec();
    eprintln!(
        "vfs_*: {} attached in {attach:?}, {} skipped: {skipped:?}",
        plan.len(),
        skipped.len()
    );
    assert!(plan.len() >= 30, "{plan:?}");
    assert!(
        plan.iter().all(|d| d.chosen == kspan::Hook::Fexit),
        "{plan:?}"
    );
    assert!(plan.iter().any(|d| d.function == "vfs_read"));
    for (function, why) in &skipped {
        assert!(function.starts_with("vfs_"), "{function}");
        assert!(
            why.contains("inlined or notrace") || why.contains("deny list"),
            "{why}"
        );
    }
    let path = std::env::temp_dir().join("kspan-many.txt");
    std::fs::write(&path, b"many").unwrap();
    std::fs::read(&path).unwrap();
    let stats = kspan.shutdown().await.unwrap();
    assert_eq!(stats.lost(), 0, "{stats:?}");
    let names: std::collections::HashSet<String> = exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .map(|s| s.name.to_string())
        .collect();
    assert!(
        names.contains("vfs_read") && names.contains("vfs_write"),
        "{names:?}"
    );
}
