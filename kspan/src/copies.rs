// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Loading further functions from programs libbpf has already loaded once.
//!
//! libbpf's unit is the object: for every traced function kspan would open
//! the ELF again, parse the kernel's 5 MB BTF again (to find a trampoline's
//! target), upload the object's BTF, create its maps and relocate. Under
//! emulation that is most of a function's attach time. The programs are the
//! same for every function; only the settings in `.rodata` and, for
//! trampolines, the target differ. So the first function of each program
//! goes through libbpf and becomes a [`ProgramTemplate`]: its final
//! instructions (relocated, map descriptors embedded) are kept, and each
//! further function gets a fresh frozen read-only array map with its settings,
//! the instructions with the template's `.rodata` descriptor swapped for that
//! map's, one `BPF_PROG_LOAD`, and one `BPF_LINK_CREATE`. The verifier still
//! sees constant settings (a frozen `BPF_F_RDONLY_PROG` map), so the programs
//! are exactly as specialised as libbpf's.
//!
//! A copy that fails for any reason is not an error here: the caller loads
//! that function through libbpf instead, which reports the failure with the
//! verifier's log.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use libbpf_rs::libbpf_sys;
use libbpf_rs::AsRawLibbpf as _;

/// `perf_event_open`'s flag for a close-on-exec descriptor (not in `libc`).
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// The `BPF_LD | BPF_IMM | BPF_DW` opcode: a 64-bit immediate load, two
/// instruction slots long.
const LD_IMM64: u8 = 0x18;

/// What a copy of a loaded program needs.
#[derive(Debug, Clone)]
pub(crate) struct ProgramTemplate {
    name: CString,
    prog_type: libbpf_sys::bpf_prog_type,
    attach_type: libbpf_sys::bpf_attach_type,
    insns: Vec<libbpf_sys::bpf_insn>,
    /// The template's `.rodata` descriptor as it appears in the instructions.
    rodata_fd: RawFd,
}

impl ProgramTemplate {
    /// Keeps what `prog` was loaded as; `rodata_fd` is its object's `.rodata`.
    pub(crate) fn new(prog: &libbpf_rs::Program<'_>, rodata_fd: RawFd) -> Self {
        let raw = prog.as_libbpf_object();
        // SAFETY: `raw` is the live libbpf program behind `prog`; both getters
        // only read it.
        let (prog_type, attach_type) = unsafe {
            (
                libbpf_sys::bpf_program__type(raw.as_ptr()),
                libbpf_sys::bpf_program__expected_attach_type(raw.as_ptr()),
            )
        };
        ProgramTemplate {
            name: CString::new(prog.name().as_encoded_bytes()).unwrap_or_default(),
            prog_type,
            attach_type,
            insns: prog.insns().to_vec(),
            rodata_fd,
        }
    }

    /// Whether the instructions use the template's `.rodata` (they must:
    /// that is where the settings are).
    pub(crate) fn uses_rodata(&self) -> bool {
        self.rodata_slots().next().is_some()
    }

    fn rodata_slots(&self) -> impl Iterator<Item = usize> + '_ {
        let mut i = 0;
        std::iter::from_fn(move || {
            while i < self.insns.len() {
                let at = i;
                let insn = &self.insns[at];
                if insn.code == LD_IMM64 {
                    i += 2;
                    if u32::from(insn.src_reg()) == libbpf_sys::BPF_PSEUDO_MAP_VALUE
                        && insn.imm == self.rodata_fd
                    {
                        return Some(at);
                    }
                } else {
                    i += 1;
                }
            }
            None
        })
    }

    /// Loads a copy reading its settings from `rodata`, for trampolines
    /// against kernel function `attach_btf_id` (0 for other program types).
    pub(crate) fn load(&self, rodata: &OwnedFd, attach_btf_id: u32) -> io::Result<OwnedFd> {
        let mut insns = self.insns.clone();
        for at in self.rodata_slots() {
            insns[at].imm = rodata.as_raw_fd();
        }
        let mut opts = libbpf_sys::bpf_prog_load_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_prog_load_opts>() as _,
            expected_attach_type: self.attach_type,
            attach_btf_id,
            ..Default::default()
        };
        // Dual BSD/GPL, as the object declares: the helpers it calls need a
        // GPL-compatible license.
        let license = c"Dual BSD/GPL";
        // SAFETY: every pointer is valid for the duration of the call: the
        // name and license are NUL-terminated strings, `insns` holds
        // `insns.len()` instructions, `opts` is initialised with its size.
        let fd = unsafe {
            libbpf_sys::bpf_prog_load(
                self.prog_type,
                self.name.as_ptr(),
                license.as_ptr(),
                insns.as_ptr(),
                insns.len() as _,
                &mut opts,
            )
        };
        owned(fd)
    }

    /// Attaches a loaded trampoline copy (`fentry`/`fexit`).
    pub(crate) fn attach_trace(&self, prog: &OwnedFd) -> io::Result<OwnedFd> {
        // SAFETY: plain syscall wrapper; the descriptor is valid and no
        // options are passed.
        let fd = unsafe {
            libbpf_sys::bpf_link_create(prog.as_raw_fd(), 0, self.attach_type, std::ptr::null())
        };
        owned(fd)
    }
}

