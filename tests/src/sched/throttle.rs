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

use super::{cause_int, optional_int, provider, shutdown, start, string, ONE_AT_A_TIME};

/// How the throttled case reads: `reads` O_DIRECT reads of `read_bytes`
/// each, at distinct offsets of a raw device, under a read limit of
/// `limit_bytes_per_s`.
#[derive(Debug, Clone, Copy)]
pub struct ThrottledReads {
    /// Which interface sets the limit.
    pub cgroup: CgroupVersion,
    /// How many reads.
    pub reads: usize,
    /// The bytes of each (a multiple of 4 KiB).
    pub read_bytes: usize,
    /// The group's read limit on the device (`io.max`'s `rbps`).
    pub limit_bytes_per_s: u64,
}

/// Which cgroup version's blk-throttle interface sets the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// cgroup v2's `io.max` (`rbps=`), the group's `io.stat`.
    V2,
    /// cgroup v1's `blkio.throttle.read_bps_device`, the group's
    /// `blkio.throttle.io_service_bytes` and `_serviced`.
    V1,
}

/// A group with a read limit on one device, holding this process while
/// it lives, on a cgroup hierarchy of `version` mounted for it where the
/// machine has none (unmounted after). `Err`: why the case cannot run
/// here (the controller bound to the other version).
struct IoLimit {
    version: CgroupVersion,
    root: std::path::PathBuf,
    group: std::path::PathBuf,
    mounted: bool,
}

