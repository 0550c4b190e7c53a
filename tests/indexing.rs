//! Indexing and losses: gather, index_select, scatter_add, index_add, one_hot, embedding and the four losses
//! against loops written here, on every backend; out-of-range indices, determinism, errors and kernel counts.

mod common;

use common::{assert_close, check, devices, Rng};
use lazor::nn::functional::embedding;
use lazor::{DType, Device, Error, Tensor};

/// Row-major strides of `dims`.
fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1];
    }
    s
}

/// The coordinates of row-major element `flat` of `dims`.
fn coords(mut flat: usize, dims: &[usize]) -> Vec<usize> {
    let mut c = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        c[d] = flat % dims[d];
        flat /= dims[d];
    }
    c
}

fn at(c: &[usize], dims: &[usize]) -> usize {
    c.iter().zip(strides(dims)).map(|(a, b)| a * b).sum()
}

/// `torch.gather` by loops: 0 where the index is out of range.
fn gather_loop(src: &[f32], sdims: &[usize], axis: usize, idx: &[i64], idims: &[usize]) -> Vec<f32> {
    (0..idx.len())
        .map(|f| {
            let mut c = coords(f, idims);
            if idx[f] < 0 || idx[f] >= sdims[axis] as i64 {
                return 0.0;
            }
            c[axis] = idx[f] as usize;
            src[at(&c, sdims)]
        })
        .collect()
}

/// `torch.scatter_add` by loops, in index order: out-of-range indices dropped.
fn scatter_loop(
    base: &[f32],
    dims: &[usize],
    axis: usize,
    idx: &[i64],
    idims: &[usize],
    src: &[f32],
    sdims: &[usize],
) -> Vec<f32> {
    let mut out = base.to_vec();
    // Ascending along the axis for each output: the library's fold order.
    for (f, &i) in idx.iter().enumerate() {
        let c = coords(f, idims);
        if i < 0 || i >= dims[axis] as i64 {
            continue;
        }
        let mut o = c.clone();
        o[axis] = i as usize;
        out[at(&o, dims)] += src[at(&c, sdims)];
    }
    out
}

/// A tensor computed on the device from `values`, so that no check at the call sees them.
fn lazy_i32(values: &[i64], dims: &[usize], dev: &Device) -> Tensor {
    let v: Vec<i32> = values.iter().map(|&x| x as i32).collect();
    Tensor::from_slice_on(&v, dims, dev) + 0
}

#[test]
fn gather_matches_loops_and_reads_zero_out_of_range() {
    let mut rng = Rng::new(1);
    let cases: &[(&[usize], usize, &[usize])] = &[
        (&[5, 7], 0, &[3, 7]),
        (&[5, 7], 1, &[5, 9]),
        (&[4, 6, 3], 1, &[2, 11, 3]),
        (&[4, 6, 3], 2, &[4, 6, 1]),
        (&[300, 257], 1, &[300, 5]),
        (&[3, 0, 2], 1, &[3, 4, 2]),
        (&[3, 4], 0, &[0, 4]),
    ];
    for dev in devices() {
        for &(sdims, axis, idims) in cases {
            let n: usize = sdims.iter().product();
            let src = rng.vec(n, -2.0, 2.0);
            let m: usize = idims.iter().product();
            // Mostly in range, some out on either side.
            let idx: Vec<i64> = (0..m).map(|_| rng.below(sdims[axis] + 4) as i64 - 2).collect();
            let want = gather_loop(&src, sdims, axis, &idx, idims);
            let x = Tensor::from_slice_on(&src, sdims, &dev);
            let got = x.gather(axis, &lazy_i32(&idx, idims, &dev));
            assert_eq!(got.shape(), idims);
            let what = format!("gather {sdims:?} axis {axis} by {idims:?} on {}", dev.name());
            assert_close(&check(&got, 0.0, 0.0, &what), &want, 0.0, 0.0, &what);
            // A u32 index, where values past i32's range are out of range too.
            let u: Vec<u32> = idx.iter().map(|&v| if v < 0 { u32::MAX - 1 } else { v as u32 }).collect();
            let got = x.gather(axis, &(Tensor::from_slice_on(&u, idims, &dev) + 0u32));
            assert_close(&got.to_vec(), &want, 0.0, 0.0, &format!("{what}, u32"));
        }
    }
}

