// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The raw system calls of attaching, where libbpf-rs has no call that
//! takes a bare program descriptor: links for trampolines, kprobes (one
//! function or many through kprobe.multi) and tracepoints, each with a BPF
//! cookie where the program needs one. Each returns the link descriptor;
//! dropping it detaches. Also the mapping of an mmapable map's values,
//! which user space writes without system calls.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use libbpf_rs::libbpf_sys;

use crate::kernel::tracefs::TRACEFS;

/// The kprobe PMU: present exactly when the kernel has CONFIG_KPROBES.
pub(crate) const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe";

/// `perf_event_open`'s flag for a close-on-exec descriptor (not in `libc`).
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// `PERF_TYPE_TRACEPOINT` of `perf_event.h`.
const PERF_TYPE_TRACEPOINT: u32 = 2;

/// Attaches a loaded trampoline program (`fentry`/`fexit`, loaded against
/// its target) with `attach_type`.
pub(crate) fn attach_trace(
    prog: BorrowedFd<'_>,
    attach_type: libbpf_sys::bpf_attach_type,
) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall wrapper; the descriptor is valid and no options
    // are passed.
    let fd =
        unsafe { libbpf_sys::bpf_link_create(prog.as_raw_fd(), 0, attach_type, std::ptr::null()) };
    owned(fd)
}

/// Attaches a BTF tracepoint program (`tp_btf`, loaded against its
/// tracepoint): a raw tracepoint link.
pub(crate) fn attach_btf_tracepoint(prog: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall wrapper; a NULL name takes the tracepoint the
    // program was loaded for.
    let fd = unsafe { libbpf_sys::bpf_raw_tracepoint_open(std::ptr::null(), prog.as_raw_fd()) };
    owned(fd)
}

/// `BPF_TRACE_FSESSION_MULTI` of the UAPI (Linux 7.2), past what
/// libbpf-sys 1.7 knows.
pub(crate) const BPF_TRACE_FSESSION_MULTI: libbpf_sys::bpf_attach_type = 61;

/// Loads the smallest tracing program (`r0 = 0; exit`) with
/// `attach_type` against the kernel function of BTF id `btf_id` (0 for the
/// multi-function attach types), attaching nothing: whether this kernel has
/// that attach type and lets this process load it, asked without libbpf
/// (whose log lines about an expected refusal would reach the
/// application's print hook).
pub(crate) fn load_trampoline_probe(
    attach_type: libbpf_sys::bpf_attach_type,
    btf_id: u32,
) -> io::Result<OwnedFd> {
    let insns = [
        // BPF_ALU64 | BPF_MOV | BPF_K: r0 = 0
        libbpf_sys::bpf_insn {
            code: 0xb7,
            ..Default::default()
        },
        // BPF_JMP | BPF_EXIT
        libbpf_sys::bpf_insn {
            code: 0x95,
            ..Default::default()
        },
    ];
    let mut opts = libbpf_sys::bpf_prog_load_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_prog_load_opts>() as _,
        expected_attach_type: attach_type,
        attach_btf_id: btf_id,
        ..Default::default()
    };
    // SAFETY: the name and license are NUL-terminated strings, `insns` holds
    // the two instructions passed, and `opts` is initialised with its size.
    let fd = unsafe {
        libbpf_sys::bpf_prog_load(
            libbpf_sys::BPF_PROG_TYPE_TRACING,
            c"kspan_probe".as_ptr(),
            c"Dual BSD/GPL".as_ptr(),
            insns.as_ptr(),
            insns.len() as _,
            &mut opts,
        )
    };
    owned(fd)
}

