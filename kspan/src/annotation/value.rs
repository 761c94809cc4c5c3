// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Rust types a probe can capture, and how a raw 64-bit register becomes one.
//!
//! The BPF side copies argument and return registers as raw `u64`s; what they
//! mean is decided here, from the Rust type the user wrote, after the planner
//! has checked that type against the kernel's in width and signedness.

use std::fmt;

/// What a Rust parameter type is, as far as capturing is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValueKind {
    /// An integer of `bytes` width.
    Int {
        /// Width in bytes: 1, 2, 4 or 8.
        bytes: u8,
        /// Signed or not.
        signed: bool,
    },
    /// `bool`.
    Bool,
    /// A raw pointer, captured as the address it holds.
    Pointer,
    /// `&str`: a NUL-terminated string, bounded, invalid UTF-8 replaced.
    Str,
    /// `&[u8]`: a buffer whose length comes from a parameter or the return
    /// value, capped.
    Bytes,
    /// `[u8; N]`: exactly `N` bytes.
    ByteArray {
        /// `N`.
        len: u16,
    },
}

impl ValueKind {
    /// Whether the value is a single register-sized scalar.
    pub fn is_scalar(self) -> bool {
        matches!(
            self,
            ValueKind::Int { .. } | ValueKind::Bool | ValueKind::Pointer
        )
    }
}

/// A Rust type that can receive a captured value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueType {
    /// How the raw register is read.
    pub kind: ValueKind,
    /// The type as the user wrote it, for error messages.
    pub rust_name: &'static str,
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ValueKind::Int { bytes, signed } => write!(
                f,
                "`{}` ({} {}-bit)",
                self.rust_name,
                if signed { "signed" } else { "unsigned" },
                bytes * 8
            ),
            ValueKind::Bool => write!(f, "`{}` (boolean)", self.rust_name),
            ValueKind::Pointer => write!(f, "`{}` (pointer)", self.rust_name),
            ValueKind::Str => write!(f, "`{}` (string)", self.rust_name),
            ValueKind::Bytes => write!(f, "`{}` (byte buffer)", self.rust_name),
            ValueKind::ByteArray { len } => write!(f, "`{}` ({len} bytes)", self.rust_name),
        }
    }
}

/// A Rust type the `kernel_span` macro accepts for a parameter or `ret`.
///
/// Implemented for every integer type, `bool`, `*const T` and `*mut T`.
pub trait KernelValue: Sized {
    /// The type's description, checked against the kernel's type at attach.
    const TYPE: ValueType;
    /// Reads the value from a raw 64-bit register.
    fn from_raw(raw: u64) -> Self;
}

macro_rules! int_value {
    ($($ty:ty => $bytes:expr, $signed:expr;)*) => {$(
        impl KernelValue for $ty {
            const TYPE: ValueType = ValueType {
                kind: ValueKind::Int { bytes: $bytes, signed: $signed },
                rust_name: stringify!($ty),
            };
            #[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
            fn from_raw(raw: u64) -> Self {
                // Registers carry garbage above the argument's width: truncate.
                raw as $ty
            }
        }
    )*};
}

int_value! {
    u8 => 1, false;
    u16 => 2, false;
    u32 => 4, false;
    u64 => 8, false;
    usize => 8, false;
    i8 => 1, true;
    i16 => 2, true;
    i32 => 4, true;
    i64 => 8, true;
    isize => 8, true;
}

impl KernelValue for bool {
    const TYPE: ValueType = ValueType {
        kind: ValueKind::Bool,
        rust_name: "bool",
    };
    fn from_raw(raw: u64) -> Self {
        raw as u8 != 0
    }
}

impl<T> KernelValue for *const T {
    const TYPE: ValueType = ValueType {
        kind: ValueKind::Pointer,
        rust_name: "*const _",
    };
    fn from_raw(raw: u64) -> Self {
        // An address in the kernel's address space: never dereferenced here.
        raw as usize as *const T
    }
}

impl<T> KernelValue for *mut T {
    const TYPE: ValueType = ValueType {
        kind: ValueKind::Pointer,
        rust_name: "*mut _",
    };
    fn from_raw(raw: u64) -> Self {
        raw as usize as *mut T
    }
}

