// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The attachments under one hook give the same spans (run in the VM by
//! `cargo xtask test`, on every kernel of the matrix): fsession.multi,
//! fsession and the fentry+fexit pair for fexit; kprobe.session,
//! kprobe.multi and per-function kprobes for kretprobe. Each run traces the
//! same reads with one attachment forced by turning the better ones off
//! (`KspanBuilder::disable`), and the spans, reduced to what does not
//! change from run to run (names, nesting, attributes but the thread,
//! status), must be equal. Each run also checks that the attach plan chose
//! the cheapest attachment the kernel has.

use std::io::Read;

use kspan::{Attachment, KernelCapabilities, Mechanism};
use opentelemetry::trace::Status;
use opentelemetry_sdk::trace::SpanData;

#[kspan::kernel_span("ksys_read", mode = "fexit")]
fn ksys_read_fexit(count: usize, ret: isize) {}

#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn vfs_read_fexit(count: usize, ret: isize) {}

/// Nothing captured or refused: a plain program serves it where
/// fsession.multi attaches it (see `kspan::bpf::config::is_plain`).
#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn vfs_read_plain(ret: isize) {}

#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn vfs_read_named(#[capture(path = "file->f_path.dentry->d_name.name")] name: &str, ret: isize) {}

#[kspan::kernel_span("ksys_read", mode = "kretprobe")]
fn ksys_read_kretprobe(count: usize, ret: isize) {}

#[kspan::kernel_span("vfs_read", mode = "kretprobe")]
fn vfs_read_kretprobe(count: usize, ret: isize) {}

/// A span as every attachment must make it: name, its parent's name,
/// attributes (but the thread id), status.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Seen {
    name: String,
    parent: Option<String>,
    attributes: Vec<String>,
    error: bool,
}

