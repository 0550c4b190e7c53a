//! The Hugging Face models of `examples/gpt2.rs` (GPT-2) and `examples/hf/llama.rs` on tiny checkpoints the tests
//! write themselves in each naming (safetensors and `config.json`, as `save_pretrained` lays them out), on every
//! backend: their logits against plain host forward passes in f64, decoding with the KV cache against decoding
//! without it, one realize per token with a fixed number of kernels, the plan reused, nothing compiled and no
//! buffer added after the first token; loading errors that name the tensor.

mod common;

#[path = "../examples/hf/checkpoint.rs"]
#[allow(dead_code)]
mod checkpoint;
#[path = "../examples/hf/generate.rs"]
#[allow(dead_code)]
mod generate;
#[path = "../examples/hf/gpt2.rs"]
#[allow(dead_code)]
mod gpt2;
#[path = "../examples/hf/llama.rs"]
#[allow(dead_code)]
mod llama;
#[path = "../examples/hf/parity.rs"]
#[allow(dead_code)]
mod parity;

use common::{devices, Rng};
use generate::{generate, CausalLm, Generation, Options, Sampling};
use lazor::{DType, Device, Tensor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Named tensors as `(shape, values)`.
type Weights = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A fresh directory `name` holding `weights` and `config`.
fn scratch_with(name: &str, weights: &Weights, config: &str) -> PathBuf {
    let dir = scratch(name);
    save(&dir, weights, config);
    dir
}

/// Writes `weights` as `dir/model.safetensors` and `config` as `dir/config.json`.
fn save(dir: &Path, weights: &Weights, config: &str) {
    let cpu = Device::cpu();
    let tensors: Vec<(String, Tensor)> =
        weights.iter().map(|(n, (s, v))| (n.clone(), Tensor::from_slice_on(v, s.as_slice(), &cpu))).collect();
    let named: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    lazor::safetensors::save(dir.join("model.safetensors"), &named).unwrap();
    std::fs::write(dir.join("config.json"), config).unwrap();
}

fn put(w: &mut Weights, rng: &mut Rng, name: &str, shape: &[usize], scale: f32) {
    let n = shape.iter().product();
    w.insert(name.to_string(), (shape.to_vec(), rng.vec(n, -scale, scale)));
}

fn put_around(w: &mut Weights, rng: &mut Rng, name: &str, n: usize, centre: f32) {
    w.insert(name.to_string(), (vec![n], rng.vec(n, centre - 0.2, centre + 0.2)));
}

const GPT2: (usize, usize, usize, usize, usize, usize) = (40, 32, 16, 2, 2, 48); // vocab, positions, width, heads, layers, inner

/// A tiny GPT-2 in `GPT2LMHeadModel`'s names and layouts (Conv1D weights `[in, out]`, the head tied to `wte`).
fn gpt2_weights(seed: u64) -> (Weights, String) {
    let (vocab, positions, d, heads, layers, inner) = GPT2;
    let mut rng = Rng::new(seed);
    let mut w = Weights::new();
    put(&mut w, &mut rng, "transformer.wte.weight", &[vocab, d], 1.0);
    put(&mut w, &mut rng, "transformer.wpe.weight", &[positions, d], 0.5);
    for i in 0..layers {
        let h = format!("transformer.h.{i}");
        for ln in ["ln_1", "ln_2"] {
            put_around(&mut w, &mut rng, &format!("{h}.{ln}.weight"), d, 1.0);
            put_around(&mut w, &mut rng, &format!("{h}.{ln}.bias"), d, 0.0);
        }
        for (name, input, output) in
            [("attn.c_attn", d, 3 * d), ("attn.c_proj", d, d), ("mlp.c_fc", d, inner), ("mlp.c_proj", inner, d)]
        {
            put(&mut w, &mut rng, &format!("{h}.{name}.weight"), &[input, output], 1.0 / (input as f32).sqrt());
            put(&mut w, &mut rng, &format!("{h}.{name}.bias"), &[output], 0.1);
        }
    }
    put_around(&mut w, &mut rng, "transformer.ln_f.weight", d, 1.0);
    put_around(&mut w, &mut rng, "transformer.ln_f.bias", d, 0.0);
    let config = format!(
        r#"{{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": {vocab}, "n_positions": {positions},
        "n_embd": {d}, "n_head": {heads}, "n_layer": {layers}, "n_inner": {inner}, "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-05, "scale_attn_weights": true, "tie_word_embeddings": true, "bos_token_id": 0}}"#
    );
    (w, config)
}

const LLAMA: (usize, usize, usize, usize, usize, usize, usize) = (40, 16, 4, 2, 24, 2, 64); // vocab, width, heads, kv heads, hidden, layers, positions

/// A tiny Llama in `LlamaForCausalLM`'s names: grouped-query attention (4 heads over 2 kv heads), its own head.
fn llama_weights(seed: u64) -> (Weights, String) {
    let (vocab, d, heads, kv, hidden, layers, positions) = LLAMA;
    let hd = d / heads;
    let mut rng = Rng::new(seed);
    let mut w = Weights::new();
    put(&mut w, &mut rng, "model.embed_tokens.weight", &[vocab, d], 1.0);
    for i in 0..layers {
        let l = format!("model.layers.{i}");
        put_around(&mut w, &mut rng, &format!("{l}.input_layernorm.weight"), d, 1.0);
        put_around(&mut w, &mut rng, &format!("{l}.post_attention_layernorm.weight"), d, 1.0);
        for (name, out, input) in [
            ("self_attn.q_proj", heads * hd, d),
            ("self_attn.k_proj", kv * hd, d),
            ("self_attn.v_proj", kv * hd, d),
            ("self_attn.o_proj", d, heads * hd),
            ("mlp.gate_proj", hidden, d),
            ("mlp.up_proj", hidden, d),
            ("mlp.down_proj", d, hidden),
        ] {
            put(&mut w, &mut rng, &format!("{l}.{name}.weight"), &[out, input], 1.5 / (input as f32).sqrt());
        }
    }
    put_around(&mut w, &mut rng, "model.norm.weight", d, 1.0);
    put(&mut w, &mut rng, "lm_head.weight", &[vocab, d], 1.0);
    let config = format!(
        r#"{{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": {vocab}, "hidden_size": {d},
        "intermediate_size": {hidden}, "num_hidden_layers": {layers}, "num_attention_heads": {heads},
        "num_key_value_heads": {kv}, "max_position_embeddings": {positions}, "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0, "rope_scaling": null, "hidden_act": "silu", "tie_word_embeddings": false,
        "attention_bias": false, "torch_dtype": "float32"}}"#
    );
    (w, config)
}