#[test]
fn index_select_picks_rows_and_fuses_into_its_reader() {
    let mut rng = Rng::new(2);
    for dev in devices() {
        let (n, d) = (301, 67);
        let table = rng.vec(n * d, -1.0, 1.0);
        let ids: Vec<i32> = (0..1000).map(|_| rng.below(n) as i32).collect();
        let w = Tensor::from_slice_on(&table, [n, d], &dev);
        w.realize().unwrap();
        let idx = Tensor::from_slice_on(&ids, [1000], &dev);
        let want: Vec<f32> = ids.iter().flat_map(|&i| table[i as usize * d..(i as usize + 1) * d].to_vec()).collect();
        let rows = w.index_select(0, &idx);
        assert_eq!(rows.shape(), &[1000, d]);
        assert_close(&check(&rows, 0.0, 0.0, "index_select rows"), &want, 0.0, 0.0, "rows");
        // Columns, through a transposed source.
        let cols = w.t().index_select(1, &idx.narrow(0, 0, 10));
        let want: Vec<f32> = (0..d)
            .flat_map(|c| ids[..10].iter().map(move |&i| (i as usize, c)))
            .map(|(i, c)| table[i * d + c])
            .collect();
        assert_close(&check(&cols, 0.0, 0.0, "index_select columns"), &want, 0.0, 0.0, "columns");
        // An embedding lookup and what reads it: one kernel, reading the table where it lies.
        idx.realize().unwrap();
        let before = dev.stats();
        let e = embedding(&idx.reshape([10, 100]), &w) * 2.0 + 1.0;
        e.realize().unwrap();
        assert_eq!(dev.stats().dispatches - before.dispatches, 1, "{}: embedding * 2 + 1", dev.name());
        assert_eq!(e.shape(), &[10, 100, d]);
        let first = &e.to_vec()[..d];
        let want: Vec<f32> = table[ids[0] as usize * d..][..d].iter().map(|v| v * 2.0 + 1.0).collect();
        assert_close(first, &want, 1e-6, 0.0, "embedding row 0");
        // An empty index gives an empty result; an empty table axis gives zeros for a lazy index.
        assert_eq!(w.index_select(0, &Tensor::from_slice_on::<i32>(&[], [0], &dev)).shape(), &[0, d]);
        let none = Tensor::zeros_on([0, 3], &dev).index_select(0, &lazy_i32(&[0, 1], &[2], &dev));
        assert_eq!(none.to_vec(), vec![0.0; 6]);
    }
}

#[test]
fn a_gather_reads_a_stored_source_through_its_reshape() {
    // An embedding's gradient gathers the rows of its layer's input gradient, a stored `[b, t, d]` read as
    // `[b * t, d]`: the gather reads that buffer as it lies, not a copy of it.
    let mut rng = Rng::new(5);
    for dev in devices() {
        let (a, b) = (rng.vec(4 * 8 * 16, -1.0, 1.0), rng.vec(4 * 8 * 16, -1.0, 1.0));
        let (ta, tb) = (Tensor::from_slice_on(&a, [4, 8, 16], &dev), Tensor::from_slice_on(&b, [4, 8, 16], &dev));
        let ids = [3i32, 0, 31, 7, 7];
        let idx = Tensor::from_slice_on(&ids, [5], &dev);
        lazor::realize(&[&ta, &tb, &idx]).unwrap();
        let sum = (&ta + &tb).exp();
        let rows = sum.reshape([32, 16]).index_select(0, &idx) * 2.0;
        let before = dev.stats().dispatches;
        lazor::realize(&[&rows, &sum]).unwrap();
        let n = dev.stats().dispatches - before;
        assert_eq!(n, 2, "{}: the sum, then the gather reading it", dev.name());
        let want: Vec<f32> = ids
            .iter()
            .flat_map(|&i| (0..16).map(move |c| i as usize * 16 + c))
            .map(|e| (a[e] + b[e]).exp() * 2.0)
            .collect();
        assert_close(&rows.to_vec(), &want, 1e-6, 0.0, "gathered rows");
    }
}

