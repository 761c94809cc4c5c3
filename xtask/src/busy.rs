//! `cargo xtask busy [--cpu N] [--disk] -- CMD...`: runs CMD on a busy
//! machine, as the tests that hold kspan to the kernel must bear (issue 52:
//! two host tests failed at a load average of 5 to 6 on 2 cores).
//!
//! Beside CMD: `--cpu N` threads that spin (N CPU hogs at the default
//! priority), and with `--disk` a reader of a 512 MiB file under
//! `target/tmp/` through `dd ... iflag=direct` in a loop (each read goes to
//! the disk, whose queue CMD's own reads then share). Without either
//! option: a hog per CPU and the disk reader. The load stops when CMD ends;
//! CMD's exit status is ours, and the load averages seen meanwhile are
//! printed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::util::{opt_value, target_dir};

/// The disk reader's file, in MiB.
const DISK_FILE_MIB: usize = 512;

/// What `busy` runs beside the command.
#[derive(Debug, PartialEq, Eq)]
pub struct Busy {
    /// CPU hogs.
    pub cpu: usize,
    /// A disk reader.
    pub disk: bool,
    /// The command and its arguments.
    pub cmd: Vec<String>,
}

/// Parses `[--cpu N] [--disk] -- CMD...`; `cpus` is the default hogs'
/// count when neither option is given.
pub fn parse(args: &[String], cpus: usize) -> Result<Busy> {
    let (mut cpu, mut disk, mut chosen) = (0, false, false);
    let mut i = 0;
    while i < args.len() {
        if args[i] == "--" {
            let cmd = args[i + 1..].to_vec();
            if cmd.is_empty() {
                bail!("busy: no command after `--`");
            }
            if !chosen {
                (cpu, disk) = (cpus, true);
            }
            return Ok(Busy { cpu, disk, cmd });
        }
        if let Some(n) = opt_value(args, &mut i, "--cpu")? {
            cpu = n
                .parse()
                .with_context(|| format!("--cpu {n}: a number of hogs"))?;
            chosen = true;
            continue;
        }
        match args[i].as_str() {
            "--disk" => (disk, chosen) = (true, true),
            other => bail!("busy: unknown option `{other}`; usage: {USAGE}"),
        }
        i += 1;
    }
    bail!("busy: no command; usage: {USAGE}")
}

const USAGE: &str = "cargo xtask busy [--cpu N] [--disk] -- CMD...";

/// `cargo xtask busy`.
pub fn command(args: &[String]) -> Result<u8> {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let busy = parse(args, cpus)?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for _ in 0..busy.cpu {
        let stop = stop.clone();
        load.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        }));
    }
    let reader = Arc::new(Mutex::new(None::<Child>));
    if busy.disk {
        let file = disk_file()?;
        let (stop, reader) = (stop.clone(), reader.clone());
        load.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let child = Command::new("dd")
                    .arg(format!("if={}", file.display()))
                    .args(["of=/dev/null", "bs=1M", "iflag=direct", "status=none"])
                    .spawn();
                let Ok(child) = child else {
                    eprintln!("busy: dd did not start: the disk reader stops");
                    return;
                };
                *reader.lock().unwrap() = Some(child);
                // Wait without holding the lock, so that the end can kill it.
                loop {
                    let mut held = reader.lock().unwrap();
                    match held.as_mut().map(|c| c.try_wait()) {
                        Some(Ok(None)) => {}
                        _ => break,
                    }
                    drop(held);
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }));
    }
    eprintln!(
        "busy: {} CPU hog(s){} beside `{}`",
        busy.cpu,
        if busy.disk {
            ", a disk reader (dd iflag=direct)"
        } else {
            ""
        },
        busy.cmd.join(" ")
    );
    let loads = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let (stop, loads) = (stop.clone(), loads.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(one) = load_average() {
                    loads.lock().unwrap().push(one);
                }
                for _ in 0..50 {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        })
    };
    let status = Command::new(&busy.cmd[0]).args(&busy.cmd[1..]).status();
    stop.store(true, Ordering::Relaxed);
    if let Some(mut child) = reader.lock().unwrap().take() {
        let _ = child.kill();
        let _ = child.wait();
    }
    for thread in load {
        let _ = thread.join();
    }
    let _ = sampler.join();
    let loads = loads.lock().unwrap();
    if !loads.is_empty() {
        let (least, most) = crate::util::min_max(&loads);
        eprintln!(
            "busy: the 1-minute load average went from {least:.2} to {most:.2} ({} samples, 5 s apart)",
            loads.len()
        );
    }
    let status = status.with_context(|| format!("running {}", busy.cmd[0]))?;
    Ok(status.code().map_or(1, |c| c.clamp(0, 255) as u8))
}

/// The 1-minute load average (`/proc/loadavg`).
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The disk reader's file, written once (and synced, so that it is on the
/// disk) and kept under `target/tmp/`.
fn disk_file() -> Result<PathBuf> {
    let dir = target_dir().join("tmp");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("busy-{DISK_FILE_MIB}m.bin"));
    let want = (DISK_FILE_MIB as u64) << 20;
    if std::fs::metadata(&path).map(|m| m.len()).ok() != Some(want) {
        write_disk_file(&path)?;
    }
    Ok(path)
}

fn write_disk_file(path: &Path) -> Result<()> {
    use std::io::Write;
    eprintln!(
        "busy: writing {} ({DISK_FILE_MIB} MiB, once)",
        path.display()
    );
    let mut file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    // Not all zeroes, in case a layer below skips them.
    let chunk: Vec<u8> = (0..1usize << 20).map(|i| (i * 7 % 251) as u8).collect();
    for _ in 0..DISK_FILE_MIB {
        file.write_all(&chunk)?;
    }
    file.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn without_options_a_hog_per_cpu_and_the_disk() {
        assert_eq!(
            parse(&args("-- cargo xtask test"), 2).unwrap(),
            Busy {
                cpu: 2,
                disk: true,
                cmd: args("cargo xtask test"),
            }
        );
    }

    #[test]
    fn options_say_exactly_the_load() {
        let b = parse(&args("--cpu 3 -- true"), 2).unwrap();
        assert_eq!((b.cpu, b.disk), (3, false));
        let b = parse(&args("--cpu=1 --disk -- sh -c x"), 2).unwrap();
        assert_eq!((b.cpu, b.disk, b.cmd), (1, true, args("sh -c x")));
        let b = parse(&args("--disk -- true"), 2).unwrap();
        assert_eq!((b.cpu, b.disk), (0, true));
        // What follows `--` is the command's, options too.
        let b = parse(&args("-- cargo test -- --nocapture"), 2).unwrap();
        assert_eq!(b.cmd, args("cargo test -- --nocapture"));
    }

    #[test]
    fn refuses_what_it_cannot_run() {
        for bad in [
            "",
            "--cpu 2",
            "--",
            "--cpu x -- true",
            "--loud -- true",
            "true",
        ] {
            assert!(parse(&args(bad), 2).is_err(), "{bad:?} accepted");
        }
    }
}