/// Whether programs of `prog_type` (attached as `attach_type` to BTF id
/// `btf_id`, for tracing programs) may call helper `helper`: a program
/// calling it with no arguments is loaded, and the verifier either knows
/// the helper (it loads, or fails checking the arguments) or says
/// `unknown func` / `invalid func`. `Err` when the program type itself was
/// refused.
pub(crate) fn probe_helper(
    prog_type: libbpf_sys::bpf_prog_type,
    attach_type: libbpf_sys::bpf_attach_type,
    btf_id: u32,
    helper: libbpf_sys::bpf_func_id,
) -> io::Result<bool> {
    let insns = [
        // BPF_JMP | BPF_CALL: call helper
        libbpf_sys::bpf_insn {
            code: 0x85,
            imm: helper as i32,
            ..Default::default()
        },
        // BPF_ALU64 | BPF_MOV | BPF_K: r0 = 0
        libbpf_sys::bpf_insn {
            code: 0xb7,
            ..Default::default()
        },
        // BPF_JMP | BPF_EXIT
        libbpf_sys::bpf_insn {
            code: 0x95,
            ..Default::default()
        },
    ];
    let mut log = vec![0u8; 4096];
    let mut opts = libbpf_sys::bpf_prog_load_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_prog_load_opts>() as _,
        expected_attach_type: attach_type,
        attach_btf_id: btf_id,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr().cast(),
        ..Default::default()
    };
    // SAFETY: the name and license are NUL-terminated strings, `insns` holds
    // the instructions passed, `log` outlives the call with the size given,
    // and `opts` is initialised with its size.
    let fd = unsafe {
        libbpf_sys::bpf_prog_load(
            prog_type,
            c"kspan_probe".as_ptr(),
            c"Dual BSD/GPL".as_ptr(),
            insns.as_ptr(),
            insns.len() as _,
            &mut opts,
        )
    };
    let err = match owned(fd) {
        Ok(_) => return Ok(true),
        Err(err) => err,
    };
    let log = String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap_or(0)]);
    if log.contains("unknown func") || log.contains("invalid func") {
        return Ok(false);
    }
    // Refused before the call was looked at: the program type itself.
    if log.trim().is_empty() || err.raw_os_error() == Some(libc::EPERM) {
        return Err(err);
    }
    Ok(true)
}

/// Whether the verifier takes atomics that return a value (BPF_FETCH,
/// Linux 5.12): a socket filter adding to its stack with
/// `atomic_fetch_add` is loaded. Kernels before refuse any program holding
/// one (`BPF_STX uses reserved fields`), reachable or not.
pub(crate) fn probe_fetch_atomics() -> io::Result<()> {
    let insn = |code: u8, regs: u8, off: i16, imm: i32| libbpf_sys::bpf_insn {
        code,
        _bitfield_1: libbpf_sys::bpf_insn::new_bitfield_1(regs & 0xf, regs >> 4),
        off,
        imm,
        ..Default::default()
    };
    let insns = [
        // r0 = 0; *(u64 *)(r10 - 8) = r0
        insn(0xb7, 0x00, 0, 0),
        insn(0x7b, 0x0a, -8, 0),
        // r1 = 1; r1 = atomic_fetch_add((u64 *)(r10 - 8), r1)
        insn(0xb7, 0x01, 0, 1),
        insn(0xdb, 0x1a, -8, 0x01),
        // r0 = 0; exit
        insn(0xb7, 0x00, 0, 0),
        insn(0x95, 0x00, 0, 0),
    ];
    // SAFETY: the name and license are NUL-terminated strings, `insns` holds
    // the instructions passed, and no options are given.
    let fd = unsafe {
        libbpf_sys::bpf_prog_load(
            libbpf_sys::BPF_PROG_TYPE_SOCKET_FILTER,
            c"kspan_probe".as_ptr(),
            c"Dual BSD/GPL".as_ptr(),
            insns.as_ptr(),
            insns.len() as _,
            std::ptr::null_mut(),
        )
    };
    owned(fd).map(drop)
}

/// `prog` attached to the raw tracepoint `name` (no tracefs, no perf
/// event): the returned descriptor holds it.
pub(crate) fn attach_raw_tracepoint(
    prog: BorrowedFd<'_>,
    name: &std::ffi::CStr,
) -> io::Result<OwnedFd> {
    // SAFETY: `name` is a NUL-terminated string that outlives the call and
    // `prog` a live program descriptor.
    owned(unsafe { libbpf_sys::bpf_raw_tracepoint_open(name.as_ptr(), prog.as_raw_fd()) })
}

/// `prog` attached to the `syscalls:<event>` tracepoint (`sys_enter_read`)
/// through a perf event and a BPF link.
pub(crate) fn attach_syscall_tracepoint(prog: BorrowedFd<'_>, event: &str) -> io::Result<OwnedFd> {
    attach_tracepoint(prog, "syscalls", event)
}

/// `prog` attached to the `<category>:<event>` tracepoint through a perf
/// event and a BPF link.
pub(crate) fn attach_tracepoint(
    prog: BorrowedFd<'_>,
    category: &str,
    event: &str,
) -> io::Result<OwnedFd> {
    let id_path = Path::new(TRACEFS).join(format!("events/{category}/{event}/id"));
    let id: u64 = std::fs::read_to_string(&id_path)?
        .trim()
        .parse()
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    let attr = libbpf_sys::perf_event_attr {
        type_: PERF_TYPE_TRACEPOINT,
        size: std::mem::size_of::<libbpf_sys::perf_event_attr>() as u32,
        config: id,
        ..Default::default()
    };
    perf_event_link(&attr, prog, 0)
}

