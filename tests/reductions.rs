//! Reductions against the reference: every op over every axis, fused prologues and epilogues, with counts.

mod common;

use common::{assert_close, check, check_with, devices, expect, gpu_devices, Rng};
use lazor::{DType, Device, Error, Tensor};

fn rand(dev: &Device, rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec_on(rng.vec(n, -2.0, 2.0), shape, dev)
}

/// Every backend, and on GPUs both paths: subgroup operations on (where the adapter has them) and off (the
/// workgroup-memory path).
fn both_paths() -> Vec<Device> {
    let mut devs = devices();
    for gpu in gpu_devices() {
        if let Some(gpu) = gpu.wgpu() {
            gpu.set_subgroups(false);
        }
        assert!(!gpu.wgpu().is_some_and(|g| g.subgroups()));
        devs.push(gpu);
    }
    devs
}

fn stored(dev: &Device, rng: &mut Rng, shape: &[usize]) -> Tensor {
    let t = rand(dev, rng, shape);
    t.realize().unwrap();
    t
}

/// Dispatches run by `f`.
fn dispatches(dev: &Device, f: impl FnOnce()) -> u64 {
    let s = dev.stats().dispatches;
    f();
    dev.stats().dispatches - s
}

/// Every reduction of `x` along `d`, kept and dropped, against the reference.
fn check_axis(x: &Tensor, d: i32, what: &str) {
    let n = x.shape()[d.rem_euclid(x.ndim() as i32) as usize] as f32;
    let tol = 1e-5 * n.max(1.0).sqrt();
    check(&x.sum(d), tol, tol, &format!("{what}: sum({d})"));
    check(&x.sum_keepdim(d), tol, tol, &format!("{what}: sum_keepdim({d})"));
    check(&x.mean(d), tol, tol, &format!("{what}: mean({d})"));
    check(&x.prod_keepdim(d), 1e-4 * n.max(1.0), 1e-6, &format!("{what}: prod({d})"));
    check(&x.var(d), tol, tol, &format!("{what}: var({d})"));
    if n > 0.0 {
        // Exact for stored values; an expression's elements carry the device's own `sin` (NVIDIA: 2e-6 off).
        check(&x.max(d), 1e-5, 1e-6, &format!("{what}: max({d})"));
        check(&x.min_keepdim(d), 1e-5, 1e-6, &format!("{what}: min_keepdim({d})"));
        check(&x.softmax(d), 1e-5, 1e-6, &format!("{what}: softmax({d})"));
        check(&x.log_softmax(d), 1e-5, 1e-5, &format!("{what}: log_softmax({d})"));
        check(&x.logsumexp(d), 1e-5, 1e-5, &format!("{what}: logsumexp({d})"));
    }
}

#[test]
fn every_reduction_over_every_axis_of_ranks_1_to_5() {
    for dev in both_paths() {
        every_reduction_over_every_axis_of_ranks_1_to_5_on(&dev);
    }
}

fn every_reduction_over_every_axis_of_ranks_1_to_5_on(dev: &Device) {
    let dev = dev.clone();
    let mut rng = Rng::new(1);
    let shapes: [&[usize]; 6] = [&[1], &[7], &[3, 5], &[2, 1, 9], &[4, 3, 1, 5], &[2, 3, 2, 1, 3]];
    for shape in shapes {
        let x = stored(&dev, &mut rng, shape);
        let e = (&x * 0.5).sin() + 0.25; // the same reductions over an unrealized expression
        for d in 0..shape.len() as i32 {
            check_axis(&x, d, &format!("{shape:?}"));
            check_axis(&e, d - shape.len() as i32, &format!("expression of {shape:?}"));
        }
    }
}

#[test]
fn long_axes_and_many_outputs() {
    for dev in both_paths() {
        long_axes_and_many_outputs_on(&dev);
    }
}

