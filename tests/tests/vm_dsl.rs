// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The capture DSL on a real kernel (run in the VM by `cargo xtask test`):
//! fields through pointers, kernel and user strings, errno returns, network
//! fields, enums by name, bounded strings. Every value is compared with what
//! the test itself did.

use kspan_tests::{hex, span_attr};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use opentelemetry::trace::Status;
use opentelemetry_sdk::trace::SpanData;

const NEEDS: &str = "needs a kernel with BPF trampolines (fentry/fexit)";

#[kspan::kernel_span("vfs_read")]
fn vfs_read_name(
    #[capture(path = "file->f_path.dentry->d_name.name")] name: &str,
    #[capture(path = "file->f_path.dentry->d_iname")] iname: [u8; 16],
    #[capture(user, len = "ret", max = 64)] buf: &[u8],
    count: usize,
    ret: isize,
    span: &mut kspan::KernelSpan,
) {
    check_name(name, iname, buf, count, ret, span);
}

/// The same on kernels where the dentry's inline name is `d_shortname`
/// (7.x), a union whose `string` member is the bytes.
#[kspan::kernel_span("vfs_read")]
fn vfs_read_name_short(
    #[capture(path = "file->f_path.dentry->d_name.name")] name: &str,
    #[capture(path = "file->f_path.dentry->d_shortname.string")] iname: [u8; 16],
    #[capture(user, len = "ret", max = 64)] buf: &[u8],
    count: usize,
    ret: isize,
    span: &mut kspan::KernelSpan,
) {
    check_name(name, iname, buf, count, ret, span);
}

/// The `vfs_read_name` probe of this kernel's `struct dentry`.
fn vfs_read_name_probe() -> &'static kspan::Probe {
    let btf = kspan::kernel::read_btf(std::path::Path::new(kspan::KERNEL_BTF)).unwrap();
    let dentry = btf
        .type_named("struct dentry")
        .expect("struct dentry in BTF");
    let members = btf.composite(dentry).expect("a struct").members;
    if members.iter().any(|m| m.name == "d_iname") {
        &vfs_read_name
    } else {
        &vfs_read_name_short
    }
}

fn check_name(
    name: &str,
    iname: [u8; 16],
    buf: &[u8],
    count: usize,
    ret: isize,
    span: &mut kspan::KernelSpan,
) {
    // The handler sees the same values as the attributes, typed.
    if name == "dsl-name.txt" {
        span.set_attribute(kspan::KeyValue::new(
            "test.handler.buf_len",
            buf.len() as i64,
        ));
        span.set_attribute(kspan::KeyValue::new(
            "test.handler.iname_ok",
            iname.starts_with(b"dsl-name.txt\0"),
        ));
    }
    if ret == 0 {
        span.set_name("vfs_read eof");
    }
    let _ = count;
}

#[kspan::kernel_span("vfs_read")]
fn vfs_read_short_name(#[capture(path = "file->f_path.dentry->d_name.name", max = 16)] name: &str) {
}

#[kspan::kernel_span("do_sys_openat2")]
fn do_sys_openat2(
    #[capture(user)] filename: &str,
    #[capture(path = "how->flags")] flags: u64,
    ret: i64,
) {
}

#[kspan::kernel_span("tcp_sendmsg")]
fn tcp_sendmsg(
    size: usize,
    #[capture(path = "sk->__sk_common.skc_dport")] dport: u16,
    #[capture(path = "sk->sk_socket->state")] state: u32,
    ret: i32,
) {
}