/// A fresh frozen read-only array map of one element holding `value`: a
/// copy's `.rodata`.
pub(crate) fn rodata_map(value: &[u8]) -> io::Result<OwnedFd> {
    let opts = libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: libbpf_sys::BPF_F_RDONLY_PROG,
        ..Default::default()
    };
    // SAFETY: the name is NUL-terminated and `opts` is initialised with its
    // size.
    let fd = unsafe {
        libbpf_sys::bpf_map_create(
            libbpf_sys::BPF_MAP_TYPE_ARRAY,
            c"kspan.rodata".as_ptr(),
            4,
            value.len() as u32,
            1,
            &opts,
        )
    };
    let map = owned(fd)?;
    let key = 0u32;
    // SAFETY: the key is 4 bytes and the value `value.len()` bytes, the sizes
    // the map was created with.
    let rc = unsafe {
        libbpf_sys::bpf_map_update_elem(
            map.as_raw_fd(),
            (&key as *const u32).cast(),
            value.as_ptr().cast(),
            libbpf_sys::BPF_ANY.into(),
        )
    };
    check(rc)?;
    // SAFETY: plain syscall wrapper on a valid descriptor.
    check(unsafe { libbpf_sys::bpf_map_freeze(map.as_raw_fd()) })?;
    Ok(map)
}

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
    // SAFETY: `attr` is initialised with its size and points at `name`, which
    // outlives the call; pid -1 with cpu 0 is a system-wide event, as libbpf
    // opens kprobes.
    let pfd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const libbpf_sys::perf_event_attr,
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
    // The link keeps its own reference to the event: ours can go.
    let link = owned(link)?;
    drop(event);
    Ok(link)
}

/// One kprobe.multi link attaching `prog` (loaded as `kprobe.multi`) to
/// every function of `functions`, each with its cookie; at their returns
/// when `retprobe`.
pub(crate) fn attach_kprobe_multi(
    prog: BorrowedFd<'_>,
    functions: &[(&str, u64)],
    retprobe: bool,
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
            flags: if retprobe {
                libbpf_sys::BPF_F_KPROBE_MULTI_RETURN
            } else {
                0
            },
            cnt: syms.len() as u32,
            syms: syms.as_mut_ptr(),
            addrs: std::ptr::null(),
            cookies: cookies.as_ptr(),
        };
    // SAFETY: `syms` points at `names.len()` NUL-terminated strings and
    // `cookies` at as many cookies, all alive across the call; `opts` is
    // initialised with its size.
    let link = unsafe {
        libbpf_sys::bpf_link_create(
            prog.as_raw_fd(),
            0,
            libbpf_sys::BPF_TRACE_KPROBE_MULTI,
            &opts,
        )
    };
    owned(link)
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
        let dir = crate::capabilities::KPROBE_PMU;
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
    PMU.get_or_init(read)
        .ok_or_else(|| io::Error::from(io::ErrorKind::Unsupported))
}

/// A descriptor from a libbpf call that returns it or `-errno` (and sets
/// errno), or from a raw syscall that returns -1 and sets errno.
fn owned(fd: i32) -> io::Result<OwnedFd> {
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

fn check(rc: i32) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::from_raw_os_error(-rc))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insn(code: u8, src_reg: u8, imm: i32) -> libbpf_sys::bpf_insn {
        let mut insn = libbpf_sys::bpf_insn {
            code,
            imm,
            ..Default::default()
        };
        insn.set_src_reg(src_reg);
        insn
    }

    fn template(insns: Vec<libbpf_sys::bpf_insn>) -> ProgramTemplate {
        ProgramTemplate {
            name: c"kspan_test".to_owned(),
            prog_type: 0,
            attach_type: 0,
            insns,
            rodata_fd: 7,
        }
    }

    #[test]
    fn only_loads_of_the_rodata_value_are_swapped() {
        let map_value = libbpf_sys::BPF_PSEUDO_MAP_VALUE as u8;
        let map_fd = libbpf_sys::BPF_PSEUDO_MAP_FD as u8;
        let t = template(vec![
            insn(0xb7, 0, 7),             // mov r0, 7: an immediate, not a map
            insn(LD_IMM64, map_value, 7), // &.rodata + off
            insn(0, 0, 16),               // its second half: imm is the offset
            insn(LD_IMM64, map_fd, 7),    // a map *descriptor* load of fd 7
            insn(0, 0, 0),
            insn(LD_IMM64, map_value, 9), // another map's value
            insn(0, 0, 7),                // second half holding 7: skipped
            insn(LD_IMM64, map_value, 7),
            insn(0, 0, 0),
        ]);
        assert!(t.uses_rodata());
        assert_eq!(t.rodata_slots().collect::<Vec<_>>(), [1, 7]);
        assert!(!template(vec![insn(0xb7, 0, 7)]).uses_rodata());
    }
}
