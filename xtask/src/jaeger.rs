//! `cargo xtask jaeger`: the file service in the VM, its traces in the
//! embedded Jaeger UI on the host, and optionally a screenshot of one trace.
//!
//! The host runs `kspan-jaeger` (an in-memory OTLP collector serving the
//! Jaeger UI). The guest runs `file_service` with its OTLP exporter pointed
//! at a loopback port that the VM runner forwards to the host, and a client
//! (busybox `wget`) asks it for a few files. The traces then stay in the UI
//! until Ctrl-C; with `--screenshot PNG`, headless Chromium takes a picture
//! of one request's trace instead, and everything stops.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{anyhow, bail, Context, Result};

use crate::kernel::KernelSpec;
use crate::util::{cargo, opt_value, repo_root, run, sh_quote, which, Metadata};
use crate::vm::{self, VmOptions};

/// The service name the traces carry.
const SERVICE: &str = "kspan-file-service";
/// Files of this repository the client asks for (the root is the
/// repository); the last one is not there, so one request is a 404.
const REQUESTS: &[&str] = &[
    "README.md",
    "Cargo.toml",
    "BENCHMARKS.md",
    "no-such-file.txt",
];
/// The request whose trace the screenshot shows.
const SHOWN: &str = "/README.md";

/// Kills the child when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `cargo xtask jaeger [--kernel K] [--ui ADDR] [--screenshot PNG]`.
pub fn command(args: &[String]) -> Result<u8> {
    let mut opts = VmOptions::default();
    let mut ui = "127.0.0.1:16686".to_string();
    let mut screenshot: Option<PathBuf> = None;
    let mut i = 0;
    while i < args.len() {
        if let Some(v) = opt_value(args, &mut i, "--kernel")? {
            opts.kernel = KernelSpec::parse(&v)?;
        } else if let Some(v) = opt_value(args, &mut i, "--ui")? {
            ui = v;
        } else if let Some(v) = opt_value(args, &mut i, "--screenshot")? {
            screenshot = Some(std::env::current_dir()?.join(v));
        } else {
            bail!("unknown jaeger option {}", args[i]);
        }
    }
    crate::deps::ensure()?;
    if screenshot.is_some() {
        crate::deps::ensure_packages(&["chromium"])?;
    }
    run(cargo().args([
        "build",
        "-p",
        crate::util::EXAMPLES_PKG,
        "-p",
        crate::tasks::TESTS_PKG,
        "--example",
        "file_service",
        "--bin",
        "kspan-jaeger",
    ]))?;
    let debug = Metadata::load()?.target_dir.join("debug");

    let (jaeger, otlp, ui) = start_jaeger(&debug.join("kspan-jaeger"), &ui)?;
    eprintln!("xtask: the embedded Jaeger UI is at http://{ui}/");
    opts.env = vec![
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
            format!("http://{otlp}"),
        ),
        ("OTEL_SERVICE_NAME".into(), SERVICE.into()),
    ];
    let service = debug.join("examples/file_service");
    let script = guest_script(&service, &repo_root());
    let status = vm::run_vm(&opts, &["sh".into(), "-c".into(), script], &repo_root())?;
    if status != 0 {
        bail!("the file service in the guest failed (exit status {status})");
    }

    match screenshot {
        Some(png) => {
            let trace = trace_of(&ui, SHOWN)?;
            take_screenshot(&format!("http://{ui}/trace/{trace}"), &png)?;
            eprintln!("xtask: wrote {} (trace {trace})", png.display());
        }
        None => {
            eprintln!(
                "xtask: the traces are at http://{ui}/search?service={SERVICE}; Ctrl-C stops"
            );
            // Until the collector is killed (Ctrl-C reaches both of us).
            let mut jaeger = jaeger;
            jaeger.0.wait()?;
        }
    }
    Ok(0)
}

/// Starts `kspan-jaeger` on a free OTLP port and `ui`; returns it with the
/// OTLP and UI addresses it printed.
fn start_jaeger(exe: &Path, ui: &str) -> Result<(Running, String, String)> {
    let mut child = Running(
        Command::new(exe)
            .args(["--otlp", "127.0.0.1:0", "--ui", ui])
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("running {}", exe.display()))?,
    );
    let mut stdout = BufReader::new(child.0.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    // Whatever it prints later goes on to our stderr; a closed pipe would
    // make its next print fail.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::stderr()));
    let addrs = line
        .trim()
        .strip_prefix("kspan-jaeger: OTLP/gRPC on ")
        .and_then(|rest| rest.split_once(", Jaeger UI on http://"))
        .ok_or_else(|| anyhow!("kspan-jaeger did not start (it printed {line:?})"))?;
    let (otlp, ui) = (
        addrs.0.to_string(),
        addrs.1.trim_end_matches('/').to_string(),
    );
    Ok((child, otlp, ui))
}

