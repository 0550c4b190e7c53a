//! Masks, padding, flips, windows and running sums: each against a reference computed here with plain loops over
//! the input, on every backend, with the kernel counts their fusion promises.

mod common;

use common::{assert_close, devices, kernels, Rng};
use lazor::{DType, Device, Error, Tensor};
use std::panic::{catch_unwind, AssertUnwindSafe};

fn numel(dims: &[usize]) -> usize {
    dims.iter().product()
}

/// The coordinates of row-major index `i` of `dims`.
fn unravel(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut c = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        c[d] = i % dims[d];
        i /= dims[d];
    }
    c
}

/// The row-major index of coordinates `c` of `dims`.
fn ravel(c: &[usize], dims: &[usize]) -> usize {
    c.iter().zip(dims).fold(0, |a, (&c, &d)| a * d + c)
}

/// Host data and the same values in a realized tensor on `dev`.
fn stored(dev: &Device, rng: &mut Rng, dims: &[usize]) -> (Vec<f32>, Tensor) {
    common::stored_within(dev, rng, dims, 2.0)
}

fn panic_message(f: impl FnOnce()) -> String {
    let err = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    err.downcast_ref::<String>().cloned().or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string())).unwrap()
}

fn host_triangle(x: &[f32], dims: &[usize], k: isize, lower: bool) -> Vec<f32> {
    let r = dims.len();
    (0..x.len())
        .map(|i| {
            let c = unravel(i, dims);
            let diff = c[r - 1] as isize - c[r - 2] as isize;
            let keep = if lower { diff <= k } else { diff >= k };
            if keep {
                x[i]
            } else {
                0.0
            }
        })
        .collect()
}

/// `x` of shape `dims` with the axes `axes` reversed.
fn host_flip(x: &[f32], dims: &[usize], axes: &[usize]) -> Vec<f32> {
    (0..x.len())
        .map(|i| {
            let mut c = unravel(i, dims);
            for &a in axes {
                c[a] = dims[a] - 1 - c[a];
            }
            x[ravel(&c, dims)]
        })
        .collect()
}

/// `x` padded (pairs for the last axes first), and its shape.
fn host_pad(x: &[f32], dims: &[usize], pads: &[(usize, usize)], value: f32) -> (Vec<f32>, Vec<usize>) {
    let r = dims.len();
    let mut out_dims = dims.to_vec();
    for (i, &(b, a)) in pads.iter().enumerate() {
        out_dims[r - 1 - i] += b + a;
    }
    let out = (0..numel(&out_dims))
        .map(|i| {
            let mut c = unravel(i, &out_dims);
            for (j, &(b, _)) in pads.iter().enumerate() {
                let d = r - 1 - j;
                if c[d] < b || c[d] >= b + dims[d] {
                    return value;
                }
                c[d] -= b;
            }
            x[ravel(&c, dims)]
        })
        .collect();
    (out, out_dims)
}

/// The windows of `size` every `step` along axis `d`, and their shape.
fn host_unfold(x: &[f32], dims: &[usize], d: usize, size: usize, step: usize) -> (Vec<f32>, Vec<usize>) {
    let mut out_dims = dims.to_vec();
    out_dims[d] = (dims[d] - size) / step + 1;
    out_dims.push(size);
    let out = (0..numel(&out_dims))
        .map(|i| {
            let mut c = unravel(i, &out_dims);
            let w = c.pop().unwrap();
            c[d] = c[d] * step + w;
            x[ravel(&c, dims)]
        })
        .collect();
    (out, out_dims)
}

/// The running sum along axis `d`, in f64.
fn host_cumsum(x: &[f32], dims: &[usize], d: usize) -> Vec<f32> {
    (0..x.len())
        .map(|i| {
            let mut c = unravel(i, dims);
            let upto = c[d];
            (0..=upto)
                .map(|t| {
                    c[d] = t;
                    x[ravel(&c, dims)] as f64
                })
                .sum::<f64>() as f32
        })
        .collect()
}

