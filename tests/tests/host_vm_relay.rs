// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A receiver on the host gets the spans of the quickstart run in the VM with
//! `cargo xtask vm -- <example binary>`: the OTLP endpoint on host loopback is
//! relayed into the guest. This test runs on the host (it boots the VM itself)
//! and needs what `cargo xtask deps` installs.

use std::path::PathBuf;

use kspan_tests::{example, Receiver};

#[tokio::test(flavor = "multi_thread")]
async fn host_receiver_gets_spans_from_the_vm() {
    let receiver = Receiver::start().await.expect("start the OTLP receiver");
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    // Under the repository: the guest sees it read-write at the same path
    // (its /tmp is its own tmpfs).
    let dir = repo
        .join("target")
        .join(format!("kspan-relay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("data.txt");
    std::fs::write(&file, vec![b'k'; 5000]).unwrap();

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = tokio::process::Command::new(cargo)
        .current_dir(&repo)
        .args(["xtask", "vm", "--"])
        .arg(example("quickstart"))
        .args([file.to_str().unwrap(), "2", "--buf", "2048"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_SERVICE_NAME", "kspan-relay-test")
        .output()
        .await
        .expect("run cargo xtask vm");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "xtask vm failed: {}\n{stdout}\n{stderr}",
        out.status
    );

    let spans = receiver.spans();
    let mut rets: Vec<i64> = spans
        .iter()
        .filter(|s| s.name == "vfs_read" && s.int("kernel.arg.count") == Some(2048))
        .map(|s| s.int("kernel.return_value").unwrap())
        .collect();
    rets.sort_unstable();
    // 5000 bytes in 2048-byte reads, twice: 2048, 2048, 904, 0 each time.
    assert_eq!(rets, [0, 0, 904, 904, 2048, 2048, 2048, 2048], "{stdout}");
    assert!(spans
        .iter()
        .all(|s| s.service_name.as_deref() == Some("kspan-relay-test")));
    assert!(spans.iter().any(|s| s.name == "read_file"));
}