fn long_axes_and_many_outputs_on(dev: &Device) {
    let dev = dev.clone();
    let mut rng = Rng::new(2);
    // 2^22 along one axis: partial folds per chunk, then a fold of the partials.
    let long = stored(&dev, &mut rng, &[1 << 22]);
    check(&long.sum(0), 1e-5, 1e-2, "sum of 2^22");
    check(&long.max(0), 0.0, 0.0, "max of 2^22");
    let cols = stored(&dev, &mut rng, &[1 << 16, 3]);
    check(&cols.sum(0), 1e-5, 1e-2, "column sum of 2^16 rows");
    check(&cols.min(0), 0.0, 0.0, "column min of 2^16 rows");
    // Partials of a middle axis, with an epilogue reading another tensor: the fold of the partials finds each
    // output's at its own place.
    let mid = stored(&dev, &mut rng, &[6, 8192, 40]);
    let other = stored(&dev, &mut rng, &[6, 1, 40]);
    let y = mid.sum_keepdim(1) * 0.5 + &other;
    let want = expect(&[&y]);
    assert_eq!(dispatches(&dev, || y.realize().unwrap()), 2, "partial folds, then their fold with the epilogue");
    check_with(&y, &want[0], 1e-4, 1e-4, "sum over the middle axis of [6, 8192, 40], halved, plus [6, 1, 40]");
    check(&mid.max(1), 0.0, 0.0, "max over the middle axis of [6, 8192, 40]");
    let wide = stored(&dev, &mut rng, &[1024, 8192]);
    check(&wide.sum(0), 1e-4, 1e-4, "column sums of [1024, 8192] (16 chunks)");
    // A long axis over enough columns for a team of threads per column in one pass (no partials), sums and maxima
    // with a prologue and an epilogue; one column more than a multiple of the 8 a workgroup folds.
    let tall = stored(&dev, &mut rng, &[8197, 1033]);
    let y = (&tall * &tall).sum_keepdim(0).sqrt();
    let want = expect(&[&y]);
    assert_eq!(dispatches(&dev, || y.realize().unwrap()), 1, "one pass over [8197, 1033]");
    check_with(&y, &want[0], 1e-4, 1e-4, "column norms of [8197, 1033]");
    check(&tall.max(0), 0.0, 0.0, "column maxima of [8197, 1033]");
    check(&tall.t().sum(1), 1e-4, 1e-4, "row sums of a transposed [8197, 1033]");
    // More outputs than 65535 workgroups in one dimension.
    let rows = stored(&dev, &mut rng, &[70_001, 3]);
    check(&rows.sum(-1), 1e-5, 1e-5, "70001 row sums");
    check(&rows.t().max(0), 0.0, 0.0, "70001 column maxima of a transposed view");
}

#[test]
fn reductions_read_views_without_copies() {
    for dev in devices() {
        let mut rng = Rng::new(3);
        let x = stored(&dev, &mut rng, &[37, 53]);
        for (t, what) in [
            (x.t().sum(-1), "sum of a transposed tensor"),
            (x.narrow(1, 3, 40).max(-1), "max of a narrowed tensor"),
            (x.t().narrow(0, 5, 7).mean(0), "mean of a narrowed transpose"),
            (x.unsqueeze(0).expand([3, 37, 53]).sum(0), "sum of an expanded tensor"),
            (Tensor::cat(&[&x, &x.exp()], 0).sum(0), "sum of a concatenation"),
        ] {
            let k = dispatches(&dev, || drop(check(&t, 1e-5, 1e-5, what)));
            assert_eq!(k, 1, "{what}: one kernel");
        }
    }
}

#[test]
fn empty_axes_nan_and_infinities() {
    for dev in both_paths() {
        empty_axes_nan_and_infinities_on(&dev);
    }
}

fn empty_axes_nan_and_infinities_on(dev: &Device) {
    let dev = dev.clone();
    let e = Tensor::zeros_on([3, 0], &dev);
    assert_eq!(e.sum(-1).to_vec(), vec![0.0; 3]);
    assert_eq!(e.prod(-1).to_vec(), vec![1.0; 3]);
    assert!(e.mean(-1).to_vec().iter().all(|v| v.is_nan()));
    assert!(e.var(-1).to_vec().iter().all(|v| v.is_nan()));
    assert_eq!(e.sum(0).to_vec(), Vec::<f32>::new());
    assert_eq!(e.logsumexp(-1).to_vec(), vec![f32::NEG_INFINITY; 3]);
    assert_eq!(e.softmax(-1).shape(), &[3, 0]);
    assert_eq!(Tensor::zeros_on([0], &dev).sum_all().to_scalar(), 0.0);
    // Empty axes under anything: a fold of a fold, a stored empty tensor, an empty concatenation.
    assert_eq!(Tensor::zeros_on([0, 5], &dev).sum(1).sum(0).to_vec(), vec![0.0]);
    let stored_empty = Tensor::zeros_on([4, 0], &dev) + 1.0;
    stored_empty.realize().unwrap();
    assert_eq!(stored_empty.sum(1).to_vec(), vec![0.0; 4]);
    let ec = Tensor::cat(&[&Tensor::zeros_on([2, 0], &dev), &Tensor::zeros_on([2, 0], &dev)], 0);
    assert_eq!(ec.sum(1).to_vec(), vec![0.0; 4]);
    assert_eq!(ec.softmax(1).shape(), &[4, 0]);
    match e.try_max(-1) {
        Err(Error::BadArgument { op, shape, .. }) => assert_eq!((op, shape.dims()), ("max", &[3usize, 0][..])),
        other => panic!("expected an error, got {other:?}"),
    }
    assert!(e.try_min_keepdim(1).is_err() && Tensor::zeros_on([0], &dev).try_max_all().is_err());
    let min = std::panic::AssertUnwindSafe(|| drop(Tensor::zeros_on([2, 0], &dev).min(1)));
    let msg = std::panic::catch_unwind(min).unwrap_err();
    let msg = msg.downcast_ref::<String>().unwrap();
    assert!(msg.contains("min") && msg.contains("[2, 0]"), "{msg}");
    assert!(e.try_sum(2).unwrap_err().to_string().contains("dim 2"));

    let inf = f32::INFINITY;
    let x = Tensor::from_vec_on(vec![1.0, f32::NAN, 3.0, -inf, -inf, -inf, 1.0, inf, 2.0], [3, 3], &dev);
    let sum = x.sum(-1).to_vec();
    assert!(sum[0].is_nan() && sum[1] == -inf && sum[2] == inf);
    let max = x.max(-1).to_vec();
    assert!(max[0].is_nan() && max[1] == -inf && max[2] == inf);
    assert!(x.min(-1).to_vec()[0].is_nan());
    let sm = x.softmax(-1).to_vec();
    assert!(sm[..6].iter().all(|v| v.is_nan()), "a NaN row and a row of -inf are NaN: {sm:?}");
    assert_eq!(x.logsumexp(-1).to_vec()[1], -inf);
    check(&x.narrow(0, 1, 2).logsumexp(-1), 0.0, 0.0, "logsumexp with infinities");
}

