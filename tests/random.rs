//! Random numbers: Philox known answers, bits equal across backends, statistics, fusion, plan reuse, dropout.

mod common;

use common::devices;
use lazor::{Error, Tensor, Var};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Philox4x32-10 written here from its description (Salmon et al., SC 2011), apart from the library's: ten rounds
/// of two 32 x 32 -> 64-bit products whose halves are mixed with the other words and the key, the key bumped by
/// the Weyl constants after each round.
fn philox(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    fn mulhilo(a: u32, b: u32) -> (u32, u32) {
        let p = a as u64 * b as u64;
        ((p >> 32) as u32, p as u32)
    }
    let mut x = ctr;
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k[0] = k[0].wrapping_add(0x9E37_79B9);
            k[1] = k[1].wrapping_add(0xBB67_AE85);
        }
        let (hi0, lo0) = mulhilo(0xD251_1F53, x[0]);
        let (hi1, lo1) = mulhilo(0xCD9E_8D57, x[2]);
        x = [hi1 ^ x[1] ^ k[0], lo1, hi0 ^ x[3] ^ k[1], lo0];
    }
    x
}

/// Philox block `b` under `seed`: counter `(b, 0, 0, 0)`, key the seed's low and high words.
fn block(seed: u64, b: usize) -> [u32; 4] {
    philox([b as u32, 0, 0, 0], [seed as u32, (seed >> 32) as u32])
}

/// `rand`'s definition: element `i` is word `i % 4` of block `i / 4`, its 24 high bits times 2^-24.
fn uniform(seed: u64, i: usize) -> f32 {
    (block(seed, i / 4)[i % 4] >> 8) as f32 / (1u32 << 24) as f32
}

