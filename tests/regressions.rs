//! Bugs found by random programs checked against NumPy and PyTorch (issue 27): each repro, on every backend, fused
//! and unfused, against the values the issue states and against the reference interpreter.

mod common;

use common::{check, devices};
use lazor::half::{bf16, f16};
use lazor::{DType, Device, Tensor};

/// Runs `case` on every backend, with fusion on and off.
fn each_device(case: impl Fn(&Device)) {
    for dev in devices() {
        for fuse in [true, false] {
            dev.set_fusion(fuse);
            case(&dev);
        }
    }
}

#[test]
fn a_reduction_or_argmin_feeding_matmul() {
    each_device(|dev| {
        let x = Tensor::from_vec_on(vec![1.0f32, 2.0], [1, 2, 1], dev).sum(2);
        let eye = Tensor::from_vec_on(vec![1.0f32, 0.0, 0.0, 1.0], [2, 2], dev);
        let y = x.matmul(&eye);
        assert_eq!(y.shape(), &[1, 2]);
        assert_eq!(y.to_vec(), vec![1.0, 2.0], "{}", dev.name());

        let y = Tensor::from_vec_on(vec![3.0f32], [1, 1], dev).sum_keepdim(0).matmul(&Tensor::ones_on([1, 1], dev));
        assert_eq!(y.to_vec(), vec![3.0], "{}", dev.name());

        let i = Tensor::from_vec_on(vec![2.0f32, 1.0], [2], dev).argmin_keepdim(-1).to_dtype(DType::F32);
        let y = i.matmul(&Tensor::from_vec_on(vec![3.0f32, 4.0], [2, 1, 1], dev));
        assert_eq!(y.shape(), &[2, 1]);
        assert_eq!(y.to_vec(), vec![3.0, 4.0], "{}", dev.name());

        // A fold of a larger product, and a fold on both sides, against the reference.
        let a = Tensor::from_vec_on((0..24).map(|v| v as f32 * 0.25).collect(), [2, 3, 4], dev);
        let b = Tensor::from_vec_on((0..12).map(|v| 1.0 - v as f32 * 0.125).collect(), [3, 4], dev);
        check(&a.max(2).matmul(&b), 1e-6, 1e-6, "max(2) @ b");
        check(&a.sum(0).matmul(&b.t().sum_keepdim(1)), 1e-6, 1e-5, "sum(0) @ sum_keepdim(1)");
    });
}

#[test]
fn argmax_over_a_leading_axis_of_half_expressions() {
    each_device(|dev| {
        let x = Tensor::from_vec_on([0.1f32, 0.9, 0.5, 0.7].map(f16::from_f32).to_vec(), [2, 2], dev);
        assert_eq!(x.exp().argmax(0).to_vec_as::<i32>(), vec![1, 0], "{}", dev.name());
        assert_eq!(x.exp().argmin(0).to_vec_as::<i32>(), vec![0, 1], "{}", dev.name());

        let d = Tensor::from_vec_on([0.3f32, 0.7, 1.9].map(bf16::from_f32).to_vec(), [3], dev);
        let q = Tensor::ones_on([2, 3], dev).to_dtype(DType::BF16) / &d;
        assert_eq!(q.argmin(0).to_vec_as::<i32>(), vec![0, 0, 0], "{}", dev.name());
        assert_eq!(q.argmax(0).to_vec_as::<i32>(), vec![0, 0, 0], "{}", dev.name());

        // Many rows whose half values tie after rounding: the first index of the rounded extreme wins.
        let n = 300;
        let v: Vec<f16> = (0..n * 3).map(|i| f16::from_f32(1.0 + (i % 7) as f32 * 1e-4)).collect();
        let x = Tensor::from_vec_on(v, [n, 3], dev);
        check(&(x.clone() * 1.0f32).to_dtype(DType::F16).argmax(0), 0.0, 0.0, "f16 argmax(0)");
        check(&x.exp().argmin(0), 0.0, 0.0, "f16 argmin(0)");
        check(&x.exp().argmax(1), 0.0, 0.0, "f16 argmax(1)");
    });
}