#[test]
fn sums_are_accurate_and_deterministic() {
    for dev in both_paths() {
        sums_are_accurate_and_deterministic_on(&dev);
    }
}

fn sums_are_accurate_and_deterministic_on(dev: &Device) {
    let dev = dev.clone();
    let mut rng = Rng::new(4);
    let n = 1 << 24;
    let v = rng.vec(n, 0.0, 1.0);
    let exact: f64 = v.iter().map(|&x| x as f64).sum();
    let x = Tensor::from_vec_on(v, [n], &dev);
    let got = x.sum_all().to_scalar();
    assert!(((got as f64 - exact) / exact).abs() <= 1e-5, "sum_all of 2^24: {got} vs {exact}");
    let again = x.sum_all().to_scalar();
    assert_eq!(got.to_bits(), again.to_bits(), "bit-identical on a second run");
    let m = Tensor::from_vec_on(rng.vec(1 << 20, -1.0, 1.0), [1024, 1024], &dev);
    let (a, b) = (m.sum(0).to_vec(), m.sum(0).to_vec());
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
}

#[test]
fn prologues_and_epilogues_fuse() {
    for dev in devices() {
        let mut rng = Rng::new(5);
        let n = 1 << 22;
        let (a, b) = (stored(&dev, &mut rng, &[n]), stored(&dev, &mut rng, &[n]));
        let before = dev.stats();
        let dot = (&a * &b).sum_all();
        let k = dispatches(&dev, || drop(dot.to_vec()));
        assert!(k <= 2, "(a * b).sum_all(): {k} dispatches");
        let s = dev.stats();
        assert!(
            s.peak_buffer_bytes - before.live_buffer_bytes < (n * 4) as u64,
            "no intermediate of the input's size: peak {} over {} live",
            s.peak_buffer_bytes,
            before.live_buffer_bytes
        );
        // A fresh expression: `dot` is realized, a buffer the reference would read back.
        check(&(&a * &b).sum_all(), 1e-4, 1e-2, "dot");

        let x = stored(&dev, &mut rng, &[512, 1024]);
        let k = dispatches(&dev, || drop(check(&x.mean(-1), 1e-5, 1e-6, "mean")));
        assert_eq!(k, 1, "the division runs in the reduce kernel");
        let k = dispatches(&dev, || drop(check(&(x.max(-1) * 2.0 + 1.0).exp(), 1e-5, 1e-6, "epilogue")));
        assert_eq!(k, 1);
        let sm = x.softmax(-1);
        let k = dispatches(&dev, || drop(check(&sm, 1e-5, 1e-7, "softmax")));
        assert_eq!(k, 1, "softmax: one rows kernel (max, sum of exp, division)");
        let ln = (&x - x.mean_keepdim(-1)) / (x.var_keepdim(-1) + 1e-5).sqrt();
        let k = dispatches(&dev, || drop(check(&ln, 1e-4, 1e-5, "layer norm")));
        assert_eq!(k, 1, "layer norm: one rows kernel (sum, sum of squares, map)");
        // A fold read across the rows (transposed) cannot be a row's value: that reader leaves the rows kernel.
        let sq = stored(&dev, &mut rng, &[300, 300]);
        let odd = (&sq - sq.max_keepdim(-1)).exp() + sq.max_keepdim(-1).t();
        let k = dispatches(&dev, || drop(check(&odd, 1e-5, 1e-5, "transposed fold")));
        assert_eq!(k, 2, "the fold, then the map that reads it transposed");
        // Unfused: the same values.
        dev.set_fusion(false);
        check(&x.softmax(-1), 1e-5, 1e-7, "softmax unfused");
        check(&((&x - x.mean_keepdim(0)) / (x.var_keepdim(0) + 1e-5).sqrt()), 1e-4, 1e-5, "layer norm unfused");
    }
}

