//! `lazor::optim`: each optimizer's update against its formula on the host over several steps, on every backend;
//! a step as one realize fused into the backward (dispatches counted), a learning-rate schedule that compiles and
//! plans nothing, flat memory over many steps; `clip_grad_norm` and `Grads::accumulate`.

mod common;

use common::{assert_close, devices, Rng};
use lazor::nn::{self, Module};
use lazor::optim::{AdamW, AdamWConfig, Sgd, SgdConfig};
use lazor::{DType, Device, Stats, Tensor, Var};

/// Shapes of the parameters the formula tests update.
const SHAPES: [&[usize]; 2] = [&[3, 4], &[5]];

/// The loss the formula tests step on: `sum(w * c) + sum(w^2)` per parameter, whose gradient `c + 2w` the host
/// computes with the same single rounding.
fn quadratic(params: &[Var], cs: &[Tensor]) -> Tensor {
    let parts: Vec<Tensor> = params.iter().zip(cs).map(|(w, c)| (w.tensor() * c + w.square()).sum_all()).collect();
    parts.iter().skip(1).fold(parts[0].clone(), |a, b| a + b)
}

/// Parameters of [`SHAPES`] on `dev` with their host values.
fn params(dev: &Device, rng: &mut Rng) -> (Vec<Var>, Vec<Vec<f32>>) {
    let host: Vec<Vec<f32>> = SHAPES.iter().map(|s| rng.vec(s.iter().product(), -1.0, 1.0)).collect();
    let vars = host.iter().zip(SHAPES).map(|(v, s)| Var::new(Tensor::from_slice_on(v, s, dev))).collect();
    (vars, host)
}

/// An optimizer's step on the device, given the gradients.
type Step = Box<dyn FnMut(&lazor::Grads)>;

/// The same step on the host: the step's index, the parameters to update, their gradients.
type HostStep = Box<dyn FnMut(usize, &mut [Vec<f32>], &[Vec<f32>])>;

/// Runs `steps` steps of an optimizer on every backend and compares the parameters after each with the host's
/// formula; `make` builds both, with fresh state, for the parameters of each backend.
fn check_against_host(what: &str, steps: usize, make: impl Fn(&[Var]) -> (Step, HostStep)) {
    for dev in devices() {
        let mut rng = Rng::new(21);
        let (vars, mut want) = params(&dev, &mut rng);
        let (mut step, mut host) = make(&vars);
        for t in 0..steps {
            let cs: Vec<Vec<f32>> = SHAPES.iter().map(|s| rng.vec(s.iter().product(), -1.0, 1.0)).collect();
            let ct: Vec<Tensor> = cs.iter().zip(SHAPES).map(|(c, s)| Tensor::from_slice_on(c, s, &dev)).collect();
            let grads = quadratic(&vars, &ct).backward();
            let gs: Vec<Vec<f32>> =
                want.iter().zip(&cs).map(|(w, c)| w.iter().zip(c).map(|(w, c)| c + 2.0 * w).collect()).collect();
            step(&grads);
            host(t, &mut want, &gs);
            for (k, (v, w)) in vars.iter().zip(&want).enumerate() {
                assert_close(&v.to_vec(), w, 2e-5, 2e-6, &format!("{}: {what}: step {t}, parameter {k}", dev.name()));
            }
        }
    }
}