/// `x W^T` for a row `x` and `W` `[out, in]`, or `x W` for `W` `[in, out]` (`in_out`).
fn project(x: &[f64], w: &(Vec<usize>, Vec<f32>), in_out: bool) -> Vec<f64> {
    let (rows, cols) = (w.0[0], w.0[1]);
    match in_out {
        true => (0..cols).map(|o| (0..rows).map(|i| x[i] * w.1[i * cols + o] as f64).sum()).collect(),
        false => (0..rows).map(|o| (0..cols).map(|i| x[i] * w.1[o * cols + i] as f64).sum()).collect(),
    }
}

fn add(x: &mut [f64], y: &[f64]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

fn vec64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// Causal attention over rows of `[t][heads * hd]`, query head `h` reading kv head `h / (heads / kv)`.
fn attend(q: &[Vec<f64>], k: &[Vec<f64>], v: &[Vec<f64>], heads: usize, kv: usize, hd: usize) -> Vec<Vec<f64>> {
    (0..q.len())
        .map(|i| {
            let mut y = vec![0.0; heads * hd];
            for h in 0..heads {
                let j = h / (heads / kv);
                let dot =
                    |s: usize| (0..hd).map(|c| q[i][h * hd + c] * k[s][j * hd + c]).sum::<f64>() / (hd as f64).sqrt();
                let scores: Vec<f64> = (0..=i).map(dot).collect();
                let top = scores.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                let total: f64 = e.iter().sum();
                for c in 0..hd {
                    y[h * hd + c] = (0..=i).map(|s| e[s] / total * v[s][j * hd + c]).sum();
                }
            }
            y
        })
        .collect()
}

/// GPT-2's logits at every position of `ids`, in f64 on the host.
fn gpt2_host(w: &Weights, ids: &[i32]) -> Vec<Vec<f64>> {
    let (vocab, _, d, heads, layers, _) = GPT2;
    let hd = d / heads;
    let get = |n: &str| &w[n];
    let norm = |x: &[f64], name: &str| -> Vec<f64> {
        let mean = x.iter().sum::<f64>() / d as f64;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
        let (g, b) = (&get(&format!("{name}.weight")).1, &get(&format!("{name}.bias")).1);
        (0..d).map(|i| (x[i] - mean) / (var + 1e-5).sqrt() * g[i] as f64 + b[i] as f64).collect()
    };
    let conv = |x: &[f64], name: &str| -> Vec<f64> {
        let mut y = project(x, get(&format!("{name}.weight")), true);
        add(&mut y, &vec64(&get(&format!("{name}.bias")).1));
        y
    };
    let (wte, wpe) = (&get("transformer.wte.weight").1, &get("transformer.wpe.weight").1);
    let mut x: Vec<Vec<f64>> = ids
        .iter()
        .enumerate()
        .map(|(t, &id)| (0..d).map(|i| (wte[id as usize * d + i] + wpe[t * d + i]) as f64).collect())
        .collect();
    for l in 0..layers {
        let h = format!("transformer.h.{l}");
        let qkv: Vec<Vec<f64>> =
            x.iter().map(|r| conv(&norm(r, &format!("{h}.ln_1")), &format!("{h}.attn.c_attn"))).collect();
        let part = |p: usize| -> Vec<Vec<f64>> { qkv.iter().map(|r| r[p * d..(p + 1) * d].to_vec()).collect() };
        let y = attend(&part(0), &part(1), &part(2), heads, heads, hd);
        for (r, y) in x.iter_mut().zip(&y) {
            add(r, &conv(y, &format!("{h}.attn.c_proj")));
            let m: Vec<f64> = conv(&norm(r, &format!("{h}.ln_2")), &format!("{h}.mlp.c_fc"))
                .iter()
                .map(|&a| 0.5 * a * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (a + 0.044715 * a.powi(3))).tanh()))
                .collect();
            add(r, &conv(&m, &format!("{h}.mlp.c_proj")));
        }
    }
    x.iter().map(|r| project(&norm(r, "transformer.ln_f"), &(vec![vocab, d], wte.clone()), false)).collect()
}