/// One captured value as the record carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Capture<'a> {
    /// A scalar (integer, bool, address), raw.
    Scalar(u64),
    /// A string, invalid UTF-8 replaced.
    Str {
        /// The text, cut at the bound (before a character the bound would
        /// split).
        text: std::borrow::Cow<'a, str>,
        /// Whether the kernel's string was longer than the bound.
        truncated: bool,
    },
    /// Bytes.
    Bytes {
        /// The bytes captured.
        data: &'a [u8],
        /// Whether more were asked for than the bound allows.
        truncated: bool,
    },
    /// The kernel could not read the value (a NULL or unmapped pointer on the
    /// path, user memory paged out).
    Fault,
}

/// A handler parameter type: how a [`Capture`] becomes it.
///
/// Implemented for every [`KernelValue`] (integers, `bool`, raw pointers),
/// `&str`, `&[u8]` and `[u8; N]`.
pub trait FromCapture<'a>: Sized {
    /// The type's description, checked against the kernel's type at attach.
    const TYPE: ValueType;
    /// Converts; a fault gives the type's empty value (0, "", no bytes).
    fn from_capture(capture: &'a Capture<'a>) -> Self;
}

impl<'a, T: KernelValue> FromCapture<'a> for T {
    const TYPE: ValueType = T::TYPE;
    fn from_capture(capture: &'a Capture<'a>) -> Self {
        match capture {
            Capture::Scalar(raw) => T::from_raw(*raw),
            _ => T::from_raw(0),
        }
    }
}

impl<'a> FromCapture<'a> for &'a str {
    const TYPE: ValueType = ValueType {
        kind: ValueKind::Str,
        rust_name: "&str",
    };
    fn from_capture(capture: &'a Capture<'a>) -> Self {
        match capture {
            Capture::Str { text, .. } => text,
            _ => "",
        }
    }
}

impl<'a> FromCapture<'a> for &'a [u8] {
    const TYPE: ValueType = ValueType {
        kind: ValueKind::Bytes,
        rust_name: "&[u8]",
    };
    fn from_capture(capture: &'a Capture<'a>) -> Self {
        match capture {
            Capture::Bytes { data, .. } => data,
            _ => &[],
        }
    }
}

impl<'a, const N: usize> FromCapture<'a> for [u8; N] {
    const TYPE: ValueType = ValueType {
        kind: ValueKind::ByteArray { len: N as u16 },
        rust_name: "[u8; N]",
    };
    fn from_capture(capture: &'a Capture<'a>) -> Self {
        let mut out = [0u8; N];
        if let Capture::Bytes { data, .. } = capture {
            let n = data.len().min(N);
            out[..n].copy_from_slice(&data[..n]);
        }
        out
    }
}

/// A captured value, decoded for use as a span attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Value {
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    Uint(u64),
    /// A boolean.
    Bool(bool),
    /// An address.
    Pointer(u64),
}

impl Value {
    /// Decodes `raw` as the Rust type `ty` describes (truncated and sign-extended).
    #[inline]
    pub fn decode(raw: u64, ty: ValueType) -> Value {
        match ty.kind {
            ValueKind::Int { bytes, signed } => {
                let bits = u32::from(bytes) * 8;
                if bits >= 64 {
                    if signed {
                        Value::Int(raw as i64)
                    } else {
                        Value::Uint(raw)
                    }
                } else {
                    let shift = 64 - bits;
                    if signed {
                        Value::Int(((raw << shift) as i64) >> shift)
                    } else {
                        Value::Uint((raw << shift) >> shift)
                    }
                }
            }
            ValueKind::Bool => Value::Bool(raw as u8 != 0),
            // Only scalars come from a register; the others never reach here
            // (the planner gives them data slots), but an address is their
            // honest raw reading.
            ValueKind::Pointer
            | ValueKind::Str
            | ValueKind::Bytes
            | ValueKind::ByteArray { .. } => Value::Pointer(raw),
        }
    }

    /// The OpenTelemetry attribute value: integers as integers (an unsigned
    /// value above `i64::MAX` as its decimal string, since OTLP integers are
    /// signed), booleans as booleans, addresses as `0x`-prefixed hex strings.
    #[inline]
    pub fn to_otel(self) -> opentelemetry::Value {
        // Inlined, so that the common cases build the value in place; the
        // string-formatting ones are out of line.
        match self {
            Value::Int(v) => opentelemetry::Value::I64(v),
            Value::Uint(v) => match i64::try_from(v) {
                Ok(v) => opentelemetry::Value::I64(v),
                Err(_) => formatted(format_args!("{v}")),
            },
            Value::Bool(v) => opentelemetry::Value::Bool(v),
            Value::Pointer(v) => hex_address(v),
        }
    }
}

