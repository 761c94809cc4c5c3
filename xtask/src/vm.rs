//! `cargo xtask vm`: run a command inside a QEMU guest on a stock kernel.
//!
//! The guest boots an initramfs holding a static busybox, the virtio/9p
//! modules of the chosen kernel (and virtio-blk's, for the slow disk: see
//! [`SLOW_DISK_SERIAL`]) and an `/init` script. `/init` mounts the
//! host's root read-only over 9p at `/newroot`, the repository writable (a
//! second 9p share) at its own path inside it, a fresh tmpfs on `/tmp`, and
//! tracefs, debugfs and bpffs under `/sys` (bound recursively into the new
//! root), then runs the command in a chroot, in the caller's working
//! directory, and prints an exit marker carrying its status. Everything the
//! command writes goes to the serial console, which QEMU writes to our stdout;
//! the console loop streams it out line by line.
//!
//! `--arch arm64` boots Debian's arm64 kernel under `qemu-system-aarch64`
//! instead; what differs (QEMU's binary and machine, the console, the
//! busybox of the initramfs, the root the guest runs) comes from
//! [`GuestArch`]. An arm64 guest cannot run the host's programs, so its root
//! is one of arm64 packages made once ([`crate::rootfs`]), and the OTLP
//! relay (this x86-64 binary, run in the guest) is not available there.

use std::collections::VecDeque;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::arch::GuestArch;
use crate::cpio::{self, Entry};
use crate::kernel::{self, KernelSpec};
use crate::relay;
use crate::rootfs;
use crate::util::{opt_value, repo_root, sh_quote, which};

/// How to run the VM.
#[derive(Clone, Debug)]
pub struct VmOptions {
    /// The guest's architecture (the host's by default).
    pub arch: GuestArch,
    /// The kernel to boot.
    pub kernel: KernelSpec,
    /// Wall-clock limit for the whole run, boot included.
    pub timeout: Duration,
    /// Guest memory, in QEMU's syntax (`2G`).
    pub mem: String,
    /// Guest CPUs.
    pub smp: u32,
    /// One host thread per guest CPU (QEMU's `thread=multi`) instead of
    /// one for all, on an x86-64 guest too: for per-call figures, where a
    /// single thread makes kspan's consumer compete with the traced loop.
    /// Not for the x86-64 tests (see `run_vm`); an arm64 guest has it
    /// always ([`Self::threaded_tcg`]).
    pub multi_threaded_tcg: bool,
    /// The guest's clock counts instructions, one nanosecond each (QEMU's
    /// `-icount shift=0`, one host thread): times measured inside the
    /// guest are instruction counts, the same on every run, for comparing
    /// the instructions two builds execute. Not with `multi_threaded_tcg`.
    pub icount: bool,
    /// A guest of its own root (arm64) runs the root that also holds its
    /// suite's bpftrace.
    pub with_bpftrace: bool,
    /// Forward a loopback `OTEL_EXPORTER_OTLP_ENDPOINT` to the host (on by
    /// default where the guest can run the relay, this binary).
    pub otlp_forward: bool,
    /// Also print the console before the command starts (kernel, init).
    pub verbose: bool,
    /// Words added to the kernel's command line (`--append`, e.g.
    /// `preempt=full`).
    pub append: Vec<String>,
    /// Variables set for the command besides the caller's `OTEL_*`,
    /// `KSPAN_*`, `RUST_LOG` (these win over the caller's).
    pub env: Vec<(String, String)>,
    /// Print the command's console output in one block when the guest
    /// ends, not line by line: for a guest that runs beside another,
    /// whose lines would interleave with it.
    pub hold_console: bool,
}

impl VmOptions {
    /// Whether QEMU runs a host thread per guest CPU: when asked for, and
    /// for an arm64 guest unless `--icount` needs one thread (see
    /// `run_vm`).
    pub fn threaded_tcg(&self) -> bool {
        self.multi_threaded_tcg || (self.arch == GuestArch::Arm64 && !self.icount)
    }

    /// Refuses settings QEMU cannot run together, before any work.
    pub fn check(&self) -> Result<()> {
        if self.icount && self.multi_threaded_tcg {
            bail!(
                "--icount counts one host thread's instructions: it cannot go with \
                 --multi-threaded-tcg"
            );
        }
        if self.with_bpftrace && self.arch.foreign_root().is_none() {
            bail!(
                "--with-bpftrace is for a guest of its own root (arm64); an {} guest runs \
                 the host's bpftrace (`cargo xtask deps` installs it)",
                self.arch.name()
            );
        }
        if self.otlp_forward && !self.arch.runs_host_binaries() {
            bail!(
                "--otlp-forward: there is no {} OTLP relay: the relay is this xtask binary \
                 (built for the host), which the {} guest cannot run; export to an \
                 endpoint the guest reaches itself, or run an x86_64 guest",
                self.arch.name(),
                self.arch.name()
            );
        }
        Ok(())
    }
}

impl Default for VmOptions {
    fn default() -> Self {
        VmOptions {
            arch: GuestArch::default(),
            kernel: KernelSpec::parse("debian12").expect("known kernel"),
            timeout: Duration::from_secs(900),
            mem: "2G".into(),
            smp: 2,
            multi_threaded_tcg: false,
            icount: false,
            with_bpftrace: false,
            otlp_forward: true,
            verbose: false,
            append: Vec::new(),
            env: Vec::new(),
            hold_console: false,
        }
    }
}