/// Llama's logits at every position of `ids`, in f64 on the host (Hugging Face's formulas).
fn llama_host(w: &Weights, ids: &[i32]) -> Vec<Vec<f64>> {
    let (_, d, heads, kv, _, layers, _) = LLAMA;
    let hd = d / heads;
    let get = |n: &str| &w[n];
    let rms = |x: &[f64], name: &str| -> Vec<f64> {
        let inv = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / d as f64 + 1e-6).sqrt();
        x.iter().zip(&get(name).1).map(|(v, g)| v * inv * *g as f64).collect()
    };
    let inv_freq: Vec<f64> = (0..hd / 2).map(|i| (1.0 / 10000f32.powf((2 * i) as f32 / hd as f32)) as f64).collect();
    let rope = |x: &[f64], n: usize, pos: usize| -> Vec<f64> {
        let mut y = vec![0.0; x.len()];
        for h in 0..n {
            let row = &x[h * hd..(h + 1) * hd];
            for i in 0..hd {
                let angle = pos as f64 * inv_freq[i % (hd / 2)];
                let rotated = if i < hd / 2 { -row[i + hd / 2] } else { row[i - hd / 2] };
                y[h * hd + i] = row[i] * angle.cos() + rotated * angle.sin();
            }
        }
        y
    };
    let emb = &get("model.embed_tokens.weight").1;
    let mut x: Vec<Vec<f64>> = ids.iter().map(|&id| vec64(&emb[id as usize * d..(id as usize + 1) * d])).collect();
    for l in 0..layers {
        let p = |n: &str| format!("model.layers.{l}.{n}");
        let h: Vec<Vec<f64>> = x.iter().map(|r| rms(r, &p("input_layernorm.weight"))).collect();
        let q: Vec<Vec<f64>> = h
            .iter()
            .enumerate()
            .map(|(t, r)| rope(&project(r, get(&p("self_attn.q_proj.weight")), false), heads, t))
            .collect();
        let k: Vec<Vec<f64>> = h
            .iter()
            .enumerate()
            .map(|(t, r)| rope(&project(r, get(&p("self_attn.k_proj.weight")), false), kv, t))
            .collect();
        let v: Vec<Vec<f64>> = h.iter().map(|r| project(r, get(&p("self_attn.v_proj.weight")), false)).collect();
        let y = attend(&q, &k, &v, heads, kv, hd);
        for (r, y) in x.iter_mut().zip(&y) {
            add(r, &project(y, get(&p("self_attn.o_proj.weight")), false));
            let n = rms(r, &p("post_attention_layernorm.weight"));
            let (g, u) = (
                project(&n, get(&p("mlp.gate_proj.weight")), false),
                project(&n, get(&p("mlp.up_proj.weight")), false),
            );
            let m: Vec<f64> = g.iter().zip(&u).map(|(&g, &u)| g / (1.0 + (-g).exp()) * u).collect();
            add(r, &project(&m, get(&p("mlp.down_proj.weight")), false));
        }
    }
    x.iter().map(|r| project(&rms(r, "model.norm.weight"), get("lm_head.weight"), false)).collect()
}