async fn traced(probes: &[&'static kspan::Probe], work: impl FnOnce()) -> Vec<SpanData> {
    kspan_tests::traced_on_this_thread(probes, NEEDS, work).await
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kspan-dsl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn read_all(path: &PathBuf) {
    let mut f = std::fs::File::open(path).unwrap();
    let mut buf = [0u8; 512];
    while f.read(&mut buf).unwrap() > 0 {}
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines (fentry/fexit); run by `cargo xtask test` in the VM"]
async fn vfs_read_captures_the_file_name_through_pointers() {
    let path = scratch("dsl-name.txt");
    let content: Vec<u8> = (0..700u32).map(|i| b'a' + (i % 26) as u8).collect();
    std::fs::write(&path, &content).unwrap();
    let spans = traced(&[vfs_read_name_probe()], || read_all(&path)).await;
    let reads: Vec<&SpanData> = spans
        .iter()
        .filter(|s| span_attr(s, "kernel.arg.name") == Some("dsl-name.txt".into()))
        .collect();
    // 700 bytes in 512-byte reads: 512, 188, 0.
    let rets: Vec<_> = reads
        .iter()
        .map(|s| span_attr(s, "kernel.return_value"))
        .collect();
    assert_eq!(
        rets,
        [Some(512i64.into()), Some(188i64.into()), Some(0i64.into())],
        "{spans:#?}"
    );
    for (s, (offset, got)) in reads.iter().zip([(0usize, 512usize), (512, 188), (700, 0)]) {
        assert_eq!(span_attr(s, "kernel.arg.count"), Some(512i64.into()));
        assert_eq!(span_attr(s, "kernel.arg.name.truncated"), None);
        // The user buffer, read at exit with the return value as its length,
        // capped at 64 bytes and marked when cut.
        let kept = got.min(64);
        assert_eq!(
            span_attr(s, "kernel.arg.buf"),
            Some(hex(&content[offset..offset + kept]).into())
        );
        assert_eq!(
            span_attr(s, "kernel.arg.buf.truncated"),
            (got > 64).then_some(true.into())
        );
        assert_eq!(
            span_attr(s, "test.handler.buf_len"),
            Some((kept as i64).into())
        );
        assert_eq!(span_attr(s, "test.handler.iname_ok"), Some(true.into()));
        let iname = match span_attr(s, "kernel.arg.iname") {
            Some(opentelemetry::Value::String(v)) => v.to_string(),
            other => panic!("iname: {other:?}"),
        };
        assert!(iname.starts_with(&hex(b"dsl-name.txt\0")), "{iname}");
    }
    assert_eq!(reads[2].name, "vfs_read eof", "renamed by the handler");
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines (fentry/fexit); run by `cargo xtask test` in the VM"]
async fn a_string_longer_than_its_bound_is_cut_and_marked() {
    let long = format!("{}.txt", "n".repeat(200));
    let path = scratch(&long);
    std::fs::write(&path, b"short").unwrap();
    let spans = traced(&[&vfs_read_short_name], || read_all(&path)).await;
    let cut: Vec<&SpanData> = spans
        .iter()
        .filter(|s| span_attr(s, "kernel.arg.name") == Some(long[..16].to_owned().into()))
        .collect();
    assert_eq!(
        cut.len(),
        2,
        "two reads of the file (5 bytes, then 0): {spans:#?}"
    );
    for s in cut {
        assert_eq!(span_attr(s, "kernel.arg.name.truncated"), Some(true.into()));
    }
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines (fentry/fexit); run by `cargo xtask test` in the VM"]
async fn openat_captures_the_user_file_name_flags_and_errno() {
    let present = scratch("dsl-open.txt");
    std::fs::write(&present, b"here").unwrap();
    let missing = scratch("dsl-missing.txt");
    let spans = traced(&[&do_sys_openat2], || {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc_o_nofollow())
            .open(&present)
            .unwrap();
        drop(f);
        assert!(std::fs::File::open(&missing).is_err());
    })
    .await;
    let by_name = |p: &PathBuf| {
        spans
            .iter()
            .filter(|s| span_attr(s, "kernel.arg.filename") == Some(p.display().to_string().into()))
            .collect::<Vec<_>>()
    };
    let ok = by_name(&present);
    assert_eq!(ok.len(), 1, "{spans:#?}");
    let flags = match span_attr(ok[0], "kernel.arg.flags") {
        Some(opentelemetry::Value::I64(v)) => v,
        other => panic!("flags: {other:?}"),
    };
    // std opens with O_RDONLY | O_CLOEXEC; the openat syscall adds O_LARGEFILE
    // (0o100000 in the kernel) on 64-bit.
    assert_eq!(
        flags & !0o100000,
        i64::from(libc_o_nofollow() | 0o2000000),
        "O_NOFOLLOW | O_CLOEXEC: {flags:#o}"
    );
    assert_eq!(ok[0].status, Status::Unset);
    assert!(
        matches!(span_attr(ok[0], "kernel.return_value"), Some(opentelemetry::Value::I64(fd)) if fd >= 3)
    );

    let failed = by_name(&missing);
    assert_eq!(failed.len(), 1, "{spans:#?}");
    assert_eq!(failed[0].status, Status::error("ENOENT"));
    assert_eq!(span_attr(failed[0], "error.type"), Some("ENOENT".into()));
    assert_eq!(
        span_attr(failed[0], "kernel.return_value"),
        Some((-2i64).into())
    );
}

fn libc_o_nofollow() -> i32 {
    0o400000
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines (fentry/fexit); run by `cargo xtask test` in the VM"]
async fn tcp_sendmsg_captures_size_port_and_socket_state_by_name() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let payload = vec![7u8; 1234];
    let spans = traced(&[&tcp_sendmsg], || {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.write_all(&payload).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        let mut got = vec![0u8; payload.len()];
        peer.read_exact(&mut got).unwrap();
    })
    .await;
    assert_eq!(spans.len(), 1, "one send on this thread: {spans:#?}");
    let s = &spans[0];
    assert_eq!(span_attr(s, "kernel.arg.size"), Some(1234i64.into()));
    assert_eq!(span_attr(s, "kernel.return_value"), Some(1234i64.into()));
    let dport = match span_attr(s, "kernel.arg.dport") {
        Some(opentelemetry::Value::I64(v)) => v as u16,
        other => panic!("dport: {other:?}"),
    };
    assert_eq!(
        u16::from_be(dport),
        port,
        "skc_dport is in network byte order"
    );
    assert_eq!(
        span_attr(s, "kernel.arg.state"),
        Some("SS_CONNECTED".into())
    );
}
