//! Convolution and pooling against loops over the input written here, on every backend: odd shapes, strides,
//! padding, empty batches, and the kernels a forward pass takes.

mod common;

use common::{assert_close, devices, kernels, Rng};
use lazor::{DType, Device, Error, Tensor};
use std::panic::{catch_unwind, AssertUnwindSafe};

fn stored(dev: &Device, rng: &mut Rng, dims: &[usize]) -> (Vec<f32>, Tensor) {
    common::stored_within(dev, rng, dims, 1.0)
}

/// `torch.nn.functional.conv2d` by its definition, in f64: the output and its shape.
#[allow(clippy::too_many_arguments)]
fn host_conv(
    x: &[f32],
    [n, c, h, w]: [usize; 4],
    wt: &[f32],
    [o, _, kh, kw]: [usize; 4],
    bias: Option<&[f32]>,
    (sh, sw): (usize, usize),
    (ph, pw): (usize, usize),
) -> (Vec<f32>, [usize; 4]) {
    let (oh, ow) = ((h + 2 * ph - kh) / sh + 1, (w + 2 * pw - kw) / sw + 1);
    let mut out = Vec::with_capacity(n * o * oh * ow);
    for b in 0..n {
        for oc in 0..o {
            for y in 0..oh {
                for z in 0..ow {
                    let mut acc = bias.map_or(0.0, |bias| bias[oc] as f64);
                    for ic in 0..c {
                        for i in 0..kh {
                            for j in 0..kw {
                                let (r, s) = ((y * sh + i) as isize - ph as isize, (z * sw + j) as isize - pw as isize);
                                if r < 0 || s < 0 || r >= h as isize || s >= w as isize {
                                    continue;
                                }
                                let xv = x[((b * c + ic) * h + r as usize) * w + s as usize] as f64;
                                acc += xv * wt[((oc * c + ic) * kh + i) * kw + j] as f64;
                            }
                        }
                    }
                    out.push(acc as f32);
                }
            }
        }
    }
    (out, [n, o, oh, ow])
}

/// Max or average pooling of the last two axes by its definition: the output and its shape.
fn host_pool(
    x: &[f32],
    dims: &[usize],
    (kh, kw): (usize, usize),
    (sh, sw): (usize, usize),
    max: bool,
) -> (Vec<f32>, Vec<usize>) {
    let r = dims.len();
    let (h, w) = (dims[r - 2], dims[r - 1]);
    let (oh, ow) = ((h - kh) / sh + 1, (w - kw) / sw + 1);
    let planes: usize = dims[..r - 2].iter().product();
    let mut out = Vec::new();
    for p in 0..planes {
        for y in 0..oh {
            for z in 0..ow {
                let window = (0..kh).flat_map(|i| (0..kw).map(move |j| (y * sh + i, z * sw + j)));
                let values: Vec<f64> = window.map(|(a, b)| x[(p * h + a) * w + b] as f64).collect();
                out.push(if max {
                    values.iter().copied().fold(f64::NEG_INFINITY, f64::max) as f32
                } else {
                    (values.iter().sum::<f64>() / values.len() as f64) as f32
                });
            }
        }
    }
    let mut shape = dims[..r - 2].to_vec();
    shape.extend([oh, ow]);
    (out, shape)
}

