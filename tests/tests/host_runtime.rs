// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Runtime errors checked in-process on the host: everything that fails
//! before or instead of a trampoline load.

use opentelemetry_sdk::trace::SdkTracerProvider;

#[kspan::kernel_span("vfs_read", mode = "fexit")]
fn vfs_read(count: usize, ret: isize) {}

#[kspan::kernel_span("vfs_read")]
fn vfs_read_auto(count: usize, ret: isize) {}

#[kspan::kernel_span("vfs_raed")]
fn typo(count: usize) {}

#[kspan::kernel_span("vfs_read")]
fn wrong_name(size: usize) {}

#[kspan::kernel_span("vfs_read")]
fn wrong_type(count: i32) {}

fn provider() -> SdkTracerProvider {
    SdkTracerProvider::builder()
        .with_id_generator(kspan::KernelSpanIds::default())
        .build()
}

fn start_err(builder: kspan::KspanBuilder) -> String {
    builder.start().expect_err("start must fail").to_string()
}

#[tokio::test]
async fn no_kernel_btf() {
    let err = start_err(
        kspan::Kspan::builder(&provider())
            .probe(&vfs_read)
            .btf_path("/nonexistent/vmlinux"),
    );
    assert!(
        err.contains("cannot read the kernel's BTF at /nonexistent/vmlinux"),
        "{err}"
    );
    assert!(err.contains("CONFIG_DEBUG_INFO_BTF"), "{err}");
}

#[tokio::test]
async fn unknown_function_suggests_the_real_one() {
    let err = start_err(kspan::Kspan::builder(&provider()).probe(&typo));
    assert!(err.contains("unknown kernel function `vfs_raed`"), "{err}");
    assert!(err.contains("did you mean `vfs_read`"), "{err}");
    assert!(
        err.contains("host_runtime.rs:"),
        "points at the annotation: {err}"
    );
}

#[tokio::test]
async fn unknown_parameter_lists_the_real_ones() {
    let err = start_err(kspan::Kspan::builder(&provider()).probe(&wrong_name));
    assert!(err.contains("`vfs_read` has no parameter `size`"), "{err}");
    assert!(err.contains("`count: size_t`"), "{err}");
}

#[tokio::test]
async fn incompatible_type_names_both() {
    let err = start_err(kspan::Kspan::builder(&provider()).probe(&wrong_type));
    assert!(
        err.contains("`count` is `size_t` in the kernel but `i32` (signed 32-bit)"),
        "{err}"
    );
}

#[tokio::test]
async fn no_probes_and_duplicates() {
    let err = start_err(kspan::Kspan::builder(&provider()));
    assert!(err.contains("no probes"), "{err}");
    let err = start_err(
        kspan::Kspan::builder(&provider())
            .probe(&vfs_read)
            .probe(&wrong_type),
    );
    assert!(err.contains("two probes trace `vfs_read`"), "{err}");
}

#[tokio::test]
async fn all_probes_takes_every_annotation_and_refuses_two_on_one_function() {
    // This program annotates `vfs_read` three times and `vfs_raed` once.
    let err = kspan::Kspan::builder(&provider())
        .orphans(kspan::Orphans::NewTrace)
        .all_probes()
        .start()
        .unwrap_err();
    match &err {
        kspan::Error::Plan(kspan::PlanError::DuplicateProbe {
            function,
            first,
            second,
        }) => {
            assert_eq!(function, "vfs_read");
            assert!(first.contains("host_runtime.rs:") && second.contains("host_runtime.rs:"));
            assert_ne!(first, second, "{err}");
        }
        other => panic!("expected DuplicateProbe, got {other}"),
    }
}

#[test]
fn outside_tokio_start_goes_as_far_as_the_kernel() {
    // The consumer is a thread of kspan's own: no runtime is needed, so the
    // first refusal is the host kernel's (trampolines: EPERM).
    let err = start_err(kspan::Kspan::builder(&provider()).probe(&vfs_read));
    assert!(
        err.contains("cannot load the fexit program") && err.contains("EPERM"),
        "{err}"
    );
}

