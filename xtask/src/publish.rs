// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The crates kspan publishes: packaging them (`cargo package`, each
//! verified by a build from its own `.crate`), and their minimum Rust
//! version against what their dependencies declare.
//!
//! Only one toolchain can be installed here, so the MSRV is checked the way
//! it can be: the workspace's `rust-version` must be at least the highest
//! `rust-version` declared by any crate the published crates build with
//! (normal and build dependencies, for the one target kspan supports), and
//! clippy's `incompatible_msrv` lint (on by default) flags standard-library
//! APIs newer than it in kspan's own code.

use anyhow::{bail, Context, Result};

use crate::util::{cargo, output, run};

/// The crates a service's build pulls in, and the command; every other
/// workspace member says `publish = false`.
pub const PUBLISHED: [&str; 6] = [
    "kspan-dsl",
    "kspan-macros",
    "kspan-bpf",
    "kspan",
    "kspan-build",
    "kspan-cli",
];

/// The targets kspan's BPF side supports: each may pull in dependencies
/// of its own.
const TARGETS: [&str; 2] = ["x86_64-unknown-linux-gnu", crate::cross::TARGET];

/// `cargo package` of [`PUBLISHED`], verification included.
pub fn package() -> Result<String> {
    forget_verified_sources()?;
    let mut cmd = cargo();
    // The verification builds each package as a workspace of its own, into
    // the workspace's target directory: with the workspace's profile its
    // dependencies are the units the host build uses, not a second set
    // with full debug information.
    crate::util::with_workspace_dev_profile(&mut cmd);
    cmd.arg("package").arg("--offline");
    for krate in PUBLISHED {
        cmd.args(["-p", krate]);
    }
    run(&mut cmd)?;
    for krate in PUBLISHED {
        check_shipped(krate)?;
    }
    Ok(format!(
        "{} crates packaged and verified, each with its licences and README",
        PUBLISHED.len()
    ))
}

/// What every `.crate` must hold for a user who reads it alone (docs.rs,
/// crates.io, a vendored copy): both licences, and a README of its own
/// whose links work outside the repository.
fn check_shipped(krate: &str) -> Result<()> {
    let file = crate::util::target_dir().join(format!(
        "package/{krate}-{}.crate",
        env!("CARGO_PKG_VERSION")
    ));
    let listed = output(std::process::Command::new("tar").arg("tzf").arg(&file))?;
    let prefix = format!("{krate}-{}/", env!("CARGO_PKG_VERSION"));
    for needed in ["LICENSE-APACHE", "LICENSE-MIT", "README.md"] {
        if !listed.lines().any(|l| l == format!("{prefix}{needed}")) {
            bail!(
                "{} lacks {needed}: add it to the crate's directory and to `include` in its \
                 Cargo.toml",
                file.display()
            );
        }
    }
    let readme = output(
        std::process::Command::new("tar")
            .arg("xzOf")
            .arg(&file)
            .arg(format!("{prefix}README.md")),
    )?;
    if let Some(link) = relative_links(&readme).first() {
        bail!(
            "{krate}'s README.md links `{link}`, which leads nowhere outside the repository \
             (crates.io shows it alone): use an absolute URL"
        );
    }
    Ok(())
}

/// The Markdown link targets of `text` that are neither URLs nor anchors.
fn relative_links(text: &str) -> Vec<&str> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|target| {
            !(target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with('#')
                || target.starts_with("mailto:"))
        })
        .collect()
}

/// Removes what earlier verifications unpacked of the published crates.
/// Cargo verifies a package against the others through a temporary local
/// registry, which it unpacks under `$CARGO_HOME/registry/src/-<hash>/`
/// (the hash of the registry's path), and does not unpack a version again
/// once there: a second verification from the same checkout, after a
/// change, would build the first one's sources.
fn forget_verified_sources() -> Result<()> {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry/src")) else {
        return Ok(());
    };
    let Ok(registries) = std::fs::read_dir(&src) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        // Local registries' directories have no host name before the hash.
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for krate in PUBLISHED {
            let dir = registry
                .path()
                .join(format!("{krate}-{}", env!("CARGO_PKG_VERSION")));
            if dir.is_dir() {
                std::fs::remove_dir_all(&dir)
                    .with_context(|| format!("removing {}", dir.display()))?;
            }
        }
    }
    Ok(())
}

/// A version `a.b[.c]` as numbers.
fn version(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.split('.').map(str::parse::<u32>);
    let major = parts.next()?.ok()?;
    let minor = parts.next().unwrap_or(Ok(0)).ok()?;
    let patch = parts.next().unwrap_or(Ok(0)).ok()?;
    Some((major, minor, patch))
}

