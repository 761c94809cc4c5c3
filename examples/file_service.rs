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
//! runs until it has accepted `N` connections and answered them, or until
//! interrupted (a second interrupt stops waiting for open connections; a
//! client gets 10 s to send its request). It then detaches, flushes, shuts
//! the tracer provider down, and prints kspan's settled figures: spans
//! handed to the pipeline, acknowledged by the collector, lost by reason
//! (with the collector down, the export failures), and the calls dropped
//! outside any request.
//!
//! Files are served from below `--root` only: no `..`, no symbolic link
//! leading out (403), nothing but regular files (404 for a directory or a
//! FIFO). Methods other than GET get 405, malformed requests 400.

use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use kspan_examples::{init_telemetry, BoxError};
use opentelemetry::trace::TraceContextExt as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::{field, Instrument};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Receiving the request.
#[kspan::kernel_span("tcp_recvmsg")]
fn tcp_recvmsg(len: usize, ret: i32) {}

/// Opening the file: the path the service asked for.
#[kspan::kernel_span("do_sys_openat2")]
fn do_sys_openat2(#[capture(user)] filename: &str, ret: i64) {}

/// Reading it: which file, how much was asked, how much came back.
#[kspan::kernel_span("vfs_read")]
fn vfs_read(
    #[capture(path = "file->f_path.dentry->d_name.name")] file: &str,
    count: usize,
    ret: isize,
) {
}

/// Sending the answer.
#[kspan::kernel_span("tcp_sendmsg")]
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
    let telemetry = init_telemetry("kspan-file-service")?;
    let kspan = kspan::Kspan::builder(&telemetry.provider)
        .pipeline(&telemetry.pipeline)
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
    let mut accepted = 0u64;
    // One signal future for the whole run: a SIGINT between two loop passes
    // is not lost, and a second one ends the wait for open connections.
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let mut stopping = false;
    while args.requests.is_none_or(|n| accepted < n) {
        tokio::select! {
            conn = listener.accept() => match conn {
                Ok((stream, _)) => {
                    accepted += 1;
                    tasks.spawn(serve(stream, args.root.clone()));
                }
                // A failed accept (a connection reset before it was taken,
                // out of descriptors) ends that connection, not the service.
                Err(err) => eprintln!("file_service: accept failed: {err}"),
            },
            _ = &mut interrupted => {
                stopping = true;
                break;
            }
        }
    }
    loop {
        tokio::select! {
            done = tasks.join_next() => match done {
                None => break,
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(err))) => eprintln!("file_service: a connection failed: {err}"),
                Some(Err(join)) => eprintln!("file_service: a connection task failed: {join}"),
            },
            // Connections time out on their own (READ_TIMEOUT); a second
            // interrupt does not wait for them.
            _ = tokio::signal::ctrl_c(), if stopping => tasks.abort_all(),
            _ = &mut interrupted, if !stopping => {
                stopping = true;
                tasks.abort_all();
            }
        }
    }

    // Reached on every way out of the loops, so no span is left unflushed.
    let settled = telemetry.shut_down(kspan).await?;
    println!(
        "file_service: accepted {accepted} connections; {} calls made outside any request \
         not recorded; kspan: {}",
        settled.stats.orphans_dropped, settled.stats
    );
    settled.result()
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

/// How long a client may take to send its request head.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The methods OpenTelemetry's HTTP conventions name; others are `_OTHER`.
const KNOWN_METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
];