/// Number of console lines kept for the failure report.
const TAIL_LINES: usize = 40;
/// Guest address that QEMU's user network forwards to the host.
const GUEST_FWD_ADDR: &str = "10.0.2.100";
/// Big 9p messages: fewer round trips through the emulated virtqueue.
///
/// Both shares are also mounted with `cache=loose` (page cache, no
/// revalidation): measured here, it makes `bpftrace -e 'BEGIN{exit()}'` take
/// 2 s instead of up to 20 s. The guest is the only writer of the repository
/// share while it runs; `/init` runs `sync` before powering off.
const MSIZE: u32 = 512_000;

/// The guest's second block device, for tests that need I/O to take a
/// known, slow time (a thread blocked in `D` on a device, woken by its
/// interrupt): a virtio-blk disk of [`SLOW_DISK_BYTES`] on QEMU's `null-co`
/// driver, which completes every request [`SLOW_DISK_LATENCY`] after it
/// gets it, whatever else is in flight; reads return zeroes, writes are
/// dropped. `/init` finds it by this serial and exports its node to the
/// command as [`SLOW_DISK_ENV`]; it is never mounted.
///
/// Not a throttled raw file: QEMU's throttling limits a rate, with a
/// burst allowance of a tenth of a second's worth: at 100 requests a
/// second, the first 11 reads of a stream took 0.3 ms each, the rest 10 ms,
/// and reads 20 ms apart were never slowed (0.5 to 1.1 ms).
const SLOW_DISK_SERIAL: &str = "kspan-slow";
/// The variable naming the slow disk's node (`/dev/vda`) to the command.
const SLOW_DISK_ENV: &str = "KSPAN_SLOW_DISK";
/// The slow disk's size.
const SLOW_DISK_BYTES: u64 = 64 << 20;
/// How long the slow disk takes over each request (in the host's time).
const SLOW_DISK_LATENCY: Duration = Duration::from_millis(10);
/// The guest's driver of the slow disk (a module on Debian's kernels).
const SLOW_DISK_MODULE: &str = "virtio_blk";

/// `cargo xtask vm [options] -- CMD...`.
pub fn command(args: &[String]) -> Result<u8> {
    let (opts, cmd) = parse_args(args)?;
    if cmd.is_empty() {
        bail!(
            "usage: cargo xtask vm [--arch x86_64|arm64] [--kernel K] [--timeout SECS] \
             [--mem SIZE] [--append 'KERNEL ARGS'] -- CMD [ARGS...]"
        );
    }
    let cwd = std::env::current_dir().context("current directory")?;
    run_vm(&opts, &cmd, &cwd)
}

fn parse_args(args: &[String]) -> Result<(VmOptions, Vec<String>)> {
    let mut opts = VmOptions::default();
    let mut i = 0;
    let mut cmd = Vec::new();
    // Unset: the arch's default, known once every option is read.
    let mut otlp_forward = None;
    while i < args.len() {
        if let Some(v) = opt_value(args, &mut i, "--arch")? {
            opts.arch = GuestArch::parse(&v)?;
        } else if let Some(v) = opt_value(args, &mut i, "--kernel")? {
            opts.kernel = KernelSpec::parse(&v)?;
        } else if let Some(v) = opt_value(args, &mut i, "--timeout")? {
            opts.timeout = parse_secs(&v)?;
        } else if let Some(v) = opt_value(args, &mut i, "--mem")? {
            opts.mem = v;
        } else if let Some(v) = opt_value(args, &mut i, "--append")? {
            opts.append.extend(v.split_whitespace().map(String::from));
        } else if let Some(v) = opt_value(args, &mut i, "--smp")? {
            opts.smp = v.parse().with_context(|| format!("--smp {v}"))?;
        } else {
            match args[i].as_str() {
                "--no-otlp-forward" => otlp_forward = Some(false),
                "--otlp-forward" => otlp_forward = Some(true),
                "--with-bpftrace" => opts.with_bpftrace = true,
                "--multi-threaded-tcg" => opts.multi_threaded_tcg = true,
                "--icount" => opts.icount = true,
                "--verbose" | "-v" => opts.verbose = true,
                "--" => {
                    cmd = args[i + 1..].to_vec();
                    break;
                }
                a if a.starts_with('-') => bail!("unknown vm option {a}"),
                _ => {
                    cmd = args[i..].to_vec();
                    break;
                }
            }
            i += 1;
        }
    }
    opts.otlp_forward = otlp_forward.unwrap_or(opts.arch.runs_host_binaries());
    opts.check()?;
    Ok((opts, cmd))
}

/// The guest kernel's command line: the console, no reboot, quiet, the
/// initramfs's init, then `append`'s words.
fn kernel_command_line(arch: GuestArch, append: &[String]) -> String {
    let mut line = format!(
        "console={} panic=-1 quiet loglevel=3 rdinit=/init",
        arch.console()
    );
    for word in append {
        line.push(' ');
        line.push_str(word);
    }
    line
}

/// Parses a number of seconds.
pub fn parse_secs(v: &str) -> Result<Duration> {
    let secs: u64 = v
        .parse()
        .with_context(|| format!("bad number of seconds `{v}`"))?;
    Ok(Duration::from_secs(secs))
}

/// Where kernels are cached: `<target>/kspan-vm`.
pub(crate) fn cache_dir() -> PathBuf {
    crate::util::target_dir().join("kspan-vm")
}