#[test]
fn conv2d_matches_loops_with_strides_padding_and_bias() {
    for dev in devices() {
        let mut rng = Rng::new(1);
        type Case = ([usize; 4], [usize; 4], (usize, usize), (usize, usize), bool);
        let cases: [Case; 8] = [
            ([1, 1, 5, 5], [1, 1, 3, 3], (1, 1), (0, 0), false),
            ([2, 3, 7, 6], [4, 3, 3, 2], (2, 1), (1, 2), true),
            ([2, 3, 8, 8], [5, 3, 1, 1], (1, 1), (0, 0), true),
            ([1, 2, 5, 4], [3, 2, 5, 4], (1, 1), (0, 0), true),
            ([3, 4, 9, 11], [6, 4, 3, 3], (3, 2), (2, 1), false),
            ([1, 2, 4, 4], [2, 2, 2, 2], (5, 5), (1, 0), true),
            ([0, 3, 5, 5], [2, 3, 3, 3], (1, 1), (1, 1), true),
            ([2, 16, 33, 35], [24, 16, 3, 3], (1, 1), (1, 1), true),
        ];
        for (xd, wd, stride, padding, with_bias) in cases {
            let (xv, x) = stored(&dev, &mut rng, &xd);
            let (wv, w) = stored(&dev, &mut rng, &wd);
            let (bv, b) = stored(&dev, &mut rng, &[wd[0]]);
            let bias = with_bias.then_some(&b);
            let (want, want_dims) = host_conv(&xv, xd, &wv, wd, with_bias.then_some(&bv[..]), stride, padding);
            let y = x.conv2d(&w, bias, stride, padding);
            assert_eq!(y.shape(), &want_dims, "conv2d of {xd:?} by {wd:?}");
            let what = format!("conv2d of {xd:?} by {wd:?}, stride {stride:?}, padding {padding:?} on {}", dev.name());
            let k = (wd[1] * wd[2] * wd[3]) as f32;
            assert_close(&y.to_vec(), &want, 1e-5, 1e-6 * k.max(1.0) * 4.0, &what);
        }
        // An activation joins the product's epilogue with the bias: the padded input, its windows, the product.
        let (_, x) = stored(&dev, &mut rng, &[2, 16, 33, 35]);
        let (_, w) = stored(&dev, &mut rng, &[24, 16, 3, 3]);
        let (_, b) = stored(&dev, &mut rng, &[24]);
        let y = x.conv2d(&w, Some(&b), (1, 1), (1, 1)).relu();
        assert_eq!(kernels(&dev, || drop(y.to_vec())), 3, "pad, im2col, product with bias and relu");
        let y = x.conv2d(&w, Some(&b), (2, 2), (0, 0)).relu();
        assert_eq!(kernels(&dev, || drop(y.to_vec())), 2, "unpadded: im2col and the product");
        // A 1x1 convolution reads the input in place: only the product runs.
        let (_, w1) = stored(&dev, &mut rng, &[24, 16, 1, 1]);
        let y = x.conv2d(&w1, None, (1, 1), (0, 0));
        assert_eq!(kernels(&dev, || drop(y.to_vec())), 1, "1x1 convolution");
        // Half inputs give half outputs.
        let y = x.to_dtype(DType::F16).conv2d(&w.to_dtype(DType::F16), None, (1, 1), (1, 1));
        assert_eq!(y.dtype(), DType::F16);
        let want = x.conv2d(&w, None, (1, 1), (1, 1)).to_vec();
        assert_close(&y.to_dtype(DType::F32).to_vec(), &want, 1e-2, 2e-2, "f16 conv2d");
    }
}

#[test]
fn pooling_matches_loops() {
    for dev in devices() {
        let mut rng = Rng::new(2);
        type Case<'a> = (&'a [usize], (usize, usize), (usize, usize));
        let cases: [Case; 7] = [
            (&[2, 3, 7, 9], (2, 2), (2, 2)),
            (&[2, 3, 7, 9], (3, 3), (2, 1)),
            (&[1, 2, 6, 5], (3, 2), (1, 3)),
            (&[3, 8, 8], (2, 2), (2, 2)),
            (&[1, 1, 4, 4], (4, 4), (1, 1)),
            (&[0, 2, 4, 4], (2, 2), (2, 2)),
            (&[4, 8, 64, 66], (3, 3), (2, 2)),
        ];
        for (dims, kernel, stride) in cases {
            let (v, x) = stored(&dev, &mut rng, dims);
            for max in [true, false] {
                let (want, want_dims) = host_pool(&v, dims, kernel, stride, max);
                let y = if max { x.max_pool2d(kernel, stride) } else { x.avg_pool2d(kernel, stride) };
                assert_eq!(y.shape(), want_dims.as_slice());
                let what =
                    format!("{} of {dims:?} {kernel:?} {stride:?} on {}", if max { "max" } else { "avg" }, dev.name());
                let mut got = Vec::new();
                let k = kernels(&dev, || got = y.to_vec());
                assert!(k <= 2, "{what}: {k} kernels");
                assert_close(&got, &want, 1e-6, 1e-6, &what);
            }
        }
        // Integers: the maximum stays an integer, the mean is f32. NaN wins a window's maximum.
        let i = Tensor::from_vec_on((0..16).collect::<Vec<i32>>(), [1, 1, 4, 4], &dev);
        assert_eq!(i.max_pool2d((2, 2), (2, 2)).to_vec_as::<i32>(), vec![5, 7, 13, 15]);
        let m = i.avg_pool2d((2, 2), (2, 2));
        assert_eq!((m.dtype(), m.to_vec()), (DType::F32, vec![2.5, 4.5, 10.5, 12.5]));
        let mut nan = vec![1.0f32; 16];
        nan[5] = f32::NAN;
        let p = Tensor::from_vec_on(nan, [1, 4, 4], &dev).max_pool2d((2, 2), (2, 2)).to_vec();
        assert!(p[0].is_nan() && p[1..] == [1.0, 1.0, 1.0], "{p:?}");
    }
}

