//! Matmul against the f64 reference: shapes from 1 to 1100, views, broadcast batches, vectors, empty axes, NaN and
//! inf, fused prologues and epilogues with their dispatch counts, products stored through their copies' layout,
//! and the same values without fusion.
//!
//! Tolerance: each output is a length-k dot product accumulated in f32. Its rounding error is at most about k
//! roundings of partial sums, each below 2^-24 of a partial sum's size, and with inputs bounded by `ma` and `mb`
//! those partial sums stay near sqrt(k) * ma * mb. `tol(k)` allows k * 2^-23 * ma * mb (a margin of 2 sqrt(k) over
//! that estimate), so it grows linearly with k and stays far below the size of an error in indexing.

mod common;

use common::{assert_close, devices, Rng};
use lazor::half::f16;
use lazor::op::Tri;
use lazor::{DType, Device, Error, Tensor};

/// Every triangle a product may keep ([`Tri`] but `Full`).
const TRIANGLES: [Tri; 5] = [Tri::OutLower, Tri::OutUpper, Tri::Causal, Tri::ALower, Tri::AUpper];

/// Inputs are uniform in [-1, 1).
fn rand(dev: &Device, rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec_on(rng.vec(n, -1.0, 1.0), shape, dev)
}

fn tol(k: usize) -> f32 {
    1e-6 + k as f32 * f32::EPSILON
}

/// Computes `t` on the reference first (it reads realized values back as given), then on the device.
#[track_caller]
fn check(t: &Tensor, k: usize, what: &str) -> Vec<f32> {
    let want = lazor::reference::eval(&[t]).pop().unwrap();
    let got = t.to_vec();
    assert_close(&got, &want, 1e-5, tol(k), &format!("{what} on {}", t.device().name()));
    got
}

/// f16 inputs uniform in [-1, 1), realized, so a product reads them as they are.
fn rand16(dev: &Device, rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let t = Tensor::from_vec_on(rng.vec(n, -1.0, 1.0).into_iter().map(f16::from_f32).collect(), shape, dev);
    t.realize().unwrap();
    t
}

/// An f16 result against the reference (which rounds the f32 sum once, to f16, as the device does): one f16 step
/// (2^-10 relative) where the two sums fall on either side of a rounding boundary, plus `tol(k)`.
#[track_caller]
fn check16(t: &Tensor, k: usize, what: &str) {
    assert_eq!(t.dtype(), DType::F16, "{what}");
    let want: Vec<f32> = lazor::reference::eval(&[&t.to_dtype(DType::F32)]).pop().unwrap();
    let got: Vec<f32> = t.to_vec_as::<f16>().into_iter().map(f32::from).collect();
    assert_close(&got, &want, 2e-3, 4.0 * tol(k), &format!("{what} on {}", t.device().name()));
}

/// Dispatches `t`'s realize runs.
fn dispatches(t: &Tensor) -> u64 {
    let s = t.device().stats().dispatches;
    t.realize().unwrap();
    t.device().stats().dispatches - s
}

/// Realizes `t` as [`dispatches`] does, first taking the reference's values from its graph: once realized, a
/// tensor is a buffer, and the reference would read the device's own values back.
fn dispatches_checked(t: &Tensor, k: usize, what: &str) -> u64 {
    let want = lazor::reference::eval(&[t]).pop().unwrap();
    let n = dispatches(t);
    assert_close(&t.to_vec(), &want, 1e-5, tol(k), &format!("{what} on {}", t.device().name()));
    n
}

#[test]
fn random_shapes_match_the_reference() {
    let sizes = [1usize, 2, 3, 7, 31, 64, 65, 127, 128, 129, 257, 1000, 1100];
    for dev in devices() {
        let mut rng = Rng::new(1);
        for case in 0..40 {
            let (m, n, k) =
                (sizes[rng.below(sizes.len())], sizes[rng.below(sizes.len())], sizes[rng.below(sizes.len())]);
            // Keep the software rasterizer's share of the suite small: at most ~0.3 GFLOP per case.
            if m * n * k > 150_000_000 {
                continue;
            }
            let a = rand(&dev, &mut rng, &[m, k]);
            let b = rand(&dev, &mut rng, &[k, n]);
            let c = a.matmul(&b);
            assert_eq!(c.shape(), &[m, n]);
            check(&c, k, &format!("case {case}: [{m}, {k}] x [{k}, {n}]"));
        }
        // The edges of every tile shape at once, and primes.
        for (m, k, n) in [(1000, 1, 1000), (97, 101, 103), (1100, 257, 63), (63, 129, 1100), (4097, 3, 5)] {
            let a = rand(&dev, &mut rng, &[m, k]);
            let b = rand(&dev, &mut rng, &[k, n]);
            check(&a.matmul(&b), k, &format!("[{m}, {k}] x [{k}, {n}]"));
        }
    }
}

#[test]
fn constant_and_computed_operands() {
    // An operand that is a constant (never a buffer) or a short expression is computed inside the product's kernel;
    // a longer prologue (three ops) is stored first.
    for dev in devices() {
        let mut rng = Rng::new(31);
        let b = rand(&dev, &mut rng, &[40, 24]);
        let cases = [
            (Tensor::ones_on([17, 40], &dev).matmul(&b), "ones @ b", 1),
            (b.t().matmul(&Tensor::full_on([40, 5], 0.5, &dev)), "b^T @ full(0.5)", 1),
            ((&rand(&dev, &mut rng, &[17, 40]) * 2.0).matmul(&(&b - 0.5)), "2a @ (b - 0.5)", 1),
            ((&rand(&dev, &mut rng, &[17, 40]) * 2.0 + 1.0).exp().matmul(&b), "exp(2a + 1) @ b", 2),
        ];
        for (t, what, kernels) in cases {
            assert_eq!(dispatches_checked(&t, 40, what), kernels, "{what}: {}", dev.name());
        }
    }
}

