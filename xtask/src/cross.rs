//! `cargo xtask cross [CARGO ARGS]`: builds kspan for
//! `aarch64-unknown-linux-gnu` on this x86-64 machine with Debian's own
//! toolchain, nothing installed but Debian 12's cross compiler.
//!
//! rustup cannot fetch another target's standard library here, and the
//! host toolchain's must match the compiler exactly. Debian ships both
//! halves, built together: sid's `rustc` (amd64) with `libstd-rust-dev`
//! for amd64 (build scripts and proc macros) and for arm64 (the target).
//! They are fetched like the other suites' packages ([`crate::kernel`]): a
//! private apt state per architecture, the closure of the compiler's
//! libraries from sid's index ([`crate::packages`]), each package unpacked
//! with `dpkg -x` into `<target>/kspan-cross/rust-sid/root/`. Sid's rustc
//! needs sid's glibc and LLVM, so, as sid's bpftrace does, it runs through
//! sid's own loader with sid's library directories (the wrapper
//! `<target>/kspan-cross/rust-sid/rustc`, given to cargo as `RUSTC`); the
//! machine's cargo drives it.
//!
//! Linking uses Debian 12's `gcc-aarch64-linux-gnu` and its glibc
//! (`libc6-dev-arm64-cross`, 2.36), and libbpf's C libraries (libelf,
//! zlib) come from the arm64 root the arm64 guest boots
//! ([`crate::rootfs`]), the same packages, so a binary built here links
//! against exactly what it runs with in the guest.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};

use crate::arch::GuestArch;
use crate::kernel;
use crate::packages;
use crate::util::{cargo, output, run, which};

/// Rust's name of the target.
pub const TARGET: &str = "aarch64-unknown-linux-gnu";

/// The suite whose Rust is used: the one with a standard library for
/// arm64 that matches an amd64 compiler of a current release.
const RUST_SUITE: &str = "sid";

/// The cross C compiler and archiver (Debian 12's `gcc-aarch64-linux-gnu`,
/// `binutils-aarch64-linux-gnu`).
const CC: &str = "aarch64-linux-gnu-gcc";
const AR: &str = "aarch64-linux-gnu-ar";

/// The library directories of the unpacked compiler, in the loader's
/// order of search.
const LIB_DIRS: &[&str] = &["usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu"];

/// The loader, where sid's glibc puts it.
const LOADER: &str = "usr/lib64/ld-linux-x86-64.so.2";

/// A prepared cross toolchain.
#[derive(Debug)]
pub struct Toolchain {
    /// The `rustc` wrapper, for cargo's `RUSTC`.
    pub rustc: PathBuf,
    /// The arm64 root: libelf's and zlib's headers, and the libraries
    /// their shared objects need.
    pub arm64_root: PathBuf,
    /// A directory holding only `libelf.so` and `libz.so`, the root's: the
    /// link search path. The root's own directories are not on it: its
    /// `libc.so` (a linker script of absolute paths) would stand in for the
    /// cross compiler's.
    pub link_dir: PathBuf,
    /// Build at a lower priority (`nice`), beside a guest that should keep
    /// its core ([`Toolchain::in_background`]).
    pub background: bool,
}

/// The libraries libbpf-sys links by name, and where Debian 12's arm64
/// packages put them.
const LINKED: &[(&str, &str)] = &[
    ("libelf.so", "usr/lib/aarch64-linux-gnu/libelf.so.1"),
    ("libz.so", "lib/aarch64-linux-gnu/libz.so.1"),
];

impl Toolchain {
    /// The same toolchain, its builds at a lower priority when `background`.
    pub fn in_background(self, background: bool) -> Self {
        Toolchain { background, ..self }
    }