#[test]
fn tril_and_triu_match_loops_and_fuse_into_their_consumer() {
    for dev in devices() {
        let mut rng = Rng::new(1);
        let shapes: [&[usize]; 7] = [&[3, 5], &[5, 3], &[2, 4, 4], &[1, 7, 1], &[0, 3], &[2, 3, 0], &[67, 129]];
        for dims in shapes {
            let (v, x) = stored(&dev, &mut rng, dims);
            for k in [-200, -3, -1, 0, 1, 2, 200] {
                let what = |op: &str| format!("{op}({k}) of {dims:?} on {}", dev.name());
                assert_close(&x.tril(k).to_vec(), &host_triangle(&v, dims, k, true), 0.0, 0.0, &what("tril"));
                assert_close(&x.triu(k).to_vec(), &host_triangle(&v, dims, k, false), 0.0, 0.0, &what("triu"));
            }
        }
        // Past one workgroup, fused: the mask is index math inside the consumer's kernel, nothing is stored.
        let dims = [3, 300, 257];
        let (v, x) = stored(&dev, &mut rng, &dims);
        let y = x.tril(-2) * 2.0 + &x.triu(5);
        let mut got = Vec::new();
        assert_eq!(kernels(&dev, || got = y.to_vec()), 1, "tril, triu and the arithmetic are one kernel");
        let (lo, hi) = (host_triangle(&v, &dims, -2, true), host_triangle(&v, &dims, 5, false));
        let want: Vec<f32> = lo.iter().zip(&hi).map(|(a, b)| a * 2.0 + b).collect();
        assert_close(&got, &want, 0.0, 0.0, "fused tril and triu");
        // Other types keep theirs: a bool matrix's upper triangle, an integer's lower one.
        let b = Tensor::full_on([3, 3], true, &dev).triu(1);
        assert_eq!(b.dtype(), DType::Bool);
        assert_eq!(b.to_vec_as::<bool>(), vec![false, true, true, false, false, true, false, false, false]);
        let i = Tensor::from_vec_on((1..=4).collect::<Vec<i32>>(), [2, 2], &dev).tril(0);
        assert_eq!(i.to_vec_as::<i32>(), vec![1, 0, 3, 4]);
        let x = x.narrow(0, 1, 1).squeeze(0);
        let rows = (x.tril(0) * 2.0).sum(-1);
        let mut got = Vec::new();
        assert_eq!(kernels(&dev, || got = rows.to_vec()), 1, "a masked sum is one fold");
        let want: Vec<f32> = (0..300)
            .map(|i| (0..=i.min(256)).map(|j| v[300 * 257 + i * 257 + j] as f64 * 2.0).sum::<f64>() as f32)
            .collect();
        assert_close(&got, &want, 1e-5, 1e-5, "sums of the lower triangle's rows");
    }
}

