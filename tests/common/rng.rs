//! A small deterministic pseudo-random sequence for the tests that pick
//! their cases from a seed.

/// A small deterministic pseudo-random sequence (xorshift), seeded by its
/// field: the tests that pick cases from a seed replay them exactly.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(hi > lo, "empty range {lo}..{hi}");
        lo + self.next_u64() % (hi - lo)
    }
}
