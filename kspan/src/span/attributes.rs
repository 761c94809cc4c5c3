// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The attributes of a capture: its value under `kernel.arg.<name>`, and
//! the marks of a cut or unreadable value.

use std::fmt::Write as _;

use opentelemetry::{Key, KeyValue};

use crate::annotation::{Capture, Value};
use crate::plan::CapturePlan;

/// The attributes of one capture.
#[inline(always)]
pub(super) fn capture_attributes(
    plan: &CapturePlan,
    capture: &Capture<'_>,
    out: &mut Vec<KeyValue>,
) {
    match capture {
        Capture::Scalar(raw) => out.push(KeyValue::new(
            Key::from_static_str(plan.attribute),
            scalar_attribute(plan, *raw),
        )),
        Capture::Str { text, truncated } => {
            out.push(KeyValue::new(
                Key::from_static_str(plan.attribute),
                String::from(&**text),
            ));
            if *truncated {
                out.push(KeyValue::new(
                    Key::from_static_str(plan.truncated_attribute),
                    true,
                ));
            }
        }
        Capture::Bytes { data, truncated } => {
            let mut hex = String::with_capacity(data.len() * 2);
            for b in *data {
                let _ = write!(hex, "{b:02x}");
            }
            out.push(KeyValue::new(Key::from_static_str(plan.attribute), hex));
            if *truncated {
                out.push(KeyValue::new(
                    Key::from_static_str(plan.truncated_attribute),
                    true,
                ));
            }
        }
        Capture::Fault => out.push(KeyValue::new(
            Key::from_static_str(plan.fault_attribute),
            true,
        )),
    }
}

/// A scalar capture as an attribute value: an enum by its enumerator's name
/// (when the value has one), anything else as [`Value::to_otel`] says.
#[inline(always)]
fn scalar_attribute(plan: &CapturePlan, raw: u64) -> opentelemetry::Value {
    let value = Value::decode(raw, plan.spec.ty);
    if let Some(names) = &plan.enum_names {
        let number = match value {
            Value::Int(v) => Some(v),
            // Enumerators are kept as i64 bit patterns, enum64 ones too.
            Value::Uint(v) => Some(v as i64),
            Value::Bool(_) | Value::Pointer(_) => None,
        };
        if let Some((_, name)) = number.and_then(|n| names.iter().find(|(v, _)| *v == n)) {
            return opentelemetry::Value::String(name.clone());
        }
    }
    value.to_otel()
}
