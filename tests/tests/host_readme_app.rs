// SPDX-License-Identifier: Apache-2.0 OR MIT
//! README's service, as a new user writes it: the `Cargo.toml` lines and
//! `src/main.rs` of "Add kspan to a service", copied into a crate of its
//! own outside the workspace, its `kspan = "0.1"` served by this checkout's
//! packaged crates (`cargo package`, unpacked, in `[patch.crates-io]`),
//! built with a `clang` on `PATH` that fails the build if anything runs it,
//! then run on the host (syscall sources) on kspan's one-line pipeline with
//! the scheduler's account:
//! - against a real OTLP/gRPC receiver: its `read` calls arrive as children
//!   of its `load_config` span, made with the OpenTelemetry API alone, the
//!   account's figures on that span; an outside reader finds the OTEP 4719
//!   process context naming the provider's service; the printed figures
//!   are settled (all acknowledged) and kspan warns of nothing;
//! - against a closed port: the printed figures show the loss, said once
//!   on stderr (no `tracing` subscriber set) in kspan's words: the
//!   endpoint, the fix, the exporter's cause without the SDK's fold;
//! - against a collector that accepts and never answers: the service stops
//!   within 25 s (kspan's default budget covers the provider's shutdown),
//!   exit 0, its figures printed with nothing left unknown.
//!
//! Stripped, it still has kspan's thread-context symbol in `.dynsym`
//! (README's `build.rs`). The same build makes `readme-app-fexit`, the
//! service with the kernel-function probe README's comment gives
//! (`vm_readme_app` runs it in the VM).

use std::path::{Path, PathBuf};
use std::process::Command;

use std::time::Duration;

use kspan_tests::otep_reader::{read_process_context, ProcessContextRead};
use kspan_tests::{
    assert_children_of, returned_sum, spans_of_thread, target_dir, the_span, Receiver,
};

/// The fenced block after the marker `<!-- readme-app: NAME -->`.
fn readme_block(readme: &str, name: &str) -> String {
    let marker = format!("<!-- readme-app: {name} -->");
    let after = readme
        .split_once(&marker)
        .unwrap_or_else(|| panic!("README.md has no `{marker}`"))
        .1;
    let fence_start = after.find("```").expect("a fenced block after the marker");
    let body = &after[fence_start..];
    let body = &body[body.find('\n').expect("the fence's line ends") + 1..];
    let end = body.find("\n```").expect("the fenced block is closed");
    body[..end + 1].to_string()
}

/// The crates kspan publishes, in the order `cargo package` takes them.
const PUBLISHED: [&str; 5] = [
    "kspan-dsl",
    "kspan-macros",
    "kspan-bpf",
    "kspan",
    "kspan-build",
];

/// Packages this checkout's published crates (`cargo package`, as they
/// would be uploaded) and unpacks each `.crate` under `dir/crates`: their
/// directories, by crate name.
fn packaged_crates(dir: &Path, repo: &Path) -> Vec<(String, PathBuf)> {
    let target = dir.join("package-target");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut package = Command::new(cargo);
    package
        .current_dir(repo)
        .args([
            "package",
            "--offline",
            "--no-verify",
            "--allow-dirty",
            "--quiet",
        ])
        .arg("--target-dir")
        .arg(&target);
    for krate in PUBLISHED {
        package.args(["-p", krate]);
    }
    let packaged = package.output().expect("run cargo package");
    assert!(
        packaged.status.success(),
        "cargo package failed:\n{}",
        String::from_utf8_lossy(&packaged.stderr)
    );
    let crates = dir.join("crates");
    let _ = std::fs::remove_dir_all(&crates);
    std::fs::create_dir_all(&crates).unwrap();
    PUBLISHED
        .iter()
        .map(|krate| {
            let file = target.join(format!("package/{krate}-0.1.0.crate"));
            let unpacked = Command::new("tar")
                .arg("xzf")
                .arg(&file)
                .arg("-C")
                .arg(&crates)
                .status()
                .expect("run tar");
            assert!(unpacked.success(), "cannot unpack {}", file.display());
            (krate.to_string(), crates.join(format!("{krate}-0.1.0")))
        })
        .collect()
}

