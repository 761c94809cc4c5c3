// SPDX-License-Identifier: Apache-2.0 OR MIT
//! kprobe and kretprobe modes on a real kernel (run in the VM by `cargo xtask
//! test`): the same captures as the trampoline modes, and spans that nest with
//! trampoline spans because both share the per-task stack.

use kspan_tests::span_attr;
use std::io::Read;

use opentelemetry::trace::SpanId;
use opentelemetry_sdk::trace::SpanData;

#[kspan::kernel_span("vfs_read", mode = "kretprobe")]
fn vfs_read_kretprobe(
    #[capture(path = "file->f_path.dentry->d_name.name")] name: &str,
    count: usize,
    ret: isize,
) {
}

#[kspan::kernel_span("vfs_read", mode = "kprobe")]
fn vfs_read_kprobe(#[capture(path = "file->f_path.dentry->d_name.name")] name: &str, count: usize) {
}

#[kspan::kernel_span("ksys_read", mode = "kretprobe")]
fn ksys_read_kretprobe(count: usize, ret: isize) {}

#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn vfs_read_fexit(#[capture(path = "file->f_path.dentry->d_name.name")] name: &str, ret: isize) {}

async fn traced(probes: &[&'static kspan::Probe], file: &str) -> Vec<SpanData> {
    let path = std::env::temp_dir().join(file);
    std::fs::write(&path, vec![b'k'; 700]).unwrap();
    kspan_tests::traced_on_this_thread(probes, "needs a kernel with kprobes", || {
        let mut f = std::fs::File::open(&path).unwrap();
        let mut buf = [0u8; 512];
        while f.read(&mut buf).unwrap() > 0 {}
    })
    .await
}

fn reading<'a>(spans: &'a [SpanData], file: &str) -> Vec<&'a SpanData> {
    spans
        .iter()
        .filter(|s| span_attr(s, "kernel.arg.name") == Some(file.to_owned().into()))
        .collect()
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with kprobes (CONFIG_KPROBES); run by `cargo xtask test` in the VM"]
async fn kretprobe_spans_carry_arguments_fields_and_the_return_value() {
    let spans = traced(&[&vfs_read_kretprobe], "kspan-kretprobe.txt").await;
    let reads = reading(&spans, "kspan-kretprobe.txt");
    let rets: Vec<_> = reads
        .iter()
        .map(|s| span_attr(s, "kernel.return_value"))
        .collect();
    assert_eq!(
        rets,
        [Some(512i64.into()), Some(188i64.into()), Some(0i64.into())],
        "{spans:#?}"
    );
    for s in reads {
        assert_eq!(span_attr(s, "kernel.arg.count"), Some(512i64.into()));
        assert!(s.start_time < s.end_time);
    }
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with kprobes (CONFIG_KPROBES); run by `cargo xtask test` in the VM"]
async fn kprobe_mode_gives_instants_with_arguments() {
    let spans = traced(&[&vfs_read_kprobe], "kspan-kprobe.txt").await;
    let reads = reading(&spans, "kspan-kprobe.txt");
    assert_eq!(reads.len(), 3, "{spans:#?}");
    for s in reads {
        assert_eq!(s.start_time, s.end_time, "an instant");
        assert_eq!(span_attr(s, "kernel.arg.count"), Some(512i64.into()));
        assert_eq!(span_attr(s, "kernel.return_value"), None);
    }
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with kprobes and trampolines; run by `cargo xtask test` in the VM"]
async fn kretprobe_and_fexit_spans_nest() {
    let spans = traced(&[&ksys_read_kretprobe, &vfs_read_fexit], "kspan-mixed.txt").await;
    let inner = reading(&spans, "kspan-mixed.txt");
    assert_eq!(inner.len(), 3, "{spans:#?}");
    for i in inner {
        let parent = spans
            .iter()
            .find(|s| s.span_context.span_id() == i.parent_span_id)
            .unwrap_or_else(|| panic!("the parent of {i:?}"));
        assert_eq!(parent.name, "ksys_read");
        assert_ne!(i.parent_span_id, SpanId::INVALID);
        assert_eq!(parent.span_context.trace_id(), i.span_context.trace_id());
        assert!(parent.start_time <= i.start_time && i.end_time <= parent.end_time);
        assert_eq!(
            span_attr(parent, "kernel.return_value"),
            span_attr(i, "kernel.return_value")
        );
    }
}

#[kspan::kernel_span(syscall = "openat")]
fn openat(#[capture(user)] filename: &str, ret: i64) {}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a stock kernel (syscall tracepoints are also tested on the host); run by `cargo xtask test` in the VM"]
async fn syscall_sources_work_on_the_vm_kernels_too() {
    let (provider, exporter) = kspan_tests::in_memory_provider();
    let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&openat)
        .start()
        .unwrap();
    let missing = std::env::temp_dir().join("kspan-vm-missing.txt");
    assert!(std::fs::File::open(&missing).is_err());
    kspan.shutdown().await.unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let failed: Vec<&SpanData> = spans
        .iter()
        .filter(|s| {
            span_attr(s, "kernel.arg.filename") == Some(missing.display().to_string().into())
        })
        .collect();
    assert_eq!(failed.len(), 1, "{spans:#?}");
    assert_eq!(
        failed[0].status,
        opentelemetry::trace::Status::error("ENOENT")
    );
}

#[kspan::kernel_span("ksys_read", mode = "kretprobe")]
fn ksys_read_shared(count: usize, ret: isize) {}

#[kspan::kernel_span("vfs_read", mode = "kretprobe")]
fn vfs_read_shared(count: usize, ret: isize) {}

/// `ksys_read` and `vfs_read` have the same settings here (`count` is the
/// third parameter of both): one program pair serves both, each link's
/// cookie saying which function fired; on a kernel with kprobe.multi, one
/// link per direction attaches both.
#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with kprobes; run by `cargo xtask test` in the VM"]
async fn kprobes_of_the_same_settings_share_programs_and_keep_their_names() {
    let path = std::env::temp_dir().join("kspan-shared.txt");
    std::fs::write(&path, vec![b's'; 300]).unwrap();
    let (provider, exporter) = kspan_tests::in_memory_provider();
    let kspan = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&ksys_read_shared)
        .probe(&vfs_read_shared)
        .start()
        .unwrap();
    let plan = kspan.attach_plan().to_vec();
    let caps = kspan::KernelCapabilities::get();
    for decision in &plan {
        assert_eq!(decision.chosen, kspan::Hook::Kretprobe, "{plan:?}");
        assert_eq!(
            decision.multi,
            caps.kprobe_multi.is_available(),
            "kprobe.multi exactly where the kernel has it: {plan:?}"
        );
    }
    let mut f = std::fs::File::open(&path).unwrap();
    let mut buf = [0u8; 256];
    let mut rets = Vec::new();
    loop {
        let n = f.read(&mut buf).unwrap();
        rets.push(n as i64);
        if n == 0 {
            break;
        }
    }
    let stats = kspan.shutdown().await.unwrap();
    assert_eq!(stats.lost(), 0, "{stats:?}");
    let tid = kspan_tests::gettid();
    let spans: Vec<SpanData> = exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| span_attr(s, "kspan.tid") == Some(tid.into()))
        .filter(|s| span_attr(s, "kernel.arg.count") == Some(256i64.into()))
        .collect();
    let inner: Vec<&SpanData> = spans.iter().filter(|s| s.name == "vfs_read").collect();
    let outer: Vec<&SpanData> = spans.iter().filter(|s| s.name == "ksys_read").collect();
    assert_eq!((inner.len(), outer.len()), (3, 3), "{spans:#?}");
    for i in inner {
        let parent = outer
            .iter()
            .find(|o| o.span_context.span_id() == i.parent_span_id)
            .unwrap_or_else(|| panic!("vfs_read inside a ksys_read span: {spans:#?}"));
        assert_eq!(
            span_attr(parent, "kernel.return_value"),
            span_attr(i, "kernel.return_value")
        );
    }
    let mut got: Vec<i64> = outer
        .iter()
        .map(|s| match span_attr(s, "kernel.return_value") {
            Some(opentelemetry::Value::I64(v)) => v,
            other => panic!("{other:?}"),
        })
        .collect();
    got.sort_unstable();
    rets.sort_unstable();
    assert_eq!(got, rets, "one ksys_read span per read, its return value");
}

