// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Property tests of ring-buffer records (issue 52): a record written as
//! the BPF programs write `struct kspan_record` (C's layout, field by
//! field, at any alignment) reads back field for field; its captures read
//! back as the kernel wrote them; bytes too short are refused. (That any
//! bytes at all go through the span factory without a panic is
//! `span::properties`'.)
//!
//! `PROPTEST_CASES=10000 cargo test -p kspan --lib consume::properties`
//! runs more than the default 256 cases.

use std::mem::{offset_of, size_of};

use kspan_bpf::types::kspan_record;
use proptest::prelude::*;
use proptest::test_runner::Config;

use super::{decode_capture, parse_record, DecodeError, RecordView};
use crate::annotation::Capture;
use crate::kernel::btf::{builder::sample, Btf, TypeClass};
use crate::plan::{plan_probe, CapturePlan, ProbePlan, KIND_KBYTES, KIND_UBYTES};

const MAX_CAPS: usize = kspan_bpf::MAX_CAPS;
const FAULT: u8 = kspan_bpf::consts::KSPAN_CAPF_FAULT as u8;

/// proptest's defaults (`PROPTEST_CASES` included), without files of
/// failures beside the sources: a failure found is kept as a unit test.
pub(crate) fn config() -> Config {
    Config {
        failure_persistence: None,
        ..Config::default()
    }
}

/// `struct kspan_record` of `kspan.h` as C lays it out (each field at the
/// next multiple of its alignment), independently of the Rust type
/// generated from the object's BTF.
mod c_layout {
    use super::MAX_CAPS;
    pub const TRACE_ID: usize = 0;
    pub const SPAN_ID: usize = TRACE_ID + 16;
    pub const PARENT_SPAN_ID: usize = SPAN_ID + 8;
    pub const START_NS: usize = PARENT_SPAN_ID + 8;
    pub const END_NS: usize = START_NS + 8;
    pub const RET: usize = END_NS + 8;
    pub const PROBE_ID: usize = RET + 8;
    pub const PID: usize = PROBE_ID + 4;
    pub const TID: usize = PID + 4;
    pub const FLAGS: usize = TID + 4;
    pub const VALS: usize = (FLAGS + 4).next_multiple_of(8);
    pub const CAP_FLAGS: usize = VALS + 8 * MAX_CAPS;
    pub const DESCENDANTS_DROPPED: usize = (CAP_FLAGS + MAX_CAPS).next_multiple_of(4);
    pub const PAD: usize = DESCENDANTS_DROPPED + 4;
    pub const SIZE: usize = (PAD + 4).next_multiple_of(8);
}

/// One record's fields, as a BPF program fills them.
#[derive(Debug, Clone)]
pub(crate) struct Fields {
    pub(crate) trace_id: [u8; 16],
    pub(crate) span_id: u64,
    parent_span_id: u64,
    start_ns: u64,
    end_ns: u64,
    ret: u64,
    probe_id: u32,
    pid: u32,
    tid: u32,
    flags: u32,
    vals: [u64; MAX_CAPS],
    cap_flags: [u8; MAX_CAPS],
    descendants_dropped: u32,
}

pub(crate) fn fields() -> impl Strategy<Value = Fields> {
    (
        (
            any::<[u8; 16]>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
        ),
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<[u64; MAX_CAPS]>(),
            any::<[u8; MAX_CAPS]>(),
            any::<u32>(),
        ),
    )
        .prop_map(
            |(
                (trace_id, span_id, parent_span_id, start_ns, end_ns, ret),
                (probe_id, pid, tid, flags, vals, cap_flags, descendants_dropped),
            )| Fields {
                trace_id,
                span_id,
                parent_span_id,
                start_ns,
                end_ns,
                ret,
                probe_id,
                pid,
                tid,
                flags,
                vals,
                cap_flags,
                descendants_dropped,
            },
        )
}

fn put(bytes: &mut [u8], at: usize, value: &[u8]) {
    bytes[at..at + value.len()].copy_from_slice(value);
}