/// A crate from README's blocks in `dir`, its kspan crates the packaged
/// ones of this checkout standing in for crates.io.
fn write_crate(dir: &Path, repo: &Path) {
    let readme = std::fs::read_to_string(repo.join("README.md")).expect("README.md");
    let dependencies = readme_block(&readme, "Cargo.toml");
    for (name, line) in [
        ("kspan", "kspan = \"0.1\""),
        ("kspan-build", "kspan-build = \"0.1\""),
    ] {
        assert!(
            dependencies.lines().any(|l| l.trim() == line),
            "README's dependencies name {name} by version (`{line}`):\n{dependencies}"
        );
    }
    let mut patch =
        String::from("\n# This checkout's packaged crates, for crates.io's.\n[patch.crates-io]\n");
    for (name, unpacked) in packaged_crates(dir, repo) {
        patch.push_str(&format!("{name} = {{ path = {unpacked:?} }}\n"));
    }
    let manifest = format!(
        "[package]\nname = \"readme-app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
         publish = false\n\n# Not a member of kspan's workspace.\n[workspace]\n\n{dependencies}{patch}"
    );
    let main_rs = readme_block(&readme, "src/main.rs");
    std::fs::create_dir_all(dir.join("src/bin")).unwrap();
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(
        dir.join("src/bin/readme-app-fexit.rs"),
        fexit_variant(&main_rs),
    )
    .unwrap();
    std::fs::write(dir.join("src/main.rs"), main_rs).unwrap();
    let crate_readme =
        std::fs::read_to_string(repo.join("kspan/README.md")).expect("kspan/README.md");
    std::fs::write(
        dir.join("src/bin/crate-readme-app.rs"),
        crate_readme_program(&crate_readme, &dependencies),
    )
    .unwrap();
    std::fs::write(dir.join("build.rs"), readme_block(&readme, "build.rs")).unwrap();
    // The versions the workspace was tested with.
    std::fs::copy(repo.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
}

/// The program of the crate's own README (its crates.io page), after
/// checking that every dependency it lists is one README's crate has.
fn crate_readme_program(crate_readme: &str, dependencies: &str) -> String {
    let block = |fence: &str| {
        crate_readme
            .split_once(&format!("```{fence}\n"))
            .and_then(|(_, rest)| rest.split_once("```"))
            .map(|(block, _)| block.to_owned())
            .unwrap_or_else(|| panic!("kspan/README.md has a ```{fence} block"))
    };
    for line in block("toml").lines().filter(|l| l.contains(" = ")) {
        assert!(
            dependencies.lines().any(|d| d.trim() == line.trim()),
            "the crate README's dependency `{line}` is README's too:\n{dependencies}"
        );
    }
    block("rust,no_run")
}

/// README's service with the kernel-function probe its comment gives in
/// place of the syscall source: what `vm_readme_app` runs in the VM.
fn fexit_variant(main_rs: &str) -> String {
    let probe = main_rs
        .split_once("same way: `")
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(probe, _)| probe)
        .expect("README's comment gives the kernel-function probe");
    let syscall_probe =
        "#[kspan::kernel_span(syscall = \"read\")]\nfn read(fd: u32, count: usize, ret: i64) {}";
    assert!(
        main_rs.contains(syscall_probe),
        "README declares the read probe"
    );
    assert!(
        main_rs.contains(".probe(&read)"),
        "README starts the read probe"
    );
    main_rs
        .replace(syscall_probe, probe)
        .replace(".probe(&read)", ".probe(&vfs_read)")
}

