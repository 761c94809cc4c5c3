// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A process runs one kspan runtime at a time: a second `start` while one
//! runs fails, naming where the first was started, and leaves the first
//! recording; once the first is shut down or dropped, another starts.
//! Checked on the host with a syscall source.

use opentelemetry_sdk::trace::InMemorySpanExporter;

#[kspan::kernel_span(syscall = "getppid")]
fn getppid(ret: i64) {}

extern "C" {
    #[link_name = "getppid"]
    fn libc_getppid() -> i32;
}

fn calls(n: usize) {
    for _ in 0..n {
        // SAFETY: getppid has no arguments and cannot fail.
        unsafe { libc_getppid() };
    }
}

fn getppids(exporter: &InMemorySpanExporter) -> usize {
    let spans = exporter.get_finished_spans().unwrap();
    spans.iter().filter(|s| s.name == "getppid").count()
}

fn builder(provider: &opentelemetry_sdk::trace::SdkTracerProvider) -> kspan::KspanBuilder {
    kspan::Kspan::builder(provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&getppid)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_runtime_is_refused_naming_the_first_until_it_is_gone() {
    let (provider, exporter) = kspan_tests::in_memory_provider();
    // The line of `.start()` below.
    let first_line = line!() + 2;
    let first = builder(&provider)
        .start()
        .expect("syscall sources start on the host");

    let (other, theirs) = kspan_tests::in_memory_provider();
    let err = builder(&other)
        .start()
        .expect_err("a second runtime must be refused");
    match &err {
        kspan::Error::RuntimeRunning { first } => {
            assert!(first.file().ends_with("host_one_runtime.rs"), "{first}");
            assert_eq!(first.line(), first_line, "{first}");
        }
        e => panic!("not RuntimeRunning: {e}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("another kspan runtime is running in this process"),
        "{message}"
    );
    // Where the first was started.
    let named = format!("host_one_runtime.rs:{first_line}:");
    assert!(message.contains(&named), "{message} (expected {named})");
    assert!(message.contains("Kspan::shutdown"), "{message}");

    // The first still records, alone.
    calls(100);
    let stats = first.shutdown().await.expect("the first shuts down");
    assert_eq!(stats.lost(), 0, "{stats:?}");
    assert_eq!(getppids(&exporter), 100);
    assert_eq!(getppids(&theirs), 0);

    // Shut down: another starts, and only it records now.
    let second = builder(&other).start().expect("the first was shut down");
    calls(50);
    drop(second);
    assert_eq!(getppids(&theirs), 50);
    assert_eq!(getppids(&exporter), 100);

    // Dropped: another starts again.
    let third = builder(&provider).start().expect("the second was dropped");
    calls(20);
    let stats = third.shutdown().await.expect("the third shuts down");
    assert_eq!(stats.spans_to_pipeline, 20, "{stats:?}");
}