/// The record's bytes as the kernel leaves them in the ring buffer: the
/// header in C's layout, host byte order, then the data area.
pub(crate) fn encode(f: &Fields, data: &[u8]) -> Vec<u8> {
    use c_layout::*;
    let mut b = vec![0u8; SIZE];
    put(&mut b, TRACE_ID, &f.trace_id);
    put(&mut b, SPAN_ID, &f.span_id.to_ne_bytes());
    put(&mut b, PARENT_SPAN_ID, &f.parent_span_id.to_ne_bytes());
    put(&mut b, START_NS, &f.start_ns.to_ne_bytes());
    put(&mut b, END_NS, &f.end_ns.to_ne_bytes());
    put(&mut b, RET, &f.ret.to_ne_bytes());
    put(&mut b, PROBE_ID, &f.probe_id.to_ne_bytes());
    put(&mut b, PID, &f.pid.to_ne_bytes());
    put(&mut b, TID, &f.tid.to_ne_bytes());
    put(&mut b, FLAGS, &f.flags.to_ne_bytes());
    for (i, v) in f.vals.iter().enumerate() {
        put(&mut b, VALS + 8 * i, &v.to_ne_bytes());
    }
    put(&mut b, CAP_FLAGS, &f.cap_flags);
    put(
        &mut b,
        DESCENDANTS_DROPPED,
        &f.descendants_dropped.to_ne_bytes(),
    );
    b.extend_from_slice(data);
    b
}

/// `bytes` placed `shift` bytes past an 8-byte boundary, as a callback
/// might be handed them: the ring buffer's are aligned, a copy's need not be.
fn shifted(bytes: &[u8], shift: usize) -> (Vec<u64>, usize) {
    let mut storage = vec![0u64; (bytes.len() + shift).div_ceil(8) + 1];
    // SAFETY: a u64 buffer viewed as its bytes; every bit pattern is valid.
    let raw = unsafe {
        std::slice::from_raw_parts_mut(storage.as_mut_ptr().cast::<u8>(), storage.len() * 8)
    };
    raw[shift..shift + bytes.len()].copy_from_slice(bytes);
    (storage, shift)
}

fn as_bytes(storage: &[u64]) -> &[u8] {
    // SAFETY: as in `shifted`.
    unsafe { std::slice::from_raw_parts(storage.as_ptr().cast::<u8>(), storage.len() * 8) }
}

/// The test probe: a size, a string of at most 8 bytes, the return value.
#[kspan::kernel_span("vfs_read")]
fn vfs_read(count: usize, #[capture(max = 8)] buf: &str, ret: isize) {}

pub(crate) fn probe_plan() -> ProbePlan {
    let btf = Btf::parse(&sample()).expect("the sample BTF parses");
    plan_probe(&btf, &vfs_read).expect("the test probe plans")
}

/// A view of one capture's record: its value, flag and data area.
fn capture_record(i: usize, value: u64, flag: u8, data: &[u8]) -> Vec<u8> {
    let mut f = Fields {
        trace_id: [1; 16],
        span_id: 1,
        parent_span_id: 0,
        start_ns: 0,
        end_ns: 0,
        ret: 0,
        probe_id: 0,
        pid: 0,
        tid: 0,
        flags: 0,
        vals: [0; MAX_CAPS],
        cap_flags: [0; MAX_CAPS],
        descendants_dropped: 0,
    };
    f.vals[i] = value;
    f.cap_flags[i] = flag;
    encode(&f, data)
}

fn decode<'a>(plan: &CapturePlan, i: usize, view: &RecordView<'a>) -> Capture<'a> {
    decode_capture(plan, i, view)
}