#[test]
fn constants_in_fused_kernels_past_the_first_batch() {
    each_device(|dev| {
        let n = 4096;
        let v: Vec<f32> = (0..n).map(|i| if i % 2 == 0 { 1.0 } else { -1.0 }).collect();
        let x = Tensor::from_vec_on(v.clone(), [n], dev);
        let got = (x.gt(0.0) + 1i32).to_vec_as::<i32>();
        let wrong = got.iter().zip(&v).filter(|(&g, &e)| g != if e > 0.0 { 2 } else { 1 }).count();
        assert_eq!(wrong, 0, "{}: (x > 0) + 1 wrong in {wrong} places", dev.name());

        let q = Tensor::from_vec_on(v.clone(), [n], dev);
        let got = q.minimum(&q).eq(0.0).to_vec_as::<bool>();
        let wrong = got.iter().filter(|&&b| b).count();
        assert_eq!(wrong, 0, "{}: minimum(q, q) == 0 in {wrong} places", dev.name());
        check(&(q.minimum(&q) * 2.0 + 1.0).lt(2.0), 0.0, 0.0, "minimum(q, q) * 2 + 1 < 2");
    });
}

#[test]
fn an_empty_tensor_read_once_then_a_k0_matmul() {
    each_device(|dev| {
        let e = Tensor::from_vec_on(Vec::<f32>::new(), [0], dev);
        assert!(e.to_vec().is_empty());
        let y = (&e + &Tensor::from_vec_on(vec![1.0f32], [], dev))
            .minimum(&Tensor::from_vec_on(Vec::<f32>::new(), [3, 0], dev))
            .matmul(&Tensor::from_vec_on(Vec::<f32>::new(), [0, 2], dev));
        assert_eq!(y.shape(), &[3, 2]);
        assert_eq!(y.to_vec(), vec![0.0; 6], "{}", dev.name());
    });
}

#[test]
fn x_minus_x_keeps_nan_and_inf() {
    each_device(|dev| {
        let x = Tensor::from_vec_on(vec![1.0f32, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0], [5], dev);
        let got = (&x - &x).to_vec();
        assert_eq!(got[0], 0.0);
        assert!(got[1].is_nan() && got[2].is_nan() && got[3].is_nan(), "{}: x - x = {got:?}", dev.name());
        let got = (&x + &(-&x)).to_vec();
        assert!(got[1].is_nan() && got[2].is_nan() && got[3].is_nan(), "{}: x + -x = {got:?}", dev.name());
        assert_eq!(got[0].to_bits(), 0, "{}: x + -x", dev.name());
        let got = (&(-&x) + &x).to_vec();
        assert!(got[1].is_nan() && got[2].is_nan() && got[3].is_nan(), "{}: -x + x = {got:?}", dev.name());
        // `x - x` is +0 for every finite x, -0 included; the rewrite must not leave -0 behind.
        let got = (&x.reshape([5, 1]).reshape([5]) - &x).to_vec();
        assert_eq!(got[4].to_bits(), 0, "{}: -0 - -0", dev.name());
        assert!(
            got[1].is_nan() && got[2].is_nan() && got[3].is_nan(),
            "{}: x - x through a view = {got:?}",
            dev.name()
        );
        // Wide enough for the vectorized kernel.
        let v = Tensor::from_vec_on([f32::NAN, f32::INFINITY, 2.0, -0.0].repeat(256), [1024], dev);
        let got = (&v - &v).to_vec();
        assert!(got.chunks(4).all(|c| c[0].is_nan() && c[1].is_nan() && c[2].to_bits() == 0 && c[3].to_bits() == 0));
        let got = (&x * 0.0).to_vec();
        assert!(got[1].is_nan() && got[2].is_nan() && got[3].is_nan(), "{}: x * 0 = {got:?}", dev.name());
        let got = (&x / &x).to_vec();
        assert!(got[1].is_nan() && got[2].is_nan() && got[3].is_nan(), "{}: x / x = {got:?}", dev.name());
        assert_eq!(got[0], 1.0);
        assert!(got[4].is_nan(), "{}: -0 / -0 = {}", dev.name(), got[4]);
        // The differential tester's repro on the H200: the same element read through an expand.
        let h = x.to_dtype(DType::F16).reshape([1, 5]);
        let got = (&h.expand([3, 5]) / &h).to_dtype(DType::F32).to_vec();
        assert!(got.chunks(5).all(|c| c[0] == 1.0 && c[1..].iter().all(|v| v.is_nan())), "{}: {got:?}", dev.name());
        let got = (&x + 0.0).to_vec();
        assert!(got[1].is_nan() && got[2] == f32::INFINITY && got[3] == f32::NEG_INFINITY, "{}", dev.name());
        // Not kept on every driver (docs/ENVIRONMENT.md, "IEEE"): algebra across two ops or two equal
        // expressions built apart. Printed so a run on a new driver shows what it folds.
        let folded = |t: Tensor| t.to_vec()[1..4].iter().filter(|v| !v.is_nan()).count();
        eprintln!(
            "{}: NaN/inf lost by (x + x) - x: {} of 3, x.exp() - x.exp(): {} of 2",
            dev.name(),
            folded(&(&x + &x) - &x),
            folded(&x.exp() - &x.exp()).saturating_sub(1)
        );
        let got = x.ne(&x).to_vec_as::<bool>();
        assert_eq!(got, vec![false, true, false, false, false], "{}: x != x", dev.name());
        let got = x.eq(&x).to_vec_as::<bool>();
        assert_eq!(got, vec![true, false, true, true, true], "{}: x == x", dev.name());
    });
}

