// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The `kspan` binary run on this machine: its kernel's BTF, tracefs and
//! capabilities, as a user would see them.

use std::process::Command;

/// What one run of `kspan` gave.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn kspan(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_kspan"))
        .args(args)
        .output()
        .expect("the kspan binary runs");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    }
}

const VFS_READ: &str = "ssize_t vfs_read(struct file *file, char *buf, size_t count, loff_t *pos)";

/// Whether tracefs's syscall events are where kspan looks for them.
fn tracefs_mounted() -> bool {
    std::path::Path::new(kspan::kernel::tracefs::TRACEFS)
        .join("events/syscalls")
        .is_dir()
}

#[test]
fn list_prints_c_signatures_sorted_with_a_count() {
    let run = kspan(&["list", "vfs_rea*"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(lines.contains(&VFS_READ), "{}", run.stdout);
    assert!(lines
        .iter()
        .all(|l| l.contains(" vfs_rea") || l.contains("*vfs_rea")));
    let names: Vec<&str> = lines
        .iter()
        .map(|l| {
            l.split('(')
                .next()
                .unwrap()
                .rsplit([' ', '*'])
                .next()
                .unwrap()
        })
        .collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    assert!(
        run.stderr.contains(&format!("{} of ", lines.len()))
            && run.stderr.contains("kernel functions match `vfs_rea*`"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_pattern_without_wildcards_matches_exactly() {
    let run = kspan(&["list", "vfs_read"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, format!("{VFS_READ}\n"));
}

#[test]
fn no_match_suggests_close_names() {
    let run = kspan(&["list", "vfs_raed"]);
    assert_eq!(run.code, Some(1));
    assert!(run.stdout.is_empty());
    assert!(
        run.stderr.contains("no kernel function matches `vfs_raed`")
            && run.stderr.contains("did you mean `vfs_read`"),
        "{}",
        run.stderr
    );
}

/// The kernel's BTF, which these tests need: without it they fail, saying
/// so, rather than pass having checked nothing.
fn host_btf() -> kspan::kernel::btf::Btf {
    kspan::kernel::read_btf(std::path::Path::new(kspan::KERNEL_BTF)).unwrap_or_else(|e| {
        panic!(
            "the `kspan gen` tests read this kernel's BTF at {}: {e}; run them as root on a \
             kernel built with CONFIG_DEBUG_INFO_BTF=y",
            kspan::KERNEL_BTF
        )
    })
}

/// How `kspan gen` writes the `char *` parameter `name` where it is
/// `__user` in the kernel's source: the parameter, and the note before the
/// attribute where this kernel's BTF cannot tell (no `user` type tags).
fn user_string(name: &str) -> (String, String) {
    if host_btf().has_user_tags() {
        (format!("#[capture(user)] {name}: &str"), String::new())
    } else {
        (
            format!("{name}: *const u8"),
            format!(
                "// `{name}` is a `char *`; this kernel's BTF has no `__user` tags to say whose \
                 memory it is: capture it as `{name}: &str` if it is a kernel string, or \
                 `#[capture(user)] {name}: &str` if it is `__user` in the kernel's source\n"
            ),
        )
    }
}

/// How `kspan gen` writes `vfs_read`'s `char __user *buf`, a buffer of
/// `ret` bytes: the parameter, and the note before the attribute where this
/// kernel's BTF cannot tell whose memory it is (no `user` type tags).
fn read_buffer() -> (String, String) {
    if host_btf().has_user_tags() {
        (
            "#[capture(user, len = \"ret\")] buf: &[u8]".to_owned(),
            String::new(),
        )
    } else {
        (
            "buf: *const u8".to_owned(),
            "// `buf` is a buffer of up to `count` bytes, of which `vfs_read` returns how many it \
             used; this kernel's BTF has no `__user` tags to say whose memory it is: capture it as \
             `#[capture(user, len = \"ret\")] buf: &[u8]` if it is `__user` in the kernel's \
             source, or `#[capture(len = \"ret\")] buf: &[u8]` if it is kernel memory\n"
                .to_owned(),
        )
    }
}

/// The suggestion of the file's name, for a `struct file *` parameter `p`.
fn file_name(p: &str, at: &str) -> String {
    format!("//     #[capture(path = \"{p}->f_path.dentry->d_name.name\"{at})] name: &str,\n")
}

#[test]
fn gen_vfs_read() {
    let run = kspan(&["gen", "vfs_read"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let (buf, note) = read_buffer();
    let out = &run.stdout;
    assert!(out.starts_with(&format!("/// {VFS_READ}\n")), "{out}");
    assert!(
        out.contains(&format!(
            "// `file` (struct file *): fields to capture, for the parameter list:\n{}",
            file_name("file", "")
        )),
        "{out}"
    );
    // Never a string: read up to a NUL, a buffer gives the bytes before
    // its first zero, or nothing.
    assert!(!out.contains("buf: &str"), "{out}");
    assert!(
        out.contains(&format!("{note}#[kspan::kernel_span(\"vfs_read\")]\n")),
        "{out}"
    );
    if note.is_empty() {
        // Too long for one line: one parameter a line.
        assert!(out.contains(&format!("\n    {buf}, // char *\n")), "{out}");
    } else {
        assert!(
            out.ends_with(&format!(
                "\nfn vfs_read(file: *const u8, {buf}, count: usize, pos: *const u8, ret: \
                 isize) {{}}\n"
            )),
            "{out}"
        );
    }
}

/// A string, a struct's fields: what `do_sys_openat2` takes has not changed
/// since `struct open_how` came (5.6).
#[test]
fn gen_strings_and_struct_fields() {
    let run = kspan(&["gen", "do_sys_openat2"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let (filename, note) = user_string("filename");
    assert_eq!(
        run.stdout,
        format!(
            "/// int do_sys_openat2(int dfd, const char *filename, struct open_how *how)\n\
             {note}\
             // `how` (struct open_how *): fields to capture, for the parameter list:\n\
             //     #[capture(path = \"how->flags\")] flags: u64,\n\
             //     #[capture(path = \"how->mode\")] mode: u64,\n\
             //     #[capture(path = \"how->resolve\")] resolve: u64,\n\
             #[kspan::kernel_span(\"do_sys_openat2\")]\n\
             fn do_sys_openat2(dfd: i32, {filename}, how: *const u8, ret: i32) {{}}\n"
        )
    );
    // A syscall source has no field paths, whatever the pointer.
    if tracefs_mounted() {
        let run = kspan(&["gen", "--syscall", "openat2"]);
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        assert!(!run.stdout.contains("path ="), "{}", run.stdout);
    }
}

/// What a function releases is read at entry, in spans; instants read
/// everything at entry already (and the macro refuses `at` there).
#[test]
fn gen_entry_hints() {
    let btf = host_btf();
    let run = kspan(&["gen", "filp_close"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let out = &run.stdout;
    assert!(
        out.starts_with(
            "/// int filp_close(struct file *filp, fl_owner_t id)\n\
             // at entry: `filp_close` may release what `filp` points to (\"close\" in its name), \
             which may be invalid at exit: read it with `at = \"entry\"`, as below\n\
             // `filp` (struct file *): fields to capture, for the parameter list:\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(&file_name("filp", ", at = \"entry\"")),
        "{out}"
    );
    let suggested: Vec<&str> = out.lines().filter(|l| l.contains("path =")).collect();
    assert!(!suggested.is_empty() && suggested.len() <= 3, "{out}");
    for line in suggested {
        assert!(line.ends_with(","), "{line}");
        assert!(line.contains(", at = \"entry\")]"), "{line}");
    }
    assert!(
        out.ends_with(
            "#[kspan::kernel_span(\"filp_close\")]\n\
             fn filp_close(filp: *const u8, id: *const u8, ret: i32) {}\n"
        ),
        "{out}"
    );

    let run = kspan(&["gen", "filp_close", "--mode", "fentry"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(!run.stdout.contains("at entry"), "{}", run.stdout);
    assert!(!run.stdout.contains("at ="), "{}", run.stdout);
    assert!(
        run.stdout.contains(&file_name("filp", "")),
        "{}",
        run.stdout
    );

    // `objp` on older kernels, `object` on newer ones.
    let kfree = btf.function("kfree").expect("BTF describes kfree");
    let object = &kfree.params[0].0;
    let run = kspan(&["gen", "kfree"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.stdout,
        format!(
            "/// void kfree(const void *{object})\n\
             // at entry: `kfree` may release what `{object}` points to (\"free\" in its name), \
             which may be invalid at exit: read it with `at = \"entry\"`\n\
             #[kspan::kernel_span(\"kfree\")]\n\
             fn kfree({object}: *const u8) {{}}\n"
        )
    );
}

#[test]
fn gen_modes() {
    let run = kspan(&["gen", "vfs_read", "--mode", "fentry"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    // At entry the buffer holds nothing yet.
    assert!(run
        .stdout
        .contains("// `buf` is a buffer `vfs_read` fills (of up to `count` bytes): at entry it holds nothing yet; a mode with a return value reads what the call put there, with `len = \"ret\"`\n#[kspan::kernel_span(\"vfs_read\", mode = \"fentry\")]\nfn vfs_read(file: *const u8, buf: *const u8, count: usize, pos: *const u8) {}\n"),
        "{}", run.stdout);
    let run = kspan(&["gen", "--mode=kretprobe", "vfs_read"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run.stdout.contains("mode = \"kretprobe\""));
    assert!(run.stdout.contains("ret: isize"));

    let run = kspan(&["gen", "vfs_read", "--mode", "fexti"]);
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains("unknown mode `fexti`") && run.stderr.contains("`fexit`"),
        "{}",
        run.stderr
    );
    let run = kspan(&["gen", "vfs_read", "--mode"]);
    assert_eq!(run.code, Some(2));
    assert!(
        run.stderr.contains("`--mode` needs a value"),
        "{}",
        run.stderr
    );
}

#[test]
fn gen_unknown_function() {
    let run = kspan(&["gen", "nosuchfn"]);
    assert_eq!(run.code, Some(1));
    assert!(run.stdout.is_empty());
    assert!(
        run.stderr.contains("unknown kernel function `nosuchfn`"),
        "{}",
        run.stderr
    );
    let run = kspan(&["gen", "vfs_raed"]);
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr.contains("did you mean `vfs_read`"),
        "{}",
        run.stderr
    );
}

/// 7.x's `filename_unlinkat` is this kernel's (6.18) `do_unlinkat`, and
/// `io_unlinkat` (io_uring's, `req` and `issue_flags`) has a name as close.
#[test]
fn another_kernels_name_suggests_the_function_with_its_parameters() {
    let run = kspan(&["gen", "filename_unlinkat"]);
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr
            .contains("did you mean `io_unlinkat`, `do_unlinkat`?"),
        "nothing to tell them apart without the parameters: {}",
        run.stderr
    );
    let run = kspan(&["gen", "filename_unlinkat", "--params", "dfd,name"]);
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr.contains("did you mean `do_unlinkat`?")
            && run.stderr.contains(
                "`do_unlinkat` takes `dfd`, `name`: `kspan gen do_unlinkat`; where other kernels \
                 have `filename_unlinkat`, one probe traces whichever the kernel has: \
                 `#[kspan::kernel_span(\"filename_unlinkat\" | \"do_unlinkat\")]`"
            ),
        "{}",
        run.stderr
    );
    let run = kspan(&["list", "filename_unlinkat"]);
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr.contains("`do_unlinkat`"),
        "a name alike by its stem: {}",
        run.stderr
    );
}

#[test]
fn gen_usage_errors() {
    for (args, expected) in [
        (&["gen"][..], "needs a kernel function name"),
        (&["gen", "vfs_*"][..], "not a pattern"),
        (&["gen", "vfs_read", "ksys_read"][..], "takes one name"),
        (
            &["gen", "vfs_read", "--bogus"][..],
            "unknown option `--bogus`",
        ),
        (
            &["gen", "--syscall", "openat", "--mode", "fexit"][..],
            "remove `--mode`",
        ),
        (
            &["gen", "vfs_read", "--mode", "syscall"][..],
            "--syscall NAME",
        ),
        (&["gen", "vfs_read", "--params"][..], "`--params` needs"),
        (
            &["gen", "vfs_read", "--params", "a,,b"][..],
            "comma-separated",
        ),
        (
            &["gen", "vfs_read", "--params=a", "--params=b"][..],
            "given twice",
        ),
        (
            &["gen", "--syscall", "openat", "--params", "dfd"][..],
            "remove `--params`",
        ),
    ] {
        let run = kspan(args);
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(expected), "{args:?}: {}", run.stderr);
        assert_short_usage_error(&run);
    }
}

/// A usage error is the mistake and where the help is, not the help.
fn assert_short_usage_error(run: &Run) {
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stderr);
    assert!(lines[0].starts_with("kspan: "), "{}", run.stderr);
    assert_eq!(lines[1], "see `kspan --help`");
}

#[test]
fn gen_syscall() {
    let run = kspan(&["gen", "--syscall", "openat"]);
    if !tracefs_mounted() {
        assert_eq!(run.code, Some(1));
        assert!(
            run.stderr
                .contains("mount -t tracefs tracefs /sys/kernel/tracing"),
            "{}",
            run.stderr
        );
        return;
    }
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(run
        .stdout
        .contains("#[kspan::kernel_span(syscall = \"openat\")]\nfn openat(dfd: i32, #[capture(user)] filename: &str, flags: i32, mode: u16, ret: i64) {}\n"),
        "{}", run.stdout);

    // A syscall given as a kernel function is pointed to `--syscall`.
    let run = kspan(&["gen", "openat"]);
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr.contains("`kspan gen --syscall openat`"),
        "{}",
        run.stderr
    );

    let run = kspan(&["gen", "--syscall", "sys_enter_openat"]);
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr
            .contains("unknown system call `sys_enter_openat`")
            && run.stderr.contains("did you mean `openat`"),
        "{}",
        run.stderr
    );
}

#[test]
fn list_syscalls() {
    let run = kspan(&["list", "--syscalls", "openat*"]);
    if !tracefs_mounted() {
        assert_eq!(run.code, Some(1));
        assert!(
            run.stderr
                .contains("mount -t tracefs tracefs /sys/kernel/tracing"),
            "{}",
            run.stderr
        );
        return;
    }
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stdout
            .lines()
            .any(|l| l == "long openat(int dfd, const char *filename, int flags, umode_t mode)"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.lines().all(|l| l.starts_with("long openat")));
    assert!(run.stderr.contains("system calls match `openat*`"));
}

#[test]
fn doctor_reports_every_mechanism_as_the_library_sees_it() {
    let run = kspan(&["doctor"]);
    assert_eq!(
        run.code,
        Some(0),
        "a report, even of missing features: {}",
        run.stderr
    );
    println!("{}", run.stdout);
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(run
        .stdout
        .starts_with(&format!("kernel {}\n", release.trim())));

    let caps = kspan::KernelCapabilities::probe();
    for (name, feature) in [
        ("btf", &caps.btf),
        ("privileges", &caps.privileges),
        ("trampolines", &caps.trampolines),
        ("fsession", &caps.trampoline_sessions),
        ("fsession.multi", &caps.trampoline_multi),
        ("kprobes", &caps.kprobes),
        ("kprobe.multi", &caps.kprobe_multi),
        ("kprobe.session", &caps.kprobe_sessions),
        ("tracepoints", &caps.tracepoints),
        ("tp_btf", &caps.btf_tracepoints),
        ("ctx-records", &caps.context_records),
    ] {
        let line = run
            .stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no `{name}` line in:\n{}", run.stdout));
        assert!(line.ends_with(&format!(" {feature}")), "{line}");
        if let kspan::Feature::Unavailable { errno: Some(_), .. } = feature {
            // The errno by name, e.g. `(EPERM)` for this project's host kernel.
            assert!(line.ends_with(')') && line.contains("(E"), "{line}");
        }
    }
    let fexit = if caps.trampolines.is_available() && caps.privileges.is_available() {
        "  fexit/fentry: yes\n"
    } else {
        "  fexit/fentry: no ("
    };
    assert!(run.stdout.contains(fexit), "{}", run.stdout);
    let kprobes = if caps.kprobes.is_available() && caps.privileges.is_available() {
        "  kprobe/kretprobe: yes\n"
    } else {
        "  kprobe/kretprobe: no ("
    };
    assert!(run.stdout.contains(kprobes), "{}", run.stdout);
    assert!(run.stdout.contains("  syscall sources: "));
    // The scheduler's account says which tracepoints it would use.
    let account = match (
        caps.privileges.is_available(),
        caps.btf_tracepoints.is_available(),
    ) {
        (true, true) => "  scheduler account: yes, through tp_btf",
        (true, false) => "  scheduler account: yes, through classic tracepoints",
        (false, _) => "  scheduler account: no (",
    };
    assert!(run.stdout.contains(account), "{}", run.stdout);
    // The cheapest trampoline attachment the kernel has.
    let (fexit_through, yes_no) = if caps.trampoline_multi.is_available() {
        ("fsession.multi", ["yes", "yes", "yes"])
    } else if caps.trampoline_sessions.is_available() {
        ("fsession", ["no", "yes", "yes"])
    } else {
        ("fentry+fexit", ["no", "no", "yes"])
    };
    let kretprobe_through = if caps.kprobe_sessions.is_available() {
        "kprobe.session"
    } else if caps.kprobe_multi.is_available() {
        "kprobe.multi"
    } else {
        "kprobes"
    };
    let preempts = caps.preemption.preempts_programs();
    let line = run
        .stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some("preemption"))
        .unwrap_or_else(|| panic!("no `preemption` line in:\n{}", run.stdout));
    assert!(line.contains(&format!(" {} (", caps.preemption)), "{line}");
    let auto = if preempts && kprobes.ends_with("yes\n") {
        format!("  auto: would use kretprobe through {kretprobe_through} (this kernel preempts")
    } else if fexit.ends_with("yes\n") {
        format!("  auto: would use fexit through {fexit_through}\n")
    } else if kprobes.ends_with("yes\n") {
        "  auto: would use kretprobe".to_owned()
    } else {
        "  auto: nothing works for kernel functions".to_owned()
    };
    assert!(run.stdout.contains(&auto), "{}", run.stdout);
    if fexit.ends_with("yes\n") {
        let [multi, single, pair] = yes_no;
        let line =
            format!("  fexit: fsession.multi {multi} > fsession {single} > fentry+fexit {pair}\n");
        assert!(run.stdout.contains(&line), "{line}\n{}", run.stdout);
    }
    assert!(run.stdout.ends_with('\n'));

    let run = kspan(&["doctor", "--verbose"]);
    assert_eq!(run.code, Some(2));
    assert!(run.stderr.contains("takes no arguments"), "{}", run.stderr);
}

#[test]
fn doctor_fails_where_nothing_works_for_the_process() {
    // Unprivileged (as nobody, from a copy it can run; or this process
    // when it is not root), nothing kspan traces works here.
    let dir = std::env::temp_dir().join(format!("kspan-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("kspan");
    std::fs::copy(env!("CARGO_BIN_EXE_kspan"), &copy).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for path in [&dir, &copy] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // The effective uid, second of /proc/self/status's `Uid:`.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let root = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0");
    let mut cmd = if root {
        let mut cmd = Command::new("setpriv");
        cmd.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--",
        ])
        .arg(&copy);
        cmd
    } else {
        Command::new(&copy)
    };
    let out = cmd.arg("doctor").output().expect("kspan doctor runs");
    let _ = std::fs::remove_dir_all(&dir);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(stdout.contains("mechanisms:"), "the report first: {stdout}");
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("nothing kspan traces works for this process on this kernel")
            && stderr.contains("privileges"),
        "{stderr}"
    );
}

#[test]
fn usage() {
    for args in [
        &["help"][..],
        &["--help"][..],
        &["-h"][..],
        &["gen", "--help"][..],
    ] {
        let run = kspan(args);
        assert_eq!(run.code, Some(0), "{args:?}");
        assert!(run.stdout.contains("Usage:"), "{args:?}");
        assert!(run.stdout.contains("kspan gen FUNCTION [--mode MODE]"));
    }
    let run = kspan(&["bogus"]);
    assert!(
        run.stderr.contains("unknown command `bogus`"),
        "{}",
        run.stderr
    );
    assert_short_usage_error(&run);
    let run = kspan(&["list", "a*", "b*"]);
    assert!(run.stderr.contains("takes one pattern"), "{}", run.stderr);
    assert_short_usage_error(&run);
    let run = kspan(&["doctor", "--verbose"]);
    assert_short_usage_error(&run);

    // A bare `kspan` is a usage error too: the forms of the command.
    let run = kspan(&[]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(
        run.stderr.starts_with("usage: kspan doctor\n")
            && run.stderr.contains("kspan gen --syscall NAME\n")
            && run.stderr.ends_with("see `kspan --help`\n")
            && !run.stderr.contains("PATTERN is"),
        "{}",
        run.stderr
    );
}

/// Where `kspan doctor` finds that kernel functions cannot be traced, `list`
/// and `gen` say so in its words, and offer the syscall source; where they
/// can, neither says a word of it.
#[test]
fn list_and_gen_repeat_doctors_verdict() {
    let doctor = kspan(&["doctor"]).stdout;
    let line = |prefix: &str| -> String {
        doctor
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{doctor}"))
            .to_owned()
    };
    let auto = line("auto: ");
    let fexit = line("fexit/fentry: ");
    let kprobes = line("kprobe/kretprobe: ");
    println!("{fexit}\n{kprobes}\n{auto}");
    let gen = kspan(&["gen", "vfs_read"]);
    let list = kspan(&["list", "vfs_read"]);
    for run in [&gen, &list] {
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        assert!(run.stdout.contains("vfs_read("), "{}", run.stdout);
    }
    if auto.starts_with("auto: nothing works for kernel functions") {
        let said = format!(
            "note: this kernel cannot trace kernel functions; `kspan doctor` says: {fexit}; \
             {kprobes}; {auto}"
        );
        let instead = "instead of `vfs_read`, trace its system call: \
                       `#[kspan::kernel_span(syscall = \"read\")]` (`kspan gen --syscall read`)";
        for run in [&gen, &list] {
            assert!(run.stderr.contains(&said), "{}", run.stderr);
            assert_eq!(
                run.stderr.contains(instead),
                tracefs_mounted(),
                "{}",
                run.stderr
            );
        }
    } else {
        for run in [&gen, &list] {
            assert!(
                !run.stderr.contains("cannot trace kernel functions"),
                "{}",
                run.stderr
            );
        }
    }
    // An explicit mode whose mechanism this kernel refuses is said too.
    for (mode, doctor_line) in [("fexit", &fexit), ("kretprobe", &kprobes)] {
        let run = kspan(&["gen", "vfs_read", "--mode", mode]);
        assert_eq!(run.code, Some(0), "{}", run.stderr);
        assert_eq!(
            run.stderr.contains(&format!(
                "note: this kernel cannot trace kernel functions in mode `{mode}`; `kspan \
                 doctor` says: {doctor_line}; {auto}"
            )),
            doctor_line.contains(": no ("),
            "{}",
            run.stderr
        );
    }
}

#[test]
fn a_closed_output_is_not_an_error() {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_kspan"))
        .arg("list")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The read end is dropped: the next writes fail with EPIPE.
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn functions_kspan_will_not_trace_are_left_out_or_marked() {
    // Every `rcu_*` function is on kspan's deny list.
    let run = kspan(&["list", "rcu_*"]);
    assert_eq!(run.code, Some(1), "{}", run.stdout);
    assert!(run.stdout.is_empty());
    assert!(
        run.stderr.contains("on its deny list") && run.stderr.contains("`--all`"),
        "{}",
        run.stderr
    );

    let run = kspan(&["list", "--all", "rcu_*"]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let first = run.stdout.lines().next().expect("rcu_* functions in BTF");
    assert!(
        run.stdout
            .lines()
            .all(|l| l.contains("  // not traced: on kspan's deny list: RCU")),
        "{}",
        run.stdout
    );
    let name = first
        .split('(')
        .next()
        .unwrap()
        .rsplit([' ', '*'])
        .next()
        .unwrap();
    let run = kspan(&["gen", name]);
    assert_eq!(run.code, Some(1));
    assert!(
        run.stderr
            .contains(&format!("`{name}` is on kspan's deny list: RCU")),
        "{}",
        run.stderr
    );
}