#[test]
fn scatter_add_and_index_add_match_loops_and_repeat_bit_for_bit() {
    let mut rng = Rng::new(3);
    // The tensor's shape, the axis, the index's shape and the source's.
    type Case<'a> = (&'a [usize], usize, &'a [usize], &'a [usize]);
    let cases: &[Case] = &[
        (&[6], 0, &[20], &[20]),
        (&[5, 7], 0, &[9, 7], &[9, 7]),
        (&[5, 7], 1, &[5, 3], &[6, 4]),
        (&[4, 3, 5], 1, &[2, 8, 5], &[3, 8, 6]),
        (&[40, 70], 0, &[333, 70], &[333, 70]),
    ];
    for dev in devices() {
        for &(dims, axis, idims, sdims) in cases {
            let base = rng.vec(dims.iter().product(), -1.0, 1.0);
            let src = rng.vec(sdims.iter().product(), -1.0, 1.0);
            let idx: Vec<i64> =
                (0..idims.iter().product::<usize>()).map(|_| rng.below(dims[axis] + 2) as i64 - 1).collect();
            let want = scatter_loop(&base, dims, axis, &idx, idims, &src, sdims);
            let x = Tensor::from_slice_on(&base, dims, &dev);
            let s = Tensor::from_slice_on(&src, sdims, &dev);
            let y = x.scatter_add(axis, &lazy_i32(&idx, idims, &dev), &s);
            let what = format!("scatter_add {dims:?} axis {axis} index {idims:?} on {}", dev.name());
            let got = check(&y, 1e-6, 1e-6, &what);
            assert_close(&got, &want, 1e-5, 1e-5, &what);
            let again = x.scatter_add(axis, &lazy_i32(&idx, idims, &dev), &s).to_vec();
            assert!(got.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits()), "{what}: runs differ");
        }
        // index_add: 1-D index along an axis, repeated and out-of-range entries.
        let (n, d, m) = (7, 5, 40);
        let base = rng.vec(n * d, -1.0, 1.0);
        let src = rng.vec(m * d, -1.0, 1.0);
        let idx: Vec<i64> = (0..m).map(|_| rng.below(n + 1) as i64).collect();
        let spread: Vec<i64> = idx.iter().flat_map(|&i| std::iter::repeat_n(i, d)).collect();
        let want = scatter_loop(&base, &[n, d], 0, &spread, &[m, d], &src, &[m, d]);
        let y = Tensor::from_slice_on(&base, [n, d], &dev).index_add(
            0,
            &lazy_i32(&idx, &[m], &dev),
            &Tensor::from_slice_on(&src, [m, d], &dev),
        );
        assert_close(&check(&y, 1e-6, 1e-6, "index_add"), &want, 1e-5, 1e-5, "index_add");
        // Along the last axis.
        let y = Tensor::from_slice_on(&base, [n, d], &dev).t().index_add(
            1,
            &Tensor::from_slice_on(&[0i32, 6, 6], [3], &dev),
            &Tensor::ones_on([d, 3], &dev),
        );
        let got = y.to_vec();
        for r in 0..d {
            assert_eq!(got[r * n], base[r] + 1.0);
            assert_eq!(got[r * n + 6], base[6 * d + r] + 2.0);
            assert_eq!(got[r * n + 3], base[3 * d + r]);
        }
    }
}

