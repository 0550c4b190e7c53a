//! A 3-layer MLP forward pass with a softmax over a batch: each layer is one matmul kernel with its bias and
//! activation fused in, and the softmax one more. Run with `cargo run --release --example mlp_forward`.

use lazor::{Device, Tensor};

/// Deterministic weights, uniform in [-scale, scale).
fn init(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// A linear layer `y = x w + b`, its weight `[inputs, outputs]`.
struct Linear {
    w: Tensor,
    b: Tensor,
}

impl Linear {
    fn new(inputs: usize, outputs: usize, seed: u64, dev: &Device) -> Linear {
        let scale = 1.0 / (inputs as f32).sqrt();
        Linear {
            w: Tensor::from_vec_on(init(inputs * outputs, seed, scale), [inputs, outputs], dev),
            b: Tensor::from_vec_on(init(outputs, seed + 1, scale), [outputs], dev),
        }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        x.matmul(&self.w) + &self.b
    }
}

fn main() {
    let dev = Device::default();
    let (batch, sizes) = (64, [784, 512, 256, 10]);
    let layers: Vec<Linear> = (0..3).map(|i| Linear::new(sizes[i], sizes[i + 1], 10 * i as u64 + 1, &dev)).collect();
    let x = Tensor::from_vec_on(init(batch * sizes[0], 99, 1.0), [batch, sizes[0]], &dev);
    for t in layers.iter().flat_map(|l| [&l.w, &l.b]).chain([&x]) {
        t.realize().expect("upload");
    }

    // Lazy: nothing runs until `to_vec`.
    let h1 = layers[0].forward(&x).relu();
    let h2 = layers[1].forward(&h1).gelu();
    let probs = layers[2].forward(&h2).softmax(-1);
    let want = lazor::reference::eval(&[&probs]).remove(0);

    let before = dev.stats();
    let got = probs.to_vec();
    let after = dev.stats();
    let kernels = after.dispatches - before.dispatches;
    let err = got.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0.0f32, f32::max);
    println!("device: {}", dev.name());
    println!("MLP {sizes:?} over a batch of {batch}: probabilities of shape {:?}", probs.shape());
    println!(
        "{kernels} kernels in {} submit(s): 3 matmuls with bias and activation fused, 1 softmax",
        after.submits - before.submits
    );
    println!("max |lazor - f64 reference| = {err:.2e}");
    for (row, p) in got.chunks(sizes[3]).take(2).enumerate() {
        let best = (0..p.len()).max_by(|&a, &b| p[a].total_cmp(&p[b])).unwrap_or(0);
        println!("row {row}: class {best} with p = {:.3}; sum {:.6}", p[best], p.iter().sum::<f32>());
    }
    assert_eq!(kernels, 4, "each layer fuses into its matmul");
    assert!(err < 1e-4, "matches the reference");
}
