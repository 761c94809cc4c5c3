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
//! The template outlives libbpf's object, so the descriptors of the maps it
//! shares are renamed to ones kspan keeps open, and it keeps a descriptor of
//! its own to the object's BTF: a copy is loaded with that BTF and the
//! program's `func_info` and `line_info` records, as libbpf loads it. The
//! verifier needs `func_info` wherever a program takes the address of a
//! function of its own (a `bpf_loop` callback), and `line_info` makes its
//! log name source lines. A copy that fails is not an error here: it is
//! loaded again with a verifier log of its own, whose reason the caller
//! says (at `warn`) before loading that function through libbpf instead.
//! This is the technique of retsnoop's `clone_prog`, for the same reason.

use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use kspan_bpf::types::kspan_config;
use libbpf_rs::{libbpf_sys, AsRawLibbpf, MapCore, MapFlags, MapHandle, MapType};

use super::error::{verifier_log, verifier_reason, VERIFIER_LOG_BYTES};
use super::sys::owned;
use crate::kernel::errno;

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
    /// The object's BTF, which `func_info` and `line_info` refer to (none
    /// when the object had none loaded: libbpf then loads without them too).
    btf: Option<Arc<OwnedFd>>,
    /// The program's function records: where each of its functions starts
    /// and its BTF type.
    func_info: Vec<libbpf_sys::bpf_func_info>,
    /// The program's source line records.
    line_info: Vec<libbpf_sys::bpf_line_info>,
}

/// A copy the kernel refused: the errno of the load and the verifier's log
/// of the same load made again with a log buffer.
#[derive(Debug)]
pub(crate) struct CopyError {
    /// The load's error.
    pub source: io::Error,
    /// The verifier's log, when it wrote one.
    pub verifier_log: Option<String>,
}