#[test]
fn one_hot_rows() {
    for dev in devices() {
        let y = Tensor::from_slice_on(&[2i32, 0, 1], [3], &dev).one_hot(3);
        assert_eq!((y.shape(), y.dtype()), (&[3usize, 3][..], DType::F32));
        assert_eq!(y.to_vec(), vec![0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
        let lazy = lazy_i32(&[5, -1, 1, 0], &[2, 2], &dev).one_hot(2);
        assert_eq!(lazy.shape(), &[2, 2, 2]);
        assert_eq!(lazy.to_vec(), vec![0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0]);
    }
}

#[test]
fn host_indices_out_of_range_fail_at_the_call() {
    let x = Tensor::zeros([3, 4]);
    let bad = Tensor::from_vec(vec![0i32, 3], [2]);
    let e = x.try_index_select(0, &bad).unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { op: "index_select", index: 3, size: 3 }), "{e}");
    assert!(e.to_string().contains("index_select: index 3 is out of range for an axis of size 3"), "{e}");
    let neg = Tensor::from_vec(vec![-1i32, 0], [2, 1]);
    assert!(matches!(x.try_gather(1, &neg), Err(Error::IndexOutOfRange { op: "gather", index: -1, size: 4 })));
    let r = std::panic::catch_unwind(|| Tensor::from_vec(vec![4u32], [1]).one_hot(4));
    let msg = *r.unwrap_err().downcast::<String>().unwrap();
    assert!(msg.contains("one_hot: index 4 is out of range"), "{msg}");
    let src = Tensor::ones([2, 4]);
    assert!(x.try_index_add(0, &bad, &src).is_err());
    assert!(x.try_scatter_add(0, &Tensor::from_vec(vec![7i32; 8], [2, 4]), &src).is_err());
    let targets = Tensor::from_vec(vec![0i32, 4, 1], [3]);
    assert!(matches!(x.try_cross_entropy(&targets), Err(Error::IndexOutOfRange { op: "cross_entropy", .. })));
}

#[test]
fn bad_arguments_name_the_op_and_shapes() {
    let x = Tensor::zeros([3, 4]);
    let e = x.try_gather(0, &Tensor::zeros([2, 4])).unwrap_err();
    assert!(matches!(e, Error::DType { op: "gather", .. }), "{e}");
    let e = x.try_gather(0, &Tensor::from_vec(vec![0i32; 10], [2, 5])).unwrap_err();
    assert!(
        e.to_string().contains("gather") && e.to_string().contains("[3, 4]") && e.to_string().contains("[2, 5]"),
        "{e}"
    );
    let e = x.try_index_select(2, &Tensor::from_vec(vec![0i32], [1])).unwrap_err();
    assert!(matches!(e, Error::BadArgument { op: "index_select", .. }), "{e}");
    let e = x.try_index_select(0, &Tensor::from_vec(vec![0i32; 4], [2, 2])).unwrap_err();
    assert!(e.to_string().contains("1-D"), "{e}");
    let e = x.try_index_add(1, &Tensor::from_vec(vec![0i32; 2], [2]), &Tensor::zeros([3, 3])).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "index_add", .. }), "{e}");
    let e = x.try_scatter_add(0, &Tensor::from_vec(vec![0i32; 4], [1, 4]), &Tensor::zeros_dtype([1, 4], DType::I32));
    assert!(matches!(e, Err(Error::DType { op: "scatter_add", .. })));
    let e = x.try_cross_entropy(&Tensor::from_vec(vec![0i32; 4], [4])).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "cross_entropy", .. }), "{e}");
    let e = x.try_nll_loss(&Tensor::zeros([3])).unwrap_err();
    assert!(matches!(e, Error::DType { op: "nll_loss", .. }), "{e}");
    assert!(x.try_mse_loss(&Tensor::zeros([5])).is_err());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| x.gather(0, &Tensor::zeros([3, 4]))));
    assert!(r.is_err());
}