#[test]
fn operands_are_read_through_their_views() {
    for dev in devices() {
        let mut rng = Rng::new(2);
        let (m, k, n) = (67, 45, 89);
        let at = rand(&dev, &mut rng, &[k, m]);
        let bt = rand(&dev, &mut rng, &[n, k]);
        let a = rand(&dev, &mut rng, &[m, k]);
        let b = rand(&dev, &mut rng, &[k, n]);
        let wide = rand(&dev, &mut rng, &[m + 10, k + 7]);
        for t in [&at, &bt, &a, &b, &wide] {
            t.realize().unwrap();
        }
        for (what, c) in [
            ("a.t() x b", at.t().matmul(&b)),
            ("a x b.t()", a.matmul(&bt.t())),
            ("a.t() x b.t()", at.t().matmul(&bt.t())),
            ("narrowed a", wide.narrow(0, 5, m).narrow(1, 3, k).matmul(&b)),
            ("narrowed b.t()", a.matmul(&wide.narrow(0, 2, n.min(m + 8)).narrow(1, 1, k).t())),
        ] {
            assert_eq!(dispatches_checked(&c, k, what), 1, "{what}: views are read in place, not copied");
        }
        // A permuted batch: [k, b, m] seen as [b, m, k].
        let x = rand(&dev, &mut rng, &[k, 3, m]);
        let y = rand(&dev, &mut rng, &[3, k, n]);
        x.realize().unwrap();
        y.realize().unwrap();
        let c = x.permute([1, 2, 0]).matmul(&y);
        assert_eq!(c.shape(), &[3, m, n]);
        assert_eq!(dispatches_checked(&c, k, "permuted batch"), 1);
    }
}

#[test]
fn batches_broadcast_and_vectors_follow_torch_matmul() {
    for dev in devices() {
        let mut rng = Rng::new(3);
        let cases: [(&[usize], &[usize], &[usize]); 10] = [
            (&[3, 1, 5, 7], &[4, 7, 6], &[3, 4, 5, 6]),
            (&[2, 5, 7], &[7, 6], &[2, 5, 6]),
            (&[5, 7], &[2, 3, 7, 6], &[2, 3, 5, 6]),
            (&[1, 5, 7], &[3, 7, 6], &[3, 5, 6]),
            (&[7], &[7, 6], &[6]),
            (&[5, 7], &[7], &[5]),
            (&[7], &[7], &[]),
            (&[7], &[3, 7, 6], &[3, 6]),
            (&[3, 5, 7], &[7], &[3, 5]),
            (&[64, 33, 20], &[64, 20, 17], &[64, 33, 17]),
        ];
        for (sa, sb, want) in cases {
            let a = rand(&dev, &mut rng, sa);
            let b = rand(&dev, &mut rng, sb);
            let c = a.matmul(&b);
            assert_eq!(c.shape(), want, "{sa:?} x {sb:?}");
            check(&c, sa[sa.len() - 1], &format!("{sa:?} x {sb:?}"));
        }
        // Past 65535 workgroups: one per small matrix.
        let a = rand(&dev, &mut rng, &[70_000, 2, 3]);
        let b = rand(&dev, &mut rng, &[70_000, 3, 2]);
        check(&a.matmul(&b), 3, "70,000 batches");
        // Long matrix-vector products, both layouts of the matrix.
        let mat = rand(&dev, &mut rng, &[3000, 2000]);
        let v = rand(&dev, &mut rng, &[2000]);
        let u = rand(&dev, &mut rng, &[3000]);
        check(&mat.matmul(&v), 2000, "[3000, 2000] x [2000]");
        check(&u.matmul(&mat), 3000, "[3000] x [3000, 2000]");
        check(&v.matmul(&mat.t()), 2000, "[2000] x [2000, 3000] transposed");
        check(&mat.t().matmul(&u), 3000, "[2000, 3000] transposed x [3000]");
    }
}

#[test]
fn empty_axes() {
    for dev in devices() {
        let mut rng = Rng::new(4);
        // k = 0: every output is an empty sum.
        let c = rand(&dev, &mut rng, &[3, 0]).matmul(&rand(&dev, &mut rng, &[0, 4]));
        assert_eq!(c.to_vec(), vec![0.0; 12]);
        let c = (rand(&dev, &mut rng, &[0]).matmul(&rand(&dev, &mut rng, &[0, 5])) + 1.0).relu();
        assert_eq!(c.to_vec(), vec![1.0; 5]);
        for (sa, sb, want) in [
            (&[0usize, 4][..], &[4usize, 5][..], &[0usize, 5][..]),
            (&[3, 4], &[4, 0], &[3, 0]),
            (&[0, 3, 4], &[4, 5], &[0, 3, 5]),
        ] {
            let c = rand(&dev, &mut rng, sa).matmul(&rand(&dev, &mut rng, sb));
            assert_eq!(c.shape(), want);
            assert!(c.to_vec().is_empty());
        }
    }
}

