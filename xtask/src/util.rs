//! Small helpers: running commands, shell quoting, workspace paths.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// The workspace root (the parent of this crate's directory).
pub fn repo_root() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = dir.parent().unwrap_or(dir);
    root.canonicalize().unwrap_or_else(|_| root.to_path_buf())
}

/// The workspace's target directory (`CARGO_TARGET_DIR` when set).
pub fn target_dir() -> PathBuf {
    let repo = repo_root();
    std::env::var_os("CARGO_TARGET_DIR")
        .map(|t| repo.join(t))
        .unwrap_or_else(|| repo.join("target"))
}

/// The package holding the examples.
pub const EXAMPLES_PKG: &str = "kspan-examples";

/// Whether the `cargo` commands of this run build without incremental
/// caches: set by `cargo xtask test`, which builds each target once (the
/// caches of the workspace's 60-odd test and example targets, per
/// architecture, would take gigabytes for nothing).
static ONE_SHOT_BUILDS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes every later [`cargo`] command of this process build once, without
/// incremental caches, unless the caller's `CARGO_INCREMENTAL` says otherwise.
pub fn build_once() {
    ONE_SHOT_BUILDS.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// A `cargo` command, the same cargo that runs us when there is one.
/// `cmd` run through `nice -n <n>`: its program, arguments, environment
/// and directory, at a lower priority.
pub fn niced(cmd: Command, n: u8) -> Command {
    let mut niced = Command::new("nice");
    niced
        .arg("-n")
        .arg(n.to_string())
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => niced.env(k, v),
            None => niced.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        niced.current_dir(dir);
    }
    niced
}

pub fn cargo() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(repo_root());
    if ONE_SHOT_BUILDS.load(std::sync::atomic::Ordering::Relaxed)
        && std::env::var_os("CARGO_INCREMENTAL").is_none()
    {
        // Inherited by the cargo runs of the host tests (README's service).
        cmd.env("CARGO_INCREMENTAL", "0");
    }
    cmd
}

/// Gives a build of a crate outside this workspace (a package's
/// verification, README's service) the workspace's `dev` profile: line
/// tables for the crate itself, no debug information for its dependencies.
/// With cargo's default (full debug information everywhere) such a build
/// takes several times the disk, and its dependencies are not the units the
/// workspace built.
pub fn with_workspace_dev_profile(cmd: &mut Command) -> &mut Command {
    cmd.env("CARGO_PROFILE_DEV_DEBUG", "line-tables-only")
        .arg("--config")
        .arg("profile.dev.package.\"*\".debug=false")
}

/// `(MB used by dir, MB free on its file system)`, for the test summary;
/// `None` where `du` or `df` cannot say.
pub fn disk_use(dir: &Path) -> Option<(u64, u64)> {
    // `du -sm DIR` prints "MB\tDIR"; `df --output=avail -BM DIR` a heading,
    // then "MBM".
    let first_number = |cmd: &mut Command| -> Option<u64> {
        let out = cmd.stderr(Stdio::null()).output().ok()?;
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .find_map(|w| w.trim_end_matches('M').parse().ok())
    };
    let used = first_number(Command::new("du").arg("-sm").arg(dir))?;
    let free = first_number(Command::new("df").args(["--output=avail", "-BM"]).arg(dir))?;
    Some((used, free))
}

/// Renders a command for messages, shell-quoted.
pub fn display(cmd: &Command) -> String {
    let mut parts = vec![sh_quote_os(cmd.get_program())];
    parts.extend(cmd.get_args().map(sh_quote_os));
    parts.join(" ")
}

fn sh_quote_os(s: &OsStr) -> String {
    let s = s.to_string_lossy();
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        s.into_owned()
    } else {
        sh_quote(&s)
    }
}

/// Quotes `s` for a POSIX shell: single quotes, with `'` written as `'\''`.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs `cmd` with inherited stdio, echoing it first; fails on non-zero exit.
pub fn run(cmd: &mut Command) -> Result<()> {
    let shown = display(cmd);
    eprintln!("+ {shown}");
    let status = cmd
        .status()
        .with_context(|| format!("cannot run `{shown}`"))?;
    if !status.success() {
        bail!("`{shown}` failed ({status})");
    }
    Ok(())
}