#[test]
fn a_concatenation_of_empty_parts_in_a_k0_matmul() {
    each_device(|dev| {
        let a = Tensor::from_vec_on(Vec::<f32>::new(), [1, 0], dev);
        let c = Tensor::cat(&[&a, &(&a * 2.0)], 0);
        assert_eq!(c.shape(), &[2, 0]);
        let y = c.matmul(&Tensor::from_vec_on(Vec::<f32>::new(), [0, 1], dev));
        assert_eq!(y.to_vec(), vec![0.0, 0.0], "{}", dev.name());
    });
}

#[test]
#[should_panic(expected = "[3, 0]")]
fn max_all_of_an_empty_tensor_names_the_callers_shape() {
    let dev = Device::cpu();
    let _ = Tensor::zeros_on([3, 0], &dev).max_all();
}

#[test]
fn an_operand_stored_after_its_consumers_were_costed() {
    // Found by the differential tester (seed 22244): the matmul stored both the reshaped `x * v` and `v`, but the
    // reshape's cost still listed `v`'s fold as what it reads, so it joined the fold's rows kernel and read `v`
    // before the kernel that writes it ran.
    each_device(|dev| {
        let x = Tensor::from_vec_on(vec![0.0f32, 0.0, 0.0, 0.841192], [1, 4, 1], dev);
        let w = Tensor::from_vec_on(vec![0.0f32, 0.0, 0.0, 0.841192], [1, 1, 4], dev);
        let v = w.var(2).clamp(0.0, 2.0);
        let y = (&x * &v).matmul(&v);
        check(&y, 1e-6, 1e-7, "(x * v) @ v");
    });
}

/// Differential seed 9339: a stack of matrices times one matrix is one taller product, `[160, 4] x [4, 16]`, and
/// its result seen as `[2, 16, 5, 16]` joins its epilogue; a maximum with a `[1, 5, 16]` operand broadcast over that
/// shape cannot be read in the product's rows (row r needs `r % 5`), so it must run in a kernel of its own. The
/// scheduler asked to split it from a rows kernel, found it in none, and asked again: a panic.
#[test]
fn an_epilogue_member_no_view_composes_into_leaves_the_product() {
    let vals = |n: usize, s: usize| (0..n).map(|i| (((i + s) * 37) % 17) as f32 / 3.0 - 2.5).collect::<Vec<f32>>();
    for dev in devices() {
        let a = Tensor::from_vec_on(vals(640, 2), [2, 16, 5, 4], &dev);
        let w = Tensor::from_vec_on(vals(64, 1), [1, 4, 16], &dev);
        let b = Tensor::from_vec_on(vals(80, 3), [1, 5, 16], &dev).rsqrt();
        let top = b.maximum(&a.matmul(&w));
        check(&top, 1e-5, 1e-5, &format!("maximum of a reshaped product on {}", dev.name()));
        check(&top.reshape([512, 5]).matmul(&b), 1e-5, 1e-5, &format!("and its product on {}", dev.name()));
    }
}

/// Differential seed 1362: `x < x` is false for every x, and lavapipe's compiler, knowing that, folded the `0 / y`
/// it selected down to 0 even where y is NaN (0 / NaN is NaN), so `argmin` missed the NaN that wins it. The
/// comparison of a value with itself now reads its `false` from the parameters.
#[test]
fn a_value_compared_with_itself_folds_nothing_after_it() {
    let mut y: Vec<f32> = (0..256).map(|i| (i % 7) as f32 + 1.0).collect();
    y[9 * 16 + 1] = f32::NAN;
    y[4 * 16 + 2] = 0.0;
    for dev in devices() {
        let x = Tensor::from_vec_on((0..256).map(|i| i as f32 * 0.5 - 20.0).collect(), [16, 16], &dev);
        let y = Tensor::from_vec_on(y.clone(), [16, 16], &dev);
        let zero = x.lt(&x).where_cond(&x, x.lt(&x));
        let what = format!("argmin of 0 / y on {}", dev.name());
        let got = check(&(&zero / &y).argmin(0), 0.0, 0.0, &what);
        assert_eq!((got[1], got[2]), (9.0, 4.0), "{what}: the NaNs win");
    }
}
