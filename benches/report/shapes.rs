//! The products of two training steps, one by one: the MLP of `train_step` and nanoGPT's `shakespeare_char` model
//! of `train_gpt --nanogpt`, forward and backward, each shape as the step has it (transposed operands as views).
//! Run once per `LAZOR_MATMUL_TILE` value, it is the sweep that tunes the tile table (`docs/matmul.md`).

use crate::timing::{measure, Config};
use lazor::{DType, Device, Tensor};

/// A product `op(a) op(b)` with `a` `[batch, m, k]` (stored `[batch, k, m]` when `ta`), `b` `[batch, k, n]`
/// (stored `[batch, n, k]` when `tb`).
struct Shape {
    name: &'static str,
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    ta: bool,
    tb: bool,
}

const fn s(name: &'static str, batch: usize, m: usize, k: usize, n: usize, ta: bool, tb: bool) -> Shape {
    Shape { name, batch, m, k, n, ta, tb }
}

/// The MLP 784-1024-1024-10 at batch 4096 (products with 10 columns are folds, not tiles: left out), and the GPT
/// (batch 64 x context 256 = 16384 tokens, width 384, 6 heads of 64).
const SHAPES: [Shape; 21] = [
    s("mlp x W1", 1, 4096, 784, 1024, false, false),
    s("mlp h1 W2", 1, 4096, 1024, 1024, false, false),
    s("mlp x^T d1", 1, 784, 4096, 1024, true, false),
    s("mlp h1^T d2", 1, 1024, 4096, 1024, true, false),
    s("mlp d2 W2^T", 1, 4096, 1024, 1024, false, true),
    s("mlp d2 W1^T", 1, 4096, 1024, 784, false, true),
    s("gpt x Wqkv", 1, 16384, 384, 1152, false, false),
    s("gpt y Wproj", 1, 16384, 384, 384, false, false),
    s("gpt x Wfc", 1, 16384, 384, 1536, false, false),
    s("gpt h Wfc2", 1, 16384, 1536, 384, false, false),
    s("gpt x^T dqkv", 1, 384, 16384, 1152, true, false),
    s("gpt h^T dfc2", 1, 1536, 16384, 384, true, false),
    s("gpt x^T dfc", 1, 384, 16384, 1536, true, false),
    s("gpt dfc Wfc^T", 1, 16384, 1536, 384, false, true),
    s("gpt dh Wfc2^T", 1, 16384, 384, 1536, false, true),
    s("gpt q k^T", 384, 256, 64, 256, false, true),
    s("gpt att v", 384, 256, 256, 64, false, false),
    s("gpt att^T dy", 384, 256, 256, 64, true, false),
    s("gpt dy v^T", 384, 256, 64, 256, false, true),
    s("square 4096^3", 1, 4096, 4096, 4096, false, false),
    s("square 1024^3", 1, 1024, 1024, 1024, false, false),
];

/// Times each shape as `cfg.batch` realizes then one `synchronize`; prints TFLOP/s per shape and the total time, in
/// f32 and, on a device whose products run on tensor cores, in f16 and bf16 too (mixed-precision training's).
pub fn run(dev: &Device, cfg: &Config, small: bool) -> bool {
    let cores = dev.wgpu().is_some_and(|g| g.tensor_cores());
    let types: &[DType] = if cores { &[DType::F32, DType::F16, DType::BF16] } else { &[DType::F32] };
    types.iter().all(|&dt| table(dev, cfg, small, dt))
}

fn table(dev: &Device, cfg: &Config, small: bool, dt: DType) -> bool {
    let tile = std::env::var("LAZOR_MATMUL_TILE").unwrap_or_else(|_| "the table".into());
    println!("## lazor training-shapes benchmark, {dt:?} ({tile})\n");
    println!("- device: {}; {}; x{} = that many realizes per synchronize\n", dev.name(), cfg.method(), cfg.batch);
    println!("| product | shape | ms (x{}) | TFLOP/s |", cfg.batch);
    println!("|---|---|---:|---:|");
    let mut total = 0.0;
    for (i, sh) in SHAPES.iter().enumerate() {
        // A sixteenth of each axis on a CPU or a software adapter.
        let d = |x: usize| if small { x.div_ceil(16) } else { x };
        let (batch, m, k, n) = (sh.batch.div_ceil(if small { 16 } else { 1 }), d(sh.m), d(sh.k), d(sh.n));
        let seed = 2 * i as u64;
        let a = (Tensor::randn_on(if sh.ta { [batch, k, m] } else { [batch, m, k] }, seed, dev) + 0.0).to_dtype(dt);
        let b = (Tensor::randn_on(if sh.tb { [batch, n, k] } else { [batch, k, n] }, seed + 1, dev) + 0.0).to_dtype(dt);
        lazor::realize(&[&a, &b]).expect("operands");
        let (a, b) = (if sh.ta { a.transpose(1, 2) } else { a }, if sh.tb { b.transpose(1, 2) } else { b });
        // A batch of one is a plain matrix product, as a training step has it.
        let (a, b) = if batch == 1 { (a.squeeze(0), b.squeeze(0)) } else { (a, b) };
        let t = measure(cfg, || {
            for _ in 0..cfg.batch {
                a.matmul(&b).realize().expect("realize");
            }
            dev.synchronize().expect("synchronize");
        })
        .per(cfg.batch);
        let secs = t.median.as_secs_f64();
        total += secs;
        let flops = 2.0 * (batch * m * k * n) as f64;
        let shape = format!(
            "{batch} x [{m}, {k}] x [{k}, {n}]{}{}",
            if sh.ta { ", a^T" } else { "" },
            if sh.tb { ", b^T" } else { "" }
        );
        println!("| {} | {shape} | {:.4} | {:.1} |", sh.name, secs * 1e3, flops / secs / 1e12);
    }
    println!("\ntotal of one of each: {:.3} ms", total * 1e3);
    true
}
