//! The CPU backend's `exp` and `tanh`: branch-free f32 versions the compiler vectorizes, within a few ulps of libm.

// libm's are scalar calls (costly apiece; figures: docs/notes/source-measurements.md, `src/backend/cpu/math.rs`), which
// no loop around them can vectorize.

use crate::op::Math;

/// The functions the CPU backend evaluates the op table's rows with.
pub struct Vector;

impl Math for Vector {
    #[inline(always)]
    fn exp(x: f32) -> f32 {
        exp(x)
    }
    #[inline(always)]
    fn tanh(x: f32) -> f32 {
        tanh(x)
    }
}

/// 1 / ln 2.
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 in two parts: the first has 14 significant bits, so `n * LN2_HI` is exact for |n| < 2^10.
const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
const LN2_LO: f32 = f32::from_bits(0x35bf_be8e);
/// 1.5 * 2^23: adding it rounds an f32 of magnitude below 2^22 to an integer (to nearest, ties to even), which
/// then sits in the low mantissa bits.
const SHIFTER: f32 = 12_582_912.0;

/// `x = n ln2 + r` with `n` an integer and |r| <= ln2 / 2 (|x| < 2^21).
#[inline(always)]
fn reduce(x: f32) -> (f32, i32) {
    let t = x * LOG2E + SHIFTER;
    let n = t - SHIFTER;
    let k = t.to_bits() as i32 - SHIFTER.to_bits() as i32;
    ((x - n * LN2_HI) - n * LN2_LO, k)
}

/// `e^r - 1` for |r| <= ln2 / 2: the Taylor series to r^7, whose remainder there is below 6e-9 of the value (a
/// tenth of an ulp).
#[inline(always)]
fn expm1_reduced(r: f32) -> f32 {
    let p = 1.0 / 2.0 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r / 5040.0))));
    r + r * r * p
}

/// 2^k for -126 <= k <= 127.
#[inline(always)]
fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

/// `e^x`. Arguments are clamped to [-104, 89], past which the result is 0 or infinite anyway; 2^n is applied in
/// two halves so results in the subnormal range round once, as libm's do. NaN stays NaN.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let (r, k) = reduce(x.clamp(-104.0, 89.0));
    let half = k >> 1;
    (1.0 + expm1_reduced(r)) * pow2(half) * pow2(k - half)
}

/// `e^y - 1` for 0 <= y <= 20, without the cancellation of `exp(y) - 1` near 0.
#[inline(always)]
fn expm1_nonnegative(y: f32) -> f32 {
    let (r, k) = reduce(y);
    let s = pow2(k);
    s * expm1_reduced(r) + (s - 1.0)
}

/// `tanh(x) = e / (e + 2)` with `e = expm1(2|x|)`, the sign of `x` and |x| capped at 10 (where tanh is 1.0 in f32).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let e = expm1_nonnegative(2.0 * x.abs().min(10.0));
    let t = (e / (e + 2.0)).copysign(x);
    if x.is_nan() {
        x
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place, treating equal values (and two NaNs) as 0.
    fn ulps(a: f32, b: f32) -> u32 {
        if a == b || (a.is_nan() && b.is_nan()) {
            return 0;
        }
        let key = |v: f32| {
            let i = v.to_bits() as i32;
            if i < 0 {
                i32::MIN - i
            } else {
                i
            }
        };
        (key(a) as i64 - key(b) as i64).unsigned_abs() as u32
    }

    /// Every 97th f32 in `lo..hi` (by bit pattern, both signs), plus edges.
    fn sweep(f: fn(f32) -> f32, libm: fn(f32) -> f32, lo: f32, hi: f32, max_ulps: u32) {
        let mut worst = (0, 0.0);
        let mut check = |x: f32| {
            let (got, want) = (f(x), libm(x));
            let d = ulps(got, want);
            if d > worst.0 {
                worst = (d, x);
            }
        };
        for bits in (0..=0x7f80_0000u32).step_by(97) {
            let x = f32::from_bits(bits);
            if (lo..=hi).contains(&x) {
                check(x);
                check(-x);
            }
        }
        for x in [0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN_POSITIVE, 1e-40, lo, hi] {
            check(x);
        }
        assert!(worst.0 <= max_ulps, "{} ulps at {}", worst.0, worst.1);
    }

    #[test]
    fn exp_is_within_2_ulps_of_libm() {
        sweep(exp, f32::exp, -110.0, 110.0, 2);
    }

    #[test]
    fn tanh_is_within_4_ulps_of_libm() {
        sweep(tanh, f32::tanh, -30.0, 30.0, 4);
    }
}