#[test]
fn sgd_follows_its_formula() {
    let configs = [
        SgdConfig { lr: 0.1, ..Default::default() },
        SgdConfig { lr: 0.05, momentum: 0.9, ..Default::default() },
        SgdConfig { lr: 0.05, momentum: 0.8, nesterov: true, weight_decay: 0.1 },
        SgdConfig { lr: 0.02, weight_decay: 0.5, ..Default::default() },
    ];
    for c in configs {
        check_against_host(&format!("{c:?}"), 5, |vars| {
            let mut opt = Sgd::new(vars, c);
            let mut bufs: Vec<Vec<f32>> = SHAPES.iter().map(|s| vec![0.0; s.iter().product()]).collect();
            let host = move |_: usize, ps: &mut [Vec<f32>], gs: &[Vec<f32>]| {
                for ((p, g), b) in ps.iter_mut().zip(gs).zip(bufs.iter_mut()) {
                    for i in 0..p.len() {
                        let mut d = g[i];
                        if c.weight_decay != 0.0 {
                            d += p[i] * c.weight_decay;
                        }
                        if c.momentum != 0.0 {
                            b[i] = b[i] * c.momentum + d;
                            d = if c.nesterov { d + b[i] * c.momentum } else { b[i] };
                        }
                        p[i] += d * -c.lr;
                    }
                }
            };
            (Box::new(move |g: &lazor::Grads| opt.step(g)) as Step, Box::new(host) as HostStep)
        });
    }
}

#[test]
fn adamw_follows_its_formula() {
    let configs = [
        AdamWConfig::default(),
        AdamWConfig { lr: 0.05, betas: (0.8, 0.95), eps: 1e-6, weight_decay: 0.1 },
        AdamWConfig { lr: 0.01, weight_decay: 0.0, ..Default::default() },
    ];
    for c in configs {
        check_against_host(&format!("{c:?}"), 6, |vars| {
            let mut opt = AdamW::new(vars, c);
            let mut m: Vec<Vec<f32>> = SHAPES.iter().map(|s| vec![0.0; s.iter().product()]).collect();
            let mut v = m.clone();
            let host = move |t: usize, ps: &mut [Vec<f32>], gs: &[Vec<f32>]| {
                let (b1, b2, lr) = (c.betas.0 as f64, c.betas.1 as f64, c.lr as f64);
                let t = t as f64 + 1.0;
                let decay = (1.0 - lr * c.weight_decay as f64) as f32;
                let step_size = (lr / (1.0 - b1.powf(t))) as f32;
                let bc2 = (1.0 - b2.powf(t)).sqrt() as f32;
                let (one_b1, one_b2) = ((1.0 - b1) as f32, (1.0 - b2) as f32);
                for k in 0..ps.len() {
                    for i in 0..ps[k].len() {
                        let g = gs[k][i];
                        let mut p = ps[k][i];
                        if c.weight_decay != 0.0 {
                            p *= decay;
                        }
                        m[k][i] += (g - m[k][i]) * one_b1;
                        v[k][i] = v[k][i] * b2 as f32 + g * one_b2 * g;
                        let denom = v[k][i].sqrt() / bc2 + c.eps;
                        ps[k][i] = p - m[k][i] / denom * step_size;
                    }
                }
            };
            (Box::new(move |g: &lazor::Grads| opt.step(g)) as Step, Box::new(host) as HostStep)
        });
    }
}

#[test]
fn defaults_are_pytorch_s_and_bad_settings_are_errors() {
    let c = AdamWConfig::default();
    assert_eq!((c.lr, c.betas, c.eps, c.weight_decay), (1e-3, (0.9, 0.999), 1e-8, 1e-2));
    let s = SgdConfig::default();
    assert_eq!((s.lr, s.momentum, s.nesterov, s.weight_decay), (1e-3, 0.0, false, 0.0));
    let dev = Device::cpu();
    let w = [Var::new(Tensor::ones_on([2], &dev))];
    let bad_sgd = [
        SgdConfig { lr: -1.0, ..s },
        SgdConfig { momentum: -0.5, ..s },
        SgdConfig { weight_decay: f32::NAN, ..s },
        SgdConfig { nesterov: true, ..s },
    ];
    for c in bad_sgd {
        assert!(matches!(Sgd::try_new(&w, c), Err(lazor::Error::Config { op: "Sgd::new", .. })), "{c:?}");
    }
    let bad_adamw = [
        AdamWConfig { lr: -1e-3, ..c },
        AdamWConfig { betas: (1.0, 0.999), ..c },
        AdamWConfig { betas: (0.9, -0.1), ..c },
        AdamWConfig { eps: -1.0, ..c },
        AdamWConfig { weight_decay: -0.1, ..c },
    ];
    for c in bad_adamw {
        assert!(matches!(AdamW::try_new(&w, c), Err(lazor::Error::Config { op: "AdamW::new", .. })), "{c:?}");
    }
    let e = AdamW::try_new(&w, AdamWConfig { betas: (0.9, 1.5), ..c }).err().unwrap();
    assert_eq!(e.to_string(), "lazor: AdamW::new: betas.1 = 1.5 is not in [0, 1)");
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Sgd::new(&w, SgdConfig { nesterov: true, ..s })))
        .err()
        .unwrap();
    assert!(e.downcast_ref::<String>().unwrap().contains("Nesterov momentum needs a momentum above 0"));
}

