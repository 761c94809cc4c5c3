//! `cargo xtask test` and `cargo xtask demo`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::arch::GuestArch;
use crate::kernel::KernelSpec;
use crate::util::{cargo, opt_value, repo_root, run, sh_quote, Metadata, EXAMPLES_PKG};
use crate::vm::{self, VmOptions};
use crate::{consumer, hot, others};

use crate::testbins::TESTS_PKG;

/// The kernels every VM test runs on when `test` is given none: Debian 11's
/// 5.10 (the oldest kspan supports: no BPF cookies, `bpf_loop`, task
/// storage or `bpf_get_func_ip`), Debian 12's 6.1, Debian 13's 6.12 and
/// Debian's newest (`debian14`, sid's 7.x: the one with fsession,
/// fsession.multi, and a preemptible kernel).
const VM_MATRIX: &[&str] = &["debian11", "debian12", "debian13", "debian14"];

/// The arm64 kernels the VM tests run on when `--arch arm64` is asked for
/// and no kernel is named: sid's 7.x (fsession, kprobe.multi) and Debian
/// 13's 6.12 (no FPROBE: kprobes only), Debian's arm64 kernels of the two
/// mechanisms' ladders.
const ARM64_MATRIX: &[&str] = &["debian14", "debian13"];

/// The arm64 kernels of a `test` that names neither an architecture nor a
/// kernel (CI's run): sid's only. Emulated, an arm64 kernel's run takes six
/// to eight minutes on two cores; both would take a fresh clone's `.ci/run`
/// past 45 minutes (47 measured on 2026-12-04).
const ARM64_DEFAULT_MATRIX: &[&str] = &["debian14"];

/// One line of the final summary.
struct Stage {
    name: String,
    result: std::result::Result<String, String>,
    took: Duration,
    /// `(MB in target, MB free)` after the stage.
    disk: Option<(u64, u64)>,
}

fn print_summary(stages: &[Stage]) {
    eprintln!("\n==== xtask test summary ====");
    for s in stages {
        let (word, detail) = match &s.result {
            Ok(d) => ("ok", d),
            Err(d) => ("FAILED", d),
        };
        let detail = if detail.is_empty() {
            String::new()
        } else {
            format!(": {detail}")
        };
        let disk = match s.disk {
            Some((used, free)) => format!(" [target {used} MB, {free} MB free]"),
            None => String::new(),
        };
        eprintln!(
            "  {:<22} {word} ({:.1}s){disk}{detail}",
            s.name,
            s.took.as_secs_f64()
        );
    }
}

impl Stage {
    fn failed(name: &str, why: &str) -> Self {
        Stage {
            name: name.to_string(),
            result: Err(why.to_string()),
            took: Duration::ZERO,
            disk: None,
        }
    }
}

/// Seconds each fuzz target runs in `cargo xtask test`.
const CI_FUZZ_SECONDS: u64 = 10;

/// Runs a stage, recording its outcome; returns whether it succeeded.
fn stage(stages: &mut Vec<Stage>, name: &str, f: impl FnOnce() -> Result<String>) -> bool {
    eprintln!("\n==== {name} ====");
    let t = Instant::now();
    let result = f().map_err(|e| format!("{e:#}"));
    let ok = result.is_ok();
    if let Err(e) = &result {
        eprintln!("xtask: {name} failed: {e}");
    }
    let disk = crate::util::disk_use(&crate::util::target_dir());
    if let Some((used, free)) = disk {
        eprintln!("xtask: after {name}: target {used} MB, {free} MB free");
    }
    stages.push(Stage {
        name: name.to_string(),
        result,
        took: t.elapsed(),
        disk,
    });
    ok
}

