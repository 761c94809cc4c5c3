// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Output of `kspan gen`, pasted as it was printed, and proof that it is
//! right: each block below is re-generated and compared (so the file stays
//! in sync with the tool), and the probes are planned against this kernel's
//! BTF with `kspan::plan::plan_all`, the checker `Kspan::start` runs (so the
//! generated names and Rust types are ones kspan accepts). That the blocks compile at
//! all proves the macro takes them; `cargo fmt --check` proves their layout.
//! The advice in their comments (field captures to paste, the
//! `#[capture(user)]` forms of strings and buffers, `at = "entry"`) is taken too: probes written
//! from it follow the blocks, each line checked against the block it comes
//! from, and are planned the same way.
//!
//! The blocks are this machine's kernel (6.18): on a kernel where one of
//! these functions has another signature, the sync test fails and prints
//! the new text to paste.

// The pasted output, each block after the command that printed it.

// $ kspan gen vfs_read
/// ssize_t vfs_read(struct file *file, char *buf, size_t count, loff_t *pos)
// `file` (struct file *): fields to capture, for the parameter list:
//     #[capture(path = "file->f_path.dentry->d_name.name")] name: &str,
//     #[capture(path = "file->f_mode")] f_mode: u32,
//     #[capture(path = "file->f_flags")] f_flags: u32,
// `buf` is a buffer of up to `count` bytes, of which `vfs_read` returns how many it used; this kernel's BTF has no `__user` tags to say whose memory it is: capture it as `#[capture(user, len = "ret")] buf: &[u8]` if it is `__user` in the kernel's source, or `#[capture(len = "ret")] buf: &[u8]` if it is kernel memory
#[kspan::kernel_span("vfs_read")]
fn vfs_read(file: *const u8, buf: *const u8, count: usize, pos: *const u8, ret: isize) {}

// $ kspan gen ksys_read
/// ssize_t ksys_read(unsigned int fd, char *buf, size_t count)
// `buf` is a buffer of up to `count` bytes, of which `ksys_read` returns how many it used; this kernel's BTF has no `__user` tags to say whose memory it is: capture it as `#[capture(user, len = "ret")] buf: &[u8]` if it is `__user` in the kernel's source, or `#[capture(len = "ret")] buf: &[u8]` if it is kernel memory
#[kspan::kernel_span("ksys_read")]
fn ksys_read(fd: u32, buf: *const u8, count: usize, ret: isize) {}

// $ kspan gen do_sys_openat2
/// int do_sys_openat2(int dfd, const char *filename, struct open_how *how)
// `filename` is a `char *`; this kernel's BTF has no `__user` tags to say whose memory it is: capture it as `filename: &str` if it is a kernel string, or `#[capture(user)] filename: &str` if it is `__user` in the kernel's source
// `how` (struct open_how *): fields to capture, for the parameter list:
//     #[capture(path = "how->flags")] flags: u64,
//     #[capture(path = "how->mode")] mode: u64,
//     #[capture(path = "how->resolve")] resolve: u64,
#[kspan::kernel_span("do_sys_openat2")]
fn do_sys_openat2(dfd: i32, filename: *const u8, how: *const u8, ret: i32) {}

// $ kspan gen tcp_sendmsg
/// int tcp_sendmsg(struct sock *sk, struct msghdr *msg, size_t size)
// `sk` (struct sock *): fields to capture, for the parameter list:
//     #[capture(path = "sk->sk_prot_creator->name")] name: &str,
//     #[capture(path = "sk->sk_peek_off")] sk_peek_off: i32,
//     #[capture(path = "sk->sk_rx_dst_ifindex")] sk_rx_dst_ifindex: i32,
// `msg` (struct msghdr *): fields to capture, for the parameter list:
//     #[capture(path = "msg->msg_namelen")] msg_namelen: i32,
//     #[capture(path = "msg->msg_inq")] msg_inq: i32,
//     #[capture(path = "msg->msg_flags")] msg_flags: u32,
#[kspan::kernel_span("tcp_sendmsg")]
fn tcp_sendmsg(sk: *const u8, msg: *const u8, size: usize, ret: i32) {}