/// The caller's environment variables that the guest command gets.
fn passed_env(extra: &[(String, String)]) -> Vec<(String, String)> {
    guest_env(std::env::vars(), extra)
}

/// The variables of `vars` (the caller's) that the guest command gets, and
/// `extra`.
fn guest_env(
    vars: impl Iterator<Item = (String, String)>,
    extra: &[(String, String)],
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vars
        .filter(|(k, _)| {
            k.starts_with("OTEL_")
                || k.starts_with("KSPAN_")
                || k == "RUST_LOG"
                || k == "RUST_BACKTRACE"
                || k == "PATH"
        })
        // The guest's own slow disk, named by `/init`.
        .filter(|(k, _)| k != SLOW_DISK_ENV)
        .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k))
        .collect();
    env.extend(extra.iter().cloned());
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push((
            "PATH".into(),
            "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".into(),
        ));
    }
    env.push(("HOME".into(), "/root".into()));
    env.sort();
    env
}

/// The script the guest runs (with the host's `/bin/sh`) inside the chroot.
fn command_script(cwd: &Path, env: &[(String, String)], cmd: &[String]) -> String {
    let mut s = String::new();
    for (k, v) in env {
        s += &format!("export {}\n", sh_quote(&format!("{k}={v}")));
    }
    let cwd = sh_quote(&cwd.to_string_lossy());
    s += &format!(
        "cd {cwd} || {{ echo \"kspan-vm: cannot enter \"{cwd}\" in the guest\" >&2; exit 125; }}\n"
    );
    let words: Vec<String> = cmd.iter().map(|a| sh_quote(a)).collect();
    s += &format!("{} </dev/null\n", words.join(" "));
    s
}

/// Markers the guest's `/init` prints around the command.
struct Markers {
    start: String,
    exit: String,
    setup_failed: String,
}

impl Markers {
    fn new(nonce: &str) -> Markers {
        Markers {
            start: format!("KSPAN-VM-START:{nonce}"),
            exit: format!("KSPAN-VM-EXIT:{nonce}:"),
            setup_failed: format!("KSPAN-VM-SETUP-FAILED:{nonce}"),
        }
    }

    /// If `line` carries the exit marker: the text before it and the status.
    fn parse_exit<'a>(&self, line: &'a str) -> Option<(&'a str, u8)> {
        let at = line.find(&self.exit)?;
        let rest = &line[at + self.exit.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let status: u32 = digits.parse().ok()?;
        Some((&line[..at], u8::try_from(status).unwrap_or(255)))
    }
}

/// What `/init` needs to know.
struct InitParams<'a> {
    markers: &'a Markers,
    modules: &'a [String],
    repo: &'a Path,
    net: bool,
}

fn init_script(p: &InitParams) -> String {
    let repo = sh_quote(&p.repo.to_string_lossy());
    let mods: Vec<String> = p.modules.iter().map(|m| sh_quote(m)).collect();
    let insmod = if mods.is_empty() {
        String::new()
    } else {
        format!(
            "for m in {}; do insmod /lib/modules/\"$m\" || fail \"insmod $m\"; done\n",
            mods.join(" ")
        )
    };
    let net = if p.net {
        "ip link set eth0 up || fail 'eth0 up'\n\
         ip addr add 10.0.2.15/24 dev eth0 || fail 'eth0 address'\n"
    } else {
        ""
    };
    format!(
        r#"#!/bin/sh
export PATH=/bin
fail() {{ echo "kspan-vm: guest setup failed: $*"; echo {failed}; poweroff -f; sleep 30; }}
mount -t proc proc /proc || fail 'mount /proc'
mount -t sysfs sysfs /sys || fail 'mount /sys'
mount -t devtmpfs devtmpfs /dev || fail 'mount /dev'
# What udev makes on a booted system: sid's bpftrace (0.27) has clang
# write its object to /dev/fd/N.
ln -s /proc/self/fd /dev/fd && ln -s fd/0 /dev/stdin && ln -s fd/1 /dev/stdout && ln -s fd/2 /dev/stderr || fail '/dev/fd'
echo 1 > /proc/sys/kernel/printk
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
{insmod}slow=
for d in /sys/block/vd*; do
  [ "$(cat "$d/serial" 2>/dev/null)" = {serial} ] && [ -b "/dev/${{d##*/}}" ] && slow="/dev/${{d##*/}}"
done
ip link set lo up || fail 'lo up'
{net}opts=trans=virtio,version=9p2000.L,msize={msize},cache=loose
mount -t 9p -o "$opts,ro" hostroot /newroot || fail 'mounting the host root over 9p'
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp || fail 'tmpfs on /tmp'
mkdir -p /newroot{repo} 2>/dev/null
mount -t 9p -o "$opts" repo /newroot{repo} || fail 'mounting the repository over 9p'
mount -t tracefs tracefs /sys/kernel/tracing || fail 'mount tracefs'
mount -t debugfs debugfs /sys/kernel/debug || fail 'mount debugfs'
mount -t bpf bpf /sys/fs/bpf || fail 'mount bpffs'
mount -o rbind /sys /newroot/sys || fail 'bind /sys'
mount -o bind /proc /newroot/proc || fail 'bind /proc'
mount -o rbind /dev /newroot/dev || fail 'bind /dev'
echo {start}
[ -n "$slow" ] || echo "kspan-vm: warning: no virtio-blk disk of serial {serial} in the guest: {env} is not set"
env -i ${{slow:+{env}=$slow}} /bin/chroot /newroot /bin/sh -c "$(cat /cmd.sh)"
status=$?
sync
echo
echo "{exit}$status"
poweroff -f
sleep 30
"#,
        failed = p.markers.setup_failed,
        start = p.markers.start,
        exit = p.markers.exit,
        msize = MSIZE,
        serial = SLOW_DISK_SERIAL,
        env = SLOW_DISK_ENV,
    )
}

