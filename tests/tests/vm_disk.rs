// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The VM's slow disk (run in the VM by `cargo xtask test`, on every kernel
//! of the matrix): `cargo xtask vm` gives each guest a virtio-blk disk that
//! completes every request 10 ms after it gets it, and names its node in
//! `KSPAN_SLOW_DISK`, for tests whose threads must block on a device for a
//! known time. Read raw with `O_DIRECT`, each 4 KiB read takes its 10 ms
//! (less a margin for the guest's clock reads), the device's own count of
//! sectors read (`/sys/block/<disk>/stat`) grows by exactly the bytes read
//! (every read went to it), and the thread's block-I/O account
//! (`/proc/thread-self/io`'s `read_bytes`) by at least that (6.x: exactly;
//! 5.10: 155,648 bytes for the 81,920 read from the disk, measured).

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::{Duration, Instant};

/// The variable `cargo xtask vm` sets to the slow disk's node.
const SLOW_DISK_ENV: &str = "KSPAN_SLOW_DISK";
/// How long the disk takes over each request: `SLOW_DISK_LATENCY` in
/// `xtask/src/vm.rs`.
const LATENCY: Duration = Duration::from_millis(10);
/// What a read may fall short of [`LATENCY`] by, measured in the guest.
const MARGIN: Duration = Duration::from_millis(1);
/// The disk's size: `SLOW_DISK_BYTES` in `xtask/src/vm.rs`.
const DISK_BYTES: u64 = 64 << 20;
const READS: u64 = 20;
const BLOCK: usize = 4096;

/// A buffer `O_DIRECT` takes: aligned to a page.
#[repr(C, align(4096))]
struct Block([u8; BLOCK]);

/// The slow disk's node, or a failure naming what provides it.
fn slow_disk() -> String {
    match std::env::var(SLOW_DISK_ENV) {
        Ok(dev) if !dev.is_empty() => dev,
        _ => panic!(
            "{SLOW_DISK_ENV} is not set: this test reads the VM's slow disk, which \
             `cargo xtask vm` (and `cargo xtask test`) gives the guest and names in \
             {SLOW_DISK_ENV}; run it there (see docs/guide/testing.md)"
        ),
    }
}

/// The sectors (512 bytes) the block device `dev` (`/dev/vda`) has read
/// since boot, by its own count.
fn device_sectors_read(dev: &str) -> u64 {
    let name = dev.rsplit('/').next().unwrap_or(dev);
    let path = format!("/sys/block/{name}/stat");
    let stat = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    stat.split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no sectors read in {path}: {stat}"))
}

/// This thread's `read_bytes` (bytes it made the block layer read).
fn thread_read_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").expect("/proc/thread-self/io");
    io.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))
        .map(|v| v.trim().parse().expect("read_bytes is a number"))
        .unwrap_or_else(|| panic!("no read_bytes in /proc/thread-self/io:\n{io}"))
}

#[test]
#[ignore = "needs the VM's slow disk (KSPAN_SLOW_DISK); run by `cargo xtask test` in the VM"]
fn each_direct_read_of_the_slow_disk_takes_its_latency_and_goes_to_the_device() {
    let dev = slow_disk();
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        !mounts
            .lines()
            .any(|l| l.split(' ').next() == Some(dev.as_str())),
        "{dev} is mounted:\n{mounts}"
    );
    let mut disk = File::options()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&dev)
        .unwrap_or_else(|e| panic!("opening {dev} with O_DIRECT: {e}"));
    assert_eq!(
        disk.seek(SeekFrom::End(0)).unwrap(),
        DISK_BYTES,
        "{dev}'s size"
    );
    let mut buf = Box::new(Block([0xa5; BLOCK]));
    let before = thread_read_bytes();
    let sectors_before = device_sectors_read(&dev);
    let mut took = Vec::new();
    for i in 0..READS {
        // Distinct offsets, 3 MiB apart and a block further each time.
        let offset = i * ((3 << 20) + BLOCK as u64);
        let t = Instant::now();
        let n = disk
            .read_at(&mut buf.0, offset)
            .unwrap_or_else(|e| panic!("reading {dev} at {offset}: {e}"));
        took.push(t.elapsed());
        assert_eq!(n, BLOCK, "a whole block at {offset}");
    }
    let read = thread_read_bytes() - before;
    let device_read = (device_sectors_read(&dev) - sectors_before) * 512;
    let ms: Vec<String> = took
        .iter()
        .map(|d| format!("{:.2}", d.as_secs_f64() * 1e3))
        .collect();
    eprintln!("{READS} reads of {dev}, ms: {}", ms.join(" "));
    assert!(
        buf.0.iter().all(|&b| b == 0),
        "the slow disk reads as zeroes"
    );
    for (i, d) in took.iter().enumerate() {
        assert!(
            *d >= LATENCY - MARGIN,
            "read {i} of {dev} took {d:?}, less than the disk's {LATENCY:?} \
             (less {MARGIN:?}); all, ms: {}",
            ms.join(" ")
        );
    }
    assert_eq!(
        device_read,
        READS * BLOCK as u64,
        "{dev}'s own count of sectors read grew by the bytes read"
    );
    // At least: 5.10 counts more there (155,648 bytes for these 81,920),
    // which the device's own count shows were not reads of this disk.
    assert!(
        read >= READS * BLOCK as u64,
        "/proc/thread-self/io's read_bytes grew by {read}, less than the bytes read"
    );
}
