//! `cargo xtask fuzz`: builds the fuzz crate (`fuzz/`, cargo-fuzz's
//! layout) with stable cargo and runs its libFuzzer targets.
//!
//! cargo-fuzz needs a nightly compiler only for its sanitizers; the
//! coverage libFuzzer steers by is LLVM's sanitizer-coverage pass, which
//! stable rustc runs when asked with the flags cargo-fuzz passes (see
//! [`RUSTFLAGS`]). The flags go through `RUSTFLAGS` with an explicit
//! `--target`, as cargo-fuzz does, so that build scripts and proc macros
//! (run by the compiler, not linked with libFuzzer) are built without them.
//!
//! Each target runs for `--seconds` over its corpus in
//! `target/fuzz/corpus/<target>`, seeded from `fuzz/seeds/<target>` (the
//! `btf` target also edits the host's and the VM kernels' BTF, too large
//! to commit, from `target/fuzz/large/btf`); a
//! crash, timeout or out-of-memory input is kept under
//! `target/fuzz/artifacts/<target>/`, named with the command that replays
//! it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::util::{display, opt_value, repo_root, run, sh_quote, target_dir};

/// The flags `cargo fuzz build` gives rustc (cargo-fuzz 0.12/0.13), less
/// its nightly-only sanitizer: coverage of edges with 8-bit counters and
/// a table of their PCs, comparisons traced (for libFuzzer's value
/// profile and its dictionary), the stack depth; `cfg(fuzzing)`; debug
/// assertions and overflow checks, which turn silent wrong arithmetic into
/// a crash.
pub const RUSTFLAGS: &str = "-Cpasses=sancov-module \
    -Cllvm-args=-sanitizer-coverage-level=4 \
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
    -Cllvm-args=-sanitizer-coverage-pc-table \
    -Cllvm-args=-sanitizer-coverage-trace-compares \
    -Cllvm-args=-sanitizer-coverage-stack-depth \
    --cfg fuzzing -Cdebug-assertions -Coverflow-checks";

/// What `cargo xtask fuzz` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuzzArgs {
    /// Seconds of fuzzing per target (`-max_total_time`).
    pub seconds: u64,
    /// The targets, in order (empty: all).
    pub targets: Vec<String>,
    /// Targets run at once.
    pub jobs: usize,
}

/// The seconds a target runs by default: a smoke run.
pub const DEFAULT_SECONDS: u64 = 10;

impl FuzzArgs {
    /// Parses `[--seconds N] [--target NAME]... [--jobs J]`.
    pub fn parse(args: &[String]) -> Result<FuzzArgs> {
        let mut out = FuzzArgs {
            seconds: DEFAULT_SECONDS,
            targets: Vec::new(),
            jobs: 1,
        };
        let mut i = 0;
        while i < args.len() {
            if let Some(v) = opt_value(args, &mut i, "--seconds")? {
                out.seconds = v.parse().ok().filter(|&s| s > 0).with_context(|| {
                    format!("--seconds takes a whole number above 0, not `{v}`")
                })?;
            } else if let Some(v) = opt_value(args, &mut i, "--target")? {
                if !out.targets.contains(&v) {
                    out.targets.push(v);
                }
            } else if let Some(v) = opt_value(args, &mut i, "--jobs")? {
                out.jobs =
                    v.parse().ok().filter(|&j| j > 0).with_context(|| {
                        format!("--jobs takes a whole number above 0, not `{v}`")
                    })?;
            } else {
                bail!(
                    "unknown argument `{}` for `cargo xtask fuzz`: the options are \
                     `--seconds N`, `--target NAME` (repeatable) and `--jobs J`",
                    args[i]
                );
            }
        }
        Ok(out)
    }
}

/// The fuzz crate's directory.
fn fuzz_dir() -> PathBuf {
    repo_root().join("fuzz")
}

/// The targets of the fuzz crate: the `[[bin]]` names of its manifest.
pub fn target_names(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_bin = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if in_bin {
            if let Some(name) = line
                .strip_prefix("name")
                .map(str::trim_start)
                .and_then(|l| l.strip_prefix('='))
            {
                names.push(name.trim().trim_matches('"').to_owned());
                in_bin = false;
            }
        }
    }
    names
}

/// The host's target triple, as rustc names it.
fn host_triple() -> Result<String> {
    let out = crate::util::output(Command::new("rustc").arg("-vV"))?;
    out.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_owned)
        .context("`rustc -vV` names no host")
}

