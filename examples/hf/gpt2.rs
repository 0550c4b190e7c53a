//! GPT-2 from a Hugging Face directory (`GPT2LMHeadModel.save_pretrained`), built from lazor's `nn` layers:
//! token and position embeddings, pre-norm blocks of causal self-attention and a GELU MLP, a final layer norm and
//! the head tied to the token embedding.
//!
//! The checkpoint's names are `transformer.wte.weight`, `transformer.h.{i}.attn.c_attn.weight` and so on (a bare
//! `GPT2Model`'s lack the `transformer.` prefix; both load). GPT-2's projections are Conv1D layers whose weights
//! are stored `[in, out]`: each is copied once, on load, into the `[out, in]` layout of `nn::Linear`.

use super::checkpoint::{Checkpoint, Error};
use super::generate::{CausalLm, Dims};
use lazor::nn::{self, functional as F, KvCache, Module};
use lazor::{DType, Device, Tensor};
use std::path::Path;

/// GPT-2's activations by their `activation_function` names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    /// `gelu_new`, `gelu_pytorch_tanh`: the tanh approximation (lazor's `gelu`).
    GeluTanh,
    /// `gelu`: the exact one, through `erf`.
    Gelu,
    Relu,
}

/// The shape of a GPT-2 model, from `config.json`.
#[derive(Clone, Copy, Debug)]
pub struct Gpt2Config {
    pub vocab: usize,
    pub positions: usize,
    pub width: usize,
    pub layers: usize,
    pub heads: usize,
    pub inner: usize,
    pub eps: f32,
    pub activation: Activation,
}

impl Gpt2Config {
    /// The config of `ckpt`, or an error naming a key lazor cannot follow.
    pub fn read(ckpt: &Checkpoint) -> Result<Gpt2Config, Error> {
        let width = ckpt.usize("n_embd")?;
        let heads = ckpt.usize("n_head")?;
        if width % heads != 0 {
            return Err(ckpt.unsupported(&format!("n_embd {width} is not a multiple of n_head {heads}")));
        }
        let activation = match ckpt.str_or("activation_function", "gelu_new")?.as_str() {
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
            "gelu" => Activation::Gelu,
            "relu" => Activation::Relu,
            other => return Err(ckpt.unsupported(&format!("activation_function `{other}` is not supported"))),
        };
        if !ckpt.bool_or("scale_attn_weights", true)? || ckpt.bool_or("scale_attn_by_inverse_layer_idx", false)? {
            return Err(ckpt.unsupported("only attention scaled by 1/sqrt(head_dim) is supported"));
        }
        Ok(Gpt2Config {
            vocab: ckpt.usize("vocab_size")?,
            positions: ckpt.usize("n_positions")?,
            width,
            layers: ckpt.usize("n_layer")?,
            heads,
            inner: ckpt.usize_or("n_inner", 4 * width)?,
            eps: ckpt.f32_or("layer_norm_epsilon", 1e-5)?,
            activation,
        })
    }
}

/// One block: `x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`.
pub struct Block {
    pub ln_1: nn::LayerNorm,
    pub c_attn: nn::Linear,
    pub c_proj: nn::Linear,
    pub ln_2: nn::LayerNorm,
    pub c_fc: nn::Linear,
    pub mlp_proj: nn::Linear,
}

/// A GPT-2 language model.
pub struct Gpt2 {
    pub config: Gpt2Config,
    pub wte: nn::Embedding,
    pub wpe: nn::Embedding,
    pub blocks: Vec<Block>,
    pub ln_f: nn::LayerNorm,
    /// The head: `wte`'s weight (tied), or the checkpoint's `lm_head.weight` where it has one.
    pub head: nn::Linear,
    pub dtype: DType,
    device: Device,
}

fn layer_norm(ckpt: &mut Checkpoint, name: &str, width: usize, eps: f32) -> Result<nn::LayerNorm, Error> {
    Ok(nn::LayerNorm {
        weight: ckpt.param(&format!("{name}.weight"), &[width])?,
        bias: ckpt.param(&format!("{name}.bias"), &[width])?,
        eps,
    })
}

/// A Conv1D layer `name` from `input` to `output` features as a `Linear` layer.
fn conv1d(ckpt: &mut Checkpoint, name: &str, input: usize, output: usize) -> Result<nn::Linear, Error> {
    Ok(nn::Linear {
        weight: ckpt.transposed(&format!("{name}.weight"), input, output)?,
        bias: Some(ckpt.param(&format!("{name}.bias"), &[output])?),
    })
}

