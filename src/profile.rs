//! Counters and per-kernel profiles: what a device did (`Stats`), and which kernels a piece of code ran, how often,
//! for how long, moving how many bytes (`Profile`).

use crate::kernel::{Kernel, Kind};
use std::fmt;
use std::time::Duration;

/// One kernel run, as the orchestrator records it while a device profiles.
#[derive(Clone)]
pub(crate) struct Run {
    pub name: String,
    /// GPU time from timestamp queries, host time on the CPU backend; `None` where the adapter cannot time.
    pub time: Option<Duration>,
    pub bytes: u64,
    pub flops: u64,
}

impl Run {
    /// The run of `kernel`, whose bindings hold `bytes` bytes.
    pub fn of(kernel: &Kernel, bytes: u64, time: Option<Duration>) -> Run {
        let flops = match kernel.kind {
            Kind::Matmul(mm) => {
                let d = kernel.shape.dims();
                let (m, n) = (d[d.len() - 2], d[d.len() - 1]);
                let batch = kernel.shape.numel() / (m * n).max(1);
                2 * batch as u64 * mm.tri.products(m, kernel.params[mm.k_at] as usize, n)
            }
            _ => 0,
        };
        Run { name: kernel.name(), time, bytes, flops }
    }

    /// This run and `other`, a kernel of the same dispatch, as one: `a | b`, their bytes and flops added, and
    /// their times where both have one (a GPU times the dispatch once, the CPU backend each kernel).
    pub fn join(&mut self, other: Run) {
        self.name = format!("{} | {}", self.name, other.name);
        self.time = match (self.time, other.time) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.bytes += other.bytes;
        self.flops += other.flops;
    }
}

/// One kernel of a [`Profile`]: every dispatch of it the profiled code made, together.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelProfile {
    /// What it computes and over which shape, e.g. `matmul+add+relu [4096x4096]` (as `LAZOR_DEBUG` and
    /// [`crate::tensor::debug::dot`] name it).
    pub name: String,
    /// How many times it ran.
    pub dispatches: u64,
    /// Its time over all dispatches: GPU time from timestamp queries on wgpu, host time on the CPU backend;
    /// `None` where the adapter has no timestamp queries.
    pub time: Option<Duration>,
    /// Bytes its bindings hold (inputs read and outputs written), over all dispatches.
    pub bytes: u64,
    /// Floating-point operations of its matrix products (`2 m n k`), over all dispatches; 0 for other kernels.
    pub flops: u64,
}

impl KernelProfile {
    /// Bytes moved per second, in GB/s (1e9 bytes).
    pub fn gb_per_s(&self) -> Option<f64> {
        self.time.filter(|t| !t.is_zero()).map(|t| self.bytes as f64 / t.as_secs_f64() / 1e9)
    }

    /// Matrix-product rate in TFLOP/s, for kernels with products.
    pub fn tflop_per_s(&self) -> Option<f64> {
        let t = self.time.filter(|t| !t.is_zero() && self.flops > 0)?;
        Some(self.flops as f64 / t.as_secs_f64() / 1e12)
    }
}

/// The kernels some code ran on one device, slowest first: what [`Device::profile`] returns. `Display` prints a
/// table.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    kernels: Vec<KernelProfile>,
    device: String,
}

impl Profile {
    /// Builds a profile from runs, one entry per kernel name, slowest first.
    pub(crate) fn from_runs(runs: Vec<Run>, device: String) -> Profile {
        let mut kernels: Vec<KernelProfile> = Vec::new();
        for r in runs {
            match kernels.iter_mut().find(|k| k.name == r.name) {
                Some(k) => {
                    k.dispatches += 1;
                    k.time = k.time.zip(r.time).map(|(a, b)| a + b);
                    k.bytes += r.bytes;
                    k.flops += r.flops;
                }
                None => kernels.push(KernelProfile {
                    name: r.name,
                    dispatches: 1,
                    time: r.time,
                    bytes: r.bytes,
                    flops: r.flops,
                }),
            }
        }
        kernels.sort_by_key(|k| std::cmp::Reverse(k.time));
        Profile { kernels, device }
    }

    /// Every kernel, slowest first.
    pub fn kernels(&self) -> &[KernelProfile] {
        &self.kernels
    }

    /// Dispatches over all kernels.
    pub fn dispatches(&self) -> u64 {
        self.kernels.iter().map(|k| k.dispatches).sum()
    }

    /// Time over all kernels, where the device could time them.
    pub fn total_time(&self) -> Option<Duration> {
        self.kernels.iter().map(|k| k.time).sum()
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = |t: Option<Duration>| t.map_or("-".to_string(), |t| format!("{:.1}", t.as_secs_f64() * 1e6));
        writeln!(
            f,
            "lazor profile on {}: {} dispatches, {} us",
            self.device,
            self.dispatches(),
            us(self.total_time())
        )?;
        writeln!(f, "{:>10} {:>6} {:>10} {:>10}  kernel", "us", "share", "dispatches", "rate")?;
        let total = self.total_time().map_or(0.0, |t| t.as_secs_f64());
        for k in &self.kernels {
            let share = k
                .time
                .filter(|_| total > 0.0)
                .map_or("-".into(), |t| format!("{:.1}%", t.as_secs_f64() / total * 100.0));
            let rate = match (k.tflop_per_s(), k.gb_per_s()) {
                (Some(t), _) if t >= 1.0 => format!("{t:.1} TF/s"),
                (Some(t), _) => format!("{t:.3} TF/s"),
                (None, Some(g)) if g >= 10.0 => format!("{g:.0} GB/s"),
                (None, Some(g)) => format!("{g:.2} GB/s"),
                _ => "-".into(),
            };
            writeln!(f, "{:>10} {share:>6} {:>10} {rate:>10}  {}", us(k.time), k.dispatches, k.name)?;
        }
        Ok(())
    }
}

