//! A character-level transformer trained on a text: token and position embeddings, causal self-attention (its
//! `tril` mask applied by `scaled_dot_product_attention`, whose products skip the masked blocks), layer norm, an
//! MLP, AdamW; every training step one realize (forward, backward and update).
//!
//! ```text
//! cargo run --release --example train_gpt                          # Shakespeare's sonnets shipped in the repo
//! cargo run --release --example train_gpt -- --text input.txt --steps 2000
//! cargo run --release --example train_gpt -- --nanogpt --steps 50  # nanoGPT's shakespeare_char shape (GPU)
//! cargo run --release --example train_gpt -- --nanogpt --amp bf16  # in mixed precision
//! ```
//!
//! Flags: `--text PATH`, `--steps N`, `--layers N`, `--heads N`, `--width N`, `--context N`, `--batch N`,
//! `--lr X`, `--eval-every N`, `--sample N` (characters to print after training), `--seed N`, `--nanogpt`
//! (6 layers, 6 heads, 384 wide, context 256, batch 64), and `--amp bf16|f16`: the model under
//! `lazor::autocast` (products and attention in the half type, layer norms, softmax and the loss in f32, the
//! weights and AdamW's states in f32), as nanoGPT's `dtype = 'bfloat16'`; with f16 each step goes through a
//! `GradScaler`, whose loss scale the progress lines show. It prints the loss, milliseconds and dispatches per
//! step, and the validation loss (the last tenth of the text) before training, as nanoGPT does, and at every
//! evaluation. Evaluating first also compiles the evaluation's kernels before any step is timed.

use lazor::nn::{self, functional as F, Module};
use lazor::optim::{AdamW, AdamWConfig, GradScaler, GradScalerConfig};
use lazor::{DType, Device, Tensor, Var};
use std::time::Instant;

/// The model's shape and the training settings.
#[derive(Clone, Copy, Debug)]
struct Config {
    layers: usize,
    heads: usize,
    width: usize,
    context: usize,
    batch: usize,
    steps: usize,
    lr: f32,
    eval_every: usize,
    sample: usize,
    seed: u64,
    /// Mixed precision: the model under `autocast` to this type.
    amp: Option<DType>,
}

/// One transformer block: `x + attn(ln1(x))`, then `x + mlp(ln2(x))`.
struct Block {
    ln1: nn::LayerNorm,
    qkv: nn::Linear,
    proj: nn::Linear,
    ln2: nn::LayerNorm,
    up: nn::Linear,
    down: nn::Linear,
    heads: usize,
}

impl Block {
    fn new(width: usize, heads: usize, seed: u64, dev: &Device) -> Block {
        Block {
            ln1: nn::LayerNorm::new_on(width, 1e-5, dev),
            qkv: nn::Linear::new_on(width, 3 * width, true, seed, dev),
            proj: nn::Linear::new_on(width, width, true, seed + 1, dev),
            ln2: nn::LayerNorm::new_on(width, 1e-5, dev),
            up: nn::Linear::new_on(width, 4 * width, true, seed + 2, dev),
            down: nn::Linear::new_on(4 * width, width, true, seed + 3, dev),
            heads,
        }
    }

    /// Causal self-attention of `x` `[B, T, D]`: each position attends to itself and the ones before it.
    fn attention(&self, x: &Tensor) -> Tensor {
        let (b, t, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let (h, hd) = (self.heads, d / self.heads);
        // [B, T, 3, H, hd] -> [3, B, H, T, hd]
        let qkv = self.qkv.forward(x).reshape([b, t, 3, h, hd]).permute([2, 0, 3, 1, 4]);
        let (q, k, v) =
            (qkv.narrow(0, 0, 1).squeeze(0), qkv.narrow(0, 1, 1).squeeze(0), qkv.narrow(0, 2, 1).squeeze(0));
        // Causal attention whose products skip the blocks its mask zeroes (nanoGPT's `is_causal=True`).
        let y = F::scaled_dot_product_attention(&q, &k, &v, true).permute([0, 2, 1, 3]).reshape([b, t, d]);
        self.proj.forward(&y)
    }
}

impl Module for Block {
    fn forward(&self, x: &Tensor) -> Tensor {
        let x = x + self.attention(&self.ln1.forward(x));
        let h = F::gelu(&self.up.forward(&self.ln2.forward(&x)));
        &x + self.down.forward(&h)
    }

