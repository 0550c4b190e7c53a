//! `scaled_dot_product_attention` and the triangular products causal attention is built from, against the
//! reference interpreter and against the same attention composed of plain ops, values and gradients, on every
//! backend.

mod common;

use common::{assert_close, check, devices, kernels, Rng};
use lazor::nn::functional::{scaled_dot_product_attention as sdpa, try_scaled_dot_product_attention};
use lazor::op::Tri;
use lazor::{DType, Device, Error, Grads, Tensor, Var};

/// Attention spelled with plain ops: a full product, the causal mask as `masked_fill`, softmax, a full product.
fn composed(q: &Tensor, k: &Tensor, v: &Tensor, causal: bool) -> Tensor {
    let e = q.shape()[q.ndim() - 1];
    let scores = q.matmul(&k.transpose(-2, -1)) * (1.0 / (e as f32).sqrt());
    let scores = if causal {
        let (l, s) = (q.shape()[q.ndim() - 2], k.shape()[k.ndim() - 2]);
        scores.masked_fill(&Tensor::ones_on([l, s], q.device()).triu(1).ne(0.0), f32::NEG_INFINITY)
    } else {
        scores
    };
    scores.softmax(-1).matmul(v)
}

fn random(dev: &Device, rng: &mut Rng, dims: &[usize]) -> Tensor {
    let t = Tensor::from_slice_on(&rng.vec(dims.iter().product(), -1.0, 1.0), dims, dev);
    t.realize().unwrap();
    t
}

/// `(batch of q, batch of k and v, L, S, E, Ev)`.
type Case = (&'static [usize], &'static [usize], usize, usize, usize, usize);

/// One tile and less, many tiles with edges, L and S apart, heads broadcast, and nanoGPT's head shape.
const CASES: [Case; 7] = [
    (&[2, 3], &[2, 3], 5, 5, 8, 8),
    (&[1, 2], &[1, 2], 40, 40, 16, 16),
    (&[2], &[2], 130, 130, 64, 64),
    (&[2, 2], &[2, 2], 200, 70, 32, 24),
    (&[3], &[3], 70, 200, 8, 16),
    (&[2, 3], &[1, 3], 33, 33, 12, 20),
    (&[4, 2], &[4, 2], 256, 256, 64, 64),
];

#[test]
fn causal_attention_matches_the_reference_and_the_masked_composition() {
    for dev in devices() {
        let mut rng = Rng::new(11);
        for &(bq, bkv, l, s, e, ev) in &CASES {
            let q = random(&dev, &mut rng, &[bq, &[l, e]].concat());
            let k = random(&dev, &mut rng, &[bkv, &[s, e]].concat());
            let v = random(&dev, &mut rng, &[bkv, &[s, ev]].concat());
            // The third run unfused where L passes 100 (every op its own kernel, the masked scores stored).
            for (causal, fuse) in [(true, true), (false, true), (true, l < 100)] {
                dev.set_fusion(fuse);
                let what = format!("{bq:?} L {l} S {s} E {e} Ev {ev} causal {causal} fusion {fuse} on {}", dev.name());
                let got = check(&sdpa(&q, &k, &v, causal), 1e-4, 1e-5, &what);
                assert_close(&got, &composed(&q, &k, &v, causal).to_vec(), 1e-4, 1e-5, &what);
            }
            dev.set_fusion(true);
        }
    }
}

#[test]
fn causal_attention_gradients_match_the_masked_composition() {
    for dev in devices() {
        let mut rng = Rng::new(12);
        for &(bq, bkv, l, s, e, ev) in &CASES[1..] {
            let q = Var::new(random(&dev, &mut rng, &[bq, &[l, e]].concat()));
            let k = Var::new(random(&dev, &mut rng, &[bkv, &[s, e]].concat()));
            let v = Var::new(random(&dev, &mut rng, &[bkv, &[s, ev]].concat()));
            let w = random(&dev, &mut rng, &[bq, &[l, ev]].concat());
            let grads = |f: fn(&Tensor, &Tensor, &Tensor, bool) -> Tensor| -> Vec<Vec<f32>> {
                let loss = (f(&q.tensor(), &k.tensor(), &v.tensor(), true) * &w).sum_all();
                let g: Grads = loss.backward();
                [&q, &k, &v].iter().map(|x| g.get(x).expect("a gradient").to_vec()).collect()
            };
            let (got, want) = (grads(|q, k, v, c| sdpa(q, k, v, c)), grads(composed));
            for (name, (g, w)) in ["q", "k", "v"].iter().zip(got.iter().zip(&want)) {
                let what = format!("d{name} of {bq:?} L {l} S {s} E {e} Ev {ev} on {}", dev.name());
                assert_close(g, w, 1e-3, 1e-5, &what);
            }
        }
    }
}

