//! Guest kernels: fetching stock Debian kernel packages once, and the modules
//! the guest needs, in dependency order.
//!
//! A Debian kernel is cached unpacked (`dpkg -x`) under
//! `<target>/kspan-vm/kernels/<name>/root/` (`<name>-arm64` for arm64's). The
//! package is the one that the suite's `linux-image-amd64` (`linux-image-arm64`)
//! depends on; since Debian 14 (sid's 7.x) that
//! one is a meta package, and the three it depends on (image, modules, module
//! lists and config) are unpacked together instead. For the machine's own
//! suite the machine's apt state is used; for another suite (e.g. trixie on a
//! bookworm machine) a private apt state in a temporary directory is used,
//! pointing at the same Debian mirror host as the machine's own sources, so no
//! file of the machine's apt configuration or state is touched; the same for
//! another architecture (arm64 on this x86-64 machine), even of the
//! machine's suite.
//!
//! An arm64 image is booted as a raw `Image` (QEMU's `-kernel` of a Linux
//! arm64 kernel). Debian's arm64 `vmlinuz` of 6.1, 6.12 and 7.2 is one
//! already (seen 2026-12-03); a gzip-compressed one or an EFI zboot image
//! (other distributions', or a later Debian's), which QEMU 7.2 cannot boot
//! without firmware, is decompressed into the cache once ([`arm64_image`]).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};

use crate::arch::GuestArch;
use crate::util::{is_root, output, run, which};

/// Which kernel to boot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelSpec {
    /// The current kernel of a Debian suite.
    Debian {
        /// Short name, also the cache directory name (`debian12`).
        label: &'static str,
        /// Suite code name (`bookworm`).
        suite: &'static str,
    },
    /// A vmlinuz file, or a directory holding an unpacked kernel package.
    Path(PathBuf),
}

impl KernelSpec {
    /// Parses `debian11`, `debian12`, `debian13`, `debian14` (or their code names), or a
    /// path.
    ///
    /// `debian14` is Debian's newest packaged kernel: it tracks sid
    /// (unstable), where a new kernel lands first, rather than forky
    /// (testing, the Debian 14 in the making), whose kernel lags behind
    /// sid's; so `forky` and `sid` both name it.
    pub fn parse(s: &str) -> Result<KernelSpec> {
        Ok(match s {
            "debian11" | "bullseye" => KernelSpec::Debian {
                label: "debian11",
                suite: "bullseye",
            },
            "debian12" | "bookworm" => KernelSpec::Debian {
                label: "debian12",
                suite: "bookworm",
            },
            "debian13" | "trixie" => KernelSpec::Debian {
                label: "debian13",
                suite: "trixie",
            },
            "debian14" | "forky" | "sid" => KernelSpec::Debian {
                label: "debian14",
                suite: "sid",
            },
            _ if s.contains('/') || Path::new(s).exists() => {
                KernelSpec::Path(fs::canonicalize(s).with_context(|| format!("kernel path {s}"))?)
            }
            _ => bail!(
                "unknown kernel `{s}`: use debian11, debian12, debian13, debian14 (sid), a path to a \
                 vmlinuz or the directory of an unpacked kernel package"
            ),
        })
    }

    /// A short name for messages.
    pub fn name(&self) -> String {
        match self {
            KernelSpec::Debian { label, .. } => (*label).to_string(),
            KernelSpec::Path(p) => p.display().to_string(),
        }
    }
}

/// A kernel ready to boot.
#[derive(Debug)]
pub struct Kernel {
    /// The image to boot: a bzImage, or an uncompressed ELF `vmlinux`.
    pub vmlinuz: PathBuf,
    /// The kernel release (`6.1.0-56-amd64`), when known.
    pub release: String,
    /// `lib/modules/<release>` of this kernel, when there is one.
    pub modules: Option<PathBuf>,
    /// The kernel's build configuration, when known: it says whether the
    /// image can boot uncompressed.
    pub config: Option<PathBuf>,
}

/// Resolves `spec` to a kernel of `arch`, fetching a Debian package into
/// `cache` once.
pub fn prepare(spec: &KernelSpec, arch: GuestArch, cache: &Path) -> Result<Kernel> {
    let mut kernel = match spec {
        KernelSpec::Debian { label, suite } => {
            let root = fetch_debian(label, suite, arch, &cache.join("kernels"))?;
            let mut kernel = from_package_root(&root)?;
            if arch == GuestArch::X86_64 {
                if let Some(fast) = uncompressed_image(&root, &kernel) {
                    kernel.vmlinuz = fast;
                }
            }
            kernel
        }
        KernelSpec::Path(p) if p.is_dir() => from_package_root(p)?,
        KernelSpec::Path(p) => from_image_file(p),
    };
    if arch == GuestArch::Arm64 {
        kernel.vmlinuz = arm64_image(&kernel, &cache.join("kernels"))?;
    }
    Ok(kernel)
}

/// The magic of an arm64 `Image` at offset 0x38 of its header.
const ARM64_MAGIC: &[u8] = b"ARM\x64";

