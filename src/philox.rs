//! The counter-based generator core: Philox4x32-10 and the distributions drawn from it, on the host.
//!
//! Each element's value is a pure function of `(seed, element index)`: the index picks a Philox counter and word,
//! the seed is the key, so a kernel computes the element where it needs it and no random buffer is ever stored.
//! This module is the definition on the host (the reference interpreter and the CPU backend call it);
//! `src/backend/wgpu/codegen/helpers.rs` spells the same operations in WGSL. Both use only 32-bit integer operations,
//! IEEE `+ - * /`, `sqrt` and exact integer-to-float conversions, so `rand` gives the same bits everywhere, and
//! `randn` differs between backends only where a shader compiler contracts a multiply and an add into one rounding
//! (see `docs/ARCHITECTURE.md`). It imports nothing of the crate: the graph, the kernel IR and both backends stand on it.

/// What a random node draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// Uniform on `[0, 1)`, in steps of `2^-24`.
    Uniform,
    /// Standard normal, by the Box-Muller transform.
    Normal,
}

impl Distribution {
    /// The op's name, as users call it.
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Uniform => "rand",
            Distribution::Normal => "randn",
        }
    }
}

/// Philox's multipliers and Weyl key increments (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
/// SC 2011).
const M0: u32 = 0xd251_1f53;
const M1: u32 = 0xcd9e_8d57;
const W0: u32 = 0x9e37_79b9;
const W1: u32 = 0xbb67_ae85;

/// Philox4x32 with 10 rounds: the four output words of counter `ctr` under key `key`.
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (ctr, key);
    for _ in 0..10 {
        let p0 = u64::from(M0) * u64::from(c[0]);
        let p1 = u64::from(M1) * u64::from(c[2]);
        c = [(p1 >> 32) as u32 ^ c[1] ^ k[0], p1 as u32, (p0 >> 32) as u32 ^ c[3] ^ k[1], p0 as u32];
        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
    }
    c
}

/// The key of a seed: its low and high words.
pub fn key(seed: u64) -> [u32; 2] {
    [seed as u32, (seed >> 32) as u32]
}

/// `2^-24`: the step of uniform values, which keep the 24 high bits of a word (exactly representable in f32).
const STEP: f32 = 5.960_464_5e-8;

/// Element `index` of distribution `d` under `key`. One Philox block (four words) serves four uniform elements or
/// two normal ones: uniform element `i` is word `i % 4` of counter `(i / 4, 0, 0, 0)`, normal element `i` words
/// `2 (i % 2)` and `2 (i % 2) + 1` of counter `(i / 2, 0, 0, 0)`. A thread computing four neighbouring elements
/// (a vectorized kernel) then runs one block (two for normal) instead of four.
pub fn sample(d: Distribution, index: u32, key: [u32; 2]) -> f32 {
    match d {
        Distribution::Uniform => {
            let w = philox4x32_10([index >> 2, 0, 0, 0], key);
            (w[(index & 3) as usize] >> 8) as f32 * STEP
        }
        Distribution::Normal => {
            let w = philox4x32_10([index >> 1, 0, 0, 0], key);
            let j = 2 * (index & 1) as usize;
            box_muller(w[j], w[j + 1])
        }
    }
}

/// A standard normal value from two words: `sqrt(-2 ln u1) cos(2 pi u2)` with `u1` in `(0, 1]` (so its logarithm
/// is finite) and `u2` in `[0, 1)`, a fraction of a turn.
fn box_muller(a: u32, b: u32) -> f32 {
    let u1 = ((a >> 8) + 1) as f32 * STEP;
    let u2 = (b >> 8) as f32 * STEP;
    (-2.0 * ln_unit(u1)).sqrt() * cos_turn(u2)
}

/// `ln(u)` for `u` in `[2^-24, 1]`, from `+ - * /` alone so that WGSL computes the same: `u = m 2^e` with `m` in
/// `[sqrt(1/2), sqrt(2)]`, `ln(m) = 2 atanh(s)` with `s = (m - 1) / (m + 1)` (`|s| < 0.172`, where six terms of the
/// series leave an error below `2^-40`). Near `u = 1`, `m - 1` is exact, so the result keeps its relative accuracy
/// where the radius of Box-Muller is small.
fn ln_unit(u: f32) -> f32 {
    let bits = u.to_bits();
    let mut e = (bits >> 23) as i32 - 127;
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000);
    if m > std::f32::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let p = s2 * (0.333_333_34 + s2 * (0.2 + s2 * (0.142_857_15 + s2 * (0.111_111_11 + s2 * 0.090_909_09))));
    let t = s + s * p;
    // ln 2 in two parts: `e * LN2_HI` is exact (LN2_HI has 16 significant bits, e at most 5).
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let e = e as f32;
    e * LN2_HI + ((t + t) + e * LN2_LO)
}

/// `cos(2 pi u)` for `u` in `[0, 1)` a multiple of `2^-24`, from `+ - *` alone: `4u` splits exactly into a quadrant
/// and a fraction `f`, the fraction is folded to `h <= 1/2` (`cos(pi/2 f) = sin(pi/2 (1 - f))`), and sine or cosine
/// of `pi/2 h <= pi/4` is a Taylor polynomial (error below `2^-28`). The sine of a small angle keeps its relative
/// accuracy, so values near the cosine's zeros do too.
fn cos_turn(u: f32) -> f32 {
    let t = u * 4.0;
    let q = t.floor();
    let f = t - q;
    let swap = f > 0.5;
    let h = if swap { 1.0 - f } else { f };
    let a = h * std::f32::consts::FRAC_PI_2;
    let a2 = a * a;
    let sin = a + a * a2 * (-0.166_666_67 + a2 * (0.008_333_334 + a2 * (-0.000_198_412_7 + a2 * 2.755_731_9e-6)));
    let cos =
        1.0 + a2 * (-0.5 + a2 * (0.041_666_668 + a2 * (-0.001_388_888_9 + a2 * (2.480_158_8e-5 + a2 * -2.755_732e-7))));
    // Quadrant q: cos, -sin, -cos, sin of pi/2 f.
    let q = q as u32;
    let use_sin = (q & 1 == 1) != swap;
    let v = if use_sin { sin } else { cos };
    if q == 1 || q == 2 {
        -v
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_and_cos_match_libm_closely() {
        for k in (1..=1u32 << 24).step_by(997).chain([1, 2, (1 << 24) - 1, 1 << 24]) {
            let u = k as f32 * STEP;
            let want = f64::from(u).ln();
            let got = f64::from(ln_unit(u));
            assert!((got - want).abs() <= want.abs() * 3e-7 + 1e-30, "ln({u}) = {got}, libm {want}");
        }
        for k in (0..1u32 << 24).step_by(991).chain([0, 1 << 22, 1 << 23, 3 << 22, (1 << 24) - 1]) {
            let u = k as f32 * STEP;
            let want = (f64::from(u) * std::f64::consts::TAU).cos();
            let got = f64::from(cos_turn(u));
            assert!((got - want).abs() <= 2e-7 * want.abs().max(1e-3), "cos_turn({u}) = {got}, libm {want}");
        }
    }
}