#[test]
fn nan_and_inf_propagate() {
    for dev in devices() {
        let mut rng = Rng::new(5);
        let (m, k, n) = (70, 40, 90);
        let mut va = rng.vec(m * k, -1.0, 1.0);
        va[3 * k + 7] = f32::NAN; // row 3 of the product is NaN
        va[10 * k + 2] = f32::INFINITY; // row 10 is +-inf where b's row 2 is nonzero
        let mut vb = rng.vec(k * n, -1.0, 1.0);
        vb[5 * n + 50] = f32::NAN; // column 50 is NaN
        for x in &mut vb[2 * n..3 * n] {
            *x = 0.5;
        }
        let a = Tensor::from_vec_on(va, [m, k], &dev);
        let b = Tensor::from_vec_on(vb, [k, n], &dev);
        let got = check(&a.matmul(&b), k, "NaN and inf");
        assert!(got[3 * n..4 * n].iter().all(|x| x.is_nan()));
        assert!((0..m).all(|i| got[i * n + 50].is_nan()));
        assert!(got[10 * n..11 * n].iter().enumerate().all(|(j, x)| j == 50 || *x == f32::INFINITY));
        // inf * 0 is NaN, in the matrix-vector kernels too.
        let v = Tensor::from_vec_on(vec![0.0; k], [k], &dev);
        let got = a.matmul(&v).to_vec();
        assert!(got[3].is_nan() && got[10].is_nan() && got[0] == 0.0);
    }
}

#[test]
fn epilogues_and_prologues_fuse() {
    for dev in devices() {
        let mut rng = Rng::new(6);
        let (m, k, n) = (130, 70, 150);
        let x = rand(&dev, &mut rng, &[m, k]);
        let w = rand(&dev, &mut rng, &[k, n]);
        let wt = rand(&dev, &mut rng, &[n, k]);
        let bias = rand(&dev, &mut rng, &[n]);
        let col_bias = rand(&dev, &mut rng, &[m, 1]);
        let bias_k = rand(&dev, &mut rng, &[k]);
        let r = rand(&dev, &mut rng, &[m, n]);
        for t in [&x, &w, &wt, &bias, &col_bias, &bias_k, &r] {
            t.realize().unwrap();
        }
        let one: [(&str, Tensor); 10] = [
            ("gelu(x w + bias)", (x.matmul(&w) + &bias).gelu()),
            ("x w * 0.5 + r", x.matmul(&w) * 0.5 + &r),
            ("relu(x w.t() + bias)", (x.matmul(&wt.t()) + &bias).relu()),
            ("silu(x w + column bias)", (x.matmul(&w) + &col_bias).silu()),
            ("tanh(x w) - r", x.matmul(&w).tanh() - &r),
            ("(2 x) w", (&x * 2.0).matmul(&w)),
            ("relu(x) w", x.relu().matmul(&w)),
            ("(x + bias_k) w", (&x + &bias_k).matmul(&w)),
            ("x exp(w.t()).t()", x.matmul(&wt.exp().t())),
            ("relu(x) w + bias, both ends", x.relu().matmul(&w) + &bias),
        ];
        for (what, t) in one {
            assert_eq!(dispatches_checked(&t, k, what), 1, "{what}: one kernel on {}", dev.name());
        }
        // A costly operand is stored first: its ops run once per element, not once per tile that loads it.
        let heavy = x.exp().sin().cos().matmul(&w);
        assert_eq!(dispatches_checked(&heavy, k, "heavy prologue"), 2);
        // The product read through a view cannot be the epilogue of its own kernel.
        let p = x.matmul(&w.narrow(1, 0, m));
        let t = &p + &p.t();
        assert_eq!(dispatches_checked(&t, k, "p + p.t()"), 2);
        // Two requested values of one kernel: the product and its epilogue.
        let p = x.matmul(&w);
        let q = (&p + &bias).relu();
        let s = dev.stats().dispatches;
        lazor::realize(&[&p, &q]).unwrap();
        assert_eq!(dev.stats().dispatches - s, 1);
        let (pv, qv) = (p.to_vec(), q.to_vec());
        let bv = bias.to_vec();
        for (i, (a, b)) in pv.iter().zip(&qv).enumerate() {
            assert_eq!(*b, (a + bv[i % n]).max(0.0), "element {i}");
        }
    }
}

#[test]
fn outputs_of_whole_column_quads_are_stored_as_vectors_with_their_epilogues() {
    // n a multiple of 4 (vector stores) beside n one past it (element stores), at tile edges (m past a tile, 132
    // columns past a 128-wide one), batched and split along k, with an epilogue stored beside the product.
    for dev in devices() {
        let mut rng = Rng::new(12);
        for (batch, m, k, n) in [(1, 130, 70, 132), (1, 130, 70, 133), (3, 33, 20, 36), (1, 64, 4096, 68)] {
            let a = rand(&dev, &mut rng, &[batch, m, k]);
            let b = rand(&dev, &mut rng, &[batch, k, n]);
            let bias = rand(&dev, &mut rng, &[n]);
            for t in [&a, &b, &bias] {
                t.realize().unwrap();
            }
            let p = a.matmul(&b);
            let y = (&p + &bias).relu();
            let want = lazor::reference::eval(&[&p, &y]);
            lazor::realize(&[&p, &y]).unwrap();
            let what = format!("{batch} x [{m}, {k}] x [{k}, {n}] on {}", dev.name());
            assert_close(&p.to_vec(), &want[0], 1e-5, tol(k), &format!("product of {what}"));
            assert_close(&y.to_vec(), &want[1], 1e-5, tol(k), &format!("relu(product + bias) of {what}"));
        }
    }
}