    fn parameters(&self) -> Vec<(String, Var)> {
        let parts: [(&str, &dyn Module); 6] = [
            ("ln1", &self.ln1),
            ("attn.qkv", &self.qkv),
            ("attn.proj", &self.proj),
            ("ln2", &self.ln2),
            ("mlp.up", &self.up),
            ("mlp.down", &self.down),
        ];
        parts.iter().flat_map(|(name, m)| nn::prefixed(name, *m)).collect()
    }
}

/// The model: embeddings, blocks, a final layer norm and the head to the vocabulary.
struct Gpt {
    tokens: nn::Embedding,
    positions: nn::Embedding,
    blocks: Vec<Block>,
    ln: nn::LayerNorm,
    head: nn::Linear,
}

impl Gpt {
    fn new(vocab: usize, cfg: &Config, dev: &Device) -> Gpt {
        let s = cfg.seed * 1000;
        Gpt {
            tokens: nn::Embedding::new_on(vocab, cfg.width, s, dev),
            positions: nn::Embedding::new_on(cfg.context, cfg.width, s + 1, dev),
            blocks: (0..cfg.layers).map(|l| Block::new(cfg.width, cfg.heads, s + 10 * (l as u64 + 1), dev)).collect(),
            ln: nn::LayerNorm::new_on(cfg.width, 1e-5, dev),
            head: nn::Linear::new_on(cfg.width, vocab, false, s + 2, dev),
        }
    }
}

impl Module for Gpt {
    /// Token ids `[B, T]` (`I32`) to logits `[B, T, vocab]`.
    fn forward(&self, idx: &Tensor) -> Tensor {
        let t = idx.shape()[1];
        let pos = self.positions.weight.narrow(0, 0, t);
        let mut x = self.tokens.forward(idx) + &pos;
        for block in &self.blocks {
            x = block.forward(&x);
        }
        self.head.forward(&self.ln.forward(&x))
    }

