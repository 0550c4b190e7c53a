//! The hash maps of lazor's own bookkeeping: a multiply-rotate hasher instead of SipHash.

// Every realize hashes node ids, views and kernel keys while it plans and looks up pipelines; SipHash's resistance to
// chosen keys buys nothing for keys lazor makes itself, and sampling a loop of layer norms found a large share of the
// host's time in it (figures: docs/notes/source-measurements.md, `src/hash.rs`). A fixed hasher also makes iteration
// order the same on every run.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;
/// A `HashSet` with [`FastHasher`].
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

/// Adds each word and multiplies by an odd constant; `finish` rotates the well-mixed high bits down to where
/// hashbrown takes its bucket index.
#[derive(Clone, Copy, Default)]
pub struct FastHasher {
    hash: u64,
}

/// An odd constant with bits spread over the word (from the golden ratio).
const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

impl FastHasher {
    /// Mixes in a word. A multiply carries differences only upward, so the high half is folded onto the low half
    /// first (reversibly, so no two words collide): two `u32`s packed in a word, as a slice of them is written,
    /// would otherwise differ only in bits the bucket index never sees.
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = self.hash.wrapping_add(word ^ (word >> 32)).wrapping_mul(MULTIPLIER);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            // The length keeps [1] and [1, 0] apart.
            self.add(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash.rotate_left(26)
    }
}

#[cfg(test)]
mod tests {
    use super::{FastMap, FastSet};

    #[test]
    fn maps_and_sets_keep_distinct_keys_apart() {
        let mut m: FastMap<Vec<u32>, usize> = FastMap::default();
        let keys: Vec<Vec<u32>> = vec![vec![], vec![0], vec![0, 0], vec![1], vec![1, 0], vec![0, 1], vec![u32::MAX]];
        for (i, k) in keys.iter().enumerate() {
            m.insert(k.clone(), i);
        }
        assert_eq!(m.len(), keys.len());
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(m[k], i);
        }
        let s: FastSet<(u64, usize)> = (0..10_000u64).map(|i| (i << 40, (i % 7) as usize)).collect();
        assert_eq!(s.len(), 10_000, "keys differing only in high bits");
    }

    /// Parameter blocks start with a size, then an f32 constant: as a `[u32]` they are hashed two to a word, the
    /// constant in the high half. Their hashes must still spread over the low bits hashbrown indexes buckets by.
    #[test]
    fn words_differing_in_their_high_half_spread_over_buckets() {
        use std::hash::BuildHasher;
        let build = std::hash::BuildHasherDefault::<super::FastHasher>::default();
        let buckets: FastSet<u64> =
            (0..100).map(|i| build.hash_one(vec![300u32, (i as f32).to_bits()]) & 127).collect();
        assert!(buckets.len() >= 50, "100 keys over 128 buckets landed in {} of them", buckets.len());
    }
}