#[test]
fn a_concatenation_read_through_a_transposed_reshape_is_computed_by_its_copy() {
    // nanoGPT's attention backward: the q, k and v gradients of every head ([B, H, T, D] products) stacked as
    // [3, B, H, T, D], transposed to [B, T, 3, H, D] and read by the next products as [B * T, 3 * H * D]. The
    // reshape of the transpose is no single view, so it is stored; the copy that stores it computes the stack
    // (with its scale) rather than reading it from a buffer of its own: the three products, one copy, the product.
    for dev in devices() {
        let mut rng = Rng::new(11);
        let (b, h, t, d) = (2, 3, 33, 8);
        let mut grads = Vec::new();
        for _ in 0..3 {
            let x = rand(&dev, &mut rng, &[b, h, t, d]);
            let y = rand(&dev, &mut rng, &[b, h, d, d]);
            x.realize().unwrap();
            y.realize().unwrap();
            grads.push(x.matmul(&y));
        }
        let w = rand(&dev, &mut rng, &[3 * h * d, 20]);
        w.realize().unwrap();
        let stacked = Tensor::stack(&[&grads[0], &grads[1], &grads[2]], 0) * 0.5;
        let flat = stacked.permute([1, 3, 0, 2, 4]).reshape([b * t, 3 * h * d]);
        let out = flat.matmul(&w);
        let n = dispatches_checked(&out, 3 * h * d, "stacked gradients through a transposed reshape");
        assert_eq!(n, 5, "three products, the copy with the stack inlined, the product, on {}", dev.name());
    }
}

#[test]
fn products_store_where_their_copies_would_put_them() {
    // A product read only by a copy into another layout stores its elements there itself: attention's output
    // `[B, H, T, D]` read as `[B, T, H * D]` by the projection, and its q, k and v gradients stacked into
    // `[B, T, 3, H, D]` and read by the next product, each product storing its part of the stack. Sizes: past a
    // tile's edge (130 rows), columns a multiple of 4 (16-byte stores) or not (33).
    for dev in devices() {
        let mut rng = Rng::new(14);
        for (b, h, t, d) in [(2, 3, 33, 32), (1, 2, 130, 64), (2, 2, 17, 36), (1, 3, 40, 33)] {
            let what = format!("[{b}, {h}, {t}, {d}] on {}", dev.name());
            let mut realized = |shape: &[usize]| {
                let x = rand(&dev, &mut rng, shape);
                x.realize().unwrap();
                x
            };
            let (x, y, w) = (realized(&[b, h, t, d]), realized(&[b, h, d, d]), realized(&[h * d, 5]));
            let heads = x.matmul(&y).permute([0, 2, 1, 3]).reshape([b, t, h * d]);
            let n = dispatches_checked(&heads.matmul(&w), h * d, &format!("heads side by side, {what}"));
            assert_eq!(n, 2, "the product stores into the projection's operand: {what}");
            // With a scale the copy computes something: it stays.
            let scaled = (x.matmul(&y).permute([0, 2, 1, 3]) * 2.0).reshape([b, t, h * d]);
            assert_eq!(dispatches_checked(&scaled.matmul(&w), h * d, &format!("scaled, {what}")), 3, "{what}");

            let grads: Vec<Tensor> = (0..3).map(|_| realized(&[b, h, t, d]).matmul(&realized(&[b, h, d, d]))).collect();
            let w = realized(&[3 * h * d, 5]);
            let stacked = Tensor::stack(&[&grads[0], &grads[1], &grads[2]], 0).permute([1, 3, 0, 2, 4]);
            let out = stacked.reshape([b * t, 3 * h * d]).matmul(&w);
            let n = dispatches_checked(&out, 3 * h * d, &format!("stacked products, {what}"));
            assert_eq!(n, 4, "three products store their parts, then the product: {what}");
        }
        // A thin product (8 columns, a thread per row), and causal attention's `P v` (A's upper triangle dropped).
        let x = rand(&dev, &mut rng, &[2, 3, 300, 64]);
        let (y, w) = (rand(&dev, &mut rng, &[2, 3, 64, 8]), rand(&dev, &mut rng, &[24, 5]));
        lazor::realize(&[&x, &y, &w]).unwrap();
        let heads = x.matmul(&y).permute([0, 2, 1, 3]).reshape([2, 300, 24]);
        assert_eq!(dispatches_checked(&heads.matmul(&w), 64, "thin heads"), 2, "on {}", dev.name());
        let qkv: Vec<Tensor> = (0..3).map(|_| rand(&dev, &mut rng, &[2, 3, 64, 32])).collect();
        let w = rand(&dev, &mut rng, &[96, 5]);
        lazor::realize(&[&qkv[0], &qkv[1], &qkv[2], &w]).unwrap();
        let attention = lazor::nn::functional::scaled_dot_product_attention(&qkv[0], &qkv[1], &qkv[2], true);
        let heads = attention.permute([0, 2, 1, 3]).reshape([2, 64, 96]).matmul(&w);
        let n = dispatches_checked(&heads, 96, "causal attention's heads");
        assert_eq!(n, 4, "scores, softmax, P v storing into the projection's operand, the projection: {}", dev.name());
    }
}

#[test]
fn random_copies_of_products_match_the_reference() {
    // One to three products of one shape (past the thin kernel's 16 on both sides, so they run tiled), stacked
    // along a random axis or not, permuted at random and flattened, then read by a product: wherever the copy is
    // one the products can store themselves, they do, and the values stay the reference's.
    for dev in devices() {
        let mut rng = Rng::new(16);
        for case in 0..24 {
            let batch: Vec<usize> = (0..1 + rng.below(2)).map(|_| 1 + rng.below(3)).collect();
            let (m, k, n) = (17 + rng.below(50), 8 + rng.below(30), 17 + rng.below(24));
            let dims = |x: usize, y: usize| -> Vec<usize> { batch.iter().copied().chain([x, y]).collect() };
            let count = 1 + rng.below(3);
            let products: Vec<Tensor> = (0..count)
                .map(|_| rand(&dev, &mut rng, &dims(m, k)).matmul(&rand(&dev, &mut rng, &dims(k, n))))
                .collect();
            let mut t = if count == 1 {
                products[0].clone()
            } else {
                let parts: Vec<&Tensor> = products.iter().collect();
                Tensor::stack(&parts, rng.below(batch.len() + 3))
            };
            let mut perm: Vec<usize> = (0..t.ndim()).collect();
            for i in (1..perm.len()).rev() {
                perm.swap(i, rng.below(i + 1));
            }
            t = t.permute(perm.as_slice());
            let rows = t.shape()[..t.ndim() - 1].iter().product::<usize>();
            let cols = t.shape()[t.ndim() - 1];
            let w = rand(&dev, &mut rng, &[cols, 5]);
            let out = t.reshape([rows, cols]).matmul(&w);
            dispatches_checked(
                &out,
                k * cols,
                &format!("case {case}: {count} x {batch:?} [{m}, {k}] x [{k}, {n}], {perm:?}"),
            );
        }
    }
}

