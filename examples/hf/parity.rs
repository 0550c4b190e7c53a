//! Comparing a model with what `transformers` computed for it (`benches/hf_gpt2.py` writes the file): the logits of
//! a batch of prompts, and greedy continuations with and without the KV cache.

use super::checkpoint::Error;
use super::generate::{generate, CausalLm, Options, Sampling};
use lazor::{DType, Device, Tensor};
use std::path::Path;

/// What `transformers` computed: prompts `input_ids` (`[batch, t]`), their `logits` (`[batch, t, vocab]`) and a
/// greedy continuation `greedy` (`[batch, steps]`).
pub struct Expected {
    pub input_ids: Vec<Vec<i32>>,
    pub logits: Vec<f32>,
    pub vocab: usize,
    pub greedy: Vec<Vec<i32>>,
}

/// The tensor `name` of `tensors`, of rank `rank`.
fn named<'a>(tensors: &'a [(String, Tensor)], path: &Path, name: &str, rank: usize) -> Result<&'a Tensor, Error> {
    let t = tensors
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, t)| t)
        .ok_or_else(|| format!("{}: no tensor named `{name}`", path.display()))?;
    if t.ndim() != rank {
        return Err(format!("{}: `{name}` has shape {:?}, expected {rank} axes", path.display(), t.shape()));
    }
    Ok(t)
}

fn rows(t: &Tensor) -> Vec<Vec<i32>> {
    let n = t.shape()[1];
    t.to_dtype(DType::I32).to_vec_as::<i32>().chunks(n).map(<[i32]>::to_vec).collect()
}

impl Expected {
    /// Reads the file `benches/hf_gpt2.py` writes.
    pub fn read(path: &Path) -> Result<Expected, Error> {
        let tensors = lazor::safetensors::load_on(path, &Device::cpu()).map_err(|e| e.to_string())?;
        let ids = named(&tensors, path, "input_ids", 2)?;
        let logits = named(&tensors, path, "logits", 3)?;
        let greedy = named(&tensors, path, "greedy", 2)?;
        if logits.shape()[..2] != ids.shape()[..] || greedy.shape()[0] != ids.shape()[0] {
            return Err(format!("{}: input_ids, logits and greedy disagree in their shapes", path.display()));
        }
        Ok(Expected {
            input_ids: rows(ids),
            logits: logits.to_dtype(DType::F32).to_vec(),
            vocab: logits.shape()[2],
            greedy: rows(greedy),
        })
    }
}

/// How close a model came to [`Expected`].
#[derive(Debug)]
pub struct Report {
    /// `max |a - b| / max |b|` over every logit of the prompts.
    pub logits_rel: f64,
    /// `max |a - b|` over every logit of the prompts.
    pub logits_abs: f64,
    /// Steps of each sequence's greedy continuation with the KV cache that equal `transformers`' before the first
    /// that differs, the shortest over the batch.
    pub cached_match: usize,
    /// The same without the cache.
    pub uncached_match: usize,
    /// Whether decoding with and without the cache chose the same tokens at every step.
    pub cache_agrees: bool,
    /// The cache against no cache on the same tokens: every decoding step's logits with the KV cache, fed the
    /// continuation chosen without it, beside the same positions' logits of one forward over the whole sequence;
    /// `max |a - b| / max |b|`.
    pub cache_rel: f64,
    pub steps: usize,
}

/// The relative error of `logits` allowed for a model of `dtype`: the f32 figure is the target; half types
/// round every stored activation (f16 to 11 bits, bf16 to 8).
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 1e-2,
        DType::BF16 => 5e-2,
        _ => 1e-4,
    }
}

impl Report {
    /// Whether the model passes: logits within [`tolerance`], with the cache as without it (on the same tokens);
    /// in f32 also the same greedy tokens as `transformers`, with and without the cache. In half types a near-tie
    /// may go either way once rounding differs (`transformers`' own bf16 decoding differs with and without its
    /// cache), after which the sequences part: tokens are reported there, and the cache is checked on one sequence.
    pub fn passes(&self, dtype: DType) -> bool {
        let tokens = dtype != DType::F32
            || (self.cached_match == self.steps && self.uncached_match == self.steps && self.cache_agrees);
        self.logits_rel <= tolerance(dtype) && self.cache_rel <= tolerance(dtype) && tokens
    }
}