fn busybox() -> Result<PathBuf> {
    let path = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow!("busybox not found: run `cargo xtask deps` (busybox-static)"))?;
    let bytes = fs::read(&path)?;
    if bytes.windows(8).any(|w| w == b"/lib64/l") {
        bail!(
            "{} is dynamically linked; the initramfs needs busybox-static",
            path.display()
        );
    }
    Ok(path)
}

/// The initramfs's busybox for `arch` (a static one), and its applets.
fn initramfs_busybox(arch: GuestArch, root: &Path) -> Result<(PathBuf, Vec<String>)> {
    if arch.foreign_root().is_some() {
        // The foreign root's busybox-static; it cannot run here to list its
        // applets.
        return Ok((rootfs::busybox(root), rootfs::applets()?));
    }
    let bb = busybox()?;
    let list = crate::util::output(Command::new(&bb).arg("--list"))?;
    let applets = list
        .split_whitespace()
        .filter(|a| *a != "busybox")
        .map(String::from)
        .collect();
    Ok((bb, applets))
}

/// Builds the initramfs around busybox `bb` and its `applets`; returns its
/// bytes.
fn initramfs(
    (bb, applets): &(PathBuf, Vec<String>),
    modules: &[PathBuf],
    init: &str,
    cmd: &str,
) -> Result<Vec<u8>> {
    let mut entries: Vec<(String, Entry)> = ["bin", "dev", "proc", "sys", "newroot", "tmp", "lib"]
        .iter()
        .map(|d| (d.to_string(), Entry::Dir))
        .collect();
    entries.push(("lib/modules".into(), Entry::Dir));
    entries.push(("dev/console".into(), Entry::CharDev { major: 5, minor: 1 }));
    entries.push(("dev/null".into(), Entry::CharDev { major: 1, minor: 3 }));
    entries.push((
        "bin/busybox".into(),
        Entry::File {
            mode: 0o755,
            data: fs::read(bb).with_context(|| format!("reading {}", bb.display()))?,
        },
    ));
    for applet in applets {
        entries.push((format!("bin/{applet}"), Entry::Symlink("busybox".into())));
    }
    for m in modules {
        let name = m.file_name().unwrap_or_default().to_string_lossy();
        entries.push((
            format!("lib/modules/{name}"),
            Entry::File {
                mode: 0o644,
                data: fs::read(m)?,
            },
        ));
    }
    entries.push((
        "init".into(),
        Entry::File {
            mode: 0o755,
            data: init.as_bytes().to_vec(),
        },
    ));
    entries.push((
        "cmd.sh".into(),
        Entry::File {
            mode: 0o644,
            data: cmd.as_bytes().to_vec(),
        },
    ));
    Ok(cpio::archive(&entries))
}

/// This binary's path, for the relays. `cargo build --workspace` may have
/// replaced the file since we started (the link then reads "... (deleted)");
/// the new binary at the same path does the same job.
fn self_exe() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the xtask binary")?;
    if exe.is_file() {
        return Ok(exe);
    }
    let s = exe.to_string_lossy();
    let fresh = PathBuf::from(s.strip_suffix(" (deleted)").unwrap_or(&s));
    if fresh.is_file() {
        return Ok(fresh);
    }
    bail!("the xtask binary {} is gone", exe.display())
}

/// QEMU's arguments for the slow disk.
fn slow_disk_args() -> Vec<String> {
    vec![
        "-blockdev".into(),
        format!(
            "driver=null-co,node-name=slow,size={SLOW_DISK_BYTES},\
             latency-ns={},read-zeroes=on",
            SLOW_DISK_LATENCY.as_nanos()
        ),
        "-device".into(),
        format!("virtio-blk-pci,drive=slow,serial={SLOW_DISK_SERIAL}"),
    ]
}

/// Escapes a value for a QEMU `-option key=value,...` list.
fn qemu_escape(s: &str) -> String {
    s.replace(',', ",,")
}

/// Removes the per-run directory when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Runs `cmd` in a guest, in directory `cwd`; returns the guest's exit status.
pub fn run_vm(opts: &VmOptions, cmd: &[String], cwd: &Path) -> Result<u8> {
    run_vm_verdicts(opts, cmd, cwd).map(|(status, _)| status)
}

/// The lines of a guest's console that say what failed: the test script's
/// `==> kspan-vm: FAILED: ...` and `==> kspan-vm: HUNG: ...`, gathered so a
/// run's summary names them, not only its long console.
pub const VERDICT_PREFIXES: [&str; 2] = ["==> kspan-vm: FAILED:", "==> kspan-vm: HUNG:"];

