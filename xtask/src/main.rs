//! `cargo xtask`: the developer tasks of the kspan workspace.
//!
//! `cargo xtask` is an alias (in `.cargo/config.toml`) for
//! `cargo run --quiet --package xtask --`, so this binary always runs on the
//! host, from any directory inside the repository.
//!
//! # Subcommands
//!
//! * `deps`: installs the Debian packages that the build and the VM need
//!   (clang, llvm, libelf, QEMU, busybox-static, bpftrace, ...) when some are
//!   missing; a fast no-op otherwise.
//! * `bpf [--check]`: compiles the BPF C into `kspan-bpf/src/bpf/kspan.<arch>.bpf.o`
//!   (`x86`, `arm64`), the objects kspan-bpf ships so that dependents build
//!   without clang; `--check` fails when a committed object is stale.
//! * `cross [CARGO ARGS]`: `cargo ARGS --target aarch64-unknown-linux-gnu`
//!   with Debian's own Rust for arm64 (sid's rustc and standard libraries,
//!   fetched once, see `cross`); without arguments, builds what the arm64
//!   guest's tests run.
//! * `vm [--kernel K] [--timeout SECS] [--mem SIZE] [--no-otlp-forward] -- CMD...`:
//!   runs `CMD` as root inside a QEMU guest (software emulation) booting a
//!   stock Debian kernel (`debian11`, `debian12`, `debian13`, `debian14`:
//!   sid's, the newest; or a path). The guest sees the host's root file system
//!   read-only, the repository writable at its own path, a fresh `/tmp`,
//!   tracefs, debugfs and bpffs; `CMD` runs in the caller's working directory
//!   and its output streams out live. The guest's exit status becomes ours.
//!   `--arch arm64` boots Debian's arm64 kernel under `qemu-system-aarch64`
//!   on a root of Debian 12 arm64 packages instead of the host's (for
//!   programs cross-compiled with `aarch64-linux-gnu-gcc`), without OTLP
//!   forwarding.
//! * `test [--host-only|--vm-only] [--arch A] [--kernel K]... [--kernels K1,K2]`: the one
//!   test command: host build and tests, then the `#[ignore]`d tests of the
//!   `kspan-tests` package inside one VM per kernel (by default Debian 11's,
//!   12's, 13's and sid's; two guests at a time, the arm64 build beside the
//!   first), then, cross-built, in an arm64 VM per arm64 kernel (sid's by
//!   default, Debian 13's too with `--arch arm64`), alone.
//! * `fuzz [--seconds N] [--target NAME]... [--jobs J]`: builds the fuzz
//!   crate (`fuzz/`) with stable cargo, instrumented as `cargo fuzz`
//!   instruments it, and runs each libFuzzer target for N seconds (10 by
//!   default) over its corpus in `target/fuzz/corpus/`, J at a time; a
//!   crash, hang or out-of-memory input fails it, named with the command
//!   that replays it. `test` runs every target briefly.
//! * `demo [--kernel K]`: runs `kspan-receive -- examples/quickstart` in the VM.
//! * `jaeger [--example E] [--kernel K] [--ui ADDR] [--screenshot PNG]`: the
//!   file service in the VM (or, with `--example where_time_went`, the
//!   scheduler's account example on the host; with `--example
//!   why_it_waited`, the causes' example in the VM), exporting to the embedded
//!   Jaeger (`kspan-jaeger`) on the host; the UI stays up until Ctrl-C, or
//!   Chromium takes a picture of one trace.
//! * `bench [--kernel K] ...`: kspan against the bpftrace package of the
//!   kernel's Debian release, in the VM (see `tasks::bench`).
//! * `bpftrace [--kernel K]`: fetches the bpftrace that `bench` compares
//!   against on kernel K (sid's own for `debian14`, bullseye's for
//!   `debian11`) and prints the command
//!   that runs it, e.g. for `cargo xtask vm --kernel K -- <command> ...`.
//! * `busy [--cpu N] [--disk] -- CMD...`: runs CMD on a busy machine (CPU
//!   hogs and a disk reader beside it), as the tests that hold kspan to the
//!   kernel must bear: `cargo xtask busy -- cargo xtask test`.
//!
//! # Shape
//!
//! * [`bpf`]: the shipped BPF object and its staleness check.
//! * [`deps`]: package checks and installation through `apt-get`.
//! * [`arch`]: the guest's architecture and what depends on it (QEMU's
//!   binary and machine, console, kernel package, the guest's root).
//! * [`kernel`]: fetching and caching Debian kernel packages under
//!   `target/kspan-vm/kernels/`, and ordering the modules the guest needs.
//! * [`rootfs`]: the arm64 guest's root, Debian 12 arm64 packages unpacked
//!   under `target/kspan-vm/arm64-root/bookworm/`.
//! * [`bpftrace`]: the bench's bpftrace: the host's, or sid's (bullseye's)
//!   unpacked under `target/kspan-vm/bpftrace/sid/` (`bullseye/`) and run
//!   through that suite's own loader.
//! * [`packages`]: a Debian package index and a package's dependency closure.
//! * [`cpio`]: a tiny `newc` archive writer for the initramfs.
//! * [`vm`]: the initramfs (busybox, modules, `/init`), the QEMU command
//!   line, and the console loop (live output, exit marker, timeout).
//! * [`relay`]: the TCP relays that carry OTLP traffic from the guest's
//!   loopback to a receiver on the host's loopback (hidden subcommands
//!   `__guest-relay` and `__host-connect`).
//! * [`tasks`]: `test`, `demo` and `bench`.
//! * [`others`]: `bench`'s cost to other processes (script and report).
//! * [`filters`]: `bench --host --only filters`, the cost of refused calls.
//! * [`hot`]: `bench --host --only hot`, a traced service's throughput.
//! * [`consumer`]: `bench --host --only consumer`, kspan's consumer against
//!   a bare libbpf-rs one.
//! * [`sched`]: `bench --host --only sched`, the scheduler account's cost
//!   to other processes, to the traced process's switches, and to a
//!   service's requests a second.
//! * [`jaeger`]: the `jaeger` command.
//! * [`busy`]: the `busy` command.
//! * [`fuzz`]: the `fuzz` command.
//! * [`util`]: running commands, shell quoting, workspace metadata.

