// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A small HTTP file server whose requests carry their own kernel calls.
//!
//! `file_service --root DIR [--listen ADDR] [--requests N]`
//!
//! Every connection is one `GET /NAME` request (answered with `Connection:
//! close`), handled in its own tokio task inside a server span named
//! `GET /{name}`. Inside that span the task receives the request
//! (`tcp_recvmsg`), opens and reads `DIR/NAME` on a `spawn_blocking` thread
//! that carries the span along (`do_sys_openat2`, `vfs_read`), and sends the
//! answer (`tcp_sendmsg`). kspan makes each of those kernel calls a child of
//! the request's span, in its trace, so a trace viewer shows what every
//! request cost in the kernel.
//!
//! The service's other kernel calls (the OTLP exporter's own sends, the tokio
//! I/O driver) happen with no request span active. kspan is started with
//! [`kspan::Orphans::Drop`] so that they are counted, not exported: exporting
//! them would make the exporter's sends spans of their own, exported by more
//! sends.
//!
//! It prints `file_service: listening on http://ADDR` once kspan is attached
//! and the socket is bound (`--listen 127.0.0.1:0` picks a free port), and
//! runs until it has answered `N` requests, or until interrupted. It then
//! detaches, flushes, and prints what kspan exported, lost and dropped.

use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use kspan_examples::{init_telemetry, BoxError};
use opentelemetry::trace::TraceContextExt as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{field, Instrument};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Receiving the request.
#[kspan::kernel_span("tcp_recvmsg", mode = "fexit")]
fn tcp_recvmsg(len: usize, ret: i32) {}

/// Opening the file: the path the service asked for.
#[kspan::kernel_span("do_sys_openat2", mode = "fexit")]
fn do_sys_openat2(#[capture(user)] filename: &str, ret: i64) {}

/// Reading it: which file, how much was asked, how much came back.
#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn vfs_read(
    #[capture(path = "file->f_path.dentry->d_name.name")] file: &str,
    count: usize,
    ret: isize,
) {
}

/// Sending the answer.
#[kspan::kernel_span("tcp_sendmsg", mode = "fexit")]
fn tcp_sendmsg(size: usize, ret: i32) {}

/// The largest request head read; more is a bad request.
const MAX_HEAD: usize = 8192;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("file_service: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The command line.
#[derive(Debug)]
struct Args {
    root: PathBuf,
    listen: String,
    requests: Option<u64>,
}

const USAGE: &str = "usage: file_service --root DIR [--listen ADDR] [--requests N]";

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let (mut root, mut listen, mut requests) = (None, "127.0.0.1:8080".to_string(), None);
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value; {USAGE}"));
        match arg.as_str() {
            "--root" => root = Some(PathBuf::from(value("--root")?)),
            "--listen" => listen = value("--listen")?,
            "--requests" => {
                let v = value("--requests")?;
                requests = Some(
                    v.parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or(format!("--requests: `{v}` is not a positive number"))?,
                );
            }
            other => return Err(format!("unknown argument `{other}`; {USAGE}")),
        }
    }
    let root = root.ok_or(format!("--root is required; {USAGE}"))?;
    Ok(Args {
        root,
        listen,
        requests,
    })
}

async fn run() -> Result<(), BoxError> {
    let args = parse_args(std::env::args().skip(1))?;
    if !args.root.is_dir() {
        return Err(format!("--root {}: not a directory", args.root.display()).into());
    }
    let provider = init_telemetry("kspan-file-service")?;
    let kspan = kspan::Kspan::builder(&provider)
        .all_probes()
        .orphans(kspan::Orphans::Drop)
        .start()?;
    let listener = TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("--listen {}: {e}", args.listen))?;
    println!(
        "file_service: listening on http://{}",
        listener.local_addr()?
    );

    let mut tasks = tokio::task::JoinSet::new();
    let mut answered = 0u64;
    loop {
        if args.requests.is_some_and(|n| answered >= n) {
            break;
        }
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = accepted?;
                answered += 1;
                tasks.spawn(serve(stream, args.root.clone()));
            }
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    while let Some(done) = tasks.join_next().await {
        if let Err(err) = done? {
            eprintln!("file_service: a connection failed: {err}");
        }
    }

    let stats = kspan.shutdown().await?;
    println!(
        "file_service: answered {answered} requests; kspan exported {} spans, lost {}, \
         dropped {} calls made outside any request",
        stats.spans_exported,
        stats.lost(),
        stats.orphans_dropped
    );
    provider.shutdown()?;
    Ok(())
}

/// One connection, one request, one server span.
async fn serve(stream: TcpStream, root: PathBuf) -> std::io::Result<()> {
    let span = tracing::info_span!(
        "request",
        otel.name = "HTTP",
        otel.kind = "server",
        http.request.method = field::Empty,
        http.route = field::Empty,
        url.path = field::Empty,
        http.response.status_code = field::Empty,
    );
    answer(stream, root).instrument(span).await
}

