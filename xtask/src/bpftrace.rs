//! The bpftrace that the benchmarks compare kspan against: the bpftrace
//! package of the same Debian release as the guest's kernel (issue 14:
//! "side by side in one run against the bpftrace package of the same Debian
//! release").
//!
//! The guest's userland is the host's (Debian 12), whose own bpftrace
//! (`cargo xtask deps` installs it) is Debian 12's. For sid's kernel
//! (`debian14`) sid's bpftrace, and for Debian 11's 5.10 (`debian11`)
//! bullseye's (0.11), is fetched like the kernel packages
//! ([`crate::kernel`]): a private apt state for the suite on the machine's
//! Debian mirror, the dependency closure from the suite's package index
//! ([`crate::packages`]), each package unpacked with `dpkg -x` into
//! `<target>/kspan-vm/bpftrace/<suite>/root/`; nothing is installed and no
//! file of the machine's apt state is touched.
//!
//! Sid's bpftrace needs sid's libraries, glibc and libstdc++ among them
//! (newer than the host's, so the host's cannot stand in); bullseye's needs
//! bullseye's (its bcc, LLVM 11, and libraries of sonames the host no
//! longer has). Either runs through its suite's own dynamic loader with
//! that suite's library directories only.
//! The wrapper `<target>/kspan-vm/bpftrace/<suite>/bpftrace-<suite>` does
//! `exec <root>/usr/lib64/ld-linux-x86-64.so.2 --library-path <root's lib
//! dirs> <root>/usr/bin/bpftrace "$@"` (bullseye's 0.11 is started
//! directly instead, its binary made to name bullseye's loader and
//! libraries: it uprobes its own `BEGIN_trigger` through `/proc/self/exe`,
//! see [`uprobes_itself`]):
//! - the library path is given on the loader's command line, not in
//!   `LD_LIBRARY_PATH`, so the programs bpftrace starts (`-c`) run with the
//!   host's environment and libraries, as they would under the host's
//!   bpftrace;
//! - `exec` keeps the wrapper's pid for bpftrace, which `cpid` (the
//!   program's own child), `-p` and the others part's `$$` (bpftrace's own
//!   pid) rely on.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};

use crate::kernel::{self, KernelSpec};
use crate::packages;
use crate::util::{opt_value, output, which};

/// The suites whose own bpftrace the bench fetches, when the machine is of
/// another suite: sid's (0.27) for debian14, bullseye's (0.11, with its
/// bcc, LLVM 11 and glibc 2.31) for debian11's 5.10. Trixie (Debian 13)
/// works the same way: adding it here
/// gives trixie's bpftrace 0.23.2 (22 packages, glibc 2.41), which ran
/// `--version` and a `-c` latency script in the debian13 guest on
/// 2026-12-01. It is left out so that the Debian 13 figures keep the
/// baseline they were measured against, the host's Debian 12 bpftrace,
/// until they are measured again.
const OWN_BPFTRACE: &[&str] = &["bullseye", "sid"];

/// The multiarch and plain library directories of an unpacked root, in the
/// loader's order of search.
const LIB_DIRS: &[&str] = &[
    "usr/lib/x86_64-linux-gnu",
    "lib/x86_64-linux-gnu",
    "usr/lib",
    "lib",
];

/// The dynamic loader, where glibc's package puts it since Debian 13 (its
/// files moved to `/usr`), in Debian 12, and in Debian 11 (whose
/// `/lib64/ld-linux-x86-64.so.2` is an absolute link to
/// `/lib/x86_64-linux-gnu/ld-2.31.so`, the host's path, not the root's).
const LOADERS: &[&str] = &[
    "usr/lib64/ld-linux-x86-64.so.2",
    "lib64/ld-linux-x86-64.so.2",
    "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
];

/// The bpftrace a benchmark runs in the guest.
#[derive(Debug)]
pub struct Bpftrace {
    /// The command, in place of `bpftrace` (a path readable in the guest,
    /// which sees the host's file system).
    pub command: String,
    /// Which bpftrace that is, for the report.
    pub about: String,
    /// Whether it attaches `kfunc:`/`kretfunc:` probes on the guest's
    /// kernel. Bullseye's 0.11 does not on Debian 11's 5.10, which has the
    /// trampolines: it probes for them with an fentry program on `strlen`,
    /// which that kernel's BTF does not hold (seen 2026-12-07: `--info`
    /// says `kfunc: no`). Its baseline is then the `kprobe:` pair.
    pub kfunc: bool,
}

