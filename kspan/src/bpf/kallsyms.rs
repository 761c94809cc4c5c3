// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What the kernel's symbol table says of function names, asked through one
//! BPF syscall program (`BPF_PROG_TYPE_SYSCALL`, Linux 5.16+) that calls
//! `bpf_kallsyms_lookup_name` once per name and is run once.
//!
//! Why: a multi-function link (fsession.multi) is refused whole when one of
//! its functions cannot be traced, so a pattern's matches must leave those
//! out before the link is made. The kernel's list of traceable functions
//! (`available_filter_functions`) costs a quarter of a second or more to
//! read (its iterator walks from its first record again on every 4 KiB
//! read), while a lookup here is a binary search per name. It finds the two
//! kinds of untraceable functions BTF still describes that matter in
//! practice: those with no symbol (inlined into every caller) and the
//! `__init` ones, whose code the kernel freed after boot. It cannot see a
//! `notrace` function: a link refused for one reads the list then.
//!
//! The program is written here as instructions, without loops: one call
//! per name, each name and its answer at a fixed place in a map's value,
//! so the verifier checks it in one linear pass.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::libbpf_sys::bpf_insn;

use super::sys;

/// Bytes of a name's slot, its terminating NUL included: longer names are
/// not looked up (no kernel function name comes near it).
const NAME_BYTES: usize = 128;

/// One name's place in the map's value: the name, then the address the
/// kernel found (0: none), then the helper's return value.
const SLOT_BYTES: usize = NAME_BYTES + 16;

/// The most names asked at once: verifying the program takes about
/// 0.25 ms a name under emulation (1,307 names: 0.32 s in the 7.2 VM),
/// while the kernel's list costs about 0.3 s whatever the count. More are
/// refused (E2BIG), and the caller reads the list.
pub const WORTHWHILE_NAMES: usize = 256;

/// `BPF_FUNC_kallsyms_lookup_name` of the UAPI.
const BPF_FUNC_KALLSYMS_LOOKUP_NAME: i32 = 179;

/// The bounds of the kernel's `__init` text, freed after boot: looked up
/// in the same run, ahead of the names.
const INIT_TEXT: [&str; 2] = ["_sinittext", "_einittext"];

/// What the kernel's symbol table says of one function name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelSymbol {
    /// A function in the kernel's text.
    Text,
    /// An `__init` function: its code was freed after boot.
    Init,
    /// No symbol: the compiler inlined it into every caller.
    Missing,
    /// Not looked up (a name longer than a slot holds).
    Unknown,
}

/// What the kernel's symbol table says of each of `names` (at most
/// [`WORTHWHILE_NAMES`]), in order, from one program run. An error where
/// there are more names, where the kernel has no syscall programs, or
/// where it does not show this process symbol addresses (`kptr_restrict`,
/// CAP_SYSLOG): then the caller falls back to the kernel's list of
/// traceable functions.
pub fn kernel_symbols(names: &[&str]) -> io::Result<Vec<KernelSymbol>> {
    if names.len() > WORTHWHILE_NAMES {
        return Err(io::Error::other(format!(
            "{} names, more than the {WORTHWHILE_NAMES} worth looking up one by one",
            names.len()
        )));
    }
    let asked: Vec<&str> = INIT_TEXT.iter().chain(names).copied().collect();
    let addresses = lookup(&asked)?;
    let (Some(start), Some(end)) = (addresses[0], addresses[1]) else {
        return Err(io::Error::other(
            "the kernel's symbol table has no _sinittext/_einittext",
        ));
    };
    Ok(names
        .iter()
        .zip(&addresses[INIT_TEXT.len()..])
        .map(|(name, address)| match address {
            _ if name.len() >= NAME_BYTES => KernelSymbol::Unknown,
            None => KernelSymbol::Missing,
            Some(a) if (start..end).contains(a) => KernelSymbol::Init,
            Some(_) => KernelSymbol::Text,
        })
        .collect())
}

