// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Output of `kspan gen`, pasted as it was printed, and proof that it is
//! right: each block below is re-generated and compared (so the file stays
//! in sync with the tool), and the probes are planned against this kernel's
//! BTF with `kspan::plan::plan_all`, the checker `Kspan::start` runs (so the
//! generated names and Rust types are ones kspan accepts). That the blocks compile at
//! all proves the macro takes them; `cargo fmt --check` proves their layout.
//!
//! The blocks are this machine's kernel (6.18): on a kernel where one of
//! these functions has another signature, the sync test fails and prints
//! the new text to paste.

// The pasted output, each block after the command that printed it.

// $ kspan gen vfs_read
/// ssize_t vfs_read(struct file *file, char *buf, size_t count, loff_t *pos)
#[kspan::kernel_span("vfs_read")]
fn vfs_read(file: *const u8, buf: *const u8, count: usize, pos: *const u8, ret: isize) {}

// $ kspan gen ksys_read
/// ssize_t ksys_read(unsigned int fd, char *buf, size_t count)
#[kspan::kernel_span("ksys_read")]
fn ksys_read(fd: u32, buf: *const u8, count: usize, ret: isize) {}

// $ kspan gen do_sys_openat2
/// int do_sys_openat2(int dfd, const char *filename, struct open_how *how)
#[kspan::kernel_span("do_sys_openat2")]
fn do_sys_openat2(dfd: i32, filename: *const u8, how: *const u8, ret: i32) {}

// $ kspan gen tcp_sendmsg
/// int tcp_sendmsg(struct sock *sk, struct msghdr *msg, size_t size)
#[kspan::kernel_span("tcp_sendmsg")]
fn tcp_sendmsg(sk: *const u8, msg: *const u8, size: usize, ret: i32) {}

// $ kspan gen __sys_socket
/// int __sys_socket(int family, int type, int protocol)
#[kspan::kernel_span("__sys_socket")]
fn __sys_socket(family: i32, r#type: i32, protocol: i32, ret: i32) {}

// $ kspan gen __sys_sendto
/// int __sys_sendto(int fd, void *buff, size_t len, unsigned int flags, struct sockaddr *addr, int addr_len)
#[kspan::kernel_span("__sys_sendto")]
fn __sys_sendto(
    fd: i32,         // int
    buff: *const u8, // void *
    len: usize,      // size_t
    flags: u32,      // unsigned int
    addr: *const u8, // struct sockaddr *
    addr_len: i32,   // int
    ret: i32,        // int
) {
}

// $ kspan gen do_mmap --mode fentry
/// long unsigned int do_mmap(struct file *file, long unsigned int addr, long unsigned int len, long unsigned int prot, long unsigned int flags, vm_flags_t vm_flags, long unsigned int pgoff, long unsigned int *populate, struct list_head *uf)
// not captured: pgoff (long unsigned int, parameter 7: only the first 6 can be captured)
// not captured: populate (long unsigned int *, parameter 8: only the first 6 can be captured)
// not captured: uf (struct list_head *, parameter 9: only the first 6 can be captured)
#[kspan::kernel_span("do_mmap", mode = "fentry")]
fn do_mmap(file: *const u8, addr: u64, len: u64, prot: u64, flags: u64, vm_flags: u64) {}

// $ kspan gen --syscall openat
/// long openat(int dfd, const char *filename, int flags, umode_t mode)
#[kspan::kernel_span(syscall = "openat")]
fn openat(dfd: i32, #[capture(user)] filename: &str, flags: i32, mode: u16, ret: i64) {}

// $ end of the pasted output

use std::process::Command;

use kspan::plan::{plan_all, PlanInputs};
use kspan::Probe;

/// The pasted blocks: the `kspan` arguments and the text.
fn pasted() -> Vec<(Vec<&'static str>, String)> {
    let mut blocks: Vec<(Vec<&'static str>, String)> = Vec::new();
    for line in include_str!("generated.rs").lines() {
        if let Some(command) = line.strip_prefix("// $ ") {
            if command == "end of the pasted output" {
                break;
            }
            let args = command
                .strip_prefix("kspan ")
                .expect("a block starts with `// $ kspan ARGS`");
            blocks.push((args.split_whitespace().collect(), String::new()));
        } else if let Some((_, text)) = blocks.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    for (_, text) in &mut blocks {
        let end = text.trim_end().len();
        text.truncate(end);
        text.push('\n');
    }
    blocks
}

/// Every probe pasted above but the syscall source.
const FUNCTIONS: [&Probe; 7] = [
    &vfs_read,
    &ksys_read,
    &do_sys_openat2,
    &tcp_sendmsg,
    &__sys_socket,
    &__sys_sendto,
    &do_mmap,
];

fn tracefs_mounted() -> bool {
    std::path::Path::new(kspan::kernel::tracefs::TRACEFS)
        .join("events/syscalls")
        .is_dir()
}

#[test]
fn the_pasted_text_is_what_kspan_gen_prints() {
    let blocks = pasted();
    assert_eq!(blocks.len(), FUNCTIONS.len() + 1, "a block per probe");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    for (args, text) in blocks {
        let out = Command::new(env!("CARGO_BIN_EXE_kspan"))
            .args(&args)
            .output()
            .expect("the kspan binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if args.contains(&"--syscall") && !tracefs_mounted() {
            assert!(
                stderr.contains("mount -t tracefs"),
                "without tracefs, `kspan {}` says how to mount it: {stderr}",
                args.join(" ")
            );
            continue;
        }
        assert!(
            out.status.success(),
            "`kspan {}` failed: {stderr}",
            args.join(" ")
        );
        assert_eq!(
            stdout,
            text,
            "`kspan {}` on kernel {} prints another text: paste it under `// $ kspan {}` in \
             tests/generated.rs",
            args.join(" "),
            release.trim(),
            args.join(" ")
        );
    }
}

/// The name a block was generated for: `kspan gen [--mode M] NAME` or
/// `kspan gen --syscall NAME`.
fn generated_name<'a>(args: &[&'a str]) -> &'a str {
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        match *arg {
            "--mode" => {
                rest.next();
            }
            "--syscall" => {}
            name => return name,
        }
    }
    panic!("no name in `kspan {}`", args.join(" "))
}