/// Cross-entropy of `[rows, classes]` logits by loops in f64.
fn cross_entropy_loop(x: &[f32], classes: usize, t: &[i32]) -> f64 {
    let rows = t.len();
    let mut total = 0.0;
    for r in 0..rows {
        let row = &x[r * classes..(r + 1) * classes];
        let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
        let lse = m + row.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
        total += lse - row[t[r] as usize] as f64;
    }
    total / rows as f64
}

#[test]
fn losses_match_loops() {
    let mut rng = Rng::new(4);
    for dev in devices() {
        let (rows, classes) = (37, 300);
        let x = rng.vec(rows * classes, -8.0, 8.0);
        let t: Vec<i32> = (0..rows).map(|_| rng.below(classes) as i32).collect();
        let logits = Tensor::from_slice_on(&x, [rows, classes], &dev);
        let targets = Tensor::from_slice_on(&t, [rows], &dev);
        let want = cross_entropy_loop(&x, classes, &t);
        let got = check(&logits.cross_entropy(&targets), 1e-5, 1e-5, "cross_entropy")[0];
        assert!((got as f64 - want).abs() < 1e-4 * want.abs().max(1.0), "{}: {got} vs {want}", dev.name());
        // Large logits stay finite: log-sum-exp is shifted by the row's max.
        let big = (&logits * 1000.0).cross_entropy(&targets).to_scalar();
        let want_big = cross_entropy_loop(&x.iter().map(|v| v * 1000.0).collect::<Vec<_>>(), classes, &t);
        assert!((big as f64 - want_big).abs() < 1e-3 * want_big.abs(), "{big} vs {want_big}");
        // [N, C, d] with targets [N, d]: the class axis in the middle.
        let (n, c, d) = (3, 5, 4);
        let x3 = rng.vec(n * c * d, -3.0, 3.0);
        let t3: Vec<i32> = (0..n * d).map(|_| rng.below(c) as i32).collect();
        let mut moved = vec![0.0; n * c * d];
        for i in 0..n {
            for k in 0..c {
                for j in 0..d {
                    moved[(i * d + j) * c + k] = x3[(i * c + k) * d + j];
                }
            }
        }
        let want = cross_entropy_loop(&moved, c, &t3);
        let got = Tensor::from_slice_on(&x3, [n, c, d], &dev)
            .cross_entropy(&Tensor::from_slice_on(&t3, [n, d], &dev))
            .to_scalar();
        assert!((got as f64 - want).abs() < 1e-5, "[N, C, d]: {got} vs {want}");
        // nll_loss of log_softmax is cross-entropy.
        let nll = logits.log_softmax(1).nll_loss(&targets).to_scalar();
        assert!((nll as f64 - cross_entropy_loop(&x, classes, &t)).abs() < 1e-4, "nll {nll}");
        // mse and binary cross-entropy on logits.
        let (p, q) = (rng.vec(100, -30.0, 30.0), rng.vec(100, 0.0, 1.0));
        let (pt, qt) = (Tensor::from_slice_on(&p, [100], &dev), Tensor::from_slice_on(&q, [100], &dev));
        let mse: f64 = p.iter().zip(&q).map(|(a, b)| ((a - b) as f64).powi(2)).sum::<f64>() / 100.0;
        assert!((pt.mse_loss(&qt).to_scalar() as f64 - mse).abs() < 1e-5 * mse);
        let bce: f64 = p
            .iter()
            .zip(&q)
            .map(|(&x, &t)| {
                let (x, t) = (x as f64, t as f64);
                x.max(0.0) - x * t + (-x.abs()).exp().ln_1p()
            })
            .sum::<f64>()
            / 100.0;
        let got = pt.binary_cross_entropy_with_logits(&qt).to_scalar() as f64;
        assert!((got - bce).abs() < 1e-5 * bce.max(1.0), "bce {got} vs {bce}");
    }
}

