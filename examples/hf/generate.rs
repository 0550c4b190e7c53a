//! Generating from a causal language model: the prompt in one realize (prefill), then one realize per token,
//! writing each layer's keys and values into its `KvCache` in place, the next token's realize submitted before this
//! one's token is read; greedy or sampled (temperature and top-k); or, for parity checks, without a cache (the
//! whole sequence again every token).

use lazor::nn::KvCache;
use lazor::{DType, Device, Stats, Tensor};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// What generation needs to know of a model's shape.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub layers: usize,
    /// Heads of keys and values (fewer than the query heads under grouped-query attention).
    pub kv_heads: usize,
    pub head_dim: usize,
    /// The most positions the model takes.
    pub positions: usize,
    /// Token ids the model knows: `0..vocab`.
    pub vocab: usize,
}

/// A decoder-only model as generation drives it.
pub trait CausalLm {
    /// Logits `[batch, t, vocab]` of the token ids `ids` (`I32 [batch, t]`) at positions `start..start + t`: with
    /// `caches` (one per layer), the new keys and values are written there and attention reads the cache; without,
    /// `ids` is the whole sequence (`start` 0) under causal attention. `last_only` keeps the last position's
    /// logits alone (`[batch, 1, vocab]`), which is all generation needs.
    fn forward(&self, ids: &Tensor, start: usize, caches: Option<&[KvCache]>, last_only: bool) -> Tensor;
    fn dims(&self) -> Dims;
    /// The type of the parameters, activations and caches.
    fn dtype(&self) -> DType;
    fn device(&self) -> &Device;

    /// An empty cache per layer for `batch` sequences of up to `max_len` positions, in the model's dtype.
    fn caches(&self, batch: usize, max_len: usize) -> Vec<KvCache> {
        let d = self.dims();
        (0..d.layers)
            .map(|_| KvCache::new_on(batch, d.kv_heads, max_len, d.head_dim, self.dtype(), self.device()))
            .collect()
    }
}

/// How the next token is chosen: the most likely (`temperature` 0), or drawn from the `top_k` most likely (0: all)
/// at `temperature`, from a generator seeded with `seed`.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    pub temperature: f32,
    pub top_k: usize,
    pub seed: u64,
}

impl Sampling {
    pub const GREEDY: Sampling = Sampling { temperature: 0.0, top_k: 0, seed: 0 };

    fn greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == 1
    }
}

/// What one generation is asked to do.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub max_new: usize,
    pub sampling: Sampling,
    /// Decode with a KV cache (otherwise the whole sequence every token).
    pub cache: bool,
    /// Keep every step's last-position logits (`[batch, vocab]`, as f32) in [`Step::logits`].
    pub keep_logits: bool,
}

/// One realize of a generation: the prompt's (step 0) or one new token's.
#[derive(Clone, Debug)]
pub struct Step {
    /// The token chosen for each sequence.
    pub tokens: Vec<i32>,
    /// The last position's logits, `[batch, vocab]` row-major, where kept.
    pub logits: Option<Vec<f32>>,
    /// Wall time from the previous step's tokens (or the start) to this step's: read-back included, and under
    /// greedy decoding with the cache the building of the next step, which overlaps this one's GPU work.
    pub time: Duration,
    /// The host's own work for the step: building its graph, and the realize up to its submit (planning, or
    /// finding the plan cached, and encoding the kernels).
    pub build: Duration,
    pub submit: Duration,
    /// What the device did during the step (the counters' differences).
    pub stats: Stats,
    /// Bytes of buffers live after the step.
    pub live_bytes: u64,
}

/// The steps of one generation: the prefill, then one per new token after the first.
pub struct Generation {
    pub steps: Vec<Step>,
}

impl Generation {
    /// The new tokens of sequence `b`.
    pub fn tokens(&self, b: usize) -> Vec<i32> {
        self.steps.iter().map(|s| s.tokens[b]).collect()
    }

    /// Tokens per second over the decoding steps after the first (which may compile kernels), counting every
    /// sequence's token.
    pub fn decode_rate(&self) -> Option<f64> {
        let decode = self.steps.get(2..).filter(|s| !s.is_empty())?;
        let time: f64 = decode.iter().map(|s| s.time.as_secs_f64()).sum();
        Some((decode.len() * self.steps[0].tokens.len()) as f64 / time)
    }
}

