//! Timing and reporting shared by every section: settings, medians of timed runs, and number formats.

use crate::common::uniform;
use lazor::{Device, Tensor};
use std::time::{Duration, Instant};

pub const WARMUP: usize = 3;
/// Warm-up also lasts at least this long (`LAZOR_BENCH_WARMUP_MS` overrides it), so the GPU is busy and clocked up
/// before timing starts. On the H200 (Vulkan) the driver drops the SM clock from 1980 to 345 MHz within about two
/// seconds of light load, such as a host uploading a case's inputs, and brings it back only after about a second of
/// steady work; at 345 MHz chain3 at 2^26 and 2^27 runs at 1700-1850 GB/s instead of 4100-4200 (issue 24's
/// slowdown, read from `nvidia-smi` beside each run). 200 ms of warm-up was not enough.
pub fn warmup_min() -> Duration {
    Duration::from_millis(env_num("LAZOR_BENCH_WARMUP_MS").unwrap_or(1500))
}
pub const MIN_RUNS: usize = 5;

pub struct Config {
    pub runs: usize,
    pub budget: Duration,
    pub sizes: Vec<usize>,
    /// Realizes, copies or dispatches per wait in the batched columns.
    pub batch: u32,
}

impl Config {
    /// Runs and budget from `LAZOR_BENCH_RUNS` and `LAZOR_BENCH_BUDGET_MS`.
    pub fn from_env(sizes: Vec<usize>, batch: u32) -> Config {
        Config {
            runs: env_num("LAZOR_BENCH_RUNS").unwrap_or(20).max(1) as usize,
            budget: Duration::from_millis(env_num("LAZOR_BENCH_BUDGET_MS").unwrap_or(3000)),
            sizes,
            batch,
        }
    }

    /// How [`measure`] times a cell, as the sections' headers state it.
    pub fn method(&self) -> String {
        format!(
            "median of up to {} runs after at least {WARMUP} warm-up runs and {} ms (a cell stops after {} ms once it \
             has {MIN_RUNS})",
            self.runs,
            warmup_min().as_millis(),
            self.budget.as_millis()
        )
    }
}

pub fn env_num(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Powers of two from a comma-separated environment variable (entries that do not parse are left out), or
/// `default` where it is not set.
pub fn env_log2s(name: &str, default: &[u32]) -> Vec<u32> {
    match std::env::var(name) {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) => default.to_vec(),
    }
}

/// Deterministic inputs in [-1, 1).
pub fn inputs(n: usize, seed: u64) -> Vec<f32> {
    uniform(n, seed).into_iter().map(|x| x * 2.0 - 1.0).collect()
}

/// The three inputs of the elementwise cases, `n` elements each (seeds 1, 2, 3) on `dev`, realized.
pub fn abc(dev: &Device, n: usize) -> [Tensor; 3] {
    let t = [1, 2, 3].map(|s| Tensor::from_vec_on(inputs(n, s), [n], dev));
    lazor::realize(&t.iter().collect::<Vec<_>>()).expect("upload inputs");
    t
}

/// Median of timed runs, after warm-up (the first run compiles pipelines and allocates buffers).
#[derive(Clone, Copy)]
pub struct Timing {
    pub median: Duration,
    pub runs: usize,
}

impl Timing {
    pub fn per(self, k: u32) -> Timing {
        Timing { median: self.median / k, runs: self.runs }
    }
}

/// A single (1 per wait) and batched (`batch` per wait, time per unit) measurement.
#[derive(Clone, Copy)]
pub struct Pair {
    pub one: Timing,
    pub many: Timing,
}

pub fn measure(cfg: &Config, mut f: impl FnMut()) -> Timing {
    measure_parts::<1>(cfg, || {
        let t = Instant::now();
        f();
        [t.elapsed()]
    })[0]
}

/// As [`measure`], for a closure that times `K` parts of its own work and returns them: medians per part.
pub fn measure_parts<const K: usize>(cfg: &Config, mut f: impl FnMut() -> [Duration; K]) -> [Timing; K] {
    let warm = Instant::now();
    let warmup_min = warmup_min();
    let mut n = 0;
    while n < WARMUP || warm.elapsed() < warmup_min {
        f();
        n += 1;
    }
    let started = Instant::now();
    let mut times: Vec<[Duration; K]> = Vec::with_capacity(cfg.runs);
    while times.len() < cfg.runs && (times.len() < MIN_RUNS || started.elapsed() < cfg.budget) {
        times.push(f());
    }
    std::array::from_fn(|k| {
        let mut v: Vec<Duration> = times.iter().map(|t| t[k]).collect();
        v.sort();
        Timing { median: v[v.len() / 2], runs: v.len() }
    })
}

pub fn gbs(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

pub fn ms(t: Duration) -> String {
    format!("{:.3}", t.as_secs_f64() * 1e3)
}

pub fn size_name(n: usize) -> String {
    format!("2^{}", n.trailing_zeros())
}
