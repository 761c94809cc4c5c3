// SPDX-License-Identifier: Apache-2.0 OR MIT
//! README's service on a real kernel: `readme-app-fexit`, README's code with
//! the kernel-function probe its comment gives (`vfs_read`, `auto`), built by
//! the host test `host_readme_app` as a crate of its own. Run in the VM by
//! `cargo xtask test`, after the host tests: its `vfs_read` calls, received
//! over OTLP/gRPC, are children of its `load_config` span, made with the
//! OpenTelemetry API alone.

use kspan_tests::{
    assert_children_of, returned_sum, run_with_receiver, spans_of_thread, target_dir, the_span,
};

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a kernel with BPF trampolines; run by `cargo xtask test` in the VM"]
async fn readme_service_with_a_kernel_function_nests_its_reads_over_otlp() {
    // Built for the host by host_readme_app, for arm64 by `cargo xtask
    // cross` (cargo's `--target` layout).
    let built = if cfg!(target_arch = "aarch64") {
        "aarch64-unknown-linux-gnu/debug"
    } else {
        "debug"
    };
    let program = target_dir()
        .join("kspan-readme-app/target")
        .join(built)
        .join("readme-app-fexit");
    assert!(
        program.exists(),
        "{} is not built: run `cargo test -p kspan-tests --test host_readme_app` first \
         (cargo xtask test does)",
        program.display()
    );
    let run = run_with_receiver(&program, &[], "readme-app-fexit").await;
    let stdout = run.stdout();
    assert!(run.output.status.success(), "{stdout}\n{}", run.stderr());
    let size = std::fs::metadata("/etc/os-release").unwrap().len();
    assert!(stdout.contains(&format!("read {size} bytes")), "{stdout}");
    assert!(
        stdout.contains("acknowledged by the collector; 0 lost"),
        "{stdout}"
    );

    let app = the_span(&run.spans, "load_config");
    let pid = i64::from(run.pid);
    let reads = spans_of_thread(&run.spans, "vfs_read", pid, app.start_ns, app.end_ns);
    assert!(reads.len() >= 2, "{:?}", run.spans);
    assert_children_of(&reads, app);
    assert_eq!(
        returned_sum(&reads) as u64,
        size,
        "the reads add up to the file"
    );
}