#[test]
fn masked_fill_broadcasts_the_mask_and_keeps_the_type() {
    for dev in devices() {
        let mut rng = Rng::new(2);
        let dims = [4, 5, 6];
        let (v, x) = stored(&dev, &mut rng, &dims);
        let mask_shapes: [&[usize]; 5] = [&[4, 5, 6], &[6], &[5, 1], &[4, 1, 6], &[]];
        for mdims in mask_shapes {
            let bits: Vec<bool> = (0..numel(mdims)).map(|_| rng.below(2) == 1).collect();
            let mask = Tensor::from_slice_on(&bits, mdims, &dev);
            let want: Vec<f32> = (0..v.len())
                .map(|i| {
                    let c = unravel(i, &dims);
                    let lead = dims.len() - mdims.len();
                    let mc: Vec<usize> =
                        (0..mdims.len()).map(|j| if mdims[j] == 1 { 0 } else { c[lead + j] }).collect();
                    if bits[ravel(&mc, mdims)] {
                        -7.5
                    } else {
                        v[i]
                    }
                })
                .collect();
            let y = x.masked_fill(&mask, -7.5);
            assert_eq!(y.shape(), &dims);
            let mut got = Vec::new();
            assert_eq!(kernels(&dev, || got = y.to_vec()), 1, "mask {mdims:?}");
            assert_close(&got, &want, 0.0, 0.0, &format!("masked_fill by {mdims:?} on {}", dev.name()));
        }
        // A mask computed from the tensor itself, and a fill of an integer tensor (the value converted as `as`).
        let y = x.masked_fill(&x.lt(0.0), f32::NEG_INFINITY).exp();
        let want: Vec<f32> = v.iter().map(|&a| if a < 0.0 { 0.0 } else { a.exp() }).collect();
        assert_close(&y.to_vec(), &want, 1e-6, 0.0, "masked_fill with -inf");
        let i = Tensor::from_vec_on(vec![1i32, 2, 3], [3], &dev);
        let m = Tensor::from_vec_on(vec![true, false, true], [3], &dev);
        assert_eq!(i.masked_fill(&m, 9.7).to_vec_as::<i32>(), vec![9, 2, 9]);
        // Empty.
        let e = Tensor::zeros_on([0, 3], &dev).masked_fill(&Tensor::full_on([3], true, &dev), 1.0);
        assert_eq!((e.shape(), e.to_vec().len()), (&[0usize, 3][..], 0));
    }
}

/// An attention's masked softmax: its mask and scale, which each of the softmax's three passes reads, are computed
/// once per element where the row is held in registers (rows of up to 1024 f32), and the answer is the same
/// either way.
#[test]
fn a_causally_masked_softmax_is_one_kernel_at_rows_held_in_registers_and_past_them() {
    for dev in devices() {
        let mut rng = Rng::new(5);
        for t in [8, 256, 260, 2048] {
            let dims = [3, t, t];
            let (v, x) = stored(&dev, &mut rng, &dims);
            let future = Tensor::ones_on([t, t], &dev).triu(1).ne(0.0);
            let scale = 0.125;
            let y = (&x * scale).masked_fill(&future, f32::NEG_INFINITY).softmax(-1);
            let mut want = vec![0.0f32; v.len()];
            for (r, row) in v.chunks(t).enumerate() {
                let i = r % t;
                let s: Vec<f64> = row[..=i].iter().map(|&a| (a * scale) as f64).collect();
                let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = s.iter().map(|a| (a - max).exp()).sum();
                for j in 0..=i {
                    want[r * t + j] = ((s[j] - max).exp() / sum) as f32;
                }
            }
            let mut got = Vec::new();
            assert_eq!(kernels(&dev, || got = y.to_vec()), 1, "rows of {t}");
            assert_close(&got, &want, 1e-5, 1e-6, &format!("masked softmax, rows of {t}, on {}", dev.name()));
        }
    }
}