fn mount(
    fs: &std::ffi::CStr,
    at: &std::path::Path,
    data: Option<&std::ffi::CStr>,
) -> Result<(), String> {
    let target = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: NUL-terminated strings; `data` a NUL-terminated option string or null.
    let rc = unsafe {
        libc::mount(
            c"none".as_ptr(),
            target.as_ptr(),
            fs.as_ptr(),
            0,
            data.map_or(std::ptr::null(), |d| d.as_ptr().cast()),
        )
    };
    if rc != 0 {
        return Err(format!(
            "mounting {fs:?} at {}: {}",
            at.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn write(path: std::path::PathBuf, text: &str) -> Result<(), String> {
    std::fs::write(&path, text).map_err(|e| format!("writing {text:?} to {}: {e}", path.display()))
}

/// Takes the io controller out of cgroup v2's root `subtree_control`
/// (mounting v2 at `at` for it, and unmounting it after), so that a
/// cgroup v1 hierarchy may take it.
fn release_v2_io(at: &std::path::Path) {
    if mount(c"cgroup2", at, None).is_ok() {
        let _ = std::fs::write(at.join("cgroup.subtree_control"), "-io");
        let target = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        unsafe { libc::umount(target.as_ptr()) };
    }
}

impl IoLimit {
    fn new(version: CgroupVersion, dev: &str, limit_bytes_per_s: u64) -> Result<Self, String> {
        let scratch = std::env::temp_dir().join(format!("kspan-io-{}", std::process::id()));
        let (root, mounted) = match version {
            CgroupVersion::V2 => {
                let system = std::path::Path::new("/sys/fs/cgroup");
                if system.join("cgroup.controllers").exists() {
                    (system.to_path_buf(), false)
                } else {
                    std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
                    mount(c"cgroup2", &scratch, None)?;
                    (scratch, true)
                }
            }
            CgroupVersion::V1 => {
                std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
                // Refused (EBUSY) while cgroup v2 holds the controller: a
                // v2 group of an earlier case holds it until the kernel has
                // freed that group, moments later; it is asked back then.
                let since = std::time::Instant::now();
                while let Err(refused) = mount(c"cgroup", &scratch, Some(c"blkio")) {
                    if since.elapsed() > Duration::from_secs(10) {
                        return Err(format!("{refused} (for 10 s)"));
                    }
                    release_v2_io(&scratch);
                    std::thread::sleep(Duration::from_millis(100));
                }
                (scratch, true)
            }
        };
        let group = root.join(format!("kspan-throttled-{}", std::process::id()));
        let limit = IoLimit {
            version,
            root,
            group,
            mounted,
        };
        if version == CgroupVersion::V2 {
            // A v1 hierarchy just unmounted hands the controller back as
            // the kernel frees it: moments later.
            let controllers = || {
                std::fs::read_to_string(limit.root.join("cgroup.controllers")).unwrap_or_default()
            };
            let has_io = |text: &str| text.split_whitespace().any(|c| c == "io");
            let since = std::time::Instant::now();
            while !has_io(&controllers()) && since.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(100));
            }
            let controllers = controllers();
            if !has_io(&controllers) {
                return Err(format!(
                    "cgroup v2 at {} has no io controller (bound to cgroup v1 here: {controllers:?})",
                    limit.root.display()
                ));
            }
            write(limit.root.join("cgroup.subtree_control"), "+io")?;
        }
        std::fs::create_dir_all(&limit.group).map_err(|e| e.to_string())?;
        match version {
            CgroupVersion::V2 => write(
                limit.group.join("io.max"),
                &format!("{dev} rbps={limit_bytes_per_s}"),
            )?,
            CgroupVersion::V1 => write(
                limit.group.join("blkio.throttle.read_bps_device"),
                &format!("{dev} {limit_bytes_per_s}"),
            )?,
        }
        write(
            limit.group.join("cgroup.procs"),
            &std::process::id().to_string(),
        )?;
        Ok(limit)
    }

    fn name(&self) -> String {
        self.group
            .file_name()
            .and_then(|n| n.to_str())
            .expect("the group's name")
            .to_owned()
    }

    /// What the group's own statistics say this device (`MAJ:MIN`) has
    /// read: bytes and reads.
    fn read_stat(&self, dev: &str) -> (i64, i64) {
        let read = |file: &str| std::fs::read_to_string(self.group.join(file)).unwrap_or_default();
        match self.version {
            CgroupVersion::V2 => {
                let text = read("io.stat");
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
            CgroupVersion::V1 => {
                // Lines of `MAJ:MIN Read N`.
                let read_line = |file: &str| {
                    read(file)
                        .lines()
                        .find_map(|l| l.strip_prefix(&format!("{dev} Read ")))
                        .and_then(|v| v.trim().parse::<i64>().ok())
                        .unwrap_or(0)
                };
                (
                    read_line("blkio.throttle.io_service_bytes"),
                    read_line("blkio.throttle.io_serviced"),
                )
            }
        }
    }
}

impl Drop for IoLimit {
    fn drop(&mut self) {
        let _ = std::fs::write(
            self.root.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        let _ = std::fs::remove_dir(&self.group);
        if self.version == CgroupVersion::V2 {
            // The io controller handed back, for a cgroup v1 hierarchy to
            // take it.
            let _ = std::fs::write(self.root.join("cgroup.subtree_control"), "-io");
        }
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
/// time) by a process whose cgroup group limits reads of it (v2
/// `io.max`, or v1 `blkio.throttle.read_bps_device`). Every read is a
/// request of the span (the throttle's worker issues most of them: before
/// the held bio was followed to its request, those were no one's), in
/// count and bytes as the group's own statistics; a
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

    let limit =
        IoLimit::new(how.cgroup, &dev, how.limit_bytes_per_s).unwrap_or_else(|e| panic!("{e}"));
    let sums = kspan::KernelSums::new();
    let (provider, exporter) = provider(&sums);
    let kspan = start(&provider, &sums, account);
    let causes = kspan.scheduler_causes();
    let throttle = causes
        .iter()
        .find(|c| c.cause.starts_with("throttled block I/O"))
        .unwrap_or_else(|| panic!("the throttle is among the causes: {causes:#?}"));
    if let Err(why) = &throttle.how {
        // Only a kernel that cannot attach trampolines at all (Debian 12's
        // arm64 6.1) may say no, and then says why.
        assert!(
            why.contains("does not attach (ENOTSUPP)"),
            "throttled block I/O is read on this kernel: {why}"
        );
        eprintln!("NOT RUN: throttled block I/O is not read on this kernel: {why}");
        let _ = shutdown(kspan);
        // SAFETY: allocated above with this layout.
        unsafe { std::alloc::dealloc(buf, layout) };
        return;
    }
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
    let requests = cause_int(span, c::BLOCK_REQUESTS);
    let bytes = cause_int(span, c::BLOCK_BYTES);
    let held = cause_int(span, c::BLOCK_HELD_REQUESTS);
    let (held_ns, queued, on_device) = (
        cause_int(span, c::BLOCK_HELD_NS),
        cause_int(span, c::BLOCK_QUEUE_NS),
        cause_int(span, c::BLOCK_DEVICE_NS),
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
        "{requests} requests ({held} held), {bytes} bytes; the group ({:?}): {stat_reads} reads, \
         {stat_bytes} bytes; held {held_ns} ns, queued {queued} ns, on the device {on_device} ns; \
         the reads took {took:?}; blocked on I/O {} ns; {} I/O waits; by device {by_device:?}; \
         {stats}",
        how.cgroup,
        cause_int(span, c::BLOCKED_IO_NS),
        waits.len()
    );
    let want_bytes = (how.reads * how.read_bytes) as i64;
    assert_eq!(
        (stat_reads, stat_bytes),
        (how.reads as i64, want_bytes),
        "the group's statistics count the reads, each one request"
    );
    assert_eq!(
        (requests, bytes),
        (stat_reads, stat_bytes),
        "the span's requests and bytes are the group's"
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
    // The thread waited on I/O through the hold: its blocked I/O time is
    // the requests' whole way, within the reads' time.
    let blocked_io = cause_int(span, c::BLOCKED_IO_NS);
    assert!(
        blocked_io <= want && blocked_io + slack >= whole,
        "blocked on I/O {blocked_io} ns, the requests' way {whole} ns, the reads {want} ns \
         (allowed {slack})"
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
            why.contains("blk_throtl_bio") || why.contains("BTF tracepoints"),
            "with trampolines, only a kernel without blk-throttle's function (or block \
             requests) says no: {why}"
        ),
        (Ok(how), false) => panic!("read without trampolines? {how}"),
    }
}

/// The chain over a throttled holder (the issue's own case): a thread
/// holds a `std` mutex over `how.reads` throttled reads of the raw device
/// `disk` (node `name`) in its span, while another waits on the mutex in
/// its own. The waiter's futex wait links to the holder (`waker`), and
/// that link says what the holder did over the wait: blocked on I/O as
/// its span says, its requests' time held by the throttle as its span's
/// `kspan.block.held_ns`, within `slack_ms` + `percent` (the holder's
/// span is a little longer than the wait: its lock taken before, its
/// unlock after).
pub fn a_chain_over_throttled_reads_says_the_time_held(
    account: kspan::SchedulerAccount,
    disk: &std::path::Path,
    name: &str,
    how: ThrottledReads,
    slack_ms: i64,
    percent: i64,
) {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Barrier, Mutex};
    assert!(account.causes(), "the case needs the account's causes on");
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dev = std::fs::read_to_string(format!("/sys/block/{name}/dev"))
        .unwrap_or_else(|e| panic!("/sys/block/{name}/dev: {e}"))
        .trim()
        .to_owned();
    let limit =
        IoLimit::new(how.cgroup, &dev, how.limit_bytes_per_s).unwrap_or_else(|e| panic!("{e}"));
    let sums = kspan::KernelSums::new();
    let (provider, exporter) = provider(&sums);
    let kspan = start(&provider, &sums, account);
    if let Some(Err(why)) = kspan
        .scheduler_causes()
        .iter()
        .find(|c| c.cause.starts_with("throttled block I/O"))
        .map(|c| &c.how)
    {
        assert!(
            why.contains("does not attach (ENOTSUPP)"),
            "throttled block I/O is read on this kernel: {why}"
        );
        eprintln!("NOT RUN: throttled block I/O is not read on this kernel: {why}");
        let _ = shutdown(kspan);
        return;
    }
    let tracer = provider.tracer("sched-throttle-chain");
    let lock = Arc::new(Mutex::new(()));
    let held = Arc::new(Barrier::new(2));
    let waiter_tid = Arc::new(AtomicU32::new(0));
    let holder = {
        let (tracer, lock, held, waiter_tid) = (
            tracer.clone(),
            lock.clone(),
            held.clone(),
            waiter_tid.clone(),
        );
        let disk = disk.to_owned();
        std::thread::spawn(move || {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(&disk)
                .unwrap_or_else(|e| panic!("opening {} with O_DIRECT: {e}", disk.display()));
            let layout = std::alloc::Layout::from_size_align(how.read_bytes, 4096).unwrap();
            // SAFETY: the layout is non-zero in size; the buffer is freed below.
            let buf = unsafe { std::alloc::alloc(layout) };
            // SAFETY: `buf` holds read_bytes bytes, written by the reads only.
            let slice = unsafe { std::slice::from_raw_parts_mut(buf, how.read_bytes) };
            let cx = Context::current_with_span(tracer.start("throttled holder"));
            {
                let _attached = cx.clone().attach();
                let guard = lock.lock().unwrap();
                held.wait();
                // Until the waiter sleeps on the lock (its state `S`).
                loop {
                    let tid = waiter_tid.load(Ordering::Acquire);
                    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"));
                    if tid != 0
                        && stat.is_ok_and(|s| {
                            s.rsplit(") ").next().is_some_and(|r| r.starts_with('S'))
                        })
                    {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                for i in 0..how.reads as u64 {
                    let n = file
                        .read_at(slice, i * how.read_bytes as u64)
                        .expect("an O_DIRECT read");
                    assert_eq!(n, how.read_bytes, "a whole read");
                }
                drop(guard);
            }
            let id = cx.span().span_context().span_id();
            drop(cx);
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(buf, layout) };
            id
        })
    };
    let cx = Context::current_with_span(tracer.start("waiter"));
    let waiter_id = cx.span().span_context().span_id();
    {
        let _attached = cx.clone().attach();
        held.wait();
        waiter_tid.store(crate::gettid() as u32, Ordering::Release);
        drop(lock.lock().unwrap());
    }
    drop(cx);
    let holder_id = holder.join().expect("the holder's thread");
    let stats = shutdown(kspan);
    drop(limit);

    let spans = exporter.get_finished_spans().unwrap();
    let find = |id| {
        spans
            .iter()
            .find(|s| s.span_context.span_id() == id)
            .expect("the span is exported")
    };
    let holder = find(holder_id);
    let futex_wait = spans
        .iter()
        .filter(|s| s.parent_span_id == waiter_id && s.name == "off-cpu sleeping")
        .max_by_key(|s| super::duration_ns(s))
        .unwrap_or_else(|| panic!("the waiter's futex wait: {spans:#?}"));
    let waker = futex_wait
        .links
        .iter()
        .find(|l| {
            l.attributes
                .iter()
                .any(|kv| kv.key.as_str() == w::LINK && kv.value.as_str() == "waker")
        })
        .unwrap_or_else(|| panic!("a `waker` link: {:?}", futex_wait.links));
    let on_link = |key: &str| {
        waker
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .and_then(|kv| match kv.value {
                opentelemetry::Value::I64(v) => Some(v),
                _ => None,
            })
    };
    let (held_ns, blocked_io) = (
        cause_int(holder, c::BLOCK_HELD_NS),
        cause_int(holder, c::BLOCKED_IO_NS),
    );
    let (link_held, link_io) = (
        on_link(w::WAKER_BLOCK_HELD_NS),
        on_link(w::WAKER_BLOCKED_IO_NS),
    );
    eprintln!(
        "futex wait {} ns; the holder's span: held {held_ns} ns, blocked on I/O {blocked_io} ns \
         ({} requests); its waker link: held {link_held:?}, blocked on I/O {link_io:?}; {:?}; \
         {stats}",
        super::duration_ns(futex_wait),
        cause_int(holder, c::BLOCK_HELD_REQUESTS),
        waker.attributes
    );
    assert_eq!(
        waker.span_context.span_id(),
        holder_id,
        "the waker link is the holder's span"
    );
    assert!(
        held_ns > 0,
        "the holder's reads were held: {:?}",
        holder.attributes
    );
    let slack = |ns: i64| slack_ms * 1_000_000 + ns * percent / 100;
    for (what, on_link, span) in [
        ("held by the throttle", link_held, held_ns),
        ("blocked on I/O", link_io, blocked_io),
    ] {
        let on_link = on_link.unwrap_or_else(|| {
            panic!(
                "the waker link says the holder's time {what}: {:?}",
                waker.attributes
            )
        });
        assert!(
            on_link <= span && span - on_link <= slack(span),
            "over the wait the holder's time {what} {on_link} ns, its span's {span} ns \
             (allowed {} below)",
            slack(span)
        );
    }
}