#[test]
fn the_pasted_probes_plan_against_this_kernel() {
    let btf = kspan::kernel::read_btf(std::path::Path::new(kspan::KERNEL_BTF))
        .expect("the kernel's BTF is readable");
    // What `Kspan::start` reads besides BTF, read as it reads it.
    let tracefs = std::path::Path::new(kspan::kernel::tracefs::TRACEFS);
    let mut inputs = PlanInputs {
        traceable: kspan::kernel::tracefs::traceable_functions()
            .map(kspan::plan::Traceable::Listed)
            .unwrap_or_default(),
        ..PlanInputs::default()
    };
    let mut probes: Vec<&'static Probe> = FUNCTIONS.to_vec();
    if tracefs_mounted() {
        let format =
            std::fs::read_to_string(tracefs.join("events/syscalls/sys_enter_openat/format"))
                .expect("the openat tracepoint format is readable");
        inputs.syscalls.insert("openat", format);
        probes.push(&openat);
    } else {
        eprintln!("tracefs is not mounted: the `openat` syscall source is not planned");
    }

    let set = plan_all(&btf, &probes, &inputs)
        .unwrap_or_else(|e| panic!("kspan refuses a generated probe: {e}"));
    assert!(set.skipped.is_empty(), "{:?}", set.skipped);
    assert_eq!(set.plans.len(), probes.len());
    for (plan, probe) in set.plans.iter().zip(&probes) {
        assert_eq!(plan.function(), probe.spec.function);
        // Every handler parameter but `ret` is a capture kspan will make.
        assert_eq!(plan.captures.len(), probe.spec.params.len());
    }

    // The probes planned are the pasted blocks, under the names they were
    // generated for.
    let mut generated: Vec<&str> = pasted()
        .iter()
        .map(|(args, _)| generated_name(args))
        .filter(|name| *name != "openat" || tracefs_mounted())
        .collect();
    let mut planned: Vec<&str> = set.plans.iter().map(|p| p.function()).collect();
    generated.sort_unstable();
    planned.sort_unstable();
    assert_eq!(planned, generated);
}