/// How an arm64 kernel file is packed.
#[derive(Debug, PartialEq, Eq)]
enum Arm64Packing {
    /// A raw `Image`: QEMU boots it as is.
    Image,
    /// The whole file is a gzip stream (Debian's `vmlinuz` up to 6.x).
    Gzip,
    /// An EFI zboot image (`CONFIG_EFI_ZBOOT`): a PE stub whose header says
    /// where the compressed `Image` lies and with what it is compressed.
    Zboot {
        offset: usize,
        size: usize,
        tool: &'static str,
    },
}

/// Tells how `bytes` (the start of a kernel file, at least 64 bytes; the
/// whole file for zboot's bounds check) is packed.
fn arm64_packing(bytes: &[u8]) -> Result<Arm64Packing> {
    if bytes.get(0x38..0x3c) == Some(ARM64_MAGIC) {
        return Ok(Arm64Packing::Image);
    }
    if bytes.starts_with(b"\x1f\x8b") {
        return Ok(Arm64Packing::Gzip);
    }
    // zboot header (drivers/firmware/efi/libstub/zboot-header.S): "MZ",
    // "zimg" at 4, payload offset and size (little-endian u32) at 8 and 12,
    // the compression's name (NUL-padded) at 24.
    if bytes.get(4..8) == Some(b"zimg") && bytes.len() >= 32 {
        let u32_at = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize
        };
        let (offset, size) = (u32_at(8), u32_at(12));
        let name = &bytes[24..32];
        let name = String::from_utf8_lossy(&name[..name.iter().position(|&b| b == 0).unwrap_or(8)]);
        let tool = match name.as_ref() {
            "gzip" => "gzip",
            "xz" => "xz",
            "zstd" => "zstd",
            other => bail!(
                "EFI zboot kernel compressed with `{other}`: only gzip, xz and zstd are handled"
            ),
        };
        if offset.checked_add(size).is_none_or(|end| end > bytes.len()) {
            bail!(
                "EFI zboot kernel truncated: payload {offset}+{size} beyond its {} bytes",
                bytes.len()
            );
        }
        return Ok(Arm64Packing::Zboot { offset, size, tool });
    }
    bail!("not an arm64 kernel image (no `ARM\\x64` magic, gzip stream or EFI zboot header)")
}

