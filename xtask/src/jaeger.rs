//! `cargo xtask jaeger`: an example's traces in the embedded Jaeger UI on
//! the host, and optionally a screenshot of one trace.
//!
//! The host runs `kspan-jaeger` (an in-memory OTLP collector serving the
//! Jaeger UI). By default the guest runs `file_service` with its OTLP
//! exporter pointed at a loopback port that the VM runner forwards to the
//! host, and a client (busybox `wget`) asks it for a few files (its kernel
//! spans need trampolines, which the host refuses). With `--example
//! where_time_went` the host runs that example itself, natively: the
//! scheduler's account needs only tracepoints, which the host runs. With
//! `--example why_it_waited` the guest runs that example, whose disk
//! request reads the guest's slow disk. The traces then stay in the UI
//! until Ctrl-C; with `--screenshot PNG`, headless Chromium takes a picture
//! of one request's trace instead (for `why_it_waited`, the disk request's,
//! with its first I/O wait span's attributes open, driven through the
//! DevTools protocol), and everything stops. `--request chain` pictures
//! `why_it_waited`'s chain request instead: its futex wait, found and
//! opened with its tags and references (its waker's span and the waker's
//! own last wait), and that last wait opened, naming its disk request.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{anyhow, bail, Context, Result};

use crate::kernel::KernelSpec;
use crate::util::{cargo, opt_value, repo_root, run, sh_quote, which, Metadata};
use crate::vm::{self, VmOptions};

/// The service name the file service's traces carry.
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

/// The service name of `where_time_went`'s traces.
const SCHED_SERVICE: &str = "kspan-where-time-went";
/// How many requests it handles: a few, for one that nothing else on the
/// machine preempted.
const SCHED_REQUESTS: u32 = 5;
/// The span each of its requests' traces has at its root.
const SCHED_ROOT: &str = "request";

/// The service name of `why_it_waited`'s traces.
const CAUSES_SERVICE: &str = "kspan-why-it-waited";
/// The wait span whose attributes its picture shows open: the first I/O
/// wait of the disk request, naming its block request.
const CAUSES_OPENED: &str = "off-cpu blocked";
/// The requests of `why_it_waited` whose trace `--request` pictures: the
/// disk request (the default) and the chain of wake-ups.
const CAUSES_REQUESTS: &[&str] = &["disk", "chain"];

/// The examples `--example` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Example {
    /// `file_service` in the VM (the default).
    FileService,
    /// `where_time_went` on the host.
    WhereTimeWent,
    /// `why_it_waited` in the VM (its slow disk).
    WhyItWaited,
}

impl Example {
    fn parse(name: &str) -> Result<Example> {
        match name {
            "file_service" => Ok(Example::FileService),
            "where_time_went" => Ok(Example::WhereTimeWent),
            "why_it_waited" => Ok(Example::WhyItWaited),
            other => bail!(
                "--example {other}: the jaeger command runs `file_service` (in the VM, the \
                 default), `where_time_went` (on the host) or `why_it_waited` (in the VM)"
            ),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Example::FileService => "file_service",
            Example::WhereTimeWent => "where_time_went",
            Example::WhyItWaited => "why_it_waited",
        }
    }

    fn service(self) -> &'static str {
        match self {
            Example::FileService => SERVICE,
            Example::WhereTimeWent => SCHED_SERVICE,
            Example::WhyItWaited => CAUSES_SERVICE,
        }
    }

    /// Chromium's window: wide enough for the timeline, tall enough for
    /// one request's spans.
    fn window(self) -> &'static str {
        match self {
            Example::FileService => "1400,445",
            Example::WhereTimeWent => "1600,560",
            Example::WhyItWaited => "1600,1100",
        }
    }

    /// The window for `why_it_waited`'s request `cause`: the chain's two
    /// open spans need more height.
    fn window_for(self, cause: &str) -> &'static str {
        match (self, cause) {
            (Example::WhyItWaited, "chain") => "1600,1500",
            _ => self.window(),
        }
    }
}