#[test]
fn pad_matches_loops_and_stores_no_constant() {
    for dev in devices() {
        let mut rng = Rng::new(3);
        type Case<'a> = (&'a [usize], &'a [(usize, usize)]);
        let cases: [Case; 7] = [
            (&[5], &[(2, 3)]),
            (&[3, 4], &[(1, 0), (0, 2)]),
            (&[2, 3, 4], &[(0, 0), (3, 1)]),
            (&[2, 3, 4], &[(1, 1), (1, 1), (1, 1)]),
            (&[2, 3], &[]),
            (&[0, 3], &[(1, 2)]),
            (&[0, 3], &[(0, 0), (2, 1)]),
        ];
        for (dims, pads) in cases {
            let (v, x) = stored(&dev, &mut rng, dims);
            let (want, want_dims) = host_pad(&v, dims, pads, 0.5);
            let y = x.pad(pads, 0.5);
            assert_eq!(y.shape(), want_dims.as_slice());
            assert_close(&y.to_vec(), &want, 0.0, 0.0, &format!("pad {pads:?} of {dims:?} on {}", dev.name()));
        }
        // Past one workgroup, of an expression, then a consumer: one kernel, no constant part in memory.
        let dims = [33, 300];
        let (v, x) = stored(&dev, &mut rng, &dims);
        let pads = [(3, 5), (2, 0)];
        let y = (&x * 3.0).pad(&pads, -1.0) + 1.0;
        let mut got = Vec::new();
        assert_eq!(kernels(&dev, || got = y.to_vec()), 1, "pad and its consumer are one kernel");
        let scaled: Vec<f32> = v.iter().map(|a| a * 3.0).collect();
        let (want, _) = host_pad(&scaled, &dims, &pads, -1.0);
        let want: Vec<f32> = want.iter().map(|a| a + 1.0).collect();
        assert_close(&got, &want, 0.0, 0.0, "pad of an expression");
        // Other types: an integer tensor padded with a converted value.
        let i = Tensor::from_vec_on(vec![1i32, 2], [2], &dev).pad(&[(1, 1)], -3.9);
        assert_eq!(i.to_vec_as::<i32>(), vec![-3, 1, 2, -3]);
    }
}