/// The dependency with the highest declared `rust-version` among what the
/// published crates build with, from `cargo metadata`'s JSON: `(name,
/// rust-version)`, and the workspace's own (the published crates').
fn highest(metadata: &serde_json::Value) -> Result<(Option<(String, String)>, String)> {
    let packages = metadata["packages"]
        .as_array()
        .context("`cargo metadata`: no packages")?;
    let by_id: std::collections::HashMap<&str, &serde_json::Value> = packages
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p)))
        .collect();
    let nodes: std::collections::HashMap<&str, &serde_json::Value> = metadata["resolve"]["nodes"]
        .as_array()
        .context("`cargo metadata`: no resolve graph")?
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let ours: Vec<&str> = packages
        .iter()
        .filter(|p| p["source"].is_null() && PUBLISHED.contains(&p["name"].as_str().unwrap_or("")))
        .filter_map(|p| p["id"].as_str())
        .collect();
    let mut own = None;
    for id in &ours {
        let declared = by_id[id]["rust_version"].as_str().map(str::to_owned);
        let Some(declared) = declared else {
            bail!(
                "`{}` declares no rust-version: inherit the workspace's (`rust-version.workspace = true`)",
                by_id[id]["name"]
            );
        };
        own = Some(declared);
    }
    let own = own.context("none of the published crates is in the workspace")?;
    let mut seen: std::collections::HashSet<&str> = ours.iter().copied().collect();
    let mut stack = ours.clone();
    let mut top: Option<((u32, u32, u32), String, String)> = None;
    while let Some(id) = stack.pop() {
        let Some(node) = nodes.get(id) else { continue };
        for dep in node["deps"].as_array().into_iter().flatten() {
            let built_with = dep["dep_kinds"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["kind"].is_null() || k["kind"] == "build");
            let Some(dep_id) = dep["pkg"].as_str() else {
                continue;
            };
            if !built_with || !seen.insert(dep_id) {
                continue;
            }
            stack.push(dep_id);
            let package = by_id[dep_id];
            if let Some(declared) = package["rust_version"].as_str() {
                let v = version(declared).with_context(|| {
                    format!("`{}` declares rust-version {declared:?}", package["name"])
                })?;
                if top.as_ref().is_none_or(|(t, _, _)| v > *t) {
                    let name = package["name"].as_str().unwrap_or("?").to_owned();
                    top = Some((v, name, declared.to_owned()));
                }
            }
        }
    }
    Ok((top.map(|(_, name, v)| (name, v)), own))
}

/// Fails when a dependency of the published crates needs a newer Rust
/// than the workspace's `rust-version` says.
pub fn check_msrv() -> Result<String> {
    let mut top: Option<(String, String)> = None;
    let mut own = String::new();
    for target in TARGETS {
        let json = output(cargo().args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--filter-platform",
            target,
        ]))?;
        let metadata: serde_json::Value = serde_json::from_str(&json)
            .with_context(|| format!("cannot parse `cargo metadata` output for {target}"))?;
        let (target_top, target_own) = highest(&metadata)?;
        own = target_own;
        if let Some((name, declared)) = target_top {
            if top
                .as_ref()
                .is_none_or(|(_, v)| version(&declared) > version(v))
            {
                top = Some((name, declared));
            }
        }
    }
    let own_v = version(&own).with_context(|| format!("the workspace's rust-version {own:?}"))?;
    match top {
        Some((name, declared)) if version(&declared).is_some_and(|v| v > own_v) => bail!(
            "the published crates build with `{name}`, which declares rust-version {declared}, \
             newer than the workspace's {own}: raise `rust-version` in Cargo.toml's \
             [workspace.package] (and README's MSRV) to {declared}, or pin an older `{name}`"
        ),
        Some((name, declared)) => Ok(format!(
            "rust-version {own}; the highest a dependency declares: {name} {declared}"
        )),
        None => Ok(format!("rust-version {own}; no dependency declares one")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_links_are_found() {
        let text = "[a](https://x.y/z) [b](docs/guide.md) [c](#top) [d](../LICENSE)";
        assert_eq!(relative_links(text), ["docs/guide.md", "../LICENSE"]);
    }

    /// Metadata of `kspan` (rust-version `own`) depending normally on `a`
    /// (1.80), as a dev-dependency on `b` (1.99), and as a build dependency
    /// on `c` (`c_version`).
    fn metadata(own: &str, c_version: &str) -> serde_json::Value {
        serde_json::json!({
            "packages": [
                {"id": "k", "name": "kspan", "source": null, "rust_version": own},
                {"id": "a", "name": "a", "source": "registry", "rust_version": "1.80"},
                {"id": "b", "name": "b", "source": "registry", "rust_version": "1.99"},
                {"id": "c", "name": "c", "source": "registry", "rust_version": c_version},
            ],
            "resolve": {"nodes": [
                {"id": "k", "deps": [
                    {"pkg": "a", "dep_kinds": [{"kind": null}]},
                    {"pkg": "b", "dep_kinds": [{"kind": "dev"}]},
                    {"pkg": "c", "dep_kinds": [{"kind": "build"}]},
                ]},
                {"id": "a", "deps": []}, {"id": "b", "deps": []}, {"id": "c", "deps": []},
            ]}
        })
    }

    #[test]
    fn the_highest_is_of_what_the_crates_build_with_not_their_tests() {
        let (top, own) = highest(&metadata("1.85", "1.70")).unwrap();
        assert_eq!(own, "1.85");
        assert_eq!(
            top,
            Some(("a".to_owned(), "1.80".to_owned())),
            "b is a dev-dependency"
        );
        let (top, _) = highest(&metadata("1.85", "1.86.1")).unwrap();
        assert_eq!(
            top,
            Some(("c".to_owned(), "1.86.1".to_owned())),
            "build dependencies count"
        );
    }

    #[test]
    fn versions_compare_as_numbers() {
        assert!(version("1.100") > version("1.85"));
        assert_eq!(version("1.85"), Some((1, 85, 0)));
        assert_eq!(version("x"), None);
    }
}