/// The spans of this thread's reads of a 700-byte file with a 256-byte
/// buffer (256, 256, 188, 0 bytes) and of one read of a closed
/// descriptor (EBADF), traced by `probes` with `disabled` turned off
/// (spans told apart from other reads by the buffer's size or the file's
/// name, or as children of such spans); the attachment of each probe; and
/// the names of the BPF programs loaded.
async fn reads(
    probes: &[&'static kspan::Probe],
    disabled: &[Mechanism],
) -> (Vec<Seen>, Vec<Attachment>, Vec<String>) {
    let path = std::env::temp_dir().join("kspan-sessions.txt");
    std::fs::write(&path, vec![b's'; 700]).unwrap();
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
    let attachments = kspan.attach_plan().iter().map(|d| d.attachment).collect();
    let programs = kspan_tests::bpf_programs()
        .into_iter()
        .map(|(name, verified)| {
            println!("program {name}: {verified} instructions verified");
            name
        })
        .collect();
    let mut f = std::fs::File::open(&path).unwrap();
    let mut buf = [0u8; 256];
    while f.read(&mut buf).unwrap() > 0 {}
    // SAFETY: a read of a descriptor that is not open (fails with EBADF).
    let bad = unsafe { libc::read(-1, buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(bad, -1);
    let stats = kspan.shutdown().await.expect("kspan shuts down");
    assert_eq!(stats.lost(), 0, "{stats:?}");
    let tid = kspan_tests::gettid();
    let spans: Vec<SpanData> = exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| kspan_tests::span_attr(s, "kspan.tid") == Some(tid.into()))
        // The thread's own reads only: glibc reads a /proc file on it once
        // (whether a thread heap may shrink) when one first does.
        .collect();
    let own = |s: &SpanData| {
        kspan_tests::span_attr(s, "kernel.arg.count") == Some(256i64.into())
            || kspan_tests::span_attr(s, "kernel.arg.name") == Some("kspan-sessions.txt".into())
    };
    let parents: Vec<_> = spans
        .iter()
        .filter(|s| own(s))
        .map(|s| s.span_context.span_id())
        .collect();
    let spans: Vec<SpanData> = spans
        .into_iter()
        .filter(|s| own(s) || parents.contains(&s.parent_span_id))
        .collect();
    let name_of = |id| {
        spans
            .iter()
            .find(|s| s.span_context.span_id() == id)
            .map(|s| s.name.to_string())
    };
    let mut seen: Vec<Seen> = spans
        .iter()
        .map(|s| {
            let mut attributes: Vec<String> = s
                .attributes
                .iter()
                .filter(|kv| kv.key.as_str() != "kspan.tid")
                .map(|kv| format!("{}={}", kv.key, kv.value))
                .collect();
            attributes.sort();
            Seen {
                name: s.name.to_string(),
                parent: name_of(s.parent_span_id),
                attributes,
                error: matches!(s.status, Status::Error { .. }),
            }
        })
        .collect();
    seen.sort();
    (seen, attachments, programs)
}

/// An attachment, whether the kernel has it, and the mechanisms it needs.
type Rung = (Attachment, bool, &'static [Mechanism]);

/// The cheapest of `ladder` the kernel has, with `disabled` turned off.
fn expected(ladder: &[Rung], disabled: &[Mechanism]) -> Attachment {
    ladder
        .iter()
        .find(|(_, available, needs)| *available && !needs.iter().any(|m| disabled.contains(m)))
        .map(|(a, _, _)| *a)
        .expect("the last attachment needs nothing")
}

/// The spans of [`reads`] traced by a `ksys_read` and a `vfs_read` probe: 5
/// `ksys_read` (four of the file, one EBADF, the only error), 4 `vfs_read`
/// under them, each with its return value.
fn assert_the_reads(seen: &[Seen]) {
    let count = |name: &str| seen.iter().filter(|s| s.name == name).count();
    assert_eq!((count("ksys_read"), count("vfs_read")), (5, 4), "{seen:#?}");
    assert!(
        seen.iter().filter(|s| s.name == "vfs_read").all(|s| {
            s.parent.as_deref() == Some("ksys_read")
                && s.attributes
                    .iter()
                    .any(|a| a.starts_with("kernel.return_value="))
        }),
        "{seen:#?}"
    );
    assert_eq!(
        seen.iter().filter(|s| s.error).count(),
        1,
        "EBADF: {seen:#?}"
    );
}

/// Traces the reads with `probes` (a `ksys_read` and a `vfs_read` probe)
/// once with nothing off, then with each of `turned_off`: every run takes
/// the cheapest attachment of `ladder` left, and gives the same spans: 5
/// `ksys_read` (four of the file, one EBADF), 4 `vfs_read` under them.
async fn same_spans_through_every_attachment(
    probes: &[&'static kspan::Probe],
    ladder: &[Rung],
    turned_off: &[Mechanism],
) {
    let mut runs = Vec::new();
    let none: &[Mechanism] = &[];
    for disabled in std::iter::once(none).chain(turned_off.chunks(1)) {
        let (seen, attachments, _) = reads(probes, disabled).await;
        let want = expected(ladder, disabled);
        assert_eq!(
            attachments,
            vec![want; probes.len()],
            "the cheapest attachment the kernel has, with {disabled:?} off"
        );
        runs.push((disabled, seen));
    }
    let (_, first) = &runs[0];
    assert_the_reads(first);
    for (disabled, seen) in &runs[1..] {
        assert_eq!(seen, first, "with {disabled:?} off");
    }
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with trampolines; run by `cargo xtask test` in the VM"]
async fn trampoline_spans_are_the_same_through_every_attachment() {
    let caps = KernelCapabilities::get();
    println!("fsession: {}", caps.trampoline_sessions);
    println!("fsession.multi: {}", caps.trampoline_multi);
    let ladder: [Rung; 3] = [
        (
            Attachment::FsessionMulti,
            caps.trampoline_multi.is_available(),
            &[Mechanism::Sessions, Mechanism::MultiLinks],
        ),
        (
            Attachment::Fsession,
            caps.trampoline_sessions.is_available(),
            &[Mechanism::Sessions],
        ),
        (Attachment::FentryFexit, true, &[]),
    ];
    same_spans_through_every_attachment(
        &[&ksys_read_fexit, &vfs_read_fexit],
        &ladder,
        &[Mechanism::MultiLinks, Mechanism::Sessions],
    )
    .await;
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with trampolines; run by `cargo xtask test` in the VM"]
async fn a_plain_program_gives_the_spans_of_the_full_one() {
    let caps = KernelCapabilities::get();
    // `vfs_read` captures nothing: on fsession.multi kernels its link has
    // the plain program, `ksys_read` (which captures `count`) the full one;
    // with sessions off both are fentry + fexit pairs.
    let probes: [&'static kspan::Probe; 2] = [&ksys_read_fexit, &vfs_read_plain];
    let (plain, attachments, programs) = reads(&probes, &[]).await;
    let (full, _, full_programs) = reads(&probes, &[Mechanism::Sessions]).await;
    let is_plain = |name: &String| name.starts_with("kspan_plain_");
    if caps.trampoline_multi.is_available() {
        assert_eq!(attachments, [Attachment::FsessionMulti; 2]);
        assert_eq!(
            programs.iter().filter(|n| is_plain(n)).count(),
            1,
            "{programs:?}"
        );
    }
    assert!(!full_programs.iter().any(is_plain), "{full_programs:?}");
    assert_the_reads(&plain);
    assert_eq!(plain, full);
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with trampolines; run by `cargo xtask test` in the VM"]
async fn a_capture_reads_the_same_through_a_session() {
    let caps = KernelCapabilities::get();
    let (with, attachments, _) = reads(&[&vfs_read_named], &[]).await;
    let (without, _, _) = reads(&[&vfs_read_named], &[Mechanism::Sessions]).await;
    if caps.trampoline_sessions.is_available() {
        assert_ne!(attachments, [Attachment::FentryFexit]);
    }
    assert_eq!(with.len(), 4, "{with:#?}");
    assert!(
        with.iter().all(|s| s
            .attributes
            .contains(&"kernel.arg.name=kspan-sessions.txt".to_owned())),
        "{with:#?}"
    );
    assert_eq!(with, without);
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with kprobes; run by `cargo xtask test` in the VM"]
async fn kretprobe_spans_are_the_same_through_every_attachment() {
    let caps = KernelCapabilities::get();
    println!("kprobe.session: {}", caps.kprobe_sessions);
    let ladder: [Rung; 3] = [
        (
            Attachment::KprobeSession,
            caps.kprobe_sessions.is_available(),
            &[Mechanism::Sessions, Mechanism::MultiLinks],
        ),
        (
            Attachment::KprobeMulti,
            caps.kprobe_multi.is_available(),
            &[Mechanism::MultiLinks],
        ),
        (Attachment::Kprobes, true, &[]),
    ];
    same_spans_through_every_attachment(
        &[&ksys_read_kretprobe, &vfs_read_kretprobe],
        &ladder,
        &[Mechanism::Sessions, Mechanism::MultiLinks],
    )
    .await;
}
