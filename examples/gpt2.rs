//! GPT-2 from a Hugging Face checkpoint directory (`config.json` and `model.safetensors`, as `transformers`'
//! `save_pretrained` writes them), generating from a prompt of token ids with a KV cache: the prompt in one
//! realize, then one realize per token, each writing every layer's keys and values in place.
//!
//! ```text
//! cargo run --release --example gpt2 -- DIR --prompt 15496,11,616,1438,318 --max-new 32
//! cargo run --release --example gpt2 -- DIR --temperature 0.8 --top-k 40 --seed 1 --batch 4 --dtype f16
//! cargo run --release --example gpt2 -- DIR --check DIR/expected_f32.safetensors   # against transformers
//! ```
//!
//! Flags: `--prompt IDS` (comma-separated token ids), `--max-new N` (32), `--temperature X` (0: greedy), `--top-k K`
//! (0: all), `--seed N`, `--dtype f32|f16|bf16` (cast on load; default: as the file holds it), `--batch N` (the
//! prompt decoded as N sequences at once), `--no-cache` (the whole sequence every token, for parity checks),
//! `--cpu` (the CPU backend), `--runs N` (generate N times and time the last, its kernels and plans warm),
//! `--check FILE` (compare with `benches/hf_gpt2.py`'s output: logits of a batch, greedy tokens with and without
//! the cache, and the cache against the whole sequence on the same tokens; exits 1 on a mismatch). Prompts are
//! token ids: text needs a tokenizer (`tokenizer.json` through the `tokenizers` crate), which is left for later.
//! It prints the tokens as they come,
//! the prefill's time, tokens per second over the decoding, kernels per token and the memory held.

// Shared with the Llama model and the tests, which read what this example does not.
#[path = "hf/checkpoint.rs"]
#[allow(dead_code)]
mod checkpoint;
#[path = "hf/generate.rs"]
#[allow(dead_code)]
mod generate;
#[path = "hf/gpt2.rs"]
mod gpt2;
#[path = "hf/parity.rs"]
mod parity;

use generate::{Options, Sampling, Step};
use lazor::{DType, Device};
use std::io::Write;
use std::path::PathBuf;

struct Args {
    dir: PathBuf,
    prompt: Vec<i32>,
    max_new: usize,
    sampling: Sampling,
    dtype: Option<DType>,
    batch: usize,
    cache: bool,
    cpu: bool,
    check: Option<PathBuf>,
    runs: usize,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut out = Args {
        dir: PathBuf::new(),
        prompt: vec![15496, 11, 616, 1438, 318],
        max_new: 32,
        sampling: Sampling::GREEDY,
        dtype: None,
        batch: 1,
        cache: true,
        cpu: false,
        check: None,
        runs: 1,
    };
    let mut dir = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().ok_or_else(|| format!("{a} needs a value"));
        let number = |v: String| v.parse::<f64>().map_err(|_| format!("{a} {v}: not a number"));
        match a.as_str() {
            "--prompt" => {
                let v = value()?;
                out.prompt = v
                    .split(',')
                    .map(|s| s.trim().parse::<i32>().map_err(|_| format!("--prompt: `{s}` is not a token id")))
                    .collect::<Result<_, _>>()?;
            }
            "--max-new" => out.max_new = number(value()?)? as usize,
            "--temperature" => out.sampling.temperature = number(value()?)? as f32,
            "--top-k" => out.sampling.top_k = number(value()?)? as usize,
            "--seed" => out.sampling.seed = number(value()?)? as u64,
            "--dtype" => out.dtype = Some(checkpoint::parse_dtype(&value()?)?),
            "--batch" => out.batch = (number(value()?)? as usize).max(1),
            "--no-cache" => out.cache = false,
            "--runs" => out.runs = (number(value()?)? as usize).max(1),
            "--cpu" => out.cpu = true,
            "--check" => out.check = Some(PathBuf::from(value()?)),
            flag if flag.starts_with("--") => return Err(format!("unknown flag {flag}")),
            path => dir = Some(PathBuf::from(path)),
        }
    }
    out.dir = dir.ok_or("usage: gpt2 DIR [--prompt IDS] [--max-new N] [--temperature X] [--top-k K] [--seed N] [--dtype f32|f16|bf16] [--batch N] [--no-cache] [--cpu] [--runs N] [--check FILE]")?;
    if out.prompt.is_empty() {
        return Err("--prompt: no token ids".into());
    }
    Ok(out)
}

/// `bytes` in KiB, MiB or GiB.
fn size(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        0..0x10_0000 => format!("{:.1} KiB", b / 1024.0),
        0x10_0000..0x4000_0000 => format!("{:.1} MiB", b / (1u64 << 20) as f64),
        _ => format!("{:.2} GiB", b / (1u64 << 30) as f64),
    }
}