#[test]
fn a_product_read_by_its_copy_and_by_others_keeps_its_own_buffer() {
    // The copy is not the product's only reader, or the product is asked for: both are stored, as before.
    for dev in devices() {
        let mut rng = Rng::new(15);
        let x = rand(&dev, &mut rng, &[2, 3, 33, 32]);
        let y = rand(&dev, &mut rng, &[2, 3, 32, 32]);
        x.realize().unwrap();
        y.realize().unwrap();
        let p = x.matmul(&y);
        let heads = p.permute([0, 2, 1, 3]).reshape([2, 33, 96]);
        let want = lazor::reference::eval(&[&p, &heads]);
        lazor::realize(&[&p, &heads]).unwrap();
        assert_close(&p.to_vec(), &want[0], 1e-5, tol(32), "the product");
        assert_close(&heads.to_vec(), &want[1], 1e-5, tol(32), "its copy");
        let p = x.matmul(&y);
        let both = p.permute([0, 2, 1, 3]).reshape([2, 33, 96]) + p.sum(2).reshape([2, 1, 96]);
        dispatches_checked(&both, 32 * 33, "a copy and a fold of one product");
    }
}

#[test]
fn unfused_gives_the_same_values() {
    for dev in devices() {
        let mut rng = Rng::new(7);
        let x = rand(&dev, &mut rng, &[50, 60]);
        let w = rand(&dev, &mut rng, &[60, 70]);
        let bias = rand(&dev, &mut rng, &[70]);
        let fused = (x.relu().matmul(&w) + &bias).gelu().to_vec();
        dev.set_fusion(false);
        let t = (x.relu().matmul(&w) + &bias).gelu();
        assert_eq!(dispatches(&t), 4, "relu, matmul, add, gelu");
        assert_close(&t.to_vec(), &fused, 1e-6, 1e-6, "unfused");
        dev.set_fusion(true);
    }
}

#[test]
fn bad_shapes_name_both_operands() {
    let dev = Device::cpu();
    let a = Tensor::zeros_on([2, 3], &dev);
    let b = Tensor::zeros_on([4, 5], &dev);
    let e = a.try_matmul(&b).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "matmul", .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("[2, 3]") && msg.contains("[4, 5]"), "{msg}");
    let e = Tensor::zeros_on([2, 2, 3], &dev).try_matmul(&Tensor::zeros_on([3, 3, 4], &dev)).unwrap_err();
    assert!(e.to_string().contains("batch"), "{e}");
    assert!(Tensor::scalar_on(1.0, &dev).try_matmul(&a).is_err());
    // #[track_caller]: the panic is located at this line, not inside lazor.
    let location = std::sync::Arc::new(std::sync::Mutex::new(None));
    let loc = location.clone();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        *loc.lock().unwrap() = info.location().map(|l| (l.file().to_string(), l.line()));
    }));
    #[rustfmt::skip]
    let (line, caught) = (line!(), std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(a.matmul(&b)))));
    std::panic::set_hook(hook);
    assert!(caught.is_err());
    let (file, at) = location.lock().unwrap().clone().unwrap();
    assert!(file.ends_with("matmul.rs") && at == line, "panic located at {file}:{at}");
}

/// f16 products on the tensor cores (cooperative matrices) where the device has them, and on the tiled kernel, both
/// against the reference: sizes that leave partial fragments and tiles on every edge, operands read through
/// transposed views, batches past 65535 workgroups, and an epilogue fused into the one dispatch.
/// `LAZOR_TEST_TENSOR_CORES=1` makes the run fail unless the wgpu device has them.
#[test]
fn f16_products_on_tensor_cores_and_tiles() {
    let must = std::env::var("LAZOR_TEST_TENSOR_CORES").is_ok_and(|v| v.trim() == "1");
    for dev in devices() {
        let had = dev.wgpu().is_some_and(|g| g.tensor_cores());
        assert!(!must || dev.is_cpu() || had, "LAZOR_TEST_TENSOR_CORES=1, but {} has no tensor cores", dev.name());
        let mut rng = Rng::new(61);
        // Without tensor cores both settings are the tiled kernel: once is enough.
        for cores in [true, false].into_iter().take(if had { 2 } else { 1 }) {
            if let Some(gpu) = dev.wgpu() {
                gpu.set_tensor_cores(cores);
            }
            assert_eq!(dev.wgpu().is_some_and(|g| g.tensor_cores()), cores && had);
            let path = if dev.wgpu().is_some_and(|g| g.tensor_cores()) { "tensor cores" } else { "tiled" };
            let shapes = [(1, 2, 3, 5), (1, 17, 33, 31), (1, 128, 64, 128), (1, 130, 200, 250), (3, 64, 48, 80)];
            for (batch, m, k, n) in shapes.into_iter().chain([(1, 257, 1000, 129), (2, 300, 512, 260)]) {
                let what = format!("{batch}x{m}x{k}x{n} ({path})");
                let a = rand16(&dev, &mut rng, &[batch, m, k]);
                let b = rand16(&dev, &mut rng, &[batch, k, n]);
                check16(&a.matmul(&b), k, &what);
                // Read along the other axis: A column-major, B row-major along k.
                let at = rand16(&dev, &mut rng, &[batch, k, m]).transpose(1, 2);
                let bt = rand16(&dev, &mut rng, &[batch, n, k]).transpose(1, 2);
                check16(&at.matmul(&bt), k, &format!("{what}, transposed operands"));
                // A view starting one element in (no 16-byte reads), and a prologue on the loads.
                let an = rand16(&dev, &mut rng, &[batch, m, k + 1]).narrow(2, 1, k);
                check16(&an.matmul(&b), k, &format!("{what}, narrowed A"));
                check16(&a.abs().matmul(&(&bt * 0.5)), k, &format!("{what}, prologues"));
                let bias = rand16(&dev, &mut rng, &[n]);
                // Checked before it is realized: a realized tensor is a buffer to the reference. The fused epilogue
                // adds the bias to the product in f32 and rounds once, where the reference rounds the product to
                // f16 first: where the two nearly cancel, they differ by up to half an f16 ulp of the product.
                let y = || (a.matmul(&bt) + &bias).relu();
                let want: Vec<f32> = lazor::reference::eval(&[&y().to_dtype(DType::F32)]).pop().unwrap();
                let got: Vec<f32> = y().to_vec_as::<f16>().into_iter().map(f32::from).collect();
                let ulp = 2.0 * (k as f32).sqrt() / 1024.0;
                assert_close(&got, &want, 2e-3, ulp, &format!("{what}, relu(a b + bias) on {}", dev.name()));
                assert_eq!(dispatches(&y()), 1, "{what}: the epilogue is fused");
            }
            let a = rand16(&dev, &mut rng, &[70_000, 3, 16]);
            let b = rand16(&dev, &mut rng, &[70_000, 16, 5]);
            check16(&a.matmul(&b), 16, &format!("70000 batches ({path})"));
        }
        if let Some(gpu) = dev.wgpu() {
            gpu.set_tensor_cores(had);
        }
    }
}