/// A small deterministic generator (SplitMix64) for sampling.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A token drawn from `logits` (one row) at `temperature` among the `top_k` largest.
fn sample(logits: &[f32], s: &Sampling, rng: &mut Rng) -> i32 {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    let k = if s.top_k == 0 { order.len() } else { s.top_k.min(order.len()) };
    // The k largest first (in linear time), then in order.
    let larger = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]);
    if k < order.len() {
        order.select_nth_unstable_by(k, larger);
    }
    order[..k].sort_by(larger);
    let top = logits[order[0]] as f64;
    let weights: Vec<f64> =
        order[..k].iter().map(|&i| ((logits[i] as f64 - top) / s.temperature as f64).exp()).collect();
    let mut at = rng.next_f64() * weights.iter().sum::<f64>();
    for (w, &i) in weights.iter().zip(&order) {
        at -= w;
        if at < 0.0 {
            return i as i32;
        }
    }
    order[k - 1] as i32
}

/// An error naming the first token id of `prompts` outside the model's vocabulary.
pub fn check_ids(model: &dyn CausalLm, prompts: &[Vec<i32>]) -> Result<(), String> {
    match prompts.iter().flatten().find(|&&id| id < 0 || id as usize >= model.dims().vocab) {
        Some(bad) => Err(format!("token id {bad} is outside the model's vocabulary of {}", model.dims().vocab)),
        None => Ok(()),
    }
}

/// A read whose realize is submitted at once and whose values are waited for later: the first poll of lazor's
/// async read submits the realize, and the host blocks on the rest only when it needs the values.
enum Pending {
    Done(Values),
    Waiting(Pin<Box<dyn Future<Output = Values> + Send>>),
}

type Values = lazor::Result<Vec<Vec<f32>>>;

impl Pending {
    fn submit(tensors: &[&Tensor]) -> Pending {
        let mut read = Box::pin(lazor::to_vecs_async(tensors));
        match read.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(values) => Pending::Done(values),
            Poll::Pending => Pending::Waiting(read),
        }
    }

    fn wait(self) -> Values {
        match self {
            Pending::Done(values) => values,
            Pending::Waiting(read) => pollster::block_on(read),
        }
    }
}

/// A greedy step submitted, its token not yet read: the device's counters around its realize, and the tensors it
/// reads, held until it is delivered so that what is live does not depend on whether the read had finished by its
/// first poll (which drops the read's own handles).
struct InFlight {
    read: Pending,
    _read: Vec<Tensor>,
    before: Stats,
    after: Stats,
    host: (Duration, Duration),
}

/// What generation has produced so far.
struct Out {
    sequences: Vec<Vec<i32>>,
    steps: Vec<Step>,
    /// When the last step's tokens arrived (or generation began): a step's time runs from there to its own.
    last: Instant,
}

impl Out {
    /// Records a step's tokens as they arrive, with the device's counters around its realize, and hands the step
    /// to `on_step`.
    fn deliver(
        &mut self,
        (tokens, logits): (Vec<i32>, Option<Vec<f32>>),
        (before, after): (Stats, Stats),
        (build, submit): (Duration, Duration),
        on_step: &mut dyn FnMut(&Step),
    ) {
        for (seq, &tok) in self.sequences.iter_mut().zip(&tokens) {
            seq.push(tok);
        }
        let now = Instant::now();
        let time = now - self.last;
        self.last = now;
        let (stats, live_bytes) = (after.since(&before), after.live_buffer_bytes);
        self.steps.push(Step { tokens, logits, time, build, submit, stats, live_bytes });
        on_step(self.steps.last().expect("a step"));
    }

    /// Waits for a greedy step's read and records it.
    fn greedy(&mut self, step: InFlight, keep_logits: bool, on_step: &mut dyn FnMut(&Step)) -> Result<(), String> {
        let mut values = step.read.wait().map_err(|e| e.to_string())?;
        let logits = keep_logits.then(|| values.pop().expect("logits read"));
        let tokens = values[0].iter().map(|&x| x as i32).collect();
        self.deliver((tokens, logits), (step.before, step.after), step.host, on_step);
        Ok(())
    }
}

