//! Shared test helpers: a real device (never skipped), deterministic random data, and reference comparison.
#![allow(dead_code)]

use lazor::{Device, Tensor};

/// A fresh device, so each test reads its own counters. Panics (fails the test) when there is no adapter:
/// GPU tests must run on a real wgpu adapter, never skip.
pub fn device() -> Device {
    Device::new().unwrap_or_else(|e| {
        panic!("tests need a wgpu adapter (on Linux without a GPU: apt-get install mesa-vulkan-drivers): {e}")
    })
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }
    pub fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Whether `got` matches `want` to `rel` relative / `abs` absolute tolerance, NaN matching NaN and infinities
/// matching exactly.
pub fn close(got: f32, want: f32, rel: f32, abs: f32) -> bool {
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return want == got;
    }
    (got - want).abs() <= abs + rel * want.abs()
}

/// Asserts elementwise closeness, naming the first mismatch.
#[track_caller]
pub fn assert_close(got: &[f32], want: &[f32], rel: f32, abs: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(close(g, w, rel, abs), "{what}: element {i}: got {g}, want {w}");
    }
}

/// Computes `t` on the CPU reference, then on the GPU, and compares.
#[track_caller]
pub fn check(t: &Tensor, rel: f32, abs: f32, what: &str) -> Vec<f32> {
    let want = lazor::reference::eval(&[t]).pop().unwrap();
    let got = t.to_vec();
    assert_close(&got, &want, rel, abs, what);
    got
}