/// Builds every target, instrumented; returns the directory of the
/// programs.
pub fn build() -> Result<PathBuf> {
    let triple = host_triple()?;
    let build_dir = target_dir().join("fuzz/build");
    let mut cmd = crate::util::cargo();
    cmd.current_dir(fuzz_dir())
        .args(["build", "--release", "--bins", "--target"])
        .arg(&triple)
        .arg("--target-dir")
        .arg(&build_dir)
        .env("RUSTFLAGS", RUSTFLAGS)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        // The fuzz crate is its own workspace: not the repository's.
        .env_remove("CARGO_TARGET_DIR");
    run(&mut cmd)?;
    Ok(build_dir.join(triple).join("release"))
}

/// The section `.BTF` of an ELF64 little-endian file (a kernel's
/// `vmlinux`), if it has one.
pub fn elf_btf_section(elf: &[u8]) -> Option<&[u8]> {
    let u16_at = |o: usize| Some(u16::from_le_bytes(elf.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(elf.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(elf.get(o..o + 8)?.try_into().ok()?));
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let shoff = usize::try_from(u64_at(0x28)?).ok()?;
    let shentsize = usize::from(u16_at(0x3a)?);
    let shnum = usize::from(u16_at(0x3c)?);
    let shstrndx = usize::from(u16_at(0x3e)?);
    let section = |i: usize| -> Option<(u32, usize, usize)> {
        let at = shoff.checked_add(i.checked_mul(shentsize)?)?;
        let offset = usize::try_from(u64_at(at + 0x18)?).ok()?;
        let size = usize::try_from(u64_at(at + 0x20)?).ok()?;
        Some((u32_at(at)?, offset, size))
    };
    let (_, names_at, names_len) = section(shstrndx)?;
    let names = elf.get(names_at..names_at.checked_add(names_len)?)?;
    (0..shnum).find_map(|i| {
        let (name, offset, size) = section(i)?;
        let name = names.get(usize::try_from(name).ok()?..)?;
        if !name.starts_with(b".BTF\0") {
            return None;
        }
        elf.get(offset..offset.checked_add(size)?)
    })
}

/// Large real inputs, for the `btf` target to edit (not committed, nor in
/// its corpus, which would keep a copy of one per mutation found): the
/// host's BTF and each VM kernel's `.BTF`, written into `dir`.
fn large_btf_inputs(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut inputs: Vec<(String, Vec<u8>)> = Vec::new();
    if let Ok(data) = std::fs::read("/sys/kernel/btf/vmlinux") {
        inputs.push(("host-vmlinux".to_owned(), data));
    }
    let kernels = target_dir().join("kspan-vm/kernels");
    for kernel in std::fs::read_dir(&kernels).into_iter().flatten().flatten() {
        for file in std::fs::read_dir(kernel.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = file.file_name().to_string_lossy().into_owned();
            if !name.starts_with("vmlinux") {
                continue;
            }
            if let Some(btf) = std::fs::read(file.path())
                .ok()
                .and_then(|elf| elf_btf_section(&elf).map(<[u8]>::to_vec))
            {
                let kernel = kernel.file_name().to_string_lossy().into_owned();
                inputs.push((format!("{kernel}-{name}"), btf));
            }
        }
    }
    for (name, data) in inputs {
        let path = dir.join(name);
        if !path.exists() {
            std::fs::write(&path, data).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(())
}

/// The corpus of `target`, with the committed seeds copied in.
fn corpus(target: &str) -> Result<PathBuf> {
    let corpus = target_dir().join("fuzz/corpus").join(target);
    std::fs::create_dir_all(&corpus).with_context(|| format!("creating {}", corpus.display()))?;
    let seeds = fuzz_dir().join("seeds").join(target);
    for seed in std::fs::read_dir(&seeds).into_iter().flatten().flatten() {
        let to = corpus.join(format!("seed-{}", seed.file_name().to_string_lossy()));
        if !to.exists() {
            std::fs::copy(seed.path(), &to)
                .with_context(|| format!("copying {}", seed.path().display()))?;
        }
    }
    Ok(corpus)
}

/// What one target's run came to.
#[derive(Debug, Default)]
struct Outcome {
    executions: u64,
    cpu_seconds: f64,
    wall_seconds: f64,
    corpus_files: usize,
    corpus_bytes: u64,
    /// Why it failed, with the reproducer and the command that replays it.
    failure: Option<String>,
}

/// A child's exit status and CPU time (user + system), through `wait4`.
fn wait_with_cpu(child: &std::process::Child) -> Result<(i32, f64)> {
    let pid = libc::pid_t::try_from(child.id()).context("child pid")?;
    let mut status = 0;
    // SAFETY: rusage is plain data; zeroed is a valid value to be written.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is our own unreaped child (std never waits for it
        // here), and both out-pointers are to live locals.
        let got = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if got == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            bail!("waiting for pid {pid}: {e}");
        }
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    Ok((code, seconds(usage.ru_utime) + seconds(usage.ru_stime)))
}

/// libFuzzer's `stat::number_of_executed_units` in its log.
pub fn executions(log: &str) -> Option<u64> {
    log.lines()
        .rev()
        .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Runs `target` for `seconds`.
fn run_target(bin_dir: &Path, target: &str, seconds: u64) -> Result<Outcome> {
    let corpus = corpus(target)?;
    let artifacts = target_dir().join("fuzz/artifacts").join(target);
    std::fs::create_dir_all(&artifacts)?;
    let before: Vec<PathBuf> = list(&artifacts);
    let logs = target_dir().join("fuzz/logs");
    std::fs::create_dir_all(&logs)?;
    let log_path = logs.join(format!("{target}.log"));
    let log = std::fs::File::create(&log_path)?;
    let program = bin_dir.join(target);
    let mut cmd = Command::new(&program);
    if target == "btf" {
        let large = target_dir().join("fuzz/large/btf");
        large_btf_inputs(&large)?;
        cmd.env("KSPAN_FUZZ_BTF_DIR", &large);
    }
    cmd.arg(format!("-max_total_time={seconds}"))
        // A parse of a whole kernel's BTF takes well under a second.
        .arg("-timeout=20")
        .arg("-rss_limit_mb=2048")
        .arg("-print_final_stats=1")
        .arg(format!("-artifact_prefix={}/", artifacts.display()));
    cmd.arg(&corpus)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    let started = Instant::now();
    let child = cmd
        .spawn()
        .with_context(|| format!("running {}", program.display()))?;
    let (code, cpu_seconds) = wait_with_cpu(&child)?;
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let files = list(&corpus);
    let mut outcome = Outcome {
        executions: executions(&text).unwrap_or(0),
        cpu_seconds,
        wall_seconds: started.elapsed().as_secs_f64(),
        corpus_files: files.len(),
        corpus_bytes: files
            .iter()
            .filter_map(|p| p.metadata().ok())
            .map(|m| m.len())
            .sum(),
        failure: None,
    };
    if code != 0 {
        let found: Vec<PathBuf> = list(&artifacts)
            .into_iter()
            .filter(|p| !before.contains(p))
            .collect();
        let tail: Vec<&str> = text.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        let mut why = format!(
            "`{}` exited with {code} (log: {})\n{}",
            display(&cmd),
            log_path.display(),
            tail.join("\n")
        );
        // The target's environment (`btf`'s blobs), then the program
        // with the input: one run.
        let env: String = cmd
            .get_envs()
            .filter_map(|(k, v)| Some(format!("{}={} ", k.to_str()?, sh_quote(v?.to_str()?))))
            .collect();
        for input in &found {
            why.push_str(&format!(
                "\nreproducer: {}\nreplay: {env}{} {}",
                input.display(),
                sh_quote(&program.display().to_string()),
                sh_quote(&input.display().to_string())
            ));
        }
        if found.is_empty() {
            why.push_str("\nno reproducer was written");
        }
        outcome.failure = Some(why);
    }
    Ok(outcome)
}

/// The files of `dir`, sorted.
fn list(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// `cargo xtask fuzz`: builds, runs, prints a line per target; `Err` names
/// every target that failed, with its reproducer.
pub fn fuzz(args: &FuzzArgs) -> Result<String> {
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml"))
        .context("reading fuzz/Cargo.toml")?;
    let all = target_names(&manifest);
    for t in &args.targets {
        if !all.contains(t) {
            bail!("no fuzz target `{t}`: the targets are {}", all.join(", "));
        }
    }
    let targets = if args.targets.is_empty() {
        all
    } else {
        args.targets.clone()
    };
    let bin_dir = build()?;
    let queue = Mutex::new(targets.iter());
    let results: Mutex<BTreeMap<usize, (String, Result<Outcome>)>> = Mutex::new(BTreeMap::new());
    std::thread::scope(|s| {
        for _ in 0..args.jobs.min(targets.len()) {
            s.spawn(|| loop {
                let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                let Some(target) = next else { break };
                let index = targets.iter().position(|t| t == target).unwrap_or(0);
                let outcome = run_target(&bin_dir, target, args.seconds);
                if let Ok(o) = &outcome {
                    println!(
                        "fuzz {target:<15} {:>10} runs  {:>6.1} s CPU  {:>5} inputs ({} KiB){}",
                        o.executions,
                        o.cpu_seconds,
                        o.corpus_files,
                        o.corpus_bytes / 1024,
                        if o.failure.is_some() { "  FAILED" } else { "" }
                    );
                }
                results
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(index, (target.clone(), outcome));
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut failures = Vec::new();
    let mut summary = Vec::new();
    let (mut cpu, mut wall) = (0.0, 0.0f64);
    for (target, outcome) in results.into_values() {
        match outcome {
            Ok(o) => {
                cpu += o.cpu_seconds;
                wall = wall.max(o.wall_seconds);
                summary.push(format!("{target} {:.0} s", o.cpu_seconds));
                if let Some(why) = o.failure {
                    failures.push(format!("{target}: {why}"));
                }
            }
            Err(e) => failures.push(format!("{target}: {e:#}")),
        }
    }
    if !failures.is_empty() {
        bail!(
            "{} fuzz target(s) failed:\n{}",
            failures.len(),
            failures.join("\n\n")
        );
    }
    Ok(format!(
        "{} targets, {cpu:.0} s CPU ({})",
        summary.len(),
        summary.join(", ")
    ))
}

/// The `fuzz` command.
pub fn command(args: &[String]) -> Result<u8> {
    let args = FuzzArgs::parse(args)?;
    let line = fuzz(&args)?;
    println!("fuzz: {line}");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn the_defaults_are_a_short_run_of_every_target_one_at_a_time() {
        assert_eq!(
            FuzzArgs::parse(&[]).unwrap(),
            FuzzArgs {
                seconds: DEFAULT_SECONDS,
                targets: vec![],
                jobs: 1
            }
        );
    }

    #[test]
    fn options_take_their_values_either_way_and_targets_repeat() {
        let a = FuzzArgs::parse(&args(&[
            "--seconds",
            "600",
            "--target=btf",
            "--target",
            "records",
            "--target",
            "btf",
            "--jobs=2",
        ]))
        .unwrap();
        assert_eq!(
            a,
            FuzzArgs {
                seconds: 600,
                targets: vec!["btf".into(), "records".into()],
                jobs: 2
            }
        );
    }

    #[test]
    fn bad_arguments_are_named() {
        for (line, says) in [
            (
                &["--seconds", "0"][..],
                "--seconds takes a whole number above 0, not `0`",
            ),
            (&["--seconds", "ten"][..], "not `ten`"),
            (&["--jobs", "-1"][..], "--jobs takes a whole number above 0"),
            (&["--target"][..], "option --target needs a value"),
            (&["--verbose"][..], "unknown argument `--verbose`"),
        ] {
            let e = FuzzArgs::parse(&args(line)).unwrap_err().to_string();
            assert!(e.contains(says), "{line:?}: {e}");
        }
    }

    #[test]
    fn the_targets_are_the_fuzz_crate_s_programs() {
        let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
        let names = target_names(&manifest);
        assert!(names.len() >= 10, "{names:?}");
        for name in &names {
            let source = fuzz_dir().join(format!("fuzz_targets/{name}.rs"));
            assert!(source.is_file(), "{}", source.display());
        }
        assert!(
            !names.contains(&"kspan-fuzz".to_owned()),
            "the package is no target"
        );
    }

    #[test]
    fn libfuzzer_s_final_stats_give_the_executions() {
        let log = "#1024 pulse cov: 10\nDone 518024 runs in 6 second(s)\n\
                   stat::number_of_executed_units: 518024\nstat::peak_rss_mb: 30\n";
        assert_eq!(executions(log), Some(518024));
        assert_eq!(executions("crashed"), None);
    }

    #[test]
    fn a_kernel_s_btf_is_found_in_its_elf_sections() {
        // A minimal ELF64: header, then `.shstrtab` and `.BTF` contents,
        // then three section headers (null, .shstrtab, .BTF).
        let names = b"\0.shstrtab\0.BTF\0";
        let btf = b"\x9f\xeb\x01\0btf";
        let mut elf = vec![0u8; 64];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        let names_at = elf.len();
        elf.extend_from_slice(names);
        let btf_at = elf.len();
        elf.extend_from_slice(btf);
        let shoff = elf.len();
        elf[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        elf[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        elf[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        elf[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
        for (name, at, len) in [
            (0u32, 0, 0),
            (1, names_at, names.len()),
            (11, btf_at, btf.len()),
        ] {
            let mut sh = [0u8; 64];
            sh[..4].copy_from_slice(&name.to_le_bytes());
            sh[0x18..0x20].copy_from_slice(&(at as u64).to_le_bytes());
            sh[0x20..0x28].copy_from_slice(&(len as u64).to_le_bytes());
            elf.extend_from_slice(&sh);
        }
        assert_eq!(elf_btf_section(&elf), Some(&btf[..]));
        assert_eq!(elf_btf_section(&elf[..100]), None);
        assert_eq!(elf_btf_section(b"not an elf"), None);
    }
}