    /// The environment cargo needs to build for [`TARGET`].
    pub fn cargo_env(&self) -> Vec<(String, String)> {
        // Debian 12's packages put libraries in both (before its /usr merge).
        let rpath: Vec<String> = ["usr/lib/aarch64-linux-gnu", "lib/aarch64-linux-gnu"]
            .iter()
            .map(|d| self.arm64_root.join(d).display().to_string())
            .collect();
        let include = self.arm64_root.join("usr/include");
        let upper = TARGET.to_uppercase().replace('-', "_");
        let lower = TARGET.replace('-', "_");
        vec![
            ("RUSTC".into(), self.rustc.display().to_string()),
            (format!("CARGO_TARGET_{upper}_LINKER"), CC.into()),
            (format!("CC_{lower}"), CC.into()),
            (format!("AR_{lower}"), AR.into()),
            (
                format!("CFLAGS_{lower}"),
                format!("-I{}", include.display()),
            ),
            // libelf.so's own dependencies (libzstd) are found through
            // -rpath-link, as the guest's loader finds them in the root.
            (
                format!("CARGO_TARGET_{upper}_RUSTFLAGS"),
                format!(
                    "-L native={} -C link-arg=-Wl,-rpath-link,{}",
                    self.link_dir.display(),
                    rpath.join(":")
                ),
            ),
        ]
    }
}

/// Makes `link_dir` hold the link names of [`LINKED`], pointing into `root`.
fn link_names(root: &Path, link_dir: &Path) -> Result<()> {
    fs::create_dir_all(link_dir)?;
    for (name, file) in LINKED {
        let target = root.join(file);
        if !target.is_file() {
            bail!(
                "{} is missing from the arm64 root: remove {} and run again",
                target.display(),
                root.display()
            );
        }
        let link = link_dir.join(name);
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link)
            .with_context(|| format!("linking {} to {}", link.display(), target.display()))?;
    }
    Ok(())
}

/// Where the cross toolchain is cached.
fn cache_dir() -> PathBuf {
    crate::vm::cache_dir()
        .parent()
        .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
        .join("kspan-cross")
}

/// Fetches (once) and checks the cross toolchain.
pub fn prepare() -> Result<Toolchain> {
    for tool in [CC, AR] {
        if which(tool).is_none() {
            bail!("{tool} not found: run `cargo xtask deps` (Debian's gcc-aarch64-linux-gnu)");
        }
    }
    let dir = cache_dir().join(format!("rust-{RUST_SUITE}"));
    kernel::fill_once(&dir, fetch_into)
        .with_context(|| format!("fetching {RUST_SUITE}'s Rust into {}", dir.display()))?;
    let rustc = dir.join("rustc");
    fs::write(&rustc, wrapper_script(&dir.join("root")))?;
    make_executable(&rustc)?;
    let arm64_root = crate::rootfs::prepare(GuestArch::Arm64, false, &crate::vm::cache_dir())?;
    let link_dir = cache_dir().join("arm64-link");
    link_names(&arm64_root, &link_dir)?;
    let toolchain = Toolchain {
        rustc,
        arm64_root,
        link_dir,
        background: false,
    };
    check(&toolchain)?;
    Ok(toolchain)
}

/// `exec`s sid's rustc through sid's loader: the library path on the
/// loader's command line, so that what rustc runs (the linker, build
/// scripts) has the machine's own environment.
fn wrapper_script(root: &Path) -> String {
    let lib_path: Vec<String> = LIB_DIRS
        .iter()
        .map(|d| root.join(d).display().to_string())
        .collect();
    format!(
        "#!/bin/sh\n# Sid's rustc, through sid's loader (cargo xtask cross).\nexec {} --library-path {} {} \"$@\"\n",
        root.join(LOADER).display(),
        lib_path.join(":"),
        root.join("usr/bin/rustc").display()
    )
}

fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", path.display()))
}