/// `cargo xtask test [--host-only|--vm-only] [--arch A]... [--kernel K]... [--kernels K,K]
/// [--timeout S]`: the x86-64 VM tests and the arm64 ones (both unless
/// `--arch` names one), the arm64 guest booting
/// [`ARM64_MATRIX`]'s kernels when `--arch arm64` is given,
/// [`ARM64_DEFAULT_MATRIX`]'s otherwise.
pub fn test(args: &[String]) -> Result<u8> {
    let (mut host, mut in_vm) = (true, true);
    let mut kernels: Vec<KernelSpec> = Vec::new();
    let mut arches: Vec<GuestArch> = Vec::new();
    let mut opts = VmOptions::default();
    let mut i = 0;
    while i < args.len() {
        if let Some(v) = opt_value(args, &mut i, "--kernel")? {
            kernels.push(KernelSpec::parse(&v)?);
        } else if let Some(v) = opt_value(args, &mut i, "--kernels")? {
            for k in v.split(',').filter(|k| !k.is_empty()) {
                kernels.push(KernelSpec::parse(k)?);
            }
        } else if let Some(v) = opt_value(args, &mut i, "--timeout")? {
            opts.timeout = vm::parse_secs(&v)?;
        } else if let Some(v) = opt_value(args, &mut i, "--arch")? {
            for a in v.split(',').filter(|a| !a.is_empty()) {
                arches.push(GuestArch::parse(a)?);
            }
        } else {
            match args[i].as_str() {
                "--host-only" => in_vm = false,
                "--vm-only" => host = false,
                a => bail!("unknown test option {a}"),
            }
            i += 1;
        }
    }
    if !host && !in_vm {
        bail!("--host-only and --vm-only exclude each other");
    }
    let arm64_named = arches.contains(&GuestArch::Arm64);
    if arches.is_empty() {
        arches = vec![GuestArch::X86_64, GuestArch::Arm64];
    }
    let matrix = |arch: GuestArch| -> Result<Vec<KernelSpec>> {
        if !kernels.is_empty() {
            return Ok(kernels.clone());
        }
        let names = match arch {
            GuestArch::X86_64 => VM_MATRIX,
            GuestArch::Arm64 if arm64_named => ARM64_MATRIX,
            GuestArch::Arm64 => {
                for k in ARM64_MATRIX
                    .iter()
                    .filter(|k| !ARM64_DEFAULT_MATRIX.contains(k))
                {
                    eprintln!(
                        "xtask: arm64: {k} left out of the default run (CI's time); \
                         `cargo xtask test --vm-only --arch arm64` runs it"
                    );
                }
                ARM64_DEFAULT_MATRIX
            }
        };
        names.iter().map(|k| KernelSpec::parse(k)).collect()
    };

    // A guest runs every test binary in one boot: the emulated arm64
    // guest took 591 s on 2026-12-06 before the causes' cases, and a
    // loaded host stretches it past `vm`'s 900 s default, which is meant
    // for one command. The timeout is a guard against a hung guest, not
    // the time it should take.
    if !args.iter().any(|a| a == "--timeout") {
        opts.timeout = Duration::from_secs(2400);
    }
    crate::util::build_once();
    let mut stages = Vec::new();
    let mut ok = stage(&mut stages, "deps", || {
        crate::deps::ensure().map(|()| String::new())
    });
    if ok && host {
        // Formatting and lints fail the run like a failing test does.
        ok &= stage(&mut stages, "lint", || {
            run(cargo().args(["fmt", "--all", "--", "--check"]))?;
            run(cargo().args([
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]))?;
            // The fuzz entries exist only with the feature.
            run(cargo().args([
                "clippy",
                "-p",
                "kspan",
                "-p",
                "kspan-cli",
                "--all-targets",
                "--features",
                "kspan/fuzzing,kspan-cli/fuzzing",
                "--",
                "-D",
                "warnings",
            ]))?;
            // The library's documentation, broken links included.
            run(cargo()
                .args([
                    "doc",
                    "--no-deps",
                    // As docs.rs builds it (the `tracing` layers included).
                    "--all-features",
                    "-p",
                    "kspan",
                    "-p",
                    "kspan-dsl",
                    "-p",
                    "kspan-build",
                ])
                .env("RUSTDOCFLAGS", "-D warnings"))?;
            crate::publish::check_msrv()
        });
        ok &= stage(&mut stages, "package", crate::publish::package);
        ok &= stage(&mut stages, "bpf objects", || {
            crate::bpf::check().map(|d| d.join("; "))
        });
        let built = stage(&mut stages, "host build", || {
            // What `cargo build --all-targets` builds (benches included),
            // as the host tests' `cargo test` builds it: `cargo build`
            // makes the workspace's proc-macro (kspan-macros) with its own
            // debug info, where `cargo test`, which takes it as a
            // dependency only, makes it without, and then rebuilt kspan,
            // the tests, the examples and the CLI (54 s, 2026-12-06).
            run(cargo().args(["test", "--workspace", "--no-run"]))?;
            run(cargo().args(["build", "--workspace", "--benches"]))?;
            // The examples as programs: host tests run some (an example
            // with unit tests, `test = true`, is built by `cargo test` as
            // its test harness only); the VM's build finds them built.
            build_examples()?;
            Ok(String::new())
        });
        ok &= built;
        if built {
            // Ignored tests (the VM tests) are not run on the host.
            ok &= stage(&mut stages, "host tests", || {
                run(cargo().args(["test", "--workspace"]))?;
                Ok(String::new())
            });
            // Every fuzz target briefly, while the host has nothing else
            // to do: before the guests, whose timing the fuzzers' two
            // busy cores would disturb (about a minute and a half to
            // build, 50 s to run).
            ok &= stage(&mut stages, "fuzz", || {
                // The fuzz entries' own tests (the seeds are whole records,
                // each target's finds), built only with the feature.
                run(cargo().args([
                    "test",
                    "-p",
                    "kspan",
                    "--features",
                    "fuzzing",
                    "--lib",
                    "__fuzz",
                ]))?;
                crate::fuzz::fuzz(&crate::fuzz::FuzzArgs {
                    seconds: CI_FUZZ_SECONDS,
                    targets: Vec::new(),
                    jobs: 2,
                })
            });
        }
    }
    let build_ok = stages
        .iter()
        .all(|s| s.name == "host tests" || s.name == "lint" || s.result.is_ok());
    if in_vm && build_ok {
        let x86 = if arches.contains(&GuestArch::X86_64) {
            matrix(GuestArch::X86_64)?
        } else {
            Vec::new()
        };
        let arm64 = if arches.contains(&GuestArch::Arm64) {
            matrix(GuestArch::Arm64)?
        } else {
            Vec::new()
        };
        let mut x86_script = None;
        if !x86.is_empty() {
            let mut binaries = Vec::new();
            let built = stage(&mut stages, "vm build", || {
                binaries = vm_test_binaries(host)?;
                build_examples()?;
                Ok(format!("{} test binaries", binaries.len()))
            });
            ok &= built;
            if built {
                x86_script = Some(GuestScript::new(&binaries));
            }
        }
        let x86 = if x86_script.is_some() {
            x86
        } else {
            Vec::new()
        };
        let (lanes, arm64_script) =
            x86_guests_beside_the_arm64_build(&opts, &x86, x86_script.as_ref(), !arm64.is_empty());
        ok &= lanes.iter().all(|s| s.result.is_ok());
        stages.extend(lanes);
        if let Some(script) = arm64_script {
            for k in arm64 {
                let opts = VmOptions {
                    kernel: k.clone(),
                    arch: GuestArch::Arm64,
                    otlp_forward: false,
                    ..opts.clone()
                };
                let name = format!("vm tests arm64 {}", k.name());
                ok &= vm_tests(&mut stages, &name, &opts, &script);
            }
        }
    }
    print_summary(&stages);
    Ok(if ok { 0 } else { 1 })
}

/// The guest script of one build's test binaries.
struct GuestScript {
    text: String,
    binaries: usize,
}

impl GuestScript {
    fn new(binaries: &[(PathBuf, PathBuf)]) -> Self {
        GuestScript {
            text: guest_test_script(binaries),
            binaries: binaries.len(),
        }
    }
}

/// The x86-64 guests, two at a time, the arm64 build beside the first:
/// an x86-64 guest runs on one host thread (see `vm::run_vm`), and alone
/// it leaves the second of CI's two cores idle for its whole run. Both
/// lanes take the next kernel of `kernels` whenever they are free: lane
/// one from the start; lane two builds for arm64 first, at a lower
/// priority (the guest beside it keeps its core). So the four guests of
/// CI's run and the build share the two lanes as their times fall, not
/// by their places (with the times of CI's last run, about 300 s for the
/// build and 310 to 350 s a guest, and debian11's 236 s alone on
/// 2026-12-07: lane one debian11, debian12, debian14, lane two the build
/// then debian13; about 890 s for both lanes, against 653 s for three
/// guests). Each guest's console is printed
/// whole when it ends. The arm64 guests run after both lanes, alone: a
/// thread per guest CPU, their timing wants both cores. Returns the
/// lanes' stages, in the order a sequential run has them, and the arm64
/// script when it was asked for and built.
fn x86_guests_beside_the_arm64_build(
    opts: &VmOptions,
    kernels: &[KernelSpec],
    script: Option<&GuestScript>,
    build_arm64: bool,
) -> (Vec<Stage>, Option<GuestScript>) {
    let beside = kernels.len() + usize::from(build_arm64) > 1;
    let guest = |k: &KernelSpec| -> Vec<Stage> {
        let mut stages = Vec::new();
        if let Some(script) = script {
            let opts = VmOptions {
                kernel: k.clone(),
                hold_console: beside,
                ..opts.clone()
            };
            vm_tests(
                &mut stages,
                &format!("vm tests {}", k.name()),
                &opts,
                script,
            );
        }
        stages
    };
    let build = || {
        let mut stages = Vec::new();
        let mut arm64 = None;
        if build_arm64 {
            stage(&mut stages, "arm64 build", || {
                let toolchain = crate::cross::prepare()?.in_background(beside);
                let binaries = crate::cross::build_for_guest(&toolchain)?;
                let n = binaries.len();
                arm64 = Some(GuestScript::new(&binaries));
                Ok(format!("{n} test binaries"))
            });
        }
        (stages, arm64)
    };
    let (first, lane_two) = two_lanes(kernels, build, guest);
    let (built, second) = lane_two.unwrap_or_else(|_| {
        (
            (
                vec![Stage::failed("arm64 build", "its lane panicked")],
                None,
            ),
            Vec::new(),
        )
    });
    let (built, arm64) = built;
    let mut stages: Vec<Stage> = first.into_iter().chain(second).flatten().collect();
    // Kernels in `kernels`' order, then the arm64 build.
    stages.sort_by_key(|s| {
        kernels
            .iter()
            .position(|k| s.name == format!("vm tests {}", k.name()))
            .unwrap_or(kernels.len())
    });
    stages.extend(built);
    (stages, arm64)
}