    fn parameters(&self) -> Vec<(String, Var)> {
        let mut out = nn::prefixed("tok_emb", &self.tokens);
        out.extend(nn::prefixed("pos_emb", &self.positions));
        for (i, b) in self.blocks.iter().enumerate() {
            out.extend(nn::prefixed(&format!("blocks.{i}"), b));
        }
        out.extend(nn::prefixed("ln_f", &self.ln));
        out.extend(nn::prefixed("head", &self.head));
        out
    }
}

/// A small xorshift generator for batch positions and sampling, so runs repeat.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// A batch of `b` windows of `t` tokens from `data` and the tokens that follow each.
fn batch(data: &[i32], b: usize, t: usize, rng: &mut Rng, dev: &Device) -> (Tensor, Tensor) {
    let (mut x, mut y) = (Vec::with_capacity(b * t), Vec::with_capacity(b * t));
    for _ in 0..b {
        let at = rng.below(data.len() - t - 1);
        x.extend_from_slice(&data[at..at + t]);
        y.extend_from_slice(&data[at + 1..at + t + 1]);
    }
    (Tensor::from_vec_on(x, [b, t], dev), Tensor::from_vec_on(y, [b * t], dev))
}

/// The mean cross-entropy of the model's predictions for `x`'s next tokens `y` (under autocast with `--amp`).
fn loss_of(model: &Gpt, x: &Tensor, y: &Tensor, cfg: &Config) -> Tensor {
    amp(cfg, || {
        let logits = model.forward(x);
        let vocab = logits.shape()[2];
        logits.reshape([y.numel(), vocab]).cross_entropy(y)
    })
}

/// `f` under autocast to `--amp`'s type, or as it is.
fn amp<R>(cfg: &Config, f: impl FnOnce() -> R) -> R {
    match cfg.amp {
        Some(dt) => lazor::autocast(dt, f),
        None => f(),
    }
}

fn parse(args: &[String]) -> (Config, Option<String>) {
    let mut cfg = Config {
        layers: 2,
        heads: 4,
        width: 64,
        context: 64,
        batch: 16,
        steps: 300,
        lr: 1e-3,
        eval_every: 100,
        sample: 300,
        seed: 1,
        amp: None,
    };
    let mut text = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = || -> usize {
            let v = it.next().unwrap_or_else(|| panic!("{a} needs a value"));
            v.parse().unwrap_or_else(|_| panic!("{a}: {v:?} is not a number"))
        };
        match a.as_str() {
            "--layers" => cfg.layers = num(),
            "--heads" => cfg.heads = num(),
            "--width" => cfg.width = num(),
            "--context" => cfg.context = num(),
            "--batch" => cfg.batch = num(),
            "--steps" => cfg.steps = num(),
            "--eval-every" => cfg.eval_every = num(),
            "--sample" => cfg.sample = num(),
            "--seed" => cfg.seed = num() as u64,
            "--lr" => cfg.lr = it.next().and_then(|v| v.parse().ok()).expect("--lr needs a number"),
            "--text" => text = it.next().cloned(),
            "--amp" => {
                cfg.amp = match it.next().map(String::as_str) {
                    Some("bf16") => Some(DType::BF16),
                    Some("f16") => Some(DType::F16),
                    other => panic!("--amp is bf16 or f16, not {other:?}"),
                }
            }
            "--nanogpt" => {
                (cfg.layers, cfg.heads, cfg.width, cfg.context, cfg.batch) = (6, 6, 384, 256, 64);
            }
            other => panic!("train_gpt: unknown flag {other}; see the top of examples/train_gpt.rs"),
        }
    }
    assert!(cfg.width % cfg.heads == 0, "--width must be a multiple of --heads");
    (cfg, text)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cfg, path) = parse(&args);
    let text = match &path {
        Some(p) => std::fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {p}: {e}")),
        None => include_str!("data/sonnets.txt").to_string(),
    };
    let mut chars: Vec<char> = text.chars().collect();
    chars.sort_unstable();
    chars.dedup();
    let code = |c: char| chars.binary_search(&c).expect("a character of the text") as i32;
    let data: Vec<i32> = text.chars().map(code).collect();
    let split = data.len() * 9 / 10;
    let (train, val) = (&data[..split], &data[split..]);
    assert!(val.len() > cfg.context + 1, "the text is too short for a context of {}", cfg.context);

    let dev = Device::default();
    let model = Gpt::new(chars.len(), &cfg, &dev);
    let params = model.vars();
    let count: usize = params.iter().map(|p| p.numel()).sum();
    println!(
        "train_gpt on {}: {} characters ({} distinct), {} layers, {} heads, width {}, context {}, batch {}, {:.2} M \
         parameters{}",
        dev.name(),
        data.len(),
        chars.len(),
        cfg.layers,
        cfg.heads,
        cfg.width,
        cfg.context,
        cfg.batch,
        count as f64 / 1e6,
        match cfg.amp {
            Some(DType::F16) => ", f16 autocast with a GradScaler".to_string(),
            Some(dt) => format!(", {dt} autocast"),
            None => String::new(),
        }
    );
    let mut opt =
        AdamW::new(&params, AdamWConfig { lr: cfg.lr, betas: (0.9, 0.99), weight_decay: 0.1, ..Default::default() });
    // f16 needs its loss scaled (bf16 has f32's range).
    let mut scaler = (cfg.amp == Some(DType::F16)).then(|| GradScaler::new_on(GradScalerConfig::default(), &dev));
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ cfg.seed);
    let (vx, vy) = batch(val, cfg.batch, cfg.context, &mut Rng(7), &dev);
    let validation = || lazor::no_grad(|| loss_of(&model, &vx, &vy, &cfg)).to_scalar();
    println!("step {:5}: validation loss {:.4}", 0, validation());
    // Steps are not synchronized one by one: the host builds the next step's graph while the GPU runs the last,
    // as a training loop runs. Time per step is taken over the steps between two reports (the loss read waits for
    // them), the validation loss excluded; host time is the time to build a step and hand it to the device.
    let mut hosts = Vec::new();
    let mut first_loss = None;
    let mut window = (Instant::now(), 0usize);
    for step in 1..=cfg.steps {
        let start = Instant::now();
        let before = dev.stats();
        let (x, y) = batch(train, cfg.batch, cfg.context, &mut rng, &dev);
        let loss = loss_of(&model, &x, &y, &cfg);
        let built = start.elapsed();
        let grads = match &scaler {
            Some(scaler) => scaler.scale(&loss).backward(),
            None => loss.backward(),
        };
        let differentiated = start.elapsed();
        match &mut scaler {
            Some(scaler) => scaler.step_with(&mut opt, &grads, &[&loss]),
            None => opt.step_with(&grads, &[&loss]),
        }
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        hosts.push([ms(built), ms(differentiated - built), ms(start.elapsed() - differentiated)]);
        window.1 += 1;
        let report = step == 1 || step % cfg.eval_every == 0 || step == cfg.steps;
        if report {
            // Reading the loss waits for the step; other steps only queue theirs.
            let l = loss.to_scalar();
            let ms = window.0.elapsed().as_secs_f64() * 1e3 / window.1 as f64;
            first_loss.get_or_insert(l);
            let s = dev.stats();
            let line = format!(
                "step {step:5}: loss {l:.4}, {} dispatches, {} submits, {ms:.2} ms per step; host: forward {:.2} ms, \
                 backward {:.2} ms, step {:.2} ms",
                s.dispatches - before.dispatches,
                s.submits - before.submits,
                median(&mut hosts.iter().map(|h| h[0]).collect::<Vec<_>>()),
                median(&mut hosts.iter().map(|h| h[1]).collect::<Vec<_>>()),
                median(&mut hosts.iter().map(|h| h[2]).collect::<Vec<_>>()),
            );
            hosts.clear();
            let line = match &scaler {
                Some(scaler) => format!("{line}, loss scale {}", scaler.scale_value()),
                None => line,
            };
            if step % cfg.eval_every == 0 || step == cfg.steps {
                println!("{line}, validation loss {:.4}", validation());
            } else {
                println!("{line}");
            }
            window = (Instant::now(), 0);
        }
    }
    if let Some(first) = first_loss {
        println!("loss went from {first:.4} to {:.4} in {} steps", loss_last(&model, train, &cfg, &dev), cfg.steps);
    }
    if cfg.sample > 0 {
        println!("--- sample ---\n{}", sample(&model, &chars, &code, &cfg, &dev));
    }
}

