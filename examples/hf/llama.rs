//! A Llama-shaped model from a Hugging Face directory (`LlamaForCausalLM.save_pretrained`), built from lazor's
//! Llama-style blocks: RMSNorm, rotary position embeddings, grouped-query attention over a `KvCache`, a SwiGLU MLP.
//!
//! Names as Hugging Face's: `model.embed_tokens.weight`, `model.layers.{i}.input_layernorm.weight`,
//! `model.layers.{i}.self_attn.{q,k,v,o}_proj.weight`, `model.layers.{i}.post_attention_layernorm.weight`,
//! `model.layers.{i}.mlp.{gate,up,down}_proj.weight`, `model.norm.weight`, and `lm_head.weight` unless the
//! embedding is tied (`tie_word_embeddings`).

use super::checkpoint::{Checkpoint, Error};
use super::generate::{CausalLm, Dims};
use lazor::nn::{self, functional as F, KvCache, Module, Rotary};
use lazor::{DType, Device, Tensor};
use std::path::Path;

/// The shape of a Llama model, from `config.json`.
#[derive(Clone, Copy, Debug)]
pub struct LlamaConfig {
    pub vocab: usize,
    pub positions: usize,
    pub width: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub eps: f32,
    pub theta: f32,
    pub tied: bool,
}

impl LlamaConfig {
    /// The config of `ckpt`, or an error naming a key lazor cannot follow.
    pub fn read(ckpt: &Checkpoint) -> Result<LlamaConfig, Error> {
        let width = ckpt.usize("hidden_size")?;
        let heads = ckpt.usize("num_attention_heads")?;
        let kv_heads = ckpt.usize_or("num_key_value_heads", heads)?;
        if heads % kv_heads != 0 {
            return Err(ckpt.unsupported(&format!("{heads} attention heads are not a multiple of {kv_heads} kv heads")));
        }
        if ckpt.bool_or("attention_bias", false)? || ckpt.bool_or("mlp_bias", false)? {
            return Err(ckpt.unsupported("biases in attention or the MLP are not supported"));
        }
        if ckpt.str_or("hidden_act", "silu")? != "silu" {
            return Err(ckpt.unsupported("only hidden_act `silu` is supported"));
        }
        if ckpt.has_key("rope_scaling") {
            return Err(ckpt.unsupported("rope_scaling is not supported"));
        }
        Ok(LlamaConfig {
            vocab: ckpt.usize("vocab_size")?,
            positions: ckpt.usize("max_position_embeddings")?,
            width,
            hidden: ckpt.usize("intermediate_size")?,
            layers: ckpt.usize("num_hidden_layers")?,
            heads,
            kv_heads,
            head_dim: ckpt.usize_or("head_dim", width / heads)?,
            eps: ckpt.f32_or("rms_norm_eps", 1e-6)?,
            theta: ckpt.f32_or("rope_theta", 10000.0)?,
            tied: ckpt.bool_or("tie_word_embeddings", false)?,
        })
    }
}

/// One decoder layer: `x + o_proj(attn(input_layernorm(x)))`, then `x + mlp(post_attention_layernorm(x))`.
pub struct Layer {
    pub input_layernorm: nn::RmsNorm,
    pub q_proj: nn::Linear,
    pub k_proj: nn::Linear,
    pub v_proj: nn::Linear,
    pub o_proj: nn::Linear,
    pub post_attention_layernorm: nn::RmsNorm,
    pub mlp: nn::SwiGlu,
}

/// A Llama language model.
pub struct Llama {
    pub config: LlamaConfig,
    pub embed_tokens: nn::Embedding,
    pub layers: Vec<Layer>,
    pub norm: nn::RmsNorm,
    pub lm_head: nn::Linear,
    pub rotary: Rotary,
    pub dtype: DType,
    device: Device,
}

fn linear(ckpt: &mut Checkpoint, name: &str, input: usize, output: usize) -> Result<nn::Linear, Error> {
    Ok(nn::Linear { weight: ckpt.param(&format!("{name}.weight"), &[output, input])?, bias: None })
}

fn rms_norm(ckpt: &mut Checkpoint, name: &str, width: usize, eps: f32) -> Result<nn::RmsNorm, Error> {
    Ok(nn::RmsNorm { weight: ckpt.param(&format!("{name}.weight"), &[width])?, eps })
}