/// Half-precision inputs give a result of their type, against the reference (which rounds each op's result to the
/// type as the devices do; the products' sums may round apart, hence a few steps of the type).
#[test]
fn causal_attention_in_half_types() {
    for dev in devices() {
        let mut rng = Rng::new(16);
        for (dt, tol) in [(DType::F16, 4e-3), (DType::BF16, 3e-2)] {
            let [q, k, v] = [(); 3].map(|_| {
                let t = random(&dev, &mut rng, &[2, 2, 130, 32]).to_dtype(dt);
                t.realize().unwrap();
                t
            });
            let y = sdpa(&q, &k, &v, true);
            assert_eq!(y.dtype(), dt);
            check(&y, tol, tol, &format!("{dt} causal attention on {}", dev.name()));
            // Gradients of the type, against the masked composition's in the same type.
            let vars = [&q, &k, &v].map(|t| Var::new(t.clone()));
            let grads = |f: fn(&Tensor, &Tensor, &Tensor, bool) -> Tensor| -> Vec<Vec<f32>> {
                let loss =
                    f(&vars[0].tensor(), &vars[1].tensor(), &vars[2].tensor(), true).to_dtype(DType::F32).sum_all();
                let g: Grads = loss.backward();
                vars.iter().map(|x| g.get(x).expect("a gradient").to_dtype(DType::F32).to_vec()).collect()
            };
            for (name, (g, w)) in
                ["q", "k", "v"].iter().zip(grads(|q, k, v, c| sdpa(q, k, v, c)).iter().zip(&grads(composed)))
            {
                assert_close(g, w, 4.0 * tol, 4.0 * tol, &format!("{dt} d{name} on {}", dev.name()));
            }
        }
    }
}

/// Every mode of the triangular product against the reference interpreter and against the plain product of the
/// masked operand (or masked after), with its gradients, on tile edges and past them, operands transposed or not.
#[test]
fn triangular_products_keep_their_triangle() {
    let modes = [Tri::OutLower, Tri::OutUpper, Tri::Causal, Tri::ALower, Tri::AUpper];
    for dev in devices() {
        let mut rng = Rng::new(13);
        // Edges everywhere, then blocks that cover the product exactly (kernels without bounds checks, 16-byte
        // fetches), with rows past k (A's upper triangle then leaves whole blocks nothing to do).
        let shapes = [(1, 7, 9, 5), (3, 150, 140, 70), (2, 64, 256, 130), (2, 300, 100, 300), (2, 128, 64, 128)];
        for (batch, m, k, n) in shapes.into_iter().chain([(2, 256, 64, 128)]) {
            let a = random(&dev, &mut rng, &[batch, m, k]);
            // A read transposed: its gradient takes the rule's transposed branch.
            let at = random(&dev, &mut rng, &[batch, k, m]);
            let b = random(&dev, &mut rng, &[batch, k, n]);
            let g = random(&dev, &mut rng, &[batch, m, n]);
            let rows = |len: usize| Tensor::arange_on(len, &dev).reshape([len, 1]);
            let cols = |len: usize| Tensor::arange_on(len, &dev).reshape([1, len]);
            for mode in modes {
                for (source, transposed) in [(&a, false), (&at, true)] {
                    let operand = |x: &Tensor| if transposed { x.transpose(-2, -1) } else { x.clone() };
                    let a = &operand(source);
                    let what = format!("{mode:?} of [{batch}, {m}, {k}] x [{k}, {n}], A transposed {transposed}");
                    let what = format!("{what} on {}", dev.name());
                    let masked = |a: &Tensor, b: &Tensor| -> Tensor {
                        match mode {
                            Tri::OutLower => (cols(n) - rows(m)).le(0).where_cond(a.matmul(b), 0.0),
                            Tri::OutUpper => (cols(n) - rows(m)).ge(0).where_cond(a.matmul(b), 0.0),
                            Tri::Causal => (cols(n) - rows(m)).le(0).where_cond(a.matmul(b), f32::NEG_INFINITY),
                            Tri::ALower => (cols(k) - rows(m)).le(0).where_cond(a, 0.0).matmul(b),
                            Tri::AUpper => (cols(k) - rows(m)).ge(0).where_cond(a, 0.0).matmul(b),
                            Tri::Full => unreachable!(),
                        }
                    };
                    let got = check(&a.matmul_tri(&b, mode), 1e-4, 1e-5, &what);
                    assert_close(&got, &masked(a, &b).to_vec(), 1e-4, 1e-5, &what);
                    let (va, vb) = (Var::new(source.clone()), Var::new(b.clone()));
                    let grads = |tri: bool| -> Vec<Vec<f32>> {
                        let (x, y) = (operand(&va.tensor()), vb.tensor());
                        let p = if tri { x.matmul_tri(&y, mode) } else { masked(&x, &y) };
                        let gs = (p * &g).sum_all().backward();
                        [&va, &vb].iter().map(|v| gs.get(v).expect("a gradient").to_vec()).collect()
                    };
                    for (g, w) in grads(true).iter().zip(&grads(false)) {
                        assert_close(g, w, 1e-4, 1e-5, &format!("gradients of {what}"));
                    }
                }
            }
        }
    }
}