/// `max |a - b| / max |b|`.
fn relative(got: &[f32], want: &[f64]) -> f64 {
    let top = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    got.iter().zip(want).fold(0.0f64, |m, (&a, b)| m.max((a as f64 - b).abs())) / top
}

/// The prompts of the tests: two sequences of 5 tokens.
fn prompts() -> Vec<Vec<i32>> {
    vec![vec![3, 17, 5, 29, 11], vec![38, 0, 22, 7, 1]]
}

fn run(model: &dyn CausalLm, cache: bool, max_new: usize) -> Generation {
    let opts = Options { max_new, sampling: Sampling::GREEDY, cache, keep_logits: true };
    generate(model, &prompts(), &opts, &mut |_| {}).unwrap()
}

/// Checks a model's prompt logits against its host forward pass, then decoding with the cache against decoding
/// without it; returns the kernels of a decoded token.
fn check_model(what: &str, model: &dyn CausalLm, host: &dyn Fn(&[i32]) -> Vec<Vec<f64>>, dev: &Device) -> u64 {
    let what = format!("{what} on {}", dev.name());
    let (b, t) = (2, 5);
    let ids = Tensor::from_vec_on(prompts().concat(), [b, t], dev);
    let logits = lazor::no_grad(|| model.forward(&ids, 0, None, false)).to_vec();
    let want: Vec<f64> = prompts().iter().flat_map(|p| host(p).concat()).collect();
    assert!(relative(&logits, &want) < 1e-5, "{what}: prompt logits {}", relative(&logits, &want));

    let max_new = 8;
    let cached = run(model, true, max_new);
    let plain = run(model, false, max_new);
    for s in 0..b {
        assert_eq!(cached.tokens(s), plain.tokens(s), "{what}: sequence {s}");
        // The greedy continuation the host computes, token by token.
        let mut seq = prompts()[s].clone();
        for _ in 0..max_new {
            let last = host(&seq).pop().unwrap();
            let best = (0..last.len()).max_by(|&i, &j| last[i].total_cmp(&last[j])).unwrap();
            seq.push(best as i32);
        }
        assert_eq!(cached.tokens(s), seq[t..], "{what}: sequence {s} against the host");
    }
    for (n, (c, p)) in cached.steps.iter().zip(&plain.steps).enumerate() {
        let (c, p) = (c.logits.as_ref().unwrap(), p.logits.as_ref().unwrap());
        assert!(relative(c, &vec64(p)) < 1e-5, "{what}: step {n}: logits {}", relative(c, &vec64(p)));
    }
    // One realize a token; from the second decoded token on, the same kernels, the plan reused, nothing compiled,
    // no buffer more.
    let steps = &cached.steps;
    assert!(steps.iter().all(|s| s.stats.realizes == 1), "{what}: one realize per step");
    let decode = &steps[2..];
    let kernels = decode[0].stats.dispatches;
    for (n, s) in decode.iter().enumerate() {
        let at = format!("{what}: decoded token {}", n + 2);
        assert_eq!(s.stats.dispatches, kernels, "{at}: kernels");
        assert_eq!((s.stats.plans_reused, s.stats.pipelines_compiled), (1, 0), "{at}: plan and pipelines");
        // (Measured as each step is submitted: from the second decoded token on, the one before is in flight.)
        assert_eq!(s.live_bytes, decode[0].live_bytes, "{at}: live buffers");
        assert_eq!(s.stats.peak_buffer_bytes, decode[0].stats.peak_buffer_bytes, "{at}: peak");
    }
    kernels
}