#[test]
fn cross_entropy_forward_and_backward_kernels() {
    let mut rng = Rng::new(5);
    for dev in devices() {
        let (rows, classes) = (64, 1000);
        let w = lazor::Var::new(Tensor::from_slice_on(&rng.vec(rows * classes, -4.0, 4.0), [rows, classes], &dev));
        let t: Vec<i32> = (0..rows).map(|_| rng.below(classes) as i32).collect();
        let targets = Tensor::from_slice_on(&t, [rows], &dev);
        targets.realize().unwrap();
        w.tensor().realize().unwrap();
        let before = dev.stats();
        let loss = w.tensor().cross_entropy(&targets);
        loss.realize().unwrap();
        let forward = dev.stats().dispatches - before.dispatches;
        let grads = loss.backward();
        let g = grads.get(&w).unwrap();
        let before = dev.stats();
        g.realize().unwrap();
        let backward = dev.stats().dispatches - before.dispatches;
        assert_eq!(backward, 1, "{}: cross-entropy backward", dev.name());
        // One rows kernel (max, sum of exponentials and the target's logit per row), then the batch mean's fold.
        assert_eq!(forward, 2, "{}: cross-entropy forward", dev.name());
        // (softmax - onehot) / rows.
        let x = w.tensor().to_vec();
        let got = g.to_vec();
        for r in [0, rows - 1] {
            let row = &x[r * classes..(r + 1) * classes];
            let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            let s: f32 = row.iter().map(|v| (v - m).exp()).sum();
            for k in [0, t[r] as usize, classes - 1] {
                let want = ((row[k] - m).exp() / s - if k == t[r] as usize { 1.0 } else { 0.0 }) / rows as f32;
                assert!(
                    (got[r * classes + k] - want).abs() < 1e-6,
                    "row {r} class {k}: {} vs {want}",
                    got[r * classes + k]
                );
            }
        }
    }
}

#[test]
fn gathers_feed_products_folds_and_rows_kernels() {
    let mut rng = Rng::new(6);
    for dev in devices() {
        let w = Tensor::from_slice_on(&rng.vec(50 * 40, -1.0, 1.0), [50, 40], &dev);
        let w2 = Tensor::from_slice_on(&rng.vec(40 * 30, -1.0, 1.0), [40, 30], &dev);
        let ids: Vec<i32> = (0..70).map(|_| rng.below(50) as i32).collect();
        let idx = Tensor::from_slice_on(&ids, [70], &dev);
        let e = embedding(&idx, &w);
        let name = dev.name();
        check(&e.matmul(&w2), 1e-5, 1e-5, &format!("embedding then matmul on {name}"));
        check(&(e.clone() * 3.0).t().matmul(&e), 1e-5, 1e-5, &format!("transposed gather operand on {name}"));
        check(&e.sum(1), 1e-5, 1e-5, &format!("gather then sum on {name}"));
        check(&e.sum(0), 1e-5, 1e-5, &format!("gather then sum over rows on {name}"));
        check(&e.softmax(1), 1e-5, 1e-6, &format!("gather then softmax on {name}"));
        check(&w.matmul(&w2).index_select(0, &idx.narrow(0, 0, 9)), 1e-5, 1e-5, &format!("product gathered on {name}"));
        let lazy_src = (&w * 2.0).exp();
        check(
            &lazy_src.gather(1, &(idx.narrow(0, 0, 50).reshape([50, 1]) % 40)),
            1e-5,
            1e-6,
            &format!("computed source on {name}"),
        );
        // Half types gather their stored values.
        for dt in [DType::F16, DType::BF16, DType::I32, DType::U32] {
            let x = (&w * 10.0).to_dtype(dt);
            check(&x.index_select(0, &idx), 0.0, 0.0, &format!("{dt} rows on {name}"));
            check(&x.gt(3.0).index_select(1, &(&idx % 40)), 0.0, 0.0, &format!("bool of {dt} on {name}"));
        }
    }
}

