//! `lazor::autocast`: the region's rules (half types only, nesting, per thread, restored on panic), the type each
//! op gives inside it, op by op, with values checked against the reference interpreter; gradient types; and the
//! casts fused into the kernels that read them. On every backend.

mod common;

use common::{check, devices, kernels, stored_within, Rng};
use lazor::nn::{self, functional as F, Module};
use lazor::optim::{AdamW, AdamWConfig};
use lazor::{autocast, autocast_dtype, try_autocast, DType, Device, Tensor, Var};

const HALVES: [DType; 2] = [DType::F16, DType::BF16];

/// Tolerance of a value computed through `dt`'s rounding.
fn tol(dt: DType) -> f32 {
    if dt == DType::BF16 {
        2e-2
    } else {
        4e-3
    }
}

#[test]
fn only_half_types_open_a_region() {
    for dt in [DType::F32, DType::I32, DType::U32, DType::Bool] {
        let mut ran = false;
        match try_autocast(dt, || ran = true) {
            Err(lazor::Error::DType { op: "autocast", message }) => assert!(message.contains(dt.name()), "{message}"),
            other => panic!("autocast({dt}) gave {other:?}"),
        }
        assert!(!ran, "f does not run on an error");
    }
    let caught = std::panic::catch_unwind(|| autocast(DType::F32, || ())).expect_err("f32 panics");
    let msg = caught.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("autocast") && msg.contains("f16 or bf16"), "{msg}");
    assert_eq!(try_autocast(DType::BF16, || 7).unwrap(), 7);
}

#[test]
fn regions_nest_are_per_thread_and_end_on_panic() {
    assert_eq!(autocast_dtype(), None);
    autocast(DType::BF16, || {
        assert_eq!(autocast_dtype(), Some(DType::BF16));
        autocast(DType::F16, || assert_eq!(autocast_dtype(), Some(DType::F16)));
        assert_eq!(autocast_dtype(), Some(DType::BF16), "the inner region ends");
        let other = std::thread::spawn(autocast_dtype).join().unwrap();
        assert_eq!(other, None, "another thread is not in the region");
    });
    assert_eq!(autocast_dtype(), None);
    let _ = std::panic::catch_unwind(|| autocast(DType::F16, || panic!("inside")));
    assert_eq!(autocast_dtype(), None, "a panic ends the region");
}

/// Operands of the products on `dev`: f32, realized.
struct Operands {
    x: Tensor,
    w: Tensor,
    b: Tensor,
    image: Tensor,
    kernel: Tensor,
    q: Tensor,
}

fn operands(dev: &Device, rng: &mut Rng) -> Operands {
    Operands {
        x: stored_within(dev, rng, &[5, 8], 1.0).1,
        w: stored_within(dev, rng, &[6, 8], 1.0).1,
        b: stored_within(dev, rng, &[6], 1.0).1,
        image: stored_within(dev, rng, &[2, 3, 6, 5], 1.0).1,
        kernel: stored_within(dev, rng, &[4, 3, 3, 3], 0.5).1,
        q: stored_within(dev, rng, &[2, 5, 8], 1.0).1,
    }
}