mod arch;
mod bpf;
mod bpftrace;
mod busy;
mod consumer;
mod cpio;
mod cross;
mod deps;
mod devtools;
mod filters;
mod fuzz;
mod hot;
mod jaeger;
mod kernel;
mod others;
mod packages;
mod publish;
mod relay;
mod rootfs;
mod sched;
mod tasks;
mod testbins;
mod util;
mod vm;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  deps                  install missing system packages (apt-get, as root)
  bpf [--check]         compile kspan-bpf/src/bpf/kspan.bpf.c (and the files it
                        includes) into the object
                        kspan-bpf ships (--check: fail if the committed one is stale)
  vm [opts] -- CMD...   run CMD inside a QEMU VM booting a stock Debian kernel
      --arch A          x86_64 (default, the host's root) or arm64 (Debian's
                        arm64 kernel under qemu-system-aarch64, on a root of
                        Debian 12 arm64 packages; no OTLP forwarding)
      --with-bpftrace   (arm64) a root that also holds Debian 12's arm64
                        bpftrace (fetched once), on the guest's PATH
      --kernel K        debian12 (default; 6.1), debian11 (5.10), debian13
                        (6.12), debian14 (the newest Debian kernel, sid's:
                        7.x; also `sid`, `forky`), or a path to a vmlinuz
                        file or an unpacked kernel package directory
      --timeout SECS    kill the VM after SECS seconds (default 900)
      --mem SIZE        guest memory (default 2G)
      --smp N           guest CPUs (default 2)
      --no-otlp-forward do not forward a loopback OTEL_EXPORTER_OTLP_ENDPOINT
                        from the guest to the host (--otlp-forward: do; the
                        default on x86_64, refused on arm64)
      --multi-threaded-tcg  one host thread per guest CPU (QEMU thread=multi;
                        for per-call figures: an attach or detach can kill
                        an x86_64 guest with a stray int3; an arm64 guest
                        always has it, unless --icount)
      --icount          the guest's clock counts instructions (QEMU -icount
                        shift=0): times inside it are instruction counts,
                        stable from run to run (for A/B of two builds)
      --verbose         also show the guest's boot console
  test [opts]           host build + tests, then the VM tests per kernel
      --host-only | --vm-only
      --kernel K        (repeatable) kernels of the VM matrix (default debian11,
                        debian12, debian13 and debian14)
      --kernels K1,K2   same, comma separated
      --timeout SECS    per VM
  fuzz [opts]           build the fuzz targets (fuzz/, stable cargo) and run each
                        over its corpus in target/fuzz/corpus/<target>
      --seconds N       per target (default 10)
      --target NAME     (repeatable) only these targets (default: all)
      --jobs J          targets run at once (default 1)
  demo [--kernel K]     run kspan-receive -- examples/quickstart in the VM
  jaeger [--kernel K] [--ui ADDR] [--screenshot PNG]
                        the file service in the VM, its traces in the embedded
                        Jaeger UI on the host (default 127.0.0.1:16686) until
                        Ctrl-C, or a headless-Chromium picture of one trace
      --example where_time_went  the scheduler's account example instead, on
                        the host (root), no VM (`file_service` is the default)
      --example why_it_waited  the causes' example instead, in the VM (its
                        slow disk); the picture opens the disk request's
                        first I/O wait span
  bench [--kernel K] [--rounds N] [--only PART] [--host]
        [--multi-threaded-tcg | --icount]
                        kspan vs bpftrace in the VM: attach+detach of every
                        vfs_* function, the cost per traced call, and the cost
                        to an untraced process while probes are held (on
                        debian14 also sessions against the pairs, and ~1,000
                        functions through trampolines); against the bpftrace
                        of the kernel's Debian release for debian14 (sid's,
                        fetched) and debian11 (bullseye's 0.11, fetched),
                        else the host's
      --only others     the last part alone
      --only attach     the first two parts
      --only percall    the cost per traced call alone
      --multi-threaded-tcg  as for vm (with --only percall)
      --icount          as for vm (with --only percall): figures are guest
                        instructions, and the BPF programs' own are added
      --host            the last part natively, syscall tracepoints only
      --host --only hot       a service's throughput at 10k and 100k traced
                              calls/s against untraced, and the cost per span
      --host --only consumer  kspan's consumer (to the SDK, discarding) against
                              a bare libbpf-rs ring-buffer consumer
      --host --only sched     the scheduler account: an untraced process's
                              context switches while another holds it, the
                              traced process's own (both against bpftrace),
                              a service's requests/s on against off, the
                              causes' workloads; one part alone:
                              sched-others, sched-own, sched-service,
                              sched-causes
      --prog-stats            (with --only sched...) one more pass with
                              kernel.bpf_stats_enabled=1: ns a program run
  bpftrace [--kernel K] fetch the bpftrace bench compares against on kernel K
                        and print the command that runs it (in the VM)
  busy [--cpu N] [--disk] -- CMD...
                        run CMD beside N spinning threads and a reader of a
                        512 MiB file with O_DIRECT (dd, in a loop; the file
                        kept under target/tmp); without either option, a
                        spinner per CPU and the reader
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let result = match cmd.as_str() {
        "deps" => deps::ensure().map(|()| 0),
        "bpf" => bpf::command(rest),
        "vm" => vm::command(rest),
        "cross" => cross::command(rest),
        "test" => tasks::test(rest),
        "demo" => tasks::demo(rest),
        "fuzz" => fuzz::command(rest),
        "jaeger" => jaeger::command(rest),
        "bench" => tasks::bench(rest),
        "bpftrace" => bpftrace::command(rest),
        "busy" => busy::command(rest),
        "__guest-relay" => relay::guest_relay(rest),
        "__host-connect" => relay::host_connect(rest),
        "help" | "-h" | "--help" => {
            print!("{USAGE}");
            Ok(0)
        }
        other => {
            eprintln!("xtask: unknown command `{other}`\n\n{USAGE}");
            Ok(2)
        }
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