#[test]
fn flip_reads_backwards_through_every_kind_of_consumer() {
    for dev in devices() {
        let mut rng = Rng::new(4);
        let shapes: [&[usize]; 5] = [&[7], &[3, 5], &[2, 3, 4], &[0, 3], &[1, 4, 1]];
        for dims in shapes {
            let (v, x) = stored(&dev, &mut rng, dims);
            let r = dims.len();
            let mut sets: Vec<Vec<isize>> = (0..r as isize).map(|d| vec![d]).collect();
            sets.push((0..r as isize).collect());
            sets.push(vec![-1]);
            sets.push(vec![]);
            for set in sets {
                let axes: Vec<usize> =
                    set.iter().map(|&d| if d < 0 { (d + r as isize) as usize } else { d as usize }).collect();
                let what = format!("flip {set:?} of {dims:?} on {}", dev.name());
                assert_close(&x.flip(&set).to_vec(), &host_flip(&v, dims, &axes), 0.0, 0.0, &what);
            }
        }
        // Of a transposed view and of a narrowed transposed view: one kernel, reading the source backwards.
        let dims = [40, 70];
        let (v, x) = stored(&dev, &mut rng, &dims);
        let t: Vec<f32> = (0..70 * 40).map(|i| v[(i % 40) * 70 + i / 40]).collect();
        for axes in [vec![0], vec![1], vec![0, 1]] {
            let set: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
            let y = x.t().flip(&set) * 2.0;
            let mut got = Vec::new();
            assert_eq!(kernels(&dev, || got = y.to_vec()), 1, "flip {axes:?} of a transpose");
            let want: Vec<f32> = host_flip(&t, &[70, 40], &axes).iter().map(|a| a * 2.0).collect();
            assert_close(&got, &want, 0.0, 0.0, &format!("flip {axes:?} of x.t()"));
            let n = x.t().narrow(0, 5, 30).narrow(1, 3, 17).flip(&set);
            let sub: Vec<f32> = (0..30 * 17).map(|i| t[(5 + i / 17) * 40 + 3 + i % 17]).collect();
            let mut got = Vec::new();
            assert_eq!(kernels(&dev, || got = n.to_vec()), 1, "flip {axes:?} of a narrowed transpose");
            assert_close(&got, &host_flip(&sub, &[30, 17], &axes), 0.0, 0.0, "flip of a narrowed transpose");
            // Flipping back is the identity, and a flip of an expression is inlined.
            assert_close(&x.t().flip(&set).flip(&set).to_vec(), &t, 0.0, 0.0, "flip twice");
            let e = (x.t() + 1.0).flip(&set);
            let want: Vec<f32> = host_flip(&t, &[70, 40], &axes).iter().map(|a| a + 1.0).collect();
            let mut got = Vec::new();
            assert_eq!(kernels(&dev, || got = e.to_vec()), 1);
            assert_close(&got, &want, 0.0, 0.0, "flip of an expression");
        }
        // Folds over flipped views, along and across the flipped axis.
        let f = x.flip([0]);
        let fv = host_flip(&v, &dims, &[0]);
        let col_sums: Vec<f32> = (0..70).map(|j| (0..40).map(|i| fv[i * 70 + j] as f64).sum::<f64>() as f32).collect();
        let row_max: Vec<f32> =
            (0..40).map(|i| v[i * 70..(i + 1) * 70].iter().copied().fold(f32::MIN, f32::max)).collect();
        assert_close(&f.sum(0).to_vec(), &col_sums, 1e-5, 1e-5, "sum across the flip");
        assert_close(&x.flip([1]).max(1).to_vec(), &row_max, 0.0, 0.0, "max along the flip");
        let first: Vec<f32> =
            (0..40).map(|i| fv[i * 70..(i + 1) * 70].iter().map(|&a| a as f64).sum::<f64>() as f32).collect();
        assert_close(&f.sum(1).to_vec(), &first, 1e-5, 1e-5, "sum along rows of a flip");
        assert_eq!(f.flip([1]).argmax(1).to_vec_as::<i32>().len(), 40);
        // Matmul operands read backwards, both of them, on both sides of k.
        let (w, wt) = stored(&dev, &mut rng, &[70, 9]);
        let a = host_flip(&v, &dims, &[0, 1]);
        let b = host_flip(&w, &[70, 9], &[0]);
        let want: Vec<f32> = (0..40 * 9)
            .map(|o| (0..70).map(|k| a[(o / 9) * 70 + k] as f64 * b[k * 9 + o % 9] as f64).sum::<f64>() as f32)
            .collect();
        let p = x.flip([0, 1]).matmul(&wt.flip([0]));
        assert_close(&p.to_vec(), &want, 1e-5, 1e-5, &format!("matmul of flips on {}", dev.name()));
        let bt = host_flip(&w, &[70, 9], &[1]);
        let want: Vec<f32> = (0..40 * 9)
            .map(|o| (0..70).map(|k| v[(o / 9) * 70 + k] as f64 * bt[k * 9 + o % 9] as f64).sum::<f64>() as f32)
            .collect();
        assert_close(&x.matmul(&wt.flip([-1])).to_vec(), &want, 1e-5, 1e-5, "matmul by a column-flipped matrix");
        // A matrix-vector product with a flipped vector.
        let want: Vec<f32> =
            (0..40).map(|i| (0..70).map(|k| v[i * 70 + k] as f64 * v[69 - k] as f64).sum::<f64>() as f32).collect();
        let vecr = x.narrow(0, 0, 1).squeeze(0).flip([0]);
        assert_close(&x.matmul(&vecr).to_vec(), &want, 1e-5, 1e-5, "matrix times flipped vector");
        // Big enough for the vectorized strided path: the flipped axis is read element by element.
        let dims = [257, 300];
        let (v, x) = stored(&dev, &mut rng, &dims);
        let y = x.flip([-1]) + &x;
        let want: Vec<f32> = host_flip(&v, &dims, &[1]).iter().zip(&v).map(|(a, b)| a + b).collect();
        assert_close(&y.to_vec(), &want, 0.0, 0.0, "big flip");
        let t: Vec<f32> = (0..300 * 257).map(|i| v[(i % 257) * 300 + i / 257]).collect();
        for axes in [vec![0], vec![1], vec![0, 1]] {
            // Flipping the columns keeps the rows' stride 1: the transposed load goes through workgroup tiles.
            let set: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
            let y = x.t().flip(&set) + 0.0;
            assert_close(&y.to_vec(), &host_flip(&t, &[300, 257], &axes), 0.0, 0.0, "big flip of a transpose");
        }
        // A long fold over a flipped axis (two stages), and a flip of a concatenation (stored, then read back).
        let flat = x.flatten().flip([0]);
        let total: f64 = v.iter().map(|&a| a as f64).sum();
        assert_close(&flat.sum(0).to_vec(), &[total as f32], 1e-5, 1e-3, "sum of a long flip");
        let half: Vec<f32> = v.iter().rev().take(1000).copied().collect();
        assert_close(&flat.narrow(0, 0, 1000).to_vec(), &half, 0.0, 0.0, "start of a long flip");
        let padded = x.narrow(0, 0, 3).pad(&[(2, 1), (1, 0)], 9.0);
        let (p, pd) = host_pad(&v[..3 * 300], &[3, 300], &[(2, 1), (1, 0)], 9.0);
        for axes in [vec![0], vec![1], vec![0, 1]] {
            let set: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
            let what = format!("flip {axes:?} of a pad on {}", dev.name());
            assert_close(&(padded.flip(&set) * 1.0).to_vec(), &host_flip(&p, &pd, &axes), 0.0, 0.0, &what);
        }
        // Tiled products of flipped operands.
        let (w, wt) = stored(&dev, &mut rng, &[300, 96]);
        let a = host_flip(&v, &dims, &[0, 1]);
        let b = host_flip(&w, &[300, 96], &[0]);
        let want: Vec<f32> = (0..257 * 96)
            .map(|o| (0..300).map(|k| a[(o / 96) * 300 + k] as f64 * b[k * 96 + o % 96] as f64).sum::<f64>() as f32)
            .collect();
        let p = x.flip([0, 1]).matmul(&wt.flip([0]));
        assert_close(&p.to_vec(), &want, 1e-4, 1e-4, &format!("tiled matmul of flips on {}", dev.name()));
        let bt: Vec<f32> = host_flip(&w, &[300, 96], &[1]);
        let want: Vec<f32> = (0..257 * 96)
            .map(|o| (0..300).map(|k| v[(o / 96) * 300 + k] as f64 * bt[k * 96 + o % 96] as f64).sum::<f64>() as f32)
            .collect();
        let p = x.matmul(&wt.flip([1])) + 1.0;
        let want: Vec<f32> = want.iter().map(|a| a + 1.0).collect();
        assert_close(&p.to_vec(), &want, 1e-4, 1e-4, "tiled matmul by a column-flipped matrix, with an epilogue");
    }
}