#[test]
fn products_compute_in_the_region_type() {
    for dev in devices() {
        let mut rng = Rng::new(1);
        let o = operands(&dev, &mut rng);
        let linear = nn::Linear::new_on(8, 6, true, 3, &dev);
        let conv = nn::Conv2d::new_on(3, 4, (3, 3), (1, 1), (1, 1), 4, &dev);
        for dt in HALVES {
            // f32 operands, and half operands of the other half type: both are cast to the region's.
            let other = if dt == DType::F16 { DType::BF16 } else { DType::F16 };
            let outs: Vec<(&str, Tensor)> = autocast(dt, || {
                vec![
                    ("matmul", o.x.matmul(&o.w.t())),
                    ("matmul of the other half type", o.x.to_dtype(other).matmul(&o.w.t())),
                    ("matmul of a vector", o.x.matmul(&o.w.narrow(0, 0, 1).reshape([8]))),
                    ("linear", F::linear(&o.x, &o.w, Some(&o.b))),
                    ("linear without bias", F::linear(&o.x, &o.w, None)),
                    ("nn::Linear", linear.forward(&o.x)),
                    ("conv2d", o.image.conv2d(&o.kernel, Some(&o.b.narrow(0, 0, 4)), (1, 1), (1, 1))),
                    ("nn::Conv2d", conv.forward(&o.image)),
                    ("attention", F::scaled_dot_product_attention(&o.q, &o.q, &o.q, false)),
                    ("causal attention", F::scaled_dot_product_attention(&o.q, &o.q, &o.q, true)),
                ]
            });
            for (what, y) in &outs {
                let what = format!("{}: autocast({dt}) {what}", dev.name());
                assert_eq!(y.dtype(), dt, "{what}");
                check(y, tol(dt), tol(dt), &what);
            }
            // And their values are the f32 ones, to the half type's precision.
            let want = o.x.matmul(&o.w.t()).to_vec();
            common::assert_close(
                &outs[0].1.to_dtype(DType::F32).to_vec(),
                &want,
                4.0 * tol(dt),
                4.0 * tol(dt),
                &format!("{dt} matmul"),
            );
        }
        // Outside a region, ordinary promotion: f32.
        assert_eq!(F::linear(&o.x, &o.w, Some(&o.b)).dtype(), DType::F32);
    }
}

#[test]
fn precision_hungry_ops_compute_in_f32() {
    for dev in devices() {
        let mut rng = Rng::new(2);
        let (_, x) = stored_within(&dev, &mut rng, &[4, 6], 2.0);
        let (_, pos) = stored_within(&dev, &mut rng, &[4, 6], 1.0);
        let pos = pos.abs() + 0.5;
        let labels = Tensor::from_vec_on(vec![1i32, 0, 5, 3], [4], &dev);
        let ln = nn::LayerNorm::new_on(6, 1e-5, &dev);
        for dt in HALVES {
            let (h, hp) = (x.to_dtype(dt), pos.to_dtype(dt));
            type Op = fn(&Tensor, &Tensor, &Tensor) -> Tensor;
            let ops: Vec<(&str, Op)> = vec![
                ("softmax", |h, _, _| h.softmax(-1)),
                ("log_softmax", |h, _, _| h.log_softmax(1)),
                ("logsumexp", |h, _, _| h.logsumexp(-1)),
                ("layer_norm", |h, _, _| F::layer_norm(h, None, None, 1e-5)),
                ("cross_entropy", |h, _, l| h.cross_entropy(l)),
                ("nll_loss", |h, _, l| h.log_softmax(-1).nll_loss(l)),
                ("mse_loss", |h, p, _| h.mse_loss(p)),
                ("binary_cross_entropy_with_logits", |h, p, _| h.binary_cross_entropy_with_logits(&(p * 0.5))),
                ("sum", |h, _, _| h.sum(0)),
                ("sum_keepdim", |h, _, _| h.sum_keepdim(-1)),
                ("sum_all", |h, _, _| h.sum_all()),
                ("mean", |h, _, _| h.mean(1)),
                ("mean_all", |h, _, _| h.mean_all()),
                ("var", |h, _, _| h.var(-1)),
                ("exp", |h, _, _| h.exp()),
                ("ln", |_, p, _| p.ln()),
                ("pow", |h, p, _| p.pow(h)),
                ("powf", |_, p, _| p.powf(1.5)),
                ("rsqrt", |_, p, _| p.rsqrt()),
                ("cumsum", |h, _, _| h.cumsum(1)),
            ];
            for (what, op) in ops {
                let got = autocast(dt, || op(&h, &hp, &labels));
                let what = format!("{}: autocast({dt}) {what}", dev.name());
                assert_eq!(got.dtype(), DType::F32, "{what}");
                // Exactly the op on the half values widened first.
                let want = op(&h.to_dtype(DType::F32), &hp.to_dtype(DType::F32), &labels);
                check(&got, 1e-6, 1e-6, &what);
                assert_eq!(got.to_vec(), want.to_vec(), "{what}");
                // Outside a region the op keeps the half type (or promotes, as always).
                let outside = op(&h, &hp, &labels);
                assert_eq!(outside.dtype(), dt, "{what} outside autocast");
            }
            assert_eq!(autocast(dt, || ln.forward(&h)).dtype(), DType::F32, "nn::LayerNorm");
            // An f32 input stays f32, an integer sum stays integer.
            assert_eq!(autocast(dt, || x.softmax(-1)).dtype(), DType::F32);
            assert_eq!(autocast(dt, || labels.sum_all()).dtype(), DType::I32);
        }
    }
}