/// Greedy decoding with the cache submits each token's realize before the previous token is read: when a decoded
/// token reaches the caller, the next one's realize has already run (the prompt's is read at once, the last has no
/// next). Sampling and decoding without the cache read each token before the next realize.
#[test]
fn greedy_decoding_submits_the_next_token_before_reading_this_one() {
    let (w, config) = gpt2_weights(5);
    let dir = scratch_with("hf_gpt2_ahead", &w, &config);
    for dev in devices() {
        let model = gpt2::Gpt2::load(&dir, None, &dev).unwrap();
        for (cache, sampling, ahead) in [
            (true, Sampling::GREEDY, true),
            (false, Sampling::GREEDY, false),
            (true, Sampling { temperature: 0.8, top_k: 5, seed: 3 }, false),
        ] {
            let max_new = 6;
            let opts = Options { max_new, sampling, cache, keep_logits: false };
            let mut seen = Vec::new();
            generate(&model, &prompts(), &opts, &mut |_| seen.push(dev.stats().realizes)).unwrap();
            // Realizes done when step n is delivered, counted from the prompt's (the caches' allocation before it
            // realizes too): n + 1 read at once, n + 2 with the next one submitted first.
            let seen: Vec<u64> = seen.iter().map(|&r| r + 1 - seen[0]).collect();
            let want: Vec<u64> = (0..max_new as u64)
                .map(|n| if ahead && n > 0 && n + 1 < max_new as u64 { n + 2 } else { n + 1 })
                .collect();
            assert_eq!(seen, want, "cache {cache}, {sampling:?} on {}", dev.name());
        }
    }
}

/// A decode step binds the buffers the step one or two before bound (the pool hands them out in the same order), its
/// parameter block rewritten in place where the position changed it: once warm, every kernel finds its bind group
/// instead of creating one, which costs the host more than recording the kernel. (None on the CPU backend.)
#[test]
fn warm_decode_steps_create_no_bind_groups() {
    let (w, config) = gpt2_weights(6);
    let dir = scratch_with("hf_gpt2_groups", &w, &config);
    for dev in devices() {
        let model = gpt2::Gpt2::load(&dir, None, &dev).unwrap();
        // (The pool's free lists and the parameter blocks settle over the first few steps.)
        let opts = Options { max_new: 16, sampling: Sampling::GREEDY, cache: true, keep_logits: false };
        let g = generate(&model, &prompts(), &opts, &mut |_| {}).unwrap();
        let created: Vec<u64> = g.steps.iter().map(|s| s.stats.bind_groups_created).collect();
        assert!(created[10..].iter().all(|&n| n == 0), "bind groups created per step on {}: {created:?}", dev.name());
        if !dev.is_cpu() {
            assert!(created[0] > 0, "the prompt's step creates its groups on {}: {created:?}", dev.name());
        }
    }
}