/// Whether `suite`'s bpftrace attaches `kfunc:` probes (see
/// [`Bpftrace::kfunc`]).
fn has_kfunc(suite: &str) -> bool {
    suite != "bullseye"
}

/// The suite whose bpftrace goes with `kernel`, when that is not the host's
/// own (see [`OWN_BPFTRACE`]).
fn own_suite(kernel: &KernelSpec, host_suite: Option<&str>) -> Option<&'static str> {
    match kernel {
        KernelSpec::Debian { suite, .. }
            if OWN_BPFTRACE.contains(suite) && host_suite != Some(*suite) =>
        {
            Some(suite)
        }
        _ => None,
    }
}

/// The bpftrace to compare against on `kernel`: the suite's own, fetched
/// into `cache` once, or the host's.
pub fn for_kernel(kernel: &KernelSpec, cache: &Path) -> Result<Bpftrace> {
    let host_suite = kernel::os_release_codename();
    if let Some(suite) = own_suite(kernel, host_suite.as_deref()) {
        let wrapper = fetch(suite, cache)?;
        let dir = wrapper.parent().unwrap_or(Path::new("."));
        let packages = fs::read_to_string(dir.join("packages")).unwrap_or_default();
        let version = packages
            .lines()
            .find_map(|l| l.strip_prefix("bpftrace "))
            .unwrap_or("of unknown version");
        return Ok(Bpftrace {
            kfunc: has_kfunc(suite),
            command: wrapper.to_string_lossy().into_owned(),
            about: format!(
                "{suite}'s package {version}, through {suite}'s own loader ({})",
                wrapper.display()
            ),
        });
    }
    if which("bpftrace").is_none() {
        bail!("bpftrace not found: run `cargo xtask deps`");
    }
    Ok(Bpftrace {
        kfunc: true,
        command: "bpftrace".into(),
        about: format!(
            "the host's package ({})",
            host_suite.as_deref().unwrap_or("unknown suite")
        ),
    })
}

/// `cargo xtask bpftrace [--kernel K]`: fetches the bpftrace the bench
/// compares against on kernel K (once) and prints the command that runs it,
/// for `cargo xtask vm --kernel K -- <command> ...`.
pub fn command(args: &[String]) -> Result<u8> {
    let mut spec = KernelSpec::parse("debian12")?;
    let mut i = 0;
    while i < args.len() {
        if let Some(v) = opt_value(args, &mut i, "--kernel")? {
            spec = KernelSpec::parse(&v)?;
        } else {
            bail!(
                "unknown bpftrace option {}: usage: cargo xtask bpftrace [--kernel K]",
                args[i]
            );
        }
    }
    let bpftrace = for_kernel(&spec, &crate::vm::cache_dir())?;
    eprintln!("bpftrace for {}: {}", spec.name(), bpftrace.about);
    println!("{}", bpftrace.command);
    Ok(0)
}

/// Fetches `suite`'s bpftrace into `<cache>/bpftrace/<suite>/` once;
/// returns its wrapper.
fn fetch(suite: &str, cache: &Path) -> Result<PathBuf> {
    let dir = cache.join("bpftrace").join(suite);
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    kernel::fill_once(&dir, |tmp| fetch_into(suite, tmp, &dir))
        .with_context(|| format!("fetching {suite}'s bpftrace into {}", dir.display()))?;
    let wrapper = dir.join(wrapper_name(suite));
    // A bpftrace made to start its loader from `dir` (see
    // [`uprobes_itself`]) runs only there: checked on every use.
    if fs::read_to_string(dir.join("direct")).is_ok() {
        check_version(Command::new(&wrapper).arg("--version")).with_context(|| {
            format!(
                "{suite}'s bpftrace starts its loader from where it was unpacked: remove {} \
                 (moved?) for it to be fetched again",
                dir.display()
            )
        })?;
    }
    Ok(wrapper)
}