/// [`run_vm`], and the console's verdict lines ([`VERDICT_PREFIXES`]); a
/// run that times out names them, and the last `==> kspan-vm: running`
/// line and test started, in its error.
pub fn run_vm_verdicts(opts: &VmOptions, cmd: &[String], cwd: &Path) -> Result<(u8, Vec<String>)> {
    let t0 = Instant::now();
    opts.check()?;
    let arch = opts.arch;
    let qemu = which(arch.qemu()).ok_or_else(|| {
        anyhow!(
            "{} not found: run `cargo xtask deps` (package {})",
            arch.qemu(),
            arch.qemu_package()
        )
    })?;
    let repo = repo_root();
    let kernel = kernel::prepare(&opts.kernel, arch, &cache_dir())?;
    let root = rootfs::prepare(arch, opts.with_bpftrace, &cache_dir())?;
    if root != Path::new("/") {
        // The repository's mount point: the guest's root is read-only.
        let at = root.join(repo.strip_prefix("/").unwrap_or(&repo));
        fs::create_dir_all(&at).with_context(|| format!("creating {}", at.display()))?;
    }

    let nonce = format!(
        "{:x}{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    );
    let work = TempDir(std::env::temp_dir().join(format!("kspan-vm-{nonce}")));
    fs::create_dir_all(&work.0)?;

    // OTLP forwarding: a loopback endpoint of the caller becomes reachable
    // from the guest's loopback through a relay and QEMU's guestfwd.
    let env = passed_env(&opts.env);
    let forwards = if opts.otlp_forward {
        relay::loopback_endpoints(&env)
    } else {
        if !arch.runs_host_binaries() && !relay::loopback_endpoints(&env).is_empty() {
            eprintln!(
                "kspan-vm: note: the loopback OTEL_EXPORTER_OTLP_ENDPOINT is not forwarded \
                 to the host: there is no {} OTLP relay",
                arch.name()
            );
        }
        Vec::new()
    };
    let mut guest_cmd: Vec<String> = Vec::new();
    let mut xtask = PathBuf::new();
    if !forwards.is_empty() {
        xtask = self_exe()?;
        guest_cmd.push(xtask.to_string_lossy().into_owned());
        guest_cmd.push("__guest-relay".into());
        for (_, port) in &forwards {
            guest_cmd.push(format!("127.0.0.1:{port}"));
            guest_cmd.push(format!("{GUEST_FWD_ADDR}:{port}"));
        }
        guest_cmd.push("--".into());
    }
    guest_cmd.extend(cmd.iter().cloned());

    let mut roots = arch.base_modules().to_vec();
    roots.push(SLOW_DISK_MODULE);
    if !forwards.is_empty() {
        roots.push("virtio_net");
    }
    let modules = kernel::stage_modules(&kernel, &roots, &work.0.join("modules"))?;
    let module_names: Vec<String> = modules
        .iter()
        .map(|m| {
            m.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let markers = Markers::new(&nonce);
    let init = init_script(&InitParams {
        markers: &markers,
        modules: &module_names,
        repo: &repo,
        net: !forwards.is_empty(),
    });
    let script = command_script(cwd, &env, &guest_cmd);
    let initrd = work.0.join("initrd.cpio");
    let bb = initramfs_busybox(arch, &root)?;
    fs::write(&initrd, initramfs(&bb, &modules, &init, &script)?)?;

    let mut q = Command::new(qemu);
    // An x86-64 guest's vCPUs share one host thread: with multi-threaded
    // TCG a vCPU can run code another vCPU has just patched (the kernel's
    // int3-based text_poke of ftrace call sites, done by every trampoline
    // attach and detach), and the guest dies of a stray int3; on two host
    // cores it costs no time, but it serialises the guest's CPUs:
    // `--multi-threaded-tcg` is for per-call benchmarks, which attach once.
    // arm64 patches kernel text with the other CPUs stopped (no int3
    // protocol), so its guest gets a thread per vCPU: on one thread, a vCPU
    // waits out the other's turn, up to a guest tick, anywhere, and one
    // sched_switch's two probes (the kernel's trace event, kspan's program)
    // were seen 4 ms apart, a sleep's 9 ms off CPU read as 5.
    q.args([
        "-accel",
        if opts.threaded_tcg() {
            "tcg,thread=multi"
        } else {
            "tcg,thread=single"
        },
        "-m",
        &opts.mem,
    ])
    .args(arch.machine_args())
    .args(["-smp", &opts.smp.to_string()])
    .args(["-nographic", "-no-reboot"]);
    if opts.icount {
        q.args(["-icount", "shift=0"]);
    }
    if forwards.is_empty() {
        q.args(["-net", "none"]);
    } else {
        let mut netdev = "user,id=n0,restrict=on".to_string();
        for (host, port) in &forwards {
            // One host process per guest connection (`cmd:`), which connects
            // to the host's loopback endpoint and relays.
            let connect = format!(
                "{} __host-connect {host}:{port}",
                sh_quote(&xtask.to_string_lossy())
            );
            netdev += &format!(
                ",guestfwd=tcp:{GUEST_FWD_ADDR}:{port}-cmd:{}",
                qemu_escape(&connect)
            );
        }
        q.args(["-netdev", &netdev, "-device", "virtio-net-pci,netdev=n0"]);
    }
    q.arg("-kernel")
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(&initrd)
        .arg("-append")
        .arg(kernel_command_line(arch, &opts.append))
        .args([
            "-fsdev",
            &format!(
                "local,id=hostroot,path={},security_model=none,readonly=on,multidevs=remap",
                qemu_escape(&root.to_string_lossy())
            ),
            "-device",
            "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
            "-fsdev",
            &format!(
                "local,id=repo,path={},security_model=none,multidevs=remap",
                qemu_escape(&repo.to_string_lossy())
            ),
            "-device",
            "virtio-9p-pci,fsdev=repo,mount_tag=repo",
        ])
        .args(slow_disk_args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let release = if kernel.release.is_empty() {
        String::new()
    } else {
        format!(" ({})", kernel.release)
    };
    eprintln!(
        "kspan-vm: booting {}{release} ({}) under QEMU/TCG{}",
        opts.kernel.name(),
        arch.name(),
        if forwards.is_empty() {
            String::new()
        } else {
            let ports: Vec<String> = forwards.iter().map(|(_, p)| p.to_string()).collect();
            format!(", forwarding OTLP port {} to the host", ports.join(","))
        }
    );
    let child = q
        .spawn()
        .with_context(|| format!("starting {}", arch.qemu()))?;
    let outcome = console(child, &markers, opts, t0)?;
    let total = t0.elapsed().as_secs_f64();
    match outcome {
        Outcome::Exit {
            status,
            booted,
            verdicts,
        } => {
            eprintln!(
                "kspan-vm: {}{release}: exit status {status} (guest ready after {:.1}s, total {total:.1}s)",
                opts.kernel.name(),
                booted.as_secs_f64()
            );
            Ok((status, verdicts))
        }
        Outcome::Failed { why, tail, running } => {
            eprintln!(
                "kspan-vm: ---- guest console tail (last {} lines) ----",
                tail.len()
            );
            for l in &tail {
                eprintln!("{l}");
            }
            eprintln!("kspan-vm: ---- end of guest console tail ----");
            bail!(
                "VM run on {}{release} failed after {total:.1}s: {why}{}",
                opts.kernel.name(),
                if running.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", running.join("; "))
                }
            )
        }
    }
}

enum Outcome {
    Exit {
        status: u8,
        booted: Duration,
        verdicts: Vec<String>,
    },
    Failed {
        why: String,
        tail: VecDeque<String>,
        /// The verdicts so far, the last binary and the last test started.
        running: Vec<String>,
    },
}

/// What a console says was running and what failed, line by line.
#[derive(Default)]
pub(crate) struct Progress {
    verdicts: Vec<String>,
    binary: Option<String>,
    test: Option<String>,
}

impl Progress {
    pub(crate) fn line(&mut self, line: &str) {
        if VERDICT_PREFIXES.iter().any(|p| line.starts_with(p)) {
            self.verdicts
                .push(line.trim_start_matches("==> kspan-vm: ").to_string());
        } else if let Some(b) = line.strip_prefix("==> kspan-vm: running ") {
            self.binary = Some(b.to_string());
            self.test = None;
        } else if let Some(t) = line.strip_prefix("test ") {
            // `test NAME ... ok`; a hung test leaves `test NAME ...`.
            if let Some((name, _)) = t.split_once(" ...") {
                self.test = Some(name.to_string());
            }
        }
    }

    /// For a run that never finished: its verdicts, then where it stopped.
    pub(crate) fn stopped(self) -> Vec<String> {
        let mut out = self.verdicts;
        if let Some(b) = self.binary {
            out.push(match self.test {
                Some(t) => format!("last running {b}, its last test started {t}"),
                None => format!("last running {b}"),
            });
        }
        out
    }
}

enum Event {
    Line(Vec<u8>),
    Eof,
}

/// Streams the console until the exit marker, QEMU's exit, or the timeout.
fn console(mut child: Child, markers: &Markers, opts: &VmOptions, t0: Instant) -> Result<Outcome> {
    let stdout = child.stdout.take().context("qemu stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        loop {
            let mut buf = Vec::new();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx.send(Event::Line(buf)).is_err() {
                        return;
                    }
                }
            }
        }
        let _ = tx.send(Event::Eof);
    });

    let deadline = t0 + opts.timeout;
    let mut tail: VecDeque<String> = VecDeque::with_capacity(TAIL_LINES);
    let mut started: Option<Duration> = None;
    let mut status: Option<u8> = None;
    let mut setup_failed = false;
    let mut panicked = false;
    let mut timed_out = false;
    // An empty line is held back: the one just before the exit marker is ours.
    let mut held_empty = false;
    let mut out = ConsoleOut::new(opts.hold_console);
    let mut progress = Progress::default();
    loop {
        let limit = match status {
            // After the marker, give `poweroff -f` a little time.
            Some(_) => Duration::from_secs(20),
            None => deadline.saturating_duration_since(Instant::now()),
        };
        match rx.recv_timeout(limit) {
            Ok(Event::Line(bytes)) => {
                let text = String::from_utf8_lossy(&bytes);
                let line = text.trim_end_matches(['\n', '\r']).to_string();
                if status.is_some() {
                    if opts.verbose {
                        println!("{}", printable(&line));
                    }
                    continue;
                }
                if let Some((before, code)) = markers.parse_exit(&line) {
                    if started.is_some() && !before.is_empty() {
                        out.line(before);
                    }
                    status = Some(code);
                    continue;
                }
                if line.contains(&markers.start) {
                    started = Some(t0.elapsed());
                    continue;
                }
                if line.contains(&markers.setup_failed) {
                    setup_failed = true;
                }
                if line.contains("Kernel panic") {
                    panicked = true;
                }
                if tail.len() == TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(printable(&line));
                if started.is_some() {
                    progress.line(&line);
                }
                if started.is_none() {
                    // Boot noise (firmware escape sequences, kernel messages).
                    if opts.verbose {
                        println!("{}", printable(&line));
                    }
                } else {
                    if held_empty {
                        out.line("");
                        held_empty = false;
                    }
                    if line.is_empty() {
                        held_empty = true;
                    } else {
                        out.line(&line);
                    }
                }
            }
            Ok(Event::Eof) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if status.is_none() {
                    timed_out = true;
                }
                break;
            }
        }
    }
    out.release(&opts.kernel.name());
    if timed_out || status.is_some() {
        // Our own child; no-op if it already exited.
        let _ = child.kill();
    }
    let qemu_status = child.wait().context("waiting for qemu")?;
    if let Some(status) = status {
        return Ok(Outcome::Exit {
            status,
            booted: started.unwrap_or_default(),
            verdicts: progress.verdicts,
        });
    }
    let why = if timed_out {
        format!(
            "timed out after {}s (QEMU killed){}",
            opts.timeout.as_secs(),
            if started.is_some() {
                ", the command was running"
            } else {
                ", the guest never reached the command"
            }
        )
    } else if setup_failed {
        "the guest's /init could not set up the guest (see the console tail)".to_string()
    } else if panicked {
        format!("the guest kernel panicked; QEMU exited ({qemu_status})")
    } else {
        format!("QEMU exited ({qemu_status}) without the guest's exit marker")
    };
    Ok(Outcome::Failed {
        why,
        tail,
        running: progress.stopped(),
    })
}