#[test]
fn a_prompt_may_fill_every_position_the_last_token_is_never_fed() {
    let (w, config) = gpt2_weights(4);
    let dir = scratch_with("hf_gpt2_full", &w, &config);
    let dev = Device::cpu();
    let model = gpt2::Gpt2::load(&dir, None, &dev).unwrap();
    let positions = GPT2.1;
    let prompt = vec![(0..positions as i32).map(|i| i % GPT2.0 as i32).collect::<Vec<_>>()];
    for (max_new, fits) in [(1, true), (2, false)] {
        let opts = Options { max_new, sampling: Sampling::GREEDY, cache: true, keep_logits: false };
        match generate(&model, &prompt, &opts, &mut |_| {}) {
            Ok(g) => assert!(fits && g.steps.len() == 1, "{max_new} new after {positions}"),
            Err(e) => assert!(!fits && e.contains("positions"), "{max_new} new after {positions}: {e}"),
        }
    }
}

#[test]
fn gpt2_decodes_the_same_with_and_without_the_cache_one_realize_per_token() {
    let (w, config) = gpt2_weights(1);
    let dir = scratch_with("hf_gpt2", &w, &config);
    for dev in devices() {
        let model = gpt2::Gpt2::load(&dir, None, &dev).unwrap();
        assert_eq!(model.dtype, DType::F32);
        let kernels = check_model("GPT-2", &model, &|ids| gpt2_host(&w, ids), &dev);
        // Per layer 11: ln_1 (the embeddings or the residual folded in), c_attn, the two cache writes, the
        // scores, the masked softmax, the values' product, c_proj, ln_2, c_fc with gelu, the MLP's projection;
        // then 4: ln_f, the head, the argmax's fold and its copy out as f32.
        assert_eq!(kernels, 11 * GPT2.4 as u64 + 4, "GPT-2 on {}: kernels per token", dev.name());
    }
}

#[test]
fn llama_in_hugging_face_naming_decodes_the_same_with_and_without_the_cache() {
    let (w, config) = llama_weights(2);
    let dir = scratch_with("hf_llama", &w, &config);
    for dev in devices() {
        let model = llama::Llama::load(&dir, None, &dev).unwrap();
        let kernels = check_model("Llama", &model, &|ids| llama_host(&w, ids), &dev);
        // Per layer 14: input_layernorm, q_proj, k_proj and v_proj (sibling folds of one input: one walk), the
        // queries' rotation, the two cache writes (the keys' rotation inlined), the scores, the masked softmax, the
        // values' product, o_proj, post_attention_layernorm, gate_proj with silu, up_proj, down_proj; then 4:
        // the final norm, the head, the argmax's fold and its copy out as f32.
        assert_eq!(kernels, 14 * LLAMA.5 as u64 + 4, "Llama on {}: kernels per token", dev.name());
    }
}