/// Opens the system-wide perf event `attr` and attaches `prog` to it
/// through a BPF link carrying `cookie`. The link holds the event: one
/// descriptor per attachment.
fn perf_event_link(
    attr: &libbpf_sys::perf_event_attr,
    prog: BorrowedFd<'_>,
    cookie: u64,
) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is initialised with its size and everything it points
    // at outlives the call; pid -1 with cpu 0 is a system-wide event, as
    // libbpf opens kprobes and tracepoints.
    let pfd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const libbpf_sys::perf_event_attr,
            -1,
            0,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    let event = owned(i32::try_from(pfd).unwrap_or(-1))?;
    let mut opts = libbpf_sys::bpf_link_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _,
        ..Default::default()
    };
    opts.__bindgen_anon_1.perf_event.bpf_cookie = cookie;
    // SAFETY: valid descriptors, and `opts` initialised with its size.
    let link = unsafe {
        libbpf_sys::bpf_link_create(
            prog.as_raw_fd(),
            event.as_raw_fd(),
            libbpf_sys::BPF_PERF_EVENT,
            &opts,
        )
    };
    match owned(link) {
        // The link keeps its own reference to the event: ours can go.
        Ok(link) => Ok(link),
        // Before Linux 5.15 there are no perf-event links (nor cookies):
        // the program is set on the event itself, which then holds it.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) && cookie == 0 => {
            // SAFETY: plain ioctl on a valid perf event, with a valid
            // program descriptor as its argument.
            let rc =
                unsafe { libc::ioctl(event.as_raw_fd(), PERF_EVENT_IOC_SET_BPF, prog.as_raw_fd()) };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(event)
        }
        Err(e) => Err(e),
    }
}

/// `PERF_EVENT_IOC_SET_BPF` of `perf_event.h`: `_IOW('$', 8, __u32)`.
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;

/// A kprobe (or kretprobe) perf event on `function` from the `kprobe` PMU,
/// with `prog` attached through a BPF link carrying `cookie`. Returns the
/// link, which holds the event: dropping it detaches and frees both (one
/// descriptor per attachment, so a thousand functions fit the usual limits).
pub(crate) fn attach_kprobe(
    prog: BorrowedFd<'_>,
    function: &str,
    retprobe: bool,
    cookie: u64,
) -> io::Result<OwnedFd> {
    let pmu = kprobe_pmu()?;
    let name = CString::new(function).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut attr = libbpf_sys::perf_event_attr {
        type_: pmu.type_,
        size: std::mem::size_of::<libbpf_sys::perf_event_attr>() as u32,
        config: if retprobe { 1 << pmu.retprobe_bit } else { 0 },
        ..Default::default()
    };
    attr.__bindgen_anon_3.kprobe_func = name.as_ptr() as u64;
    attr.__bindgen_anon_4.probe_offset = 0;
    // `attr` points at `name`, alive until the event is open.
    perf_event_link(&attr, prog, cookie)
}

/// Where a kprobe.multi link runs its program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KprobeMultiKind {
    /// At the functions' entries (`kprobe.multi`).
    Entry,
    /// At their returns (`kretprobe.multi`).
    Return,
    /// At both, one program (`kprobe.session`, Linux 6.10+).
    Session,
}

/// One kprobe.multi link attaching `prog` (loaded as `kprobe.multi`, or
/// `kprobe.session` for [`KprobeMultiKind::Session`]) to every function of
/// `functions`, each with its cookie.
pub(crate) fn attach_kprobe_multi(
    prog: BorrowedFd<'_>,
    functions: &[(&str, u64)],
    kind: KprobeMultiKind,
) -> io::Result<OwnedFd> {
    let names = functions
        .iter()
        .map(|(f, _)| CString::new(*f))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut syms: Vec<*const libc::c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let cookies: Vec<u64> = functions.iter().map(|(_, c)| *c).collect();
    let mut opts = libbpf_sys::bpf_link_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _,
        ..Default::default()
    };
    opts.__bindgen_anon_1.kprobe_multi =
        libbpf_sys::bpf_link_create_opts__bindgen_ty_1__bindgen_ty_2 {
            flags: if kind == KprobeMultiKind::Return {
                libbpf_sys::BPF_F_KPROBE_MULTI_RETURN
            } else {
                0
            },
            cnt: syms.len() as u32,
            syms: syms.as_mut_ptr(),
            addrs: std::ptr::null(),
            cookies: cookies.as_ptr(),
        };
    let attach_type = if kind == KprobeMultiKind::Session {
        libbpf_sys::BPF_TRACE_KPROBE_SESSION
    } else {
        libbpf_sys::BPF_TRACE_KPROBE_MULTI
    };
    // SAFETY: `syms` points at `names.len()` NUL-terminated strings and
    // `cookies` at as many cookies, all alive across the call; `opts` is
    // initialised with its size.
    let link = unsafe { libbpf_sys::bpf_link_create(prog.as_raw_fd(), 0, attach_type, &opts) };
    owned(link)
}

