//! `lazor::nn`: parameter names as PyTorch's `state_dict`, PyTorch's default initialisations drawn the same on
//! every backend, each layer's forward pass against the host, dropout's modes, activations in a `Sequential`.

mod common;

use common::{assert_close, devices};
use lazor::nn::{self, Module};
use lazor::{Device, Tensor, Var};

/// An activation's name, the function, and its definition on the host.
type Case = (&'static str, fn(&Tensor) -> Tensor, fn(f32) -> f32);

fn names(m: &dyn Module) -> Vec<String> {
    m.parameters().into_iter().map(|(n, _)| n).collect()
}

#[test]
fn parameters_are_named_as_pytorch_state_dict_keys() {
    let dev = Device::cpu();
    assert_eq!(names(&nn::Linear::new_on(3, 2, true, 1, &dev)), ["weight", "bias"]);
    assert_eq!(names(&nn::Linear::new_on(3, 2, false, 1, &dev)), ["weight"]);
    assert_eq!(names(&nn::Embedding::new_on(5, 2, 1, &dev)), ["weight"]);
    assert_eq!(names(&nn::LayerNorm::new_on(4, 1e-5, &dev)), ["weight", "bias"]);
    assert!(names(&nn::Dropout::new(0.1)).is_empty());
    assert!(names(&nn::relu).is_empty());
    let inner = nn::Sequential::new(vec![
        Box::new(nn::LayerNorm::new_on(4, 1e-5, &dev)),
        Box::new(nn::Linear::new_on(4, 4, false, 2, &dev)),
    ]);
    let model = nn::Sequential::new(vec![
        Box::new(nn::Embedding::new_on(10, 4, 1, &dev)),
        Box::new(inner),
        Box::new(nn::gelu),
        Box::new(nn::Dropout::new(0.5)),
        Box::new(nn::Linear::new_on(4, 3, true, 3, &dev)),
    ]);
    assert_eq!(names(&model), ["0.weight", "1.0.weight", "1.0.bias", "1.1.weight", "4.weight", "4.bias"]);
    let fc = nn::Linear::new_on(4, 3, true, 3, &dev);
    assert_eq!(nn::prefixed("head", &fc).into_iter().map(|(n, _)| n).collect::<Vec<_>>(), ["head.weight", "head.bias"]);
    // The parameters are the layer's own Vars: an update through them is the layer's.
    let (_, w) = &fc.parameters()[0];
    assert!(w.same(&fc.weight));
    assert_eq!(fc.vars().len(), 2);
    assert_eq!(model.len(), 5);
    // A boxed module is a module.
    let boxed: Box<dyn Module> = Box::new(fc);
    assert_eq!(names(&boxed), ["weight", "bias"]);
}

#[test]
fn linear_is_initialised_as_pytorch_and_the_same_on_every_backend() {
    let mut first: Option<(Vec<f32>, Vec<f32>)> = None;
    for dev in devices() {
        let fc = nn::Linear::new_on(64, 48, true, 7, &dev);
        assert_eq!((fc.weight.shape(), fc.bias.as_ref().unwrap().shape()), (&[48, 64][..], &[48][..]));
        let (w, b) = (fc.weight.to_vec(), fc.bias.as_ref().unwrap().to_vec());
        let bound = 1.0 / 8.0;
        assert!(w.iter().chain(&b).all(|v| (-bound..bound).contains(v)), "{}: within 1/sqrt(in)", dev.name());
        let mean = w.iter().sum::<f32>() / w.len() as f32;
        let var = w.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / w.len() as f32;
        // Uniform on [-a, a): variance a^2 / 3.
        assert!(mean.abs() < 0.01 && (var / (bound * bound / 3.0) - 1.0).abs() < 0.1, "{mean} {var}");
        assert_ne!(w[..48], b[..], "the bias is a stream of its own");
        match &first {
            None => first = Some((w, b)),
            Some((w0, b0)) => assert!(w == *w0 && b == *b0, "{}: other weights than the first backend's", dev.name()),
        }
        let other = nn::Linear::new_on(64, 48, true, 8, &dev);
        assert_ne!(other.weight.to_vec(), fc.weight.to_vec(), "another seed");
        assert_eq!(nn::Linear::new_on(64, 48, true, 7, &dev).weight.to_vec(), fc.weight.to_vec(), "the same seed");
    }
}

#[test]
fn embedding_is_standard_normal_and_layer_norm_ones_and_zeros() {
    for dev in devices() {
        let emb = nn::Embedding::new_on(256, 64, 5, &dev);
        let w = emb.weight.to_vec();
        let mean = w.iter().sum::<f32>() / w.len() as f32;
        let var = w.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / w.len() as f32;
        assert!(mean.abs() < 0.02 && (var - 1.0).abs() < 0.03, "{}: N(0, 1)? mean {mean} var {var}", dev.name());
        let ln = nn::LayerNorm::new_on(6, 1e-5, &dev);
        assert_eq!((ln.weight.to_vec(), ln.bias.to_vec()), (vec![1.0; 6], vec![0.0; 6]));
    }
}

#[test]
fn forward_passes_match_the_host() {
    let mut rng = common::Rng::new(3);
    for dev in devices() {
        // Linear: x W^T + b.
        let fc = nn::Linear::new_on(5, 3, true, 1, &dev);
        let xs = rng.vec(4 * 5, -1.0, 1.0);
        let x = Tensor::from_slice_on(&xs, [4, 5], &dev);
        let (w, b) = (fc.weight.to_vec(), fc.bias.as_ref().unwrap().to_vec());
        let want: Vec<f32> = (0..12)
            .map(|i| {
                let (r, c) = (i / 3, i % 3);
                (0..5).map(|k| xs[r * 5 + k] * w[c * 5 + k]).sum::<f32>() + b[c]
            })
            .collect();
        assert_close(&fc.forward(&x).to_vec(), &want, 1e-5, 1e-6, "linear");
        let no_bias = nn::Linear::new_on(5, 3, false, 1, &dev);
        let want: Vec<f32> = want.iter().enumerate().map(|(i, v)| v - b[i % 3]).collect();
        assert_close(&no_bias.forward(&x).to_vec(), &want, 1e-5, 1e-5, "linear without bias");
        // A batch of sequences: [2, 2, 5] -> [2, 2, 3].
        assert_eq!(fc.forward(&x.reshape([2, 2, 5])).shape(), &[2, 2, 3]);

        // LayerNorm with a scale and shift.
        let ln = nn::LayerNorm::new_on(5, 1e-5, &dev);
        ln.weight.set(Tensor::from_slice_on(&[1.0f32, 2.0, 0.5, -1.0, 3.0], [5], &dev));
        ln.bias.set(Tensor::from_slice_on(&[0.0f32, 0.1, 0.2, 0.3, 0.4], [5], &dev));
        let (lw, lb) = (ln.weight.to_vec(), ln.bias.to_vec());
        let want: Vec<f32> = xs
            .chunks(5)
            .flat_map(|row| {
                let mean = row.iter().sum::<f32>() / 5.0;
                let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / 5.0;
                let (lw, lb) = (&lw, &lb);
                row.iter().enumerate().map(move |(i, v)| (v - mean) / (var + 1e-5).sqrt() * lw[i] + lb[i])
            })
            .collect();
        assert_close(&ln.forward(&x).to_vec(), &want, 1e-5, 1e-5, "layer norm");

        // Embedding: rows of the table.
        let emb = nn::Embedding::new_on(7, 3, 2, &dev);
        let table = emb.weight.to_vec();
        let idx = Tensor::from_slice_on(&[6i32, 0, 6, 2], [2, 2], &dev);
        let want: Vec<f32> = [6, 0, 6, 2].iter().flat_map(|&r| table[r * 3..r * 3 + 3].to_vec()).collect();
        let got = emb.forward(&idx);
        assert_eq!(got.shape(), &[2, 2, 3]);
        assert_eq!(got.to_vec(), want);

        // Activations as functions and as layers.
        let v = Tensor::from_slice_on(&[-2.0f32, -0.5, 0.0, 0.5, 2.0], [5], &dev);
        let host = [-2.0f32, -0.5, 0.0, 0.5, 2.0];
        let cases: [Case; 4] = [
            ("relu", nn::relu, |x| x.max(0.0)),
            ("sigmoid", nn::sigmoid, |x| 1.0 / (1.0 + (-x).exp())),
            ("tanh", nn::tanh, f32::tanh),
            ("silu", nn::silu, |x| x / (1.0 + (-x).exp())),
        ];
        for (name, f, h) in cases {
            let want: Vec<f32> = host.iter().map(|&x| h(x)).collect();
            assert_close(&f(&v).to_vec(), &want, 1e-5, 1e-6, name);
            assert_close(&f.forward(&v).to_vec(), &want, 1e-5, 1e-6, name);
        }
        let gelu: Vec<f32> =
            host.iter().map(|&x| 0.5 * x * (1.0 + (0.797_884_6 * (x + 0.044_715 * x * x * x)).tanh())).collect();
        assert_close(&nn::gelu(&v).to_vec(), &gelu, 1e-5, 1e-6, "gelu");
    }
}

#[test]
fn sequential_chains_layers_and_gradients_reach_every_parameter() {
    for dev in devices() {
        let model = nn::Sequential::new(vec![
            Box::new(nn::Linear::new_on(4, 8, true, 1, &dev)),
            Box::new(nn::LayerNorm::new_on(8, 1e-5, &dev)),
            Box::new(nn::relu),
            Box::new(|x: &Tensor| x * 2.0),
            Box::new(nn::Linear::new_on(8, 3, true, 2, &dev)),
        ]);
        let x = Tensor::rand_on([5, 4], 9, &dev);
        let y = model.forward(&x);
        assert_eq!(y.shape(), &[5, 3]);
        // Against the layers applied one by one.
        let layers = model.layers();
        let mut h = x.clone();
        for l in layers {
            h = l.forward(&h);
        }
        assert_eq!(y.to_vec(), h.to_vec());
        let grads = y.square().sum_all().backward();
        for (name, v) in model.parameters() {
            let g = grads.get(&v).unwrap_or_else(|| panic!("{}: no gradient for {name}", dev.name()));
            assert_eq!(g.shape(), v.shape(), "{name}");
        }
        assert_eq!(grads.len(), 6);
    }
}

#[test]
fn dropout_drops_while_training_and_is_the_identity_otherwise() {
    for dev in devices() {
        let drop = nn::Dropout::new(0.25);
        assert!(drop.is_training(), "modules start in training mode, as in PyTorch");
        let x = Tensor::ones_on([4096], &dev);
        let a = drop.forward(&x).to_vec();
        let b = drop.forward(&x).to_vec();
        let kept = a.iter().filter(|&&v| v != 0.0).count() as f32 / a.len() as f32;
        assert!((kept - 0.75).abs() < 0.03, "{}: kept {kept}", dev.name());
        assert!(a.iter().all(|&v| v == 0.0 || v == 1.0 / 0.75));
        assert_ne!(a, b, "each forward pass draws a new mask");
        // Seeded layers draw the same masks on every backend.
        let s1 = nn::Dropout::with_seed(0.5, 11);
        let s2 = nn::Dropout::with_seed(0.5, 11);
        assert_eq!(s1.forward(&x).to_vec(), s2.forward(&x).to_vec());
        drop.train(false);
        assert_eq!(drop.forward(&x).to_vec(), vec![1.0; 4096]);
        // A container passes the mode on.
        let model = nn::Sequential::new(vec![Box::new(nn::Dropout::new(0.9)), Box::new(nn::relu)]);
        model.train(false);
        assert_eq!(model.forward(&x).to_vec(), vec![1.0; 4096]);
        model.train(true);
        assert!(model.forward(&x).to_vec().contains(&0.0));
        assert_eq!(nn::Dropout::new(0.0).forward(&x).to_vec(), vec![1.0; 4096]);
    }
}

#[test]
fn a_new_dropout_mask_compiles_and_plans_nothing() {
    for dev in devices() {
        let drop = nn::Dropout::new(0.5);
        let w = Var::new(Tensor::ones_on([64], &dev));
        let run = || {
            let loss = drop.forward(&w.tensor()).sum_all();
            let g = loss.backward();
            lazor::realize(&[&loss, &g[&w]]).unwrap();
        };
        run();
        let before = dev.stats();
        run();
        let after = dev.stats();
        assert_eq!(after.plans_reused - before.plans_reused, 1, "{}", dev.name());
        assert_eq!(after.pipelines_compiled, before.pipelines_compiled, "{}", dev.name());
    }
}

#[test]
fn dropout_rejects_a_bad_probability() {
    assert!(matches!(nn::Dropout::try_new(1.0), Err(lazor::Error::Config { op: "Dropout::new", .. })));
    assert!(nn::Dropout::try_new(f32::NAN).is_err() && nn::Dropout::try_new(-0.1).is_err());
    let e = std::panic::catch_unwind(|| nn::Dropout::new(1.5)).unwrap_err();
    let msg = e.downcast_ref::<String>().unwrap();
    assert!(msg.contains("Dropout::new: the probability p = 1.5 is not in [0, 1)"), "{msg}");
}

#[test]
fn conv2d_layer_is_initialised_as_pytorch_and_convolves_with_its_bias() {
    let mut first: Option<Vec<f32>> = None;
    for dev in devices() {
        let conv = nn::Conv2d::new_on(4, 6, (3, 2), (2, 1), (1, 0), 9, &dev);
        assert_eq!(names(&conv), ["weight", "bias"]);
        assert_eq!((conv.weight.shape(), conv.bias.shape()), (&[6, 4, 3, 2][..], &[6][..]));
        let w = conv.weight.to_vec();
        let bound = 1.0 / (24f32).sqrt();
        assert!(w.iter().chain(&conv.bias.to_vec()).all(|v| (-bound..bound).contains(v)), "{}", dev.name());
        match &first {
            None => first = Some(w.clone()),
            Some(w0) => assert_eq!(&w, w0, "{}: the same weights on every backend", dev.name()),
        }
        let x = Tensor::rand_on([2, 4, 7, 5], 3, &dev);
        let y = conv.forward(&x);
        assert_eq!(y.shape(), &[2, 6, 4, 4]);
        let want = x.conv2d(&conv.weight, Some(&conv.bias), (2, 1), (1, 0));
        assert_close(&y.to_vec(), &want.to_vec(), 0.0, 0.0, "Conv2d::forward is conv2d with its settings");
    }
}

/// Layer norm's gradients (input, weight, bias) against a host computation in f64, on every backend, over 5 rows,
/// so that teams past the last row run beside the real ones: rows of 384 (held in registers), 260 (scalar: not a
/// whole number of vectors) and 2048 (past the registers). The product after it keeps the forward's kernel apart
/// from the backward's, which then reads the saved mean and variance, as a training step's do: once per row where
/// the row is read in vectors (`codegen/emit.rs`, `Emitter::hoisted`).
#[test]
fn layer_norm_gradients_match_the_host() {
    for dev in devices() {
        let mut rng = common::Rng::new(11);
        for d in [384usize, 260, 2048] {
            let (rows, outs) = (5, 3);
            let (xv, wv, bv) = (rng.vec(rows * d, -2.0, 2.0), rng.vec(d, 0.5, 1.5), rng.vec(d, -0.5, 0.5));
            let (mv, gv) = (rng.vec(d * outs, -1.0, 1.0), rng.vec(rows * outs, -1.0, 1.0));
            let x = Var::new(Tensor::from_slice_on(&xv, [rows, d], &dev));
            let w = Var::new(Tensor::from_slice_on(&wv, [d], &dev));
            let b = Var::new(Tensor::from_slice_on(&bv, [d], &dev));
            let y = nn::functional::layer_norm(&x.tensor(), Some(&w.tensor()), Some(&b.tensor()), 1e-5);
            let z = y.matmul(&Tensor::from_slice_on(&mv, [d, outs], &dev));
            let loss = (&z * &Tensor::from_slice_on(&gv, [rows, outs], &dev)).sum_all();
            let grads = loss.backward();
            // Realized with the loss, as a training step is, so the forward's kernels run too.
            let (gx, gw, gb) = (&grads[&x], &grads[&w], &grads[&b]);
            lazor::realize(&[&loss, gx, gw, gb]).unwrap();
            let (mut dx, mut dw, mut db) = (vec![0.0f32; rows * d], vec![0.0f64; d], vec![0.0f64; d]);
            for r in 0..rows {
                let row = &xv[r * d..(r + 1) * d];
                // The gradient reaching the layer norm's output: g m^T.
                let g: Vec<f64> = (0..d)
                    .map(|j| (0..outs).map(|o| gv[r * outs + o] as f64 * mv[j * outs + o] as f64).sum())
                    .collect();
                let mean = row.iter().map(|&a| a as f64).sum::<f64>() / d as f64;
                let var = row.iter().map(|&a| (a as f64 - mean).powi(2)).sum::<f64>() / d as f64;
                let rstd = 1.0 / (var + 1e-5).sqrt();
                let xhat: Vec<f64> = row.iter().map(|&a| (a as f64 - mean) * rstd).collect();
                let gw: Vec<f64> = (0..d).map(|j| g[j] * wv[j] as f64).collect();
                let m1 = gw.iter().sum::<f64>() / d as f64;
                let m2 = gw.iter().zip(&xhat).map(|(a, h)| a * h).sum::<f64>() / d as f64;
                for j in 0..d {
                    dx[r * d + j] = (rstd * (gw[j] - m1 - xhat[j] * m2)) as f32;
                    dw[j] += g[j] * xhat[j];
                    db[j] += g[j];
                }
            }
            let what = |name: &str| format!("layer norm's {name} gradient, rows of {d}, on {}", dev.name());
            assert_close(&gx.to_vec(), &dx, 1e-3, 1e-5, &what("input"));
            let host = |v: Vec<f64>| v.into_iter().map(|a| a as f32).collect::<Vec<f32>>();
            assert_close(&gw.to_vec(), &host(dw), 1e-4, 1e-5, &what("weight"));
            assert_close(&gb.to_vec(), &host(db), 1e-4, 1e-5, &what("bias"));
        }
    }
}
