//! `optim::GradScaler`: PyTorch's defaults and bad settings; a step with an inf or NaN gradient skipped on the device
//! (every parameter, state and step count bit for bit as before, the scale halved); growth after `growth_interval`
//! clean steps; scaled steps equal to unscaled ones; clipping after `unscale`; one realize and one submit per step;
//! flat memory over 1000 scaled steps. On every backend.

mod common;

use common::{assert_close, devices};
use lazor::nn::{self, Module};
use lazor::optim::{AdamW, AdamWConfig, GradScaler, GradScalerConfig, Optimizer, Sgd, SgdConfig, UpdateRule};
use lazor::{DType, Device, Stats, Tensor, Var};

/// A small model: two linear layers.
struct Net {
    fc1: nn::Linear,
    fc2: nn::Linear,
}

impl Net {
    fn new(dev: &Device) -> Net {
        Net { fc1: nn::Linear::new_on(6, 8, true, 1, dev), fc2: nn::Linear::new_on(8, 3, true, 2, dev) }
    }

    fn vars(&self) -> Vec<Var> {
        let mut v = self.fc1.vars();
        v.extend(self.fc2.vars());
        v
    }

    /// The loss on `x`, times `poison` (1 for a clean step; inf or NaN makes every gradient inf or NaN).
    fn loss(&self, x: &Tensor, labels: &Tensor, poison: f32) -> Tensor {
        self.fc2.forward(&self.fc1.forward(x).relu()).cross_entropy(labels) * poison
    }

    /// A twin with the same weights.
    fn twin(&self, dev: &Device) -> Net {
        let t = Net::new(dev);
        for (a, b) in t.vars().iter().zip(self.vars()) {
            a.set(b.tensor() * 1.0);
        }
        t
    }
}

fn batch(dev: &Device, seed: u64) -> (Tensor, Tensor) {
    let x = Tensor::rand_on([10, 6], seed, dev) * 2.0 - 1.0;
    let labels = Tensor::from_vec_on((0..10).map(|i| ((i as u64 * 5 + seed) % 3) as i32).collect(), [10], dev);
    lazor::realize(&[&x, &labels]).unwrap();
    (x, labels)
}

/// Every parameter's and state's bits.
fn bits<R: UpdateRule>(net: &Net, opt: &Optimizer<R>) -> Vec<Vec<u32>> {
    let mut all: Vec<Vec<u32>> = net.vars().iter().map(|v| v.to_vec().iter().map(|x| x.to_bits()).collect()).collect();
    for i in 0..opt.params().len() {
        all.extend(opt.states(i).iter().map(|s| s.to_vec().iter().map(|x| x.to_bits()).collect()));
    }
    all
}

fn config(init_scale: f32, growth_interval: u32) -> GradScalerConfig {
    GradScalerConfig { init_scale, growth_interval, ..Default::default() }
}

#[test]
fn defaults_are_pytorch_s_and_bad_settings_are_errors() {
    let c = GradScalerConfig::default();
    assert_eq!((c.init_scale, c.growth_factor, c.backoff_factor, c.growth_interval), (65536.0, 2.0, 0.5, 2000));
    let dev = Device::cpu();
    let scaler = GradScaler::new_on(c, &dev);
    assert_eq!(scaler.scale_value(), 65536.0);
    assert!(!scaler.found_inf().to_scalar_as::<bool>());
    let bad = [
        GradScalerConfig { init_scale: 0.0, ..c },
        GradScalerConfig { init_scale: f32::INFINITY, ..c },
        GradScalerConfig { growth_factor: 1.0, ..c },
        GradScalerConfig { backoff_factor: 1.0, ..c },
        GradScalerConfig { backoff_factor: 0.0, ..c },
        GradScalerConfig { growth_interval: 0, ..c },
    ];
    for b in bad {
        assert!(
            matches!(GradScaler::try_new_on(b, &dev), Err(lazor::Error::Config { op: "GradScaler::new", .. })),
            "{b:?}"
        );
    }
    let caught = std::panic::catch_unwind(|| GradScaler::new(GradScalerConfig { growth_factor: 0.5, ..c }))
        .expect_err("a growth factor below 1 panics");
    assert!(caught.downcast_ref::<String>().unwrap().contains("growth_factor = 0.5"));
    // The scaled loss is the loss times the scale, tracked.
    let w = Var::new(Tensor::from_slice_on(&[2.0f32], [1], &dev));
    let scaled = scaler.scale(&w.tensor().sum_all());
    assert_eq!(scaled.to_scalar(), 131072.0);
    assert_eq!(scaled.backward()[&w].to_vec(), vec![65536.0]);
    assert!(matches!(scaler.try_scale(&Tensor::from_vec_on(vec![1i32], [1], &dev)), Err(lazor::Error::DType { .. })));
}