#[test]
fn half_models_stay_close_to_f32() {
    let (w, config) = gpt2_weights(3);
    let dir = scratch_with("hf_gpt2_half", &w, &config);
    for dev in devices() {
        let full = gpt2::Gpt2::load(&dir, None, &dev).unwrap();
        let ids = Tensor::from_vec_on(prompts().concat(), [2, 5], &dev);
        let want = vec64(&lazor::no_grad(|| full.forward(&ids, 0, None, false)).to_vec());
        for (dt, tol) in [(DType::F16, 1e-2), (DType::BF16, 5e-2)] {
            let model = gpt2::Gpt2::load(&dir, Some(dt), &dev).unwrap();
            assert_eq!((model.dtype, model.wte.weight.dtype()), (dt, dt));
            let logits = lazor::no_grad(|| model.forward(&ids, 0, None, false));
            assert_eq!(logits.dtype(), dt);
            let got = logits.to_dtype(DType::F32).to_vec();
            assert!(relative(&got, &want) < tol, "{dt} on {}: {}", dev.name(), relative(&got, &want));
            // The cache in the model's dtype: the first token decoded from it as from the whole sequence.
            let (c, p) = (run(&model, true, 2), run(&model, false, 2));
            let (lc, lp) = (c.steps[1].logits.as_ref().unwrap(), p.steps[1].logits.as_ref().unwrap());
            if c.steps[0].tokens == p.steps[0].tokens {
                assert!(relative(lc, &vec64(lp)) < tol, "{dt} on {}: decoded logits", dev.name());
            }
        }
    }
}

#[test]
fn sampling_draws_from_the_top_k_and_repeats_with_its_seed() {
    let (w, config) = gpt2_weights(4);
    let dir = scratch_with("hf_gpt2_sampling", &w, &config);
    let dev = Device::cpu();
    let model = gpt2::Gpt2::load(&dir, None, &dev).unwrap();
    let sampled = |seed: u64, top_k: usize| {
        let opts = Options {
            max_new: 6,
            sampling: Sampling { temperature: 1.0, top_k, seed },
            cache: true,
            keep_logits: true,
        };
        generate(&model, &prompts(), &opts, &mut |_| {}).unwrap()
    };
    let (a, b) = (sampled(7, 3), sampled(7, 3));
    assert_eq!(a.tokens(0), b.tokens(0), "the same seed, the same tokens");
    for step in &a.steps {
        let logits = step.logits.as_ref().unwrap();
        for (s, row) in logits.chunks(GPT2.0).enumerate() {
            let chosen = row[step.tokens[s] as usize];
            let above = row.iter().filter(|&&x| x > chosen).count();
            assert!(above < 3, "a token outside the top 3");
        }
    }
    // top_k 1 is greedy.
    assert_eq!(sampled(9, 1).tokens(1), run(&model, true, 6).tokens(1));
}

#[test]
fn the_parity_check_passes_on_a_faithful_file_and_fails_on_a_wrong_one() {
    let (w, config) = gpt2_weights(5);
    let dir = scratch_with("hf_gpt2_parity", &w, &config);
    let dev = Device::cpu();
    let model = gpt2::Gpt2::load(&dir, None, &dev).unwrap();
    // What the script would write, from the host's forward pass.
    let (t, steps) = (5, 6);
    let logits: Vec<f32> = prompts().iter().flat_map(|p| gpt2_host(&w, p).concat()).map(|x| x as f32).collect();
    let greedy: Vec<i32> = prompts()
        .iter()
        .flat_map(|p| {
            let mut seq = p.clone();
            for _ in 0..steps {
                let last = gpt2_host(&w, &seq).pop().unwrap();
                seq.push((0..last.len()).max_by(|&i, &j| last[i].total_cmp(&last[j])).unwrap() as i32);
            }
            seq[t..].to_vec()
        })
        .collect();
    let write = |name: &str, logits: &[f32]| {
        let ids = Tensor::from_vec_on(prompts().concat(), [2, t], &dev);
        let l = Tensor::from_slice_on(logits, [2, t, GPT2.0], &dev);
        let g = Tensor::from_slice_on(&greedy, [2, steps], &dev);
        let path = dir.join(name);
        lazor::safetensors::save(&path, &[("input_ids", &ids), ("logits", &l), ("greedy", &g)]).unwrap();
        parity::check(&model, &parity::Expected::read(&path).unwrap()).unwrap()
    };
    let good = write("expected.safetensors", &logits);
    assert!(good.passes(DType::F32), "{good:?}");
    assert_eq!((good.cached_match, good.uncached_match, good.cache_agrees), (steps, steps, true));
    assert!(good.cache_rel < 1e-5, "the cache against the whole sequence: {good:?}");
    // In bf16 the same file passes on the half tolerances: the cache checked on one sequence, tokens reported.
    let half = gpt2::Gpt2::load(&dir, Some(DType::BF16), &dev).unwrap();
    let report = parity::check(&half, &parity::Expected::read(&dir.join("expected.safetensors")).unwrap()).unwrap();
    assert!(report.cache_rel > 0.0 && report.cache_rel <= parity::tolerance(DType::BF16), "{report:?}");
    assert!(report.passes(DType::BF16), "{report:?}");
    let shifted: Vec<f32> = logits.iter().map(|x| x * 1.01).collect();
    let bad = write("wrong.safetensors", &shifted);
    assert!(!bad.passes(DType::F32), "{bad:?}");
}