/// Runs `run` on every item of `items`, in two lanes (threads) that each
/// take the next item whenever they are free: lane one from the start,
/// lane two after `lane_two_first`. Returns lane one's results and lane
/// two's (what `lane_two_first` gave, and its results), or lane two's
/// panic.
fn two_lanes<K: Sync, R: Send, P: Send>(
    items: &[K],
    lane_two_first: impl FnOnce() -> P + Send,
    run: impl Fn(&K) -> R + Sync,
) -> (Vec<R>, std::thread::Result<(P, Vec<R>)>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let lane = || -> Vec<R> {
        let mut results = Vec::new();
        while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
            results.push(run(item));
        }
        results
    };
    std::thread::scope(|s| {
        let two = s.spawn(|| {
            let first = lane_two_first();
            (first, lane())
        });
        let one = lane();
        (one, two.join())
    })
}

/// One guest run of the test script, as a stage.
fn vm_tests(stages: &mut Vec<Stage>, name: &str, opts: &VmOptions, script: &GuestScript) -> bool {
    stage(stages, name, || {
        let cmd = ["sh".to_string(), "-c".to_string(), script.text.clone()];
        match vm::run_vm_verdicts(opts, &cmd, &repo_root())? {
            (0, _) => Ok(format!("{} test binaries passed", script.binaries)),
            (status, verdicts) if verdicts.is_empty() => {
                bail!("guest test script exited with status {status}")
            }
            (_, verdicts) => bail!("{}", verdicts.join("; ")),
        }
    })
}

/// Builds the `kspan-tests` test targets; returns `(executable, package dir)`.
/// After the host tests, as they built them (`--workspace`): `-p
/// kspan-tests` alone unifies fewer features (serde_json, bytes,
/// tracing-subscriber, ...), and rebuilt some 25 crates, kspan and every
/// test binary (52 s of CI's 45 minutes, 2026-12-06). Without them
/// (`--vm-only`), `kspan-tests` alone, the less to build.
fn vm_test_binaries(after_host_tests: bool) -> Result<Vec<(PathBuf, PathBuf)>> {
    let select: &[&str] = if after_host_tests {
        &["--workspace"]
    } else {
        &["-p", TESTS_PKG]
    };
    crate::testbins::test_binaries(cargo(), select, &[])
}

fn build_examples() -> Result<()> {
    let meta = Metadata::load()?;
    if meta.package(EXAMPLES_PKG).is_none() {
        eprintln!(
            "xtask: note: no {EXAMPLES_PKG} package in the workspace yet; not building examples"
        );
        return Ok(());
    }
    run(cargo().args(["build", "-p", EXAMPLES_PKG, "--examples"]))
}

/// How long one test binary may run in a guest before it is taken as hung:
/// the slowest, `vm_sched`, took 212 s on sid's 7.2 and about 450 s in the
/// emulated arm64 guest beside a build (2026-12-07). A hung binary is
/// killed with its threads' kernel stacks printed and the run goes on, so
/// a hang costs this long, names itself and its test, and leaves the
/// other binaries' results (before, a hang ran into the guest's 2400 s).
const BINARY_LIMIT_SECS: u32 = 900;

/// A guest script running each test binary's ignored tests, one at a time.
fn guest_test_script(binaries: &[(PathBuf, PathBuf)]) -> String {
    guest_script_with_limit(binaries, BINARY_LIMIT_SECS)
}

fn guest_script_with_limit(binaries: &[(PathBuf, PathBuf)], limit_secs: u32) -> String {
    // Each binary's seconds, from the guest's uptime, and the slowest at
    // the end: where a guest's time goes, in CI's log. Each binary runs in
    // a session of its own (`setsid`: not a group leader, so no fork), so
    // a hung one is killed with the programs it started.
    let mut s = format!(
        "fail=0\n\
         took=''\n\
         limit={limit_secs}\n\
         threads() {{\n  \
           for t in /proc/$1/task/*; do\n    \
             echo \"==> kspan-vm:   $1 thread $(cat $t/comm 2>/dev/null), $(sed -n 's/^State:[[:space:]]*//p' $t/status 2>/dev/null), in $(cat $t/wchan 2>/dev/null)\"\n    \
             sed 's/^/==> kspan-vm:     /' $t/stack 2>/dev/null\n  \
           done\n\
         }}\n\
         watch() {{\n  \
           pid=$1; i=0\n  \
           while [ $i -lt $limit ]; do sleep 1; kill -0 $pid 2>/dev/null || return 0; i=$((i+1)); done\n  \
           echo \"==> kspan-vm: HUNG: $2 still running after $limit s: killed with what it started; the kernel's stacks of its session:\"\n  \
           for st in /proc/[0-9]*/stat; do\n    \
             read -r l < $st 2>/dev/null || continue\n    \
             set -- ${{l##*\") \"}}\n    \
             p=${{st#/proc/}}\n    \
             [ \"$4\" = \"$pid\" ] && threads ${{p%/stat}}\n  \
           done\n  \
           kill -9 -$pid 2>/dev/null || kill -9 $pid\n\
         }}\n\
         run() {{\n  \
           d=$1; shift\n  \
           read t0 _ < /proc/uptime\n  \
           echo \"==> kspan-vm: running ${{1##*/}} --ignored\"\n  \
           ( cd \"$d\" && CARGO_MANIFEST_DIR=\"$d\" exec setsid \"$@\" --ignored --test-threads=1 ) &\n  \
           pid=$!\n  \
           watch $pid ${{1##*/}} &\n  \
           w=$!\n  \
           wait $pid || {{ echo \"==> kspan-vm: FAILED: ${{1##*/}}\"; fail=$((fail+1)); }}\n  \
           kill $w 2>/dev/null; wait $w 2>/dev/null\n  \
           read t1 _ < /proc/uptime\n  \
           took=\"$took$((${{t1%%.*}} - ${{t0%%.*}})) s ${{1##*/}}\\n\"\n\
         }}\n",
    );
    for (exe, dir) in binaries {
        s += &format!(
            "run {} {}\n",
            sh_quote(&dir.to_string_lossy()),
            sh_quote(&exe.to_string_lossy())
        );
    }
    s += "echo \"==> kspan-vm: the slowest test binaries:\"\n\
          printf \"$took\" | sort -rn | head -n 12 | sed 's/^/==> kspan-vm:   /'\n";
    s += &format!(
        "echo \"==> kspan-vm: {} test binaries, $fail failed\"\n[ \"$fail\" -eq 0 ]\n",
        binaries.len()
    );
    s
}

/// `cargo xtask demo [--kernel K] [--timeout S]`.
pub fn demo(args: &[String]) -> Result<u8> {
    let mut opts = VmOptions {
        // The receiver runs inside the guest.
        otlp_forward: false,
        ..VmOptions::default()
    };
    let mut i = 0;
    while i < args.len() {
        if let Some(v) = opt_value(args, &mut i, "--kernel")? {
            opts.kernel = KernelSpec::parse(&v)?;
        } else if let Some(v) = opt_value(args, &mut i, "--timeout")? {
            opts.timeout = vm::parse_secs(&v)?;
        } else {
            bail!("unknown demo option {}", args[i]);
        }
    }
    crate::deps::ensure()?;
    run(cargo().args(["build", "-p", EXAMPLES_PKG, "--examples"]))?;
    run(cargo().args(["build", "-p", TESTS_PKG, "--bins"]))?;
    let target = Metadata::load()?.target_dir;
    let debug = target.join("debug");
    let receive = debug.join("kspan-receive");
    let quickstart = debug.join("examples/quickstart");
    for p in [&receive, &quickstart] {
        if !p.is_file() {
            bail!("{} was not built", p.display());
        }
    }
    let cmd = [path_arg(&receive), "--".to_string(), path_arg(&quickstart)];
    vm::run_vm(&opts, &cmd, &repo_root())
}