#[test]
fn a_step_with_an_inf_or_nan_gradient_changes_nothing_and_backs_off() {
    for dev in devices() {
        for poison in [f32::INFINITY, f32::NAN] {
            let net = Net::new(&dev);
            let mut opt = AdamW::new(&net.vars(), AdamWConfig { lr: 1e-2, ..Default::default() });
            let mut scaler = GradScaler::new_on(config(1024.0, 1000), &dev);
            let (x, labels) = batch(&dev, 1);
            for _ in 0..2 {
                let loss = net.loss(&x, &labels, 1.0);
                scaler.step_with(&mut opt, &scaler.scale(&loss).backward(), &[&loss]);
            }
            assert!(!scaler.found_inf().to_scalar_as::<bool>());
            let before = bits(&net, &opt);
            let loss = net.loss(&x, &labels, poison);
            scaler.step(&mut opt, &scaler.scale(&loss).backward());
            let what = format!("{}: a step with a {poison} gradient", dev.name());
            assert!(scaler.found_inf().to_scalar_as::<bool>(), "{what}: found");
            assert_eq!(scaler.found_inf().dtype(), DType::Bool);
            assert_eq!(bits(&net, &opt), before, "{what}: parameters and states bit for bit");
            assert_eq!(opt.steps(), vec![2; 4], "{what}: the step counts");
            assert_eq!(scaler.scale_value(), 512.0, "{what}: the scale halved");
            // The next clean step steps.
            let loss = net.loss(&x, &labels, 1.0);
            scaler.step(&mut opt, &scaler.scale(&loss).backward());
            assert!(!scaler.found_inf().to_scalar_as::<bool>(), "{what}: the next step is clean");
            assert_ne!(bits(&net, &opt), before, "{what}: the next step updates");
            assert_eq!(opt.steps(), vec![3; 4]);
            assert_eq!(scaler.scale_value(), 512.0);
        }
    }
}

#[test]
fn the_scale_grows_after_growth_interval_clean_steps() {
    for dev in devices() {
        let net = Net::new(&dev);
        let mut opt = Sgd::new(&net.vars(), SgdConfig { lr: 1e-3, momentum: 0.9, ..Default::default() });
        let c = GradScalerConfig { init_scale: 8.0, growth_factor: 4.0, backoff_factor: 0.25, growth_interval: 3 };
        let mut scaler = GradScaler::new_on(c, &dev);
        let (x, labels) = batch(&dev, 2);
        // Clean, clean, clean (x4), inf (/4), clean x3 (x4), clean, inf, clean x3 (x4).
        let poisons = [1.0, 1.0, 1.0, f32::INFINITY, 1.0, 1.0, 1.0, 1.0, f32::NAN, 1.0, 1.0, 1.0];
        let want = [8.0, 8.0, 32.0, 8.0, 8.0, 8.0, 32.0, 32.0, 8.0, 8.0, 8.0, 32.0];
        let mut got = Vec::new();
        for p in poisons {
            let loss = net.loss(&x, &labels, p);
            scaler.step_with(&mut opt, &scaler.scale(&loss).backward(), &[&loss]);
            got.push(scaler.scale_value());
        }
        assert_eq!(got, want, "{}", dev.name());
        assert_eq!(opt.steps(), vec![10; 4], "{}: two steps skipped", dev.name());
        // A scale whose growth would overflow stays as it is, and the count restarts.
        let c = GradScalerConfig {
            init_scale: f32::MAX / 2.0,
            growth_factor: 4.0,
            backoff_factor: 0.5,
            growth_interval: 1,
        };
        let mut scaler = GradScaler::new_on(c, &dev);
        let loss = net.loss(&x, &labels, 1e-30);
        scaler.step(&mut opt, &scaler.scale(&loss).backward());
        assert_eq!(scaler.scale_value(), f32::MAX / 2.0, "{}", dev.name());
    }
}