/// `randn`'s definition in f64: element `i` is Box-Muller of words `2 (i % 2)` and `2 (i % 2) + 1` of block
/// `i / 2`, as u1 in (0, 1] and u2 in [0, 1).
fn normal(seed: u64, i: usize) -> f64 {
    let w = block(seed, i / 2);
    let j = 2 * (i % 2);
    let u1 = ((w[j] >> 8) + 1) as f64 / (1u64 << 24) as f64;
    let u2 = (w[j + 1] >> 8) as f64 / (1u64 << 24) as f64;
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Distance in units in the last place between two finite f32 values (across zero too).
fn ulps(a: f32, b: f32) -> u64 {
    let key = |x: f32| {
        let b = x.to_bits() as i64;
        if b < 0x8000_0000 {
            b
        } else {
            0x8000_0000 - b
        }
    };
    (key(a) - key(b)).unsigned_abs()
}

const N: usize = 1 << 20;

#[test]
fn philox_known_answers_from_random123() {
    // The known-answer vectors published with Random123 (kat_vectors, philox4x32 with 10 rounds).
    let kat = [
        ([0u32; 4], [0u32; 2], [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]),
        ([u32::MAX; 4], [u32::MAX; 2], [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]),
        (
            [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
            [0xa409_3822, 0x299f_31d0],
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
        ),
    ];
    for (ctr, key, want) in kat {
        assert_eq!(philox(ctr, key), want, "philox4x32-10 of {ctr:x?} under {key:x?}");
    }
}

#[test]
fn rand_is_the_generator_exactly_and_randn_its_box_muller() {
    for dev in devices() {
        // Seeds with a zero and a non-zero high word; shapes of 3 axes (the index is row-major), one with an odd
        // length (kernels computing an element per thread) and one a multiple of 4 (four per thread).
        for seed in [0u64, 7, 0x1234_5678_9abc_def0] {
            for shape in [[3, 5, 67], [4, 16, 64]] {
                let got = Tensor::rand_on(shape, seed, &dev).to_vec();
                for (i, &g) in got.iter().enumerate() {
                    assert_eq!(g.to_bits(), uniform(seed, i).to_bits(), "{}: rand {seed} at {i}", dev.name());
                }
                let got = Tensor::randn_on(shape, seed, &dev).to_vec();
                for (i, &g) in got.iter().enumerate() {
                    let want = normal(seed, i) as f32;
                    assert!(ulps(g, want) <= 8, "{}: randn {seed} at {i}: {g} vs {want}", dev.name());
                }
            }
        }
        // A scalar is element 0; an empty draw is empty.
        assert_eq!(Tensor::rand_on([], 5, &dev).to_vec(), vec![uniform(5, 0)], "{}: scalar", dev.name());
        assert_eq!(Tensor::randn_on([0, 3], 5, &dev).to_vec(), Vec::<f32>::new(), "{}: empty", dev.name());
        // The counter is the element's index, wherever it is read: a transposed view reads the same values.
        let r = Tensor::rand_on([4, 6], 3, &dev);
        let got = (r.t() + 0.0).to_vec();
        for (j, row) in got.chunks(4).enumerate() {
            for (i, &g) in row.iter().enumerate() {
                assert_eq!(g, uniform(3, i * 6 + j), "{}: rand().t() at ({j}, {i})", dev.name());
            }
        }
    }
}

#[test]
fn rand_is_bit_identical_on_every_backend_and_run_and_randn_within_4_ulp() {
    let devs = devices();
    // 2^20 fills the vectorized kernels; an odd length takes the scalar ones.
    for n in [N, 100_003] {
        let rand: Vec<Vec<f32>> = devs.iter().map(|d| Tensor::rand_on([n], 11, d).to_vec()).collect();
        let randn: Vec<Vec<f32>> = devs.iter().map(|d| Tensor::randn_on([n], 11, d).to_vec()).collect();
        for (d, dev) in devs.iter().enumerate() {
            let again = Tensor::rand_on([n], 11, dev).to_vec();
            assert!(again.iter().zip(&rand[d]).all(|(a, b)| a.to_bits() == b.to_bits()), "{}: rerun", dev.name());
            let same = rand[d].iter().zip(&rand[0]).position(|(a, b)| a.to_bits() != b.to_bits());
            assert_eq!(same, None, "rand on {} differs from {}", dev.name(), devs[0].name());
            let worst = randn[d].iter().zip(&randn[0]).map(|(&a, &b)| ulps(a, b)).max().unwrap();
            eprintln!("randn, {n} elements: {} vs {}: at most {worst} ulp apart", dev.name(), devs[0].name());
            // 0 ulp between the CPU backend and lavapipe; 4 on the H200, whose compiler fuses the hand-written
            // ln and cos polynomials' multiply-adds (issue 22 asks for 2: not met there yet).
            assert!(worst <= 4, "randn on {} is {worst} ulp from {}", dev.name(), devs[0].name());
        }
    }
}

/// Mean and variance.
fn moments(x: &[f32]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
    let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
    (mean, var)
}

/// Pearson correlation of two equally long samples.
fn correlation(a: &[f32], b: &[f32]) -> f64 {
    let ((ma, va), (mb, vb)) = (moments(a), moments(b));
    let cov = a.iter().zip(b).map(|(&x, &y)| (x as f64 - ma) * (y as f64 - mb)).sum::<f64>() / a.len() as f64;
    cov / (va * vb).sqrt()
}

/// The Kolmogorov-Smirnov statistic of a sample against the distribution function `cdf`.
fn ks(x: &[f32], cdf: impl Fn(f64) -> f64) -> f64 {
    let mut s: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    s.sort_by(f64::total_cmp);
    let n = s.len() as f64;
    s.iter().enumerate().map(|(i, &v)| (cdf(v) - i as f64 / n).max((i + 1) as f64 / n - cdf(v))).fold(0.0, f64::max)
}

/// The standard normal distribution function, through erfc (Numerical Recipes' Chebyshev fit, relative error
/// below 1.2e-7, far under the KS bound tested).
fn phi(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    if x >= 0.0 {
        1.0 - 0.5 * erfc
    } else {
        0.5 * erfc
    }
}

#[test]
fn statistics_at_2_to_the_20_samples() {
    // The KS statistic's 0.1% critical value at n samples is 1.95 / sqrt(n); moments are checked to about 5
    // standard errors, correlations to 5 / sqrt(n) (the standard error of a correlation of independent samples is
    // 1 / sqrt(n)). The seeds are fixed, so a pass is reproducible, not luck on each run.
    let n = N as f64;
    let (ks_bound, corr_bound) = (1.95 / n.sqrt(), 5.0 / n.sqrt());
    for dev in devices() {
        let u = Tensor::rand_on([N], 0, &dev).to_vec();
        let (mean, var) = moments(&u);
        assert!((mean - 0.5).abs() < 5.0 * (1.0 / 12.0 / n).sqrt(), "{}: rand mean {mean}", dev.name());
        assert!((var - 1.0 / 12.0).abs() < 5.0 * (1.0 / 180.0 / n).sqrt(), "{}: rand variance {var}", dev.name());
        assert!(u.iter().all(|&v| (0.0..1.0).contains(&v)), "{}: rand outside [0, 1)", dev.name());
        let d = ks(&u, |x| x.clamp(0.0, 1.0));
        eprintln!("{}: rand KS statistic {d:.2e} (bound {ks_bound:.2e})", dev.name());
        assert!(d < ks_bound, "{}: rand KS statistic {d}", dev.name());
        let r = correlation(&u[..N - 1], &u[1..]);
        assert!(r.abs() < corr_bound, "{}: rand neighbours correlate: {r}", dev.name());
        let u1 = Tensor::rand_on([N], 1, &dev).to_vec();
        let r = correlation(&u, &u1);
        assert!(r.abs() < corr_bound, "{}: rand seeds 0 and 1 correlate: {r}", dev.name());
        let high = Tensor::rand_on([N], 1 << 32, &dev).to_vec();
        let r = correlation(&u, &high);
        assert!(r.abs() < corr_bound, "{}: rand seeds 0 and 2^32 correlate: {r}", dev.name());

        let z = Tensor::randn_on([N], 0, &dev).to_vec();
        let (mean, var) = moments(&z);
        assert!(mean.abs() < 5.0 / n.sqrt(), "{}: randn mean {mean}", dev.name());
        assert!((var - 1.0).abs() < 5.0 * (2.0 / n).sqrt(), "{}: randn variance {var}", dev.name());
        assert!(z.iter().all(|v| v.is_finite()), "{}: randn not finite", dev.name());
        let d = ks(&z, phi);
        eprintln!("{}: randn KS statistic {d:.2e} (bound {ks_bound:.2e})", dev.name());
        assert!(d < ks_bound, "{}: randn KS statistic {d}", dev.name());
        let r = correlation(&z[..N - 1], &z[1..]);
        assert!(r.abs() < corr_bound, "{}: randn neighbours correlate: {r}", dev.name());
        let z1 = Tensor::randn_on([N], 1, &dev).to_vec();
        let r = correlation(&z, &z1);
        assert!(r.abs() < corr_bound, "{}: randn seeds 0 and 1 correlate: {r}", dev.name());
    }
}

#[test]
fn noise_is_one_kernel_and_a_new_seed_compiles_nothing() {
    for dev in devices() {
        let x = Tensor::from_vec_on((0..4096).map(|i| i as f32).collect::<Vec<_>>(), [64, 64], &dev);
        x.realize().unwrap();
        let noisy = |seed: u64| &x + Tensor::randn_on(x.shape(), seed, &dev) * 0.1;

        let before = dev.stats();
        let a = noisy(7);
        let got = a.to_vec();
        let after = dev.stats();
        assert_eq!(after.dispatches - before.dispatches, 1, "{}: x + randn * 0.1 is one kernel", dev.name());
        // The result's buffer is the only one the realize added: no random values were stored on the way.
        let added = after.peak_buffer_bytes.saturating_sub(before.live_buffer_bytes);
        assert_eq!(added, 4 * 4096, "{}: bytes of buffers the realize held at its peak", dev.name());
        let want = lazor::reference::eval(&[&a]).pop().unwrap();
        common::assert_close(&got, &want, 1e-6, 1e-6, "x + randn * 0.1");
        assert!(got.iter().enumerate().any(|(i, &v)| v != i as f32), "{}: no noise", dev.name());

        // Another seed, low word or high word: the same plan and pipelines, other values.
        for seed in [8u64, 7 | 5 << 32] {
            let before = dev.stats();
            let b = noisy(seed).to_vec();
            let after = dev.stats();
            assert_eq!(after.pipelines_compiled - before.pipelines_compiled, 0, "{}: seed {seed}", dev.name());
            assert_eq!(after.plans_reused - before.plans_reused, 1, "{}: seed {seed}", dev.name());
            assert_eq!(after.dispatches - before.dispatches, 1, "{}: seed {seed}", dev.name());
            assert!(b.iter().zip(&got).filter(|(p, q)| p != q).count() > 4000, "{}: seed {seed}", dev.name());
        }

        // Used twice in one expression, a random tensor is computed twice in one kernel, not stored.
        let r = Tensor::rand_on([1000], 5, &dev);
        let before = dev.stats();
        let v = (&r * &r - &r).to_vec();
        assert_eq!(dev.stats().dispatches - before.dispatches, 1, "{}: r * r - r", dev.name());
        // The draws are exact; the arithmetic on them may round once where the driver fuses `u * u - u` into an
        // FMA (the H200's does: -0.17925349 for -0.17925352).
        for (i, &g) in v.iter().enumerate() {
            let u = uniform(5, i);
            let want = u * u - u;
            assert!((g - want).abs() <= 2.0 * f32::EPSILON * want.abs().max(u * u), "{}: r * r - r at {i}", dev.name());
        }
        // Folded like any other value.
        let s = Tensor::rand_on([1000], 5, &dev).sum_all().to_vec()[0];
        let want: f64 = (0..1000).map(|i| uniform(5, i) as f64).sum();
        assert!((s as f64 - want).abs() < 1e-3, "{}: sum of rand {s} vs {want}", dev.name());
    }
}

#[test]
fn random_values_feed_every_kind_of_kernel() {
    for dev in devices() {
        let w = Tensor::from_vec_on((0..48 * 40).map(|i| (i % 7) as f32 - 3.0).collect::<Vec<_>>(), [48, 40], &dev);
        let cases = [
            ("matmul operand", Tensor::randn_on([33, 48], 1, &dev).matmul(&w)),
            ("matmul of a transposed draw", Tensor::rand_on([48, 33], 2, &dev).t().matmul(&w)),
            ("softmax rows", Tensor::randn_on([17, 300], 3, &dev).softmax(-1)),
            ("fold along a leading axis", (Tensor::rand_on([300, 17], 4, &dev) * 2.0).sum(0)),
            ("mixed with f16", Tensor::rand_on([257], 5, &dev).to_dtype(lazor::DType::F16) + 1.0),
        ];
        for (what, t) in &cases {
            common::check(t, 1e-5, 1e-5, &format!("{}: {what}", dev.name()));
        }
    }
}

#[test]
fn dropout_zeroes_about_p_and_scales_the_rest() {
    for dev in devices() {
        let n = 1 << 16;
        let data: Vec<f32> = (0..n).map(|i| 1.0 + (i % 97) as f32 * 0.25).collect();
        let x = Tensor::from_vec_on(data.clone(), [n], &dev);
        let same = x.dropout(0.0, 9).to_vec();
        assert!(same.iter().zip(&data).all(|(a, b)| a.to_bits() == b.to_bits()), "{}: p = 0", dev.name());
        for p in [0.1f32, 0.5, 0.9] {
            let y = x.dropout(p, 9).to_vec();
            let scale = 1.0 / (1.0 - p);
            let mut zeros = 0;
            for (i, (&g, &v)) in y.iter().zip(&data).enumerate() {
                // The mask is rand(shape, seed) >= p, element by element.
                let keep = uniform(9, i) >= p;
                let want = if keep { v * scale } else { 0.0 };
                assert_eq!(g, want, "{}: dropout({p}) element {i}", dev.name());
                zeros += usize::from(g == 0.0);
            }
            let frac = zeros as f64 / n as f64;
            let sd = (p as f64 * (1.0 - p as f64) / n as f64).sqrt();
            assert!((frac - p as f64).abs() < 5.0 * sd, "{}: dropout({p}) zeroed {frac}", dev.name());
        }
        // Another seed draws another mask.
        let (a, b) = (x.dropout(0.5, 1).to_vec(), x.dropout(0.5, 2).to_vec());
        assert!(a.iter().zip(&b).filter(|(p, q)| (**p == 0.0) != (**q == 0.0)).count() > n / 4);
    }
}

#[test]
fn dropout_gradient_is_the_mask_over_1_minus_p_drawn_again() {
    for dev in devices() {
        let n = 3000;
        let p = 0.3f32;
        let w_data: Vec<f32> = (0..n).map(|i| ((i * 37) % 11) as f32 - 5.0).collect();
        let x = Var::new(Tensor::from_vec_on(vec![0.5f32; n], [n], &dev));
        let w = Tensor::from_vec_on(w_data.clone(), [n], &dev);
        w.realize().unwrap();
        let loss = (x.tensor().dropout(p, 21) * &w).sum_all();
        let grads = loss.backward();
        let g = &grads[&x];
        // The gradient is one kernel computing the mask from (seed, index): no mask was stored to read.
        let before = dev.stats();
        let got = g.to_vec();
        assert_eq!(dev.stats().dispatches - before.dispatches, 1, "{}: dropout backward", dev.name());
        let scale = 1.0 / (1.0 - p);
        for (i, &v) in got.iter().enumerate() {
            let want = if uniform(21, i) >= p { w_data[i] * scale } else { 0.0 };
            assert_eq!(v, want, "{}: gradient at {i}", dev.name());
        }
        // Against central differences of the loss (linear in x, so exact up to rounding of the sum).
        let loss_at = |i: usize, h: f32| {
            let mut xs = vec![0.5f32; n];
            xs[i] += h;
            let t = Tensor::from_vec_on(xs, [n], &dev);
            (t.dropout(p, 21) * &w).sum_all().to_vec()[0] as f64
        };
        for i in [0, 1, 2, 3, 1500, n - 1] {
            let fd = (loss_at(i, 0.25) - loss_at(i, -0.25)) / 0.5;
            assert!((fd - got[i] as f64).abs() < 0.05, "{}: {i}: fd {fd} vs {}", dev.name(), got[i]);
        }
    }
}

#[test]
fn dropout_rejects_p_outside_0_1_at_the_caller() {
    let x = Tensor::ones([4]);
    for p in [1.0f32, -0.1, 1.5, f32::NAN] {
        match x.try_dropout(p, 0) {
            Err(Error::BadArgument { op, message, .. }) => {
                assert_eq!(op, "dropout");
                assert!(message.contains("[0, 1)"), "{message}");
            }
            other => panic!("dropout({p}): expected a bad-argument error, got {other:?}"),
        }
    }
    let location = std::sync::Arc::new(std::sync::Mutex::new(None));
    let loc = location.clone();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        *loc.lock().unwrap() = info.location().map(|l| (l.file().to_string(), l.line()));
    }));
    #[rustfmt::skip]
    let (line, result) = (line!(), catch_unwind(AssertUnwindSafe(|| drop(x.dropout(1.0, 0)))));
    std::panic::set_hook(hook);
    let err = result.expect_err("dropout(1.0) panics");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("dropout") && msg.contains("p = 1"), "{msg}");
    let (file, at) = location.lock().unwrap().clone().unwrap();
    assert!(file.ends_with("tests/random.rs"), "panic located in {file}");
    assert_eq!(at, line);
}
