// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A ring-buffer record, read in place: its header and the captured values
//! its plan says it holds. Pure: tested on hand-made bytes.

use std::borrow::Cow;

use kspan_bpf::types::kspan_record;

use crate::annotation::Capture;
use crate::plan::{normalize, CapturePlan, KIND_KBYTES, KIND_KSTR, KIND_UBYTES, KIND_USTR};

/// A record too short to be a span: a layout mismatch, never expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ring-buffer record of {len} bytes, expected at least {expected}")]
pub struct DecodeError {
    /// The record's length.
    pub len: usize,
    /// The header's length.
    pub expected: usize,
}

/// A record as it sits in the ring buffer: the fixed header and the data
/// area of strings and buffers after it.
#[derive(Debug, Clone)]
pub struct RecordView<'a> {
    /// The header.
    pub header: RecordHeader<'a>,
    /// The data area.
    pub data: &'a [u8],
}

/// A record's header: borrowed in place when aligned (ring-buffer records
/// are 8-byte aligned), copied to the heap otherwise, so that the view stays
/// small to pass around either way.
#[derive(Debug, Clone)]
pub enum RecordHeader<'a> {
    /// Read in place.
    InPlace(&'a kspan_record),
    /// Copied from unaligned bytes.
    Copied(Box<kspan_record>),
}

impl std::ops::Deref for RecordHeader<'_> {
    type Target = kspan_record;

    fn deref(&self) -> &kspan_record {
        match self {
            RecordHeader::InPlace(header) => header,
            RecordHeader::Copied(header) => header,
        }
    }
}

/// Reads a record from ring-buffer bytes.
pub fn parse_record(bytes: &[u8]) -> Result<RecordView<'_>, DecodeError> {
    let expected = std::mem::size_of::<kspan_record>();
    if bytes.len() < expected {
        return Err(DecodeError {
            len: bytes.len(),
            expected,
        });
    }
    let ptr = bytes.as_ptr().cast::<kspan_record>();
    let header = if ptr.is_aligned() {
        // SAFETY: the pointer is aligned, the slice holds at least
        // size_of::<kspan_record>() bytes that live as long as the returned
        // borrow, and the type is plain old data (integers and byte arrays,
        // every bit pattern valid).
        RecordHeader::InPlace(unsafe { &*ptr })
    } else {
        // SAFETY: as above, and read_unaligned copes with any alignment.
        RecordHeader::Copied(Box::new(unsafe { std::ptr::read_unaligned(ptr) }))
    };
    Ok(RecordView {
        header,
        data: &bytes[expected..],
    })
}

/// Decodes capture `i` of `view` as `plan` says (pure).
#[inline(always)]
pub(crate) fn decode_capture<'a>(
    plan: &CapturePlan,
    i: usize,
    view: &RecordView<'a>,
) -> Capture<'a> {
    let rec = &view.header;
    if rec.cap_flags[i] & kspan_bpf::consts::KSPAN_CAPF_FAULT as u8 != 0 {
        return Capture::Fault;
    }
    let raw = rec.vals[i];
    let off = usize::from(plan.bpf.data_off);
    let slot = view
        .data
        .get(off..off + usize::from(plan.bpf.data_len))
        .unwrap_or(&[]);
    match plan.bpf.kind {
        KIND_KSTR | KIND_USTR => {
            // `raw` is the bytes read including the NUL.
            let chars = usize::try_from(raw)
                .unwrap_or(0)
                .saturating_sub(1)
                .min(slot.len());
            let truncated = chars > plan.bound;
            let bytes = &slot[..chars.min(plan.bound)];
            // Valid UTF-8 (the common case) is checked by the fast validator;
            // only invalid text takes the replacing path.
            let text = match std::str::from_utf8(bytes) {
                Ok(text) => Cow::Borrowed(text),
                // Valid text the bound cut inside a character: cut before
                // that character rather than replace its first bytes.
                Err(e) if truncated && e.error_len().is_none() => {
                    Cow::Borrowed(std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""))
                }
                Err(_) => String::from_utf8_lossy(bytes),
            };
            Capture::Str { text, truncated }
        }
        KIND_KBYTES | KIND_UBYTES => {
            let asked = usize::try_from(raw).unwrap_or(usize::MAX);
            Capture::Bytes {
                data: &slot[..asked.min(slot.len())],
                truncated: asked > slot.len(),
            }
        }
        _ => Capture::Scalar(normalize(raw, plan.kernel_type.class)),
    }
}