#[test]
fn softmax_of_4096_by_4096_is_3_dispatches_without_a_kept_intermediate() {
    for dev in devices() {
        let n = 4096;
        let x = Tensor::from_vec_on((0..n * n).map(|i| ((i * 7919) % 1000) as f32 / 100.0).collect(), [n, n], &dev);
        x.realize().unwrap();
        let before = dev.stats();
        let y = x.softmax(-1);
        y.realize().unwrap();
        let s = dev.stats();
        assert!(s.dispatches - before.dispatches <= 3, "{} dispatches", s.dispatches - before.dispatches);
        let input = (n * n * 4) as u64;
        assert!(s.peak_buffer_bytes - before.live_buffer_bytes < 2 * input, "only the output of the input's size");
        assert_eq!(s.live_buffer_bytes - before.live_buffer_bytes, input.next_multiple_of(256), "nothing else kept");
        let row = y.narrow(0, 4095, 1).to_vec();
        let xs: Vec<f32> = (4095 * n..n * n).map(|i| ((i * 7919) % 1000) as f32 / 100.0).collect();
        let m = xs.iter().cloned().fold(f32::MIN, f32::max);
        let z: f64 = xs.iter().map(|&v| ((v - m) as f64).exp()).sum();
        let want: Vec<f32> = xs.iter().map(|&v| (((v - m) as f64).exp() / z) as f32).collect();
        assert_close(&row, &want, 1e-4, 1e-9, "last row");
    }
}

#[test]
fn rows_kernels_hold_short_rows_in_registers_and_stream_long_ones() {
    // A wide rows kernel keeps rows of at most 4 vectors per thread in registers (4096 elements at 256 threads)
    // and streams longer ones: both paths, at and past the boundary, in one rows kernel each.
    for dev in devices() {
        let mut rng = Rng::new(7);
        for cols in [1024, 4096, 4100] {
            let x = stored(&dev, &mut rng, &[300, cols]);
            let sm = x.softmax(-1);
            let k = dispatches(&dev, || drop(check(&sm, 1e-5, 1e-7, &format!("softmax [300, {cols}]"))));
            assert_eq!(k, 1, "softmax [300, {cols}]: one rows kernel");
            let ln = (&x - x.mean_keepdim(-1)) / (x.var_keepdim(-1) + 1e-5).sqrt();
            let k = dispatches(&dev, || drop(check(&ln, 1e-4, 1e-5, &format!("layer norm [300, {cols}]"))));
            assert_eq!(k, 1, "layer norm [300, {cols}]: one rows kernel");
            // Narrow inputs (widened as they load), and an input read both directly and through a view.
            let mut more = Vec::new();
            for dt in [DType::F16, DType::BF16] {
                let h = x.to_dtype(dt);
                h.realize().unwrap();
                more.push((h.softmax(-1), 2e-2, 1e-4, format!("{dt} softmax [300, {cols}]")));
            }
            let t = stored(&dev, &mut rng, &[cols, 300]);
            let what = format!("softmax of x + a transposed view [300, {cols}]");
            more.push(((&x + &t.t()).softmax(-1), 1e-5, 1e-7, what));
            let y = stored(&dev, &mut rng, &[301, cols]);
            let what = format!("softmax of one input read at two offsets [300, {cols}]");
            more.push(((&y.narrow(0, 0, 300) * &y.narrow(0, 1, 300)).softmax(-1), 1e-5, 1e-7, what));
            for (t, rel, abs, what) in more {
                let k = dispatches(&dev, || drop(check(&t, rel, abs, &what)));
                assert_eq!(k, 1, "{what}: one rows kernel");
            }
        }
    }
}

#[test]
fn pipelines_are_cached_across_sizes_and_axis_lengths() {
    for dev in devices() {
        let mut rng = Rng::new(6);
        let run = |rows: usize, cols: usize, rng: &mut Rng| {
            let x = stored(&dev, rng, &[rows, cols]);
            check(&x.sum(-1), 1e-5, 1e-5, "rows");
            check(&x.max(0), 0.0, 0.0, "columns");
            check(&(&x * 2.0).softmax(-1), 1e-5, 1e-6, "softmax");
        };
        // A fold over rows whose length is a multiple of 4 (and at least 64) reads 4 elements at a time: the one
        // other variant of the same structure. With both compiled, no size or axis length compiles anything.
        run(5, 7, &mut rng);
        run(3, 64, &mut rng);
        let compiled = dev.stats().pipelines_compiled;
        run(33, 100, &mut rng);
        run(2, 1000, &mut rng);
        run(9, 13, &mut rng);
        run(40, 301, &mut rng);
        assert_eq!(dev.stats().pipelines_compiled, compiled);
    }
}

#[test]
fn random_graphs_of_reductions_views_and_ops_match_the_reference() {
    for dev in devices() {
        for seed in 0..80u64 {
            let mut rng = Rng::new(seed);
            dev.set_fusion(seed % 2 == 0);
            let shape: Vec<usize> = (0..1 + rng.below(3)).map(|_| 1 + rng.below(9)).collect();
            let mut x = rand(&dev, &mut rng, &shape);
            let mut log = format!("{shape:?}");
            for _ in 0..1 + rng.below(4) {
                let n = x.ndim();
                let d = rng.below(n.max(1)) as i32;
                let (next, what) = match rng.below(8) {
                    0 if n > 1 => (x.sum(d), format!("sum({d})")),
                    1 => (x.max_keepdim(d), format!("max_keepdim({d})")),
                    2 => (&x - x.mean_keepdim(d), format!("center({d})")),
                    3 => (x.softmax(d), format!("softmax({d})")),
                    4 if n >= 2 => (x.t() * 1.5, "t".to_string()),
                    5 => (x.exp().ln() + 0.5, "exp.ln".to_string()),
                    6 if n > 1 => (x.logsumexp(d), format!("logsumexp({d})")),
                    _ => (Tensor::cat(&[&x, &(&x * -1.0)], d), format!("cat({d})")),
                };
                x = next;
                log.push_str(" . ");
                log.push_str(&what);
            }
            let want = lazor::reference::eval(&[&x]).pop().unwrap();
            assert_close(&x.to_vec(), &want, 1e-4, 1e-5, &format!("seed {seed}: {log}"));
        }
    }
}