/// The guest's part: the service, serving this repository's files, and a
/// client asking for [`REQUESTS`] one after the other.
fn guest_script(service: &Path, root: &Path) -> String {
    let mut s = format!(
        "out=/tmp/file_service.out\n\
         {} --root {} --listen 127.0.0.1:8080 --requests {} >$out &\n\
         pid=$!\n\
         n=0\n\
         until grep -q 'listening on' $out; do\n  \
           kill -0 $pid 2>/dev/null || {{ cat $out; exit 1; }}\n  \
           n=$((n+1)); [ $n -lt 1200 ] || {{ echo 'file_service did not start' >&2; exit 1; }}\n  \
           sleep 0.1\n\
         done\n\
         cat $out\n",
        sh_quote(&service.to_string_lossy()),
        sh_quote(&root.to_string_lossy()),
        REQUESTS.len()
    );
    for file in REQUESTS {
        s += &format!(
            "busybox wget -q -O /dev/null http://127.0.0.1:8080/{file} 2>/dev/null; \
             echo \"client: GET /{file} done\"\n"
        );
    }
    s += "wait $pid; status=$?\ntail -n +2 $out\nexit $status\n";
    s
}

/// The trace id of the request for `path`, from the UI's API.
fn trace_of(ui: &str, path: &str) -> Result<String> {
    let url = format!("http://{ui}/api/traces?service={SERVICE}&limit=100");
    let curl = which("curl").ok_or_else(|| anyhow!("curl not found: run `cargo xtask deps`"))?;
    let out = Command::new(curl)
        .args(["-sf", &url])
        .output()
        .context("running curl")?;
    if !out.status.success() {
        bail!("GET {url} failed ({})", out.status);
    }
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).with_context(|| format!("GET {url}: not JSON"))?;
    let traces = json["data"].as_array().cloned().unwrap_or_default();
    traces
        .iter()
        .find(|t| {
            t["spans"].as_array().is_some_and(|spans| {
                spans.iter().any(|s| {
                    s["tags"].as_array().is_some_and(|tags| {
                        tags.iter()
                            .any(|t| t["key"] == "url.path" && t["value"] == path)
                    })
                })
            })
        })
        .and_then(|t| t["traceID"].as_str().map(str::to_string))
        .ok_or_else(|| anyhow!("no trace of GET {path} among the {} received", traces.len()))
}

/// Headless Chromium's picture of `url`, after the page's requests settle.
fn take_screenshot(url: &str, png: &Path) -> Result<()> {
    let chromium = which("chromium").ok_or_else(|| anyhow!("chromium not found"))?;
    let profile = std::env::temp_dir().join(format!("kspan-chromium-{}", std::process::id()));
    // So that an old picture cannot pass for a new one.
    if png.exists() {
        std::fs::remove_file(png).with_context(|| format!("removing the old {}", png.display()))?;
    }
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            // The machine's network is closed: no calls home.
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            // Wide enough for the timeline, tall enough for one request's spans.
            "--window-size=1400,445",
            // Virtual time runs until the UI's API calls and rendering are done.
            "--virtual-time-budget=15000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .context("running chromium")?;
    let _ = std::fs::remove_dir_all(&profile);
    // Its output (complaints about the D-Bus a container lacks) only
    // matters when the picture is missing.
    if !out.status.success() || !png.is_file() {
        bail!(
            "chromium did not write {} ({}):\n{}",
            png.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_script_waits_for_the_service_and_asks_for_every_file() {
        let s = guest_script(Path::new("/t/file_service"), Path::new("/repo"));
        assert!(s.contains("'/t/file_service' --root '/repo' --listen 127.0.0.1:8080 --requests 4"));
        let waits = s.find("until grep -q 'listening on'").expect("the wait");
        let asks = s.find("busybox wget").expect("the client");
        assert!(waits < asks);
        for f in REQUESTS {
            assert!(s.contains(&format!("http://127.0.0.1:8080/{f}")));
        }
        assert!(s.ends_with("exit $status\n"));
    }
}