#[test]
fn parameters_without_a_gradient_are_left_alone() {
    for dev in devices() {
        let used = Var::new(Tensor::from_slice_on(&[1.0f32, 2.0], [2], &dev));
        let unused = Var::new(Tensor::from_slice_on(&[5.0f32], [1], &dev));
        let mut opt = AdamW::new(&[used.clone(), unused.clone()], AdamWConfig { lr: 0.1, ..Default::default() });
        opt.step(&used.square().sum_all().backward());
        assert_eq!(unused.to_vec(), vec![5.0], "no gradient, no decay");
        assert_eq!(opt.steps(), &[1, 0]);
        assert!(used.to_vec()[0] < 1.0);
        // Half-precision parameters keep their type; their moments are f32.
        let h = Var::new(Tensor::from_slice_on(&[1.0f32, -1.0], [2], &dev).to_dtype(DType::F16));
        let mut opt =
            AdamW::new(std::slice::from_ref(&h), AdamWConfig { lr: 0.25, weight_decay: 0.0, ..Default::default() });
        opt.step(&h.to_dtype(DType::F32).square().sum_all().backward());
        assert_eq!(h.dtype(), DType::F16);
        assert_eq!(h.to_dtype(DType::F32).to_vec(), vec![0.75, -0.75]);
    }
}

/// A 3-layer MLP with its loss.
struct Mlp {
    model: nn::Sequential,
}

impl Mlp {
    fn new(dev: &Device, sizes: [usize; 4]) -> Mlp {
        let model = nn::Sequential::new(vec![
            Box::new(nn::Linear::new_on(sizes[0], sizes[1], true, 1, dev)),
            Box::new(nn::relu),
            Box::new(nn::Linear::new_on(sizes[1], sizes[2], true, 2, dev)),
            Box::new(nn::relu),
            Box::new(nn::Linear::new_on(sizes[2], sizes[3], true, 3, dev)),
        ]);
        Mlp { model }
    }

    fn loss(&self, x: &Tensor, labels: &Tensor) -> Tensor {
        self.model.forward(x).cross_entropy(labels)
    }
}

/// A batch of `n` inputs and class labels, drawn on the device from `seed`.
fn batch(dev: &Device, n: usize, features: usize, classes: usize, seed: u64) -> (Tensor, Tensor) {
    let x = Tensor::rand_on([n, features], seed, dev) * 2.0 - 1.0;
    let labels: Vec<i32> = (0..n).map(|i| ((i as u64 * 7 + seed) % classes as u64) as i32).collect();
    let labels = Tensor::from_vec_on(labels, [n], dev);
    lazor::realize(&[&x, &labels]).unwrap();
    (x, labels)
}

/// Realizes `loss` with the gradients of `params`, in one realize and without an optimizer step.
fn with_gradients(loss: &Tensor, params: &[Var]) {
    let grads = loss.backward();
    let gs: Vec<Tensor> = params.iter().map(|p| grads[p].clone()).collect();
    let mut all = vec![loss];
    all.extend(&gs);
    lazor::realize(&all).unwrap();
}