/// Kills the child when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `cargo xtask jaeger [--example E] [--kernel K] [--ui ADDR] [--screenshot PNG]
/// [--request CAUSE]`.
pub fn command(args: &[String]) -> Result<u8> {
    let mut opts = VmOptions::default();
    let mut kernel_given = false;
    let mut example = Example::FileService;
    let mut ui = "127.0.0.1:16686".to_string();
    let mut screenshot: Option<PathBuf> = None;
    let mut request: Option<String> = None;
    let mut i = 0;
    while i < args.len() {
        if let Some(v) = opt_value(args, &mut i, "--kernel")? {
            opts.kernel = KernelSpec::parse(&v)?;
            kernel_given = true;
        } else if let Some(v) = opt_value(args, &mut i, "--example")? {
            example = Example::parse(&v)?;
        } else if let Some(v) = opt_value(args, &mut i, "--ui")? {
            ui = v;
        } else if let Some(v) = opt_value(args, &mut i, "--screenshot")? {
            screenshot = Some(std::env::current_dir()?.join(v));
        } else if let Some(v) = opt_value(args, &mut i, "--request")? {
            request = Some(v);
        } else {
            bail!("unknown jaeger option {}", args[i]);
        }
    }
    if kernel_given && example == Example::WhereTimeWent {
        bail!("--kernel picks the VM's kernel; `where_time_went` runs on the host's");
    }
    let cause = request.unwrap_or_else(|| CAUSES_REQUESTS[0].to_owned());
    if example != Example::WhyItWaited && cause != CAUSES_REQUESTS[0] {
        bail!("--request picks a request of `why_it_waited`");
    }
    if !CAUSES_REQUESTS.contains(&cause.as_str()) {
        bail!("--request {cause}: `why_it_waited`'s pictured requests are {CAUSES_REQUESTS:?}");
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
        crate::testbins::TESTS_PKG,
        "--example",
        example.name(),
        "--bin",
        "kspan-jaeger",
    ]))?;
    let debug = Metadata::load()?.target_dir.join("debug");

    let (jaeger, otlp, ui) = start_jaeger(&debug.join("kspan-jaeger"), &ui)?;
    eprintln!("xtask: the embedded Jaeger UI is at http://{ui}/");
    let env = vec![
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT".to_string(),
            format!("http://{otlp}"),
        ),
        (
            "OTEL_SERVICE_NAME".to_string(),
            example.service().to_string(),
        ),
    ];
    let shown = match example {
        Example::FileService => {
            opts.env = env;
            let service = debug.join("examples/file_service");
            let script = guest_script(&service, &repo_root());
            let status = vm::run_vm(&opts, &["sh".into(), "-c".into(), script], &repo_root())?;
            if status != 0 {
                bail!("the file service in the guest failed (exit status {status})");
            }
            Pick::Tagged(Tag::new("url.path", SHOWN))
        }
        Example::WhereTimeWent => {
            run_on_host(&debug.join("examples/where_time_went"), &env)?;
            // A machine busy with other work preempts the requests: the
            // picture shows the one whose trace has the fewest wait spans.
            Pick::Fewest(SCHED_ROOT)
        }
        Example::WhyItWaited => {
            opts.env = env;
            let service = debug.join("examples/why_it_waited");
            let cmd = [service.to_string_lossy().into_owned()];
            let status = vm::run_vm(&opts, &cmd, &repo_root())?;
            if status != 0 {
                bail!("why_it_waited in the guest failed (exit status {status})");
            }
            Pick::Tagged(Tag::new("app.request.cause", cause.clone()))
        }
    };

    match screenshot {
        Some(png) => {
            let trace = trace_of(&ui, example.service(), &shown)?;
            let url = format!("http://{ui}/trace/{trace}");
            match example {
                Example::WhyItWaited if cause == "chain" => {
                    let ids = chain_spans(&get_json(&format!("http://{ui}/api/traces/{trace}"))?)
                        .ok_or_else(|| {
                        anyhow!("trace {trace}: no wait with a chain of wake-ups")
                    })?;
                    eprintln!("xtask: the chain's spans {ids:?}");
                    crate::devtools::screenshot_with_spans_found(
                        &url,
                        &png,
                        example.window_for(&cause),
                        &ids,
                    )?;
                }
                Example::WhyItWaited => {
                    crate::devtools::screenshot_with_span_open(
                        &url,
                        &png,
                        example.window(),
                        CAUSES_OPENED,
                    )?;
                }
                _ => take_screenshot(&url, &png, example.window())?,
            }
            eprintln!("xtask: wrote {} (trace {trace})", png.display());
        }
        None => {
            eprintln!(
                "xtask: the traces are at http://{ui}/search?service={}; Ctrl-C stops",
                example.service()
            );
            // Until the collector is killed (Ctrl-C reaches both of us).
            let mut jaeger = jaeger;
            jaeger.0.wait()?;
        }
    }
    Ok(0)
}

