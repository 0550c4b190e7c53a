//! The WGSL helper functions op spellings and conversions call: their source, signatures and dependencies.

use crate::op::{Helper, ERF_SMALL, ERF_SPLIT, ERF_TAIL};
use std::sync::OnceLock;

/// The high word of a 32 x 32-bit product where WGSL has no 64-bit integers: assembled from 16-bit halves.
pub(super) const MULHI: &str = "fn lz_mulhi(a: u32, b: u32) -> u32 {
    let al = a & 0xffffu;
    let ah = a >> 16u;
    let bl = b & 0xffffu;
    let bh = b >> 16u;
    let lh = al * bh;
    let hl = ah * bl;
    let mid = ((al * bl) >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);
    return ah * bh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u);
}
";

/// The same with 64-bit integers (`wgpu::Features::SHADER_INT64`): one wide multiply.
pub(super) const MULHI_64: &str = "fn lz_mulhi(a: u32, b: u32) -> u32 { return u32((u64(a) * u64(b)) >> 32u); }
";

/// Helper functions by name. They pin down IEEE behaviour and Rust's conversion rules that WGSL leaves open.
///
/// Their conditions combine with `|` and `&`, never `||` or `&&`: WGSL's short-circuit operators are control flow
/// (Chrome's compiler emits a branch and a merge for each), and a fold inlines a helper into every unrolled step
/// and lane. A few dozen of them made Chromium's WebGPU on SwiftShader compile for two minutes and then lose its
/// GPU process: `lz_cos_turn`'s `qi == 1u || qi == 2u` in a min/max fold of `randn`, `lz_log1p`'s guard in the
/// sum of `binary_cross_entropy_with_logits`. With `|` both compile in under a second.
pub(super) fn helper_source(h: Helper) -> &'static str {
    match h {
        Helper::Bits => "fn lz_bits(b: u32) -> f32 { return bitcast<f32>(b); }\n",
        // Bit test: `x != x` may be folded away by compilers that assume no NaNs.
        Helper::IsNan => "fn lz_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }\n",
        Helper::Max => {
            "fn lz_max(a: f32, b: f32) -> f32 { return select(max(a, b), a + b, lz_isnan(a) | lz_isnan(b)); }\n"
        }
        Helper::Min => {
            "fn lz_min(a: f32, b: f32) -> f32 { return select(min(a, b), a + b, lz_isnan(a) | lz_isnan(b)); }\n"
        }
        // Rust's powf: x^0 = 1 and 1^y = 1 even for NaN; a negative base needs an integer exponent, whose parity
        // gives the sign; zeros and infinities follow IEEE pow. WGSL's pow is only defined for finite x > 0, and
        // NVIDIA's is not exact where the result is (3^3 gave 27.000002): exponents of magnitude 1 to 4 multiply
        // instead, exact wherever the products are, as libm's pow is.
        Helper::Pow => {
            "fn lz_pow(x: f32, y: f32) -> f32 {
    if ((y == 0.0) | (x == 1.0)) { return 1.0; }
    if (lz_isnan(x) | lz_isnan(y)) { return x + y; }
    let big = lz_bits(0x7f800000u);
    let ax = abs(x);
    let ay = abs(y);
    let integer = (ay >= 16777216.0) | (fract(ay) == 0.0);
    let odd = (ay < 16777216.0) & (fract(ay) == 0.0) & ((ay % 2.0) == 1.0);
    var m = pow(ax, y);
    if ((ay <= 4.0) & (fract(ay) == 0.0)) {
        let sq = ax * ax;
        var p = ax;
        if (ay == 2.0) { p = sq; } else if (ay == 3.0) { p = sq * ax; } else if (ay == 4.0) { p = sq * sq; }
        m = select(p, 1.0 / p, y < 0.0);
    }
    if (ax == 0.0) { m = select(0.0, big, y < 0.0); }
    else if (ax == big) { m = select(0.0, big, y > 0.0); }
    else if (ay == big) {
        m = select(select(0.0, big, y > 0.0), select(big, 0.0, y > 0.0), ax < 1.0);
        if (ax == 1.0) { m = 1.0; }
    }
    if ((bitcast<u32>(x) & 0x80000000u) != 0u) {
        if (odd) { return -m; }
        if (!integer & (ax != 0.0) & (ax != big)) { return lz_bits(0x7fc00000u); }
    }
    return m;
}
"
        }
        // log1p as musl's log1pf: 1 + x = 2^k m with m in [sqrt(2)/2, sqrt(2)), then ln(m) = ln(1 + f) by a series
        // in s = f / (2 + f), and k ln2 in two parts. f is taken from x, not from the rounded 1 + x, so nothing is
        // compensated afterwards (a compiler may fold `x - ((1 + x) - 1)` to 0): for |k| <= 24, x - (2^k - 1) is
        // exact (Sterbenz), and scaling by 2^-k is too. Within 2 ulp of libm (measured on lavapipe); tiny x (and
        // -0) is its own value.
        Helper::Log1p => {
            "fn lz_log1p(x: f32) -> f32 {
    let bits = bitcast<u32>(x);
    if (lz_isnan(x) | (bits == 0x7f800000u) | (abs(x) < 5.9604645e-8)) { return x; }
    if (x <= -1.0) { return select(lz_bits(0x7fc00000u), lz_bits(0xff800000u), x == -1.0); }
    let iu = bitcast<u32>(1.0 + x) + 0x004afb0du;
    let k = i32(iu >> 23u) - 127;
    var f = bitcast<f32>((iu & 0x007fffffu) + 0x3f3504f3u) - 1.0;
    if (k <= 24) {
        f = (x - (bitcast<f32>(u32(k + 127) << 23u) - 1.0)) * bitcast<f32>(u32(127 - k) << 23u);
    }
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let r = z * (0.6666666 + w * 0.28498787) + w * (0.40000972 + w * 0.24279079);
    let hfsq = 0.5 * f * f;
    let dk = f32(k);
    return s * (hfsq + r) + dk * 9.058001e-6 - hfsq + f + dk * 0.6931381;
}
"
        }
        // expm1 as the CPU backend's exp (`src/backend/cpu/math.rs`): x = n ln2 + r with ln2 in two parts (n ln2_hi
        // is exact), e^r - 1 by its Taylor series to r^7, then 2^n (e^r - 1) + (2^n - 1), where 2^n - 1 is exact.
        // No `exp(x) - 1`, and `round`, not an added and subtracted 1.5 * 2^23, which a compiler may fold away.
        // Within 2 ulp of libm (measured on lavapipe); tiny x (and -0) is its own value.
        Helper::Expm1 => {
            "fn lz_expm1(x: f32) -> f32 {
    if (lz_isnan(x) | (abs(x) < 2.9802322e-8)) { return x; }
    if (x > 88.72284) { return lz_bits(0x7f800000u); }
    if (x < -17.5) { return -1.0; }
    let n = round(x * 1.442695);
    let r = (x - n * 0.69314575) - n * 1.4286068e-6;
    let p = 0.5 + r * (0.16666667 + r * (0.041666668 + r * (0.008333334 + r * (0.0013888889 + r * 0.0001984127))));
    let e = r + r * r * p;
    let k = i32(n);
    if (k == 0) { return e; }
    if (k > 24) {
        let h = k / 2;
        return (1.0 + e) * bitcast<f32>(u32(h + 127) << 23u) * bitcast<f32>(u32(k - h + 127) << 23u);
    }
    let s = bitcast<f32>(u32(k + 127) << 23u);
    return s * e + (s - 1.0);
}
"
        }
        Helper::Erf => erf_source(),
        // By bits: a compiler that assumes no NaN could take `!(x < 0) && !(x > 0)` for `x == 0`.
        Helper::Sign => {
            "fn lz_sign(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    let a = b & 0x7fffffffu;
    if ((a == 0u) | (a > 0x7f800000u)) { return x; }
    return bitcast<f32>((b & 0x80000000u) | 0x3f800000u);
}
"
        }
        // By bits, not through f16 arithmetic or pack2x16float, whose rounding and overflow WGSL leaves to the
        // implementation: normals drop 13 mantissa bits to nearest even; below 2^-14 the step is 2^-24, where
        // `round` (ties to even in WGSL) does it; from 65520 up is infinity.
        Helper::RoundF16 => {
            "fn lz_f16(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    let a = b & 0x7fffffffu;
    if (a >= 0x7f800000u) { return x; }
    if (a >= 0x477ff000u) { return bitcast<f32>((b & 0x80000000u) | 0x7f800000u); }
    if (a < 0x38800000u) { return round(x * 16777216.0) * 5.9604644775390625e-8; }
    return bitcast<f32>((b & 0x80000000u) | ((a + 0xfffu + ((a >> 13u) & 1u)) & 0xffffe000u));
}
"
        }
        Helper::RoundBf16 => {
            "fn lz_bf16(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) { return bitcast<f32>((b | 0x00400000u) & 0xffff0000u); }
    return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}