impl fmt::Display for CopyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.source.raw_os_error() {
            Some(n) => f.write_str(&errno::name_of(Some(n)))?,
            None => write!(f, "{}", self.source)?,
        }
        match self.verifier_log.as_deref().and_then(verifier_reason) {
            Some(reason) => write!(f, ", the verifier says: {reason}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for CopyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl From<io::Error> for CopyError {
    fn from(source: io::Error) -> Self {
        CopyError {
            source,
            verifier_log: None,
        }
    }
}

impl ProgramTemplate {
    /// Keeps what `prog` was loaded as; `rodata_fd` is its object's
    /// `.rodata`, `btf` a descriptor of its own to the object's BTF. The
    /// object is closed after the load, so every other map the
    /// instructions name must be one of `maps` (the object's descriptor
    /// and one that stays open for the same map), and is renamed to the
    /// lasting one. `None` when the program reads no `.rodata` or names
    /// another map: it is then loaded through libbpf each time.
    pub(crate) fn new(
        prog: &libbpf_rs::Program<'_>,
        rodata_fd: RawFd,
        maps: &[(RawFd, RawFd)],
        btf: Option<Arc<OwnedFd>>,
    ) -> Option<Self> {
        let raw = prog.as_libbpf_object().as_ptr();
        // SAFETY: `raw` is a live libbpf program, loaded: libbpf keeps its
        // records (final, for the relocated instructions) until it is
        // unloaded, and `records` copies them out before.
        let (func_info, line_info) = unsafe {
            (
                records(
                    libbpf_sys::bpf_program__func_info(raw),
                    libbpf_sys::bpf_program__func_info_cnt(raw),
                ),
                records(
                    libbpf_sys::bpf_program__line_info(raw),
                    libbpf_sys::bpf_program__line_info_cnt(raw),
                ),
            )
        };
        Self::renamed(
            ProgramTemplate {
                name: CString::new(prog.name().as_encoded_bytes()).unwrap_or_default(),
                prog_type: prog.prog_type() as libbpf_sys::bpf_prog_type,
                // From libbpf: libbpf-rs 0.27 maps the attach types it does
                // not know (fsession) to one no kernel accepts.
                // SAFETY: `raw` is a live libbpf program.
                attach_type: unsafe { libbpf_sys::bpf_program__expected_attach_type(raw) },
                insns: prog.insns().to_vec(),
                rodata_fd,
                // Records without their BTF mean nothing to the kernel.
                func_info: if btf.is_some() { func_info } else { Vec::new() },
                line_info: if btf.is_some() { line_info } else { Vec::new() },
                btf,
            },
            maps,
        )
    }

    /// `template` with its maps renamed (see [`Self::new`]).
    fn renamed(mut template: ProgramTemplate, maps: &[(RawFd, RawFd)]) -> Option<Self> {
        let rodata_fd = template.rodata_fd;
        let mut i = 0;
        while i < template.insns.len() {
            let insn = &mut template.insns[i];
            if insn.code != LD_IMM64 {
                i += 1;
                continue;
            }
            i += 2;
            let src = u32::from(insn.src_reg());
            if src != libbpf_sys::BPF_PSEUDO_MAP_FD && src != libbpf_sys::BPF_PSEUDO_MAP_VALUE {
                continue;
            }
            if insn.imm == rodata_fd {
                continue;
            }
            let (_, lasting) = maps.iter().find(|(object, _)| *object == insn.imm)?;
            insn.imm = *lasting;
        }
        template.uses_rodata().then_some(template)
    }

    /// Whether the instructions use the template's `.rodata` (they must:
    /// that is where the settings are).
    fn uses_rodata(&self) -> bool {
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

    /// The attributes of a copy's load for trampolines against kernel
    /// function `attach_btf_id` (0 for other program types): the object's
    /// BTF and this program's records, as libbpf gives them. They point
    /// into `self`.
    fn load_opts(&self, attach_btf_id: u32) -> libbpf_sys::bpf_prog_load_opts {
        let mut opts = libbpf_sys::bpf_prog_load_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_prog_load_opts>() as _,
            expected_attach_type: self.attach_type,
            attach_btf_id,
            ..Default::default()
        };
        if let Some(btf) = &self.btf {
            opts.prog_btf_fd = btf.as_raw_fd() as u32;
        }
        if !self.func_info.is_empty() {
            opts.func_info = self.func_info.as_ptr().cast();
            opts.func_info_cnt = self.func_info.len() as u32;
            opts.func_info_rec_size = std::mem::size_of::<libbpf_sys::bpf_func_info>() as u32;
        }
        if !self.line_info.is_empty() {
            opts.line_info = self.line_info.as_ptr().cast();
            opts.line_info_cnt = self.line_info.len() as u32;
            opts.line_info_rec_size = std::mem::size_of::<libbpf_sys::bpf_line_info>() as u32;
        }
        opts
    }

    /// Loads a copy reading its settings from `rodata`, for trampolines
    /// against kernel function `attach_btf_id` (0 for other program types).
    /// A refused load is made again with a verifier log, for its reason.
    pub(crate) fn load(&self, rodata: &OwnedFd, attach_btf_id: u32) -> Result<OwnedFd, CopyError> {
        let mut insns = self.insns.clone();
        for at in self.rodata_slots() {
            insns[at].imm = rodata.as_raw_fd();
        }
        let mut opts = self.load_opts(attach_btf_id);
        let source = match self.load_with(&insns, &mut opts) {
            Ok(fd) => return Ok(fd),
            Err(e) => e,
        };
        let mut log = vec![0u8; VERIFIER_LOG_BYTES];
        opts.log_buf = log.as_mut_ptr().cast();
        opts.log_size = log.len() as u32;
        opts.log_level = 1;
        match self.load_with(&insns, &mut opts) {
            // Refused once and then taken (a passing shortage of memory).
            Ok(fd) => Ok(fd),
            Err(_) => Err(CopyError {
                source,
                verifier_log: verifier_log(&log),
            }),
        }
    }

    /// One `BPF_PROG_LOAD` of `insns` with `opts`.
    fn load_with(
        &self,
        insns: &[libbpf_sys::bpf_insn],
        opts: &mut libbpf_sys::bpf_prog_load_opts,
    ) -> io::Result<OwnedFd> {
        // Dual BSD/GPL, as the object declares: the helpers it calls need a
        // GPL-compatible license.
        let license = c"Dual BSD/GPL";
        // SAFETY: every pointer is valid for the duration of the call: the
        // name and license are NUL-terminated strings, `insns` holds
        // `insns.len()` instructions, `opts` is initialised with its size and
        // its records (and log buffer, if any) are live buffers of the
        // counts and sizes it gives, borrowed from `self` (and the caller).
        let fd = unsafe {
            libbpf_sys::bpf_prog_load(
                self.prog_type,
                self.name.as_ptr(),
                license.as_ptr(),
                insns.as_ptr(),
                insns.len() as _,
                opts,
            )
        };
        owned(fd)
    }
}

/// `count` records of libbpf's at `first`, copied; none where libbpf has
/// none (or records of another size than these types', given as null).
///
/// # Safety
///
/// `first` is null or points to `count` live records of type `T`.
unsafe fn records<T: Copy>(first: *const T, count: u32) -> Vec<T> {
    if first.is_null() {
        return Vec::new();
    }
    // SAFETY: as the caller promises.
    unsafe { std::slice::from_raw_parts(first, count as usize) }.to_vec()
}

/// A copy of `entry_t` (and `exit_t`) reading `config` from a `.rodata` of
/// its own, for trampolines against `btf_id` (0 for other hooks). The
/// programs hold the map: only they are returned.
pub(crate) fn load_copy(
    config: &kspan_config,
    btf_id: u32,
    entry_t: &ProgramTemplate,
    exit_t: Option<&ProgramTemplate>,
) -> Result<(OwnedFd, Option<OwnedFd>), CopyError> {
    let rodata = rodata_map(config).map_err(io::Error::other)?;
    let entry = entry_t.load(&rodata, btf_id)?;
    let exit = exit_t.map(|t| t.load(&rodata, btf_id)).transpose()?;
    Ok((entry, exit))
}

/// A fresh frozen read-only array map of one element holding `config`: a
/// copy's `.rodata`.
fn rodata_map(config: &kspan_config) -> libbpf_rs::Result<OwnedFd> {
    // SAFETY: `kspan_config` is plain old data (integers and arrays of
    // them); its bytes are what `.rodata` holds, which has exactly its size
    // (kspan-bpf's tests check that the section holds it alone).
    let value = unsafe {
        std::slice::from_raw_parts(
            (config as *const kspan_config).cast::<u8>(),
            std::mem::size_of::<kspan_config>(),
        )
    };
    let opts = libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: libbpf_sys::BPF_F_RDONLY_PROG,
        ..Default::default()
    };
    let map = MapHandle::create(
        MapType::Array,
        Some("kspan.rodata"),
        4,
        value.len() as u32,
        1,
        &opts,
    )?;
    map.update(&0u32.to_ne_bytes(), value, MapFlags::ANY)?;
    map.freeze()?;
    Ok(map.as_fd().try_clone_to_owned()?)
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
            btf: None,
            func_info: Vec::new(),
            line_info: Vec::new(),
        }
    }

    /// A template with BTF (a descriptor of this process's) and records: a
    /// main function and a callback at instruction 40, two source lines.
    fn template_with_btf() -> ProgramTemplate {
        let btf = std::fs::File::open("/dev/null").unwrap();
        ProgramTemplate {
            btf: Some(Arc::new(OwnedFd::from(btf))),
            func_info: vec![
                libbpf_sys::bpf_func_info {
                    insn_off: 0,
                    type_id: 11,
                },
                libbpf_sys::bpf_func_info {
                    insn_off: 40,
                    type_id: 12,
                },
            ],
            line_info: vec![
                libbpf_sys::bpf_line_info {
                    insn_off: 0,
                    file_name_off: 1,
                    line_off: 5,
                    line_col: 10 << 10,
                },
                libbpf_sys::bpf_line_info {
                    insn_off: 40,
                    file_name_off: 1,
                    line_off: 9,
                    line_col: 20 << 10,
                },
            ],
            ..template(vec![
                insn(LD_IMM64, libbpf_sys::BPF_PSEUDO_MAP_VALUE as u8, 7),
                insn(0, 0, 0),
            ])
        }
    }

    #[test]
    fn a_copy_is_loaded_with_the_objects_btf_and_the_programs_records() {
        let t = template_with_btf();
        let opts = t.load_opts(123);
        assert_eq!(opts.attach_btf_id, 123);
        assert_eq!(
            opts.prog_btf_fd as RawFd,
            t.btf.as_ref().unwrap().as_raw_fd()
        );
        assert_eq!(opts.func_info, t.func_info.as_ptr().cast());
        assert_eq!(opts.func_info_cnt, 2);
        assert_eq!(opts.func_info_rec_size, 8, "the kernel's bpf_func_info");
        assert_eq!(opts.line_info, t.line_info.as_ptr().cast());
        assert_eq!(opts.line_info_cnt, 2);
        assert_eq!(opts.line_info_rec_size, 16, "the kernel's bpf_line_info");
        assert_eq!(opts.log_level, 0, "a log only when a load is refused");

        let bare = template(Vec::new()).load_opts(0);
        assert_eq!(
            (bare.prog_btf_fd, bare.func_info_cnt, bare.line_info_cnt),
            (0, 0, 0)
        );
        assert!(bare.func_info.is_null() && bare.line_info.is_null());
        assert_eq!((bare.func_info_rec_size, bare.line_info_rec_size), (0, 0));
    }

    #[test]
    fn the_template_keeps_the_records_through_renaming() {
        let t = template_with_btf();
        let renamed = ProgramTemplate::renamed(t.clone(), &[]).unwrap();
        assert_eq!(renamed.func_info.len(), 2);
        assert_eq!(renamed.func_info[1].insn_off, 40);
        assert_eq!(renamed.line_info[1].line_off, 9);
        assert!(Arc::ptr_eq(
            renamed.btf.as_ref().unwrap(),
            t.btf.as_ref().unwrap()
        ));
    }

    #[test]
    fn records_are_copied_out_of_libbpfs() {
        let libbpf = [
            libbpf_sys::bpf_func_info {
                insn_off: 0,
                type_id: 3,
            },
            libbpf_sys::bpf_func_info {
                insn_off: 17,
                type_id: 4,
            },
        ];
        // SAFETY: `libbpf` holds the 2 records; null is allowed.
        let (copied, none) = unsafe {
            (
                records(libbpf.as_ptr(), 2),
                records(std::ptr::null::<libbpf_sys::bpf_func_info>(), 5),
            )
        };
        assert_eq!(
            copied
                .iter()
                .map(|r| (r.insn_off, r.type_id))
                .collect::<Vec<_>>(),
            [(0, 3), (17, 4)]
        );
        assert!(none.is_empty());
    }

    #[test]
    fn a_refused_copy_says_the_verifiers_reason() {
        let e = CopyError {
            source: io::Error::from_raw_os_error(libc::EINVAL),
            verifier_log: Some(
                "0: R1=ctx()\n12: (18) r2 = 0x0\nmissing btf func_info\n\
                 processed 13 insns (limit 1000000)"
                    .to_owned(),
            ),
        };
        assert_eq!(
            e.to_string(),
            "EINVAL, the verifier says: missing btf func_info"
        );
        let e = CopyError::from(io::Error::from_raw_os_error(libc::E2BIG));
        assert_eq!(e.to_string(), "E2BIG");
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
        let renamed = ProgramTemplate::renamed(t.clone(), &[(9, 20)]).unwrap();
        assert_eq!(renamed.insns[5].imm, 20, "the other map is renamed");
        assert_eq!(renamed.insns[6].imm, 7, "second halves are not");
        assert_eq!((renamed.insns[1].imm, renamed.insns[3].imm), (7, 7));
        assert!(
            ProgramTemplate::renamed(t.clone(), &[]).is_none(),
            "a map that does not stay open makes no template"
        );
        assert_eq!(t.rodata_slots().collect::<Vec<_>>(), [1, 7]);
        assert!(!template(vec![insn(0xb7, 0, 7)]).uses_rodata());
    }
}