#[test]
fn every_other_op_follows_the_promotion_rules() {
    for dev in devices() {
        let mut rng = Rng::new(3);
        let (_, x) = stored_within(&dev, &mut rng, &[3, 4], 1.0);
        for dt in HALVES {
            let h = x.to_dtype(dt);
            autocast(dt, || {
                for (what, y, want) in [
                    ("add", &h + &h, dt),
                    ("mul by a number", &h * 2.0, dt),
                    ("half with f32", &h + &x, DType::F32),
                    ("relu", h.relu(), dt),
                    ("gelu", h.gelu(), dt),
                    ("sigmoid", h.sigmoid(), dt),
                    ("tanh", h.tanh(), dt),
                    ("sqrt", h.abs().sqrt(), dt),
                    ("max", h.max(-1), dt),
                    ("prod", h.prod(0), dt),
                    ("softmax of f32 stays f32", x.softmax(-1), DType::F32),
                    ("exp of f32", x.exp(), DType::F32),
                    ("transpose", h.t(), dt),
                    ("where", h.gt(0.0).where_cond(&h, 0.0), dt),
                ] {
                    assert_eq!(y.dtype(), want, "{}: autocast({dt}) {what}", dev.name());
                }
            });
        }
    }
}

#[test]
fn gradients_cast_back_to_each_value_s_type() {
    for dev in devices() {
        let mut rng = Rng::new(4);
        let (_, x) = stored_within(&dev, &mut rng, &[6, 8], 1.0);
        let labels = Tensor::from_vec_on(vec![0i32, 3, 1, 2, 3, 0], [6], &dev);
        for dt in HALVES {
            // f32 master weights, and one half weight.
            let fc1 = nn::Linear::new_on(8, 5, true, 1, &dev);
            let fc2 = nn::Linear::new_on(5, 4, true, 2, &dev);
            let gain = Var::new(Tensor::ones_on([5], &dev).to_dtype(dt));
            let loss = autocast(dt, || {
                let h = (fc1.forward(&x).relu() * &*gain).softmax(-1);
                fc2.forward(&h).cross_entropy(&labels)
            });
            assert_eq!(loss.dtype(), DType::F32, "{}: the loss is f32", dev.name());
            // backward inside a region or outside: the same types.
            for grads in [loss.backward(), autocast(dt, || loss.backward())] {
                for p in fc1.vars().iter().chain(&fc2.vars()) {
                    assert_eq!(grads[p].dtype(), DType::F32, "{}: an f32 Var's gradient", dev.name());
                }
                assert_eq!(grads[&gain].dtype(), dt, "{}: a {dt} Var's gradient", dev.name());
            }
            // The f32 weights' gradients approximate those of the same model in f32.
            let grads = loss.backward();
            let f32_loss =
                fc2.forward(&(fc1.forward(&x).relu() * gain.to_dtype(DType::F32)).softmax(-1)).cross_entropy(&labels);
            let want = f32_loss.backward();
            for p in fc1.vars().iter().chain(&fc2.vars()) {
                let what = format!("{}: autocast({dt}) gradient of an f32 weight", dev.name());
                common::assert_close(&grads[p].to_vec(), &want[p].to_vec(), 0.1, 4.0 * tol(dt), &what);
            }
            // Checked against the reference interpreter too.
            let g = loss.backward();
            check(&g[&fc1.weight], 1e-4, 1e-5, &format!("{}: autocast({dt}) backward", dev.name()));
        }
    }
}