fn panic_message(f: impl FnOnce()) -> String {
    let err = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    err.downcast_ref::<String>().cloned().or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
}

/// A bad call as a `try_` twin and as the panicking method, with the op and an argument its message must name.
type Case<'a> = (Box<dyn Fn() -> Result<Tensor, Error> + 'a>, Box<dyn Fn() + 'a>, &'static str, &'static str);

#[test]
fn bad_arguments_name_the_op_and_the_shapes() {
    for dev in devices() {
        let x = Tensor::zeros_on([2, 3, 5, 5], &dev);
        let w = Tensor::zeros_on([4, 3, 3, 3], &dev);
        let w2 = Tensor::zeros_on([4, 2, 3, 3], &dev);
        let b = Tensor::zeros_on([3], &dev);
        let flat = Tensor::zeros_on([5, 5], &dev);
        let cases: Vec<Case> = vec![
            (
                Box::new(|| flat.try_conv2d(&w, None, (1, 1), (0, 0))),
                Box::new(|| drop(flat.conv2d(&w, None, (1, 1), (0, 0)))),
                "conv2d",
                "[5, 5]",
            ),
            (
                Box::new(|| x.try_conv2d(&w2, None, (1, 1), (0, 0))),
                Box::new(|| drop(x.conv2d(&w2, None, (1, 1), (0, 0)))),
                "conv2d",
                "[4, 2, 3, 3]",
            ),
            (
                Box::new(|| x.try_conv2d(&w, Some(&b), (1, 1), (0, 0))),
                Box::new(|| drop(x.conv2d(&w, Some(&b), (1, 1), (0, 0)))),
                "conv2d",
                "bias",
            ),
            (
                Box::new(|| x.try_conv2d(&w, None, (0, 1), (0, 0))),
                Box::new(|| drop(x.conv2d(&w, None, (0, 1), (0, 0)))),
                "conv2d",
                "stride",
            ),
            (
                Box::new(|| x.narrow(2, 0, 2).try_conv2d(&w, None, (1, 1), (0, 0))),
                Box::new(|| drop(x.narrow(2, 0, 2).conv2d(&w, None, (1, 1), (0, 0)))),
                "conv2d",
                "exceeds",
            ),
            (
                Box::new(|| flat.try_max_pool2d((2, 2), (2, 2))),
                Box::new(|| drop(flat.max_pool2d((2, 2), (2, 2)))),
                "max_pool2d",
                "[5, 5]",
            ),
            (
                Box::new(|| x.try_max_pool2d((6, 2), (1, 1))),
                Box::new(|| drop(x.max_pool2d((6, 2), (1, 1)))),
                "max_pool2d",
                "exceeds",
            ),
            (
                Box::new(|| x.try_avg_pool2d((2, 2), (0, 1))),
                Box::new(|| drop(x.avg_pool2d((2, 2), (0, 1)))),
                "avg_pool2d",
                "stride",
            ),
            (
                Box::new(|| x.try_avg_pool2d((0, 2), (1, 1))),
                Box::new(|| drop(x.avg_pool2d((0, 2), (1, 1)))),
                "avg_pool2d",
                "kernel",
            ),
        ];
        for (try_it, panic_it, op, arg) in cases {
            let err = try_it().expect_err(op).to_string();
            assert!(err.contains(op) && err.contains(arg), "{op}: {err}");
            assert!(
                err.contains("[2, 3, 5, 5]") || err.contains("[5, 5]") || err.contains("[2, 3, 2, 5]"),
                "{op} names the input's shape: {err}"
            );
            assert_eq!(panic_message(panic_it), err, "the panic says what the error says");
        }
    }
}