/// Where the command's console lines go: to stdout as they come, or held
/// and printed in one block ([`VmOptions::hold_console`]).
struct ConsoleOut {
    held: Option<Vec<String>>,
}

impl ConsoleOut {
    fn new(hold: bool) -> Self {
        ConsoleOut {
            held: hold.then(Vec::new),
        }
    }

    fn line(&mut self, line: &str) {
        match &mut self.held {
            Some(held) => held.push(line.to_string()),
            None => {
                let mut o = std::io::stdout().lock();
                let _ = writeln!(o, "{line}");
                let _ = o.flush();
            }
        }
    }

    /// Prints what was held, in one block under stdout's lock.
    fn release(&mut self, guest: &str) {
        let Some(held) = self.held.take() else {
            return;
        };
        let mut o = std::io::stdout().lock();
        let _ = writeln!(
            o,
            "==> kspan-vm: {guest}'s console ({} lines, held while it ran beside another guest)",
            held.len()
        );
        for l in &held {
            let _ = writeln!(o, "{l}");
        }
        let _ = writeln!(o, "==> kspan-vm: end of {guest}'s console");
        let _ = o.flush();
    }
}

/// `line` without terminal escape sequences and control characters (the
/// firmware's `ESC c` would reset the caller's terminal).
fn printable(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                if chars.peek() == Some(&'[') {
                    chars.next();
                    // CSI: parameters, then one final byte in '@'..='~'.
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                } else {
                    chars.next();
                }
            }
            '\t' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_marker() {
        let m = Markers::new("abc");
        assert_eq!(m.parse_exit("KSPAN-VM-EXIT:abc:0"), Some(("", 0)));
        assert_eq!(m.parse_exit("KSPAN-VM-EXIT:abc:3\r"), Some(("", 3)));
        assert_eq!(
            m.parse_exit("partialKSPAN-VM-EXIT:abc:137"),
            Some(("partial", 137))
        );
        assert_eq!(m.parse_exit("KSPAN-VM-EXIT:abc:999"), Some(("", 255)));
        // Another run's nonce, or no status, is not our marker.
        assert_eq!(m.parse_exit("KSPAN-VM-EXIT:xyz:0"), None);
        assert_eq!(m.parse_exit("KSPAN-VM-EXIT:abc:"), None);
        assert_eq!(m.parse_exit("hello"), None);
    }

    #[test]
    fn strips_escapes() {
        assert_eq!(
            printable("\x1bc\x1b[?7l\x1b[2J\x1b[0mSeaBIOS (version 1.16)\r"),
            "SeaBIOS (version 1.16)"
        );
        assert_eq!(printable("a\tb\x07c"), "a\tbc");
    }

    #[test]
    fn args() {
        let a: Vec<String> = [
            "--kernel",
            "debian13",
            "--timeout",
            "20",
            "--",
            "sh",
            "-c",
            "exit 3",
        ]
        .map(String::from)
        .to_vec();
        let (o, cmd) = parse_args(&a).unwrap();
        assert_eq!(o.kernel.name(), "debian13");
        assert_eq!(o.timeout, Duration::from_secs(20));
        assert_eq!(cmd, ["sh", "-c", "exit 3"]);
        let a: Vec<String> = ["uname", "-r"].map(String::from).to_vec();
        let (o, cmd) = parse_args(&a).unwrap();
        assert_eq!(o.kernel.name(), "debian12");
        assert_eq!(cmd, ["uname", "-r"]);
        let a: Vec<String> = ["--kernel=sid", "uname"].map(String::from).to_vec();
        let (o, cmd) = parse_args(&a).unwrap();
        assert_eq!(o.kernel.name(), "debian14");
        assert_eq!(cmd, ["uname"]);
        assert!(!o.multi_threaded_tcg && !o.threaded_tcg());
        let a: Vec<String> = ["--arch", "arm64", "uname"].map(String::from).to_vec();
        assert!(parse_args(&a).unwrap().0.threaded_tcg());
        let a: Vec<String> = ["--arch", "arm64", "--icount", "uname"]
            .map(String::from)
            .to_vec();
        assert!(!parse_args(&a).unwrap().0.threaded_tcg());
        let a: Vec<String> = ["--append", "preempt=full  mitigations=off", "uname"]
            .map(String::from)
            .to_vec();
        let (opts, cmd) = parse_args(&a).unwrap();
        assert_eq!(opts.append, ["preempt=full", "mitigations=off"]);
        assert_eq!(cmd, ["uname"]);
        assert_eq!(
            kernel_command_line(opts.arch, &opts.append),
            "console=ttyS0 panic=-1 quiet loglevel=3 rdinit=/init preempt=full mitigations=off"
        );
        let a: Vec<String> = ["--multi-threaded-tcg", "uname"].map(String::from).to_vec();
        let (o, cmd) = parse_args(&a).unwrap();
        assert!(o.multi_threaded_tcg);
        assert_eq!(cmd, ["uname"]);
        assert!(parse_args(&["--bogus".to_string()]).is_err());
        let a: Vec<String> = ["--icount", "uname"].map(String::from).to_vec();
        assert!(parse_args(&a).unwrap().0.icount);
        let a: Vec<String> = ["--icount", "--multi-threaded-tcg", "uname"]
            .map(String::from)
            .to_vec();
        let e = parse_args(&a).unwrap_err().to_string();
        assert!(
            e.contains("--icount") && e.contains("--multi-threaded-tcg"),
            "{e}"
        );
    }

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arch_args() {
        let (o, cmd) = parse_args(&strings(&["uname"])).unwrap();
        assert_eq!(o.arch, GuestArch::X86_64);
        assert!(o.otlp_forward);
        let (o, cmd2) = parse_args(&strings(&[
            "--arch", "arm64", "--kernel", "debian14", "--", "uname", "-m",
        ]))
        .unwrap();
        assert_eq!(cmd, ["uname"]);
        assert_eq!(
            (o.arch, o.kernel.name().as_str()),
            (GuestArch::Arm64, "debian14")
        );
        assert_eq!(cmd2, ["uname", "-m"]);
        // No relay runs in an arm64 guest: off by default, refused if asked.
        assert!(!o.otlp_forward);
        let (o, _) = parse_args(&strings(&["--arch=aarch64", "--no-otlp-forward", "x"])).unwrap();
        assert_eq!(o.arch, GuestArch::Arm64);
        for a in [
            &["--otlp-forward", "--arch", "arm64", "x"][..],
            &["--arch", "arm64", "--otlp-forward", "x"][..],
        ] {
            let e = parse_args(&strings(a)).unwrap_err().to_string();
            assert!(e.contains("no arm64 OTLP relay"), "{e}");
        }
        let (o, _) = parse_args(&strings(&["--with-bpftrace", "--arch", "arm64", "x"])).unwrap();
        assert!(o.with_bpftrace);
        let e = parse_args(&strings(&["--with-bpftrace", "x"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("host's bpftrace"), "{e}");
        let e = parse_args(&strings(&["--arch", "riscv64", "x"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("use x86_64 or arm64"), "{e}");
        assert_eq!(
            kernel_command_line(GuestArch::Arm64, &[]),
            "console=ttyAMA0 panic=-1 quiet loglevel=3 rdinit=/init"
        );
    }

    #[test]
    fn guest_script_quotes() {
        let env = vec![("RUST_LOG".to_string(), "debug,x='y'".to_string())];
        let s = command_script(
            Path::new("/work/my repo"),
            &env,
            &["sh".into(), "-c".into(), "echo 'hi' $HOME".into()],
        );
        assert!(s.contains(r"export 'RUST_LOG=debug,x='\''y'\'''"));
        assert!(s.contains("cd '/work/my repo' ||"));
        assert!(s.ends_with(
            r"'sh' '-c' 'echo '\''hi'\'' $HOME' </dev/null
"
        ));
    }

    #[test]
    fn init_has_no_empty_module_loop() {
        let m = Markers::new("n");
        let init = init_script(&InitParams {
            markers: &m,
            modules: &[],
            repo: Path::new("/work/main"),
            net: false,
        });
        assert!(!init.contains("insmod"));
        assert!(init.contains("repo /newroot'/work/main'"));
        assert!(init.contains("echo \"KSPAN-VM-EXIT:n:$status\""));
        let init = init_script(&InitParams {
            markers: &m,
            modules: &["9p.ko".into()],
            repo: Path::new("/r"),
            net: true,
        });
        assert!(init.contains("for m in '9p.ko'; do insmod"));
        assert!(init.contains("10.0.2.15/24"));
        // The slow disk, found by its serial, named to the command.
        assert!(init.contains("= kspan-slow ]"), "{init}");
        assert!(init.contains("env -i ${slow:+KSPAN_SLOW_DISK=$slow} /bin/chroot"));
    }

    #[test]
    fn slow_disk() {
        let args = slow_disk_args().join(" ");
        assert_eq!(
            args,
            "-blockdev driver=null-co,node-name=slow,size=67108864,latency-ns=10000000,\
             read-zeroes=on -device virtio-blk-pci,drive=slow,serial=kspan-slow"
        );
        // The guest's own disk wins over a caller's variable.
        let caller = [
            (SLOW_DISK_ENV.to_string(), "/dev/caller".to_string()),
            ("KSPAN_OTHER".to_string(), "x".to_string()),
        ];
        let env = guest_env(caller.into_iter(), &[]);
        assert!(!env.iter().any(|(k, _)| k == SLOW_DISK_ENV), "{env:?}");
        assert!(env.iter().any(|(k, _)| k == "KSPAN_OTHER"), "{env:?}");
    }
}