async fn answer(mut stream: TcpStream, root: PathBuf) -> std::io::Result<()> {
    let span = tracing::Span::current();
    let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(head) => head?,
        Err(_) => Err(Status::RequestTimeout),
    };
    // A head that was not read to its end leaves input behind, and closing
    // with unread input resets the connection, maybe before the client
    // read the answer: that input is drained after answering.
    let unread_input = head.is_err();
    let (status, body) = match head.and_then(|head| {
        let (method, target) = parse_request_line(&head)?;
        // The query is not part of the file's name.
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        let known = KNOWN_METHODS.contains(&method);
        span.record("http.request.method", if known { method } else { "_OTHER" });
        span.record("url.path", path);
        span.record("http.route", "/{name}");
        if known {
            // The route, not the path, names the span: one name for every
            // file keeps a trace viewer's operation list short. Through the
            // OpenTelemetry span itself: tracing-opentelemetry applies a
            // later `otel.name` only to spans not started yet, and this one
            // started when the task first entered it.
            span.context()
                .span()
                .update_name(format!("{method} /{{name}}"));
        }
        if method != "GET" {
            return Err(Status::MethodNotAllowed);
        }
        file_under(&root, path).ok_or(Status::BadRequest(
            "the path must name a file under the root",
        ))
    }) {
        Ok(file) => match read_file(file, root).await {
            Ok(bytes) => (200, bytes),
            Err(status) => status.response(),
        },
        Err(status) => status.response(),
    };
    span.record("http.response.status_code", i64::from(status));
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        _ => "Internal Server Error",
    };
    let mut response = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    response.extend_from_slice(&body);
    stream.write_all(&response).await?;
    stream.shutdown().await?;
    if unread_input {
        let mut sink = [0u8; 4096];
        let drain = async { while stream.read(&mut sink).await.is_ok_and(|n| n > 0) {} };
        let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
    }
    Ok(())
}

/// Why a request gets no file.
#[derive(Debug, PartialEq)]
enum Status {
    /// 400: the request is malformed; why.
    BadRequest(&'static str),
    /// 403: outside the root through a link, or unreadable.
    Forbidden,
    /// 404: no such regular file.
    NotFound,
    /// 405: not a GET.
    MethodNotAllowed,
    /// 408: the head did not arrive within [`READ_TIMEOUT`].
    RequestTimeout,
    /// 500: anything else, with the error.
    Internal(String),
}

impl Status {
    /// The status code and a one-line body saying why.
    fn response(self) -> (u16, Vec<u8>) {
        let (code, why) = match self {
            Status::BadRequest(why) => (400, why.to_string()),
            Status::Forbidden => (403, "the file may not be read".into()),
            Status::NotFound => (404, "no such file".into()),
            Status::MethodNotAllowed => (405, "only GET is served".into()),
            Status::RequestTimeout => (408, "the request head did not come in time".into()),
            Status::Internal(why) => (500, why),
        };
        (code, format!("{why}\n").into_bytes())
    }
}

/// The request head up to its blank line (`\r\n\r\n`, or bare `\n\n`).
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Result<String, Status>> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = head_end(&head) {
            head.truncate(end);
            return Ok(Ok(String::from_utf8_lossy(&head).into_owned()));
        }
        if head.len() > MAX_HEAD {
            return Ok(Err(Status::BadRequest("the request head is over 8 KiB")));
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Err(Status::BadRequest("the request head is incomplete")));
        }
        head.extend_from_slice(&chunk[..n]);
    }
}

/// Where the head's blank line starts, if it has one.
fn head_end(bytes: &[u8]) -> Option<usize> {
    let crlf = bytes.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = bytes.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `METHOD PATH HTTP/1.x` from the head's first line.
fn parse_request_line(head: &str) -> Result<(&str, &str), Status> {
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(method), Some(path), Some(version), None)
            if !method.is_empty() && path.starts_with('/') && version.starts_with("HTTP/1.") =>
        {
            Ok((method, path))
        }
        _ => Err(Status::BadRequest(
            "the request line is not `METHOD /PATH HTTP/1.x`",
        )),
    }
}

/// `root/path` when `path` names something below `root` by its words (no
/// `..`, nothing absolute after the leading slashes). Symbolic links are
/// checked when the file is opened ([`read_file`]).
fn file_under(root: &Path, path: &str) -> Option<PathBuf> {
    let relative = Path::new(path.trim_start_matches('/'));
    let plain = relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    (plain && relative.components().next().is_some()).then(|| root.join(relative))
}