#[test]
fn casts_fuse_into_the_kernels_that_read_them() {
    for dev in devices() {
        let mut rng = Rng::new(5);
        let o = operands(&dev, &mut rng);
        // Where half products run on tensor cores, a cast a product reads is stored by the kernel computing its input
        // (the tensor-core kernel fetches stored halves 16 bytes at a time): one pass per cast operand at most.
        let cores = dev.wgpu().is_some_and(|g| g.tensor_cores());
        let casts = |n: u64| if cores { n } else { 0 };
        for dt in HALVES {
            // A product of f32 operands under autocast runs as many kernels as the product of stored half operands:
            // the casts happen on its loads (or, on tensor cores, before it), the bias in its epilogue.
            let (xh, wh, bh) = (o.x.to_dtype(dt), o.w.to_dtype(dt), o.b.to_dtype(dt));
            lazor::realize(&[&xh, &wh, &bh]).unwrap();
            let stored = kernels(&dev, || F::linear(&xh, &wh, Some(&bh)).realize().unwrap());
            let cast = kernels(&dev, || autocast(dt, || F::linear(&o.x, &o.w, Some(&o.b))).realize().unwrap());
            assert!(
                (stored..=stored + casts(2)).contains(&cast),
                "{}: autocast({dt}) linear: {cast} kernels, {stored} on stored halves",
                dev.name()
            );
            assert_eq!(stored, 1, "{}: a linear layer is one kernel", dev.name());
            // A widening cast joins the op that reads it: one kernel for `exp` of a stored half tensor.
            let n = kernels(&dev, || autocast(dt, || xh.exp()).realize().unwrap());
            assert_eq!(n, 1, "{}: autocast({dt}) exp", dev.name());
            let n = kernels(&dev, || autocast(dt, || (xh.exp() * 2.0 + 1.0).sum_all()).realize().unwrap());
            let plain = kernels(&dev, || (o.x.exp() * 2.0 + 1.0).sum_all().realize().unwrap());
            assert_eq!(n, plain, "{}: autocast({dt}) exp then sum: as many kernels as in f32", dev.name());
            // A training step's forward and backward under autocast: no more kernels than the same step on
            // stored halves (the weights' casts fused into the products that read them).
            let w = Var::new(o.w.clone());
            let step = |x: &Tensor, w: &Tensor| {
                let loss = x.matmul(&w.t()).relu().sum_all();
                let g = loss.backward();
                lazor::realize(&[&loss, &g.iter().next().unwrap().1.clone()]).unwrap();
            };
            // Realized on its own, the f32 weight's gradient is one cast more: computed in the half type in its
            // source's layout, then cast back.
            let wh_var = Var::new(wh.clone());
            let halves = kernels(&dev, || step(&xh, &wh_var));
            let mixed = kernels(&dev, || autocast(dt, || step(&o.x, &w)));
            assert!(
                mixed <= halves + 1 + casts(2),
                "{}: autocast({dt}) forward and backward: {mixed} kernels, {halves} on stored halves",
                dev.name()
            );
            // In an AdamW step that cast joins the update: a step under autocast runs the f32 step's kernels.
            let mlp = nn::Sequential::new(vec![
                Box::new(nn::Linear::new_on(8, 16, true, 1, &dev)),
                Box::new(nn::relu),
                Box::new(nn::Linear::new_on(16, 4, true, 2, &dev)),
            ]);
            let labels = Tensor::from_vec_on(vec![0i32, 1, 2, 3, 0], [5], &dev);
            labels.realize().unwrap();
            let mut opts = [0, 1].map(|_| AdamW::new(&mlp.vars(), AdamWConfig::default()));
            let mut step = |k: usize| {
                let loss = || mlp.forward(&o.x).cross_entropy(&labels);
                let loss = if k == 1 { autocast(dt, loss) } else { loss() };
                opts[k].step_with(&loss.backward(), &[&loss]);
            };
            // Warm both up, so neither count includes a first plan.
            (0..2).for_each(|_| (0..2).for_each(&mut step));
            // Everything submitted before each count starts, and counted once it is.
            let mut counted = |k: usize| {
                dev.synchronize().unwrap();
                kernels(&dev, || {
                    step(k);
                    dev.synchronize().unwrap();
                })
            };
            let (f32_step, amp_step) = (counted(0), counted(1));
            assert!(
                (f32_step..=f32_step + casts(3)).contains(&amp_step),
                "{}: an AdamW step under autocast({dt}): {amp_step} kernels, {f32_step} in f32",
                dev.name()
            );
        }
    }
}