impl Gpt2 {
    /// The model in `dir`, its parameters cast to `dtype` where given (else as the file holds them), on `device`.
    pub fn load(dir: &Path, dtype: Option<DType>, device: &Device) -> Result<Gpt2, Error> {
        let mut ckpt = Checkpoint::open(dir, dtype, device)?;
        let cfg = Gpt2Config::read(&ckpt)?;
        let p = if ckpt.has("transformer.wte.weight") { "transformer." } else { "" };
        let (d, eps) = (cfg.width, cfg.eps);
        let wte = nn::Embedding { weight: ckpt.param(&format!("{p}wte.weight"), &[cfg.vocab, d])? };
        let wpe = nn::Embedding { weight: ckpt.param(&format!("{p}wpe.weight"), &[cfg.positions, d])? };
        let mut blocks = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            let h = format!("{p}h.{i}");
            blocks.push(Block {
                ln_1: layer_norm(&mut ckpt, &format!("{h}.ln_1"), d, eps)?,
                c_attn: conv1d(&mut ckpt, &format!("{h}.attn.c_attn"), d, 3 * d)?,
                c_proj: conv1d(&mut ckpt, &format!("{h}.attn.c_proj"), d, d)?,
                ln_2: layer_norm(&mut ckpt, &format!("{h}.ln_2"), d, eps)?,
                c_fc: conv1d(&mut ckpt, &format!("{h}.mlp.c_fc"), d, cfg.inner)?,
                mlp_proj: conv1d(&mut ckpt, &format!("{h}.mlp.c_proj"), cfg.inner, d)?,
            });
        }
        let ln_f = layer_norm(&mut ckpt, &format!("{p}ln_f"), d, eps)?;
        let head = match ckpt.has("lm_head.weight") {
            true => nn::Linear { weight: ckpt.param("lm_head.weight", &[cfg.vocab, d])?, bias: None },
            false => nn::Linear { weight: wte.weight.clone(), bias: None },
        };
        let dtype = wte.weight.dtype();
        // Older versions of transformers saved the attention's mask buffers too.
        ckpt.finish(&|name| name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias"))?;
        Ok(Gpt2 { config: cfg, wte, wpe, blocks, ln_f, head, dtype, device: device.clone() })
    }

    fn activation(&self, x: &Tensor) -> Tensor {
        match self.config.activation {
            Activation::GeluTanh => x.gelu(),
            Activation::Gelu => x * 0.5 * ((x * std::f32::consts::FRAC_1_SQRT_2).erf() + 1.0),
            Activation::Relu => x.relu(),
        }
    }

    /// Causal self-attention of block `blk` over `h` (`[b, t, width]`) at positions `start..`, through the
    /// layer's cache where given.
    fn attention(&self, blk: &Block, h: &Tensor, start: usize, cache: Option<&KvCache>) -> Tensor {
        let (b, t, d) = (h.shape()[0], h.shape()[1], self.config.width);
        let (heads, hd) = (self.config.heads, d / self.config.heads);
        // [b, t, 3, heads, hd] -> [3, b, heads, t, hd]: views of the one product.
        let qkv = blk.c_attn.forward(h).reshape([b, t, 3, heads, hd]).permute([2, 0, 3, 1, 4]);
        let part = |i: usize| qkv.narrow(0, i, 1).squeeze(0);
        let (q, k, v) = (part(0), part(1), part(2));
        let y = match cache {
            Some(cache) => {
                cache.write(start, &k, &v);
                cache.attend(&q, start)
            }
            None => F::scaled_dot_product_attention(&q, &k, &v, true),
        };
        blk.c_proj.forward(&y.permute([0, 2, 1, 3]).reshape([b, t, d]))
    }
}

impl CausalLm for Gpt2 {
    fn forward(&self, ids: &Tensor, start: usize, caches: Option<&[KvCache]>, last_only: bool) -> Tensor {
        let t = ids.shape()[1];
        // Positions looked up through a gather at indices computed from `start`: a view at offset `start` would
        // make every position another plan.
        let positions = KvCache::positions(start, t, &self.device);
        let mut x = self.wte.forward(ids) + F::embedding(&positions, &self.wpe.weight);
        for (i, blk) in self.blocks.iter().enumerate() {
            x = &x + self.attention(blk, &blk.ln_1.forward(&x), start, caches.map(|c| &c[i]));
            let hidden = self.activation(&blk.c_fc.forward(&blk.ln_2.forward(&x)));
            x = &x + blk.mlp_proj.forward(&hidden);
        }
        let x = if last_only { x.narrow(1, t - 1, 1) } else { x };
        self.head.forward(&self.ln_f.forward(&x))
    }

    fn dims(&self) -> Dims {
        let c = &self.config;
        Dims {
            layers: c.layers,
            kv_heads: c.heads,
            head_dim: c.width / c.heads,
            positions: c.positions,
            vocab: c.vocab,
        }
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn device(&self) -> &Device {
        &self.device
    }
}