/// The packages to unpack: rustc and the amd64 standard library, with the
/// closure of the compiler's shared libraries (glibc, LLVM), and the arm64
/// standard library of the same version. rustc's own dependencies on gcc,
/// binutils and libc-dev are not followed: the machine's compilers link.
fn fetch_into(tmp: &Path) -> Result<()> {
    let amd64 = kernel::private_apt(RUST_SUITE, "amd64", &tmp.join("apt-amd64"))?;
    let index = packages::parse_index(&output(
        Command::new("apt-cache").args(&amd64).arg("dumpavail"),
    )?);
    let rustc = index
        .get("rustc")
        .ok_or_else(|| anyhow!("{RUST_SUITE}'s index has no rustc"))?;
    let version = rustc.version.clone();
    let runtime = index
        .values()
        .find(|p| p.name.starts_with("libstd-rust-1.") && p.version == version)
        .ok_or_else(|| anyhow!("{RUST_SUITE} has no libstd-rust-1.* of rustc {version}"))?
        .name
        .clone();
    let mut pinned: Vec<String> = packages::closure(&index, &runtime)?
        .packages
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    pinned.push(format!("rustc={version}"));
    pinned.push(format!("libstd-rust-dev={version}"));
    eprintln!(
        "cross: fetching {RUST_SUITE}'s rustc {version} and the {} packages it runs with",
        pinned.len() - 1
    );
    let root = tmp.join("root");
    kernel::download_and_unpack(&amd64, &pinned, &tmp.join("dl-amd64"), &root)?;
    let arm64 = kernel::private_apt(RUST_SUITE, "arm64", &tmp.join("apt-arm64"))?;
    let arm64_index = packages::parse_index(&output(
        Command::new("apt-cache").args(&arm64).arg("dumpavail"),
    )?);
    match arm64_index.get("libstd-rust-dev") {
        Some(std) if std.version == version => {}
        Some(std) => bail!(
            "{RUST_SUITE}'s arm64 libstd-rust-dev is {}, its rustc {version}: the archive is \
             between two releases; try again once both are built",
            std.version
        ),
        None => bail!("{RUST_SUITE} has no arm64 libstd-rust-dev"),
    }
    kernel::download_and_unpack(
        &arm64,
        &[format!("libstd-rust-dev={version}")],
        &tmp.join("dl-arm64"),
        &root,
    )?;
    for apt in ["apt-amd64", "apt-arm64"] {
        let _ = fs::remove_dir_all(tmp.join(apt));
    }
    fs::write(tmp.join("version"), format!("{version}\n"))?;
    Ok(())
}

/// Runs the wrapper once: a library it cannot load, or a standard library
/// for the target that is missing, fails here with the reason.
fn check(toolchain: &Toolchain) -> Result<()> {
    let libdir = output(Command::new(&toolchain.rustc).args([
        "--print",
        "target-libdir",
        "--target",
        TARGET,
    ]))
    .with_context(|| format!("running {}", toolchain.rustc.display()))?;
    let libdir = PathBuf::from(libdir.trim());
    let has_std = fs::read_dir(&libdir)
        .with_context(|| format!("reading {}", libdir.display()))?
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().starts_with("libstd-"));
    if !has_std {
        bail!(
            "no standard library for {TARGET} in {}: remove {} and run again",
            libdir.display(),
            cache_dir().display()
        );
    }
    Ok(())
}

/// `cargo xtask cross [CARGO ARGS]`: `cargo ARGS --target aarch64-...`
/// with the cross toolchain; without arguments, builds what the arm64
/// guest runs ([`build_for_guest`]).
pub fn command(args: &[String]) -> Result<u8> {
    let toolchain = prepare()?;
    if args.is_empty() {
        let tests = build_for_guest(&toolchain)?;
        eprintln!("cross: {} test executables for {TARGET}", tests.len());
        return Ok(0);
    }
    run(cargo_for(&toolchain).args(args).args(["--target", TARGET]))?;
    Ok(0)
}

/// A cargo command with the cross toolchain's environment.
pub fn cargo_for(toolchain: &Toolchain) -> Command {
    let mut cmd = cargo();
    if toolchain.background {
        cmd = crate::util::niced(cmd, 10);
    }
    cmd.envs(toolchain.cargo_env());
    // The embedded Jaeger's UI files are read from its crate's source
    // directory in debug builds (rust-embed), which the arm64 guest cannot
    // see: embedded, as in a release build, which rust-embed decides by
    // `debug_assertions` in its own crates and in the one deriving. (A
    // package's profile has no environment variable: `--config`.)
    for profile in ["dev", "test"] {
        for package in ["otlp-embedded", "rust-embed", "rust-embed-utils"] {
            cmd.arg("--config").arg(format!(
                "profile.{profile}.package.{package}.debug-assertions=false"
            ));
        }
    }
    cmd
}