"
        }
        // Clamped before converting: WGSL's conversion of an out-of-range float is not Rust's saturation.
        Helper::F2I => {
            "fn lz_f2i(x: f32) -> i32 {
    if (lz_isnan(x)) { return 0; }
    if (x >= 2147483648.0) { return 2147483647; }
    return i32(max(x, -2147483648.0));
}
"
        }
        Helper::F2U => {
            "fn lz_f2u(x: f32) -> u32 {
    if (lz_isnan(x)) { return 0u; }
    if (x >= 4294967296.0) { return 4294967295u; }
    return u32(max(x, 0.0));
}
"
        }
        // The f16 bits of `x` rounded as `lz_f16` rounds it, in one pass: NaN is the quiet NaN, from 65520 up is
        // infinity, below 2^-14 the count of 2^-24 steps (`round`, ties to even), and normals drop 13 mantissa
        // bits to nearest even (a carry into the exponent is the next binade, as it should be).
        Helper::HalfBits => {
            "fn lz_h(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let s = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) { return s | 0x7e00u; }
    if (a >= 0x477ff000u) { return s | 0x7c00u; }
    if (a < 0x38800000u) { return s | u32(round(bitcast<f32>(a) * 16777216.0)); }
    return s | ((a + 0xfffu + ((a >> 13u) & 1u) - 0x38000000u) >> 13u);
}
"
        }
        // `src/philox.rs` is the definition; this is the same arithmetic, with `lz_mulhi` ([`MULHI`] or
        // [`MULHI_64`]) before it.
        Helper::Philox => {
            "fn lz_philox(x: u32, k0: u32, k1: u32) -> vec4<u32> {
    var c = vec4<u32>(x, 0u, 0u, 0u);
    var k = vec2<u32>(k0, k1);
    for (var r = 0u; r < 10u; r = r + 1u) {
        let hi0 = lz_mulhi(0xd2511f53u, c.x);
        let hi1 = lz_mulhi(0xcd9e8d57u, c.z);
        c = vec4<u32>(hi1 ^ c.y ^ k.x, 0xcd9e8d57u * c.z, hi0 ^ c.w ^ k.y, 0xd2511f53u * c.x);
        k = k + vec2<u32>(0x9e3779b9u, 0xbb67ae85u);
    }
    return c;
}
fn lz_u01(w: u32) -> f32 { return f32(w >> 8u) * 5.9604645e-8; }
"
        }
        // Element x is word x % 4 of block x / 4.
        Helper::Rand => {
            "fn lz_rand(x: u32, k0: u32, k1: u32) -> f32 { return lz_u01(lz_philox(x >> 2u, k0, k1)[x & 3u]); }
"
        }
        // Elements 4 i .. 4 i + 3 (x = 4 i): one block.
        Helper::RandX4 => {
            "fn lz_rand_x4(x: u32, k0: u32, k1: u32) -> vec4<f32> {
    let w = lz_philox(x >> 2u, k0, k1);
    return vec4<f32>(lz_u01(w.x), lz_u01(w.y), lz_u01(w.z), lz_u01(w.w));
}
"
        }
        // ln and cos from `+ - * /` as `ln_unit` and `cos_turn` in `src/philox.rs`: WGSL's `log` and `cos` only
        // promise an absolute error, which near their zeros is many ulp. `qi - 1u < 2u`: quadrant 1 or 2.
        Helper::Randn => {
            "fn lz_ln_unit(u: f32) -> f32 {
    let bits = bitcast<u32>(u);
    var e = i32(bits >> 23u) - 127;
    var m = bitcast<f32>((bits & 0x007fffffu) | 0x3f800000u);
    if (m > 1.4142135) {
        m = m * 0.5;
        e = e + 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let p = s2 * (0.33333334 + s2 * (0.2 + s2 * (0.14285715 + s2 * (0.11111111 + s2 * 0.09090909))));
    let t = s + s * p;
    let ef = f32(e);
    return ef * 0.69314575 + ((t + t) + ef * 1.4286068e-6);
}
fn lz_cos_turn(u: f32) -> f32 {
    let t = u * 4.0;
    let q = floor(t);
    let f = t - q;
    let swap = f > 0.5;
    let h = select(f, 1.0 - f, swap);
    let a = h * 1.5707964;
    let a2 = a * a;
    let sn = a + a * a2 * (-0.16666667 + a2 * (0.008333334 + a2 * (-0.0001984127 + a2 * 2.7557319e-6)));
    let cs = 1.0 + a2 * (-0.5 + a2 * (0.041666668 + a2 * (-0.0013888889 + a2 * (2.4801588e-5 + a2 * -2.755732e-7))));
    let qi = u32(q);
    let v = select(cs, sn, ((qi & 1u) == 1u) != swap);
    return select(v, -v, qi - 1u < 2u);
}
fn lz_box_muller(a: u32, b: u32) -> f32 {
    let u1 = f32((a >> 8u) + 1u) * 5.9604645e-8;
    return sqrt(-2.0 * lz_ln_unit(u1)) * lz_cos_turn(lz_u01(b));
}
fn lz_randn(x: u32, k0: u32, k1: u32) -> f32 {
    let w = lz_philox(x >> 1u, k0, k1);
    let j = 2u * (x & 1u);
    return lz_box_muller(w[j], w[j + 1u]);
}
"
        }
        // Elements 4 i .. 4 i + 3 (x = 4 i): two blocks.
        Helper::RandnX4 => {
            "fn lz_randn_x4(x: u32, k0: u32, k1: u32) -> vec4<f32> {
    let a = lz_philox(x >> 1u, k0, k1);
    let b = lz_philox((x >> 1u) + 1u, k0, k1);
    return vec4<f32>(
        lz_box_muller(a.x, a.y), lz_box_muller(a.z, a.w), lz_box_muller(b.x, b.y), lz_box_muller(b.z, b.w)
    );
}
"
        }
    }
}