/// The training loss on a fixed batch, for the last line.
fn loss_last(model: &Gpt, train: &[i32], cfg: &Config, dev: &Device) -> f32 {
    let (x, y) = batch(train, cfg.batch, cfg.context, &mut Rng(11), dev);
    lazor::no_grad(|| loss_of(model, &x, &y, cfg)).to_scalar()
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// `cfg.sample` characters drawn one at a time from the model's predictions, starting from a newline.
fn sample(model: &Gpt, chars: &[char], code: &dyn Fn(char) -> i32, cfg: &Config, dev: &Device) -> String {
    let mut ids = vec![code('\n')];
    let mut rng = Rng(0xDEAD_BEEF ^ cfg.seed);
    let mut out = String::new();
    for _ in 0..cfg.sample {
        let window = &ids[ids.len().saturating_sub(cfg.context)..];
        let x = Tensor::from_slice_on(window, [1, window.len()], dev);
        let logits = lazor::no_grad(|| amp(cfg, || model.forward(&x)));
        let last =
            logits.narrow(1, window.len() - 1, 1).reshape([chars.len()]).to_dtype(DType::F32).softmax(0).to_vec();
        let u = rng.unit();
        let mut acc = 0.0;
        let next = last.iter().position(|&p| {
            acc += p;
            acc > u
        });
        let next = next.unwrap_or(chars.len() - 1);
        out.push(chars[next]);
        ids.push(next as i32);
    }
    out
}
