// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The file service, seen through the embedded Jaeger (run in the VM by
//! `cargo xtask test`): `kspan-jaeger` receives the service's spans over
//! OTLP/gRPC, and the test reads the traces back through the same HTTP API
//! the Jaeger UI draws from. Every request must be one trace whose root is
//! the request's server span, with the request's kernel calls (receive, open,
//! read, send) as its direct children, and nothing else.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use kspan_tests::{example, http_get};
use serde_json::Value;

const SERVICE: &str = "kspan-file-service";

/// A child process killed when dropped, so a failing assertion leaves
/// nothing running in the guest.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` with its stdout read line by line on a thread; returns it,
/// the lines, and the part of its first line after `marker`.
fn start(mut cmd: Command, marker: &str) -> (Running, mpsc::Receiver<String>, String) {
    let mut child = Running(
        cmd.stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}")),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let line = next_line(&lines, &format!("{cmd:?}"));
    let found = line
        .split_once(marker)
        .unwrap_or_else(|| panic!("{cmd:?} printed {line:?}, without `{marker}`"))
        .1
        .trim()
        .to_string();
    (child, lines, found)
}

/// The next line of `what`'s output, waiting at most [`LINE_TIMEOUT`].
fn next_line(lines: &mpsc::Receiver<String>, what: &str) -> String {
    lines
        .recv_timeout(LINE_TIMEOUT)
        .unwrap_or_else(|e| panic!("{what} printed no line within {LINE_TIMEOUT:?}: {e}"))
}

/// Long enough for kspan to attach four functions under emulation.
const LINE_TIMEOUT: Duration = Duration::from_secs(120);

/// A span of the Jaeger API's JSON, with what the checks need.
#[derive(Debug)]
struct JaegerSpan {
    name: String,
    span_id: String,
    parent: Option<String>,
    start_us: u64,
    end_us: u64,
    tags: HashMap<String, Value>,
}

impl JaegerSpan {
    fn parse(span: &Value) -> JaegerSpan {
        let text = |v: &Value| v.as_str().expect("a string field").to_string();
        let parent = span["references"]
            .as_array()
            .and_then(|refs| refs.iter().find(|r| r["refType"] == "CHILD_OF"))
            .map(|r| text(&r["spanID"]));
        let start_us = span["startTime"].as_u64().expect("startTime");
        JaegerSpan {
            name: text(&span["operationName"]),
            span_id: text(&span["spanID"]),
            parent,
            start_us,
            end_us: start_us + span["duration"].as_u64().expect("duration"),
            tags: span["tags"]
                .as_array()
                .expect("tags")
                .iter()
                .map(|t| (text(&t["key"]), t["value"].clone()))
                .collect(),
        }
    }

    fn int(&self, key: &str) -> i64 {
        self.tags[key]
            .as_i64()
            .unwrap_or_else(|| panic!("{} has no integer {key}: {self:?}", self.name))
    }

    fn str(&self, key: &str) -> &str {
        self.tags
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{} has no string {key}: {self:?}", self.name))
    }
}

fn api(ui: &str, path: &str) -> Value {
    let (status, body) = http_get(ui, path).unwrap();
    assert_eq!(
        status,
        200,
        "GET {path}: {}",
        String::from_utf8_lossy(&body)
    );
    serde_json::from_slice(&body).unwrap_or_else(|e| panic!("GET {path}: not JSON: {e}"))
}