/// Runs `cmd` and returns its stdout (stderr inherited); fails on non-zero exit.
pub fn output(cmd: &mut Command) -> Result<String> {
    let shown = display(cmd);
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run `{shown}`"))?;
    if !out.status.success() {
        bail!("`{shown}` failed ({})", out.status);
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{shown}` printed non-UTF-8 output"))
}

/// Whether we run with effective uid 0.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|uids| uids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Finds an executable in `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// What `cargo metadata --no-deps` tells about the workspace.
pub struct Metadata {
    /// The cargo target directory (honours `CARGO_TARGET_DIR` and config).
    pub target_dir: PathBuf,
    /// `(name, package id, manifest path)` of each workspace package.
    pub packages: Vec<(String, String, PathBuf)>,
}

impl Metadata {
    /// Runs `cargo metadata`.
    pub fn load() -> Result<Metadata> {
        let json = output(cargo().args(["metadata", "--format-version", "1", "--no-deps"]))?;
        let v: serde_json::Value =
            serde_json::from_str(&json).context("cannot parse `cargo metadata` output")?;
        let target_dir = v["target_directory"]
            .as_str()
            .context("`cargo metadata`: no target_directory")?
            .into();
        let packages = v["packages"]
            .as_array()
            .map(|pkgs| {
                pkgs.iter()
                    .filter_map(|p| {
                        Some((
                            p["name"].as_str()?.to_string(),
                            p["id"].as_str()?.to_string(),
                            PathBuf::from(p["manifest_path"].as_str()?),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Metadata {
            target_dir,
            packages,
        })
    }

    /// The id and directory of the workspace package `name`, if present.
    pub fn package(&self, name: &str) -> Option<(&str, &Path)> {
        self.packages
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, id, manifest)| (id.as_str(), manifest.parent().unwrap_or(manifest)))
    }
}

/// Parses `--name value` / `--name=value` at `args[*i]`, advancing `i`.
///
/// Returns `Ok(None)` when `args[*i]` is not the option `name`.
pub fn opt_value(args: &[String], i: &mut usize, name: &str) -> Result<Option<String>> {
    let arg = &args[*i];
    if let Some(v) = arg.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
        *i += 1;
        return Ok(Some(v.to_string()));
    }
    if arg == name {
        let Some(v) = args.get(*i + 1) else {
            bail!("option {name} needs a value");
        };
        *i += 2;
        return Ok(Some(v.clone()));
    }
    Ok(None)
}

/// The median of `v` (the mean of the middle two for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The smallest and the largest of `v`.
pub fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(*x), hi.max(*x))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_niced_command_keeps_its_program_arguments_environment_and_directory() {
        let mut cmd = Command::new("/bin/cargo");
        cmd.args(["build", "--target", "t"])
            .env("A", "1")
            .env_remove("B")
            .current_dir("/d");
        let wrapped = niced(cmd, 10);
        assert_eq!(wrapped.get_program(), "nice");
        let args: Vec<&OsStr> = wrapped.get_args().collect();
        assert_eq!(args, ["-n", "10", "/bin/cargo", "build", "--target", "t"]);
        let envs: Vec<(&OsStr, Option<&OsStr>)> = wrapped.get_envs().collect();
        assert!(envs.contains(&(OsStr::new("A"), Some(OsStr::new("1")))));
        assert!(envs.contains(&(OsStr::new("B"), None)));
        assert_eq!(wrapped.get_current_dir(), Some(Path::new("/d")));
        // And it runs: `nice` passes the exit status through.
        let status = |program: &str| niced(Command::new(program), 10).status().unwrap();
        assert!(status("true").success());
        assert!(!status("false").success());
    }

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("abc"), "'abc'");
        assert_eq!(sh_quote(""), "''");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(sh_quote("$HOME `x` \"y\"\n"), "'$HOME `x` \"y\"\n'");
        assert_eq!(sh_quote_os(OsStr::new("a b")), "'a b'");
        assert_eq!(sh_quote_os(OsStr::new("--x=1")), "--x=1");
    }

    #[test]
    fn options() {
        let args: Vec<String> = ["--kernel", "debian14", "--timeout=5", "x"]
            .map(String::from)
            .to_vec();
        let mut i = 0;
        assert_eq!(
            opt_value(&args, &mut i, "--kernel").unwrap().as_deref(),
            Some("debian14")
        );
        assert_eq!(i, 2);
        assert_eq!(opt_value(&args, &mut i, "--kernel").unwrap(), None);
        assert_eq!(
            opt_value(&args, &mut i, "--timeout").unwrap().as_deref(),
            Some("5")
        );
        assert_eq!(i, 3);
        let short = vec!["--mem".to_string()];
        assert!(opt_value(&short, &mut 0, "--mem").is_err());
    }
}