/// The address of each of `names` (`None`: not found, or too long to look
/// up).
fn lookup(names: &[&str]) -> io::Result<Vec<Option<u64>>> {
    let mut value = vec![0u8; names.len().max(1) * SLOT_BYTES];
    for (slot, name) in value.chunks_mut(SLOT_BYTES).zip(names) {
        if name.len() < NAME_BYTES {
            slot[..name.len()].copy_from_slice(name.as_bytes());
        }
    }
    let map = sys::array_map_create(value.len() as u32)?;
    sys::array_map_write(map.as_fd(), &value)?;
    let insns = lookup_program(map.as_raw_fd(), names.len());
    let prog = sys::load_syscall_program(&insns)?;
    sys::run_syscall_program(prog.as_fd())?;
    sys::array_map_read(map.as_fd(), &mut value)?;
    let mut addresses = Vec::with_capacity(names.len());
    for slot in value.chunks(SLOT_BYTES).take(names.len()) {
        let address = u64::from_ne_bytes(
            slot[NAME_BYTES..NAME_BYTES + 8]
                .try_into()
                .unwrap_or_default(),
        );
        let ret = i64::from_ne_bytes(slot[NAME_BYTES + 8..].try_into().unwrap_or_default());
        match ret {
            0 => addresses.push(Some(address)),
            // Not found (a slot left empty for a name too long asks for "").
            r if r == -i64::from(libc::ENOENT) => addresses.push(None),
            // EPERM: the kernel does not show this process addresses.
            r => return Err(io::Error::from_raw_os_error(-r as i32)),
        }
    }
    Ok(addresses)
}

/// The program for `count` names in the value of map `map_fd`: for slot
/// `i`, `ret = bpf_kallsyms_lookup_name(name, NAME_BYTES, 0, &address)`.
fn lookup_program(map_fd: i32, count: usize) -> Vec<bpf_insn> {
    const R0: u8 = 0;
    const R1: u8 = 1;
    const R2: u8 = 2;
    const R3: u8 = 3;
    const R4: u8 = 4;
    const R6: u8 = 6;
    const R7: u8 = 7;
    let mut p = Vec::with_capacity(count * 9 + 4);
    // r6 = the map's value (BPF_LD | BPF_DW | BPF_IMM, BPF_PSEUDO_MAP_VALUE).
    p.push(insn(0x18, R6, 2, 0, map_fd));
    p.push(insn(0, 0, 0, 0, 0));
    for i in 0..count {
        let slot = (i * SLOT_BYTES) as i32;
        p.push(insn(0xbf, R1, R6, 0, 0)); // r1 = r6
        p.push(insn(0x07, R1, 0, 0, slot)); // r1 += slot
        p.push(insn(0xbf, R7, R1, 0, 0)); // r7 = r1 (kept across the call)
        p.push(insn(0xb7, R2, 0, 0, NAME_BYTES as i32)); // r2 = NAME_BYTES
        p.push(insn(0xb7, R3, 0, 0, 0)); // r3 = 0 (flags)
        p.push(insn(0xbf, R4, R1, 0, 0)); // r4 = r1
        p.push(insn(0x07, R4, 0, 0, NAME_BYTES as i32)); // r4 += NAME_BYTES
        p.push(insn(0x85, 0, 0, 0, BPF_FUNC_KALLSYMS_LOOKUP_NAME)); // call
        p.push(insn(0x7b, R7, R0, (NAME_BYTES + 8) as i16, 0)); // *(u64 *)(r7 + 136) = r0
    }
    p.push(insn(0xb7, R0, 0, 0, 0)); // r0 = 0
    p.push(insn(0x95, 0, 0, 0, 0)); // exit
    p
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> bpf_insn {
    let mut i = bpf_insn {
        code,
        off,
        imm,
        ..Default::default()
    };
    i.set_dst_reg(dst);
    i.set_src_reg(src);
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_looks_up_each_slot_and_keeps_each_answer() {
        let p = lookup_program(7, 3);
        assert_eq!(p.len(), 2 + 3 * 9 + 2);
        assert_eq!(
            (p[0].code, p[0].src_reg(), p[0].imm),
            (0x18, 2, 7),
            "map value load"
        );
        let calls: Vec<usize> = (0..p.len()).filter(|&i| p[i].code == 0x85).collect();
        assert_eq!(calls.len(), 3);
        for (n, &at) in calls.iter().enumerate() {
            // The name pointer's offset, and the store of the return value.
            assert_eq!(p[at - 6].imm, (n * SLOT_BYTES) as i32);
            assert_eq!(p[at - 1].imm, NAME_BYTES as i32);
            assert_eq!(
                (p[at + 1].code, p[at + 1].off),
                (0x7b, (NAME_BYTES + 8) as i16)
            );
        }
        assert_eq!(p.last().map(|i| i.code), Some(0x95));
    }

    #[test]
    fn more_names_than_worth_a_lookup_are_refused_before_any_system_call() {
        let names = vec!["vfs_read"; WORTHWHILE_NAMES + 1];
        let e = kernel_symbols(&names).unwrap_err();
        assert!(e.to_string().contains("257 names"), "{e}");
    }

    #[test]
    fn a_run_fits_the_verifiers_limit() {
        // A million instructions processed; this program is checked in one
        // pass.
        assert!(lookup_program(0, INIT_TEXT.len() + WORTHWHILE_NAMES).len() < 1_000_000);
    }
}