/// The length of the common start of `a` and `b`.
fn common(a: &[i32], b: &[i32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Runs `model` on `expected`'s prompts and compares.
pub fn check(model: &dyn CausalLm, expected: &Expected) -> Result<Report, Error> {
    let dev = model.device();
    super::generate::check_ids(model, &expected.input_ids)?;
    let (b, t) = (expected.input_ids.len(), expected.input_ids[0].len());
    let ids = Tensor::from_vec_on(expected.input_ids.concat(), [b, t], dev);
    let logits = lazor::no_grad(|| model.forward(&ids, 0, None, false));
    let got = logits.to_dtype(DType::F32).try_to_vec().map_err(|e| e.to_string())?;
    if logits.shape()[2] != expected.vocab {
        return Err(format!(
            "the model's vocabulary is {}, the expected logits' {}",
            logits.shape()[2],
            expected.vocab
        ));
    }
    let top = expected.logits.iter().fold(0.0f64, |m, &x| m.max((x as f64).abs()));
    let diff = got.iter().zip(&expected.logits).fold(0.0f64, |m, (&a, &b)| m.max((a as f64 - b as f64).abs()));
    let steps = expected.greedy[0].len();
    let run = |cache: bool| {
        let opts = Options { max_new: steps, sampling: Sampling::GREEDY, cache, keep_logits: false };
        generate(model, &expected.input_ids, &opts, &mut |_| {})
    };
    let (cached, uncached) = (run(true)?, run(false)?);
    let forced: Vec<Vec<i32>> = (0..b).map(|s| uncached.tokens(s)).collect();
    let cache_rel = cache_against_whole(model, &expected.input_ids, &forced)?;
    let matching =
        |g: &super::generate::Generation| (0..b).map(|s| common(&g.tokens(s), &expected.greedy[s])).min().unwrap_or(0);
    Ok(Report {
        logits_rel: diff / top.max(f64::MIN_POSITIVE),
        logits_abs: diff,
        cached_match: matching(&cached),
        uncached_match: matching(&uncached),
        cache_agrees: (0..b).all(|s| cached.tokens(s) == uncached.tokens(s)),
        cache_rel,
        steps,
    })
}

/// The KV cache against no cache, teacher-forced: prompts then `tokens` fed one step at a time through the cache,
/// each step's logits beside the same position's of one forward over the whole sequence. `max |a - b| / max |b|`.
fn cache_against_whole(model: &dyn CausalLm, prompts: &[Vec<i32>], tokens: &[Vec<i32>]) -> Result<f64, Error> {
    let dev = model.device();
    let (b, t, steps) = (prompts.len(), prompts[0].len(), tokens[0].len());
    let len = t + steps;
    let all: Vec<i32> = prompts.iter().zip(tokens).flat_map(|(p, c)| p.iter().chain(c).copied()).collect();
    let whole = lazor::no_grad(|| model.forward(&Tensor::from_vec_on(all, [b, len], dev), 0, None, false));
    let vocab = whole.shape()[2];
    let whole = whole.to_dtype(DType::F32).try_to_vec().map_err(|e| e.to_string())?;
    let caches = model.caches(b, len);
    let (mut diff, mut top) = (0.0f64, 0.0f64);
    for n in 0..steps {
        // Step 0 is the prompt; step n feeds the continuation's token n - 1 at position t + n - 1.
        let (ids, start) = match n {
            0 => (Tensor::from_vec_on(prompts.concat(), [b, t], dev), 0),
            _ => (Tensor::from_vec_on(tokens.iter().map(|c| c[n - 1]).collect::<Vec<i32>>(), [b, 1], dev), t + n - 1),
        };
        let step = lazor::no_grad(|| model.forward(&ids, start, Some(&caches), true));
        let got = step.to_dtype(DType::F32).try_to_vec().map_err(|e| e.to_string())?;
        for s in 0..b {
            let at = (s * len + t - 1 + n) * vocab;
            for (&g, &w) in got[s * vocab..(s + 1) * vocab].iter().zip(&whole[at..at + vocab]) {
                diff = diff.max((g as f64 - w as f64).abs());
                top = top.max((w as f64).abs());
            }
        }
    }
    Ok(diff / top.max(f64::MIN_POSITIVE))
}