#[test]
fn the_subgroup_path_is_a_different_kernel_with_the_same_answers() {
    for dev in gpu_devices() {
        // Fails, rather than skips, on an adapter without subgroups (lavapipe and NVIDIA have them) unless the run
        // says it turned them off.
        if std::env::var("LAZOR_NO_SUBGROUPS").is_ok_and(|v| v != "0") {
            assert!(!dev.wgpu().is_some_and(|g| g.subgroups()), "LAZOR_NO_SUBGROUPS=1 turns them off");
            return;
        }
        assert!(dev.wgpu().is_some_and(|g| g.subgroups()), "this adapter has no subgroup operations ({})", dev.name());
        let mut rng = Rng::new(7);
        let x = stored(&dev, &mut rng, &[300, 1000]);
        let on = x.sum(-1).to_vec();
        let compiled = dev.stats().pipelines_compiled;
        if let Some(gpu) = dev.wgpu() {
            gpu.set_subgroups(false);
        }
        let off = x.sum(-1).to_vec();
        assert_eq!(dev.stats().pipelines_compiled, compiled + 1, "the fallback is its own kernel");
        assert_close(&on, &off, 1e-5, 1e-5, "subgroups vs workgroup memory");
    }
}

#[test]
fn sibling_folds_walk_their_domain_once() {
    for dev in both_paths() {
        sibling_folds_walk_their_domain_once_on(&dev);
    }
}

/// Folds of one domain along one axis that read a common buffer (a layer norm's weight and bias gradients, a
/// tensor's range) run as one kernel per pass, each fold kept apart: two passes where each took two, one where
/// each took one.
fn sibling_folds_walk_their_domain_once_on(dev: &Device) {
    let mut rng = Rng::new(23);
    // Realizes `ts` together, counting dispatches, and checks each against the reference taken before, each with
    // its tolerance (relative and absolute alike) and name.
    let realized = |ts: &[(&Tensor, f32, &str)]| {
        let refs: Vec<&Tensor> = ts.iter().map(|t| t.0).collect();
        let want = expect(&refs);
        let k = dispatches(dev, || lazor::realize(&refs).unwrap());
        for ((t, tol, what), want) in ts.iter().zip(&want) {
            check_with(t, want, *tol, *tol, what);
        }
        k
    };
    // Two passes: 4096 rows in chunks, 384 columns; epilogues read other buffers and their own fold.
    let dy = stored(dev, &mut rng, &[4096, 384]);
    let x = stored(dev, &mut rng, &[4096, 384]);
    let other = stored(dev, &mut rng, &[384]);
    let (w, b) = ((&dy * &x).sum(0) * 0.5 + &other, dy.sum(0).abs().sqrt());
    let k = realized(&[
        (&w, 1e-3, "(dy * x).sum(0) * 0.5 + other beside its sibling"),
        (&b, 1e-3, "dy.sum(0).abs().sqrt() beside its sibling"),
    ]);
    assert_eq!(k, 2, "both folds' partials in one kernel, then both folds of them");
    let alone = (&dy * &x).sum(0) * 0.25;
    assert_eq!(realized(&[(&alone, 1e-3, "a fold alone")]), 2, "alone, a fold keeps its two passes");
    // The same siblings with other constants reuse the plan, whose merged kernels then read the new constants
    // where the sibling's parameters moved.
    for (n, c) in [2.0f32, -3.0, 0.25].into_iter().enumerate() {
        let (w, b) = ((&dy * &x).sum(0) * c + &other, (dy.sum(0) * (c + 0.5)).abs().sqrt());
        let want = expect(&[&w, &b]);
        let before = dev.stats();
        lazor::realize(&[&w, &b]).unwrap();
        let after = dev.stats();
        assert_eq!(after.dispatches - before.dispatches, 2, "the siblings with {c}");
        // The first of these plans afresh (its graph has one more op than the siblings' above).
        assert_eq!(after.plans_reused - before.plans_reused, (n > 0) as u64, "the plan of the siblings with {c}");
        check_with(&w, &want[0], 1e-3, 1e-3, &format!("(dy * x).sum(0) * {c} + other beside its sibling"));
        check_with(&b, &want[1], 1e-3, 1e-3, &format!("(dy.sum(0) * ({c} + 0.5)).abs().sqrt() beside its sibling"));
    }
    // Three siblings of different ops and dtypes, and a fold that reads another's result, which stays apart.
    let (s, m) = ((&dy * &x).sum(0), dy.max(0));
    let n = dy.to_dtype(DType::I32).sum(0);
    let scaled = (&dy * &dy.max_keepdim(0)).sum(0);
    let k = realized(&[
        (&s, 1e-3, "sum beside max and an integer sum"),
        (&m, 0.0, "max beside two sums"),
        (&n, 0.0, "integer sum beside two float folds"),
        (&scaled, 1e-3, "a fold of another fold's result"),
    ]);
    assert_eq!(k, 4, "four siblings (the three and the column maxima) in two kernels, the dependent fold after");
    // One pass with a team per column ([8197, 1033]) and one pass a thread per column ([100, 50]).
    let tall = stored(dev, &mut rng, &[8197, 1033]);
    let (norms, peaks) = ((&tall * &tall).sum_keepdim(0).sqrt(), tall.max(0) + 1.0);
    let k = realized(&[
        (&norms, 1e-4, "column norms of [8197, 1033] beside column maxima"),
        (&peaks, 0.0, "column maxima of [8197, 1033] beside column norms"),
    ]);
    assert_eq!(k, 1, "column teams of two folds in one pass");
    let small = stored(dev, &mut rng, &[100, 50]);
    let (lo, sq) = (small.min(0), (&small * 2.0).sum(0));
    let k = realized(&[(&lo, 0.0, "column minima of [100, 50]"), (&sq, 1e-5, "doubled column sums of [100, 50]")]);
    assert_eq!(k, 1, "a thread per column keeps both folds");
    // Rows: a range and a mean square over 2^20 elements (partials, then their folds), and over rows of 3000.
    let long = stored(dev, &mut rng, &[1 << 20]);
    let (lo, hi, ms) = (long.min(0), long.max(0), (&long * &long).mean(0));
    let k = realized(&[
        (&lo, 0.0, "minimum of 2^20 beside the maximum"),
        (&hi, 0.0, "maximum of 2^20 beside the minimum"),
        (&ms, 1e-3, "mean square of 2^20"),
    ]);
    assert_eq!(k, 2, "three folds of 2^20 elements in two passes");
    let wide = stored(dev, &mut rng, &[37, 3000]);
    let (s, q) = (wide.sum(1), (&wide * &wide).sum(1).sqrt());
    let k = realized(&[(&s, 1e-4, "row sums of [37, 3000]"), (&q, 1e-4, "row norms of [37, 3000]")]);
    assert_eq!(k, 1, "row sums and norms in one pass");
}