/// Steps `net` with `opt` through a scaler (init scale 2^10) on `batches`, and its twin with the same optimizer
/// unscaled on the clean ones only; their parameters must agree, the skipped steps leaving no trace (AdamW's bias
/// correction counts only the steps taken). Under autocast the gradients are realized before each step, in both:
/// where a half product's result is rounded to its type depends on what else reads it (the scaler's check), so
/// fused into the update it can be more precise than stored.
fn scaled_against_plain<R: UpdateRule>(dev: &Device, make: impl Fn(&[Var]) -> Optimizer<R>, amp: Option<DType>) {
    let net = Net::new(dev);
    let twin = net.twin(dev);
    let (mut opt, mut plain) = (make(&net.vars()), make(&twin.vars()));
    let mut scaler = GradScaler::new_on(config(1024.0, 2000), dev);
    let forward = |n: &Net, x: &Tensor, l: &Tensor, p: f32| match amp {
        Some(dt) => lazor::autocast(dt, || n.loss(x, l, p)),
        None => n.loss(x, l, p),
    };
    let gradients = |loss: &Tensor| {
        let grads = loss.backward();
        if amp.is_some() {
            grads.realize().unwrap();
        }
        grads
    };
    for (step, poison) in [1.0, 1.0, f32::INFINITY, 1.0, f32::NAN, 1.0, 1.0].into_iter().enumerate() {
        let (x, labels) = batch(dev, step as u64);
        let loss = forward(&net, &x, &labels, poison);
        scaler.step_with(&mut opt, &gradients(&scaler.scale(&loss)), &[&loss]);
        if poison == 1.0 {
            plain.step(&gradients(&forward(&twin, &x, &labels, 1.0)));
        }
    }
    assert_eq!(opt.steps(), plain.steps());
    for (a, b) in net.vars().iter().zip(twin.vars()) {
        let what = format!("{}: {} scaled against plain ({amp:?})", dev.name(), R::NAME);
        assert_close(&a.to_vec(), &b.to_vec(), 1e-6, 1e-7, &what);
    }
}

#[test]
fn scaled_steps_equal_unscaled_ones() {
    for dev in devices() {
        let adamw = |v: &[Var]| AdamW::new(v, AdamWConfig { lr: 1e-2, ..Default::default() });
        let sgd = |v: &[Var]| Sgd::new(v, SgdConfig { lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 1e-3 });
        scaled_against_plain(&dev, adamw, None);
        scaled_against_plain(&dev, sgd, None);
        scaled_against_plain(&dev, adamw, Some(DType::F16));
        scaled_against_plain(&dev, adamw, Some(DType::BF16));
        scaled_against_plain(&dev, sgd, Some(DType::F16));
    }
}

/// What `f` did on `dev`.
fn counted(dev: &Device, f: impl FnOnce()) -> Stats {
    dev.synchronize().unwrap();
    let before = dev.stats();
    f();
    dev.synchronize().unwrap();
    let after = dev.stats();
    Stats {
        realizes: after.realizes - before.realizes,
        submits: after.submits - before.submits,
        bytes_downloaded: after.bytes_downloaded - before.bytes_downloaded,
        plans_reused: after.plans_reused - before.plans_reused,
        pipelines_compiled: after.pipelines_compiled - before.pipelines_compiled,
        ..after
    }
}

#[test]
fn a_scaled_step_is_one_realize_and_one_submit() {
    for dev in devices() {
        let net = Net::new(&dev);
        let mut opt = AdamW::new(&net.vars(), AdamWConfig::default());
        let mut scaler = GradScaler::new_on(config(256.0, 2), &dev);
        let (x, labels) = batch(&dev, 3);
        for step in 0..8 {
            // An inf now and then, and a scale that grows: the same plan either way, nothing read back.
            let poison = if step == 5 { f32::INFINITY } else { 1.0 };
            let s = counted(&dev, || {
                let loss = lazor::autocast(DType::F16, || net.loss(&x, &labels, poison));
                scaler.step_with(&mut opt, &scaler.scale(&loss).backward(), &[&loss]);
            });
            let what = format!("{}: scaled step {step}", dev.name());
            assert_eq!(s.realizes, 1, "{what}: forward, backward, check and update in one realize");
            assert!(s.submits <= 1, "{what}: {} submits", s.submits);
            assert_eq!(s.bytes_downloaded, 0, "{what}: nothing read back");
            if step >= 2 {
                assert_eq!((s.plans_reused, s.pipelines_compiled), (1, 0), "{what}: the plan reused");
            }
        }
        // Clipping between `unscale` and the step joins the same realize.
        let s = counted(&dev, || {
            let loss = net.loss(&x, &labels, 1.0);
            let mut grads = scaler.unscale(&scaler.scale(&loss).backward());
            let norm = nn::clip_grad_norm(&mut grads, 0.1);
            scaler.step_with(&mut opt, &grads, &[&loss, &norm]);
        });
        assert_eq!((s.realizes, s.bytes_downloaded), (1, 0), "{}: unscale, clip, step", dev.name());
    }
}