/// What `f` did on `dev`, everything held back before it submitted first.
fn counted(dev: &Device, f: impl FnOnce()) -> Stats {
    dev.synchronize().unwrap();
    let before = dev.stats();
    f();
    dev.synchronize().unwrap();
    let after = dev.stats();
    Stats {
        realizes: after.realizes - before.realizes,
        submits: after.submits - before.submits,
        dispatches: after.dispatches - before.dispatches,
        kernels: after.kernels - before.kernels,
        plans_reused: after.plans_reused - before.plans_reused,
        pipelines_compiled: after.pipelines_compiled - before.pipelines_compiled,
        buffers_allocated: after.buffers_allocated - before.buffers_allocated,
        ..after
    }
}

#[test]
fn an_adamw_step_adds_at_most_one_dispatch_per_parameter_to_the_backward() {
    for dev in devices() {
        let mlp = Mlp::new(&dev, [20, 32, 24, 10]);
        let params = mlp.model.vars();
        let mut opt = AdamW::new(&params, AdamWConfig::default());
        let (x, labels) = batch(&dev, 16, 20, 10, 1);
        // Warm up both, so neither count includes a first-time plan.
        for _ in 0..2 {
            with_gradients(&mlp.loss(&x, &labels), &params);
            let loss = mlp.loss(&x, &labels);
            opt.step_with(&loss.backward(), &[&loss]);
        }
        let backward = counted(&dev, || with_gradients(&mlp.loss(&x, &labels), &params));
        let step = counted(&dev, || {
            let loss = mlp.loss(&x, &labels);
            opt.step_with(&loss.backward(), &[&loss]);
        });
        eprintln!(
            "{}: forward + backward {} dispatches; with the AdamW step {} dispatches, {} realize, {} submit",
            dev.name(),
            backward.dispatches,
            step.dispatches,
            step.realizes,
            step.submits
        );
        assert!(
            step.dispatches <= backward.dispatches + params.len() as u64,
            "{}: {} dispatches with the step, {} without, {} parameters",
            dev.name(),
            step.dispatches,
            backward.dispatches,
            params.len()
        );
        assert_eq!(step.realizes, 1, "{}: forward, backward and update in one realize", dev.name());
        assert!(step.submits <= 1, "{}: {} submits", dev.name(), step.submits);
        // The same step with the gradients computed first, in a realize of their own, gives the same values: the
        // fused update (bias steps in their gradient folds' epilogues) computes what the separate one does.
        let twin = Mlp::new(&dev, [20, 32, 24, 10]);
        let twin_params = twin.model.vars();
        for (a, b) in twin_params.iter().zip(&params) {
            a.set(b.tensor() * 1.0);
        }
        let mut twin_opt = AdamW::new(&twin_params, AdamWConfig::default());
        let mut ours = AdamW::new(&params, AdamWConfig::default());
        for _ in 0..3 {
            let loss = mlp.loss(&x, &labels);
            ours.step_with(&loss.backward(), &[&loss]);
            let grads = twin.loss(&x, &labels).backward();
            grads.realize().unwrap();
            twin_opt.step(&grads);
        }
        for (a, b) in twin_params.iter().zip(&params) {
            assert_close(&b.to_vec(), &a.to_vec(), 1e-5, 1e-6, &format!("{}: fused and separate steps", dev.name()));
        }
        // With the gradients already computed, each parameter's value and moments come out of one kernel.
        let loss = mlp.loss(&x, &labels);
        let grads = loss.backward();
        grads.realize().unwrap();
        let alone = counted(&dev, || opt.step(&grads));
        assert!(alone.dispatches <= params.len() as u64, "{}: {} dispatches", dev.name(), alone.dispatches);
    }
}