/// Runs `where_time_went` here, with `env`, on a directory of its own
/// under the system's temporary directory (the host's is on a disk, so its
/// `O_DIRECT` reads block).
fn run_on_host(example: &Path, env: &[(String, String)]) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("kspan-where-time-went-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let status = Command::new(example)
        .arg(SCHED_REQUESTS.to_string())
        .arg(&dir)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("running {}", example.display()));
    let _ = std::fs::remove_dir_all(&dir);
    let status = status?;
    if !status.success() {
        bail!(
            "{} failed ({status}); the scheduler's account needs root or CAP_BPF and CAP_PERFMON",
            example.display()
        );
    }
    Ok(())
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

/// Which trace the screenshot shows.
enum Pick {
    /// The first with a span tagged so.
    Tagged(Tag),
    /// Of those with a span of this name, the one with the fewest spans.
    Fewest(&'static str),
}

impl std::fmt::Display for Pick {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pick::Tagged(tag) => write!(f, "with {} = {}", tag.key, tag.value),
            Pick::Fewest(name) => write!(f, "with a `{name}` span"),
        }
    }
}

/// A span tag.
struct Tag {
    key: &'static str,
    value: serde_json::Value,
}

impl Tag {
    fn new(key: &'static str, value: impl Into<serde_json::Value>) -> Tag {
        Tag {
            key,
            value: value.into(),
        }
    }
}

/// `GET url`, JSON.
fn get_json(url: &str) -> Result<serde_json::Value> {
    let curl = which("curl").ok_or_else(|| anyhow!("curl not found: run `cargo xtask deps`"))?;
    let out = Command::new(curl)
        .args(["-sf", url])
        .output()
        .context("running curl")?;
    if !out.status.success() {
        bail!("GET {url} failed ({})", out.status);
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("GET {url}: not JSON"))
}

/// The id of the trace of `service` that `pick` picks, from the UI's API.
fn trace_of(ui: &str, service: &str, pick: &Pick) -> Result<String> {
    let json = get_json(&format!(
        "http://{ui}/api/traces?service={service}&limit=100"
    ))?;
    let traces = json["data"].as_array().cloned().unwrap_or_default();
    find_trace(&traces, pick)
        .ok_or_else(|| anyhow!("no trace {pick} among the {} received", traces.len()))
}

/// The id of the trace among `traces` (the API's JSON) that `pick` picks.
fn find_trace(traces: &[serde_json::Value], pick: &Pick) -> Option<String> {
    let spans = |t: &serde_json::Value| t["spans"].as_array().cloned().unwrap_or_default();
    let tagged = |s: &serde_json::Value, tag: &Tag| {
        s["tags"].as_array().is_some_and(|tags| {
            tags.iter()
                .any(|t| t["key"] == tag.key && t["value"] == tag.value)
        })
    };
    let found = match pick {
        Pick::Tagged(tag) => traces
            .iter()
            .find(|t| spans(t).iter().any(|s| tagged(s, tag))),
        Pick::Fewest(name) => traces
            .iter()
            .filter(|t| spans(t).iter().any(|s| s["operationName"] == *name))
            .min_by_key(|t| spans(t).len()),
    };
    found.and_then(|t| t["traceID"].as_str().map(str::to_string))
}