impl Llama {
    /// The model in `dir`, its parameters cast to `dtype` where given (else as the file holds them), on `device`.
    pub fn load(dir: &Path, dtype: Option<DType>, device: &Device) -> Result<Llama, Error> {
        let mut ckpt = Checkpoint::open(dir, dtype, device)?;
        let cfg = LlamaConfig::read(&ckpt)?;
        let (d, hd, eps) = (cfg.width, cfg.head_dim, cfg.eps);
        let embed_tokens = nn::Embedding { weight: ckpt.param("model.embed_tokens.weight", &[cfg.vocab, d])? };
        let mut layers = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            let l = format!("model.layers.{i}");
            layers.push(Layer {
                input_layernorm: rms_norm(&mut ckpt, &format!("{l}.input_layernorm"), d, eps)?,
                q_proj: linear(&mut ckpt, &format!("{l}.self_attn.q_proj"), d, cfg.heads * hd)?,
                k_proj: linear(&mut ckpt, &format!("{l}.self_attn.k_proj"), d, cfg.kv_heads * hd)?,
                v_proj: linear(&mut ckpt, &format!("{l}.self_attn.v_proj"), d, cfg.kv_heads * hd)?,
                o_proj: linear(&mut ckpt, &format!("{l}.self_attn.o_proj"), cfg.heads * hd, d)?,
                post_attention_layernorm: rms_norm(&mut ckpt, &format!("{l}.post_attention_layernorm"), d, eps)?,
                mlp: nn::SwiGlu {
                    gate_proj: linear(&mut ckpt, &format!("{l}.mlp.gate_proj"), d, cfg.hidden)?,
                    up_proj: linear(&mut ckpt, &format!("{l}.mlp.up_proj"), d, cfg.hidden)?,
                    down_proj: linear(&mut ckpt, &format!("{l}.mlp.down_proj"), cfg.hidden, d)?,
                },
            });
        }
        let norm = rms_norm(&mut ckpt, "model.norm", d, eps)?;
        let lm_head = match cfg.tied && !ckpt.has("lm_head.weight") {
            true => nn::Linear { weight: embed_tokens.weight.clone(), bias: None },
            false => linear(&mut ckpt, "lm_head", d, cfg.vocab)?,
        };
        // Older checkpoints saved the rotary frequencies, which are computed here.
        ckpt.finish(&|name| name.ends_with(".rotary_emb.inv_freq"))?;
        let dtype = embed_tokens.weight.dtype();
        let rotary = Rotary::new_on(hd, cfg.theta, device);
        Ok(Llama { config: cfg, embed_tokens, layers, norm, lm_head, rotary, dtype, device: device.clone() })
    }

    /// Grouped-query self-attention of `layer` over `h` (`[b, t, width]`) at positions `start..`, rotated by
    /// `cos` and `sin`, through the layer's cache where given.
    fn attention(
        &self,
        layer: &Layer,
        h: &Tensor,
        rope: (&Tensor, &Tensor),
        start: usize,
        cache: Option<&KvCache>,
    ) -> Tensor {
        let c = &self.config;
        let (b, t, hd) = (h.shape()[0], h.shape()[1], c.head_dim);
        let heads = |x: Tensor, n: usize| x.reshape([b, t, n, hd]).permute([0, 2, 1, 3]);
        let q = F::rotary_embedding(&heads(layer.q_proj.forward(h), c.heads), rope.0, rope.1);
        let k = F::rotary_embedding(&heads(layer.k_proj.forward(h), c.kv_heads), rope.0, rope.1);
        let v = heads(layer.v_proj.forward(h), c.kv_heads);
        let y = match cache {
            Some(cache) => {
                cache.write(start, &k, &v);
                cache.attend(&q, start)
            }
            None => {
                let group = c.heads / c.kv_heads;
                F::scaled_dot_product_attention(&q, &F::repeat_kv(&k, group), &F::repeat_kv(&v, group), true)
            }
        };
        layer.o_proj.forward(&y.permute([0, 2, 1, 3]).reshape([b, t, c.heads * hd]))
    }
}

impl CausalLm for Llama {
    fn forward(&self, ids: &Tensor, start: usize, caches: Option<&[KvCache]>, last_only: bool) -> Tensor {
        let t = ids.shape()[1];
        let (cos, sin) = self.rotary.cos_sin(&KvCache::positions(start, t, &self.device));
        let mut x = self.embed_tokens.forward(ids);
        for (i, layer) in self.layers.iter().enumerate() {
            let h = layer.input_layernorm.forward(&x);
            x = &x + self.attention(layer, &h, (&cos, &sin), start, caches.map(|c| &c[i]));
            x = &x + layer.mlp.forward(&layer.post_attention_layernorm.forward(&x));
        }
        let x = if last_only { x.narrow(1, t - 1, 1) } else { x };
        self.lm_head.forward(&self.norm.forward(&x))
    }

    fn dims(&self) -> Dims {
        let c = &self.config;
        Dims { layers: c.layers, kv_heads: c.kv_heads, head_dim: c.head_dim, positions: c.positions, vocab: c.vocab }
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn device(&self) -> &Device {
        &self.device
    }
}