/// Builds for the arm64 guest what its tests run: the binaries and
/// examples (a second cargo run: with `--bins` among a test run's targets,
/// bins are built as tests and the integration tests lose their
/// `CARGO_BIN_EXE_*`), then the `kspan-tests` test executables, returned.
pub fn build_for_guest(toolchain: &Toolchain) -> Result<Vec<(PathBuf, PathBuf)>> {
    run(cargo_for(toolchain).args([
        "build",
        "--target",
        TARGET,
        "-p",
        "kspan-cli",
        "-p",
        "kspan-examples",
        "-p",
        "kspan-tests",
        "--bins",
        "--examples",
    ]))?;
    let tests = crate::testbins::test_binaries(
        cargo_for(toolchain),
        &["-p", crate::testbins::TESTS_PKG],
        &["--target", TARGET],
    )?;
    build_readme_app(toolchain)?;
    Ok(tests)
}

/// README's service, as the host test `host_readme_app` wrote it (a crate
/// of kspan's packaged crates under `target/debug/kspan-readme-app/`), built
/// for the target where `vm_readme_app` runs it from: beside the arm64 test
/// executables. Left with a note when the host tests have not written it.
fn build_readme_app(toolchain: &Toolchain) -> Result<()> {
    let target = crate::util::target_dir();
    let app = target.join("debug/kspan-readme-app");
    if !app.join("Cargo.toml").is_file() {
        eprintln!(
            "cross: note: {} is not written yet (the host test host_readme_app writes it): \
             vm_readme_app will say so",
            app.display()
        );
        return Ok(());
    }
    let app_target = target.join(TARGET).join("debug/kspan-readme-app/target");
    // The kspan crates are unpacked afresh by every host run, with the
    // archive's file times, which can be older than what was built from the
    // last ones: what cargo remembers of them goes, so they are built again.
    for sub in [
        "debug/build".to_string(),
        "debug/.fingerprint".to_string(),
        format!("{TARGET}/debug/build"),
        format!("{TARGET}/debug/.fingerprint"),
    ] {
        let Ok(entries) = fs::read_dir(app_target.join(sub)) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("kspan") {
                fs::remove_dir_all(entry.path())
                    .with_context(|| format!("removing {}", entry.path().display()))?;
            }
        }
    }
    let mut build = cargo_for(toolchain);
    crate::util::with_workspace_dev_profile(&mut build);
    run(build
        .current_dir(&app)
        .args([
            "build",
            "--offline",
            "--quiet",
            "--bins",
            "--target",
            TARGET,
        ])
        .env("CARGO_TARGET_DIR", &app_target))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wrapper_runs_rustc_through_the_suite_s_loader() {
        let script = wrapper_script(Path::new("/c/root"));
        assert!(script.starts_with("#!/bin/sh\n"));
        assert!(script.contains(
            "exec /c/root/usr/lib64/ld-linux-x86-64.so.2 --library-path \
             /c/root/usr/lib/x86_64-linux-gnu:/c/root/lib/x86_64-linux-gnu \
             /c/root/usr/bin/rustc \"$@\""
        ));
    }

    #[test]
    fn cargo_is_told_the_target_s_linker_compiler_and_libraries() {
        let t = Toolchain {
            rustc: PathBuf::from("/c/rustc"),
            arm64_root: PathBuf::from("/r"),
            link_dir: PathBuf::from("/l"),
            background: false,
        };
        let env = t.cargo_env();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("RUSTC"), Some("/c/rustc"));
        assert_eq!(
            get("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER"),
            Some("aarch64-linux-gnu-gcc")
        );
        assert_eq!(
            get("CC_aarch64_unknown_linux_gnu"),
            Some("aarch64-linux-gnu-gcc")
        );
        assert_eq!(
            get("CFLAGS_aarch64_unknown_linux_gnu"),
            Some("-I/r/usr/include")
        );
        assert_eq!(
            get("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS"),
            Some(
                "-L native=/l \
                 -C link-arg=-Wl,-rpath-link,/r/usr/lib/aarch64-linux-gnu:/r/lib/aarch64-linux-gnu"
            )
        );
    }
}
