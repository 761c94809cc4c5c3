// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A fixed-seed generator (xorshift64*) for the crate's property tests:
//! reproducible, on stable Rust, with no dependency.

/// The generator; its state is the seed, never 0.
pub(crate) struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}
