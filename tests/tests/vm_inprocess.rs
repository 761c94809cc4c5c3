// SPDX-License-Identifier: Apache-2.0 OR MIT
//! kspan used in-process on a real kernel (run in the VM by `cargo xtask
//! test`): fentry mode, the figures, and detaching on drop.

use kspan_tests::gettid;
use std::io::Read;

use opentelemetry_sdk::trace::InMemorySpanExporter;

#[kspan::kernel_span("vfs_read", mode = "fentry")]
fn vfs_read_entry(count: usize, file: *const u8) {}

#[kspan::kernel_span("vfs_read")]
fn vfs_read_exit(count: usize, ret: isize) {}

fn read_file_in_chunks(buf: usize) -> usize {
    let path = std::env::temp_dir().join(format!("kspan-inproc-{}", std::process::id()));
    std::fs::write(&path, vec![7u8; 3000]).unwrap();
    let mut f = std::fs::File::open(&path).unwrap();
    let mut b = vec![0u8; buf];
    let mut calls = 0;
    loop {
        calls += 1;
        if f.read(&mut b).unwrap() == 0 {
            return calls;
        }
    }
}

fn this_thread_spans(
    exporter: &InMemorySpanExporter,
    tid: i64,
    count: i64,
) -> Vec<opentelemetry_sdk::trace::SpanData> {
    exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| {
            let attr = |k: &str| {
                s.attributes
                    .iter()
                    .find(|kv| kv.key.as_str() == k)
                    .map(|kv| kv.value.clone())
            };
            attr("kspan.tid") == Some(tid.into()) && attr("kernel.arg.count") == Some(count.into())
        })
        .collect()
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines (fentry/fexit); run by `cargo xtask test` in the VM"]
async fn fentry_mode_gives_instants_with_arguments() {
    let (provider, exporter) = kspan_tests::in_memory_provider();
    let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&vfs_read_entry)
        .start()
        .unwrap();
    let calls = read_file_in_chunks(1000);
    let stats = kspan.shutdown().await.unwrap();
    let spans = this_thread_spans(&exporter, gettid(), 1000);
    assert_eq!(spans.len(), calls, "one instant per read: {spans:#?}");
    for s in &spans {
        assert_eq!(s.start_time, s.end_time, "an instant");
        let has = |k: &str| s.attributes.iter().any(|kv| kv.key.as_str() == k);
        assert!(!has("kernel.return_value"), "fentry sees no return value");
        let file = s
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == "kernel.arg.file")
            .unwrap();
        // The kernel's half of the address space, on x86-64 and arm64 alike.
        let address = file.value.as_str();
        let address = address
            .strip_prefix("0x")
            .and_then(|hex| u64::from_str_radix(hex, 16).ok());
        assert!(
            address.is_some_and(|a| a >> 63 == 1),
            "a kernel address: {file:?}"
        );
    }
    assert_eq!(stats.lost(), 0, "{stats:?}");
    assert_eq!(stats.records_emitted, stats.spans_to_pipeline, "{stats:?}");
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines (fentry/fexit); run by `cargo xtask test` in the VM"]
async fn dropping_the_handle_detaches() {
    let (provider, exporter) = kspan_tests::in_memory_provider();
    let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&vfs_read_exit)
        .start()
        .unwrap();
    read_file_in_chunks(700);
    // Let the consumer catch up, then drop without shutdown.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    drop(kspan);
    let before = this_thread_spans(&exporter, gettid(), 700).len();
    assert_eq!(
        before, 6,
        "3000 bytes in 700-byte reads: 5 reads and the final 0"
    );
    read_file_in_chunks(700);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        this_thread_spans(&exporter, gettid(), 700).len(),
        before,
        "no spans after drop"
    );
    // The programs are gone: attaching again works and sees new calls only.
    let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&vfs_read_exit)
        .start()
        .unwrap();
    read_file_in_chunks(700);
    let stats = kspan.shutdown().await.unwrap();
    assert_eq!(
        this_thread_spans(&exporter, gettid(), 700).len(),
        before + 6,
        "{stats:?}"
    );
}
