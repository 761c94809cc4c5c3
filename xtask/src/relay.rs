//! Carrying OTLP traffic from the guest to a receiver on the host's loopback.
//!
//! When the caller's `OTEL_EXPORTER_OTLP_ENDPOINT` (or a per-signal variant)
//! names a loopback host with a port, the VM gets a QEMU user network with
//! `restrict=on` (no route anywhere) and one `guestfwd` rule per port:
//!
//! ```text
//! guest app -> 127.0.0.1:PORT (guest)   `xtask __guest-relay`, wrapping the command
//!           -> 10.0.2.100:PORT          QEMU guestfwd, one host process per connection:
//!           -> `xtask __host-connect 127.0.0.1:PORT` (stdin/stdout) -> host receiver
//! ```
//!
//! Only loopback addresses and QEMU's internal guest address are involved.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// The loopback `(host, port)` pairs of the OTLP endpoint variables in `env`,
/// one per port.
pub fn loopback_endpoints(env: &[(String, String)]) -> Vec<(String, u16)> {
    let mut out: Vec<(String, u16)> = Vec::new();
    for (k, v) in env {
        if k.starts_with("OTEL_EXPORTER_OTLP_") && k.ends_with("ENDPOINT") {
            if let Some((host, port)) = parse_loopback(v) {
                if !out.iter().any(|(_, p)| *p == port) {
                    out.push((host, port));
                }
            }
        }
    }
    out
}

/// `http://127.0.0.1:4317/x` -> `("127.0.0.1", 4317)`; `None` unless the host
/// is a loopback address (or `localhost`) and a port is given.
pub fn parse_loopback(endpoint: &str) -> Option<(String, u16)> {
    let rest = endpoint
        .trim()
        .split_once("://")
        .map_or(endpoint.trim(), |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, p) = v6.split_once("]:")?;
        (format!("[{h}]"), p)
    } else {
        let (h, p) = authority.rsplit_once(':')?;
        (h.to_string(), p)
    };
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host == "[::1]"
        || host.parse::<Ipv4Addr>().is_ok_and(|a| a.is_loopback());
    loopback.then_some((host, port))
}

/// Copies `from` to `to` until EOF, then shuts down `to`'s write side.
fn pump(mut from: TcpStream, to: TcpStream) {
    let mut to_w = &to;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to_w.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

fn serve(listener: TcpListener, target: String) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let target = target.clone();
        std::thread::spawn(move || {
            let mut upstream = None;
            // QEMU answers the SYN itself; retry briefly in case it is not ready.
            for _ in 0..20 {
                match TcpStream::connect(&target) {
                    Ok(s) => {
                        upstream = Some(s);
                        break;
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
            let Some(up) = upstream else {
                eprintln!("kspan-vm relay: cannot reach {target}");
                return;
            };
            let _ = conn.set_nodelay(true);
            let _ = up.set_nodelay(true);
            let (Ok(conn2), Ok(up2)) = (conn.try_clone(), up.try_clone()) else {
                return;
            };
            let t = std::thread::spawn(move || pump(conn2, up2));
            pump(up, conn);
            let _ = t.join();
        });
    }
}

/// `xtask __guest-relay LISTEN TARGET [LISTEN TARGET...] [-- CMD ARGS...]`:
/// relays each `LISTEN` address to its `TARGET`; with a command, runs it once
/// the listeners are bound and exits with its status.
pub fn guest_relay(args: &[String]) -> Result<u8> {
    let split = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let (pairs, cmd) = (&args[..split], args.get(split + 1..).unwrap_or(&[]));
    if pairs.is_empty() || pairs.len() % 2 != 0 {
        bail!("usage: xtask __guest-relay LISTEN TARGET [LISTEN TARGET...] [-- CMD...]");
    }
    for pair in pairs.chunks(2) {
        let (listen, target) = (&pair[0], pair[1].clone());
        let l = TcpListener::bind(listen).with_context(|| format!("relay: binding {listen}"))?;
        let t = target.clone();
        std::thread::spawn(move || serve(l, t));
        // `localhost` may resolve to ::1 first: listen there too when possible.
        if let Some(port) = listen.strip_prefix("127.0.0.1:") {
            if let Ok(l6) = TcpListener::bind(format!("[::1]:{port}")) {
                std::thread::spawn(move || serve(l6, target));
            }
        }
    }
    let Some((prog, rest)) = cmd.split_first() else {
        loop {
            std::thread::park();
        }
    };
    let status = Command::new(prog)
        .args(rest)
        .status()
        .with_context(|| format!("cannot run {prog}"))?;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c).unwrap_or(255),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        _ => 255,
    })
}

/// `xtask __host-connect HOST:PORT`: run by QEMU per guest connection, with
/// the connection as stdin/stdout; relays it to `HOST:PORT` on the host.
pub fn host_connect(args: &[String]) -> Result<u8> {
    let [addr] = args else {
        bail!("usage: xtask __host-connect HOST:PORT");
    };
    let sock =
        TcpStream::connect(addr.as_str()).with_context(|| format!("connecting to {addr}"))?;
    let _ = sock.set_nodelay(true);
    let mut to_sock = sock.try_clone()?;
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to_sock.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to_sock.shutdown(Shutdown::Write);
    });
    let mut from_sock = sock;
    let mut stdout = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from_sock.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if stdout
                    .write_all(&buf[..n])
                    .and_then(|()| stdout.flush())
                    .is_err()
                {
                    break;
                }
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_only() {
        let p = |s: &str| parse_loopback(s);
        assert_eq!(p("http://127.0.0.1:4317"), Some(("127.0.0.1".into(), 4317)));
        assert_eq!(
            p("http://localhost:4318/v1/traces"),
            Some(("localhost".into(), 4318))
        );
        assert_eq!(p("https://[::1]:4317/"), Some(("[::1]".into(), 4317)));
        assert_eq!(p("127.0.0.2:9000"), Some(("127.0.0.2".into(), 9000)));
        assert_eq!(p("http://localhost"), None);
        assert_eq!(p("http://10.1.2.3:4317"), None);
        assert_eq!(p("http://collector.example:4317"), None);
        assert_eq!(p("http://[2001:db8::1]:4317"), None);
    }

    #[test]
    fn endpoints_from_env() {
        let env = vec![
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
                "http://127.0.0.1:4317".into(),
            ),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT".into(),
                "http://localhost:4317/v1/traces".into(),
            ),
            (
                "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT".into(),
                "http://localhost:4318".into(),
            ),
            ("OTEL_SERVICE_NAME".into(), "http://127.0.0.1:1".into()),
        ];
        assert_eq!(
            loopback_endpoints(&env),
            [
                ("127.0.0.1".to_string(), 4317),
                ("localhost".to_string(), 4318)
            ]
        );
    }
}
