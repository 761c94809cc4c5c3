//! The test executables of the `kspan-tests` package, built by cargo and
//! read from its JSON messages: what the VM stages run, for the host's
//! architecture (`tasks`) and cross-built for arm64 (`cross`).

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::util::{display, Metadata};

/// The package holding the tests that need a real kernel (run in the VM).
pub const TESTS_PKG: &str = "kspan-tests";

/// Builds the `kspan-tests` test targets with `cmd` (a cargo command, given
/// `select`, the packages to build: `-p kspan-tests`, or `--workspace` to
/// reuse a `cargo test --workspace` build, whose features are the whole
/// workspace's; then `extra` arguments, such as `--target`); returns
/// `(executable, package dir)` of `kspan-tests`' test targets.
pub fn test_binaries(
    mut cmd: Command,
    select: &[&str],
    extra: &[&str],
) -> Result<Vec<(PathBuf, PathBuf)>> {
    let meta = Metadata::load()?;
    let Some((id, dir)) = meta.package(TESTS_PKG) else {
        bail!("the workspace has no {TESTS_PKG} package");
    };
    cmd.arg("test")
        .args(select)
        .args(["--no-run", "--message-format=json"])
        .args(extra);
    eprintln!("+ {}", display(&cmd));
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo test --no-run")?;
    let json = String::from_utf8_lossy(&out.stdout);
    // In JSON mode cargo writes rustc's and the linker's messages to stdout
    // as JSON: print them, or a failed build says only "1 previous error".
    for rendered in compiler_messages(&json) {
        eprint!("{rendered}");
    }
    if !out.status.success() {
        bail!("building the {TESTS_PKG} tests failed ({})", out.status);
    }
    let binaries = test_executables(&json, id)
        .into_iter()
        .map(|exe| (exe, dir.to_path_buf()))
        .collect();
    Ok(binaries)
}

/// The rendered compiler messages (errors, warnings, linker output) in
/// cargo's JSON messages.
fn compiler_messages(json_lines: &str) -> Vec<String> {
    json_lines
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|v| v["reason"] == "compiler-message")
        .filter_map(|v| v["message"]["rendered"].as_str().map(str::to_string))
        .collect()
}

/// The test executables of package `id` in cargo's JSON messages.
fn test_executables(json_lines: &str, id: &str) -> Vec<PathBuf> {
    let mut exes: Vec<PathBuf> = Vec::new();
    for line in json_lines.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] != "compiler-artifact"
            || v["package_id"] != id
            || v["profile"]["test"] != true
        {
            continue;
        }
        if let Some(exe) = v["executable"].as_str() {
            let exe = PathBuf::from(exe);
            if !exes.contains(&exe) {
                exes.push(exe);
            }
        }
    }
    exes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_the_compiler_s_rendered_messages() {
        let lines = [
            r#"{"reason":"compiler-message","package_id":"p","message":{"rendered":"error: linking with `cc` failed\n","level":"error"}}"#,
            r#"{"reason":"compiler-artifact","package_id":"p","profile":{"test":true},"executable":"/x"}"#,
            r#"{"reason":"compiler-message","package_id":"p","message":{"rendered":null}}"#,
            "not json",
        ]
        .join("\n");
        assert_eq!(
            compiler_messages(&lines),
            ["error: linking with `cc` failed\n"]
        );
    }

    #[test]
    fn picks_test_executables() {
        let id = "path+file:///w/tests#kspan-tests@0.1.0";
        let lines = [
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tests#kspan-tests@0.1.0","profile":{"test":true},"executable":"/w/target/debug/deps/probes-1"}"#,
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tests#kspan-tests@0.1.0","profile":{"test":false},"executable":"/w/target/debug/kspan-receive"}"#,
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tests#kspan-tests@0.1.0","profile":{"test":false},"executable":null}"#,
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/kspan#0.1.0","profile":{"test":true},"executable":"/w/target/debug/deps/kspan-2"}"#,
            r#"{"reason":"build-finished","success":true}"#,
            "not json",
        ]
        .join("\n");
        assert_eq!(
            test_executables(&lines, id),
            [PathBuf::from("/w/target/debug/deps/probes-1")]
        );
    }
}