#[tokio::test]
async fn host_kernel_refuses_fexit_with_eperm() {
    let err = kspan::Kspan::builder(&provider())
        .orphans(kspan::Orphans::NewTrace)
        .probe(&vfs_read)
        .start()
        .unwrap_err();
    match &err {
        kspan::Error::Attach(kspan::AttachError::Load(kspan::LoadError {
            function,
            hook,
            errno,
            verifier_log,
            ..
        })) => {
            assert_eq!(function, "vfs_read");
            assert_eq!(*hook, kspan::Hook::Fexit);
            assert_eq!(*errno, Some(libc_eperm()));
            assert!(
                verifier_log.is_none(),
                "EPERM comes before the verifier: {err}"
            );
        }
        other => panic!("expected LoadFailed, got {other}"),
    }
}

#[tokio::test]
async fn auto_on_the_host_lists_every_mechanism_it_tried() {
    // The host kernel refuses trampolines (EPERM) and has no kprobes: `auto`
    // (the default mode) must say both.
    let err = kspan::Kspan::builder(&provider())
        .orphans(kspan::Orphans::NewTrace)
        .probe(&vfs_read_auto)
        .start()
        .unwrap_err();
    match &err {
        kspan::Error::Attach(kspan::AttachError::NoMechanism {
            function, tried, ..
        }) => {
            assert_eq!(function, "vfs_read");
            let hooks: Vec<kspan::Hook> = tried.iter().map(|(h, _)| *h).collect();
            assert_eq!(hooks, [kspan::Hook::Fexit, kspan::Hook::Kretprobe]);
            assert!(tried[0].1.contains("EPERM"), "{err}");
            assert!(tried[1].1.contains("CONFIG_KPROBES"), "{err}");
        }
        other => panic!("expected NoMechanism, got {other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.starts_with("cannot trace `vfs_read` on this kernel"),
        "{msg}"
    );
    assert!(
        msg.contains("[fexit]") && msg.contains("[kretprobe]"),
        "{msg}"
    );
    assert!(
        msg.contains("syscall sources work here")
            && msg.contains("`#[kernel_span(syscall = \"read\")]`"),
        "what does work is named, with the syscall that leads to vfs_read: {msg}"
    );
}

#[kspan::kernel_span("vfs_read", optional)]
fn vfs_read_optional(count: usize, ret: isize) {}

#[kspan::kernel_span(syscall = "read")]
fn read_syscall(fd: u32, ret: i64) {}

#[tokio::test]
async fn an_optional_probe_no_mechanism_can_trace_is_left_out() {
    // The host refuses trampolines and has no kprobes: the optional
    // probe is left out, said in the plan and Stats; the syscall source
    // beside it runs.
    let kspan = kspan::Kspan::builder(&provider())
        .orphans(kspan::Orphans::NewTrace)
        .probe(&vfs_read_optional)
        .probe(&read_syscall)
        .start()
        .expect("an optional probe does not stop the start");
    let plan = kspan.attach_plan().to_vec();
    let left_out = plan
        .iter()
        .find(|d| d.function == "vfs_read")
        .expect("the optional probe's decision");
    let why = left_out.not_attached.as_deref().expect("said not attached");
    assert!(
        why.contains("no mechanism this kernel offers can trace it")
            && why.contains("[fexit]")
            && why.contains("[kretprobe]"),
        "{why}"
    );
    assert!(
        plan.iter()
            .any(|d| d.function == "read" && d.not_attached.is_none()),
        "{plan:?}"
    );
    let stats = kspan.shutdown().await.expect("shuts down");
    assert_eq!(stats.probes_not_attached, 1, "{stats:?}");
}

#[kspan::kernel_span("vfs_read", mode = "fentry")]
fn vfs_read_fentry(count: usize) {}

#[tokio::test]
async fn a_mode_whose_mechanism_is_disabled_names_the_builder_call() {
    let err = kspan::Kspan::builder(&provider())
        .orphans(kspan::Orphans::NewTrace)
        .probe(&vfs_read_fentry)
        .disable(kspan::Mechanism::Trampolines)
        .start()
        .unwrap_err();
    assert!(
        matches!(
            &err,
            kspan::Error::Attach(kspan::AttachError::Disabled {
                hook: kspan::Hook::Fentry,
                mechanism: kspan::Mechanism::Trampolines,
                ..
            })
        ),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("KspanBuilder::disable(Trampolines)") && !msg.contains("on this kernel"),
        "the builder is at fault, not the kernel: {msg}"
    );
}

#[test]
fn capabilities_of_the_host_kernel() {
    let caps = kspan::KernelCapabilities::get();
    assert!(caps.btf.is_available(), "{caps:?}");
    assert!(caps.privileges.is_available(), "{caps:?}");
    assert!(
        matches!(
            &caps.trampolines,
            kspan::Feature::Unavailable { errno: Some(1), .. }
        ),
        "EPERM: {caps:?}"
    );
    assert!(!caps.kprobes.is_available(), "{caps:?}");
    assert!(!caps.kprobe_multi.is_available(), "{caps:?}");
    assert_eq!(
        caps.trampolines.to_string(),
        "unavailable: this kernel refuses BPF trampolines (a minimal fentry program, loaded \
         against `vfs_read` to test them, was refused) (EPERM)"
    );
}

fn libc_eperm() -> i32 {
    1
}

#[kspan::kernel_span("vfs_read", mode = "kretprobe")]
fn vfs_read_kretprobe(count: usize, ret: isize) {}

#[tokio::test]
async fn host_kernel_has_no_kprobes() {
    // KERNEL-LAB.md: the host kernel is built without CONFIG_KPROBES.
    let err = kspan::Kspan::builder(&provider())
        .orphans(kspan::Orphans::NewTrace)
        .probe(&vfs_read_kretprobe)
        .start()
        .unwrap_err();
    match &err {
        kspan::Error::Attach(kspan::AttachError::Refused {
            function,
            hook,
            errno,
            ..
        }) => {
            assert_eq!(function, "vfs_read");
            assert_eq!(*hook, kspan::Hook::Kretprobe);
            assert_eq!(*errno, Some(2), "ENOENT: {err}");
        }
        other => panic!("expected AttachFailed, got {other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("cannot attach kretprobe to `vfs_read`"),
        "{msg}"
    );
    assert!(msg.contains("this kernel has no kprobes"), "{msg}");
    assert!(msg.contains("(ENOENT)"), "{msg}");
}

#[allow(non_snake_case)]
#[kspan::kernel_span("SEQ_printf", mode = "kprobe")]
fn SEQ_printf() {}

#[kspan::kernel_span("seq_printf", mode = "kprobe")]
fn seq_printf() {}

#[test]
fn probes_whose_names_differ_only_in_case_coexist() {
    // Their registrations once collided (both upper-cased); compiling is the test.
    assert_ne!(SEQ_printf.spec.function, seq_printf.spec.function);
}

#[tokio::test]
async fn a_provider_without_kernel_span_ids_names_the_line_to_add() {
    let provider = SdkTracerProvider::builder().build();
    let err = start_err(kspan::Kspan::builder(&provider).probe(&vfs_read));
    assert!(
        err.contains("has no `kspan::KernelSpanIds` id generator"),
        "{err}"
    );
    assert!(
        err.contains("add `.with_id_generator(kspan::KernelSpanIds::default())`"),
        "{err}"
    );
    // A generator of the application's own, wrapped, is accepted: start
    // then fails further on, at what the host kernel lacks, not here.
    let provider = SdkTracerProvider::builder()
        .with_id_generator(kspan::KernelSpanIds::wrap(
            opentelemetry_sdk::trace::RandomIdGenerator::default(),
        ))
        .build();
    let err = start_err(
        kspan::Kspan::builder(&provider)
            .probe(&vfs_read)
            .btf_path("/nonexistent/vmlinux"),
    );
    assert!(err.contains("cannot read the kernel's BTF"), "{err}");
}
