// SPDX-License-Identifier: Apache-2.0 OR MIT
//! What the hot-function benchmarks of `cargo xtask bench --host --only
//! hot|consumer` (issue 13) share: a pipeline that discards
//! ([`discard`]), a processor that can hold the consumer ([`gate`]), the
//! traced call and its pacing ([`load`]).

pub mod discard;
pub mod gate;
pub mod load;