/// `cargo xtask bench [--kernel K] [--rounds N] [--only others|attach|percall|hot|consumer|filters]
/// [--host]`: kspan against bpftrace, side by side in one guest run (the
/// bpftrace package of the kernel's Debian release where the host's is not:
/// sid's for debian14, bullseye's for debian11, see [`crate::bpftrace`]):
/// attach and detach of every `vfs_*` function (whole process), the cost per
/// traced call, and the cost to an untraced process ([`others`]); prints each
/// figure (median of the rounds) and the ratios. `--only others` runs the
/// last part alone, `--only attach` the first two, `--only percall` the
/// per-call part alone (kspan's spans, its histogram-only mode and
/// bpftrace's `hist()` latency script). On kernels with session programs
/// (debian14, or a kernel given by path) the attach and per-call parts also
/// run kspan with sessions off (the pairs) and the ~1,000-function set with
/// trampolines. `--icount` (with `--only percall`) runs the guest on an
/// instruction-counting clock and also reads the BPF programs' own run
/// time: instruction counts, the same from run to run.
/// `--host` runs it natively (syscall tracepoints only).
/// `--host --only hot`, `consumer` and `filters` run issue 13's hot
/// function benchmarks natively: a traced service's throughput ([`hot`]),
/// the consumer's drain rate against a bare one ([`consumer`]) and the cost
/// of a refused call ([`crate::filters`]).
pub fn bench(args: &[String]) -> Result<u8> {
    let mut opts = VmOptions {
        otlp_forward: false,
        ..VmOptions::default()
    };
    let mut rounds = 3u32;
    let mut only: Option<String> = None;
    let mut host = false;
    let mut prog_stats = false;
    let mut i = 0;
    while i < args.len() {
        if let Some(v) = opt_value(args, &mut i, "--kernel")? {
            opts.kernel = KernelSpec::parse(&v)?;
        } else if let Some(v) = opt_value(args, &mut i, "--arch")? {
            opts.arch = GuestArch::parse(&v)?;
        } else if let Some(v) = opt_value(args, &mut i, "--rounds")? {
            rounds = v
                .parse()
                .ok()
                .filter(|r| *r > 0)
                .ok_or_else(|| anyhow::anyhow!("--rounds: `{v}` is not a positive number"))?;
        } else if let Some(v) = opt_value(args, &mut i, "--only")? {
            if !["others", "attach", "percall", "hot", "consumer", "filters"].contains(&v.as_str())
                && crate::sched::Part::parse(&v).is_none()
            {
                bail!(
                    "--only: `{v}`: the parts that run alone are `others`, `attach` (with the \
                     per-call part), `percall`, `hot`, `consumer`, `filters`, and `sched` \
                     (`sched-others`, `sched-own`, `sched-service`, `sched-causes`)"
                );
            }
            only = Some(v);
        } else if args[i] == "--host" {
            host = true;
            i += 1;
        } else if args[i] == "--multi-threaded-tcg" {
            opts.multi_threaded_tcg = true;
            i += 1;
        } else if args[i] == "--icount" {
            opts.icount = true;
            i += 1;
        } else if args[i] == "--prog-stats" {
            prog_stats = true;
            i += 1;
        } else {
            bail!("unknown bench option {}", args[i]);
        }
    }
    opts.check()?;
    if opts.icount && only.as_deref() != Some("percall") {
        bail!("--icount counts the per-call part's instructions: use it with `--only percall`");
    }
    let sched_part = only.as_deref().and_then(crate::sched::Part::parse);
    if prog_stats && sched_part.is_none() {
        bail!("--prog-stats goes with `--host --only sched` (or one of its parts)");
    }
    if let Some(part) = sched_part {
        if !host {
            bail!("--only sched runs natively, with the scheduler's tracepoints: add --host");
        }
        return bench_sched(rounds, part, prog_stats);
    }
    match (only.as_deref(), host) {
        (Some("hot"), true) => return bench_hot(rounds),
        (Some("consumer"), true) => return bench_consumer(rounds),
        (Some("filters"), true) => return crate::filters::bench_host(rounds),
        (Some(part @ ("hot" | "consumer" | "filters")), false) => {
            bail!("--only {part} runs natively, with syscall sources: add --host")
        }
        (_, true) => return bench_host(rounds),
        _ => {}
    }
    let only_per_call = only.as_deref() == Some("percall");
    let only_others = only.as_deref() == Some("others");
    // Attach + detach and per call, without the cost to other processes.
    let no_others = only_per_call || only.as_deref() == Some("attach");
    // Session programs and multi-function trampolines (fsession.multi,
    // Linux 7.2): measured against the pairs on the kernels that have them,
    // the newest of the matrix or one given by path. On the others the
    // pairs are what `fexit` measures already.
    // On arm64 the multi-function trampolines do not exist, and the pairs
    // are measured against the single-function ones by `fexit` alone.
    let arm64 = opts.arch == GuestArch::Arm64;
    let sessions = !arm64
        && !matches!(
            opts.kernel,
            KernelSpec::Debian {
                label: "debian11" | "debian12" | "debian13",
                ..
            }
        );
    crate::deps::ensure()?;
    let examples = [
        "build",
        "--release",
        "-p",
        EXAMPLES_PKG,
        "--example",
        "attach_many",
        "--example",
        "read_loop",
        "--example",
        "hold_probes",
        "--example",
        "syscall_loop",
    ];
    let target = Metadata::load()?.target_dir;
    // The bpftrace package of the kernel's Debian release (issue 14): sid's
    // for debian14, bullseye's for debian11, each through its own loader;
    // the host's otherwise. The arm64
    // guest runs Debian 12's arm64 package, in its root.
    let (bpftrace, release) = if arm64 {
        opts.with_bpftrace = true;
        let toolchain = crate::cross::prepare()?;
        run(crate::cross::cargo_for(&toolchain)
            .args(examples)
            .args(["--target", crate::cross::TARGET]))?;
        let bpftrace = crate::bpftrace::Bpftrace {
            command: "bpftrace".into(),
            about: "Debian 12's arm64 package, in the arm64 guest's root".into(),
            kfunc: true,
        };
        (bpftrace, target.join(crate::cross::TARGET).join("release"))
    } else {
        run(cargo().args(examples))?;
        let bpftrace = crate::bpftrace::for_kernel(&opts.kernel, &vm::cache_dir())?;
        (bpftrace, target.join("release"))
    };
    let bt = sh_quote(&bpftrace.command);
    let example = release.join("examples/attach_many");
    let ex = path_arg(&example);
    let read_loop = path_arg(&release.join("examples/read_loop"));
    let (syscall_loop, hold_probes) = (
        path_arg(&release.join("examples/syscall_loop")),
        path_arg(&release.join("examples/hold_probes")),
    );
    let others_plan = others::Plan {
        syscall_loop: &syscall_loop,
        hold_probes: &hold_probes,
        bpftrace: &bpftrace.command,
        held: others::HELD.iter().collect(),
        rounds,
        // 1 to 5 ms a batch under emulation: short enough for some batches
        // to run while the host does not preempt QEMU (the fastest counts),
        // long against the guest's clock and timer ticks.
        calls: 2_000,
        batches: 20,
        // bpftrace's start-up (LLVM) takes seconds under emulation.
        ready_secs: 120,
    };
    let out = bench_output(&target, &repo_root())?;
    let _ = std::fs::remove_file(&out);
    let out_arg = path_arg(&out);
    let attach_and_per_call = format!(
        r#"# A clock in milliseconds: coreutils' date, in nanoseconds, where the root
# has it; where `date` is busybox's (the arm64 root: no %N), the time since
# boot from /proc/uptime, in 10 ms steps.
ms() {{ d=$(date +%s%N 2>/dev/null); case $d in ''|*N*) awk '{{ printf "%d\n", $1 * 1000 }}' /proc/uptime ;; *) echo $(( d / 1000000 )) ;; esac; }}
t() {{ name=$1; shift; s=$(ms); "$@" >/tmp/bench.out 2>&1 || {{ echo "BENCH-FAILED $name"; cat /tmp/bench.out; exit 1; }}; e=$(ms); echo "BENCH $name $(( e - s ))"; grep '^attach_many:' /tmp/bench.out || true; }}
p() {{ name=$1; shift; "$@" >/tmp/bench.out 2>&1 || {{ echo "BENCH-FAILED $name"; cat /tmp/bench.out; exit 1; }}; grep '^READ-LOOP' /tmp/bench.out | sed "s/^READ-LOOP/PERCALL $name/"; }}
if [ {icount} = 1 ]; then
  # The BPF programs' own time too: run time and runs of every program the
  # process holds (bpftrace's, or kspan's), the last reading before it exits.
  sysctl -qw kernel.bpf_stats_enabled=1
  progs() {{ for f in /proc/$1/fdinfo/*; do awk '/^prog_type/{{p=1}} /^run_time_ns/{{t=$2}} /^run_cnt/{{c=$2}} END{{if (p && c > 0) print t, c}}' $f 2>/dev/null; done | awk '{{t+=$1; c+=$2}} END{{print t+0, c+0}}'; }}
  p() {{ name=$1; shift; "$@" >/tmp/bench.out 2>&1 & pid=$!; last="0 0"; while kill -0 $pid 2>/dev/null; do s=$(progs $pid); [ "${{s#* }}" != 0 ] && last=$s; sleep 0.5; done; wait $pid || {{ echo "BENCH-FAILED $name"; cat /tmp/bench.out; exit 1; }}; grep '^READ-LOOP' /tmp/bench.out | sed "s/^READ-LOOP/PERCALL $name/"; echo "PROGS $name $last"; }}
fi
# Untimed: kspan's files read into the guest's page cache once, as
# bpftrace_begin reads bpftrace's before its first timed attach.
if [ {attach} = 1 ]; then {ex} fexit >/dev/null 2>&1 || true; fi
for r in $(seq {rounds}); do
  if [ {attach} = 1 ]; then
  t bpftrace_begin {bt} -e 'BEGIN {{ exit(); }}'
  if [ {kfunc} = 1 ]; then
  t bpftrace_kfunc {bt} -e 'kfunc:vfs_* {{ }} BEGIN {{ exit(); }}'
  fi
  t kspan_fexit {ex} fexit
  t bpftrace_kprobe {bt} -e 'kprobe:vfs_* {{ }} BEGIN {{ exit(); }}'
  t kspan_kretprobe {ex} kretprobe
  t kspan_kretprobe_1000 {ex} kretprobe-1000
  if [ {sessions} = 1 ]; then
  t kspan_fexit_pair {ex} fexit-pair
  t kspan_fexit_1000 {ex} fexit-1000
  t kspan_kretprobe_1000_pair {ex} kretprobe-1000-pair
  fi
  fi
  for i in 1 2 3; do
    p none {read_loop} none {calls} {pause}
    p bpftrace_latency {bt} -e '{entry}:vfs_read /pid == cpid/ {{ @s[tid] = nsecs; }} {exit}:vfs_read /@s[tid]/ {{ @h = hist(nsecs - @s[tid]); delete(@s[tid]); }}' -c '{read_loop} none {calls} {pause}'
    p kspan_fexit {read_loop} fexit {calls} {pause}
    p kspan_kretprobe {read_loop} kretprobe {calls} {pause}
    p kspan_histogram {read_loop} histogram {calls} {pause}
    p kspan_fexit_in_span {read_loop} fexit-in-span {calls} {pause}
    if [ {sessions} = 1 ]; then
    p kspan_fexit_pair {read_loop} fexit-pair {calls} {pause}
    p kspan_fexit_single {read_loop} fexit-single {calls} {pause}
    p kspan_kretprobe_pair {read_loop} kretprobe-pair {calls} {pause}
    fi
  done
done
"#,
        attach = u8::from(!only_per_call),
        icount = u8::from(opts.icount),
        sessions = u8::from(sessions),
        kfunc = u8::from(bpftrace.kfunc),
        // The latency script on trampolines, or on kprobes where this
        // bpftrace has no kfunc (see `Bpftrace::kfunc`).
        entry = if bpftrace.kfunc { "kfunc" } else { "kprobe" },
        exit = if bpftrace.kfunc {
            "kretfunc"
        } else {
            "kretprobe"
        },
        calls = 200_000,
        // Spans at a rate one emulated CPU turns into OpenTelemetry spans:
        // nothing dropped (checked below), the same pause in the baseline.
        pause = 3_000,
    );
    // Which bpftrace ran, as it says in the guest.
    let script = format!(
        "exec > {out_arg} 2>&1\necho \"BPFTRACE-VERSION $({bt} --version)\"\n{}{}",
        if only_others {
            ""
        } else {
            &attach_and_per_call
        },
        if no_others {
            String::new()
        } else {
            others::script(&others_plan)
        }
    );
    // The whole bench takes several minutes a round under emulation.
    opts.timeout = Duration::from_secs(if only_others { 300 } else { 900 } * u64::from(rounds));
    let status = vm::run_vm(
        &opts,
        &["sh".to_string(), "-c".to_string(), script],
        &repo_root(),
    )?;
    let output = std::fs::read_to_string(&out).unwrap_or_default();
    if status != 0 {
        print!("{output}");
        bail!("the benchmark failed in the guest (exit status {status})");
    }
    let version = output
        .lines()
        .find_map(|l| l.strip_prefix("BPFTRACE-VERSION "))
        .unwrap_or("(no version printed)");
    println!("bpftrace: {version}, {}", bpftrace.about);
    if !bpftrace.kfunc {
        println!(
            "  (it reports kfunc unavailable on this kernel: its latency script runs on \
             kprobe:/kretprobe:, and its kfunc attach is not measured)"
        );
    }
    if !only_others {
        attach_and_per_call_report(
            &output,
            rounds,
            &opts,
            !only_per_call,
            sessions,
            bpftrace.kfunc,
        )?;
    }
    if no_others {
        return Ok(0);
    }
    let figures = others::parse(&output, &others_plan)?;
    println!("{} ({}):", opts.kernel.name(), out_arg);
    println!("{}", others::report(&figures, &others_plan).join("\n"));
    Ok(0)
}

/// The cost to other processes natively, on the host's own kernel: syscall
/// tracepoints only (it runs neither trampolines nor kprobes).
fn bench_host(rounds: u32) -> Result<u8> {
    if !crate::util::is_root() {
        bail!("bench --host attaches probes: run it as root");
    }
    let bpftrace = crate::util::which("bpftrace")
        .ok_or_else(|| anyhow::anyhow!("bpftrace not found: run `cargo xtask deps`"))?;
    run(cargo().args([
        "build",
        "--release",
        "-p",
        EXAMPLES_PKG,
        "--example",
        "hold_probes",
        "--example",
        "syscall_loop",
    ]))?;
    let target = Metadata::load()?.target_dir;
    let (syscall_loop, hold_probes, bpftrace) = (
        path_arg(&target.join("release/examples/syscall_loop")),
        path_arg(&target.join("release/examples/hold_probes")),
        path_arg(&bpftrace),
    );
    let plan = others::Plan {
        syscall_loop: &syscall_loop,
        hold_probes: &hold_probes,
        bpftrace: &bpftrace,
        held: others::HELD.iter().filter(|h| h.host).collect(),
        rounds,
        // 3 to 14 ms a batch natively.
        calls: 20_000,
        batches: 20,
        ready_secs: 30,
    };
    let done = std::process::Command::new("sh")
        .arg("-c")
        .arg(others::script(&plan))
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run sh")?;
    let output = String::from_utf8_lossy(&done.stdout);
    if !done.status.success() {
        print!("{output}");
        bail!("the benchmark failed ({})", done.status);
    }
    let figures = others::parse(&output, &plan)?;
    let kernel = crate::util::output(std::process::Command::new("uname").arg("-r"))?;
    println!("host ({}):", kernel.trim());
    println!("{}", others::report(&figures, &plan).join("\n"));
    Ok(0)
}

/// Builds `examples` (release) and returns their paths.
fn release_examples(examples: &[&str]) -> Result<Vec<String>> {
    if !crate::util::is_root() {
        bail!("bench --host attaches probes: run it as root");
    }
    let mut cmd = cargo();
    cmd.args(["build", "--release", "-p", EXAMPLES_PKG]);
    for e in examples {
        cmd.args(["--example", e]);
    }
    run(&mut cmd)?;
    let target = Metadata::load()?.target_dir;
    Ok(examples
        .iter()
        .map(|e| path_arg(&target.join("release/examples").join(e)))
        .collect())
}

/// The machine, for the reports: the kernel and the processors.
fn host_line() -> Result<String> {
    let kernel = crate::util::output(std::process::Command::new("uname").arg("-r"))?;
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    Ok(format!("host ({}, {cpus} CPUs)", kernel.trim()))
}

/// A traced service's throughput at fixed rates of traced calls, natively
/// ([`hot`]).
fn bench_hot(rounds: u32) -> Result<u8> {
    let service = release_examples(&["traced_service"])?.remove(0);
    let plan = hot::Plan {
        service: &service,
        rounds,
        seconds: 2.0,
        // About a microsecond of work a unit.
        work_rounds: 256,
    };
    let figures = hot::measure(&plan)?;
    println!("{}:", host_line()?);
    println!("{}", hot::report(&figures, &plan)?.join("\n"));
    Ok(0)
}

/// The scheduler account's cost, natively ([`crate::sched`]).
fn bench_sched(rounds: u32, part: crate::sched::Part, prog_stats: bool) -> Result<u8> {
    let mut programs =
        release_examples(&["sched_account_idle", "sched_pingpong", "sched_service"])?.into_iter();
    let mut next = || programs.next().unwrap_or_default();
    let programs = crate::sched::Programs {
        idle: next(),
        pingpong: next(),
        service: next(),
    };
    println!("{}:", host_line()?);
    crate::sched::bench(&programs, rounds, part, prog_stats)
}

/// kspan's consumer against a bare libbpf-rs consumer, natively
/// ([`consumer`]).
fn bench_consumer(rounds: u32) -> Result<u8> {
    let programs = release_examples(&["consumer_bare", "consumer_kspan"])?;
    let plan = consumer::Plan {
        programs: [&programs[0], &programs[1]],
        rounds,
        // About 23 MB of records: under half of the 64 MiB ring, where
        // kspan's programs start counting new calls as overload.
        records: 150_000,
        fills: 5,
    };
    let figures = consumer::measure(&plan)?;
    println!("{}:", host_line()?);
    println!("{}", consumer::report(&figures, &plan)?.join("\n"));
    Ok(0)
}

/// The report of the attach + detach and per-traced-call parts.
fn attach_and_per_call_report(
    output: &str,
    rounds: u32,
    opts: &VmOptions,
    attach: bool,
    sessions: bool,
    kfunc: bool,
) -> Result<()> {
    let mut figures: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    let mut per_call: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    let mut programs: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for line in output.lines() {
        if let Some(rest) = line.strip_prefix("PROGS ") {
            // PROGS <name> <run time ns> <runs>: every configuration runs
            // two programs a call (an entry and an exit, or a session
            // program twice), so a call's share is twice a run's.
            let parts: Vec<&str> = rest.split_whitespace().collect();
            if let (Some(name), Some(ns), Some(runs)) = (
                parts.first(),
                parts.get(1).and_then(|v| v.parse::<f64>().ok()),
                parts.get(2).and_then(|v| v.parse::<f64>().ok()),
            ) {
                if runs > 0.0 {
                    programs
                        .entry((*name).to_owned())
                        .or_default()
                        .push(2.0 * ns / runs);
                }
            }
            println!("{line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("PERCALL ") {
            // PERCALL <name> ns_per_call <ns> calls <n> lost <n>
            let parts: Vec<&str> = rest.split_whitespace().collect();
            if parts.get(6).is_some_and(|lost| *lost != "0") {
                bail!(
                    "{line}: the consumer fell behind and records were dropped, which makes \
                     traced calls look cheaper; the per-call figures of this run are void"
                );
            }
            if let (Some(name), Some(ns)) =
                (parts.first(), parts.get(2).and_then(|v| v.parse().ok()))
            {
                per_call.entry((*name).to_owned()).or_default().push(ns);
            }
            println!("{line}");
        } else if let Some(rest) = line.strip_prefix("BENCH ") {
            let mut parts = rest.split_whitespace();
            if let (Some(name), Some(ms)) =
                (parts.next(), parts.next().and_then(|m| m.parse().ok()))
            {
                figures.entry(name.to_owned()).or_default().push(ms);
            }
        } else if !["OTHERS ", "HELD ", "BPFTRACE-VERSION "]
            .iter()
            .any(|p| line.starts_with(p))
        {
            println!("{line}");
        }
    }
    if let Some(how) = output.lines().find(|l| l.starts_with("attach_many:")) {
        // Which attachments the first run took, as attach_many printed.
        println!("(first run: {how})");
    }
    let median = |name: &str| -> Result<f64> {
        let mut v = figures.get(name).cloned().unwrap_or_default();
        if v.is_empty() {
            bail!("no figure for {name}: the guest run failed (see above)");
        }
        v.sort_unstable();
        Ok(v[v.len() / 2] as f64)
    };
    if attach {
        attach_report(&median, rounds, opts, sessions, kfunc)?;
    }
    per_call_report(&per_call, rounds, sessions)?;
    if opts.icount {
        programs_report(&per_call, &programs, sessions)?;
    }
    Ok(())
}

/// The median of `name`'s figures in `figures`; an error when the guest
/// printed none.
fn median_of(figures: &std::collections::BTreeMap<String, Vec<f64>>, name: &str) -> Result<f64> {
    let mut v = figures.get(name).cloned().unwrap_or_default();
    if v.is_empty() {
        bail!("no per-call figure for {name}: the guest run failed (see above)");
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

/// The traced configurations of the per-call part, as the guest script
/// names them (the pairs and the lone fsession link where sessions exist).
fn per_call_names(sessions: bool) -> Vec<&'static str> {
    let mut names = vec![
        "bpftrace_latency",
        "kspan_fexit",
        "kspan_kretprobe",
        "kspan_histogram",
        "kspan_fexit_in_span",
    ];
    if sessions {
        names.extend([
            "kspan_fexit_pair",
            "kspan_fexit_single",
            "kspan_kretprobe_pair",
        ]);
    }
    names
}

/// Under `--icount`, where a guest nanosecond is an instruction: what the
/// traced thread executes per call beyond the untraced loop, and what the
/// BPF programs alone execute. One host thread runs both guest CPUs, so the
/// loop's figure of a span mode also holds the instructions of kspan's
/// consumer (which builds the spans meanwhile on the other CPU); the
/// programs' figure and the histogram mode's loop hold none of it.
fn programs_report(
    per_call: &std::collections::BTreeMap<String, Vec<f64>>,
    programs: &std::collections::BTreeMap<String, Vec<f64>>,
    sessions: bool,
) -> Result<()> {
    let base = median_of(per_call, "none")?;
    println!(
        "instructions per traced call (-icount: the guest clock counts one ns per \
         instruction), medians:"
    );
    println!("  name                          loop added   BPF programs");
    let names = per_call_names(sessions);
    for name in &names {
        println!(
            "  {name:<29} {:>10.0} {:>14.0}",
            median_of(per_call, name)? - base,
            median_of(programs, name)?
        );
    }
    println!(
        "  ratio  kspan fexit programs / bpftrace latency script programs  {:.2}x",
        median_of(programs, "kspan_fexit")? / median_of(programs, "bpftrace_latency")?
    );
    println!(
        "  ratio  the same under an application span / bpftrace          {:.2}x",
        median_of(programs, "kspan_fexit_in_span")? / median_of(programs, "bpftrace_latency")?
    );
    println!(
        "  ratio  kspan histogram only added / bpftrace hist() added      {:.2}x",
        (median_of(per_call, "kspan_histogram")? - base)
            / (median_of(per_call, "bpftrace_latency")? - base)
    );
    println!(
        "  (a span mode's loop figure holds its consumer's instructions too: one host \
         thread runs both guest CPUs)"
    );
    Ok(())
}

/// The attach + detach figures, medians by `median`.
fn attach_report(
    median: &dyn Fn(&str) -> Result<f64>,
    rounds: u32,
    opts: &VmOptions,
    sessions: bool,
    kfunc: bool,
) -> Result<()> {
    println!(
        "attach + detach of every vfs_* function, whole process, median of {rounds} rounds ({}):",
        opts.kernel.name()
    );
    for name in [
        "bpftrace_begin",
        "bpftrace_kfunc",
        "kspan_fexit",
        "bpftrace_kprobe",
        "kspan_kretprobe",
    ] {
        if name == "bpftrace_kfunc" && !kfunc {
            println!("  {name:<16}      n/a (no kfunc in this bpftrace here)");
            continue;
        }
        println!("  {name:<16} {:>8.0} ms", median(name)?);
    }
    if kfunc {
        println!(
            "  ratio  kspan fexit / bpftrace kfunc       {:.2}x (target <= 0.5x)",
            median("kspan_fexit")? / median("bpftrace_kfunc")?
        );
    }
    println!(
        "  ratio  kspan kretprobe / bpftrace kprobe  {:.2}x (target <= 1.0x)",
        median("kspan_kretprobe")? / median("bpftrace_kprobe")?
    );
    println!(
        "  kspan kretprobe, about 1,000 functions (tcp_*, security_*, blk_*, sock_*): {:.0} ms",
        median("kspan_kretprobe_1000")?
    );
    if sessions {
        println!(
            "  kspan fexit, sessions off (fentry+fexit)  {:>8.0} ms",
            median("kspan_fexit_pair")?
        );
        println!(
            "  ratio  kspan fexit (best attachment) / bpftrace kfunc  {:.3}x (target <= 0.1x)",
            median("kspan_fexit")? / median("bpftrace_kfunc")?
        );
        println!(
            "  ratio  kspan fexit (best attachment) / fentry+fexit    {:.3}x",
            median("kspan_fexit")? / median("kspan_fexit_pair")?
        );
        println!(
            "  kspan fexit, about 1,000 functions (best attachment): {:.0} ms",
            median("kspan_fexit_1000")?
        );
        println!(
            "  kspan kretprobe, about 1,000 functions, sessions off (kprobe.multi pair): {:.0} ms",
            median("kspan_kretprobe_1000_pair")?
        );
        println!(
            "  ratio  about 1,000 kretprobes, best attachment / kprobe.multi pair  {:.2}x",
            median("kspan_kretprobe_1000")? / median("kspan_kretprobe_1000_pair")?
        );
    }
    Ok(())
}

/// The per-call figures: added cost over the untraced loop, and the ratios.
fn per_call_report(
    per_call: &std::collections::BTreeMap<String, Vec<f64>>,
    rounds: u32,
    sessions: bool,
) -> Result<()> {
    let ns = |name: &str| median_of(per_call, name);
    let base = ns("none")?;
    println!(
        "per traced vfs_read call (a 1-byte read of /dev/zero, 3 us apart), median of {} runs:",
        rounds * 3
    );
    println!("  untraced                      {base:>8.0} ns/call");
    let mut added = std::collections::BTreeMap::new();
    let names = per_call_names(sessions);
    for name in names {
        let traced = ns(name)?;
        added.insert(name, traced - base);
        println!(
            "  {name:<29} {traced:>8.0} ns/call, {:>6.0} ns added",
            traced - base
        );
    }
    println!(
        "  ratio  kspan fexit added / bpftrace latency script added  {:.2}x (target <= 1.0x)",
        added["kspan_fexit"] / added["bpftrace_latency"]
    );
    println!(
        "  ratio  kspan fexit added / kspan kretprobe added          {:.2}x (target <= 0.8x)",
        added["kspan_fexit"] / added["kspan_kretprobe"]
    );
    println!(
        "  ratio  kspan histogram only added / bpftrace hist() added {:.2}x (target <= 1.0x)",
        added["kspan_histogram"] / added["bpftrace_latency"]
    );
    if sessions {
        println!(
            "  ratio  kspan fexit (session) added / fentry+fexit added   {:.2}x (target <= 1.0x)",
            added["kspan_fexit"] / added["kspan_fexit_pair"]
        );
        println!(
            "  ratio  kspan kretprobe (session) added / kprobe pair added {:.2}x",
            added["kspan_kretprobe"] / added["kspan_kretprobe_pair"]
        );
        println!(
            "  ratio  kspan fexit (fsession.multi) / fsession link alone {:.2}x",
            added["kspan_fexit"] / added["kspan_fexit_single"]
        );
    }
    Ok(())
}

/// Where the guest writes the bench's output: somewhere in the repository,
/// the one tree the guest may write (the rest of the host's file system is
/// read-only there), so `<repo>/target/kspan-vm` when the target directory
/// (`CARGO_TARGET_DIR`) is elsewhere.
fn bench_output(target: &Path, repo: &Path) -> Result<PathBuf> {
    let dir = if target.starts_with(repo) {
        target.join("kspan-vm")
    } else {
        repo.join("target/kspan-vm")
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir.join("bench.out"))
}

fn path_arg(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrix_is_debian_kernels() {
        let labels: Vec<String> = VM_MATRIX
            .iter()
            .map(|k| match KernelSpec::parse(k).unwrap() {
                KernelSpec::Debian { label, .. } => label.to_string(),
                other => panic!("{other:?} is not a Debian kernel"),
            })
            .collect();
        assert_eq!(labels, ["debian11", "debian12", "debian13", "debian14"]);
    }

    #[test]
    fn two_lanes_run_each_item_once_the_free_lane_taking_the_next() {
        use std::sync::mpsc;
        use std::sync::Mutex;
        // Lane two starts only once lane one has run three items: lane
        // one takes each of them as it frees, lane two the fourth.
        let (tx, rx) = mpsc::channel::<()>();
        let tx = Mutex::new(tx);
        let (one, two) = two_lanes(
            &[1, 2, 3, 4],
            move || {
                for _ in 0..3 {
                    rx.recv().unwrap();
                }
                "built"
            },
            |k| {
                let _ = tx.lock().unwrap().send(());
                *k * 10
            },
        );
        let (first, two) = two.unwrap();
        assert_eq!(first, "built");
        let mut all: Vec<i32> = one.iter().chain(&two).copied().collect();
        all.sort_unstable();
        assert_eq!(all, [10, 20, 30, 40]);
        assert!(one.len() >= 3, "lane one ran {one:?}, lane two {two:?}");
        // No item: both lanes end at once, lane two's prelude run all the same.
        let (one, two) = two_lanes(&[] as &[i32], || 7, |k| *k);
        assert!(one.is_empty());
        assert_eq!(two.unwrap(), (7, Vec::new()));
    }

    #[test]
    fn the_bench_writes_inside_the_repository() {
        let repo = std::env::temp_dir().join(format!("kspan-xtask-{}", std::process::id()));
        let inside = bench_output(&repo.join("target"), &repo).unwrap();
        assert_eq!(inside, repo.join("target/kspan-vm/bench.out"));
        let outside = bench_output(Path::new("/elsewhere/target"), &repo).unwrap();
        assert_eq!(outside, repo.join("target/kspan-vm/bench.out"));
        let custom = bench_output(&repo.join("build"), &repo).unwrap();
        assert_eq!(custom, repo.join("build/kspan-vm/bench.out"));
        std::fs::remove_dir_all(&repo).unwrap();
    }

    #[test]
    fn guest_script_fails_when_one_binary_fails() {
        // Runs the script with the host's sh; `true`/`false` ignore the args.
        let dir = std::env::temp_dir();
        let bin = |name: &str| (PathBuf::from(format!("/bin/{name}")), dir.clone());
        let run = |bins: &[(PathBuf, PathBuf)]| {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(guest_test_script(bins))
                .stdout(Stdio::null())
                .status()
                .unwrap()
                .success()
        };
        assert!(run(&[bin("true"), bin("true")]));
        assert!(!run(&[bin("true"), bin("false"), bin("true")]));
        assert!(run(&[]));
    }

    #[test]
    fn guest_script_says_each_binary_s_seconds_and_the_slowest() {
        let dir = std::env::temp_dir();
        let bins = [
            (PathBuf::from("/bin/true"), dir.clone()),
            (PathBuf::from("/bin/false"), dir.clone()),
        ];
        // /proc/uptime is the host's here, as it is the guest's there.
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(guest_test_script(&bins))
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&out.stdout);
        let slowest = out
            .split("==> kspan-vm: the slowest test binaries:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("no slowest list in {out}"));
        let listed: Vec<&str> = slowest
            .lines()
            .filter_map(|l| l.strip_prefix("==> kspan-vm:   "))
            .collect();
        assert_eq!(listed.len(), 2, "{out}");
        for name in ["true", "false"] {
            assert!(
                listed.iter().any(|l| l.ends_with(&format!(" s {name}"))
                    && l.split(' ')
                        .next()
                        .is_some_and(|n| n.parse::<u64>().is_ok())),
                "{name}'s seconds in {out}"
            );
        }
        assert!(out.contains("2 test binaries, 1 failed"), "{out}");
    }

    #[test]
    fn guest_script_kills_a_hung_binary_with_what_it_started_and_goes_on() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("kspan-xtask-hung-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let child_pid = dir.join("child.pid");
        let hung = dir.join("hung_binary");
        std::fs::write(
            &hung,
            format!(
                "#!/bin/sh\nsleep 300 &\necho $! > {}\necho 'test a_case ...'\nsleep 300\n",
                child_pid.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&hung, std::fs::Permissions::from_mode(0o755)).unwrap();
        let bins = [
            (hung.clone(), dir.clone()),
            (PathBuf::from("/bin/true"), dir.clone()),
        ];
        let t0 = std::time::Instant::now();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(guest_script_with_limit(&bins, 2))
            .output()
            .unwrap();
        let took = t0.elapsed();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{text}");
        assert!(took < Duration::from_secs(60), "took {took:?}: {text}");
        assert!(
            text.contains("==> kspan-vm: HUNG: hung_binary still running after 2 s"),
            "{text}"
        );
        assert!(text.contains("==> kspan-vm: FAILED: hung_binary"), "{text}");
        // The run went on to the next binary, and counted one failure.
        assert!(
            text.contains("==> kspan-vm: running true --ignored"),
            "{text}"
        );
        assert!(text.contains("2 test binaries, 1 failed"), "{text}");
        // What the hung binary started was killed with it.
        let pid = std::fs::read_to_string(&child_pid).unwrap();
        let alive = Path::new("/proc").join(pid.trim());
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let state = std::fs::read_to_string(alive.join("stat")).unwrap_or_default();
        assert!(
            state.is_empty() || state.contains(") Z "),
            "the hung binary's child {} lives on: {state}",
            pid.trim()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_console_names_what_failed_and_where_a_run_stopped() {
        let mut p = vm::Progress::default();
        for l in [
            "==> kspan-vm: running vm_a-1 --ignored",
            "test one ... ok",
            "==> kspan-vm: FAILED: vm_a-1",
            "==> kspan-vm: running vm_b-2 --ignored",
            "test two ... kspan: warning: something",
        ] {
            p.line(l);
        }
        assert_eq!(
            p.stopped(),
            [
                "FAILED: vm_a-1",
                "last running vm_b-2 --ignored, its last test started two"
            ]
        );
    }

    #[test]
    fn guest_script_lists_binaries() {
        let s = guest_test_script(&[(
            PathBuf::from("/w/target/debug/deps/a-1"),
            PathBuf::from("/w/tests"),
        )]);
        assert!(s.contains("run '/w/tests' '/w/target/debug/deps/a-1'\n"));
        assert!(s.contains("1 test binaries"));
    }
}