#[test]
fn a_bad_or_mismatched_checkpoint_is_an_error_naming_the_tensor() {
    let dev = Device::cpu();
    let (w, config) = gpt2_weights(6);
    let attempt = |name: &str, w: &Weights, config: &str| -> String {
        match gpt2::Gpt2::load(&scratch_with(name, w, config), None, &dev) {
            Ok(_) => String::from("loaded"),
            Err(e) => e,
        }
    };
    let mut missing = w.clone();
    missing.remove("transformer.h.1.mlp.c_fc.bias");
    assert!(attempt("hf_missing", &missing, &config).contains("no tensor named `transformer.h.1.mlp.c_fc.bias`"));
    let mut wrong = w.clone();
    wrong.insert("transformer.h.0.attn.c_attn.weight".into(), (vec![48, 16], vec![0.0; 48 * 16]));
    let e = attempt("hf_wrong_shape", &wrong, &config);
    assert!(e.contains("tensor `transformer.h.0.attn.c_attn.weight` is f32 [48, 16]") && e.contains("[16, 48]"), "{e}");
    let mut extra = w.clone();
    extra.insert("transformer.h.7.attn.c_attn.weight".into(), (vec![2], vec![0.0; 2]));
    assert!(attempt("hf_extra", &extra, &config)
        .contains("tensor `transformer.h.7.attn.c_attn.weight` belongs to no parameter"));
    // Buffers older versions saved are no parameters, and a separate head loads as one.
    let mut old = w.clone();
    old.insert("transformer.h.0.attn.bias".into(), (vec![1, 1, 32, 32], vec![1.0; 1024]));
    old.insert("lm_head.weight".into(), w["transformer.wte.weight"].clone());
    assert_eq!(attempt("hf_old", &old, &config), "loaded");
    assert!(attempt("hf_no_key", &w, r#"{"n_embd": 16}"#).contains("no `n_head`"));
    let model = gpt2::Gpt2::load(&scratch_with("hf_ids", &w, &config), None, &dev).unwrap();
    let opts = Options { max_new: 2, sampling: Sampling::GREEDY, cache: true, keep_logits: false };
    let e = generate(&model, &[vec![1, 40, 2]], &opts, &mut |_| {}).err().unwrap();
    assert!(e.contains("token id 40 is outside the model's vocabulary of 40"), "{e}");
    assert!(attempt("hf_bad_json", &w, "{").contains("not valid JSON"));
    let act = config.replace("gelu_new", "swish");
    assert!(attempt("hf_act", &w, &act).contains("activation_function `swish`"));
    let dir = scratch_with("hf_corrupt", &w, &config);
    std::fs::write(dir.join("model.safetensors"), b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header}").unwrap();
    assert!(gpt2::Gpt2::load(&dir, None, &dev).err().unwrap().contains("not a valid safetensors file"));
    let dir = scratch("hf_empty");
    assert!(gpt2::Gpt2::load(&dir, None, &dev).err().unwrap().contains("config.json"));
    // A Llama file given to GPT-2 names what it lacks.
    let (lw, lc) = llama_weights(7);
    assert!(attempt("hf_llama_as_gpt2", &lw, &lc).contains("no `n_embd`"));
}