/// A NaN in a key or value reaches every query that attends to it and, from a key, no other: the mask drops
/// the scores past the diagonal before the softmax whatever they hold. (Whether a NaN in a value past query `i`
/// reaches row `i` depends on the block it falls in, as with PyTorch's fused kernels: not tested.)
#[test]
fn a_nan_reaches_the_queries_that_attend_to_it() {
    for dev in devices() {
        let (l, e) = (70, 8);
        let mut rng = Rng::new(14);
        let q = random(&dev, &mut rng, &[1, l, e]);
        let mut kv = rng.vec(l * e, -1.0, 1.0);
        kv[40 * e..41 * e].fill(f32::NAN);
        let k = Tensor::from_slice_on(&kv, [1, l, e], &dev);
        let v = random(&dev, &mut rng, &[1, l, e]);
        let y = sdpa(&q, &k, &v, true).to_vec();
        let nan_rows: Vec<usize> = (0..l).filter(|r| y[r * e..(r + 1) * e].iter().any(|x| x.is_nan())).collect();
        assert_eq!(nan_rows, (40..l).collect::<Vec<_>>(), "queries 40.. read key 40 on {}", dev.name());
        let y = sdpa(&q, &v, &k, true).to_vec();
        let nan = |r: usize| y[r * e..(r + 1) * e].iter().all(|x| x.is_nan());
        assert!((40..l).all(nan), "queries 40.. weigh value 40 on {}", dev.name());
    }
}

/// Causal attention runs in as many kernels as its composition: two products and one softmax forward, and no
/// more backward (that its products are triangular kernels is asserted on the kernel IR, in
/// `codegen::matmul_tri`'s tests).
#[test]
fn causal_attention_adds_no_kernels() {
    for dev in devices().into_iter().filter(|d| !d.is_cpu()) {
        let mut rng = Rng::new(15);
        // Heads of 32: with 16, the composition's products along the head run as thin kernels or folds, whose
        // count depends on the device (the counts differed on the H200, not on lavapipe), while triangular ones
        // always run tiled.
        let [q, k, v] = [(); 3].map(|_| random(&dev, &mut rng, &[4, 2, 130, 32]));
        let forward = kernels(&dev, || sdpa(&q, &k, &v, true).realize().unwrap());
        assert_eq!(forward, 3, "a product, the masked softmax, a product on {}", dev.name());
        let step = |f: fn(&Tensor, &Tensor, &Tensor, bool) -> Tensor| {
            let vars: Vec<Var> = [&q, &k, &v].iter().map(|t| Var::new((*t).clone())).collect();
            let loss = f(&vars[0].tensor(), &vars[1].tensor(), &vars[2].tensor(), true).sum_all();
            let g = loss.backward();
            let outs: Vec<Tensor> = vars.iter().map(|x| g.get(x).unwrap()).chain([loss]).collect();
            kernels(&dev, || lazor::realize(&outs.iter().collect::<Vec<_>>()).unwrap())
        };
        let (fused, plain) = (step(|q, k, v, c| sdpa(q, k, v, c)), step(composed));
        assert_eq!(fused, plain, "a training step's kernels on {}", dev.name());
    }
}

#[test]
fn bad_attention_inputs_are_errors_naming_the_op_and_shapes() {
    let dev = Device::cpu();
    let t = |dims: &[usize]| Tensor::zeros_on(dims, &dev);
    let err = try_scaled_dot_product_attention(&t(&[2, 5, 8]), &t(&[2, 5, 4]), &t(&[2, 5, 8]), true).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "scaled_dot_product_attention", .. }), "{err}");
    assert!(err.to_string().contains("[2, 5, 8]") && err.to_string().contains("[2, 5, 4]"), "{err}");
    let err = try_scaled_dot_product_attention(&t(&[2, 5, 8]), &t(&[2, 6, 8]), &t(&[2, 5, 8]), true).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
    let err = try_scaled_dot_product_attention(&t(&[3, 5, 8]), &t(&[2, 5, 8]), &t(&[2, 5, 8]), false).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
    let err = try_scaled_dot_product_attention(&t(&[8]), &t(&[2, 8]), &t(&[2, 8]), true).unwrap_err();
    assert!(matches!(err, Error::BadArgument { .. }), "{err}");
    let ints = Tensor::from_slice_on(&[1i32; 4], [2, 2], &dev);
    let err = try_scaled_dot_product_attention(&ints, &t(&[2, 2]), &t(&[2, 2]), true).unwrap_err();
    assert!(matches!(err, Error::DType { .. }), "{err}");
    let (q, k) = (t(&[2, 5, 8]), t(&[2, 5, 4]));
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sdpa(&q, &k, &q, true)));
    assert!(panicked.is_err(), "the panicking form panics");
}