/// Generates `opts.max_new` tokens after each prompt of `prompts` (one sequence each, all of one length), calling
/// `on_step` with each step's tokens as they come.
pub fn generate(
    model: &dyn CausalLm,
    prompts: &[Vec<i32>],
    opts: &Options,
    on_step: &mut dyn FnMut(&Step),
) -> Result<Generation, String> {
    let (b, t0) = (prompts.len(), prompts.first().map_or(0, Vec::len));
    if b == 0 || t0 == 0 || prompts.iter().any(|p| p.len() != t0) {
        return Err("the prompts must be non-empty and of one length".into());
    }
    check_ids(model, prompts)?;
    // The positions fed: the prompt, then every new token but the last (which is chosen, never fed).
    let max_len = t0 + opts.max_new.max(1) - 1;
    if max_len > model.dims().positions {
        return Err(format!(
            "{t0} prompt tokens and {} new need {max_len} positions, past the model's {}",
            opts.max_new,
            model.dims().positions
        ));
    }
    let dev = model.device().clone();
    let caches = if opts.cache { model.caches(b, max_len) } else { Vec::new() };
    let mut rng = Rng(opts.sampling.seed);
    let mut out = Out { sequences: prompts.to_vec(), steps: Vec::with_capacity(opts.max_new), last: Instant::now() };
    // Greedy decoding with the cache feeds each token to the next step on the device: step n + 1 is built and
    // submitted before step n's token is read, so building the graph and encoding its kernels hide behind the
    // GPU's work on step n, and the GPU never waits for the host between tokens. (The prompt's step is read at
    // once: its time is the prefill's.)
    let ahead = opts.cache && opts.sampling.greedy();
    let mut in_flight: Option<InFlight> = None;
    // The tokens to feed next: the prompt, then the last token chosen (on the device where greedy picked it).
    let mut ids = Tensor::from_vec_on(prompts.concat(), [b, t0], &dev);
    lazor::no_grad(|| -> Result<(), String> {
        for n in 0..opts.max_new {
            let before = dev.stats();
            let started = Instant::now();
            let logits = match opts.cache {
                true => model.forward(&ids, if n == 0 { 0 } else { t0 + n - 1 }, Some(&caches), true),
                false => {
                    let len = out.sequences[0].len();
                    model.forward(&Tensor::from_vec_on(out.sequences.concat(), [b, len], &dev), 0, None, true)
                }
            };
            let logits = logits.reshape([b, logits.shape()[2]]);
            if opts.sampling.greedy() {
                // Read as f32 (exact for ids below 2^24) in the one realize that reads the logits too; the next
                // step casts it back where it reads it, on the device.
                let next = logits.argmax(-1).to_dtype(DType::F32);
                let wide = logits.to_dtype(DType::F32);
                let mut read: Vec<&Tensor> = vec![&next];
                if opts.keep_logits {
                    read.push(&wide);
                }
                let built = Instant::now();
                let pending = Pending::submit(&read);
                let host = (built - started, built.elapsed());
                let step = InFlight {
                    read: pending,
                    _read: read.iter().map(|&t| t.clone()).collect(),
                    before,
                    after: dev.stats(),
                    host,
                };
                ids = next.to_dtype(DType::I32).reshape([b, 1]);
                if let Some(previous) = in_flight.take() {
                    out.greedy(previous, opts.keep_logits, on_step)?;
                }
                match ahead && n > 0 {
                    true => in_flight = Some(step),
                    false => out.greedy(step, opts.keep_logits, on_step)?,
                }
            } else {
                let built = Instant::now();
                let values = logits.to_dtype(DType::F32).try_to_vec().map_err(|e| e.to_string())?;
                let host = (built - started, Duration::ZERO);
                let vocab = values.len() / b;
                let tokens: Vec<i32> = values.chunks(vocab).map(|row| sample(row, &opts.sampling, &mut rng)).collect();
                ids = Tensor::from_vec_on(tokens.clone(), [b, 1], &dev);
                out.deliver((tokens, opts.keep_logits.then_some(values)), (before, dev.stats()), host, on_step);
            }
        }
        if let Some(last) = in_flight.take() {
            out.greedy(last, opts.keep_logits, on_step)?;
        }
        Ok(())
    })?;
    let steps = out.steps;
    Ok(Generation { steps })
}