/// `kernel`'s image as a raw arm64 `Image`: the file itself, or its
/// decompressed payload, cached once under `kernels/arm64-images/`.
fn arm64_image(kernel: &Kernel, kernels: &Path) -> Result<PathBuf> {
    let bytes = fs::read(&kernel.vmlinuz)
        .with_context(|| format!("reading {}", kernel.vmlinuz.display()))?;
    let (payload, tool) = match arm64_packing(&bytes)
        .with_context(|| format!("booting {} on arm64", kernel.vmlinuz.display()))?
    {
        Arm64Packing::Image => return Ok(kernel.vmlinuz.clone()),
        Arm64Packing::Gzip => (&bytes[..], "gzip"),
        Arm64Packing::Zboot { offset, size, tool } => (&bytes[offset..offset + size], tool),
    };
    // Named after the file's size and time too: a kernel given by path may
    // be rebuilt with the same release.
    let mtime = fs::metadata(&kernel.vmlinuz)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    let release = if kernel.release.is_empty() {
        "unknown"
    } else {
        &kernel.release
    };
    let dir = kernels.join("arm64-images");
    let name = format!("Image-{release}-{:x}-{mtime:x}", bytes.len());
    let out = dir.join(&name);
    if out.is_file() {
        return Ok(out);
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // Written beside, renamed when complete: an interrupted run leaves no
    // half image under `out`'s name.
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let packed = dir.join(format!(".{name}.packed-{}", std::process::id()));
    fs::write(&packed, payload)?;
    let result = Command::new(tool).arg("-dc").arg(&packed).output();
    let _ = fs::remove_file(&packed);
    let result = result.with_context(|| format!("cannot run {tool} (run `cargo xtask deps`)"))?;
    let image = result.stdout;
    if image.get(0x38..0x3c) != Some(ARM64_MAGIC) {
        bail!(
            "{tool} -dc of {}'s payload gave no arm64 Image ({}): {}",
            kernel.vmlinuz.display(),
            result.status,
            String::from_utf8_lossy(&result.stderr)
        );
    }
    fs::write(&tmp, image)?;
    fs::rename(&tmp, &out)?;
    Ok(out)
}

/// A kernel from its image file: `<dir>/vmlinuz-<rel>`, its modules looked
/// for in the package root above `<dir>`, then in the running system's; or
/// Debian 14's `.../modules/<rel>/vmlinuz`, the modules beside it.
fn from_image_file(p: &Path) -> Kernel {
    let file = p.file_name().unwrap_or_default().to_string_lossy();
    let parent = p.parent().unwrap_or(Path::new("/"));
    if file == "vmlinuz"
        && parent
            .parent()
            .is_some_and(|d| d.file_name().is_some_and(|n| n == "modules"))
    {
        return Kernel {
            vmlinuz: p.to_path_buf(),
            release: parent
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
            modules: Some(parent.to_path_buf()),
            config: Some(parent.join("config")).filter(|c| c.is_file()),
        };
    }
    let release = file.strip_prefix("vmlinuz-").unwrap_or("").to_string();
    let mut modules = None;
    if !release.is_empty() {
        let pkg_root = parent.parent().unwrap_or(Path::new("/"));
        modules = [pkg_root, Path::new("/")]
            .iter()
            .flat_map(|r| [r.join("lib/modules"), r.join("usr/lib/modules")])
            .map(|d| d.join(&release))
            .find(|d| d.is_dir());
    }
    Kernel {
        vmlinuz: p.to_path_buf(),
        config: Some(parent.join(format!("config-{release}")))
            .filter(|c| !release.is_empty() && c.is_file()),
        release,
        modules,
    }
}

/// A kernel from an unpacked package, in either of Debian's layouts: up to
/// Debian 13, `boot/vmlinuz-<rel>` and `boot/config-<rel>`, the modules in
/// `lib/modules/<rel>` or `usr/lib/modules/<rel>`; since Debian 14 (sid's
/// 7.x), all of it in `usr/lib/modules/<rel>/` (`vmlinuz`, `config`,
/// `modules.builtin`, `kernel/`). The highest release wins when there are
/// several.
fn from_package_root(root: &Path) -> Result<Kernel> {
    let mut images: Vec<(String, PathBuf)> = Vec::new();
    for dir in ["boot", "lib/modules", "usr/lib/modules"] {
        let Ok(entries) = fs::read_dir(root.join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if dir == "boot" {
                if let Some(release) = name.strip_prefix("vmlinuz-") {
                    images.push((release.to_string(), e.path()));
                }
            } else if e.path().join("vmlinuz").is_file() {
                images.push((name, e.path().join("vmlinuz")));
            }
        }
    }
    images.sort();
    let Some((release, vmlinuz)) = images.pop() else {
        bail!(
            "no kernel image in {}: neither boot/vmlinuz-<release> (Debian 12, 13) nor \
             usr/lib/modules/<release>/vmlinuz (Debian 14); unpack the package holding the \
             image there (linux-image-<release>, or linux-binary-<release> where that is a \
             meta package)",
            root.display()
        );
    };
    let modules = ["lib/modules", "usr/lib/modules"]
        .iter()
        .map(|d| root.join(d).join(&release))
        .find(|d| d.is_dir());
    let config = std::iter::once(root.join("boot").join(format!("config-{release}")))
        .chain(modules.iter().map(|m| m.join("config")))
        .find(|c| c.is_file());
    Ok(Kernel {
        vmlinuz,
        release,
        modules,
        config,
    })
}

/// The kernel image uncompressed (an ELF `vmlinux`), cached next to `root`,
/// when the kernel can boot it directly (`CONFIG_PVH=y`, QEMU's PVH entry).
///
/// Under software emulation, decompressing a bzImage takes about 2 s of every
/// boot (xz); booting the ELF skips that. `None` when not possible: the
/// bzImage is then used as is.
fn uncompressed_image(root: &Path, kernel: &Kernel) -> Option<PathBuf> {
    let out = root.parent()?.join(format!("vmlinux-{}", kernel.release));
    if out.is_file() {
        return Some(out);
    }
    let config = fs::read_to_string(kernel.config.as_ref()?).ok()?;
    if !config.lines().any(|l| l == "CONFIG_PVH=y") {
        return None;
    }
    let (magic, tool): (&[u8], &str) = if config.contains("CONFIG_KERNEL_XZ=y") {
        (b"\xfd7zXZ\x00", "xz")
    } else if config.contains("CONFIG_KERNEL_ZSTD=y") {
        (b"\x28\xb5\x2f\xfd", "zstd")
    } else if config.contains("CONFIG_KERNEL_GZIP=y") {
        (b"\x1f\x8b\x08", "gzip")
    } else {
        return None;
    };
    which(tool)?;
    let image = fs::read(&kernel.vmlinuz).ok()?;
    let at = image.windows(magic.len()).position(|w| w == magic)?;
    let payload = out.with_extension("payload");
    fs::write(&payload, &image[at..]).ok()?;
    // Trailing data after the compressed stream makes some tools complain;
    // the result is checked instead of the exit status.
    let mut cmd = Command::new(tool);
    if tool == "xz" {
        cmd.arg("--single-stream");
    }
    let result = cmd
        .arg("-dc")
        .arg(&payload)
        .stderr(std::process::Stdio::null())
        .output();
    let _ = fs::remove_file(&payload);
    let elf = result.ok()?.stdout;
    if !elf.starts_with(b"\x7fELF") || elf.len() < 1 << 20 {
        return None;
    }
    let tmp = out.with_extension(format!("tmp-{}", std::process::id()));
    fs::write(&tmp, elf).ok()?;
    fs::rename(&tmp, &out).ok()?;
    Some(out)
}

/// Downloads and unpacks the kernel of `suite` for `arch` once; returns the
/// unpacked root.
fn fetch_debian(label: &str, suite: &str, arch: GuestArch, kernels: &Path) -> Result<PathBuf> {
    let dir = kernels.join(arch.kernel_dir(label));
    fill_once(&dir, |tmp| fetch_into(suite, arch, tmp))
        .with_context(|| format!("fetching the {label} ({suite}, {}) kernel", arch.debian()))?;
    Ok(dir.join("root"))
}

/// Makes `dir` once: `fill` fills a temporary directory beside it, which
/// becomes `dir` (marked `ready`) only when `fill` succeeded, so that an
/// interrupted or failed run leaves nothing half made under `dir`'s name.
pub(crate) fn fill_once(dir: &Path, fill: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    if dir.join("ready").is_file() {
        return Ok(());
    }
    let parent = dir.parent().unwrap_or(Path::new("."));
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    if let Err(err) = fill(&tmp).and_then(|()| Ok(fs::write(tmp.join("ready"), "")?)) {
        let _ = fs::remove_dir_all(&tmp);
        return Err(err);
    }
    if fs::rename(&tmp, dir).is_err() {
        // Another run finished first, or a stale incomplete directory is there.
        if dir.join("ready").is_file() {
            let _ = fs::remove_dir_all(&tmp);
        } else {
            fs::remove_dir_all(dir).with_context(|| format!("removing stale {}", dir.display()))?;
            fs::rename(&tmp, dir).with_context(|| format!("creating {}", dir.display()))?;
        }
    }
    Ok(())
}

fn fetch_into(suite: &str, arch: GuestArch, tmp: &Path) -> Result<()> {
    let host_suite = os_release_codename();
    let meta = arch.kernel_meta_package();
    // The machine's apt state knows its own suite of its own architecture.
    let apt_opts = if host_suite.as_deref() == Some(suite) && arch.runs_host_binaries() {
        Vec::new()
    } else {
        private_apt(suite, arch.debian(), &tmp.join("apt"))?
    };
    let mut pkg = kernel_package(&apt_opts, meta)?;
    if pkg.is_none() && apt_opts.is_empty() && is_root() {
        // A fresh machine may have no package lists yet.
        run(Command::new("apt-get")
            .arg("update")
            .stdout(std::io::stderr()))?;
        pkg = kernel_package(&apt_opts, meta)?;
    }
    let pkg = pkg.ok_or_else(|| {
        anyhow!("`apt-cache depends {meta}` names no linux-image-* package (run apt-get update?)")
    })?;
    let packages = image_packages(&pkg, &apt_depends(&apt_opts, &pkg)?);
    eprintln!("kspan-vm: fetching {} ({suite})", packages.join(", "));
    download_and_unpack(&apt_opts, &packages, &tmp.join("dl"), &tmp.join("root"))?;
    let _ = fs::remove_dir_all(tmp.join("apt"));
    fs::write(tmp.join("package"), packages.join("\n") + "\n")?;
    Ok(())
}

/// Downloads `packages` (names, or `name=version`) with `apt-get download`
/// and the apt state of `apt_opts` into `dl`, unpacks each into `root` with
/// `dpkg -x` (no maintainer script runs, nothing is installed), and removes
/// `dl`.
pub(crate) fn download_and_unpack(
    apt_opts: &[String],
    packages: &[String],
    dl: &Path,
    root: &Path,
) -> Result<()> {
    fs::create_dir_all(dl)?;
    let mut get = Command::new("apt-get");
    get.current_dir(dl).args(apt_opts);
    if is_root() {
        // Downloads into a root-owned temporary directory: skip the `_apt` sandbox.
        get.args(["-o", "APT::Sandbox::User=root"]);
    }
    // apt's progress goes to stderr: our stdout is the guest command's.
    run(get
        .args(["-q", "download"])
        .args(packages)
        .stdout(std::io::stderr()))?;
    let debs: Vec<PathBuf> = fs::read_dir(dl)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
        .collect();
    if debs.len() != packages.len() {
        bail!(
            "apt-get download left {} .deb files for {} packages ({})",
            debs.len(),
            packages.len(),
            packages.join(", ")
        );
    }
    for deb in &debs {
        run(Command::new("dpkg").arg("-x").arg(deb).arg(root))?;
    }
    let _ = fs::remove_dir_all(dl);
    Ok(())
}

/// The `linux-image-*` package that `meta` (`linux-image-amd64`) depends on.
fn kernel_package(apt_opts: &[String], meta: &str) -> Result<Option<String>> {
    let out = Command::new("apt-cache")
        .args(apt_opts)
        .args(["depends", meta])
        .output()
        .context("cannot run apt-cache")?;
    Ok(parse_depends(&String::from_utf8_lossy(&out.stdout), meta))
}

/// What `apt-cache depends <pkg>` prints.
fn apt_depends(apt_opts: &[String], pkg: &str) -> Result<String> {
    output(
        Command::new("apt-cache")
            .args(apt_opts)
            .args(["depends", pkg]),
    )
}

/// The packages on the `Depends:` lines of `apt-cache depends` output
/// (alternatives but the last, `|Depends:`, left out), virtual ones
/// (`<name>`) unwrapped.
fn depends(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(|p| p.trim().trim_start_matches('<').trim_end_matches('>'))
}

fn parse_depends(text: &str, meta: &str) -> Option<String> {
    depends(text)
        .find(|p| p.starts_with("linux-image-") && *p != meta)
        .map(str::to_string)
}

/// The packages that hold the kernel of `image` (`linux-image-<release>`),
/// from `deps`, its `apt-cache depends` output.
///
/// Up to Debian 13 that is `image` itself. Since Debian 14 (sid's 7.x)
/// `image` is a meta package over `linux-binary-<release>` (the image, in
/// `usr/lib/modules/<release>/vmlinuz`), `linux-modules-<release>` (the
/// `.ko.xz` files) and `linux-base-<release>` (`modules.builtin`, `config`),
/// and holds none of it.
fn image_packages(image: &str, deps: &str) -> Vec<String> {
    let release = image.strip_prefix("linux-image-").unwrap_or(image);
    let parts: Vec<String> = depends(deps)
        .filter(|d| {
            ["linux-binary-", "linux-modules-", "linux-base-"]
                .iter()
                .any(|part| d.strip_prefix(part) == Some(release))
        })
        .map(str::to_string)
        .collect();
    if parts.is_empty() {
        vec![image.to_string()]
    } else {
        parts
    }
}

/// The machine's Debian suite (`bookworm`), from `/etc/os-release`.
pub(crate) fn os_release_codename() -> Option<String> {
    let text = fs::read_to_string("/etc/os-release").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
}

/// Sets up a private apt state for `suite` of Debian architecture `arch`
/// (`amd64`, `arm64`) under `dir` and runs `apt-get update` with it; returns
/// the `-o` options that select it.
///
/// Its dpkg status is an empty file: the machine's installed packages are
/// neither read nor mixed into what apt answers (`apt-cache dumpavail` gives
/// the suite's index alone).
pub(crate) fn private_apt(suite: &str, arch: &str, dir: &Path) -> Result<Vec<String>> {
    let mirror = debian_mirror()?;
    for sub in ["lists/partial", "cache/archives/partial"] {
        fs::create_dir_all(dir.join(sub))?;
    }
    let keyring = Path::new("/usr/share/keyrings/debian-archive-keyring.gpg");
    let signed = if keyring.is_file() {
        format!(" signed-by={}", keyring.display())
    } else {
        String::new()
    };
    let status = dir.join("status");
    fs::write(&status, "")?;
    let list = dir.join("sources.list");
    fs::write(
        &list,
        format!("deb [arch={arch}{signed}] {mirror} {suite} main\n"),
    )?;
    let opts: Vec<String> = [
        format!("Dir::Etc::sourcelist={}", list.display()),
        "Dir::Etc::sourceparts=-".to_string(),
        format!("Dir::State::Lists={}", dir.join("lists").display()),
        format!("Dir::Cache={}", dir.join("cache").display()),
        format!("Dir::State::status={}", status.display()),
        // The default architecture too: unqualified names (`apt-cache
        // depends linux-image-arm64`, `apt-get download`) then mean `arch`'s.
        format!("APT::Architecture={arch}"),
        format!("APT::Architectures={arch}"),
        "Acquire::Languages=none".to_string(),
    ]
    .into_iter()
    .flat_map(|o| ["-o".to_string(), o])
    .collect();
    let mut update = Command::new("apt-get");
    update.args(&opts);
    if is_root() {
        update.args(["-o", "APT::Sandbox::User=root"]);
    }
    run(update.args(["-q", "update"]).stdout(std::io::stderr()))?;
    Ok(opts)
}

/// The Debian mirror the machine's own apt sources use.
fn debian_mirror() -> Result<String> {
    let mut texts = Vec::new();
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(dir) = fs::read_dir("/etc/apt/sources.list.d") {
        let mut more: Vec<PathBuf> = dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "list" || e == "sources"))
            .collect();
        more.sort();
        files.extend(more);
    }
    for f in files {
        if let Ok(t) = fs::read_to_string(&f) {
            texts.push(t);
        }
    }
    mirror_from_sources(&texts).ok_or_else(|| {
        anyhow!("no Debian mirror (a URI ending in /debian) in the machine's apt sources")
    })
}