#[test]
fn states_are_updated_in_their_own_buffers() {
    // One 1 MiB parameter, its two 1 MiB moments and a 1 MiB input: 4 MiB live before the step. The step needs
    // only the new parameter's buffer: the moments' new values go where the old ones were.
    const MIB: u64 = 1 << 20;
    for dev in devices() {
        let w = Var::new(Tensor::rand_on([512, 512], 1, &dev));
        let mut opt = AdamW::new(std::slice::from_ref(&w), AdamWConfig::default());
        let c = Tensor::rand_on([512, 512], 2, &dev);
        c.realize().unwrap();
        let (m, v) = (opt.states(0)[0].clone(), opt.states(0)[1].clone());
        for step in 0..3 {
            let grads = (w.tensor() * &c).sum_all().backward();
            dev.synchronize().unwrap();
            let before = dev.stats();
            opt.step(&grads);
            drop(grads);
            dev.synchronize().unwrap();
            let after = dev.stats();
            let grown = after.peak_buffer_bytes.saturating_sub(before.live_buffer_bytes.max(before.peak_buffer_bytes));
            // Not the first step: the test holds the first states (zeros), which must stay as they are.
            if step > 0 {
                let bound = if dev.is_cpu() { 3 * MIB } else { MIB };
                assert!(grown <= bound, "{}: step {step} grew the peak by {grown} bytes", dev.name());
                assert!(
                    after.live_buffer_bytes <= before.live_buffer_bytes,
                    "{}: step {step}: {} live bytes, {} before",
                    dev.name(),
                    after.live_buffer_bytes,
                    before.live_buffer_bytes
                );
            }
        }
        // The held zeros stayed zeros.
        assert!(m.to_vec().iter().chain(&v.to_vec()).all(|&x| x == 0.0), "{}", dev.name());
    }
}

#[test]
fn a_learning_rate_schedule_compiles_and_plans_nothing() {
    for dev in devices() {
        let mlp = Mlp::new(&dev, [8, 16, 16, 4]);
        let params = mlp.model.vars();
        let mut adamw = AdamW::new(&params, AdamWConfig::default());
        let mut sgd = Sgd::new(&params, SgdConfig { lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 1e-4 });
        let (x, labels) = batch(&dev, 8, 8, 4, 2);
        for step in 0..6 {
            let lr = 1e-2 / (1.0 + step as f32);
            let s = counted(&dev, || {
                adamw.set_lr(lr);
                let loss = mlp.loss(&x, &labels);
                adamw.step_with(&loss.backward(), &[&loss]);
            });
            let t = counted(&dev, || {
                sgd.set_lr(lr);
                let loss = mlp.loss(&x, &labels);
                sgd.step_with(&loss.backward(), &[&loss]);
            });
            if step >= 1 {
                for (name, s) in [("AdamW", s), ("Sgd", t)] {
                    assert_eq!((s.realizes, s.plans_reused), (1, 1), "{}: {name} step {step}", dev.name());
                    assert_eq!(s.pipelines_compiled, 0, "{}: {name} step {step}", dev.name());
                }
            }
            assert_eq!(adamw.lr(), lr);
        }
    }
}