/// `union bpf_attr` as `BPF_LINK_CREATE` reads it for the multi-function
/// tracing attach types (Linux 7.2 UAPI: `link_create.tracing_multi`),
/// which libbpf 1.7's `bpf_link_create` does not pass on.
#[repr(C)]
#[derive(Default)]
struct TracingMultiLinkAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    /// User pointer to `cnt` BTF ids (`__u32`) of the target functions.
    ids: u64,
    /// User pointer to `cnt` cookies (`__u64`), one per target.
    cookies: u64,
    cnt: u32,
    _pad: u32,
}

/// One link attaching `prog` (loaded with the multi-function
/// `attach_type`, no target) to every kernel function of `targets` (BTF
/// id, cookie). The kernel attaches all or none.
pub(crate) fn attach_tracing_multi(
    prog: BorrowedFd<'_>,
    attach_type: libbpf_sys::bpf_attach_type,
    targets: &[(u32, u64)],
) -> io::Result<OwnedFd> {
    let ids: Vec<u32> = targets.iter().map(|(id, _)| *id).collect();
    let cookies: Vec<u64> = targets.iter().map(|(_, c)| *c).collect();
    let attr = TracingMultiLinkAttr {
        prog_fd: prog.as_raw_fd() as u32,
        attach_type,
        ids: ids.as_ptr() as u64,
        cookies: cookies.as_ptr() as u64,
        cnt: u32::try_from(ids.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
        ..Default::default()
    };
    // SAFETY: `attr` is a valid, initialised `bpf_attr` prefix of the size
    // passed; `ids` and `cookies` hold `cnt` entries each and outlive the
    // call. The kernel zero-fills the rest of its `bpf_attr`.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            libbpf_sys::BPF_LINK_CREATE as libc::c_long,
            &attr as *const TracingMultiLinkAttr,
            std::mem::size_of::<TracingMultiLinkAttr>() as libc::c_long,
        )
    };
    owned(i32::try_from(fd).unwrap_or(-1))
}

/// A one-entry array map whose value is `value_size` bytes: memory a
/// program and this process share.
pub(crate) fn array_map_create(value_size: u32) -> io::Result<OwnedFd> {
    // SAFETY: the name is a NUL-terminated string; no options are passed.
    let fd = unsafe {
        libbpf_sys::bpf_map_create(
            libbpf_sys::BPF_MAP_TYPE_ARRAY,
            c"kspan_scratch".as_ptr(),
            4,
            value_size,
            1,
            std::ptr::null(),
        )
    };
    owned(fd)
}

/// Writes `value` (the map's whole value) into the one entry of an array
/// map made by [`array_map_create`].
pub(crate) fn array_map_write(map: BorrowedFd<'_>, value: &[u8]) -> io::Result<()> {
    let key = 0u32;
    // SAFETY: the key is 4 bytes and `value` is the map's value size (the
    // caller made the map with it), both valid for the call.
    let rc = unsafe {
        libbpf_sys::bpf_map_update_elem(
            map.as_raw_fd(),
            (&key as *const u32).cast(),
            value.as_ptr().cast(),
            0,
        )
    };
    errno_result(rc)
}

/// Reads the one entry of an array map made by [`array_map_create`] into
/// `value` (the map's value size).
pub(crate) fn array_map_read(map: BorrowedFd<'_>, value: &mut [u8]) -> io::Result<()> {
    let key = 0u32;
    // SAFETY: the key is 4 bytes and `value` is the map's value size, which
    // the kernel fills.
    let rc = unsafe {
        libbpf_sys::bpf_map_lookup_elem(
            map.as_raw_fd(),
            (&key as *const u32).cast(),
            value.as_mut_ptr().cast(),
        )
    };
    errno_result(rc)
}