fn mirror_from_sources(texts: &[String]) -> Option<String> {
    texts
        .iter()
        .flat_map(|t| t.lines())
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .flat_map(|l| {
            let uris: Vec<&str> = if let Some(u) = l.strip_prefix("URIs:") {
                u.split_whitespace().collect()
            } else if let Some(rest) = l.strip_prefix("deb ") {
                let rest = rest.trim_start();
                let rest = match rest.strip_prefix('[') {
                    Some(r) => r.split_once(']').map_or("", |(_, after)| after),
                    None => rest,
                };
                rest.split_whitespace().take(1).collect()
            } else {
                Vec::new()
            };
            uris
        })
        .map(|u| u.trim_end_matches('/'))
        .find(|u| u.starts_with("http") && u.ends_with("/debian"))
        .map(str::to_string)
}

/// Orders `roots` and their dependencies so that each module comes after the
/// modules it depends on. `deps_of` returns `None` for a module that needs no
/// loading (built into the kernel), else its dependencies.
pub fn order_modules(
    roots: &[&str],
    deps_of: &mut dyn FnMut(&str) -> Result<Option<Vec<String>>>,
) -> Result<Vec<String>> {
    fn visit(
        name: &str,
        deps_of: &mut dyn FnMut(&str) -> Result<Option<Vec<String>>>,
        done: &mut HashSet<String>,
        stack: &mut Vec<String>,
        order: &mut Vec<String>,
    ) -> Result<()> {
        if done.contains(name) {
            return Ok(());
        }
        if stack.iter().any(|s| s == name) {
            bail!("module dependency cycle: {} -> {name}", stack.join(" -> "));
        }
        stack.push(name.to_string());
        if let Some(deps) = deps_of(name)? {
            for dep in deps {
                visit(&dep, deps_of, done, stack, order)?;
            }
            order.push(name.to_string());
        }
        stack.pop();
        done.insert(name.to_string());
        Ok(())
    }
    let (mut done, mut stack, mut order) = (HashSet::new(), Vec::new(), Vec::new());
    for root in roots {
        visit(&normalize(root), deps_of, &mut done, &mut stack, &mut order)?;
    }
    Ok(order)
}