#[test]
fn index_add_of_host_indices_groups_rows_on_the_host() {
    let mut rng = Rng::new(7);
    // Uniform, all one row, one heavy row among singles, Zipf-like, and an empty index.
    let (n, d) = (40, 13);
    let heavy: Vec<i64> = (0..60).map(|i| if i % 2 == 0 { 7 } else { i / 2 }).collect();
    let zipf: Vec<i64> = (0..200).map(|_| (n as f32 * rng.uniform(0.0, 1.0).powi(4)) as i64).collect();
    let uniform: Vec<i64> = (0..150).map(|_| rng.below(n) as i64).collect();
    let cases: [(&str, Vec<i64>); 5] =
        [("uniform", uniform), ("one row", vec![3; 50]), ("heavy", heavy), ("zipf", zipf), ("empty", vec![])];
    for dev in devices() {
        for axis in [0, 1] {
            for (name, idx) in &cases {
                let m = idx.len();
                let (dims, sdims) = if axis == 0 { ([n, d], [m, d]) } else { ([d, n], [d, m]) };
                let base = rng.vec(n * d, -1.0, 1.0);
                let src = rng.vec(m * d, -1.0, 1.0);
                let spread: Vec<i64> = (0..m * d).map(|f| idx[coords(f, &sdims)[axis]]).collect();
                let want = scatter_loop(&base, &dims, axis, &spread, &sdims, &src, &sdims);
                let x = Tensor::from_slice_on(&base, dims, &dev);
                let s = Tensor::from_slice_on(&src, sdims, &dev);
                let host: Vec<i32> = idx.iter().map(|&v| v as i32).collect();
                let before = dev.stats();
                let y = x.index_add(axis, &Tensor::from_slice_on(&host, [m], &dev), &s);
                y.realize().unwrap();
                let kernels = dev.stats().dispatches - before.dispatches;
                let what = format!("index_add of {name} host indices, axis {axis}, on {}", dev.name());
                // At most two blocks, each one fold, then one kernel adding them (a moved axis may add a copy, and a
                // long fold into few rows a second stage).
                assert!(kernels <= 5, "{what}: {kernels} kernels");
                let got = y.to_vec();
                assert_close(&got, &want, 1e-5, 1e-5, &what);
                let again = x.index_add(axis, &Tensor::from_slice_on(&host, [m], &dev), &s).to_vec();
                assert!(got.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits()), "{what}: runs differ");
            }
        }
    }
}

/// An embedding's gradient from a new batch of host ids each step keeps its shapes (the blocks' sizes are rounded
/// to powers of two), so the step's plan is reused rather than made again.
#[test]
fn index_add_of_new_host_indices_reuses_the_plan() {
    // Batches of 64 ids into 10 rows: every row receives 5 to 7 of them, a different one the fewest each time.
    let batches: [Vec<i32>; 3] = [
        (0..64).map(|i| if i < 7 { 0 } else { 1 + (i % 9) }).collect(),
        (0..64).map(|i| if i < 5 { 9 } else { i % 9 }).collect(),
        (0..64).map(|i| if i < 6 { 4 } else { [0, 1, 2, 3, 5, 6, 7, 8, 9][i % 9] }).collect(),
    ];
    for dev in devices() {
        let table = Tensor::zeros_on([10, 3], &dev);
        let src = Tensor::from_vec_on((0..64 * 3).map(|v| v as f32).collect(), [64, 3], &dev);
        lazor::realize(&[&table, &src]).unwrap();
        for (step, ids) in batches.iter().enumerate() {
            let mut want = vec![0.0f32; 30];
            for (i, &r) in ids.iter().enumerate() {
                for c in 0..3 {
                    want[r as usize * 3 + c] += (i * 3 + c) as f32;
                }
            }
            let before = dev.stats();
            let grad = table.index_add(0, &Tensor::from_slice_on(ids, [64], &dev), &src);
            assert_eq!(grad.to_vec(), want, "batch {step} on {}", dev.name());
            let reused = dev.stats().plans_reused - before.plans_reused;
            assert_eq!(reused, u64::from(step > 0), "batch {step} on {}: plans reused", dev.name());
        }
    }
}