/// `v` as `format!("{v:#x}")` writes it, in one allocation of the exact size
/// (through the formatter, the string grows for the prefix and again for
/// the digits).
#[inline(never)]
fn hex_address(v: u64) -> opentelemetry::Value {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let digits = (u64::BITS - v.leading_zeros()).div_ceil(4).max(1);
    let mut s = String::with_capacity(2 + digits as usize);
    s.push_str("0x");
    for i in (0..digits).rev() {
        s.push(char::from(DIGITS[((v >> (4 * i)) & 0xf) as usize]));
    }
    opentelemetry::Value::from(s)
}

#[inline(never)]
fn formatted(args: fmt::Arguments<'_>) -> opentelemetry::Value {
    opentelemetry::Value::from(args.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_written_as_the_formatter_writes_them() {
        for v in [
            0,
            1,
            0xf,
            0x10,
            0xdead_beef,
            0xffff_8880_0123_4567,
            u64::MAX,
        ] {
            assert_eq!(
                Value::Pointer(v).to_otel(),
                opentelemetry::Value::from(format!("{v:#x}")),
                "{v:#x}"
            );
        }
    }

    #[test]
    fn integers_truncate_and_sign_extend() {
        let raw = 0xdead_beef_ffff_fffe_u64;
        assert_eq!(
            Value::decode(raw, <i32 as KernelValue>::TYPE),
            Value::Int(-2)
        );
        assert_eq!(
            Value::decode(raw, <u32 as KernelValue>::TYPE),
            Value::Uint(0xffff_fffe)
        );
        assert_eq!(
            Value::decode(raw, <i8 as KernelValue>::TYPE),
            Value::Int(-2)
        );
        assert_eq!(
            Value::decode(raw, <u16 as KernelValue>::TYPE),
            Value::Uint(0xfffe)
        );
        assert_eq!(
            Value::decode(raw, <u64 as KernelValue>::TYPE),
            Value::Uint(raw)
        );
        assert_eq!(
            Value::decode(u64::MAX, <isize as KernelValue>::TYPE),
            Value::Int(-1)
        );
        assert_eq!(i32::from_raw(raw), -2);
        assert_eq!(isize::from_raw(u64::MAX), -1);
        assert_eq!(u8::from_raw(0x1ff), 0xff);
    }

    #[test]
    fn bools_and_pointers() {
        assert_eq!(
            Value::decode(0x100, <bool as KernelValue>::TYPE),
            Value::Bool(false)
        );
        assert_eq!(
            Value::decode(1, <bool as KernelValue>::TYPE),
            Value::Bool(true)
        );
        assert!(!bool::from_raw(0xff00));
        let p = <*const u8>::from_raw(0xffff_8880_0000_1000);
        assert_eq!(p as usize, 0xffff_8880_0000_1000);
        assert_eq!(
            Value::decode(0xffff_8880_0000_1000, <*mut u8 as KernelValue>::TYPE),
            Value::Pointer(0xffff_8880_0000_1000)
        );
    }

    #[test]
    fn otel_values() {
        assert_eq!(Value::Int(-5).to_otel(), opentelemetry::Value::I64(-5));
        assert_eq!(Value::Uint(7).to_otel(), opentelemetry::Value::I64(7));
        assert_eq!(
            Value::Uint(u64::MAX).to_otel(),
            opentelemetry::Value::String("18446744073709551615".into())
        );
        assert_eq!(
            Value::Pointer(0xff).to_otel(),
            opentelemetry::Value::String("0xff".into())
        );
        assert_eq!(
            Value::Bool(true).to_otel(),
            opentelemetry::Value::Bool(true)
        );
    }

    #[test]
    fn display_names_width_and_sign() {
        assert_eq!(
            <i32 as KernelValue>::TYPE.to_string(),
            "`i32` (signed 32-bit)"
        );
        assert_eq!(
            <usize as KernelValue>::TYPE.to_string(),
            "`usize` (unsigned 64-bit)"
        );
    }
}