/// Module names use `_` where file names may use `-`.
fn normalize(name: &str) -> String {
    name.replace('-', "_")
}

fn module_name(file: &str) -> Option<String> {
    [".ko", ".ko.xz", ".ko.zst", ".ko.gz"]
        .iter()
        .find_map(|ext| file.strip_suffix(ext))
        .map(normalize)
}

/// Copies `roots` and their dependencies (decompressed) into `dest`; returns
/// the staged `.ko` files in load order. Built-in modules are skipped.
pub fn stage_modules(kernel: &Kernel, roots: &[&str], dest: &Path) -> Result<Vec<PathBuf>> {
    let Some(mods) = &kernel.modules else {
        eprintln!(
            "kspan-vm: warning: no modules directory for {}; assuming {} are built in",
            kernel.vmlinuz.display(),
            roots.join(", ")
        );
        return Ok(Vec::new());
    };
    let mut index = HashMap::new();
    let mut pending = vec![mods.join("kernel")];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push(path);
            } else if let Some(name) = module_name(&e.file_name().to_string_lossy()) {
                index.insert(name, path);
            }
        }
    }
    let builtin: HashSet<String> = fs::read_to_string(mods.join("modules.builtin"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| module_name(l.rsplit('/').next().unwrap_or(l)))
        .collect();
    let modinfo = which("modinfo")
        .or_else(|| {
            ["/usr/sbin/modinfo", "/sbin/modinfo"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
        })
        .ok_or_else(|| anyhow!("modinfo not found (package kmod)"))?;
    fs::create_dir_all(dest)?;
    let mut staged = HashMap::new();
    let mut deps_of = |name: &str| -> Result<Option<Vec<String>>> {
        let Some(src) = index.get(name) else {
            if builtin.contains(name) {
                return Ok(None);
            }
            bail!(
                "module {name} is neither in {} nor built in",
                mods.display()
            );
        };
        let file = dest.join(format!("{name}.ko"));
        decompress(src, &file)?;
        let deps = output(Command::new(&modinfo).args(["-F", "depends"]).arg(&file))?;
        staged.insert(name.to_string(), file);
        Ok(Some(
            deps.trim()
                .split(',')
                .filter(|d| !d.is_empty())
                .map(normalize)
                .collect(),
        ))
    };
    let order = order_modules(roots, &mut deps_of)?;
    Ok(order.iter().filter_map(|n| staged.remove(n)).collect())
}

fn decompress(src: &Path, dest: &Path) -> Result<()> {
    let name = src.to_string_lossy();
    let tool = if name.ends_with(".xz") {
        "xz"
    } else if name.ends_with(".zst") {
        "zstd"
    } else if name.ends_with(".gz") {
        "gzip"
    } else {
        fs::copy(src, dest).with_context(|| format!("copying {name}"))?;
        return Ok(());
    };
    let out = Command::new(tool)
        .arg("-dc")
        .arg(src)
        .output()
        .with_context(|| format!("cannot run {tool} to decompress {name}"))?;
    if !out.status.success() {
        bail!(
            "{tool} -dc {name} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fs::write(dest, out.stdout)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> HashMap<String, Vec<String>> {
        edges
            .iter()
            .map(|(n, d)| (n.to_string(), d.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    #[test]
    fn orders_debian12_modules() {
        // `modinfo -F depends` of Debian 12's 6.1 kernel.
        let g = graph(&[
            ("virtio_ring", &[]),
            ("virtio", &["virtio_ring"]),
            ("virtio_pci_legacy_dev", &[]),
            ("virtio_pci_modern_dev", &[]),
            (
                "virtio_pci",
                &[
                    "virtio_ring",
                    "virtio_pci_modern_dev",
                    "virtio_pci_legacy_dev",
                    "virtio",
                ],
            ),
            ("netfs", &[]),
            ("fscache", &["netfs"]),
            ("9pnet", &[]),
            ("9pnet_virtio", &["virtio", "9pnet", "virtio_ring"]),
            ("9p", &["9pnet", "fscache", "netfs"]),
        ]);
        let mut f = |n: &str| Ok(Some(g[n].clone()));
        let order = order_modules(&["virtio_pci", "9pnet_virtio", "9p"], &mut f).unwrap();
        assert_eq!(order.len(), 10);
        let pos = |n: &str| order.iter().position(|m| m == n).unwrap();
        for (m, deps) in &g {
            for d in deps {
                assert!(pos(d) < pos(m), "{d} must load before {m}: {order:?}");
            }
        }
    }

    #[test]
    fn skips_builtin_modules() {
        // Debian 13's 6.12 and Debian 14's 7.2 (`.ko.xz` files, the same
        // `modinfo -F depends`): virtio, virtio_ring, virtio_pci and fscache
        // are built in.
        let g = graph(&[
            ("netfs", &[]),
            ("9pnet", &["netfs"]),
            ("9pnet_virtio", &["9pnet"]),
            ("9p", &["9pnet", "netfs"]),
        ]);
        let mut f = |n: &str| Ok(g.get(n).cloned());
        let order = order_modules(&["virtio_pci", "9pnet_virtio", "9p"], &mut f).unwrap();
        assert_eq!(order, ["netfs", "9pnet", "9pnet_virtio", "9p"]);
    }

    #[test]
    fn detects_cycles() {
        let g = graph(&[("a", &["b"]), ("b", &["a"])]);
        let mut f = |n: &str| Ok(Some(g[n].clone()));
        assert!(order_modules(&["a"], &mut f).is_err());
    }

    #[test]
    fn names() {
        assert_eq!(
            module_name("9pnet_virtio.ko.xz").as_deref(),
            Some("9pnet_virtio")
        );
        assert_eq!(module_name("virtio-foo.ko").as_deref(), Some("virtio_foo"));
        assert_eq!(module_name("modules.order"), None);
        assert_eq!(
            parse_depends(
                "linux-image-amd64\n  Depends: linux-image-6.1.0-56-amd64\n",
                "linux-image-amd64"
            ),
            Some("linux-image-6.1.0-56-amd64".into())
        );
    }

    #[test]
    fn kernel_names() {
        let debian14 = KernelSpec::Debian {
            label: "debian14",
            suite: "sid",
        };
        for name in ["debian14", "sid", "forky"] {
            assert_eq!(KernelSpec::parse(name).unwrap(), debian14, "{name}");
        }
        assert_eq!(KernelSpec::parse("trixie").unwrap().name(), "debian13");
        let err = KernelSpec::parse("debian15").unwrap_err().to_string();
        assert!(err.contains("debian14 (sid)"), "{err}");
    }

    /// `apt-cache depends` in sid on 2026-12-01.
    const SID_IMAGE_AMD64: &str = "linux-image-amd64\n  Depends: linux-base-amd64\n  \
                                   Depends: linux-image-7.2.13+deb14-amd64\n";
    const SID_IMAGE: &str = "linux-image-7.2.13+deb14-amd64\n  PreDepends: linux-base\n \
                             |Depends: dracut\n |Depends: initramfs-tools\n  \
                             Depends: <linux-initramfs-tool>\n    dracut\n    \
                             initramfs-tools\n    tiny-initramfs\n  \
                             Depends: linux-base-7.2.13+deb14-amd64\n  \
                             Depends: linux-binary-7.2.13+deb14-amd64\n  \
                             Depends: linux-modules-7.2.13+deb14-amd64\n  \
                             Breaks: <fwupdate>\n  Suggests: linux-doc-7.2\n";
    /// `apt-cache depends` in bookworm on 2026-12-01.
    const BOOKWORM_IMAGE: &str = "linux-image-6.1.0-57-amd64\n  Depends: kmod\n  \
                                  Depends: linux-base\n |Depends: initramfs-tools\n  \
                                  Depends: <linux-initramfs-tool>\n    dracut\n  \
                                  Conflicts: linux-image-6.1.0-57-amd64-unsigned\n  \
                                  Suggests: linux-doc-6.1\n";

    #[test]
    fn meta_package_parts() {
        let image = parse_depends(SID_IMAGE_AMD64, "linux-image-amd64").unwrap();
        assert_eq!(image, "linux-image-7.2.13+deb14-amd64");
        assert_eq!(
            image_packages(&image, SID_IMAGE),
            [
                "linux-base-7.2.13+deb14-amd64",
                "linux-binary-7.2.13+deb14-amd64",
                "linux-modules-7.2.13+deb14-amd64"
            ]
        );
        // Before Debian 14 the image package holds the kernel itself; the
        // unversioned `linux-base` is a tool, not a part.
        assert_eq!(
            image_packages("linux-image-6.1.0-57-amd64", BOOKWORM_IMAGE),
            ["linux-image-6.1.0-57-amd64"]
        );
        // Another release's parts are not this image's.
        let other = SID_IMAGE.replace("7.2.13+deb14", "7.3.4+deb13");
        assert_eq!(
            image_packages("linux-image-7.2.13+deb14-amd64", &other),
            ["linux-image-7.2.13+deb14-amd64"]
        );
    }

    /// A directory tree for one test, removed when dropped.
    struct Tree(PathBuf);

    impl Tree {
        fn new(name: &str, files: &[&str]) -> Tree {
            let root =
                std::env::temp_dir().join(format!("xtask-kernel-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            for f in files {
                let path = root.join(f);
                fs::create_dir_all(path.parent().unwrap()).unwrap();
                if !f.ends_with('/') {
                    fs::write(&path, "x").unwrap();
                }
            }
            Tree(root)
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn finds_the_image_of_debian14_packages() {
        // linux-binary-*, linux-modules-* and linux-base-* unpacked together.
        let rel = "7.2.13+deb14-amd64";
        let dir = format!("usr/lib/modules/{rel}");
        let t = Tree::new(
            "debian14",
            &[
                &format!("{dir}/vmlinuz"),
                &format!("{dir}/config"),
                &format!("{dir}/modules.builtin"),
                &format!("{dir}/kernel/fs/9p/9p.ko.xz"),
                "usr/share/doc/linux-base-7.2.13+deb14-amd64/copyright",
            ],
        );
        let k = from_package_root(&t.0).unwrap();
        assert_eq!(k.release, rel);
        assert_eq!(k.vmlinuz, t.0.join(&dir).join("vmlinuz"));
        assert_eq!(k.modules, Some(t.0.join(&dir)));
        assert_eq!(k.config, Some(t.0.join(&dir).join("config")));
        // The same image named as a file.
        let k = from_image_file(&t.0.join(&dir).join("vmlinuz"));
        assert_eq!(k.release, rel);
        assert_eq!(k.modules, Some(t.0.join(&dir)));
        assert_eq!(k.config, Some(t.0.join(&dir).join("config")));
    }

    #[test]
    fn finds_the_image_of_older_packages() {
        // Debian 13's linux-image-*: the image in boot/, the modules in usr/lib.
        let rel = "6.12.117+deb13-amd64";
        let t = Tree::new(
            "debian13",
            &[
                &format!("boot/vmlinuz-{rel}"),
                &format!("boot/config-{rel}"),
                &format!("usr/lib/modules/{rel}/kernel/fs/9p/9p.ko.xz"),
            ],
        );
        let k = from_package_root(&t.0).unwrap();
        assert_eq!(k.release, rel);
        assert_eq!(k.vmlinuz, t.0.join(format!("boot/vmlinuz-{rel}")));
        assert_eq!(k.modules, Some(t.0.join(format!("usr/lib/modules/{rel}"))));
        assert_eq!(k.config, Some(t.0.join(format!("boot/config-{rel}"))));
        let k = from_image_file(&t.0.join(format!("boot/vmlinuz-{rel}")));
        assert_eq!(k.release, rel);
        assert_eq!(k.modules, Some(t.0.join(format!("usr/lib/modules/{rel}"))));

        // Only the modules (linux-modules-* alone): no image, and the error
        // names both layouts.
        let t = Tree::new(
            "modules-only",
            &["usr/lib/modules/7.2.13+deb14-amd64/kernel/"],
        );
        let err = from_package_root(&t.0).unwrap_err().to_string();
        assert!(err.contains("usr/lib/modules/<release>/vmlinuz"), "{err}");
        assert!(err.contains("linux-binary-<release>"), "{err}");
    }

    #[test]
    fn arm64_packings() {
        let mut image = vec![0u8; 64];
        image[0x38..0x3c].copy_from_slice(ARM64_MAGIC);
        assert_eq!(arm64_packing(&image).unwrap(), Arm64Packing::Image);
        assert_eq!(
            arm64_packing(b"\x1f\x8b\x08\0rest").unwrap(),
            Arm64Packing::Gzip
        );
        // A zboot header: payload of 16 bytes at 64, zstd.
        let mut zboot = vec![0u8; 80];
        zboot[..2].copy_from_slice(b"MZ");
        zboot[4..8].copy_from_slice(b"zimg");
        zboot[8..12].copy_from_slice(&64u32.to_le_bytes());
        zboot[12..16].copy_from_slice(&16u32.to_le_bytes());
        zboot[24..28].copy_from_slice(b"zstd");
        assert_eq!(
            arm64_packing(&zboot).unwrap(),
            Arm64Packing::Zboot {
                offset: 64,
                size: 16,
                tool: "zstd"
            }
        );
        // A payload beyond the file, an unknown compression, not a kernel.
        zboot[12..16].copy_from_slice(&17u32.to_le_bytes());
        let e = arm64_packing(&zboot).unwrap_err().to_string();
        assert!(e.contains("truncated"), "{e}");
        zboot[24..28].copy_from_slice(b"lzo\0");
        let e = arm64_packing(&zboot).unwrap_err().to_string();
        assert!(e.contains("`lzo`"), "{e}");
        let e = arm64_packing(b"\x7fELF").unwrap_err().to_string();
        assert!(e.contains("not an arm64 kernel image"), "{e}");
    }

    #[test]
    fn mirror() {
        let deb822 = "Types: deb\n# http://snapshot.debian.org/archive/debian/x\n\
                      URIs: http://deb.debian.org/debian\nSuites: bookworm\n\n\
                      URIs: http://deb.debian.org/debian-security\n";
        assert_eq!(
            mirror_from_sources(&[deb822.into()]).as_deref(),
            Some("http://deb.debian.org/debian")
        );
        let one_line = "deb https://packages.cloud.google.com/apt cloud main\n\
                        deb [arch=amd64 signed-by=/k.gpg] http://ftp.fr.debian.org/debian/ bookworm main\n";
        assert_eq!(
            mirror_from_sources(&[one_line.into()]).as_deref(),
            Some("http://ftp.fr.debian.org/debian")
        );
        assert_eq!(mirror_from_sources(&["# nothing\n".into()]), None);
    }
}
