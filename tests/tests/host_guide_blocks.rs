// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Every Rust block of README.md and of the guide under docs/ compiles:
//! each becomes the body of a function of its own in a crate outside the
//! workspace (kspan from this checkout), after a prelude that gives what the
//! blocks take as given (`provider`, `exporter`, the usual imports), and the
//! crate is built. README's `readme-app` blocks, a whole crate, are built and
//! run by `host_readme_app` instead.

use std::path::{Path, PathBuf};
use std::process::Command;

use kspan_tests::target_dir;

/// What each block may use without defining it.
const PRELUDE: &str = "\
    use opentelemetry::trace::{TraceContextExt as _, Tracer as _, TracerProvider as _};
    use opentelemetry::Context;
    use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};
    use std::time::Duration;
    let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let otlp_exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_id_generator(kspan::KernelSpanIds::default())
        .build();
    fn busy(_: Duration) {}
";

/// The ```rust blocks of `text`, but those after a `readme-app` marker.
fn rust_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, usize)> = None;
    let mut after_marker = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        match &mut current {
            None if trimmed.starts_with("```rust") => {
                let indent = line.len() - trimmed.len();
                current = (!after_marker).then(|| (String::new(), indent));
                if after_marker {
                    // Skip to the block's end.
                    current = Some((String::from("\u{0}"), indent));
                }
            }
            None => after_marker = trimmed.starts_with("<!-- readme-app:"),
            Some((body, indent)) => {
                if trimmed.starts_with("```") {
                    if !body.starts_with('\u{0}') {
                        blocks.push(std::mem::take(body));
                    }
                    current = None;
                    after_marker = false;
                } else {
                    let strip = line.len().min(*indent);
                    body.push_str(&line[strip..]);
                    body.push('\n');
                }
            }
        }
    }
    blocks
}

fn markdown_files(repo: &Path) -> Vec<PathBuf> {
    let mut files = vec![repo.join("README.md")];
    let mut guide: Vec<PathBuf> = std::fs::read_dir(repo.join("docs/guide"))
        .expect("the guide is under docs/guide")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    guide.sort();
    files.extend(guide);
    files
}

#[test]
fn every_rust_block_of_readme_and_the_guide_compiles() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let mut lib = String::from(
        "#![allow(unused, clippy::all)]\n\
         type BoxError = Box<dyn std::error::Error + Send + Sync>;\n",
    );
    let mut count = 0;
    for file in markdown_files(&repo) {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(&repo).unwrap().display().to_string();
        for (i, block) in rust_blocks(&text).iter().enumerate() {
            count += 1;
            lib.push_str(&format!(
                "\n// {name}, block {}\n#[allow(unreachable_code)]\n\
                 async fn block_{count}() -> Result<(), BoxError> {{\n{PRELUDE}\n{{\n{block}\n}}\n    Ok(())\n}}\n",
                i + 1
            ));
        }
    }
    assert!(count >= 10, "the guide's Rust blocks: {count}");

    let dir = target_dir().join("kspan-guide-blocks");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let manifest = format!(
        "[package]\nname = \"guide-blocks\"\nversion = \"0.1.0\"\nedition = \"2021\"\npublish = false\n\n\
         [workspace]\n\n[dependencies]\n\
         kspan = {{ path = {kspan:?}, features = [\"tracing\"] }}\n\
         opentelemetry = \"0.33\"\n\
         opentelemetry_sdk = {{ version = \"0.33\", features = [\"rt-tokio\", \"testing\"] }}\n\
         tokio = {{ version = \"1\", features = [\"rt-multi-thread\", \"macros\", \"time\"] }}\n\
         tracing = \"0.1\"\n\
         tracing-subscriber = \"0.3\"\n\
         tracing-opentelemetry = \"0.34\"\n",
        kspan = repo.join("kspan")
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(dir.join("src/lib.rs"), &lib).unwrap();
    std::fs::copy(repo.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let build = Command::new(cargo)
        .current_dir(&dir)
        // The workspace's dev profile, as for README's service.
        .args(["--config", "profile.dev.package.\"*\".debug=false"])
        .args(["build", "--offline", "--quiet"])
        .env("CARGO_PROFILE_DEV_DEBUG", "line-tables-only")
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .output()
        .expect("run cargo build");
    assert!(
        build.status.success(),
        "a block of README or the guide does not compile (the crate is {}):\n{}",
        dir.display(),
        String::from_utf8_lossy(&build.stderr)
    );
}

#[test]
fn blocks_are_found_and_readme_app_ones_left_out() {
    let text = "a\n```rust\nlet x = 1;\n```\n<!-- readme-app: src/main.rs -->\n```rust\nfn main() {}\n```\n  ```rust\n  let y = 2;\n  ```\n";
    assert_eq!(rust_blocks(text), ["let x = 1;\n", "let y = 2;\n"]);
}