#[test]
fn training_lowers_the_loss_and_memory_stays_flat() {
    for dev in devices() {
        let steps = if dev.is_cpu() { 1000 } else { 300 };
        let mlp = Mlp::new(&dev, [20, 32, 24, 10]);
        let mut opt = AdamW::new(&mlp.model.vars(), AdamWConfig { lr: 1e-2, ..Default::default() });
        let (x, labels) = batch(&dev, 32, 20, 10, 3);
        let mut losses = Vec::new();
        let mut allocated = Vec::new();
        let mut peak = Vec::new();
        let mut nodes = Vec::new();
        for step in 0..steps {
            let loss = mlp.loss(&x, &labels);
            opt.step_with(&loss.backward(), &[&loss]);
            // Read now and then, as a training loop prints its loss: in between, realizes are batched.
            if step % 25 == 0 || step == steps - 1 {
                losses.push(loss.to_scalar());
            }
            drop(loss);
            allocated.push(dev.stats().buffers_allocated);
            peak.push(dev.stats().peak_buffer_bytes);
            nodes.push(dev.live_nodes());
        }
        // Past warm-up nothing stored grows. The bias corrections make each step's parameter block new: the wgpu
        // backend rewrites a block no unsubmitted realize binds, and makes another only while every block of the
        // length is bound by the held-back realizes of the open batch (which holds at most 64): a deeper batch
        // than any before, which the GPU's pace decides, may still add one.
        let warm = 100;
        assert!(
            allocated[steps - 1] - allocated[warm] <= 64,
            "{}: buffers allocated after step {warm}: {}, after step {steps}: {}",
            dev.name(),
            allocated[warm],
            allocated[steps - 1]
        );
        assert_eq!(peak[warm], peak[steps - 1], "{}: the most bytes held grew after warm-up", dev.name());
        assert!(nodes[warm..].iter().all(|&n| n == nodes[warm]), "{}: live nodes grew", dev.name());
        let (first, last) = (losses[0], losses[losses.len() - 1]);
        assert!(last < first * 0.2, "{}: loss {first} -> {last}", dev.name());
    }
}

#[test]
fn clip_grad_norm_scales_down_to_the_maximum() {
    for dev in devices() {
        let a = Var::new(Tensor::from_slice_on(&[1.0f32, 2.0], [2], &dev));
        let b = Var::new(Tensor::from_slice_on(&[3.0f32], [1], &dev));
        let c = [Tensor::from_slice_on(&[3.0f32, 0.0], [2], &dev), Tensor::from_slice_on(&[4.0f32], [1], &dev)];
        let loss = || (a.tensor() * &c[0]).sum_all() + (b.tensor() * &c[1]).sum_all();
        // Gradients (3, 0) and (4): norm 5.
        let mut grads = loss().backward();
        let before = dev.stats().realizes;
        let norm = nn::clip_grad_norm(&mut grads, 1.0);
        assert_eq!(dev.stats().realizes, before, "lazy");
        assert_eq!(norm.shape(), &[] as &[usize]);
        assert_close(&[norm.to_scalar()], &[5.0], 1e-6, 0.0, "norm");
        let scale = 1.0 / (5.0 + 1e-6);
        assert_close(&grads[&a].to_vec(), &[3.0 * scale, 0.0], 1e-6, 0.0, "clipped a");
        assert_close(&grads[&b].to_vec(), &[4.0 * scale], 1e-6, 0.0, "clipped b");
        // Below the maximum, nothing changes.
        let mut grads = loss().backward();
        let norm = nn::clip_grad_norm(&mut grads, 10.0);
        assert_eq!((norm.to_scalar(), grads[&a].to_vec(), grads[&b].to_vec()), (5.0, vec![3.0, 0.0], vec![4.0]));
        // Clipping feeds a step in the same realize.
        let mut grads = loss().backward();
        let norm = nn::clip_grad_norm(&mut grads, 0.5);
        let mut opt = Sgd::new(&[a.clone(), b.clone()], SgdConfig { lr: 1.0, ..Default::default() });
        let s = counted(&dev, || opt.step_with(&grads, &[&norm]));
        assert_eq!(s.realizes, 1);
        assert_close(&a.to_vec(), &[1.0 - 0.3, 2.0], 1e-5, 0.0, "stepped a");
        assert_close(&b.to_vec(), &[3.0 - 0.4], 1e-5, 0.0, "stepped b");
    }
}