async fn answer(mut stream: TcpStream, root: PathBuf) -> std::io::Result<()> {
    let span = tracing::Span::current();
    let (status, body) = match read_head(&mut stream).await? {
        Some(head) => match parse_request_line(&head) {
            Ok((method, path)) => {
                span.record("http.request.method", method);
                span.record("url.path", path);
                // The route, not the path, names the span: one name for every
                // file keeps the operation list of a trace viewer short.
                span.record("http.route", "/{name}");
                // Through the OpenTelemetry span itself: tracing-opentelemetry
                // applies a later `otel.name` only to spans not started yet,
                // and this one started when the task first entered it.
                span.context()
                    .span()
                    .update_name(format!("{method} /{{name}}"));
                if method != "GET" {
                    (405, b"only GET is served\n".to_vec())
                } else {
                    match file_under(&root, path) {
                        Some(file) => read_file(file).await,
                        None => (400, b"the path must name a file under the root\n".to_vec()),
                    }
                }
            }
            Err(why) => (400, format!("{why}\n").into_bytes()),
        },
        None => (
            400,
            b"the request head is incomplete or too long\n".to_vec(),
        ),
    };
    span.record("http.response.status_code", i64::from(status));
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Internal Server Error",
    };
    let mut response = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    response.extend_from_slice(&body);
    stream.write_all(&response).await?;
    stream.shutdown().await
}

/// The request head up to its blank line, or `None` when the peer closed
/// early or sent more than [`MAX_HEAD`] bytes.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || head.len() + n > MAX_HEAD {
            return Ok(None);
        }
        head.extend_from_slice(&chunk[..n]);
    }
    Ok(Some(String::from_utf8_lossy(&head).into_owned()))
}

/// `METHOD PATH HTTP/1.x` from the head's first line.
fn parse_request_line(head: &str) -> Result<(&str, &str), &'static str> {
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(method), Some(path), Some(version), None)
            if !method.is_empty() && path.starts_with('/') && version.starts_with("HTTP/1.") =>
        {
            Ok((method, path))
        }
        _ => Err("the request line is not `METHOD /PATH HTTP/1.x`"),
    }
}

/// `root/path` when `path` names something below `root` (no `..`, no
/// absolute components after the leading slash).
fn file_under(root: &Path, path: &str) -> Option<PathBuf> {
    let relative = Path::new(path.trim_start_matches('/'));
    let plain = relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    (plain && relative.components().next().is_some()).then(|| root.join(relative))
}

/// Reads the file on a blocking thread that enters the request's span, so
/// its `openat` and `read` calls are the request's children too.
async fn read_file(path: PathBuf) -> (u16, Vec<u8>) {
    let span = tracing::Span::current();
    let read = tokio::task::spawn_blocking(move || span.in_scope(|| std::fs::read(path))).await;
    match read {
        Ok(Ok(bytes)) => (200, bytes),
        Ok(Err(err)) if err.kind() == std::io::ErrorKind::NotFound => {
            (404, b"no such file\n".to_vec())
        }
        Ok(Err(err)) => (500, format!("{err}\n").into_bytes()),
        Err(join) => (
            500,
            format!("the reading thread failed: {join}\n").into_bytes(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines() {
        assert_eq!(
            parse_request_line("GET /a.txt HTTP/1.1\r\nhost: x\r\n\r\n"),
            Ok(("GET", "/a.txt"))
        );
        assert!(parse_request_line("GET a.txt HTTP/1.1\r\n").is_err());
        assert!(parse_request_line("GET /a HTTP/1.1 extra\r\n").is_err());
        assert!(parse_request_line("\r\n").is_err());
    }

    #[test]
    fn paths_stay_under_the_root() {
        let root = Path::new("/srv");
        assert_eq!(file_under(root, "/a/b.txt"), Some("/srv/a/b.txt".into()));
        assert_eq!(file_under(root, "/../etc/passwd"), None);
        assert_eq!(file_under(root, "/a/../../x"), None);
        assert_eq!(file_under(root, "/"), None);
        assert_eq!(
            file_under(root, "//etc/passwd"),
            Some("/srv/etc/passwd".into())
        );
    }

    #[test]
    fn arguments() {
        let parse = |s: &[&str]| parse_args(s.iter().map(|s| s.to_string()));
        let args = parse(&["--root", "/srv", "--requests", "3"]).unwrap();
        assert_eq!((args.root, args.requests), ("/srv".into(), Some(3)));
        assert!(parse(&[]).unwrap_err().contains("--root is required"));
        assert!(parse(&["--root", "/srv", "--requests", "0"])
            .unwrap_err()
            .contains("--requests"));
        assert!(parse(&["--nope"]).unwrap_err().contains("unknown argument"));
    }
}