#[test]
fn unfold_is_a_view_of_overlapping_gapped_and_exact_windows() {
    for dev in devices() {
        let mut rng = Rng::new(5);
        type Case<'a> = (&'a [usize], usize, usize, usize);
        let cases: [Case; 9] = [
            (&[10], 0, 3, 1),
            (&[10], 0, 3, 2),
            (&[10], 0, 3, 3),
            (&[10], 0, 2, 4),
            (&[11], 0, 11, 5),
            (&[3, 9, 4], 1, 4, 3),
            (&[3, 9, 4], 2, 1, 1),
            (&[3, 0, 4], 2, 2, 1),
            (&[0], 0, 0, 1),
        ];
        for (dims, d, size, step) in cases {
            let (v, x) = stored(&dev, &mut rng, dims);
            let (want, want_dims) = host_unfold(&v, dims, d, size, step);
            let y = x.unfold(d, size, step);
            assert_eq!(y.shape(), want_dims.as_slice(), "unfold({d}, {size}, {step}) of {dims:?}");
            let what = format!("unfold({d}, {size}, {step}) of {dims:?} on {}", dev.name());
            let mut got = Vec::new();
            let k = kernels(&dev, || got = y.to_vec());
            assert!(k <= 1, "{what}: {k} kernels");
            assert_close(&got, &want, 0.0, 0.0, &what);
        }
        // Unfold of a transposed view, windows of windows, and a fold over the windows fused with them.
        let dims = [50, 41];
        let (v, x) = stored(&dev, &mut rng, &dims);
        let t: Vec<f32> = (0..41 * 50).map(|i| v[(i % 50) * 41 + i / 50]).collect();
        let (want, _) = host_unfold(&t, &[41, 50], 1, 5, 3);
        assert_close(&x.t().unfold(-1, 5, 3).to_vec(), &want, 0.0, 0.0, "unfold of a transpose");
        let (w1, d1) = host_unfold(&v, &dims, 0, 4, 2);
        let (w2, _) = host_unfold(&w1, &d1, 1, 3, 2);
        let y = x.unfold(0, 4, 2).unfold(1, 3, 2);
        assert_close(&y.to_vec(), &w2, 0.0, 0.0, "windows of windows");
        let (w, wd) = host_unfold(&v, &dims, 1, 7, 2);
        let size = wd[2];
        let want: Vec<f32> =
            w.chunks(size).map(|c| c.iter().copied().fold(f32::NEG_INFINITY, f32::max) * 2.0).collect();
        let m = x.unfold(1, 7, 2).max(-1) * 2.0;
        let mut got = Vec::new();
        assert_eq!(kernels(&dev, || got = m.to_vec()), 1, "a windowed max is one fold");
        assert_close(&got, &want, 0.0, 0.0, "windowed max");
        // Past one workgroup.
        let dims = [5000];
        let (v, x) = stored(&dev, &mut rng, &dims);
        let (want, _) = host_unfold(&v, &dims, 0, 13, 7);
        assert_close(&(x.unfold(0, 13, 7) + 0.0).to_vec(), &want, 0.0, 0.0, "long unfold");
    }
}

