// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `cargo xtask vm` itself, run from the host: the command's exit status is
//! carried out, the environment and working directory go in, and a guest that
//! hangs or panics fails the run in bounded time with the console's tail.

use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

fn xtask_vm(vm_args: &[&str], cmd: &[&str]) -> (Output, Duration) {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let started = Instant::now();
    let out = std::process::Command::new(cargo)
        .current_dir(&repo)
        .args(["xtask", "vm"])
        .args(vm_args)
        .arg("--")
        .args(cmd)
        .env("OTEL_SERVICE_NAME", "passed-through")
        .env("KSPAN_UNRELATED_SECRET_TEST", "x")
        .output()
        .expect("run cargo xtask vm");
    (out, started.elapsed())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn exit_status_cwd_env_and_tmp() {
    // A file in the host's /tmp must not be visible in the guest's fresh one
    // (the repository itself may live under /tmp: it is mounted there too).
    let marker = std::env::temp_dir().join(format!("kspan-host-marker-{}", std::process::id()));
    std::fs::write(&marker, b"host").unwrap();
    let script = format!(
        "echo cwd=$(pwd); echo svc=$OTEL_SERVICE_NAME; test -e {} || echo tmp=fresh; \
         touch /tmp/guest-file && echo tmp=writable; \
         ip -o link show lo | grep -q UP && echo lo=up; uname -r; exit 7",
        marker.display()
    );
    let (out, _) = xtask_vm(&[], &["sh", "-c", &script]);
    let _ = std::fs::remove_file(&marker);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(7), "{stdout}{}", text(&out.stderr));
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    assert!(
        stdout.contains(&format!("cwd={}", here.display())),
        "{stdout}"
    );
    assert!(stdout.contains("svc=passed-through"), "{stdout}");
    assert!(
        stdout.contains("tmp=fresh"),
        "the host's /tmp is not the guest's: {stdout}"
    );
    assert!(stdout.contains("tmp=writable"), "{stdout}");
    assert!(
        !std::path::Path::new("/tmp/guest-file").exists(),
        "the guest's /tmp stays in the guest"
    );
    assert!(stdout.contains("lo=up"), "{stdout}");
    assert!(
        stdout.contains("6.1.0-"),
        "Debian 12's kernel by default: {stdout}"
    );
}

#[test]
fn a_hanging_guest_fails_in_bounded_time() {
    let (out, took) = xtask_vm(
        &["--timeout", "15"],
        &["sh", "-c", "echo about-to-hang; sleep 600"],
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(took < Duration::from_secs(60), "took {took:?}");
    assert!(stderr.contains("timed out after 15s"), "{stderr}");
    assert!(stderr.contains("guest console tail"), "{stderr}");
    assert!(
        stderr.contains("about-to-hang"),
        "the tail shows the guest's last words: {stderr}"
    );
}

#[test]
fn a_panicking_guest_fails_with_its_console_tail() {
    let (out, took) = xtask_vm(
        &["--timeout", "120"],
        &["sh", "-c", "echo c > /proc/sysrq-trigger; sleep 600"],
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(took < Duration::from_secs(100), "took {took:?}");
    assert!(stderr.contains("the guest kernel panicked"), "{stderr}");
    assert!(stderr.contains("guest console tail"), "{stderr}");
}