/// Loads a syscall program (`BPF_PROG_TYPE_SYSCALL`, sleepable, as the
/// kernel requires of that type): one the process runs itself with
/// [`run_syscall_program`], attached to nothing.
pub(crate) fn load_syscall_program(insns: &[libbpf_sys::bpf_insn]) -> io::Result<OwnedFd> {
    let mut opts = libbpf_sys::bpf_prog_load_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_prog_load_opts>() as _,
        prog_flags: libbpf_sys::BPF_F_SLEEPABLE,
        ..Default::default()
    };
    // SAFETY: the name and license are NUL-terminated strings, `insns`
    // holds the instructions passed, and `opts` is initialised with its
    // size.
    let fd = unsafe {
        libbpf_sys::bpf_prog_load(
            libbpf_sys::BPF_PROG_TYPE_SYSCALL,
            c"kspan_syms".as_ptr(),
            c"Dual BSD/GPL".as_ptr(),
            insns.as_ptr(),
            insns.len() as _,
            &mut opts,
        )
    };
    owned(fd)
}

/// Runs a program loaded by [`load_syscall_program`] once (`BPF_PROG_RUN`,
/// no context); its return value.
pub(crate) fn run_syscall_program(prog: BorrowedFd<'_>) -> io::Result<u32> {
    let mut opts = libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _,
        ..Default::default()
    };
    // SAFETY: `opts` is initialised with its size and names no buffers.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) };
    errno_result(rc).map(|()| opts.retval)
}

/// `Ok` for a libbpf call's 0, the error for its `-errno`.
fn errno_result(rc: i32) -> io::Result<()> {
    match rc {
        0 => Ok(()),
        rc if rc < 0 => Err(io::Error::from_raw_os_error(-rc)),
        _ => Err(io::Error::other(format!("unexpected return {rc}"))),
    }
}

/// The kprobe PMU's type and the config bit that makes a probe a return
/// probe, read once from sysfs.
#[derive(Debug, Clone, Copy)]
struct KprobePmu {
    type_: u32,
    retprobe_bit: u32,
}

fn kprobe_pmu() -> io::Result<KprobePmu> {
    static PMU: std::sync::OnceLock<Option<KprobePmu>> = std::sync::OnceLock::new();
    let read = || -> Option<KprobePmu> {
        let dir = KPROBE_PMU;
        let type_ = std::fs::read_to_string(format!("{dir}/type"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        // "config:0"
        let format = std::fs::read_to_string(format!("{dir}/format/retprobe")).ok()?;
        let retprobe_bit = format.trim().strip_prefix("config:")?.parse().ok()?;
        Some(KprobePmu {
            type_,
            retprobe_bit,
        })
    };
    // Absent PMU files: the kernel has no kprobes, ENOENT as libbpf says.
    PMU.get_or_init(read)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
}

/// How many times the kernel skipped program `prog` instead of running it
/// (`recursion_misses` of its `bpf_prog_info`): it runs a program at most
/// once at a time on a CPU.
pub(crate) fn prog_recursion_misses(prog: BorrowedFd<'_>) -> io::Result<u64> {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: `info` is a `bpf_prog_info` of `len` bytes, which the kernel
    // fills up to that length; none of its pointer fields is set, so the
    // kernel writes nothing else.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(prog.as_raw_fd(), &mut info, &mut len) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    Ok(info.recursion_misses)
}

/// Bytes mapped of a small mmapable array map's values: a page (x86-64),
/// the least the kernel maps; `kspan_ctx_pending` fits in it.
pub(crate) const VALUES_BYTES: usize = 4096;

/// Maps the first `bytes` of the values of the mmapable array map `map`
/// (a multiple of the page size, within the map), shared with the kernel:
/// what is written there programs read, and what they write is read here.
pub(crate) fn map_values(map: BorrowedFd<'_>, bytes: usize) -> io::Result<std::ptr::NonNull<u8>> {
    // SAFETY: a new shared mapping of the map's value area; nothing else
    // is touched.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            map.as_raw_fd(),
            0,
        )
    };
    if at == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    std::ptr::NonNull::new(at.cast()).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))
}

/// Unmaps what [`map_values`] mapped.
///
/// # Safety
/// `at` and `bytes` are a mapping [`map_values`] returned and its length,
/// and nothing uses it after.
pub(crate) unsafe fn unmap_values(at: std::ptr::NonNull<u8>, bytes: usize) {
    // SAFETY: the caller's promise.
    unsafe { libc::munmap(at.as_ptr().cast(), bytes) };
}

/// The page size: mappings are whole pages.
pub(crate) fn page_bytes() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .unwrap_or(VALUES_BYTES)
}

/// A descriptor from a libbpf call that returns it or `-errno` (and sets
/// errno), or from a raw syscall that returns -1 and sets errno.
pub(crate) fn owned(fd: i32) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(if fd == -1 {
            io::Error::last_os_error()
        } else {
            io::Error::from_raw_os_error(-fd)
        });
    }
    // SAFETY: a non-negative return is a new descriptor this process owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