#[test]
fn cumsum_matches_loops_on_short_and_long_axes() {
    for dev in devices() {
        let mut rng = Rng::new(6);
        type Case<'a> = (&'a [usize], isize);
        let cases: [Case; 11] = [
            (&[1], 0),
            (&[7], 0),
            (&[3, 5], 0),
            (&[3, 5], -1),
            (&[2, 128], 1),
            (&[2, 129], 1),
            (&[3, 1000], -1),
            (&[1000, 3], 0),
            (&[2, 9000], -1),
            (&[0, 4], 0),
            (&[4, 0], 1),
        ];
        for (dims, d) in cases {
            let (v, x) = stored(&dev, &mut rng, dims);
            let axis = if d < 0 { (d + dims.len() as isize) as usize } else { d as usize };
            let want = host_cumsum(&v, dims, axis);
            let n = dims[axis] as f32;
            let what = format!("cumsum({d}) of {dims:?} on {}", dev.name());
            let got = x.cumsum(d).to_vec();
            assert_close(&got, &want, 1e-5, 1e-6 * n.max(1.0) * 4.0, &what);
        }
        // A short axis is one fold; its consumer joins it. A long one is a few.
        let (_, x) = stored(&dev, &mut rng, &[64, 100]);
        let y = x.cumsum(1) * 2.0;
        assert_eq!(kernels(&dev, || drop(y.to_vec())), 1, "short cumsum");
        let (_, x) = stored(&dev, &mut rng, &[4, 5000]);
        let y = x.cumsum(1);
        let k = kernels(&dev, || drop(y.to_vec()));
        assert!(k <= 4, "long cumsum took {k} kernels");
        // Types: bools count in i32, integers stay integers, halves round once.
        let b = Tensor::from_vec_on(vec![true, false, true, true], [4], &dev).cumsum(0);
        assert_eq!(b.dtype(), DType::I32);
        assert_eq!(b.to_vec_as::<i32>(), vec![1, 1, 2, 3]);
        let i = Tensor::from_vec_on(vec![5i32, -2, 7], [3], &dev).cumsum(0);
        assert_eq!(i.to_vec_as::<i32>(), vec![5, 3, 10]);
        let h = Tensor::from_vec_on(vec![0.5f32; 300], [300], &dev).to_dtype(DType::F16).cumsum(0);
        assert_eq!(h.dtype(), DType::F16);
        let want: Vec<f32> = (1..=300).map(|i| i as f32 * 0.5).collect();
        assert_close(&h.to_dtype(DType::F32).to_vec(), &want, 0.0, 0.0, "f16 cumsum of halves");
    }
}