/// Whether the bpftrace binary `exe` attaches its `BEGIN` and `END` probes
/// as uprobes on its own symbols (`BEGIN_trigger`), which it finds through
/// `/proc/self/exe` (0.11 does; 0.27 does not): started by an explicit
/// loader, `/proc/self/exe` is the loader, and `BEGIN` fails ("Could not
/// resolve symbol: /proc/self/exe:BEGIN_trigger", seen with 0.11). Such a
/// bpftrace is started directly instead, its loader and libraries written
/// into the binary ([`direct_start`]).
fn uprobes_itself(exe: &Path) -> Result<bool> {
    let bytes = fs::read(exe).with_context(|| format!("reading {}", exe.display()))?;
    Ok(bytes.windows(13).any(|w| w == b"BEGIN_trigger"))
}

/// Makes `root`'s bpftrace start `final_root`'s loader (its `PT_INTERP`)
/// and find its libraries in `root`'s library directories (an `RPATH` of
/// `$ORIGIN`-relative directories, which also serves the libraries'
/// own dependencies and comes before `LD_LIBRARY_PATH`): with the
/// suite's `patchelf`, unpacked into `tools` and run through the suite's
/// loader. `/proc/self/exe` is then bpftrace itself, and what it starts
/// (`-c`) keeps the host's environment. A library's own `RUNPATH` (libLLVM's
/// `$ORIGIN/../lib`) would stop the search of its dependencies at the
/// executable's `RPATH` (on to the host's `ld.so.cache`, which has libffi 8,
/// not bullseye's 7): the libraries' are removed.
fn direct_start(
    apt_opts: &[String],
    index: &std::collections::BTreeMap<String, packages::Package>,
    tmp: &Path,
    loader: &str,
    lib_dirs: &[&str],
    final_root: &Path,
) -> Result<()> {
    let root = tmp.join("root");
    let tools = tmp.join("tools");
    let patchelf = index
        .get("patchelf")
        .ok_or_else(|| anyhow!("no patchelf package in the suite's index"))?;
    kernel::download_and_unpack(
        apt_opts,
        &[format!("patchelf={}", patchelf.version)],
        &tmp.join("dl"),
        &tools,
    )?;
    let rpath: Vec<String> = lib_dirs
        .iter()
        .map(|d| format!("$ORIGIN/../../{d}"))
        .collect();
    let patchelf = || {
        let mut cmd = Command::new(root.join(loader));
        cmd.arg("--library-path")
            .arg(root_lib_path(&root, lib_dirs))
            .arg(tools.join("usr/bin/patchelf"));
        cmd
    };
    for d in lib_dirs {
        for e in fs::read_dir(root.join(d))?.flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.contains(".so") || e.file_type().is_ok_and(|t| t.is_symlink()) {
                continue;
            }
            let printed = patchelf().arg("--print-rpath").arg(&path).output()?;
            if printed.status.success()
                && !String::from_utf8_lossy(&printed.stdout).trim().is_empty()
            {
                crate::util::run(patchelf().arg("--remove-rpath").arg(&path))?;
            }
        }
    }
    let exe = root.join("usr/bin/bpftrace");
    let mut cmd = patchelf();
    cmd.arg("--set-interpreter")
        .arg(final_root.join(loader))
        .args(["--force-rpath", "--set-rpath"])
        .arg(rpath.join(":"))
        .arg(&exe);
    crate::util::run(&mut cmd)?;
    let _ = fs::remove_dir_all(&tools);
    Ok(())
}