#[test]
#[ignore = "needs a kernel with BPF trampolines; run by `cargo xtask test` in the VM"]
fn each_request_is_a_trace_of_its_kernel_calls_in_the_jaeger_api() {
    let root = std::env::temp_dir().join(format!("kspan-files-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    // Files of different sizes, so that reads and sends tell them apart; one
    // request asks for a file that is not there.
    let files: [(&str, Option<usize>); 3] = [
        ("small.txt", Some(300)),
        ("large.bin", Some(20_000)),
        ("missing.txt", None),
    ];
    for (name, size) in files {
        if let Some(size) = size {
            std::fs::write(root.join(name), vec![b'k'; size]).unwrap();
        }
    }

    let mut jaeger = Command::new(kspan_tests::binary("kspan-jaeger"));
    jaeger.args(["--otlp", "127.0.0.1:0", "--ui", "127.0.0.1:0"]);
    let (_jaeger, _jaeger_lines, addrs) = start(jaeger, "OTLP/gRPC on ");
    let (otlp, ui) = addrs
        .split_once(", Jaeger UI on http://")
        .unwrap_or_else(|| panic!("kspan-jaeger printed {addrs:?}"));
    let ui = ui.trim_end_matches('/').to_string();

    let mut service = Command::new(example("file_service"));
    service
        .args(["--root", root.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .args(["--requests", &files.len().to_string()])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{otlp}"))
        .env("OTEL_SERVICE_NAME", SERVICE);
    let (mut service, service_lines, addr) = start(service, "listening on http://");

    let mut response_len = HashMap::new();
    for (name, size) in files {
        let (status, body) = http_get(&addr, &format!("/{name}")).unwrap();
        match size {
            Some(size) => {
                assert_eq!((status, body.len()), (200, size), "GET /{name}");
            }
            None => assert_eq!(status, 404, "GET /{name}"),
        }
        response_len.insert(format!("/{name}"), body.len());
    }
    // It exits after the requests, having detached and flushed.
    let summary = next_line(&service_lines, "file_service");
    assert!(service.0.wait().unwrap().success(), "{summary}");
    // Every span kspan handed on, acknowledged by Jaeger's collector.
    let acknowledged = kspan_tests::assert_all_acknowledged(&summary) as usize;

    // What the UI lists: the service, its operation, one trace per request.
    assert_eq!(
        api(&ui, "/api/services")["data"],
        serde_json::json!([SERVICE])
    );
    // This API lists the operations of trace roots: the request span.
    assert_eq!(
        api(&ui, &format!("/api/services/{SERVICE}/operations"))["data"],
        serde_json::json!(["GET /{name}"])
    );
    let traces = api(&ui, &format!("/api/traces?service={SERVICE}&limit=100"))["data"].clone();
    let traces = traces.as_array().unwrap();
    assert_eq!(
        traces.len(),
        files.len(),
        "one trace per request, and no trace of calls made outside a request: {traces:#?}"
    );

    let mut seen = Vec::new();
    let mut kernel_spans = 0;
    for trace in traces {
        let trace_id = trace["traceID"].as_str().unwrap().to_string();
        // The trace page's own request gives the same trace.
        let by_id = api(&ui, &format!("/api/traces/{trace_id}"));
        let sorted = |spans: &Value| {
            let mut spans = spans.as_array().expect("spans").clone();
            spans.sort_by_key(|s| s["spanID"].as_str().unwrap_or_default().to_string());
            spans
        };
        assert_eq!(sorted(&by_id["data"][0]["spans"]), sorted(&trace["spans"]));

        let spans: Vec<JaegerSpan> = trace["spans"]
            .as_array()
            .unwrap()
            .iter()
            .map(JaegerSpan::parse)
            .collect();
        let roots: Vec<&JaegerSpan> = spans.iter().filter(|s| s.parent.is_none()).collect();
        assert_eq!(roots.len(), 1, "one root per trace: {spans:#?}");
        let request = roots[0];
        assert_eq!(request.name, "GET /{name}");
        let path = request.str("url.path").to_string();
        let (name, size) = files
            .iter()
            .find(|(n, _)| path == format!("/{n}"))
            .unwrap_or_else(|| panic!("a request for {path}, which the test did not make"));
        seen.push(path.clone());
        let status = if size.is_some() { 200 } else { 404 };
        assert_eq!(request.int("http.response.status_code"), status);

        kernel_spans += spans.len() - 1;
        let mut by_name: HashMap<&str, Vec<&JaegerSpan>> = HashMap::new();
        for span in spans.iter().filter(|s| s.parent.is_some()) {
            // Every kernel span is a direct child of the request span, and
            // lies inside it. The API gives microseconds, truncated from the
            // nanoseconds kspan exported (start, and duration separately):
            // an end can come out 1 us late, never more.
            assert_eq!(
                span.parent.as_deref(),
                Some(request.span_id.as_str()),
                "{path}: {span:?}"
            );
            assert!(
                span.start_us >= request.start_us && span.end_us <= request.end_us + 1,
                "{path}: {} [{}, {}] outside the request [{}, {}]",
                span.name,
                span.start_us,
                span.end_us,
                request.start_us,
                request.end_us
            );
            by_name.entry(span.name.as_str()).or_default().push(span);
        }
        let mut names: Vec<&str> = by_name.keys().copied().collect();
        names.sort_unstable();
        let expected: &[&str] = match size {
            Some(_) => &["do_sys_openat2", "tcp_recvmsg", "tcp_sendmsg", "vfs_read"],
            // Nothing to read: the open failed.
            None => &["do_sys_openat2", "tcp_recvmsg", "tcp_sendmsg"],
        };
        assert_eq!(names, expected, "{path}: the kernel calls of the request");

        // The request was received: some receive returned its bytes.
        assert!(
            by_name["tcp_recvmsg"]
                .iter()
                .any(|s| s.int("kernel.return_value") > 0),
            "{path}: {:?}",
            by_name["tcp_recvmsg"]
        );
        // The file was opened by the path asked for.
        let opens: Vec<&&JaegerSpan> = by_name["do_sys_openat2"]
            .iter()
            .filter(|s| s.str("kernel.arg.filename").ends_with(&path))
            .collect();
        assert_eq!(opens.len(), 1, "{path}: {:?}", by_name["do_sys_openat2"]);
        match size {
            Some(size) => {
                assert!(opens[0].int("kernel.return_value") >= 0);
                // Its reads name the file and add up to its size.
                let reads = &by_name["vfs_read"];
                assert!(reads.iter().all(|r| r.str("kernel.arg.file") == *name));
                let read: i64 = reads.iter().map(|r| r.int("kernel.return_value")).sum();
                assert_eq!(read, *size as i64, "{path}: {reads:?}");
            }
            None => {
                assert_eq!(opens[0].int("kernel.return_value"), -2);
                assert_eq!(opens[0].str("error.type"), "ENOENT");
            }
        }
        // The answer went out: the sends add up to head and body.
        let sent: i64 = by_name["tcp_sendmsg"]
            .iter()
            .map(|s| s.int("kernel.return_value"))
            .sum();
        assert!(
            sent > response_len[&path] as i64,
            "{path}: sent {sent} bytes for a {}-byte body",
            response_len[&path]
        );
    }
    // Every kernel span the collector acknowledged is in these traces: none
    // went to a trace of its own or under a parent the UI never received
    // (it lists only traces whose root arrived).
    assert_eq!(
        kernel_spans, acknowledged,
        "kernel spans in the traces vs acknowledged"
    );
    seen.sort();
    let mut asked: Vec<String> = files.iter().map(|(n, _)| format!("/{n}")).collect();
    asked.sort();
    assert_eq!(seen, asked);

    // The UI itself is served, and its trace page route gives the app.
    for page in [
        "/",
        &format!("/trace/{}", traces[0]["traceID"].as_str().unwrap()),
    ] {
        let (status, body) = http_get(&ui, page).unwrap();
        let body = String::from_utf8_lossy(&body);
        assert!(
            status < 400 && body.contains("<div id=\"jaeger-ui-root\""),
            "GET {page}: {status} {body:.300}"
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}