#[test]
fn random_sibling_folds_match_the_reference() {
    for dev in devices() {
        random_sibling_folds_match_the_reference_on(&dev);
    }
}

/// Random sets of 2 to 4 folds of one stored domain (rank 2 or 3, along rows or columns, one pass or two):
/// prologues through transposes, broadcasts and concatenations, different ops and dtypes, small epilogues. All of them realized together take as many dispatches as the first alone, and each matches the
/// reference.
fn random_sibling_folds_match_the_reference_on(dev: &Device) {
    let mut rng = Rng::new(2311);
    for case in 0..36 {
        let rank = 2 + rng.below(2);
        // Every third case folds rows (the innermost axis, read 4 elements at a time where the reads allow), long
        // enough for two passes (shorter row folds are phases of one rows kernel, which fusion groups), the others
        // columns: 0 in rank 2, 0 or 1 in rank 3, long enough in half the cases for two passes.
        let rows = case % 3 == 2;
        let axis = if rows { rank - 1 } else { rng.below(rank - 1) };
        let mut dims: Vec<usize> = (0..rank).map(|_| 1 + rng.below(12)).collect();
        if !rows {
            dims[rank - 1] = 2 + rng.below(70);
        }
        dims[axis] = match (rows, rng.below(2)) {
            (false, 0) => 1 + rng.below(100),
            (false, _) => 600 + rng.below(2000),
            (true, _) => 8192 + rng.below(4000),
        };
        if rows {
            // Few rows, so that each is cut into chunks.
            dims[..rank - 1].iter_mut().for_each(|d| *d = 1 + *d % 3);
        }
        let x = stored(dev, &mut rng, &dims);
        let y = stored(dev, &mut rng, &dims);
        let mut row = dims.clone();
        row[..rank - 1].iter_mut().for_each(|d| *d = 1);
        let bias = stored(dev, &mut rng, &row);
        let mut flipped = dims.clone();
        flipped.swap(rank - 2, rank - 1);
        let yt = stored(dev, &mut rng, &flipped).transpose(rank as i32 - 2, rank as i32 - 1);
        let cut = dims[axis] / 2;
        let (mut lo, mut hi) = (dims.clone(), dims.clone());
        (lo[axis], hi[axis]) = (cut, dims[axis] - cut);
        let (a, b) = (stored(dev, &mut rng, &lo), stored(dev, &mut rng, &hi));
        let joined = Tensor::cat(&[&a, &b], axis as i32);
        let mut out = dims.clone();
        out[axis] = 1;
        let z = stored(dev, &mut rng, &out);
        let ax = axis as i32;
        // The first always reads x; each later one reads x too, so that every fold shares a buffer with it.
        let fold = |pick: usize| -> (Tensor, &'static str, f32) {
            match pick {
                0 => ((&x * &y).sum_keepdim(ax) * 0.5 + &z, "(x * y).sum * 0.5 + z", 1e-4),
                1 => (x.sum_keepdim(ax).abs().sqrt(), "x.sum.abs.sqrt", 1e-4),
                2 => ((&x + &bias).max_keepdim(ax), "(x + bias).max", 0.0),
                3 => ((&x - &yt).min_keepdim(ax), "(x - yt).min", 0.0),
                4 => ((&x * &joined).sum_keepdim(ax), "(x * cat(a, b)).sum", 1e-4),
                5 => ((&x * 3.0).to_dtype(DType::I32).sum_keepdim(ax), "int(3x).sum", 0.0),
                6 => (x.to_dtype(DType::F16).sum_keepdim(ax), "f16(x).sum", 2e-3),
                _ => ((&x * 0.5 + 1.0).prod_keepdim(ax), "(x * 0.5 + 1).prod", 1e-3),
            }
        };
        let count = 2 + rng.below(3);
        // A row fold of a transposed or concatenated operand reads one element at a time and would not share the
        // walk of one reading 4: rows draw the folds that read along the row.
        let draw = |rng: &mut Rng| if rows { [0, 1, 2, 5, 7][rng.below(5)] } else { rng.below(8) };
        let picks: Vec<usize> = (0..count).map(|_| draw(&mut rng)).collect();
        let folds: Vec<(Tensor, &str, f32)> = picks.iter().map(|&p| fold(p)).collect();
        let what = |name: &str| format!("case {case}: {name} of {dims:?} along {axis}");
        let alone = dispatches(dev, || fold(picks[0]).0.realize().unwrap());
        let refs: Vec<&Tensor> = folds.iter().map(|f| &f.0).collect();
        let want = expect(&refs);
        let together = dispatches(dev, || lazor::realize(&refs).unwrap());
        assert_eq!(together, alone, "{}: {count} siblings {picks:?} as one fold's kernels", what("folds"));
        for ((t, name, tol), want) in folds.iter().zip(&want) {
            let n = dims[axis] as f32;
            check_with(t, want, tol * n.sqrt(), tol * n.sqrt(), &what(name));
        }
    }
}

