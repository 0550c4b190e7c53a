//! Times forward + backward of two MLPs with a softmax cross-entropy, loss and every gradient in one realize; a
//! full training step with AdamW (forward, backward and every update in one realize, `optim::AdamW::step_with`),
//! as PyTorch's fused-AdamW step in `torch_reference.py train`; and the large model's eight matrix products alone (3 forward, 3 weight gradients, 2 input gradients) for scale.
//! Prints milliseconds and dispatches per step. `cargo bench --bench train_step` (784-1024-1024-10 at
//! batch 4096 and 784-128-10 at batch 64); `-- --quick` runs small sizes and few steps, as a smoke test;
//! `-- --profile` also prints the large model's kernels with their GPU times (`Device::profile`).

use lazor::{Device, Tensor, Var};
use std::time::Instant;

/// Values uniform in [-scale, scale), from lazor's own generator (drawn in the kernel that first reads them).
fn random(dev: &Device, shape: [usize; 2], seed: u64, scale: f32) -> Tensor {
    (Tensor::rand_on(shape, seed, dev) * 2.0 - 1.0) * scale
}

/// `relu(x W + b)` layers, the last without relu, and the mean softmax cross-entropy as users write it.
fn loss(params: &[Var], x: &Tensor, onehot: &Tensor) -> Tensor {
    let mut h = x.clone();
    for (i, layer) in params.chunks(2).enumerate() {
        h = h.matmul(&layer[0]) + &layer[1].tensor();
        if i + 1 < params.len() / 2 {
            h = h.relu();
        }
    }
    -(h.log_softmax(-1) * onehot).sum_all() / x.shape()[0] as f32
}

/// Runs `steps` steps of `f` after one warm-up, then waits for the device: milliseconds and dispatches per step.
fn time(dev: &Device, steps: usize, mut f: impl FnMut()) -> (f64, u64) {
    f();
    dev.synchronize().unwrap();
    let (before, start) = (dev.stats().dispatches, Instant::now());
    for _ in 0..steps {
        f();
    }
    dev.synchronize().unwrap();
    let ms = start.elapsed().as_secs_f64() * 1e3 / steps as f64;
    (ms, (dev.stats().dispatches - before) / steps as u64)
}

fn mlp(dev: &Device, sizes: &[usize], batch: usize, steps: usize, profiled: bool) {
    let params: Vec<Var> = sizes
        .windows(2)
        .enumerate()
        .flat_map(|(i, p)| {
            let scale = 1.0 / (p[0] as f32).sqrt();
            [
                Var::new(random(dev, [p[0], p[1]], 2 * i as u64 + 1, scale)),
                Var::new(random(dev, [1, p[1]], 2 * i as u64 + 2, scale).reshape([p[1]])),
            ]
        })
        .collect();
    let classes = *sizes.last().unwrap();
    let x = random(dev, [batch, sizes[0]], 99, 1.0);
    let labels: Vec<f32> = (0..batch * classes).map(|i| f32::from(i % classes == (i / classes) % classes)).collect();
    let onehot = Tensor::from_vec_on(labels, [batch, classes], dev);
    lazor::realize(&[&x, &onehot]).unwrap();
    let step = || {
        let loss = loss(&params, &x, &onehot);
        let grads = loss.backward();
        let gs: Vec<Tensor> = params.iter().map(|p| grads[p].clone()).collect();
        let mut all = vec![&loss];
        all.extend(&gs);
        lazor::realize(&all).unwrap();
    };
    if profiled {
        // One step after a warm-up, kernel by kernel.
        step();
        println!("{}", dev.profile(step));
    }
    let (ms, dispatches) = time(dev, steps, step);
    let shown: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
    let shown = shown.join("-");
    println!("mlp {shown} batch {batch}: fwd+bwd {ms:.3} ms/step, {dispatches} dispatches/step");

    let mut opt = lazor::optim::AdamW::new(&params, lazor::optim::AdamWConfig { lr: 1e-3, ..Default::default() });
    let mut adamw_step = || {
        let loss = loss(&params, &x, &onehot);
        opt.step_with(&loss.backward(), &[&loss]);
    };
    if profiled {
        adamw_step();
        println!("{}", dev.profile(&mut adamw_step));
    }
    let (ms, dispatches) = time(dev, steps, adamw_step);
    println!("mlp {shown} batch {batch}: AdamW step {ms:.3} ms/step, {dispatches} dispatches/step");
}

/// The products a 3-layer MLP step needs, on realized operands: `x W1`, `h1 W2`, `h2 W3`, the weight gradients
/// `x^T d1`, `h1^T d2`, `h2^T d3` and the input gradients `d3 W3^T`, `d2 W2^T`.
fn matmuls_alone(dev: &Device, sizes: &[usize; 4], batch: usize, steps: usize, profiled: bool) {
    let w: Vec<Tensor> = (0..3).map(|i| random(dev, [sizes[i], sizes[i + 1]], 10 + i as u64, 0.05)).collect();
    let h: Vec<Tensor> = (0..3).map(|i| random(dev, [batch, sizes[i]], 20 + i as u64, 1.0)).collect();
    let d: Vec<Tensor> = (0..3).map(|i| random(dev, [batch, sizes[i + 1]], 30 + i as u64, 1.0)).collect();
    let all: Vec<&Tensor> = w.iter().chain(&h).chain(&d).collect();
    lazor::realize(&all).unwrap();
    let step = || {
        let products = [
            h[0].matmul(&w[0]),
            h[1].matmul(&w[1]),
            h[2].matmul(&w[2]),
            h[0].t().matmul(&d[0]),
            h[1].t().matmul(&d[1]),
            h[2].t().matmul(&d[2]),
            d[2].matmul(&w[2].t()),
            d[1].matmul(&w[1].t()),
        ];
        lazor::realize(&products.iter().collect::<Vec<_>>()).unwrap();
    };
    if profiled {
        step();
        println!("{}", dev.profile(step));
    }
    let (ms, dispatches) = time(dev, steps, step);
    println!("the 8 matmuls alone, batch {batch}: {ms:.3} ms/step, {dispatches} dispatches/step");
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let profiled = std::env::args().any(|a| a == "--profile");
    let dev = Device::default();
    println!("device: {}", dev.name());
    let (large, batch, steps) = if quick { ([64, 96, 96, 10], 128, 3) } else { ([784, 1024, 1024, 10], 4096, 20) };
    mlp(&dev, &large, batch, steps, profiled);
    matmuls_alone(&dev, &large, batch, steps, profiled);
    let (small, batch, steps) = if quick { ([64, 32, 10], 16, 3) } else { ([784, 128, 10], 64, 200) };
    mlp(&dev, &small, batch, steps, false);
}