/// A bad call as a `try_` twin and as the panicking method, with the op and an argument its message must name.
type Case<'a> = (Box<dyn Fn() -> Result<Tensor, Error> + 'a>, Box<dyn Fn() + 'a>, &'static str, &'static str);

#[test]
fn bad_arguments_name_the_op_and_the_shape_at_the_caller() {
    for dev in devices() {
        let a = Tensor::zeros_on([2, 3], &dev);
        let v = Tensor::zeros_on([3], &dev);
        let mask = Tensor::full_on([2], true, &dev);
        let cases: Vec<Case> = vec![
            (Box::new(|| v.try_tril(0)), Box::new(|| drop(v.tril(0))), "tril", "2 axes"),
            (Box::new(|| v.try_triu(1)), Box::new(|| drop(v.triu(1))), "triu", "2 axes"),
            (
                Box::new(|| a.try_masked_fill(&mask, 1.0)),
                Box::new(|| drop(a.masked_fill(&mask, 1.0))),
                "masked_fill",
                "[2]",
            ),
            (Box::new(|| a.try_masked_fill(&a, 1.0)), Box::new(|| drop(a.masked_fill(&a, 1.0))), "masked_fill", "bool"),
            (Box::new(|| a.try_pad(&[(1, 1); 3], 0.0)), Box::new(|| drop(a.pad(&[(1, 1); 3], 0.0))), "pad", "3"),
            (Box::new(|| a.try_flip([2])), Box::new(|| drop(a.flip([2]))), "flip", "2"),
            (Box::new(|| a.try_flip([0, -2])), Box::new(|| drop(a.flip([0, -2]))), "flip", "twice"),
            (Box::new(|| a.try_unfold(1, 4, 1)), Box::new(|| drop(a.unfold(1, 4, 1))), "unfold", "size 4"),
            (Box::new(|| a.try_unfold(1, 2, 0)), Box::new(|| drop(a.unfold(1, 2, 0))), "unfold", "step"),
            (Box::new(|| a.try_unfold(-3, 1, 1)), Box::new(|| drop(a.unfold(-3, 1, 1))), "unfold", "-3"),
            (Box::new(|| a.try_cumsum(2)), Box::new(|| drop(a.cumsum(2))), "cumsum", "2"),
        ];
        for (try_it, panic_it, op, arg) in cases {
            let err = try_it().expect_err(op).to_string();
            assert!(err.contains(op) && err.contains(arg), "{op}: {err}");
            assert!(err.contains("[2, 3]") || err.contains("[3]"), "{op} names the shape: {err}");
            assert_eq!(panic_message(panic_it), err, "the panic says what the error says");
        }
        // #[track_caller]: the panic is located at this file's line.
        let location = std::sync::Arc::new(std::sync::Mutex::new(None));
        let loc = location.clone();
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            *loc.lock().unwrap() = info.location().map(|l| (l.file().to_string(), l.line()));
        }));
        #[rustfmt::skip]
        let (line, _) = (line!(), catch_unwind(AssertUnwindSafe(|| drop(a.unfold(0, 5, 1)))));
        std::panic::set_hook(hook);
        let (file, at) = location.lock().unwrap().clone().unwrap();
        assert!(file.ends_with("masks.rs") && at == line, "panic located at {file}:{at}");
    }
}