/// A dropped device prints what `LAZOR_PROFILE=1` collected on it.
pub(crate) fn print_on_drop(runs: Vec<Run>, device: String) {
    if !runs.is_empty() {
        eprint!("{}", Profile::from_runs(runs, device));
    }
}

/// What a [`Device`](crate::Device) has done since it was made. Read with [`Device::stats`](crate::Device::stats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Calls that realized something (`realize`, `to_vec` and friends).
    pub realizes: u64,
    /// `queue.submit` calls: one per realize that had GPU work, except that realizes made while the GPU is busy are
    /// batched into one (see [`Device::flush`](crate::Device::flush)).
    pub submits: u64,
    /// Compute dispatches: a kernel each, or several kernels side by side where none reads what another writes
    /// (the backends count alike: the CPU backend counts a dispatch where a GPU would run one).
    pub dispatches: u64,
    /// Kernels run: as many as `dispatches`, plus those that ran in one dispatch with another.
    pub kernels: u64,
    /// Realizes whose plan (fusion, kernels, memory plan) came from the plan cache: an earlier realize had the same
    /// structure (ops, shapes, types, views, requested outputs; constants' values may differ).
    pub plans_reused: u64,
    /// Pipelines compiled from new WGSL.
    pub pipelines_compiled: u64,
    /// Kernels whose pipeline came from the cache.
    pub pipeline_cache_hits: u64,
    /// Of those, the ones served with a reused plan's kernels, by the plan cache's name for them: a repeated
    /// realize takes all its pipelines at once, without a lookup per kernel. Always 0 on the CPU backend.
    pub pipeline_family_hits: u64,
    /// Bytes written from host to device.
    pub bytes_uploaded: u64,
    /// Bytes read back from device to host.
    pub bytes_downloaded: u64,
    /// Kernel parameter blocks written to the device: a realize whose kernels' parameters (sizes, strides,
    /// constants) equal a recent realize's reuses that block and writes none. Always 0 on the CPU backend.
    pub param_uploads: u64,
    /// Device buffers created (pool misses), read-back staging buffers included.
    pub buffers_allocated: u64,
    /// Bind groups created: a kernel binding the same buffers (and parameter block) as a recent one reuses its
    /// group, so a loop over fixed shapes creates none after its first steps. Always 0 on the CPU backend.
    pub bind_groups_created: u64,
    /// Bytes of storage buffers holding values now: realized tensors and a realize's intermediates, not the pool's
    /// free buffers or staging buffers.
    pub live_buffer_bytes: u64,
    /// The most `live_buffer_bytes` has ever been.
    pub peak_buffer_bytes: u64,
    /// Bytes of free buffers the device keeps for reuse (storage and read-back staging): at most twice its
    /// [`pool_budget`](crate::Device::pool_budget), once for each kind. [`Device::trim`](crate::Device::trim)
    /// gives them back.
    pub pool_bytes: u64,
}

impl Stats {
    /// What the device did since `before`, an earlier reading of its stats: each counter's growth; the memory
    /// figures (`live_buffer_bytes`, `peak_buffer_bytes`, `pool_bytes`) as they are now.
    ///
    /// # Examples
    /// ```no_run
    /// let dev = lazor::Device::default();
    /// let before = dev.stats();
    /// (lazor::Tensor::ones_on([4], &dev) * 2.0).realize()?;
    /// assert_eq!(dev.stats().since(&before).realizes, 1);
    /// # Ok::<(), lazor::Error>(())
    /// ```
    pub fn since(&self, before: &Stats) -> Stats {
        let grown = |now: u64, then: u64| now.saturating_sub(then);
        Stats {
            realizes: grown(self.realizes, before.realizes),
            submits: grown(self.submits, before.submits),
            dispatches: grown(self.dispatches, before.dispatches),
            kernels: grown(self.kernels, before.kernels),
            plans_reused: grown(self.plans_reused, before.plans_reused),
            pipelines_compiled: grown(self.pipelines_compiled, before.pipelines_compiled),
            pipeline_cache_hits: grown(self.pipeline_cache_hits, before.pipeline_cache_hits),
            pipeline_family_hits: grown(self.pipeline_family_hits, before.pipeline_family_hits),
            bytes_uploaded: grown(self.bytes_uploaded, before.bytes_uploaded),
            bytes_downloaded: grown(self.bytes_downloaded, before.bytes_downloaded),
            param_uploads: grown(self.param_uploads, before.param_uploads),
            buffers_allocated: grown(self.buffers_allocated, before.buffers_allocated),
            bind_groups_created: grown(self.bind_groups_created, before.bind_groups_created),
            ..*self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, us: u64, bytes: u64) -> Run {
        Run { name: name.into(), time: Some(Duration::from_micros(us)), bytes, flops: 0 }
    }

    #[test]
    fn runs_of_one_kernel_add_up_and_the_slowest_comes_first() {
        let p = Profile::from_runs(vec![run("a [4]", 5, 100), run("b [4]", 20, 8), run("a [4]", 5, 100)], "x".into());
        assert_eq!(p.kernels().len(), 2);
        assert_eq!(p.kernels()[0].name, "b [4]");
        assert_eq!(p.kernels()[1].dispatches, 2);
        assert_eq!(p.kernels()[1].bytes, 200);
        assert_eq!(p.total_time(), Some(Duration::from_micros(30)));
        assert_eq!(p.kernels()[1].gb_per_s().map(|g| (g * 1e3).round()), Some(20.0));
        let text = p.to_string();
        assert!(text.contains("3 dispatches, 30.0 us") && text.contains("66.7%"), "{text}");
    }
}