/// A `clang` that records that it ran and fails.
fn clang_trap(dir: &Path) -> PathBuf {
    let bin = dir.join("trap-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let ran = dir.join("clang-ran");
    let _ = std::fs::remove_file(&ran);
    let script = bin.join("clang");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"clang $*\" >> '{}'\necho 'clang must not be needed' >&2\nexit 1\n",
            ran.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// Forgets what kspan-bpf's build script did before, so that this build
/// runs it (with the trap on `PATH`), not a cached result.
fn forget_kspan_bpf_build(target: &Path) {
    for sub in ["debug/build", "debug/.fingerprint"] {
        let Ok(entries) = std::fs::read_dir(target.join(sub)) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with("kspan-bpf-")
            {
                std::fs::remove_dir_all(entry.path()).unwrap();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn readme_service_builds_without_clang_and_nests_its_reads_over_otlp() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is inside the repository")
        .to_path_buf();
    let dir = target_dir().join("kspan-readme-app");
    write_crate(&dir, &repo);
    let trap = clang_trap(&dir);
    let target = dir.join("target");
    forget_kspan_bpf_build(&target);
    let path = format!(
        "{}:{}",
        trap.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let build = Command::new(cargo)
        .current_dir(&dir)
        // The workspace's dev profile (no debug information for the
        // dependencies): cargo's default would take several times the disk.
        .args(["--config", "profile.dev.package.\"*\".debug=false"])
        .args(["build", "--offline", "--quiet"])
        .env("CARGO_PROFILE_DEV_DEBUG", "line-tables-only")
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("run cargo build");
    assert!(
        build.status.success(),
        "README's service does not build:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    assert!(
        !dir.join("clang-ran").exists(),
        "building a crate that depends on kspan ran clang: {}",
        std::fs::read_to_string(dir.join("clang-ran")).unwrap_or_default()
    );
    let kspan_bpf_built = std::fs::read_dir(target.join("debug/build"))
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("kspan-bpf-"));
    assert!(
        kspan_bpf_built,
        "kspan-bpf's build script ran in this build"
    );

    // Other OTEP 4947 readers find the record's symbol in `.dynsym`, which
    // `strip` keeps.
    let stripped = dir.join("readme-app.stripped");
    let strip = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(target.join("debug/readme-app"))
        .status()
        .expect("run strip (binutils)");
    assert!(strip.success(), "strip failed");
    let dyn_syms = Command::new("readelf")
        .args(["-W", "--dyn-syms"])
        .arg(&stripped)
        .output()
        .expect("run readelf (binutils)");
    assert!(dyn_syms.status.success(), "readelf failed");
    let dyn_syms = String::from_utf8_lossy(&dyn_syms.stdout);
    assert!(
        dyn_syms
            .lines()
            .any(|l| l.contains(" TLS ") && l.trim_end().ends_with(" otel_thread_ctx_v1")),
        "the stripped service has no otel_thread_ctx_v1 in .dynsym:\n{dyn_syms}"
    );
    let symtab = Command::new("readelf")
        .args(["-W", "--syms"])
        .arg(&stripped)
        .output()
        .expect("run readelf (binutils)");
    assert!(
        !String::from_utf8_lossy(&symtab.stdout).contains(".symtab"),
        "strip left the symbol table: the check above proves nothing"
    );

    // Up: a receiver that acknowledges; an outside reader of the OTEP 4719
    // process context while the service runs.
    let program = target.join("debug/readme-app");
    let receiver = Receiver::start().await.expect("start the OTLP receiver");
    let up = run_reading_process_context(&program, &receiver.endpoint(), &[]).await;
    let (stdout, stderr) = (up.stdout(), up.stderr());
    assert!(up.output.status.success(), "{stdout}\n{stderr}");
    let size = std::fs::metadata("/etc/os-release").unwrap().len();
    assert!(stdout.contains(&format!("read {size} bytes")), "{stdout}");
    let spans = receiver.spans();
    let kernel_spans = spans.iter().filter(|s| s.name == "read").count();
    assert!(
        stdout.contains(&format!(
            "kspan: {kernel_spans} kernel spans handed to the pipeline, {kernel_spans} \
             acknowledged by the collector; 0 lost"
        )),
        "README's service prints its settled figures ({kernel_spans} read spans received):\n\
         {stdout}\nreceived: {:?}",
        spans
            .iter()
            .map(|s| (s.name.as_str(), s.int("kspan.tid"), s.start_ns))
            .collect::<Vec<_>>()
    );
    assert!(
        !stderr.contains("kspan: warning"),
        "the one-line pipeline leaves nothing for kspan to warn about:\n{stderr}"
    );
    let context = up
        .process_context
        .as_ref()
        .expect("an outside reader found the service's process context while it ran");
    assert_eq!(
        context.resource_str("service.name"),
        Some("my-service"),
        "the process context carries the provider's resource, not the environment's \
         OTEL_SERVICE_NAME (`readme-app`): {context:?}"
    );

    let app = the_span(&spans, "load_config");
    assert_eq!(app.service_name.as_deref(), Some("my-service"));
    assert!(app.parent_span_id.is_empty(), "a root span");
    // The scheduler's account, on the application span.
    let sched = |key: &str| {
        app.int(&format!("kspan.sched.{key}"))
            .unwrap_or_else(|| panic!("load_config has no kspan.sched.{key}: {app:?}"))
    };
    let span_ns = (app.end_ns - app.start_ns) as i64;
    assert!(sched("on_cpu_ns") > 0, "{app:?}");
    assert!(
        sched("current_ns") > 0 && sched("current_ns") <= span_ns,
        "current while it was open: {app:?}"
    );
    assert_eq!(
        sched("on_cpu_ns")
            + sched("run_queue_ns")
            + sched("blocked_ns")
            + sched("sleeping_ns")
            + sched("other_off_cpu_ns"),
        sched("current_ns"),
        "the account's parts make its whole: {app:?}"
    );
    // The main thread's reads (its thread id is the process id) inside the
    // application span's time: every one is its child, in its trace.
    let pid = i64::from(up.pid);
    let reads = spans_of_thread(&spans, "read", pid, app.start_ns, app.end_ns);
    assert!(
        reads.len() >= 2,
        "a read of the data and one of its end: {reads:?}"
    );
    assert_children_of(&reads, app);
    assert!(reads
        .iter()
        .all(|r| r.service_name.as_deref() == Some("my-service")));
    assert_eq!(
        returned_sum(&reads) as u64,
        size,
        "the reads add up to the file"
    );
    // kspan's ids are the kernel's: no two spans share one.
    let mut ids: Vec<&[u8]> = spans.iter().map(|s| s.span_id.as_slice()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), spans.len(), "span ids are unique");

    // Down: nothing listens at the endpoint. The loss is in the figures the
    // service prints, said once on stderr (though it sets no `tracing`
    // subscriber), in kspan's words: what was lost, where the exporter
    // sends, the fix, the exporter's own words without the SDK's fold.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let down = run_reading_process_context(&program, &endpoint, &[]).await;
    let (stdout, stderr) = (down.stdout(), down.stderr());
    assert!(
        down.output.status.success(),
        "README's service exits 0 with the collector down, as README says:\n{stdout}\n{stderr}"
    );
    let figures = the_figures(&stdout, &stderr);
    assert!(
        figures.contains(" 0 acknowledged by the collector")
            && figures.contains("lost (")
            && !figures.contains("; 0 lost")
            && figures.contains("export_failed"),
        "with the collector down the figures show the loss: {figures}"
    );
    let said: Vec<&str> = stderr.lines().filter(|l| l.contains("lost")).collect();
    assert_eq!(said.len(), 1, "the loss is said once on stderr:\n{stderr}");
    let said = said[0];
    assert!(
        said.starts_with("kspan: kspan shut down with ")
            && said.contains(" kernel spans lost")
            && said.contains(&format!(
                "the collector at {endpoint} (OTEL_EXPORTER_OTLP_ENDPOINT"
            ))
            && said.contains("check that the collector runs and is reachable there")
            && said.contains("TonicTracesClient export failed"),
        "in kspan's words, naming the endpoint and the fix, with the exporter's cause: {said}"
    );
    assert!(
        !said.contains("errs: [") && !said.contains("InternalFailure(") && !said.contains("Ok(())"),
        "not the SDK's Debug: {said}"
    );

    // A collector that accepts the connection and never answers, with the
    // exporter's default 10 s timeout: the export fails inside a flush the
    // SDK cut at 5 s, kspan's flush then finishes, and the shutdown
    // succeeds with the loss, said once by its warning, in the same words.
    let silent = SilentCollector::start();
    let late = run_reading_process_context(&program, &silent.endpoint(), &[]).await;
    let (stdout, stderr) = (late.stdout(), late.stderr());
    assert!(late.output.status.success(), "{stdout}\n{stderr}");
    let figures = the_figures(&stdout, &stderr);
    assert!(
        figures.contains(" 0 acknowledged by the collector") && !figures.contains("; 0 lost"),
        "{figures}"
    );
    let said: Vec<&str> = stderr.lines().filter(|l| l.contains("lost")).collect();
    assert_eq!(said.len(), 1, "the loss is said once on stderr:\n{stderr}");
    assert!(
        said[0].contains(&format!("the collector at {}", silent.endpoint()))
            && said[0].contains("the exporter failed (Operation failed: TonicTracesClient")
            && !said[0].contains("errs: ["),
        "in kspan's words, the exporter's cause once: {}",
        said[0]
    );

    // A collector that accepts the connection and never answers: the
    // service still stops within 25 s by default (kspan's budget covers the
    // provider's shutdown), its figures printed and settled, exit 0.
    let silent = SilentCollector::start();
    let started = std::time::Instant::now();
    // The exporter's own timeout (OTEL_EXPORTER_OTLP_TIMEOUT, 10 s by
    // default) would end its export first: set past any grace period, as a
    // service may, only kspan's budget is left to bound the shutdown.
    let hung = run_reading_process_context(
        &program,
        &silent.endpoint(),
        &[("OTEL_EXPORTER_OTLP_TIMEOUT", "120000")],
    )
    .await;
    let took = started.elapsed();
    let (stdout, stderr) = (hung.stdout(), hung.stderr());
    assert!(
        silent.accepted() > 0,
        "the service connected to the silent collector:\n{stderr}"
    );
    assert!(
        took < Duration::from_secs(25),
        "README's service took {took:?} to stop with a collector that never answers:\n\
         {stdout}\n{stderr}"
    );
    assert!(
        hung.output.status.success(),
        "README's service exits 0 as README says:\n{stdout}\n{stderr}"
    );
    let figures = the_figures(&stdout, &stderr);
    assert!(
        figures.contains(" 0 acknowledged by the collector")
            && !figures.contains("; 0 lost")
            && !figures.contains("not known yet"),
        "what the collector never took is counted as lost, nothing left unknown: {figures}"
    );
    assert!(
        stderr.lines().filter(|l| l.contains("lost")).count() == 1
            && stderr.contains("shutdown budget of 20s"),
        "said once, naming the budget: {stderr}"
    );
    eprintln!("README's service stopped in {took:?} with a silent collector:\n{stderr}");

    crate_readme_program_exports_its_reads(&target.join("debug/crate-readme-app")).await;
}

/// The crate README's program, as a newcomer copies it from crates.io: on
/// the host, which traces no kernel function, its optional `vfs_read` is
/// left out with a warning and its `read` syscall source exports, children
/// of its `load_config` span, every one acknowledged.
async fn crate_readme_program_exports_its_reads(program: &Path) {
    let receiver = Receiver::start().await.expect("start the OTLP receiver");
    let run = run_reading_process_context(program, &receiver.endpoint(), &[]).await;
    let (stdout, stderr) = (run.stdout(), run.stderr());
    assert!(
        run.output.status.success(),
        "the crate README's program runs on a kernel without trampolines or kprobes:\n\
         {stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("kspan: warning") && stderr.contains("vfs_read"),
        "its optional kernel function is left out with a warning:\n{stderr}"
    );
    let spans = receiver.spans();
    let app = the_span(&spans, "load_config");
    let reads = spans_of_thread(&spans, "read", i64::from(run.pid), app.start_ns, app.end_ns);
    assert!(
        !reads.is_empty(),
        "its reads reach the collector: {spans:?}"
    );
    assert_children_of(&reads, app);
    let kernel_spans = spans.iter().filter(|s| s.name == "read").count();
    assert!(
        stdout.contains(&format!(
            "kspan: {kernel_spans} kernel spans handed to the pipeline, {kernel_spans} \
             acknowledged by the collector; 0 lost"
        )),
        "{stdout}"
    );
}

/// The line README's service printed its figures on (stdout when the
/// shutdown succeeded, stderr in its error's message when it failed).
fn the_figures<'a>(stdout: &'a str, stderr: &'a str) -> &'a str {
    stdout
        .lines()
        .chain(stderr.lines())
        .find(|l| l.starts_with("kspan: ") && l.contains("kernel spans handed to the pipeline"))
        .unwrap_or_else(|| panic!("the service printed no figures:\n{stdout}\n{stderr}"))
}

/// An OTLP collector that accepts every connection and never answers,
/// holding the connections open until dropped.
struct SilentCollector {
    address: std::net::SocketAddr,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl SilentCollector {
    fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
        let address = listener.local_addr().unwrap();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = accepted.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming().flatten() {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                held.push(stream);
            }
        });
        SilentCollector { address, accepted }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// What running README's service gave, with what an outside reader found of
/// its process context while it ran.
struct ContextRun {
    output: std::process::Output,
    pid: u32,
    process_context: Option<ProcessContextRead>,
}

impl ContextRun {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
}

/// Runs `program` exporting to `endpoint`, with `OTEL_SERVICE_NAME` set to
/// another name than its provider's (and `env` besides), and reads its process context from
/// outside (OTEP 4719's reading protocol, `/proc/PID/mem`) until it has one
/// naming a service or the program exits.
async fn run_reading_process_context(
    program: &Path,
    endpoint: &str,
    env: &[(&str, &str)],
) -> ContextRun {
    let mut child = tokio::process::Command::new(program)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_SERVICE_NAME", "readme-app")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "10000")
        .envs(env.iter().copied())
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let pid = child.id().expect("a running child has a pid");
    let mut process_context = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    while process_context.is_none() && std::time::Instant::now() < deadline {
        if child.try_wait().expect("poll the child").is_some() {
            break;
        }
        if let Ok(Some(read)) = read_process_context(pid as i32) {
            if read.resource_str("service.name").is_some() {
                process_context = Some(read);
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let output = tokio::time::timeout(Duration::from_secs(300), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{} did not exit within 300 s", program.display()))
        .expect("wait for the child");
    ContextRun {
        output,
        pid,
        process_context,
    }
}