fn run(args: &Args) -> Result<bool, String> {
    let dev = if args.cpu { Device::cpu() } else { Device::default() };
    let started = std::time::Instant::now();
    let model = gpt2::Gpt2::load(&args.dir, args.dtype, &dev)?;
    let weights = dev.stats().live_buffer_bytes;
    let c = model.config;
    eprintln!(
        "GPT-2: {} layers, {} heads, width {}, vocab {}, {} on {} ({} of weights, loaded in {:.2} s)",
        c.layers,
        c.heads,
        c.width,
        c.vocab,
        model.dtype,
        dev.name(),
        size(weights),
        started.elapsed().as_secs_f64()
    );
    if let Some(file) = &args.check {
        let expected = parity::Expected::read(file)?;
        let report = parity::check(&model, &expected)?;
        let pass = report.passes(model.dtype);
        println!(
            "logits: max |diff| {:.3e}, relative {:.3e} (tolerance {:.0e}); the cache against the whole sequence, on the same tokens: relative {:.3e}; greedy tokens matching transformers' for {} / {} steps with the cache, {} without; with and without the cache {}: {}",
            report.logits_abs,
            report.logits_rel,
            parity::tolerance(model.dtype),
            report.cache_rel,
            report.cached_match,
            report.steps,
            report.uncached_match,
            if report.cache_agrees { "the same" } else { "DIFFERENT" },
            if pass { "PASS" } else { "FAIL" }
        );
        return Ok(pass);
    }
    let prompts = vec![args.prompt.clone(); args.batch];
    let opts = Options { max_new: args.max_new, sampling: args.sampling, cache: args.cache, keep_logits: false };
    let mut out = std::io::stdout();
    let mut print = |s: &Step| {
        let text: Vec<String> = s.tokens.iter().map(i32::to_string).collect();
        let _ =
            write!(out, "{}", if args.batch == 1 { format!("{} ", text[0]) } else { format!("[{}] ", text.join(" ")) });
        let _ = out.flush();
    };
    let mut g = generate::generate(&model, &prompts, &opts, &mut print)?;
    println!();
    // Later runs reuse the first's compiled kernels and plans: their times are the warm ones.
    for _ in 1..args.runs {
        g = generate::generate(&model, &prompts, &opts, &mut |_| {})?;
    }
    let prefill = &g.steps[0];
    // The prefill's products: per token and layer the four projections, and attention's two products over the
    // positions up to the token's own (causal: what the triangular products compute); then the head at the last
    // position.
    let (t, b) = (args.prompt.len() as f64, args.batch as f64);
    let (d, inner) = (c.width as f64, c.inner as f64);
    let layers = c.layers as f64;
    let flops = 2.0 * layers * b * t * (4.0 * d * d + 2.0 * d * inner)
        + 2.0 * layers * b * d * t * (t + 1.0)
        + 2.0 * b * c.vocab as f64 * d;
    eprintln!(
        "prefill: {} tokens x {} in {:.2} ms, {} kernels, {:.1} TFLOP/s in its products",
        args.prompt.len(),
        args.batch,
        prefill.time.as_secs_f64() * 1e3,
        prefill.stats.dispatches,
        flops / prefill.time.as_secs_f64() / 1e12
    );
    if let Some(rate) = g.decode_rate() {
        let last = g.steps.last().expect("a step");
        eprintln!(
            "decode: {rate:.1} tokens/s (batch {}; first token {:.2} ms), {} kernels and {} pipelines compiled per token, {}",
            args.batch,
            g.steps.get(1).map_or(0.0, |s| s.time.as_secs_f64() * 1e3),
            last.stats.dispatches,
            last.stats.pipelines_compiled,
            if args.cache { "with the KV cache" } else { "without a cache" }
        );
        let decode = &g.steps[2.min(g.steps.len())..];
        let mean = |f: &dyn Fn(&Step) -> std::time::Duration| {
            decode.iter().map(|s| f(s).as_secs_f64()).sum::<f64>() * 1e3 / decode.len().max(1) as f64
        };
        eprintln!(
            "host per token: {:.3} ms building the graph, {:.3} ms realizing it up to its submit",
            mean(&|s| s.build),
            mean(&|s| s.submit)
        );
    }
    // The caches: keys and values of every layer, [batch, heads, prompt + new - 1, head_dim] each.
    let positions = (args.prompt.len() + args.max_new.max(1) - 1) as u64;
    let cache = if args.cache {
        2 * (c.layers * args.batch * c.width) as u64 * positions * model.dtype.size_in_bytes() as u64
    } else {
        0
    };
    let peak = dev.stats().peak_buffer_bytes;
    eprintln!(
        "memory: peak {} = weights {} + KV cache {} + activations {}",
        size(peak),
        size(weights),
        size(cache),
        size(peak.saturating_sub(weights + cache))
    );
    Ok(true)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = parse(&args).and_then(|a| run(&a));
    match outcome {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
