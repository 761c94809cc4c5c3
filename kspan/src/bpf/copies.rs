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
//! shares are renamed to ones kspan keeps open. A copy that fails is not an
//! error here: the caller loads that function through libbpf instead (said
//! at `warn`), which reports a real refusal with the verifier's log. This is
//! the technique of retsnoop's `clone_prog`, for the same reason.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use kspan_bpf::types::kspan_config;
use libbpf_rs::{libbpf_sys, AsRawLibbpf, MapCore, MapFlags, MapHandle, MapType};

use super::sys::owned;

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
    /// Keeps what `prog` was loaded as; `rodata_fd` is its object's
    /// `.rodata`. The object is closed after the load, so every other map
    /// the instructions name must be one of `maps` (the object's descriptor
    /// and one that stays open for the same map), and is renamed to the
    /// lasting one. `None` when the program reads no `.rodata` or names
    /// another map: it is then loaded through libbpf each time.
    pub(crate) fn new(
        prog: &libbpf_rs::Program<'_>,
        rodata_fd: RawFd,
        maps: &[(RawFd, RawFd)],
    ) -> Option<Self> {
        Self::renamed(
            ProgramTemplate {
                name: CString::new(prog.name().as_encoded_bytes()).unwrap_or_default(),
                prog_type: prog.prog_type() as libbpf_sys::bpf_prog_type,
                // From libbpf: libbpf-rs 0.27 maps the attach types it does
                // not know (fsession) to one no kernel accepts.
                // SAFETY: `prog` is a live libbpf program.
                attach_type: unsafe {
                    libbpf_sys::bpf_program__expected_attach_type(prog.as_libbpf_object().as_ptr())
                },
                insns: prog.insns().to_vec(),
                rodata_fd,
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
}

/// A copy of `entry_t` (and `exit_t`) reading `config` from a `.rodata` of
/// its own, for trampolines against `btf_id` (0 for other hooks). The
/// programs hold the map: only they are returned.
pub(crate) fn load_copy(
    config: &kspan_config,
    btf_id: u32,
    entry_t: &ProgramTemplate,
    exit_t: Option<&ProgramTemplate>,
) -> io::Result<(OwnedFd, Option<OwnedFd>)> {
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