/// `lz_erf`: [`crate::op::erf`] spelled in WGSL, its coefficients printed from the same constants.
fn erf_source() -> &'static str {
    static SOURCE: OnceLock<String> = OnceLock::new();
    SOURCE.get_or_init(|| {
        let horner =
            |c: &[f32], x: &str| c.iter().skip(1).fold(format!("{:?}", c[0]), |r, c| format!("({r}) * {x} + {c:?}"));
        format!(
            "fn lz_erf(x: f32) -> f32 {{
    if (lz_isnan(x)) {{ return x; }}
    let t = abs(x);
    if (t > {ERF_SPLIT:?}) {{
        let u = min(t, 4.0);
        let q = {};
        let e = 1.0 - exp(q);
        return select(e, -e, x < 0.0);
    }}
    let s = x * x;
    return x + x * ({});
}}
",
            horner(&ERF_TAIL, "u"),
            horner(&ERF_SMALL, "s")
        )
    })
}

/// A helper's name, parameter types and result type, for its componentwise vec4 form.
pub(super) fn helper_signature(h: Helper) -> (&'static str, &'static [&'static str], &'static str) {
    match h {
        Helper::Bits => ("lz_bits", &["u32"], "f32"),
        Helper::IsNan => ("lz_isnan", &["f32"], "bool"),
        Helper::Max => ("lz_max", &["f32", "f32"], "f32"),
        Helper::Min => ("lz_min", &["f32", "f32"], "f32"),
        Helper::Pow => ("lz_pow", &["f32", "f32"], "f32"),
        Helper::Log1p => ("lz_log1p", &["f32"], "f32"),
        Helper::Expm1 => ("lz_expm1", &["f32"], "f32"),
        Helper::Erf => ("lz_erf", &["f32"], "f32"),
        Helper::Sign => ("lz_sign", &["f32"], "f32"),
        Helper::RoundF16 => ("lz_f16", &["f32"], "f32"),
        Helper::RoundBf16 => ("lz_bf16", &["f32"], "f32"),
        Helper::F2I => ("lz_f2i", &["f32"], "i32"),
        Helper::F2U => ("lz_f2u", &["f32"], "u32"),
        Helper::HalfBits => ("lz_h", &["f32"], "u32"),
        // Philox and the x4 forms compute vectors already: no componentwise vector form is emitted for them.
        Helper::Philox => ("lz_philox", &["u32", "u32", "u32"], "vec4<u32>"),
        Helper::Rand => ("lz_rand", &["u32", "u32", "u32"], "f32"),
        Helper::RandX4 => ("lz_rand_x4", &["u32", "u32", "u32"], "vec4<f32>"),
        Helper::Randn => ("lz_randn", &["u32", "u32", "u32"], "f32"),
        Helper::RandnX4 => ("lz_randn_x4", &["u32", "u32", "u32"], "vec4<f32>"),
    }
}

/// The helpers a helper calls.
pub(super) fn helper_needs(h: Helper) -> &'static [Helper] {
    match h {
        Helper::Pow | Helper::Log1p | Helper::Expm1 => &[Helper::Bits, Helper::IsNan],
        Helper::Max | Helper::Min | Helper::Erf | Helper::F2I | Helper::F2U => &[Helper::IsNan],
        Helper::Rand | Helper::RandX4 | Helper::Randn => &[Helper::Philox],
        Helper::RandnX4 => &[Helper::Randn],
        _ => &[],
    }
}