#[test]
fn thin_products_in_every_layout() {
    // At most 16 rows or columns of output: the thin kernel (a sum per narrow output in each thread's registers,
    // teams along k or a thread per wide output) where it makes enough workgroups, else a fold over k (two stages
    // where k is long and outputs few). Narrow sides of 1, 3, 7, 10 and 16; k with remainders past the 4-step
    // unrolling; wide sides past one workgroup. The two 20,000-wide shapes make enough workgroups for the thin kernel
    // in all four layouts (each of the four products below) on any runner up to 79 threads, whose CPU adapter asks
    // for 2 per thread.
    for dev in devices() {
        let mut rng = Rng::new(23);
        let shapes = [
            (1000, 300, 10),
            (10, 257, 700),
            (7, 5000, 9),
            (16, 64, 17),
            (300, 4100, 3),
            (1, 131, 2049),
            (2100, 7, 16),
            (20_000, 64, 3),
            (3, 64, 20_000),
        ];
        for &(m, k, n) in &shapes {
            let a = rand(&dev, &mut rng, &[m, k]);
            let b = rand(&dev, &mut rng, &[k, n]);
            let at = rand(&dev, &mut rng, &[k, m]).t();
            let bt = rand(&dev, &mut rng, &[n, k]).t();
            let bias = rand(&dev, &mut rng, &[n]);
            lazor::realize(&[&a, &b, &at, &bt, &bias]).unwrap();
            let what = |s: &str| format!("{s} {m}x{k}x{n}");
            check(&a.matmul(&b), k, &what("a @ b"));
            check(&at.matmul(&b), k, &what("a^T @ b"));
            check(&a.matmul(&bt), k, &what("a @ b^T"));
            check(&at.matmul(&bt), k, &what("a^T @ b^T"));
            // A prologue on the operand and an epilogue on the product stay in the fold's kernels.
            let y = || ((at.relu() + 0.5).matmul(&b) + &bias).relu();
            check(&y(), k, &what("relu(relu(a^T) + 0.5 @ b + bias)"));
            assert!(dispatches(&y()) <= 2, "{}: {}", what("fused"), dev.name());
        }
        // Batched and broadcast, and f16 operands.
        let a = rand(&dev, &mut rng, &[3, 200, 64]);
        let b = rand(&dev, &mut rng, &[64, 5]);
        check(&a.matmul(&b), 64, "[3, 200, 64] @ [64, 5]");
        let b3 = rand(&dev, &mut rng, &[3, 64, 5]);
        check(&a.matmul(&b3), 64, "[3, 200, 64] @ [3, 64, 5]");
        let a16 = rand16(&dev, &mut rng, &[300, 128]);
        let b16 = rand16(&dev, &mut rng, &[128, 12]);
        check16(&a16.matmul(&b16), 128, "f16 300x128x12");
        // Past 65535 workgroups of 8 wide outputs, in both orientations.
        let tall = rand(&dev, &mut rng, &[600_000, 3]);
        let b = rand(&dev, &mut rng, &[3, 2]);
        check(&tall.matmul(&b), 3, "[600000, 3] @ [3, 2]");
        let a = rand(&dev, &mut rng, &[2, 3]);
        check(&a.matmul(&tall.t()), 3, "[2, 3] @ [600000, 3]^T");
    }
}