/// Reads a regular file under `root` on a blocking thread that enters the
/// request's span, so its `openat` and `read` calls are the request's
/// children too. The file is checked after it is open, so that nothing can
/// swap it between check and read: a link leading out of the root is
/// forbidden; anything but a regular file (a directory, a FIFO, which
/// `O_NONBLOCK` keeps the open from waiting on) is not found.
async fn read_file(path: PathBuf, root: PathBuf) -> Result<Vec<u8>, Status> {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;

    let span = tracing::Span::current();
    let read = tokio::task::spawn_blocking(move || {
        span.in_scope(|| {
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&path)?;
            if !file.metadata()?.is_file() {
                return Ok(Err(Status::NotFound));
            }
            let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
            if !real.starts_with(root.canonicalize()?) {
                return Ok(Err(Status::Forbidden));
            }
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).map(|_| Ok(bytes))
        })
    })
    .await;
    match read {
        Ok(Ok(result)) => result,
        Ok(Err(err)) => Err(match err.kind() {
            std::io::ErrorKind::NotFound => Status::NotFound,
            std::io::ErrorKind::PermissionDenied => Status::Forbidden,
            _ => Status::Internal(err.to_string()),
        }),
        Err(join) => Err(Status::Internal(format!(
            "the reading thread failed: {join}"
        ))),
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
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nh: x\r\n\r\nrest"), Some(20));
        assert_eq!(head_end(b"GET / HTTP/1.1\nh: x\n\n"), Some(19));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nh: x\r\n"), None);
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

    #[tokio::test]
    async fn only_regular_files_under_the_root_are_read() {
        let base = std::env::temp_dir().join(format!("file-service-{}", std::process::id()));
        let root = base.join("root");
        std::fs::create_dir_all(root.join("dir")).unwrap();
        std::fs::write(root.join("a.txt"), b"hello").unwrap();
        std::fs::write(base.join("secret"), b"no").unwrap();
        std::os::unix::fs::symlink(base.join("secret"), root.join("out")).unwrap();
        std::os::unix::fs::symlink("a.txt", root.join("in")).unwrap();
        let fifo = std::ffi::CString::new(root.join("fifo").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);

        let read = |name: &str| read_file(root.join(name), root.clone());
        assert_eq!(read("a.txt").await, Ok(b"hello".to_vec()));
        assert_eq!(
            read("in").await,
            Ok(b"hello".to_vec()),
            "a link inside the root"
        );
        assert_eq!(
            read("out").await,
            Err(Status::Forbidden),
            "a link out of it"
        );
        assert_eq!(read("dir").await, Err(Status::NotFound));
        assert_eq!(read("fifo").await, Err(Status::NotFound), "not waited on");
        assert_eq!(read("missing").await, Err(Status::NotFound));
        std::fs::remove_dir_all(base).unwrap();
    }

    /// The status line `answer` gives `request` over a loopback connection.
    async fn status_line(root: &Path, request: &[u8]) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let served = tokio::spawn(answer(server, root.to_path_buf()));
        client.write_all(request).await.unwrap();
        client.shutdown().await.unwrap();
        let mut response = Vec::new();
        client.read_to_end(&mut response).await.unwrap();
        served.await.unwrap().unwrap();
        let response = String::from_utf8_lossy(&response).into_owned();
        response.lines().next().unwrap_or_default().to_string()
    }

    #[tokio::test]
    async fn requests_get_the_status_they_deserve() {
        let root = std::env::temp_dir().join(format!("file-service-http-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("a.txt"), b"hello").unwrap();
        for (request, status) in [
            (
                &b"GET /a.txt HTTP/1.1\r\nhost: x\r\n\r\n"[..],
                "HTTP/1.1 200 OK",
            ),
            (b"GET /a.txt?v=1 HTTP/1.1\n\n", "HTTP/1.1 200 OK"),
            (b"GET /b.txt HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found"),
            (
                b"GET /../a.txt HTTP/1.1\r\n\r\n",
                "HTTP/1.1 400 Bad Request",
            ),
            (
                b"POST /a.txt HTTP/1.1\r\n\r\n",
                "HTTP/1.1 405 Method Not Allowed",
            ),
            (b"hello\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        ] {
            assert_eq!(
                status_line(&root, request).await,
                status,
                "{}",
                String::from_utf8_lossy(request)
            );
        }
        let mut long = b"GET /a.txt HTTP/1.1\r\nx: ".to_vec();
        long.resize(MAX_HEAD + 2048, b'x');
        assert_eq!(status_line(&root, &long).await, "HTTP/1.1 400 Bad Request");
        std::fs::remove_dir_all(root).unwrap();
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
