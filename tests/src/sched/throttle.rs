// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Throttled block I/O (blk-throttle: cgroup v2 `io.max`, v1
//! `blkio.throttle.*`): a span's reads that a cgroup's limit held are
//! still the span's requests (the throttle's kernel worker issues them),
//! with their time held a figure of its own, held to the kernel's.

use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::{Duration, Instant};

use kspan::sched::{cause_attributes as c, wait_attributes as w};
use opentelemetry::trace::{TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_sdk::trace::SpanData;

use super::{int, optional_int, provider, shutdown, start, string, ONE_AT_A_TIME};

/// How the throttled case reads: `reads` O_DIRECT reads of `read_bytes`
/// each, at distinct offsets of a raw device, under a read limit of
/// `limit_bytes_per_s`.
#[derive(Debug, Clone, Copy)]
pub struct ThrottledReads {
    /// How many reads.
    pub reads: usize,
    /// The bytes of each (a multiple of 4 KiB).
    pub read_bytes: usize,
    /// The group's read limit on the device (`io.max`'s `rbps`).
    pub limit_bytes_per_s: u64,
}

/// A cgroup v2 group with a read limit on one device (`io.max`), holding
/// this process while it lives; cgroup v2 is mounted for it where the
/// machine has none, and unmounted after. `Err`: why the case cannot run
/// here (a host whose io controller is bound to cgroup v1).
struct IoLimit {
    root: std::path::PathBuf,
    group: std::path::PathBuf,
    mounted: bool,
}

impl IoLimit {
    fn new(dev: &str, limit_bytes_per_s: u64) -> Result<Self, String> {
        let system = std::path::Path::new("/sys/fs/cgroup");
        let (root, mounted) = if system.join("cgroup.controllers").exists() {
            (system.to_path_buf(), false)
        } else {
            let root = std::env::temp_dir().join(format!("kspan-io-{}", std::process::id()));
            std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
            let target = std::ffi::CString::new(root.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: NUL-terminated strings, no data.
            let rc = unsafe {
                libc::mount(
                    c"none".as_ptr(),
                    target.as_ptr(),
                    c"cgroup2".as_ptr(),
                    0,
                    std::ptr::null(),
                )
            };
            if rc != 0 {
                return Err(format!(
                    "mounting cgroup2 at {}: {}",
                    root.display(),
                    std::io::Error::last_os_error()
                ));
            }
            (root, true)
        };
        let controllers =
            std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
        if !controllers.split_whitespace().any(|c| c == "io") {
            return Err(format!(
                "cgroup v2 at {} has no io controller (bound to cgroup v1 here: {controllers:?})",
                root.display()
            ));
        }
        let write = |path: std::path::PathBuf, text: &str| {
            std::fs::write(&path, text)
                .map_err(|e| format!("writing {text:?} to {}: {e}", path.display()))
        };
        write(root.join("cgroup.subtree_control"), "+io")?;
        let group = root.join(format!("kspan-throttled-{}", std::process::id()));
        std::fs::create_dir_all(&group).map_err(|e| e.to_string())?;
        write(
            group.join("io.max"),
            &format!("{dev} rbps={limit_bytes_per_s}"),
        )?;
        write(group.join("cgroup.procs"), &std::process::id().to_string())?;
        Ok(IoLimit {
            root,
            group,
            mounted,
        })
    }

    fn name(&self) -> String {
        self.group
            .file_name()
            .and_then(|n| n.to_str())
            .expect("the group's name")
            .to_owned()
    }

    /// The group's `io.stat` for device `dev` (`MAJ:MIN`): bytes read and
    /// reads.
    fn read_stat(&self, dev: &str) -> (i64, i64) {
        let text = std::fs::read_to_string(self.group.join("io.stat")).unwrap_or_default();
        let line = text.lines().find(|l| l.starts_with(&format!("{dev} ")));
        let field = |name: &str| {
            line.and_then(|l| {
                l.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            })
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0)
        };
        (field("rbytes"), field("rios"))
    }
}

impl Drop for IoLimit {
    fn drop(&mut self) {
        let _ = std::fs::write(
            self.root.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        let _ = std::fs::remove_dir(&self.group);
        if self.mounted {
            let target = std::ffi::CString::new(self.root.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a NUL-terminated path.
            unsafe { libc::umount(target.as_ptr()) };
            let _ = std::fs::remove_dir(&self.root);
        }
    }
}

/// Inside one span, `how.reads` O_DIRECT reads of the raw device `disk`
/// (node name `name`, a device whose every request takes about the same
/// time) by a process whose cgroup v2 group limits reads of it
/// (`io.max`). Every read is a request of the span (the throttle's worker
/// issues most of them: before the held bio was followed to its request,
/// those were no one's), in count and bytes as the group's `io.stat`; a
/// held request is counted held, and the time held plus queued plus on
/// the device is the reads' own within `slack_ms` + `percent`; each
/// blocked I/O wait on a held request names it, its time held and the
/// group.
pub fn a_throttled_read_s_time_held_is_the_span_s(
    account: kspan::SchedulerAccount,
    disk: &std::path::Path,
    name: &str,
    how: ThrottledReads,
    slack_ms: i64,
    percent: i64,
) {
    assert!(account.causes(), "the case needs the account's causes on");
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dev = std::fs::read_to_string(format!("/sys/block/{name}/dev"))
        .unwrap_or_else(|e| panic!("/sys/block/{name}/dev: {e}"))
        .trim()
        .to_owned();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(disk)
        .unwrap_or_else(|e| panic!("opening {} with O_DIRECT: {e}", disk.display()));
    let layout = std::alloc::Layout::from_size_align(how.read_bytes, 4096).unwrap();
    // SAFETY: the layout is non-zero in size; the buffer is freed below.
    let buf = unsafe { std::alloc::alloc(layout) };
    // SAFETY: `buf` holds read_bytes bytes, written by the reads only.
    let slice = unsafe { std::slice::from_raw_parts_mut(buf, how.read_bytes) };

    let limit = IoLimit::new(&dev, how.limit_bytes_per_s).unwrap_or_else(|e| panic!("{e}"));
    let sums = kspan::KernelSums::new();
    let (provider, exporter) = provider(&sums);
    let kspan = start(&provider, &sums, account);
    let causes = kspan.scheduler_causes();
    assert!(
        causes
            .iter()
            .any(|c| c.cause.starts_with("throttled block I/O") && c.how.is_ok()),
        "throttled block I/O is read on this kernel: {causes:#?}"
    );
    let tracer = provider.tracer("sched-throttle");
    let cx = Context::current_with_span(tracer.start("throttled reads"));
    let id = cx.span().span_context().span_id();
    let (stat_before, took, stat_after) = {
        let _attached = cx.clone().attach();
        let before = limit.read_stat(&dev);
        let mut took = Duration::ZERO;
        for i in 0..how.reads as u64 {
            let at = Instant::now();
            let n = file
                .read_at(slice, i * how.read_bytes as u64)
                .expect("an O_DIRECT read");
            took += at.elapsed();
            assert_eq!(n, how.read_bytes, "a whole read");
        }
        (before, took, limit.read_stat(&dev))
    };
    drop(cx);
    let stats = shutdown(kspan);
    let group = limit.name();
    drop(limit);
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(buf, layout) };

    let spans = exporter.get_finished_spans().unwrap();
    let span = spans
        .iter()
        .find(|s| s.span_context.span_id() == id)
        .expect("the span is exported");
    let requests = int(span, c::BLOCK_REQUESTS);
    let bytes = int(span, c::BLOCK_BYTES);
    let held = int(span, c::BLOCK_HELD_REQUESTS);
    let (held_ns, queued, on_device) = (
        int(span, c::BLOCK_HELD_NS),
        int(span, c::BLOCK_QUEUE_NS),
        int(span, c::BLOCK_DEVICE_NS),
    );
    let (stat_bytes, stat_reads) = (stat_after.0 - stat_before.0, stat_after.1 - stat_before.1);
    let waits: Vec<&SpanData> = spans
        .iter()
        .filter(|s| {
            s.parent_span_id == id
                && s.name == "off-cpu blocked"
                && string(s, w::BLOCK_CAUSE).as_deref() == Some("io")
        })
        .collect();
    let by_device = span
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == c::BLOCK_BY_DEVICE)
        .map(|kv| kv.value.to_string());
    eprintln!(
        "{requests} requests ({held} held), {bytes} bytes; io.stat: {stat_reads} reads, \
         {stat_bytes} bytes; held {held_ns} ns, queued {queued} ns, on the device {on_device} ns; \
         the reads took {took:?}; blocked on I/O {} ns; {} I/O waits; by device {by_device:?}; \
         {stats}",
        int(span, c::BLOCKED_IO_NS),
        waits.len()
    );
    let want_bytes = (how.reads * how.read_bytes) as i64;
    assert_eq!(
        (stat_reads, stat_bytes),
        (how.reads as i64, want_bytes),
        "the group's io.stat counts the reads, each one request"
    );
    assert_eq!(
        (requests, bytes),
        (stat_reads, stat_bytes),
        "the span's requests and bytes are io.stat's"
    );
    // The throttle admits what the limit allows at once (its first
    // slice's budget): the rest it holds.
    assert!(
        held >= how.reads as i64 - 1 && held <= requests,
        "{held} of {requests} requests held by the throttle"
    );
    let want = took.as_nanos() as i64;
    let whole = held_ns + queued + on_device;
    let slack = slack_ms * 1_000_000 + want * percent / 100;
    assert!(
        whole <= want && want - whole <= slack,
        "held, queued and on the device {whole} ns (held {held_ns}), the reads took {want} ns \
         (allowed {slack} below)"
    );
    // The limit's own arithmetic: the bytes at the limit, less what the
    // throttle may admit early (its slice, 100 ms by default, twice over).
    let floor = (want_bytes as f64 / how.limit_bytes_per_s as f64 * 1e9) as i64 - 200_000_000;
    assert!(
        held_ns >= floor.max(1),
        "held {held_ns} ns, the limit holds the reads at least {floor} ns"
    );
    let by_device = by_device.expect("the span says its requests by device");
    assert!(
        by_device.contains(&format!("{name}: {requests} requests"))
            && by_device.contains(&format!(
                "({held} held by the throttle {held_ns} ns before)"
            )),
        "{by_device}"
    );
    // Each I/O wait on a held request names it: its time held and the
    // group that held it.
    let naming: Vec<(i64, String)> = waits
        .iter()
        .filter_map(|s| {
            Some((
                optional_int(s, w::REQUEST_HELD_NS)?,
                string(s, w::REQUEST_HELD_BY)?,
            ))
        })
        .collect();
    eprintln!("I/O waits naming a held request (held ns, group): {naming:?}");
    assert!(
        naming.len() as i64 >= held - 1,
        "{} of {held} held requests named by an I/O wait: {waits:#?}",
        naming.len()
    );
    assert!(
        naming.iter().all(|(ns, by)| *ns > 0 && *by == group),
        "each names its time held and the group {group}: {naming:?}"
    );
}

/// Where the throttle's hold cannot be read (no trampolines, or a kernel
/// without blk-throttle), `scheduler_causes()` says so with why; where it
/// can, it says how.
pub fn throttled_io_is_said_read_or_not(account: kspan::SchedulerAccount) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let sums = kspan::KernelSums::new();
    let (provider, _exporter) = provider(&sums);
    let kspan = start(&provider, &sums, account);
    let causes = kspan.scheduler_causes().to_vec();
    let mechanism = kspan.scheduler_account();
    let _ = shutdown(kspan);
    let throttle = causes
        .iter()
        .find(|c| c.cause.starts_with("throttled block I/O"))
        .unwrap_or_else(|| panic!("the throttle is among the causes: {causes:#?}"));
    let trampolines = kspan::KernelCapabilities::get().trampolines.clone();
    eprintln!("{throttle:?} (trampolines: {trampolines}, account: {mechanism:?})");
    match (&throttle.how, trampolines.is_available()) {
        (Ok(_), true) => {}
        (Err(why), false) => assert!(
            why.contains("trampoline") || why.contains("BTF tracepoints"),
            "the reason names what is missing: {why}"
        ),
        (Err(why), true) => assert!(
            why.contains("__blk_throtl_bio") || why.contains("BTF tracepoints"),
            "with trampolines, only a kernel without blk-throttle (or block requests) says no: \
             {why}"
        ),
        (Ok(how), false) => panic!("read without trampolines? {how}"),
    }
}