/// In a trace (the API's answer for one), the spans of the chain of
/// wake-ups: the `chain` request's longest wait among those with the most
/// links, then the waits in the trace it links to (its waker's own last
/// wait); their span ids.
fn chain_spans(answer: &serde_json::Value) -> Option<Vec<String>> {
    let spans = answer["data"][0]["spans"].as_array()?;
    let id = |s: &serde_json::Value| s["spanID"].as_str().map(str::to_owned);
    let refs = |s: &serde_json::Value, kind: &str| -> Vec<String> {
        s["references"]
            .as_array()
            .map(|r| {
                r.iter()
                    .filter(|r| r["refType"] == kind)
                    .filter_map(|r| r["spanID"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let tagged = |s: &serde_json::Value| {
        s["tags"].as_array().is_some_and(|tags| {
            tags.iter()
                .any(|t| t["key"] == "app.request.cause" && t["value"] == "chain")
        })
    };
    let request = id(spans.iter().find(|s| tagged(s))?)?;
    let wait = spans
        .iter()
        .filter(|s| s["operationName"] == "off-cpu sleeping")
        .filter(|s| refs(s, "CHILD_OF").contains(&request))
        .filter(|s| !refs(s, "FOLLOWS_FROM").is_empty())
        .max_by_key(|s| (refs(s, "FOLLOWS_FROM").len(), s["duration"].as_u64()))?;
    let mut ids = vec![id(wait)?];
    for linked in refs(wait, "FOLLOWS_FROM") {
        let is_wait = spans.iter().any(|s| {
            id(s).as_deref() == Some(linked.as_str())
                && s["operationName"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("off-cpu "))
        });
        if is_wait {
            ids.push(linked);
        }
    }
    (ids.len() > 1).then_some(ids)
}

/// Headless Chromium's picture of `url` in a `window` (`W,H`), after the
/// page's requests settle.
fn take_screenshot(url: &str, png: &Path, window: &str) -> Result<()> {
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
            // Virtual time runs until the UI's API calls and rendering are done.
            "--virtual-time-budget=15000",
        ])
        .arg(format!("--window-size={window}"))
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

    #[test]
    fn examples_and_the_shown_trace() {
        assert_eq!(
            Example::parse("file_service").unwrap(),
            Example::FileService
        );
        assert_eq!(
            Example::parse("where_time_went").unwrap().service(),
            SCHED_SERVICE
        );
        assert_eq!(
            Example::parse("why_it_waited").unwrap().service(),
            CAUSES_SERVICE
        );
        assert!(Example::parse("quickstart").is_err());
        let traces: Vec<serde_json::Value> = serde_json::from_str(
            r#"[{"traceID": "a", "spans": [{"tags": [{"key": "app.request.number", "value": 1}]}]},
                {"traceID": "b", "spans": [{"tags": [{"key": "app.request.number", "value": 2}]}]},
                {"traceID": "c", "spans": [{"tags": [{"key": "url.path", "value": "/README.md"}]}]}]"#,
        )
        .unwrap();
        let find = |pick: Pick| find_trace(&traces, &pick);
        assert_eq!(
            find(Pick::Tagged(Tag::new("app.request.number", 2))).as_deref(),
            Some("b")
        );
        assert_eq!(
            find(Pick::Tagged(Tag::new("url.path", SHOWN))).as_deref(),
            Some("c")
        );
        assert_eq!(find(Pick::Tagged(Tag::new("app.request.number", 7))), None);
        let requests: Vec<serde_json::Value> = serde_json::from_str(
            r#"[{"traceID": "a", "spans": [{"operationName": "request"}, {"operationName": "w"}]},
                {"traceID": "b", "spans": [{"operationName": "request"}]},
                {"traceID": "c", "spans": [{"operationName": "other"}]}]"#,
        )
        .unwrap();
        assert_eq!(
            find_trace(&requests, &Pick::Fewest(SCHED_ROOT)).as_deref(),
            Some("b")
        );
        assert_eq!(find_trace(&requests, &Pick::Fewest("none")), None);
    }

    #[test]
    fn the_chains_spans() {
        let answer: serde_json::Value = serde_json::from_str(
            r#"{"data": [{"spans": [
                {"spanID": "r", "operationName": "request",
                 "tags": [{"key": "app.request.cause", "value": "chain"}]},
                {"spanID": "b", "operationName": "request", "references": [
                    {"refType": "CHILD_OF", "spanID": "r"}]},
                {"spanID": "bw", "operationName": "off-cpu blocked", "references": [
                    {"refType": "CHILD_OF", "spanID": "b"}]},
                {"spanID": "short", "operationName": "off-cpu sleeping", "duration": 9,
                 "references": [{"refType": "CHILD_OF", "spanID": "r"},
                                {"refType": "FOLLOWS_FROM", "spanID": "b"}]},
                {"spanID": "w", "operationName": "off-cpu sleeping", "duration": 5,
                 "references": [{"refType": "CHILD_OF", "spanID": "r"},
                                {"refType": "FOLLOWS_FROM", "spanID": "b"},
                                {"refType": "FOLLOWS_FROM", "spanID": "bw"}]}
            ]}]}"#,
        )
        .unwrap();
        assert_eq!(
            chain_spans(&answer),
            Some(vec!["w".to_owned(), "bw".to_owned()])
        );
        let mut none = answer.clone();
        none["data"][0]["spans"][0]["tags"][0]["value"] = "disk".into();
        assert_eq!(chain_spans(&none), None);
    }
}
