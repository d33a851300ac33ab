//! Per-process latency histograms in shared memory, read by walbench.
//!
//! Log-linear buckets over nanoseconds: values below 4 ns share bucket 0..3,
//! above that each power of two is split into 4 sub-buckets (relative error
//! under 25%), up to 2^42 ns (about 73 minutes); larger values go to the
//! last bucket. Only the owning process writes its histogram (plain
//! load+store of atomics); readers take two snapshots and subtract.

use crate::sync::{AtomicU64, Ordering};

pub const SUB_BITS: u32 = 2;
pub const MAX_POW: u32 = 42;
pub const BUCKETS: usize = ((MAX_POW + 1) << SUB_BITS) as usize;

#[repr(C, align(128))]
pub struct LatencyHistogram {
    pub buckets: [AtomicU64; BUCKETS],
}

/// Bucket index of `ns`.
pub fn bucket_of(ns: u64) -> usize {
    if ns < (1 << SUB_BITS) {
        return ns as usize;
    }
    let pow = 63 - ns.leading_zeros();
    if pow > MAX_POW {
        return BUCKETS - 1;
    }
    let sub = (ns >> (pow - SUB_BITS)) & ((1 << SUB_BITS) - 1);
    (((pow - SUB_BITS + 1) << SUB_BITS) as u64 + sub) as usize
}

/// Smallest value that falls in bucket `i` (the bucket's lower bound).
pub fn bucket_floor(i: usize) -> u64 {
    let i = i as u64;
    if i < (1 << SUB_BITS) {
        return i;
    }
    let pow = (i >> SUB_BITS) + SUB_BITS as u64 - 1;
    let sub = i & ((1 << SUB_BITS) - 1);
    (1u64 << pow) | (sub << (pow - SUB_BITS as u64))
}

impl LatencyHistogram {
    /// Records one value (owner only).
    #[inline]
    pub fn record(&self, ns: u64) {
        let b = &self.buckets[bucket_of(ns)];
        b.store(b.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// Copies the counts.
    pub fn snapshot(&self) -> Vec<u64> {
        self.buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }
}

/// The `q`-quantile (0..=1) of a bucket-count vector, as a bucket floor in
/// ns; None when empty.
pub fn quantile(counts: &[u64], q: f64) -> Option<u64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for (i, c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return Some(bucket_floor(i));
        }
    }
    None
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_bounded() {
        let mut last = 0;
        for ns in [
            0u64,
            1,
            3,
            4,
            5,
            7,
            8,
            100,
            1000,
            123_456,
            1 << 40,
            u64::MAX,
        ] {
            let b = bucket_of(ns);
            assert!(b >= last, "{ns}");
            assert!(b < BUCKETS);
            assert!(bucket_floor(b) <= ns, "{ns} floor {}", bucket_floor(b));
            if ns < (1 << MAX_POW) {
                assert!(
                    ns < bucket_floor(b) * 5 / 4 + 2,
                    "{ns} too far above {}",
                    bucket_floor(b)
                );
            }
            last = b;
        }
        let mut counts = vec![0u64; BUCKETS];
        for ns in 1..=1000u64 {
            counts[bucket_of(ns * 1000)] += 1;
        }
        let p50 = quantile(&counts, 0.5).unwrap();
        assert!((400_000..=500_000).contains(&p50), "{p50}");
        let p99 = quantile(&counts, 0.99).unwrap();
        assert!((786_000..=990_000).contains(&p99), "{p99}");
        assert_eq!(quantile(&[0; 4], 0.5), None);
    }
}