#[test]
fn accumulated_micro_batches_give_the_whole_batch_s_gradients() {
    for dev in devices() {
        let mlp = Mlp::new(&dev, [6, 8, 8, 3]);
        let params = mlp.model.vars();
        let (x, labels) = batch(&dev, 8, 6, 3, 4);
        let whole = mlp.loss(&x, &labels).backward();
        // Means over halves, each weighted by its share.
        let half = |i: usize| (mlp.loss(&x.narrow(0, 4 * i, 4), &labels.narrow(0, 4 * i, 4)) * 0.5).backward();
        let mut grads = half(0);
        grads.accumulate(&half(1));
        assert_eq!(grads.len(), params.len());
        for p in &params {
            assert_close(&grads[p].to_vec(), &whole[p].to_vec(), 1e-5, 1e-6, "accumulated");
        }
        // A Var only the other holds is added.
        let extra = Var::new(Tensor::ones_on([2], &dev));
        grads.accumulate(&(extra.tensor() * 3.0).sum_all().backward());
        assert_eq!(grads[&extra].to_vec(), vec![3.0, 3.0]);
    }
}

/// A `Linear` weight's gradient is computed in the weight's own layout (`g^T x`, not `(x^T g)^T`), so its AdamW
/// update joins the epilogue of the product that computes it: the step adds no dispatch to the backward. The
/// gradients of a transposed operand, either side, against their closed forms: for `sum(x w^T + b)`, every row
/// of `dw` is the column sums of `x`; for `sum(u^T v)`, every column of `du` is the row sums of `v`.
#[test]
fn a_linear_weight_s_update_joins_its_gradient_s_product() {
    for dev in devices() {
        let mut rng = Rng::new(5);
        let x = Tensor::from_vec_on(rng.vec(256 * 64, -1.0, 1.0), [256, 64], &dev);
        x.realize().unwrap();
        let layer = nn::Linear::new_on(64, 48, true, 9, &dev);
        let params = layer.vars();
        let mut opt = AdamW::new(&params, AdamWConfig::default());
        let grads = layer.forward(&x).sum_all().backward();
        let dw = grads[&layer.weight].to_vec();
        let xs = x.to_vec();
        let col: Vec<f32> = (0..64).map(|i| (0..256).map(|n| xs[n * 64 + i]).sum()).collect();
        let want: Vec<f32> = (0..48).flat_map(|_| col.iter().copied()).collect();
        assert_close(&dw, &want, 1e-4, 1e-4, &format!("{}: dw of sum(x w^T + b)", dev.name()));
        for _ in 0..2 {
            let loss = layer.forward(&x).sum_all();
            opt.step_with(&loss.backward(), &[&loss]);
        }
        let backward = counted(&dev, || with_gradients(&layer.forward(&x).sum_all(), &params));
        let step = counted(&dev, || {
            let loss = layer.forward(&x).sum_all();
            opt.step_with(&loss.backward(), &[&loss]);
        });
        assert!(step.dispatches <= backward.dispatches, "{}: the updates add no dispatch", dev.name());
        // No kernel of the weight's shape but the product: the update is in its epilogue.
        let profile = dev.profile(|| {
            let loss = layer.forward(&x).sum_all();
            opt.step_with(&loss.backward(), &[&loss]);
        });
        let names: Vec<&str> = profile.kernels().iter().map(|k| k.name.as_str()).collect();
        let of_weight: Vec<&&str> = names.iter().filter(|n| n.ends_with("[48x64]")).collect();
        assert!(
            of_weight.len() == 1 && of_weight[0].starts_with("matmul+"),
            "{}: the weight's kernels {of_weight:?} (all: {names:?})",
            dev.name()
        );
        // The other side: a transposed left operand.
        let u = Var::new(Tensor::from_vec_on(rng.vec(64 * 40, -1.0, 1.0), [64, 40], &dev));
        let v = Tensor::from_vec_on(rng.vec(64 * 24, -1.0, 1.0), [64, 24], &dev);
        let du = u.t().matmul(&v).sum_all().backward()[&u].to_vec();
        let vs = v.to_vec();
        let rows: Vec<f32> = (0..64).map(|k| vs[k * 24..(k + 1) * 24].iter().sum()).collect();
        let want: Vec<f32> = rows.iter().flat_map(|&r| std::iter::repeat_n(r, 40)).collect();
        assert_close(&du, &want, 1e-4, 1e-4, &format!("{}: du of sum(u^T v)", dev.name()));
    }
}