/// Products whose tiles cover m, n and k exactly fetch their slabs without bounds checks (`Matmul::even`): the
/// large tile (16 steps of k deep, storing vectors past k = 384 too, and 8 deep for k = 40), the small, tall and
/// wide tiles' multiples, batched, read through transposed and narrowed views, split along k, with an epilogue;
/// beside each, the same product one past the tile on one axis (checked fetches).
#[test]
fn products_whose_tiles_cover_them_exactly_match_the_reference() {
    let mut rng = Rng::new(77);
    for dev in devices() {
        for (batch, m, k, n) in [
            (1, 256, 64, 256),
            (1, 256, 512, 256),
            (1, 256, 40, 256),
            (2, 128, 32, 128),
            (4, 64, 48, 128),
            (3, 128, 16, 64),
            (1, 64, 16, 64),
        ] {
            for (dm, dk, dn) in [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)] {
                let (m, k, n) = (m + dm, k + dk, n + dn);
                let what = format!("{batch} x [{m}, {k}] x [{k}, {n}] on {}", dev.name());
                let a = rand(&dev, &mut rng, &[batch, m, k]);
                let b = rand(&dev, &mut rng, &[batch, k, n]);
                check(&a.matmul(&b), k, &what);
                let at = rand(&dev, &mut rng, &[batch, k, m]).transpose(1, 2);
                let bt = rand(&dev, &mut rng, &[batch, n, k + 2]).narrow(2, 1, k).transpose(1, 2);
                let bias = rand(&dev, &mut rng, &[n]);
                check(&(at.matmul(&bt) + &bias).relu(), k, &format!("relu(a^T b^T + bias), {what}"));
                assert_eq!(dispatches(&(at.matmul(&bt) + &bias).relu()), 1, "{what}: the epilogue is fused");
                // Both operands from one buffer, as an attention's q k^T.
                check(&a.matmul(&a.transpose(1, 2)), k, &format!("a a^T, {what}"));
            }
        }
        // A weight gradient cut into slices along k, every slice a whole number of slabs.
        let (x, g) = (rand(&dev, &mut rng, &[8192, 128]), rand(&dev, &mut rng, &[8192, 64]));
        check(&x.t().matmul(&g), 8192, &format!("x^T g, [128, 8192] x [8192, 64] on {}", dev.name()));
    }
}

#[test]
fn long_k_with_few_output_tiles_is_cut_into_slices_summed() {
    let mut rng = Rng::new(41);
    for dev in devices() {
        // A weight gradient's shape: a transposed activation times an output gradient, k the batch.
        let (m, k, n) = (96, 8192, 80);
        let x = rand(&dev, &mut rng, &[k, m]);
        let g = rand(&dev, &mut rng, &[k, n]);
        let y = x.t().matmul(&g);
        let got = check(&y, k, &format!("x^T g on {}", dev.name()));
        assert_eq!(got.len(), m * n);
        let kernels = dispatches(&(x.t().matmul(&g) * 2.0));
        // The GPU cuts k and sums the slices (a product, then a fold with the epilogue); the CPU's gemm does not.
        let want = if dev.is_cpu() { 1 } else { 2 };
        assert_eq!(kernels, want, "{}", dev.name());
        // k not cut when it does not divide, or is short.
        check(&x.narrow(0, 0, 8191).t().matmul(&g.narrow(0, 0, 8191)), k, &format!("odd k on {}", dev.name()));
    }
}

/// bf16 operands, as [`f16_products_on_tensor_cores_and_tiles`]: on the tensor cores where the device has bf16
/// cooperative matrices (through the SPIR-V path, whose kernels the profile marks), else on the tiled kernel, both
/// against the reference. `LAZOR_TEST_TENSOR_CORES=1` makes the run fail unless the wgpu device runs bf16 products
/// on tensor cores.
#[test]
fn bf16_products_on_tensor_cores_and_tiles() {
    use lazor::half::bf16;
    let must = std::env::var("LAZOR_TEST_TENSOR_CORES").is_ok_and(|v| v.trim() == "1");
    let rand_bf16 = |dev: &Device, rng: &mut Rng, shape: &[usize]| {
        let n: usize = shape.iter().product();
        let t = Tensor::from_vec_on(rng.vec(n, -1.0, 1.0).into_iter().map(bf16::from_f32).collect(), shape, dev);
        t.realize().unwrap();
        t
    };
    // The device and the reference both round the f32 sum once: one bf16 step (2^-7 relative at most) apart where
    // the sums fall on either side of a rounding boundary.
    let check = |t: &Tensor, k: usize, what: &str| {
        assert_eq!(t.dtype(), DType::BF16, "{what}");
        let want: Vec<f32> = lazor::reference::eval(&[&t.to_dtype(DType::F32)]).pop().unwrap();
        let got: Vec<f32> = t.to_vec_as::<bf16>().into_iter().map(f32::from).collect();
        assert_close(&got, &want, 8e-3, 4.0 * tol(k), &format!("{what} on {}", t.device().name()));
    };
    for dev in devices() {
        let had = dev.wgpu().is_some_and(|g| g.bf16_tensor_cores());
        let f16_cores = dev.wgpu().is_some_and(|g| g.tensor_cores());
        assert!(
            !must || dev.is_cpu() || had,
            "LAZOR_TEST_TENSOR_CORES=1, but {} runs no bf16 on tensor cores",
            dev.name()
        );
        let mut rng = Rng::new(67);
        for cores in [true, false].into_iter().take(if had { 2 } else { 1 }) {
            if let Some(gpu) = dev.wgpu() {
                gpu.set_tensor_cores(cores);
            }
            let on = dev.wgpu().is_some_and(|g| g.bf16_tensor_cores());
            assert_eq!(on, cores && had);
            let path = if on { "tensor cores" } else { "tiled" };
            for (batch, m, k, n) in
                [(1, 17, 33, 31), (1, 128, 64, 128), (1, 130, 200, 250), (3, 64, 48, 80), (1, 257, 1000, 129)]
            {
                let what = format!("{batch}x{m}x{k}x{n} ({path})");
                let a = rand_bf16(&dev, &mut rng, &[batch, m, k]);
                let b = rand_bf16(&dev, &mut rng, &[batch, k, n]);
                check(&a.matmul(&b), k, &what);
                let at = rand_bf16(&dev, &mut rng, &[batch, k, m]).transpose(1, 2);
                let bt = rand_bf16(&dev, &mut rng, &[batch, n, k]).transpose(1, 2);
                check(&at.matmul(&bt), k, &format!("{what}, transposed operands"));
                let an = rand_bf16(&dev, &mut rng, &[batch, m, k + 1]).narrow(2, 1, k);
                check(&an.matmul(&b), k, &format!("{what}, narrowed A"));
                check(&a.abs().matmul(&(&bt * 0.5)), k, &format!("{what}, prologues"));
                let y = || (a.matmul(&bt) * 2.0).relu();
                assert_eq!(dispatches(&y()), 1, "{what}: the epilogue is fused");
                check(&y(), k, &format!("{what}, relu(2 a b)"));
            }
            let a = rand_bf16(&dev, &mut rng, &[256, 256]);
            let b = rand_bf16(&dev, &mut rng, &[256, 256]);
            let profile = dev.profile(|| a.matmul(&b).realize().unwrap());
            let names: Vec<&str> = profile.kernels().iter().map(|k| k.name.as_str()).collect();
            assert_eq!(names.len(), 1, "{names:?}");
            // (The tiled kernel takes the SPIR-V path too under `LAZOR_SPIRV=all`.)
            assert!(!on || names[0].contains(" [spirv]"), "the tensor-core kernel is the SPIR-V path's: {names:?}");
            assert_eq!(names[0].ends_with(" [tensor cores]"), on, "profiles name the tensor-core kernel: {names:?}");
        }
        if let Some(gpu) = dev.wgpu() {
            gpu.set_tensor_cores(f16_cores);
        }
    }
}