/// `root`'s library directories `lib_dirs`, as a search path.
fn root_lib_path(root: &Path, lib_dirs: &[&str]) -> String {
    lib_dirs
        .iter()
        .map(|d| root.join(d).to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(":")
}

/// Runs `cmd` (a bpftrace `--version`); an error unless it printed a version.
fn check_version(cmd: &mut Command) -> Result<()> {
    let version = cmd
        .output()
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    let printed = String::from_utf8_lossy(&version.stdout);
    if !version.status.success() || !printed.starts_with("bpftrace v") {
        bail!(
            "{:?} --version failed ({}): {}{}",
            cmd.get_program(),
            version.status,
            printed,
            String::from_utf8_lossy(&version.stderr)
        );
    }
    Ok(())
}

fn wrapper_name(suite: &str) -> String {
    format!("bpftrace-{suite}")
}

fn fetch_into(suite: &str, tmp: &Path, dir: &Path) -> Result<()> {
    let apt_opts = kernel::private_apt(suite, "amd64", &tmp.join("apt"))?;
    let index = output(Command::new("apt-cache").args(&apt_opts).arg("dumpavail"))?;
    let index = packages::parse_index(&index);
    let closure = packages::closure(&index, "bpftrace")?;
    let pinned: Vec<String> = closure
        .packages
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    eprintln!(
        "kspan-vm: fetching {suite}'s bpftrace {} and the {} packages it needs",
        index["bpftrace"].version,
        pinned.len() - 1
    );
    let root = tmp.join("root");
    kernel::download_and_unpack(&apt_opts, &pinned, &tmp.join("dl"), &root)?;
    let loader = LOADERS
        .iter()
        .find(|l| root.join(l).exists())
        .ok_or_else(|| {
            anyhow!(
                "no dynamic loader ({}) in {}: libc6 should be among the packages unpacked ({})",
                LOADERS.join(" or "),
                root.display(),
                pinned.join(", ")
            )
        })?;
    let lib_dirs: Vec<&str> = LIB_DIRS
        .iter()
        .copied()
        .filter(|d| has_shared_objects(&root.join(d)))
        .collect();
    let direct = uprobes_itself(&root.join("usr/bin/bpftrace"))?;
    if direct {
        direct_start(&apt_opts, &index, tmp, loader, &lib_dirs, &dir.join("root"))?;
        fs::write(tmp.join("direct"), "")?;
    }
    let _ = fs::remove_dir_all(tmp.join("apt"));
    let wrapper = tmp.join(wrapper_name(suite));
    let launch = if direct {
        Launch::Direct
    } else {
        Launch::Loader {
            argv0: loader_takes_argv0(&root.join(loader)),
        }
    };
    fs::write(&wrapper, wrapper_script(suite, loader, &lib_dirs, launch))?;
    make_executable(&wrapper)?;
    check_libraries(&root, loader, &lib_dirs, direct)?;
    // It runs here as in the guest (the same files, the host's kernel): a
    // library it cannot load fails now rather than in the bench's guest.
    // (Started directly, it starts the loader of where it goes once made:
    // through the loader here, and checked there by `fetch`.)
    if direct {
        check_version(
            Command::new(root.join(loader))
                .arg("--library-path")
                .arg(root_lib_path(&root, &lib_dirs))
                .arg(root.join("usr/bin/bpftrace"))
                .arg("--version"),
        )?;
    } else {
        check_version(Command::new(&wrapper).arg("--version"))?;
    }
    let mut list: String = closure
        .packages
        .iter()
        .map(|(n, v)| format!("{n} {v}\n"))
        .collect();
    if !closure.essential.is_empty() {
        list += &format!(
            "# essential, not unpacked (the host's): {}\n",
            closure.essential.join(" ")
        );
    }
    fs::write(tmp.join("packages"), list)?;
    Ok(())
}

/// Whether the dynamic loader `loader` takes `--argv0` (glibc 2.33 and
/// later: its `--help` lists it; bullseye's 2.31 has no `--help` either).
fn loader_takes_argv0(loader: &Path) -> bool {
    Command::new(loader)
        .arg("--help")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--argv0"))
}

/// How the wrapper starts bpftrace.
#[derive(Clone, Copy, Debug)]
enum Launch {
    /// Through the unpacked loader, the library path its option; `argv0`:
    /// the loader sets bpftrace's `argv[0]` to `bpftrace` (where it can,
    /// see [`loader_takes_argv0`]).
    Loader { argv0: bool },
    /// Directly: the binary names its loader and libraries
    /// ([`direct_start`]).
    Direct,
}

/// The wrapper: runs the unpacked bpftrace through the unpacked loader, the
/// paths taken from the wrapper's own directory (the cache can move, but
/// for a [`Launch::Direct`] one).
fn wrapper_script(suite: &str, loader: &str, lib_dirs: &[&str], launch: Launch) -> String {
    let lib_path: Vec<String> = lib_dirs.iter().map(|d| format!("$here/root/{d}")).collect();
    let argv0 = match launch {
        Launch::Loader { argv0: true } => " --argv0 bpftrace",
        Launch::Loader { argv0: false } => "",
        Launch::Direct => {
            return format!(
                "#!/bin/sh\n\
                 # {suite}'s bpftrace, unpacked by `cargo xtask` with the packages it needs\n\
                 # (listed in `packages` beside this script).\n\
                 # It starts {suite}'s own dynamic loader, and finds {suite}'s libraries, as\n\
                 # its binary says (PT_INTERP, RPATH), written there by `cargo xtask`: it\n\
                 # uprobes its own BEGIN_trigger through /proc/self/exe, which must be\n\
                 # bpftrace, not the loader. `exec`: bpftrace keeps this script's pid\n\
                 # (cpid, -p, $$).\n\
                 here=$(cd \"$(dirname \"$0\")\" && pwd) || exit 127\n\
                 exec \"$here/root/usr/bin/bpftrace\" \"$@\"\n"
            );
        }
    };
    format!(
        "#!/bin/sh\n\
         # {suite}'s bpftrace, unpacked by `cargo xtask` with the packages it needs\n\
         # (listed in `packages` beside this script).\n\
         # It runs through {suite}'s own dynamic loader and libraries; the library\n\
         # path is the loader's option, not LD_LIBRARY_PATH, so that what bpftrace\n\
         # starts (-c) runs with the host's libraries. `exec`: bpftrace keeps this\n\
         # script's pid (cpid, -p, $$).\n\
         here=$(cd \"$(dirname \"$0\")\" && pwd) || exit 127\n\
         exec \"$here/root/{loader}\"{argv0} --library-path \"{}\" \"$here/root/usr/bin/bpftrace\" \"$@\"\n",
        lib_path.join(":"),
    )
}

fn has_shared_objects(dir: &Path) -> bool {
    fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains(".so"))
    })
}

fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
        .with_context(|| format!("chmod {}", path.display()))
}

/// Checks that every library bpftrace links resolves inside `root`: the
/// loader falls back to the host's directories (and its `ld.so.cache`) for
/// what the library path lacks, which would mix in the host's older
/// libraries unnoticed.
///
/// `direct`: bpftrace names its own library directories ([`direct_start`]),
/// and the loader is given none.
fn check_libraries(root: &Path, loader: &str, lib_dirs: &[&str], direct: bool) -> Result<()> {
    let mut cmd = Command::new(root.join(loader));
    if !direct {
        cmd.arg("--library-path").arg(root_lib_path(root, lib_dirs));
    }
    let out = cmd
        .arg("--list")
        .arg(root.join("usr/bin/bpftrace"))
        .output()
        .with_context(|| format!("cannot run {}", root.join(loader).display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let libs = parse_ld_list(&text);
    if libs.is_empty() {
        bail!(
            "`{} --list` of bpftrace printed no library ({}): {}",
            loader,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let root = root.canonicalize()?;
    let outside: Vec<String> = libs
        .iter()
        .filter_map(|(name, path)| match path {
            None => Some(format!("{name} (not found)")),
            Some(p) => {
                let real = Path::new(p).canonicalize().unwrap_or_else(|_| p.into());
                (!real.starts_with(&root)).then(|| format!("{name} (the host's {p})"))
            }
        })
        .collect();
    if !outside.is_empty() {
        bail!(
            "bpftrace needs libraries that none of the unpacked packages holds: {}; the \
             dependency closure missed a package (compare `apt-cache depends bpftrace` of \
             that suite with the `packages` file) ",
            outside.join(", ")
        );
    }
    Ok(())
}

/// `(library, where it resolved)` from `ld.so --list` output; `None` for
/// `not found`. The vDSO (no `=>`) is left out.
fn parse_ld_list(text: &str) -> Vec<(String, Option<String>)> {
    text.lines()
        .filter_map(|l| l.trim().split_once(" => "))
        .map(|(name, rest)| {
            let path = rest.split(" (0x").next().unwrap_or(rest).trim();
            (
                name.trim().to_string(),
                (path != "not found" && !path.is_empty()).then(|| path.to_string()),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_kernels_get_their_suites_bpftrace() {
        let sid = KernelSpec::parse("debian14").unwrap();
        assert_eq!(own_suite(&sid, Some("bookworm")), Some("sid"));
        // On a sid machine, the host's bpftrace is sid's.
        assert_eq!(own_suite(&sid, Some("sid")), None);
        // Debian 11's 5.10 with bullseye's bpftrace (0.11).
        let bullseye = KernelSpec::parse("debian11").unwrap();
        assert_eq!(own_suite(&bullseye, Some("bookworm")), Some("bullseye"));
        assert_eq!(own_suite(&bullseye, Some("bullseye")), None);
        assert!(!has_kfunc("bullseye") && has_kfunc("sid"));
        for other in ["debian12", "debian13"] {
            let k = KernelSpec::parse(other).unwrap();
            assert_eq!(own_suite(&k, Some("bookworm")), None, "{other}");
        }
        let path = KernelSpec::Path("/boot/vmlinuz-7.2.13+deb14-amd64".into());
        assert_eq!(own_suite(&path, Some("bookworm")), None);
    }

    #[test]
    fn loader_list() {
        // `ld-linux-x86-64.so.2 --library-path ... --list bpftrace` of sid's
        // 0.27.1, shortened, with a library it did not find.
        let text = "\tlinux-vdso.so.1 (0x00007fe536e83000)\n\
            \tlibzstd.so.1 => /c/root/usr/lib/x86_64-linux-gnu/libzstd.so.1 (0x00007fe536db1000)\n\
            \tlibLLVM.so.21.1 => /c/root/usr/lib/x86_64-linux-gnu/libLLVM.so.21.1 (0x00007fe528000000)\n\
            \t/lib64/ld-linux-x86-64.so.2 => /c/root/usr/lib64/ld-linux-x86-64.so.2 (0x00007fe536e85000)\n\
            \tlibbcc_bpf.so.0 => not found\n";
        assert_eq!(
            parse_ld_list(text),
            [
                (
                    "libzstd.so.1".to_string(),
                    Some("/c/root/usr/lib/x86_64-linux-gnu/libzstd.so.1".to_string())
                ),
                (
                    "libLLVM.so.21.1".to_string(),
                    Some("/c/root/usr/lib/x86_64-linux-gnu/libLLVM.so.21.1".to_string())
                ),
                (
                    "/lib64/ld-linux-x86-64.so.2".to_string(),
                    Some("/c/root/usr/lib64/ld-linux-x86-64.so.2".to_string())
                ),
                ("libbcc_bpf.so.0".to_string(), None),
            ]
        );
    }

    #[test]
    fn the_wrapper_execs_the_loader() {
        let s = wrapper_script(
            "sid",
            LOADERS[0],
            &LIB_DIRS[..1],
            Launch::Loader { argv0: true },
        );
        assert!(s.starts_with("#!/bin/sh\n"), "{s}");
        let exec = s.lines().last().unwrap();
        assert_eq!(
            exec,
            "exec \"$here/root/usr/lib64/ld-linux-x86-64.so.2\" --argv0 bpftrace \
             --library-path \"$here/root/usr/lib/x86_64-linux-gnu\" \
             \"$here/root/usr/bin/bpftrace\" \"$@\""
        );
        assert!(!s.contains("LD_LIBRARY_PATH="), "{s}");
        // Bullseye's loader (glibc 2.31, /lib64) without --argv0.
        let s = wrapper_script(
            "bullseye",
            LOADERS[1],
            &LIB_DIRS[..2],
            Launch::Loader { argv0: false },
        );
        assert_eq!(
            s.lines().last().unwrap(),
            "exec \"$here/root/lib64/ld-linux-x86-64.so.2\" \
             --library-path \"$here/root/usr/lib/x86_64-linux-gnu:$here/root/lib/x86_64-linux-gnu\" \
             \"$here/root/usr/bin/bpftrace\" \"$@\""
        );
        // Started directly (0.11 uprobes its own BEGIN_trigger).
        let s = wrapper_script("bullseye", LOADERS[2], &LIB_DIRS[..2], Launch::Direct);
        assert_eq!(
            s.lines().last().unwrap(),
            "exec \"$here/root/usr/bin/bpftrace\" \"$@\""
        );
        assert!(!s.contains("--library-path"), "{s}");
    }
}