#[test]
fn clipping_after_unscale_clips_the_true_gradients() {
    for dev in devices() {
        let net = Net::new(&dev);
        let twin = net.twin(&dev);
        let make = |v: &[Var]| Sgd::new(v, SgdConfig { lr: 0.5, ..Default::default() });
        let (mut opt, mut plain) = (make(&net.vars()), make(&twin.vars()));
        let mut scaler = GradScaler::new_on(config(4096.0, 2000), &dev);
        let (x, labels) = batch(&dev, 4);
        for _ in 0..3 {
            let loss = net.loss(&x, &labels, 1.0);
            let mut grads = scaler.unscale(&scaler.scale(&loss).backward());
            let norm = nn::clip_grad_norm(&mut grads, 0.05);
            scaler.step_with(&mut opt, &grads, &[&norm]);
            let mut want = twin.loss(&x, &labels, 1.0).backward();
            let want_norm = nn::clip_grad_norm(&mut want, 0.05);
            plain.step_with(&want, &[&want_norm]);
            assert_close(&[norm.to_scalar()], &[want_norm.to_scalar()], 1e-5, 0.0, "the unscaled norm");
            assert!(norm.to_scalar() > 0.05, "the clip is active");
        }
        for (a, b) in net.vars().iter().zip(twin.vars()) {
            assert_close(&a.to_vec(), &b.to_vec(), 1e-5, 1e-6, &format!("{}: clipped steps", dev.name()));
        }
        // `unscale` once per step; an inf found by it skips the step.
        let loss = net.loss(&x, &labels, f32::INFINITY);
        let grads = scaler.unscale(&scaler.scale(&loss).backward());
        assert!(matches!(scaler.try_unscale(&grads), Err(lazor::Error::Config { op: "GradScaler::unscale", .. })));
        let before = bits(&net, &opt);
        scaler.step(&mut opt, &grads);
        assert_eq!(bits(&net, &opt), before, "{}: skipped", dev.name());
        assert_eq!(scaler.scale_value(), 2048.0);
    }
}

#[test]
fn half_parameters_and_half_gradients_step_in_their_own_type() {
    for dev in devices() {
        let w = Var::new(Tensor::from_slice_on(&[1.0f32, -1.0, 0.5], [3], &dev).to_dtype(DType::F16));
        let mut opt = Sgd::new(std::slice::from_ref(&w), SgdConfig { lr: 0.25, ..Default::default() });
        let mut scaler = GradScaler::new_on(config(1024.0, 2000), &dev);
        // Gradient 2w: scaled by 1024 in f16, divided again in f32.
        let loss = w.tensor().square().sum_all();
        scaler.step(&mut opt, &scaler.scale(&loss).backward());
        assert_eq!(w.dtype(), DType::F16);
        assert_eq!(w.to_dtype(DType::F32).to_vec(), vec![0.5, -0.5, 0.25], "{}", dev.name());
        // An f16 gradient that overflows is found.
        let loss = (w.tensor() * 1000.0).square().sum_all();
        scaler.step(&mut opt, &scaler.scale(&loss).backward());
        assert!(scaler.found_inf().to_scalar_as::<bool>(), "{}: an f16 overflow", dev.name());
        assert_eq!(w.to_dtype(DType::F32).to_vec(), vec![0.5, -0.5, 0.25]);
    }
}

#[test]
fn memory_stays_flat_over_1000_scaled_steps() {
    for dev in devices() {
        let fc = nn::Linear::new_on(4, 2, true, 5, &dev);
        let mut opt = AdamW::new(&fc.vars(), AdamWConfig { lr: 1e-2, ..Default::default() });
        // Each 50 steps grow the scale once (at 25 clean steps) and halve it once: it stays within [1024, 2048].
        let mut scaler = GradScaler::new_on(config(1024.0, 25), &dev);
        let x = Tensor::rand_on([8, 4], 6, &dev);
        let y = x.narrow(1, 0, 2) * 2.0 - 0.5;
        lazor::realize(&[&x, &y]).unwrap();
        let steps = 1000;
        let (mut allocated, mut nodes, mut losses) = (Vec::new(), Vec::new(), Vec::new());
        for step in 0..steps {
            // An overflow every 50 steps: the scale backs off, and grows again.
            let poison = if step % 50 == 49 { f32::INFINITY } else { 1.0 };
            let loss = lazor::autocast(DType::F16, || fc.forward(&x).mse_loss(&y)) * poison;
            scaler.step_with(&mut opt, &scaler.scale(&loss).backward(), &[&loss]);
            if step % 100 == 0 {
                losses.push(loss.to_scalar());
            }
            drop(loss);
            allocated.push(dev.stats().buffers_allocated);
            nodes.push(dev.live_nodes());
        }
        // Past the first 64 steps (the wgpu backend keeps the last 64 kernel parameter blocks).
        let warm = 100;
        assert_eq!(allocated[warm], allocated[steps - 1], "{}: buffers allocated", dev.name());
        assert!(nodes[warm..].iter().all(|&n| n == nodes[warm]), "{}: live nodes grew", dev.name());
        assert_eq!(opt.steps(), vec![980, 980], "{}: 20 steps skipped", dev.name());
        assert!(losses[losses.len() - 1] < losses[0] * 0.5, "{}: losses {losses:?}", dev.name());
    }
}
