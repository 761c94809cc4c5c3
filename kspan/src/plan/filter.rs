// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A probe's in-kernel filters against the kernel's types: each comparison
//! of `filter = "..."` bound to a capture (or the return value) with the
//! width and signedness of its kernel type, the constant checked to fit.
//! Pure: the macro has checked the text and the handler's names already;
//! this checks what only BTF knows.

use kspan_bpf::types::kspan_clause;
use kspan_dsl::CmpOp;

use super::capture::CapturePlan;
use super::error::PlanError;
use crate::annotation::ProbeSpec;
use crate::kernel::btf::{KernelType, TypeClass};

/// What the BPF program checks at a call's exit before it makes a span.
#[derive(Debug, Clone, Default)]
pub struct FilterPlan {
    /// Calls shorter than this many nanoseconds are refused (0: none).
    pub min_duration_ns: u64,
    /// Only errno returns are spans.
    pub errors_only: bool,
    /// The predicate, as the kernel evaluates it.
    pub clauses: Vec<kspan_clause>,
    /// One span per this many nanoseconds at most, in bursts of up to a
    /// second (0: no limit).
    pub rate_interval_ns: u64,
    /// Calls not made into spans are summed onto their application span.
    pub sum: bool,
    /// No call becomes a span.
    pub no_spans: bool,
    /// Width in bytes and signedness of the return value.
    pub ret_width: u32,
    /// See `ret_width`.
    pub ret_signed: bool,
}

impl FilterPlan {
    /// Whether some call may be refused at its exit.
    pub fn may_drop(&self) -> bool {
        self.min_duration_ns != 0
            || self.errors_only
            || !self.clauses.is_empty()
            || self.rate_interval_ns != 0
            || self.no_spans
    }
}

/// Width and signedness of a scalar kernel type, or `None` when it is not
/// one (a struct, an array).
fn scalar(ty: &KernelType) -> Option<(u32, bool)> {
    match ty.class {
        TypeClass::Int { bytes, signed } | TypeClass::Enum { bytes, signed } => {
            Some((bytes.clamp(1, 8), signed))
        }
        TypeClass::Bool => Some((1, false)),
        TypeClass::Pointer => Some((8, false)),
        _ => None,
    }
}

/// The filters of `spec` on `function`, whose return type is `ret` and
/// whose captures are `captures`.
pub(crate) fn plan_filter(
    spec: &ProbeSpec,
    function: &str,
    ret: &KernelType,
    captures: &[CapturePlan],
) -> Result<FilterPlan, PlanError> {
    let fail = |reason: String| PlanError::Filter {
        function: function.to_owned(),
        location: spec.location,
        reason,
    };
    let f = &spec.filter;
    let (ret_width, ret_signed) = scalar(ret).unwrap_or((8, false));
    let ret_is_errno = matches!(
        ret.class,
        TypeClass::Int {
            bytes: 4 | 8,
            signed: true
        }
    );
    if f.errors_only && !ret_is_errno {
        return Err(fail(format!(
            "`errors_only` keeps calls that return an errno, and `{function}` returns `{}`, \
             not a signed int or long: remove `errors_only`, or filter with `filter = \"ret ...\"`",
            ret.c_name
        )));
    }
    let mut clauses = Vec::new();
    if let Some(text) = f.predicate {
        let predicate =
            kspan_dsl::parse_predicate(text).map_err(|e| fail(format!("`filter`: {e}")))?;
        for (group, comparisons) in predicate.any_of.iter().enumerate() {
            for c in comparisons {
                let (cap, ty) = if c.name == "ret" {
                    (kspan_bpf::consts::KSPAN_CLAUSE_RET as u8, ret)
                } else {
                    let Some(at) = captures.iter().position(|p| p.spec.name == c.name) else {
                        return Err(fail(format!(
                            "`filter` compares `{}`, which the handler does not capture",
                            c.name
                        )));
                    };
                    (at as u8, &captures[at].kernel_type)
                };
                let Some((width, signed)) = scalar(ty) else {
                    return Err(fail(format!(
                        "`filter` compares `{}`, whose kernel type `{}` is not a number",
                        c.name, ty.c_name
                    )));
                };
                let value = encode(c.value, width, signed).ok_or_else(|| {
                    fail(format!(
                        "`filter`: {} does not fit `{}` (`{}`, {} {}-bit): compare with a value \
                         it can hold",
                        c.value,
                        c.name,
                        ty.c_name,
                        if signed { "signed" } else { "unsigned" },
                        width * 8
                    ))
                })?;
                clauses.push(kspan_clause {
                    cap,
                    op: op_value(c.op),
                    width: width as u8,
                    is_signed: u8::from(signed),
                    group: group as u8,
                    value,
                    ..Default::default()
                });
            }
        }
    }
    Ok(FilterPlan {
        min_duration_ns: f.min_duration_ns,
        errors_only: f.errors_only,
        clauses,
        rate_interval_ns: match f.rate_limit {
            0 => 0,
            rate => (1_000_000_000 / u64::from(rate)).max(1),
        },
        sum: spec.sum,
        no_spans: !spec.spans,
        ret_width,
        ret_signed,
    })
}

/// `value` as the 64 bits the kernel compares, when a `width`-byte value
/// of that signedness can hold it.
fn encode(value: i128, width: u32, signed: bool) -> Option<u64> {
    let bits = width * 8;
    let (min, max) = if signed {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    };
    (min..=max).contains(&value).then_some(value as i64 as u64)
}

/// `enum kspan_op` of `op`.
fn op_value(op: CmpOp) -> u8 {
    use kspan_bpf::consts as c;
    (match op {
        CmpOp::Eq => c::KSPAN_OP_EQ,
        CmpOp::Ne => c::KSPAN_OP_NE,
        CmpOp::Lt => c::KSPAN_OP_LT,
        CmpOp::Le => c::KSPAN_OP_LE,
        CmpOp::Gt => c::KSPAN_OP_GT,
        CmpOp::Ge => c::KSPAN_OP_GE,
    }) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_must_fit_the_kernel_type() {
        assert_eq!(encode(-1, 8, true), Some(u64::MAX));
        assert_eq!(
            encode(-1, 4, true),
            Some(u64::MAX),
            "sign-extended like the value"
        );
        assert_eq!(encode(-1, 8, false), None);
        assert_eq!(encode(255, 1, false), Some(255));
        assert_eq!(encode(256, 1, false), None);
        assert_eq!(encode(i128::from(u64::MAX), 8, false), Some(u64::MAX));
        assert_eq!(encode(i128::from(u64::MAX), 8, true), None);
        assert_eq!(
            encode(-2_147_483_648, 4, true),
            Some((-2_147_483_648i64) as u64)
        );
        assert_eq!(encode(2_147_483_648, 4, true), None);
    }
}