#[kspan::kernel_span("vfs_read")]
fn vfs_read_auto(#[capture(path = "file->f_path.dentry->d_name.name")] name: &str, ret: isize) {}

async fn auto_plan(
    disable: Option<kspan::Mechanism>,
    file: &str,
) -> (Vec<kspan::AttachDecision>, Vec<SpanData>) {
    let path = std::env::temp_dir().join(file);
    std::fs::write(&path, b"auto").unwrap();
    let (provider, exporter) = kspan_tests::in_memory_provider();
    let mut builder = kspan::Kspan::builder(&provider)
        .orphans(kspan::Orphans::NewTrace)
        .probe(&vfs_read_auto);
    if let Some(m) = disable {
        builder = builder.disable(m);
    }
    let kspan = builder.start().unwrap();
    let plan = kspan.attach_plan().to_vec();
    std::fs::read(&path).unwrap();
    kspan.shutdown().await.unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    (
        plan,
        spans
            .into_iter()
            .filter(|s| span_attr(s, "kernel.arg.name") == Some(file.to_owned().into()))
            .collect(),
    )
}

/// `auto` takes trampolines, but on a kernel that preempts inside their
/// programs (sid's 7.2, or `preempt=full`), where it takes kprobes and
/// says why.
#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with BPF trampolines; run by `cargo xtask test` in the VM"]
async fn auto_prefers_trampolines_where_programs_run_to_the_end() {
    let (plan, spans) = auto_plan(None, "kspan-auto.txt").await;
    assert_eq!(plan.len(), 1);
    let caps = kspan::KernelCapabilities::get();
    let preemption = &caps.preemption;
    eprintln!("preemption: {preemption}; {plan:?}");
    if preemption.preempts_programs() {
        // The cheapest kretprobe attachment the kernel has.
        let attachment = if caps.kprobe_sessions.is_available() {
            kspan::Attachment::KprobeSession
        } else if caps.kprobe_multi.is_available() {
            kspan::Attachment::KprobeMulti
        } else {
            kspan::Attachment::Kprobes
        };
        assert_eq!(
            (plan[0].requested, plan[0].chosen, plan[0].attachment),
            (kspan::Mode::Auto, kspan::Hook::Kretprobe, attachment)
        );
        let [(hook, why)] = &plan[0].rejected[..] else {
            panic!("one hook passed over: {plan:?}");
        };
        assert_eq!(*hook, kspan::Hook::Fexit);
        assert!(
            why.starts_with(&format!(
                "passed over for kprobes: this kernel's preemption is {preemption}"
            )),
            "{why}"
        );
    } else {
        assert_eq!(
            (plan[0].requested, plan[0].chosen),
            (kspan::Mode::Auto, kspan::Hook::Fexit)
        );
        assert!(plan[0].rejected.is_empty(), "{plan:?}");
    }
    assert_eq!(spans.len(), 2, "two reads: 4 bytes, then 0");
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a kernel with kprobes; run by `cargo xtask test` in the VM"]
async fn auto_falls_back_to_kretprobes_and_says_why() {
    let (plan, spans) = auto_plan(
        Some(kspan::Mechanism::Trampolines),
        "kspan-auto-fallback.txt",
    )
    .await;
    assert_eq!(plan[0].chosen, kspan::Hook::Kretprobe, "{plan:?}");
    assert_eq!(plan[0].rejected.len(), 1);
    assert_eq!(plan[0].rejected[0].0, kspan::Hook::Fexit);
    assert!(
        plan[0].rejected[0]
            .1
            .contains("disabled by KspanBuilder::disable"),
        "{plan:?}"
    );
    let rets: Vec<_> = spans
        .iter()
        .map(|s| span_attr(s, "kernel.return_value"))
        .collect();
    assert_eq!(rets.len(), 2, "{spans:#?}");
    assert!(rets.contains(&Some(4i64.into())) && rets.contains(&Some(0i64.into())));
}

#[test]
#[ignore = "needs a stock kernel; run by `cargo xtask test` in the VM"]
fn capabilities_of_the_stock_kernels() {
    let caps = kspan::KernelCapabilities::get();
    assert!(caps.btf.is_available(), "{caps:?}");
    assert!(caps.privileges.is_available(), "{caps:?}");
    assert!(caps.trampolines.is_available(), "{caps:?}");
    assert!(caps.kprobes.is_available(), "{caps:?}");
    assert!(caps.tracepoints.is_available(), "{caps:?}");
    // KERNEL-LAB.md: Debian 12's 6.1 has no CONFIG_FPROBE (so no
    // kprobe.multi, and no kprobe.session, 6.10+); 6.12 and sid's 7.2 have
    // both; fsession is 7.0+, fsession.multi 7.2+.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok());
    let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    let at_least = |m: u32, n: u32| version >= (m, n);
    // arm64: Debian 13's kernel is built without CONFIG_FPROBE (no
    // kprobe.multi, so no kprobe.session), sid's with it; the
    // multi-function trampolines are the x86-64 JIT's alone.
    let arm64 = cfg!(target_arch = "aarch64");
    let fprobe = !arm64 || at_least(7, 0);
    for (name, feature, expected) in [
        ("kprobe_multi", &caps.kprobe_multi, at_least(6, 2) && fprobe),
        (
            "kprobe_sessions",
            &caps.kprobe_sessions,
            at_least(6, 10) && fprobe,
        ),
        (
            "trampoline_sessions",
            &caps.trampoline_sessions,
            at_least(7, 0),
        ),
        (
            "trampoline_multi",
            &caps.trampoline_multi,
            at_least(7, 2) && !arm64,
        ),
        ("context_records", &caps.context_records, at_least(6, 13)),
        // What the verifier takes, probed by loading programs (KERNEL-LAB:
        // Debian 11's 5.10 lacks all of these).
        ("fetch_atomics", &caps.fetch_atomics, at_least(5, 12)),
        (
            "tracing current_task_btf",
            &caps.tracing_programs.current_task_btf,
            at_least(5, 11),
        ),
        (
            "tracing task_storage",
            &caps.tracing_programs.task_storage,
            at_least(5, 11),
        ),
        (
            "tracing func_args",
            &caps.tracing_programs.func_args,
            at_least(5, 17),
        ),
        (
            "tracing loops",
            &caps.tracing_programs.loops,
            at_least(5, 17),
        ),
        (
            "tracing task_pt_regs",
            &caps.tracing_programs.task_pt_regs,
            at_least(5, 15),
        ),
        (
            "kprobe attach_cookies",
            &caps.kprobe_programs.attach_cookies,
            at_least(5, 15),
        ),
        (
            "tracepoint loops",
            &caps.tracepoint_programs.loops,
            at_least(5, 17),
        ),
    ] {
        assert_eq!(
            feature.is_available(),
            expected,
            "{name} on {release}: {caps:?}"
        );
    }
    // The preemption model, from debugfs (the VM runs tests as root with
    // debugfs mounted): Debian 12's and 13's default `voluntary`, sid's
    // 7.2 `lazy`, unless the kernel was booted with `preempt=`.
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap();
    let booted = cmdline
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("preempt="))
        .next_back();
    let model = caps.preemption.model.map(|m| m.as_str());
    // Sid's arm64 7.2 is built `full` (`SMP PREEMPT`).
    let expected = match booted {
        Some(mode) => mode,
        None if at_least(7, 0) && arm64 => "full",
        None if at_least(7, 0) => "lazy",
        None => "voluntary",
    };
    assert_eq!(model, Some(expected), "{}", caps.preemption);
    assert_eq!(
        caps.legacy_programs().is_none(),
        at_least(5, 17),
        "{:?}",
        caps.legacy_programs()
    );
    // Debian's arm64 kernels, and kernels before 5.12, have no dynamic
    // preemption, so no debugfs file: the version string tells.
    if !arm64 && at_least(5, 12) {
        assert_eq!(
            caps.preemption.source,
            kspan::kernel::preemption::DEBUGFS_PREEMPT
        );
    }
}