#[test]
fn rows_kernels_read_views_and_concatenations_and_write_their_folds() {
    for dev in devices() {
        let mut rng = Rng::new(8);
        let a = stored(&dev, &mut rng, &[40, 300]);
        let b = stored(&dev, &mut rng, &[40, 100]);
        let c = stored(&dev, &mut rng, &[300, 40]);
        for (t, what) in [
            (Tensor::cat(&[&a, &b.exp()], -1).softmax(-1), "softmax of a concatenation along the rows"),
            (Tensor::cat(&[&a, &c.t()], 0).softmax(-1), "softmax of a concatenation across the rows"),
            (c.t().log_softmax(-1), "log_softmax of a transposed tensor"),
            // A part that is a constant: values the same for the whole row, inside the concatenation's branches.
            (
                Tensor::cat(&[&Tensor::full_on([40, 1], 0.5f32, &dev).expand([40, 3]), &a], 1).softmax(-1),
                "softmax of a concatenation whose first part is a constant",
            ),
            (
                (&a - a.mean_keepdim(-1)) / (a.var_keepdim(-1) + 1e-5).sqrt() * 2.0 + &b.narrow(1, 0, 1),
                "layer norm, scaled",
            ),
        ] {
            let k = dispatches(&dev, || drop(check(&t, 1e-4, 1e-5, what)));
            assert_eq!(k, 1, "{what}: one rows kernel");
        }
        // The folds and the map realized together: one kernel writes all three.
        let m = a.max_keepdim(-1);
        let e = (&a - &m).exp();
        let s = e.sum_keepdim(-1);
        let sm = &e / &s;
        // The reference first: once realized, the reference would take the tensors' values as given.
        let want = lazor::reference::eval(&[&m, &s, &sm]);
        let k = dispatches(&dev, || lazor::realize(&[&m, &s, &sm]).unwrap());
        assert_eq!(k, 1, "max, sum and softmax in one kernel");
        assert_close(&m.to_vec(), &want[0], 0.0, 0.0, "max written by the rows kernel");
        assert_close(&s.to_vec(), &want[1], 1e-5, 1e-5, "sum written by the rows kernel");
        assert_close(&sm.to_vec(), &want[2], 1e-5, 1e-6, "softmax written by the rows kernel");
    }
}

