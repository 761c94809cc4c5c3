// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Program copies on a real kernel (run in the VM by `cargo xtask test`, on
//! every kernel of the matrix). kspan loads the first function of each BPF
//! program through libbpf and every further one as a copy of it; a copy
//! that the kernel refuses is loaded through libbpf again, which the
//! function's attach decision lists among its fallbacks. A probe set of
//! mixed captures (the four probes of `examples/file_service`: plain
//! arguments, a user string, a field path) makes copies whose settings
//! reach code the first function's did not (a `bpf_loop` callback, which
//! the verifier accepts only with the program's BTF `func_info`). Every
//! attachment the kernel has, trampolines and kprobes, must load them all
//! as copies, and the captures must be read.

use std::io::{Read, Write};
use std::path::PathBuf;

use kspan::{Attachment, KernelCapabilities, Mechanism};
use kspan_tests::span_attr;
use opentelemetry_sdk::trace::SpanData;

#[kspan::kernel_span("tcp_recvmsg", mode = "fexit")]
fn tcp_recvmsg(len: usize, ret: i32) {}

#[kspan::kernel_span("do_sys_openat2", mode = "fexit")]
fn do_sys_openat2(#[capture(user)] filename: &str, ret: i64) {}

#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn vfs_read(
    #[capture(path = "file->f_path.dentry->d_name.name")] file: &str,
    count: usize,
    ret: isize,
) {
}

#[kspan::kernel_span("tcp_sendmsg", mode = "fexit")]
fn tcp_sendmsg(size: usize, ret: i32) {}

#[kspan::kernel_span("tcp_recvmsg", mode = "kretprobe")]
fn tcp_recvmsg_kretprobe(len: usize, ret: i32) {}

#[kspan::kernel_span("do_sys_openat2", mode = "kretprobe")]
fn do_sys_openat2_kretprobe(#[capture(user)] filename: &str, ret: i64) {}

#[kspan::kernel_span("vfs_read", mode = "kretprobe")]
fn vfs_read_kretprobe(
    #[capture(path = "file->f_path.dentry->d_name.name")] file: &str,
    count: usize,
    ret: isize,
) {
}

#[kspan::kernel_span("tcp_sendmsg", mode = "kretprobe")]
fn tcp_sendmsg_kretprobe(size: usize, ret: i32) {}

/// The file this thread opens and reads.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kspan-copies-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("kspan-copies.txt")
}

/// Starts kspan with `probes` and `disabled` turned off, asserts that no
/// function fell back from its copy (or anything else) and that each was
/// attached through `want`, then opens and reads [`scratch`] and sends 1,234
/// bytes over loopback TCP and receives them, all on this thread: each
/// probe's span must be there with its captures.
async fn every_copy_loads(
    probes: &[&'static kspan::Probe],
    disabled: &[Mechanism],
    want: Attachment,
) {
    let path = scratch();
    std::fs::write(&path, vec![b'c'; 300]).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (provider, exporter) = kspan_tests::in_memory_provider();
    let mut builder = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probes(probes.iter().copied());
    for &m in disabled {
        builder = builder.disable(m);
    }
    let kspan = builder
        .start()
        .unwrap_or_else(|e| panic!("needs trampolines and kprobes: {e}"));
    let plan = kspan.attach_plan().to_vec();
    for d in &plan {
        println!(
            "{disabled:?} off: {} through {}, fallbacks {:?}",
            d.function, d.attachment, d.fallbacks
        );
    }
    assert_eq!(plan.len(), probes.len(), "{plan:#?}");
    assert!(
        plan.iter().all(|d| d.fallbacks.is_empty()),
        "with {disabled:?} off, a function fell back (a copy the kernel refused is \
         loaded through libbpf): {plan:#?}"
    );
    assert!(
        plan.iter().all(|d| d.attachment == want),
        "with {disabled:?} off, expected {want}: {plan:#?}"
    );

    let mut f = std::fs::File::open(&path).unwrap();
    let mut buf = [0u8; 512];
    while f.read(&mut buf).unwrap() > 0 {}
    let payload = vec![7u8; 1234];
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(&payload).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    let mut got = vec![0u8; payload.len()];
    peer.read_exact(&mut got).unwrap();

    let stats = kspan.shutdown().await.expect("kspan shuts down");
    assert_eq!(stats.lost(), 0, "{stats:?}");
    let tid = kspan_tests::gettid();
    let spans: Vec<SpanData> = exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| span_attr(s, "kspan.tid") == Some(tid.into()))
        .collect();
    let has = |name: &str, key: &str, value: opentelemetry::Value| {
        spans
            .iter()
            .any(|s| s.name == name && span_attr(s, key) == Some(value.clone()))
    };
    let filename = path.display().to_string();
    assert!(
        has("do_sys_openat2", "kernel.arg.filename", filename.into()),
        "the open's user string, with {disabled:?} off: {spans:#?}"
    );
    assert!(
        has("vfs_read", "kernel.arg.file", "kspan-copies.txt".into()),
        "the read's field path, with {disabled:?} off: {spans:#?}"
    );
    assert!(
        has("tcp_sendmsg", "kernel.arg.size", 1234i64.into()),
        "the send's size, with {disabled:?} off: {spans:#?}"
    );
    assert!(
        has("tcp_recvmsg", "kernel.arg.len", 1234i64.into()),
        "the receive's length, with {disabled:?} off: {spans:#?}"
    );
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines; run by `cargo xtask test` in the VM"]
async fn mixed_captures_load_as_copies_through_every_trampoline_attachment() {
    let caps = KernelCapabilities::get();
    let probes: [&'static kspan::Probe; 4] =
        [&tcp_recvmsg, &do_sys_openat2, &vfs_read, &tcp_sendmsg];
    let session = caps.trampoline_sessions.is_available();
    let multi = caps.trampoline_multi.is_available();
    let cheapest = if multi {
        Attachment::FsessionMulti
    } else if session {
        Attachment::Fsession
    } else {
        Attachment::FentryFexit
    };
    every_copy_loads(&probes, &[], cheapest).await;
    if multi {
        let want = if session {
            Attachment::Fsession
        } else {
            Attachment::FentryFexit
        };
        every_copy_loads(&probes, &[Mechanism::MultiLinks], want).await;
    }
    if session {
        every_copy_loads(&probes, &[Mechanism::Sessions], Attachment::FentryFexit).await;
    }
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with kprobes; run by `cargo xtask test` in the VM"]
async fn mixed_captures_load_as_copies_through_every_kprobe_attachment() {
    let caps = KernelCapabilities::get();
    let probes: [&'static kspan::Probe; 4] = [
        &tcp_recvmsg_kretprobe,
        &do_sys_openat2_kretprobe,
        &vfs_read_kretprobe,
        &tcp_sendmsg_kretprobe,
    ];
    let session = caps.kprobe_sessions.is_available();
    let multi = caps.kprobe_multi.is_available();
    let cheapest = if session {
        Attachment::KprobeSession
    } else if multi {
        Attachment::KprobeMulti
    } else {
        Attachment::Kprobes
    };
    every_copy_loads(&probes, &[], cheapest).await;
    if multi {
        every_copy_loads(&probes, &[Mechanism::MultiLinks], Attachment::Kprobes).await;
    }
    if session {
        every_copy_loads(&probes, &[Mechanism::Sessions], Attachment::KprobeMulti).await;
    }
}