/// Causal attention's triangular products (every [`Tri`] but `Full`) in f16 and bf16, A read either way, against the
/// reference: on the tensor cores where the device has them for the type and `LAZOR_COOP_TRIANGLES=1` lets them
/// run there, and on the tiled kernel. `LAZOR_TEST_TENSOR_CORES=1` makes the run fail unless the wgpu device has
/// f16 tensor cores.
#[test]
fn triangular_products_on_tensor_cores_and_tiles() {
    use lazor::half::bf16;
    let must = std::env::var("LAZOR_TEST_TENSOR_CORES").is_ok_and(|v| v.trim() == "1");
    // `LAZOR_COOP_TRIANGLES` as the library reads it.
    let triangles_on_cores = std::env::var("LAZOR_COOP_TRIANGLES").is_ok_and(|v| v.trim() != "0");
    // As the f16 and bf16 tests check: the device and the reference round the f32 sum once.
    let check = |t: &Tensor, k: usize, what: &str| {
        let want: Vec<f32> = lazor::reference::eval(&[&t.to_dtype(DType::F32)]).pop().unwrap();
        // Read in the product's own type: the kernel under test stores halves.
        let got: Vec<f32> = match t.dtype() {
            DType::F16 => t.to_vec_as::<f16>().into_iter().map(f32::from).collect(),
            _ => t.to_vec_as::<bf16>().into_iter().map(f32::from).collect(),
        };
        let rel = if t.dtype() == DType::BF16 { 8e-3 } else { 2e-3 };
        assert_close(&got, &want, rel, 4.0 * tol(k), &format!("{what} on {}", t.device().name()));
    };
    for dev in devices() {
        let had = dev.wgpu().is_some_and(|g| g.tensor_cores());
        assert!(!must || dev.is_cpu() || had, "LAZOR_TEST_TENSOR_CORES=1, but {} has no tensor cores", dev.name());
        let mut rng = Rng::new(71);
        for cores in [true, false].into_iter().take(if had { 2 } else { 1 }) {
            if let Some(gpu) = dev.wgpu() {
                gpu.set_tensor_cores(cores);
            }
            for dtype in [DType::F16, DType::BF16] {
                let on = dev.wgpu().is_some_and(|g| match dtype {
                    DType::F16 => g.tensor_cores(),
                    _ => g.bf16_tensor_cores(),
                });
                let path = if on { "tensor cores" } else { "tiled" };
                let rand = |rng: &mut Rng, shape: &[usize]| {
                    let n: usize = shape.iter().product();
                    let t = Tensor::from_vec_on(rng.vec(n, -1.0, 1.0), shape, &dev).to_dtype(dtype);
                    t.realize().unwrap();
                    t
                };
                for (batch, m, k, n) in [(2, 130, 130, 72), (1, 256, 256, 64), (3, 100, 256, 200)] {
                    for tri in TRIANGLES {
                        let what = format!("{dtype} {tri:?} of {batch}x{m}x{k}x{n} ({path})");
                        let a = rand(&mut rng, &[batch, m, k]);
                        let at = rand(&mut rng, &[batch, k, m]).transpose(1, 2);
                        let b = rand(&mut rng, &[batch, k, n]);
                        check(&a.matmul_tri(&b, tri), k, &what);
                        check(&at.matmul_tri(&b, tri), k, &format!("{what}, A transposed"));
                    }
                }
                // Which kernel ran: tensor cores only where the device has them for the type and the knob is on.
                let (a, b) = (rand(&mut rng, &[128, 128]), rand(&mut rng, &[128, 128]));
                let profile = dev.profile(|| a.matmul_tri(&b, Tri::Causal).realize().unwrap());
                let names: Vec<&str> = profile.kernels().iter().map(|k| k.name.as_str()).collect();
                assert_eq!(names.len(), 1, "{names:?}");
                let want = on && triangles_on_cores;
                assert_eq!(names[0].ends_with(" [tensor cores]"), want, "{dtype} ({path}): {names:?}");
            }
        }
        if let Some(gpu) = dev.wgpu() {
            gpu.set_tensor_cores(had);
        }
    }
}