#[test]
fn rows_kernels_name_folds_after_maps_and_tiles_keep_inputs_apart() {
    for dev in devices() {
        let mut rng = Rng::new(9);
        // A map between two folds of one rows kernel: max, then y, then the sum, then the division.
        let x = stored(&dev, &mut rng, &[512, 256]);
        let y = &x - x.max_keepdim(-1);
        let sm = x.softmax(-1);
        let want = lazor::reference::eval(&[&y, &sm]);
        lazor::realize(&[&y, &sm]).unwrap();
        assert_close(&y.to_vec(), &want[0], 0.0, 0.0, "the map between the folds");
        assert_close(&sm.to_vec(), &want[1], 1e-5, 1e-6, "the softmax after it");
        // Two different inputs transposed the same way: two tiles, not one.
        let (a, b) = (stored(&dev, &mut rng, &[256, 256]), stored(&dev, &mut rng, &[256, 256]));
        check(&(a.t() + b.t()), 0.0, 0.0, "two transposed inputs");
    }
}

/// The CPU backend folds a block of at least 8 columns together, each step of the axis one batch across the block,
/// in the same order per output as it folds a single column. 1029 outputs make a block of 1024 and one of 5 (folded
/// one by one), and the last 5 columns repeat the first 5, so the two ways must agree bit for bit: NaN, max,
/// integers and a prologue included, and in 3-D, where the block's outputs are not adjacent in memory. At least
/// 1024 outputs, so no fold is split into chunks.
#[test]
fn cpu_column_blocks_fold_each_column_as_a_single_column_is_folded() {
    let dev = Device::cpu();
    let mut rng = Rng::new(61);
    let same_ends = |t: &Tensor, what: &str| {
        let v = t.to_vec();
        let n = v.len();
        for i in 0..5 {
            let (p, q) = (v[i], v[n - 5 + i]);
            assert_eq!(p.to_bits(), q.to_bits(), "{what}: output {i} {p} against output {} {q}", n - 5 + i);
        }
    };
    // [rows, cols] whose last 5 columns repeat the first 5.
    let data = |rng: &mut Rng, rows: usize, cols: usize| {
        let mut v = rng.vec(rows * cols, -2.0, 2.0);
        for r in 0..rows {
            for i in 0..5 {
                v[r * cols + cols - 5 + i] = v[r * cols + i];
            }
        }
        v
    };
    let mut v = data(&mut rng, 1500, 1029);
    for r in [7, 900] {
        v[r * 1029 + 3] = f32::NAN;
        v[r * 1029 + 1027] = f32::NAN;
    }
    let x = Tensor::from_vec_on(v, [1500, 1029], &dev);
    same_ends(&x.sum(0), "sum");
    same_ends(&x.max(0), "max");
    same_ends(&(&x * &x).sum(0), "sum of squares");
    same_ends(&(&x * 10.0).to_dtype(DType::I32).sum(0).to_dtype(DType::F32), "i32 sum");

    // 3 x 343 outputs: the block of 1024 spans all three rows of the outer axis.
    let mut w = rng.vec(3 * 1500 * 343, -2.0, 2.0);
    for r in 0..1500 {
        for i in 0..5 {
            w[(2 * 1500 + r) * 343 + 338 + i] = w[r * 343 + i];
        }
    }
    let y = Tensor::from_vec_on(w, [3, 1500, 343], &dev);
    same_ends(&y.sum(1), "blocks across the outer axis");
}

/// `logsumexp`'s two folds run in one pass over each row on a GPU (a running maximum and a rescaled sum): the same
/// values as the reference's two passes, through every path of a rows kernel (a row streamed element by element or
/// in vectors, or cached in registers), with rows of infinities, NaN and extreme magnitudes, and one rows kernel
/// (the fold's one kernel plus `ln + max` after it).
#[test]
fn logsumexp_in_one_pass_matches_two() {
    let mut rng = Rng::new(41);
    // Streamed one by one (odd length), cached in registers (4096 in vectors), streamed in vectors (4104), long.
    for (rows, cols) in [(64, 2513), (16, 4096), (64, 4104), (1024, 9001)] {
        let mut v = rng.vec(rows * cols, -30.0, 30.0);
        let row = |r: usize, v: &mut Vec<f32>, f: &dyn Fn(usize) -> f32| (0..cols).for_each(|c| v[r * cols + c] = f(c));
        row(0, &mut v, &|_| f32::NEG_INFINITY);
        row(1, &mut v, &|c| if c == cols / 2 { f32::INFINITY } else { 1.0 });
        row(2, &mut v, &|c| if c == 3 { f32::NAN } else { 0.5 });
        row(3, &mut v, &|c| if c % 7 == 0 { 3e38 } else { -3e38 });
        row(4, &mut v, &|c| -1e30 - c as f32);
        // The maximum arrives last, so the running sum is rescaled at the end of the row.
        row(5, &mut v, &|c| c as f32 / cols as f32 * 80.0);
        for dev in both_paths() {
            let x = Tensor::from_slice_on(&v, [rows, cols], &dev);
            x.realize().unwrap();
            let what = format!("logsumexp of [{rows}, {cols}] on {}", dev.name());
            // A fresh expression for the check: the reference reads a realized tensor's buffer as its value.
            check(&x.logsumexp(1), 2e-6, 1e-6, &what);
            let y = x.logsumexp(1);
            assert_eq!(dispatches(&dev, || y.realize().unwrap()), 2, "{what}");
        }
    }
}