/// Found by `strings_read_back_as_the_kernel_wrote_them`: valid text cut
/// by the bound inside a character read back with U+FFFD for the part
/// kept, a character the kernel's string never had.
#[test]
fn a_string_cut_inside_a_character_is_cut_before_it() {
    let plan = probe_plan();
    let c = &plan.captures[1];
    assert_eq!(c.bound, 8);
    let text = "AΣ® Ὑ".as_bytes(); // 9 bytes; the bound ends inside `Ὑ`
    let mut data = vec![0; usize::from(c.bpf.data_off) + usize::from(c.bpf.data_len)];
    data[usize::from(c.bpf.data_off)..][..text.len()].copy_from_slice(text);
    let bytes = capture_record(1, text.len() as u64 + 1, 0, &data);
    let view = parse_record(&bytes).unwrap();
    match decode(c, 1, &view) {
        Capture::Str { text, truncated } => {
            assert_eq!(text, "AΣ® ");
            assert!(truncated);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_generated_record_type_has_c_s_layout() {
    use c_layout::*;
    let at = [
        (offset_of!(kspan_record, trace_id), TRACE_ID),
        (offset_of!(kspan_record, span_id), SPAN_ID),
        (offset_of!(kspan_record, parent_span_id), PARENT_SPAN_ID),
        (offset_of!(kspan_record, start_ns), START_NS),
        (offset_of!(kspan_record, end_ns), END_NS),
        (offset_of!(kspan_record, ret), RET),
        (offset_of!(kspan_record, probe_id), PROBE_ID),
        (offset_of!(kspan_record, pid), PID),
        (offset_of!(kspan_record, tid), TID),
        (offset_of!(kspan_record, flags), FLAGS),
        (offset_of!(kspan_record, vals), VALS),
        (offset_of!(kspan_record, cap_flags), CAP_FLAGS),
        (
            offset_of!(kspan_record, descendants_dropped),
            DESCENDANTS_DROPPED,
        ),
        (offset_of!(kspan_record, pad), PAD),
        (size_of::<kspan_record>(), SIZE),
    ];
    for (rust, c) in at {
        assert_eq!(rust, c);
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn records_read_back_field_for_field(
        f in fields(),
        data in prop::collection::vec(any::<u8>(), 0..80),
        shift in 0usize..8,
    ) {
        let bytes = encode(&f, &data);
        let (storage, at) = shifted(&bytes, shift);
        let bytes = &as_bytes(&storage)[at..at + bytes.len()];
        let view = parse_record(bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let h = &*view.header;
        prop_assert_eq!(h.trace_id, f.trace_id);
        prop_assert_eq!(h.span_id, f.span_id);
        prop_assert_eq!(h.parent_span_id, f.parent_span_id);
        prop_assert_eq!(h.start_ns, f.start_ns);
        prop_assert_eq!(h.end_ns, f.end_ns);
        prop_assert_eq!(h.ret, f.ret);
        prop_assert_eq!(h.probe_id, f.probe_id);
        prop_assert_eq!(h.pid, f.pid);
        prop_assert_eq!(h.tid, f.tid);
        prop_assert_eq!(h.flags, f.flags);
        prop_assert_eq!(h.vals, f.vals);
        prop_assert_eq!(h.cap_flags, f.cap_flags);
        prop_assert_eq!(h.descendants_dropped, f.descendants_dropped);
        prop_assert_eq!(view.data, &data[..]);
    }

    #[test]
    fn records_too_short_are_refused(len in 0usize..c_layout::SIZE, fill in any::<u8>()) {
        let bytes = vec![fill; len];
        prop_assert_eq!(
            parse_record(&bytes).unwrap_err(),
            DecodeError { len, expected: c_layout::SIZE }
        );
    }

    /// A string as `bpf_probe_read_{kernel,user}_str` leaves it: at most
    /// `data_len - 1` bytes and a NUL in the capture's slot, the count
    /// with the NUL in its value.
    #[test]
    fn strings_read_back_as_the_kernel_wrote_them(
        text in prop_oneof![
            prop::collection::vec(1u8..=255, 0..24),
            "\\PC{0,12}".prop_map(|s| s.replace('\0', "").into_bytes()),
        ],
        garbage in any::<u8>(),
    ) {
        let plan = probe_plan();
        let c = &plan.captures[1];
        let (off, len) = (usize::from(c.bpf.data_off), usize::from(c.bpf.data_len));
        let read = text.len().min(len - 1);
        let mut data = vec![garbage; off + len];
        data[off..off + read].copy_from_slice(&text[..read]);
        data[off + read] = 0;
        let bytes = capture_record(1, read as u64 + 1, 0, &data);
        let view = parse_record(&bytes).unwrap();
        let kept = text.len().min(c.bound);
        match decode(c, 1, &view) {
            Capture::Str { text: got, truncated } => {
                prop_assert_eq!(truncated, text.len() > c.bound);
                match std::str::from_utf8(&text) {
                    // Valid text reads back as itself, or cut at a
                    // character's end within the bound.
                    Ok(whole) => {
                        prop_assert!(whole.starts_with(&*got), "{got:?} of {whole:?}");
                        prop_assert!(got.len() <= kept && got.len() + 3 >= kept);
                        prop_assert_eq!(got.len() == whole.len(), !truncated);
                    }
                    // Invalid text reads back replaced, maybe without a
                    // last character the bound cut.
                    Err(_) => {
                        let cuts = if truncated { kept.saturating_sub(3) } else { kept };
                        prop_assert!(
                            (cuts..=kept).any(|k| *got == *String::from_utf8_lossy(&text[..k])),
                            "{got:?} of {:?}", String::from_utf8_lossy(&text)
                        );
                    }
                }
            }
            other => prop_assert!(false, "{other:?}"),
        }
    }

    /// Bytes as the programs leave them: the length asked for in the
    /// value, at most `data_len` bytes in the slot.
    #[test]
    fn byte_buffers_read_back_as_the_kernel_wrote_them(
        memory in prop::collection::vec(any::<u8>(), 40),
        asked in prop_oneof![0u64..=40, any::<u64>()],
        slot_len in 0usize..24,
        user in any::<bool>(),
    ) {
        let mut plan = probe_plan();
        let c = &mut plan.captures[1];
        c.bpf.kind = if user { KIND_UBYTES } else { KIND_KBYTES };
        c.bpf.data_len = slot_len as u16;
        c.bound = slot_len;
        // The program reads min(asked, data_len) bytes into the slot.
        let n = usize::try_from(asked).unwrap_or(usize::MAX).min(slot_len);
        let off = usize::from(c.bpf.data_off);
        let mut data = vec![0xa5; off + slot_len];
        data[off..off + n].copy_from_slice(&memory[..n]);
        let bytes = capture_record(1, asked, 0, &data);
        let view = parse_record(&bytes).unwrap();
        match decode(c, 1, &view) {
            Capture::Bytes { data: got, truncated } => {
                prop_assert_eq!(got, &memory[..n]);
                prop_assert_eq!(truncated, asked > slot_len as u64);
            }
            other => prop_assert!(false, "{other:?}"),
        }
    }

    /// A scalar of any width and sign in a register whose upper bits are
    /// anything: read back as its value.
    #[test]
    fn scalars_read_back_at_their_width(
        value in any::<u64>(),
        upper in any::<u64>(),
        width in prop::sample::select(vec![1u32, 2, 4, 8]),
        signed in any::<bool>(),
    ) {
        let mut plan = probe_plan();
        let c = &mut plan.captures[0];
        c.kernel_type.class = TypeClass::Int { bytes: width, signed };
        let bits = width * 8;
        let mask = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
        let low = value & mask;
        let raw = if bits == 64 { low } else { (upper << bits) | low };
        let expected = match (signed, bits) {
            (_, 64) => low,
            (true, _) => ((low << (64 - bits)) as i64 >> (64 - bits)) as u64,
            (false, _) => low,
        };
        let bytes = capture_record(0, raw, 0, &[]);
        let view = parse_record(&bytes).unwrap();
        match decode(c, 0, &view) {
            Capture::Scalar(got) => prop_assert_eq!(got, expected),
            other => prop_assert!(false, "{other:?}"),
        }
        // A read the kernel could not make is a fault, whatever the value.
        let bytes = capture_record(0, raw, FAULT, &[]);
        let view = parse_record(&bytes).unwrap();
        prop_assert!(matches!(decode(c, 0, &view), Capture::Fault));
    }
}