// $ kspan gen __sys_socket
/// int __sys_socket(int family, int type, int protocol)
#[kspan::kernel_span("__sys_socket")]
fn __sys_socket(family: i32, r#type: i32, protocol: i32, ret: i32) {}

// $ kspan gen __sys_sendto
/// int __sys_sendto(int fd, void *buff, size_t len, unsigned int flags, struct sockaddr *addr, int addr_len)
// `buff` is a buffer of `len` bytes; this kernel's BTF has no `__user` tags to say whose memory it is: capture it as `#[capture(user, len = "len")] buff: &[u8]` if it is `__user` in the kernel's source, or `#[capture(len = "len")] buff: &[u8]` if it is kernel memory
// `addr` (struct sockaddr *): fields to capture, for the parameter list:
//     #[capture(path = "addr->sa_family")] sa_family: u16,
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
// `file` (struct file *): fields to capture, for the parameter list:
//     #[capture(path = "file->f_path.dentry->d_name.name")] name: &str,
//     #[capture(path = "file->f_mode")] f_mode: u32,
//     #[capture(path = "file->f_flags")] f_flags: u32,
#[kspan::kernel_span("do_mmap", mode = "fentry")]
fn do_mmap(file: *const u8, addr: u64, len: u64, prot: u64, flags: u64, vm_flags: u64) {}

// $ kspan gen filp_close
/// int filp_close(struct file *filp, fl_owner_t id)
// at entry: `filp_close` may release what `filp` points to ("close" in its name), which may be invalid at exit: read it with `at = "entry"`, as below
// `filp` (struct file *): fields to capture, for the parameter list:
//     #[capture(path = "filp->f_path.dentry->d_name.name", at = "entry")] name: &str,
//     #[capture(path = "filp->f_mode", at = "entry")] f_mode: u32,
//     #[capture(path = "filp->f_flags", at = "entry")] f_flags: u32,
#[kspan::kernel_span("filp_close")]
fn filp_close(filp: *const u8, id: *const u8, ret: i32) {}

// $ kspan gen kfree
/// void kfree(const void *object)
// at entry: `kfree` may release what `object` points to ("free" in its name), which may be invalid at exit: read it with `at = "entry"`
#[kspan::kernel_span("kfree")]
fn kfree(object: *const u8) {}

// $ kspan gen vfs_unlink
/// int vfs_unlink(struct mnt_idmap *idmap, struct inode *dir, struct dentry *dentry, struct inode **delegated_inode)
// at entry: `vfs_unlink` may release what `idmap`, `dir`, `dentry` and `delegated_inode` point to ("unlink" in its name), which may be invalid at exit: read it with `at = "entry"`, as below
// `dir` (struct inode *): fields to capture, for the parameter list:
//     #[capture(path = "dir->i_mode", at = "entry")] i_mode: u16,
//     #[capture(path = "dir->i_opflags", at = "entry")] i_opflags: u16,
//     #[capture(path = "dir->i_flags", at = "entry")] i_flags: u32,
// `dentry` (struct dentry *): fields to capture, for the parameter list:
//     #[capture(path = "dentry->d_name.name", at = "entry")] name: &str,
//     #[capture(path = "dentry->d_flags", at = "entry")] d_flags: u32,
//     #[capture(path = "dentry->d_time", at = "entry")] d_time: u64,
#[kspan::kernel_span("vfs_unlink")]
fn vfs_unlink(
    idmap: *const u8,           // struct mnt_idmap *
    dir: *const u8,             // struct inode *
    dentry: *const u8,          // struct dentry *
    delegated_inode: *const u8, // struct inode **
    ret: i32,                   // int
) {
}

// $ kspan gen --syscall openat
/// long openat(int dfd, const char *filename, int flags, umode_t mode)
#[kspan::kernel_span(syscall = "openat")]
fn openat(dfd: i32, #[capture(user)] filename: &str, flags: i32, mode: u16, ret: i64) {}

// $ end of the pasted output

// The suggestions of the blocks above, taken: each probe below is a
// handler written from the `// suggestions of:` block's advice, every
// `#[capture(...)]` line of it a suggested field uncommented or the user
// form a note gives (checked by `the_suggestions_are_what_kspan_gen_prints`).

// suggestions of: kspan gen vfs_read
#[kspan::kernel_span("vfs_read")]
fn vfs_read_fields(
    #[capture(path = "file->f_path.dentry->d_name.name")] name: &str,
    #[capture(path = "file->f_mode")] f_mode: u32,
    #[capture(path = "file->f_flags")] f_flags: u32,
    #[capture(user, len = "ret")] buf: &[u8],
    ret: isize,
) {
}

// suggestions of: kspan gen __sys_sendto
#[kspan::kernel_span("__sys_sendto")]
fn __sys_sendto_fields(
    fd: i32,
    #[capture(user, len = "len")] buff: &[u8],
    #[capture(path = "addr->sa_family")] sa_family: u16,
    ret: i32,
) {
}

// suggestions of: kspan gen do_sys_openat2
#[kspan::kernel_span("do_sys_openat2")]
fn do_sys_openat2_fields(
    dfd: i32,
    #[capture(user)] filename: &str,
    #[capture(path = "how->flags")] flags: u64,
    #[capture(path = "how->mode")] mode: u64,
    #[capture(path = "how->resolve")] resolve: u64,
    ret: i32,
) {
}

// suggestions of: kspan gen tcp_sendmsg
#[kspan::kernel_span("tcp_sendmsg")]
fn tcp_sendmsg_fields(
    #[capture(path = "sk->sk_prot_creator->name")] name: &str,
    #[capture(path = "sk->sk_peek_off")] sk_peek_off: i32,
    #[capture(path = "sk->sk_rx_dst_ifindex")] sk_rx_dst_ifindex: i32,
    #[capture(path = "msg->msg_namelen")] msg_namelen: i32,
    #[capture(path = "msg->msg_inq")] msg_inq: i32,
    #[capture(path = "msg->msg_flags")] msg_flags: u32,
    size: usize,
    ret: i32,
) {
}

// suggestions of: kspan gen do_mmap --mode fentry
#[kspan::kernel_span("do_mmap", mode = "fentry")]
fn do_mmap_fields(
    #[capture(path = "file->f_path.dentry->d_name.name")] name: &str,
    #[capture(path = "file->f_mode")] f_mode: u32,
    #[capture(path = "file->f_flags")] f_flags: u32,
    len: u64,
) {
}

// suggestions of: kspan gen filp_close
#[kspan::kernel_span("filp_close")]
fn filp_close_fields(
    #[capture(path = "filp->f_path.dentry->d_name.name", at = "entry")] name: &str,
    #[capture(path = "filp->f_mode", at = "entry")] f_mode: u32,
    #[capture(path = "filp->f_flags", at = "entry")] f_flags: u32,
    ret: i32,
) {
}

// suggestions of: kspan gen vfs_unlink
#[kspan::kernel_span("vfs_unlink")]
fn vfs_unlink_fields(
    #[capture(path = "dir->i_mode", at = "entry")] i_mode: u16,
    #[capture(path = "dir->i_opflags", at = "entry")] i_opflags: u16,
    #[capture(path = "dir->i_flags", at = "entry")] i_flags: u32,
    #[capture(path = "dentry->d_name.name", at = "entry")] name: &str,
    #[capture(path = "dentry->d_flags", at = "entry")] d_flags: u32,
    #[capture(path = "dentry->d_time", at = "entry")] d_time: u64,
    ret: i32,
) {
}

// end of the suggestions taken

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
const FUNCTIONS: [&Probe; 10] = [
    &vfs_read,
    &ksys_read,
    &do_sys_openat2,
    &tcp_sendmsg,
    &__sys_socket,
    &__sys_sendto,
    &do_mmap,
    &filp_close,
    &kfree,
    &vfs_unlink,
];

/// The probes written from the suggestions, in the file's order.
const SUGGESTED: [&Probe; 7] = [
    &vfs_read_fields,
    &__sys_sendto_fields,
    &do_sys_openat2_fields,
    &tcp_sendmsg_fields,
    &do_mmap_fields,
    &filp_close_fields,
    &vfs_unlink_fields,
];

/// The suggestions taken: the `kspan` arguments of the block they come
/// from, and each `#[capture(...)]` parameter line of the probe written from
/// them.
fn taken() -> Vec<(Vec<&'static str>, Vec<&'static str>)> {
    let mut taken: Vec<(Vec<&'static str>, Vec<&'static str>)> = Vec::new();
    for line in include_str!("generated.rs").lines() {
        if line == "// end of the suggestions taken" {
            break;
        }
        if let Some(args) = line.strip_prefix("// suggestions of: kspan ") {
            taken.push((args.split_whitespace().collect(), Vec::new()));
        } else if let Some((_, lines)) = taken.last_mut() {
            let line = line.trim();
            if line.starts_with("#[capture(") {
                lines.push(line);
            }
        }
    }
    taken
}

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

/// This kernel's BTF, or a panic saying how to run these tests.
fn host_btf() -> kspan::kernel::btf::Btf {
    kspan::kernel::read_btf(std::path::Path::new(kspan::KERNEL_BTF)).unwrap_or_else(|e| {
        panic!(
            "these tests plan against this kernel's BTF at {}: {e}; run them as root on a \
             kernel built with CONFIG_DEBUG_INFO_BTF=y",
            kspan::KERNEL_BTF
        )
    })
}

/// What `Kspan::start` reads for kernel functions besides BTF, read as it
/// reads it.
fn function_inputs() -> PlanInputs {
    PlanInputs {
        traceable: kspan::kernel::tracefs::traceable_functions()
            .map(kspan::plan::Traceable::Listed)
            .unwrap_or_default(),
        ..PlanInputs::default()
    }
}

#[test]
fn the_pasted_probes_plan_against_this_kernel() {
    let btf = host_btf();
    let tracefs = std::path::Path::new(kspan::kernel::tracefs::TRACEFS);
    let mut inputs = function_inputs();
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

#[test]
fn the_suggestions_are_what_kspan_gen_prints() {
    let pasted = pasted();
    let taken = taken();
    assert_eq!(
        taken.len(),
        SUGGESTED.len(),
        "a probe per block of suggestions"
    );
    for ((args, lines), probe) in taken.iter().zip(SUGGESTED) {
        assert_eq!(probe.spec.function, generated_name(args));
        let (_, block) = pasted
            .iter()
            .find(|(a, _)| a == args)
            .unwrap_or_else(|| panic!("no pasted block of `kspan {}`", args.join(" ")));
        assert!(!lines.is_empty());
        for line in lines {
            let suggested = format!("//     {line}\n");
            let noted = format!("`{}` if it is", line.trim_end_matches(','));
            assert!(
                block.contains(&suggested) || block.contains(&noted),
                "`kspan {}` does not suggest `{line}`:\n{block}",
                args.join(" ")
            );
        }
    }
}

#[test]
fn the_suggestions_plan_against_this_kernel() {
    let btf = host_btf();
    let inputs = function_inputs();
    // Planned apart from the pasted probes: a function has one probe.
    let set = plan_all(&btf, &SUGGESTED, &inputs)
        .unwrap_or_else(|e| panic!("kspan refuses a probe written from suggestions: {e}"));
    assert!(set.skipped.is_empty(), "{:?}", set.skipped);
    assert_eq!(set.plans.len(), SUGGESTED.len());
    for (plan, probe) in set.plans.iter().zip(&SUGGESTED) {
        assert_eq!(plan.function(), probe.spec.function);
        assert_eq!(plan.captures.len(), probe.spec.params.len());
    }
}

/// The guide's example of `kspan gen` (docs/guide/cli.md) is the block
/// pasted here.
#[test]
fn the_readme_example_is_the_pasted_block() {
    let readme = include_str!("../../docs/guide/cli.md");
    let example: String = readme
        .split_once("  $ kspan gen filp_close\n")
        .expect("docs/guide/cli.md shows `kspan gen filp_close`")
        .1
        .lines()
        .take_while(|l| l.trim() != "```")
        .map(|l| format!("{}\n", l.strip_prefix("  ").unwrap_or(l)))
        .collect();
    let pasted = pasted();
    let (_, block) = pasted
        .iter()
        .find(|(args, _)| args == &["gen", "filp_close"])
        .expect("a pasted block of `kspan gen filp_close`");
    assert_eq!(
        &example, block,
        "paste the block into README's `kspan gen` example"
    );
}
