//! Elementwise throughput of lazor, fused and unfused, next to the device's own copy rates on the same adapter;
//! views and reductions; the CPU backend next to a hand-written rayon loop, lavapipe and ndarray.
//! Prints markdown tables; `docs/BENCHMARKS.md` records what it printed. This file parses the arguments and runs
//! the sections; each section is a file under `bench/` (`elementwise.rs`, `views.rs`, `reductions.rs`, `cpu.rs` with `cpu_ops.rs` and `cpu_views.rs`,
//! `matmul.rs`, `dtypes.rs`, `life.rs`, `random.rs`, `training.rs`, `steady.rs`, `shapes.rs`, `clock.rs`, `grouping.rs`), over the shared `timing.rs` (settings, medians, number formats),
//! `check.rs` (checks against the host, dispatch counts) and `raw.rs` (raw wgpu copies and hand-written kernels).
//!
//! ```text
//! cargo bench --bench report                 # every section
//! cargo bench --bench report -- views        # only the views section (or `elementwise`)
//! cargo bench --bench report -- reductions   # only the reductions section
//! cargo bench --bench report -- cpu          # only the CPU-backend section
//! cargo bench --bench report -- cpu-views    # only the CPU section's views table (bench/cpu_views.rs)
//! cargo bench --bench report -- matmul       # only the matmul section
//! cargo bench --bench report -- dtypes       # only the element-type section
//! cargo bench --bench report -- products     # only its product table, every dtype and path, n = 1024 and 4096
//! cargo bench --bench report -- random       # only the random-numbers section (bench/random.rs)
//! cargo bench --bench report -- life         # only the process-life section (bench/life.rs)
//! cargo bench --bench report -- shapes       # a training step's products one by one (bench/shapes.rs)
//! cargo bench --bench report -- clock        # chain3 beside the GPU's SM clock (bench/clock.rs)
//! cargo bench --bench report -- grouping     # independent kernels alone and grouped (bench/grouping.rs)
//! ```
//!
//! The matmul section (in `bench/matmul.rs`) times the cases of `torch_reference.py matmul`: square products,
//! `relu(x.matmul(w) + bias)`, a transposed operand, matrix-vector products and a batch, on `Device::default()`.
//!
//! The views section times `a.t() + b` against `a + b` (square `[n, n]`, n = 4096 and 8192) and
//! `Tensor::cat(&[&a, &b], 0) * 2.0` against `a2 * 2.0` (2^24 and 2^26 elements), view and plain alternating run by
//! run on one device (`Device::default()`), batched and 1/sync; sizes over `max_tensor_bytes` are skipped with a
//! printed note.
//!
//! The reductions section times `x.sum_all()`, `(a * &b).sum_all()` (dot), `x.sum(-1)`, `x.sum(0)`,
//! `x.softmax(-1)` and a layer norm, fused and unfused, at the sizes of `../shared/bench/torch_reference.py`
//! (`reduce`, `softmax`) on one device, with the dispatches of one realize; on a CPU adapter at scaled-down sizes
//! (2^22 elements, `[2048, 1024]`).
//!
//! The CPU section runs chain3, chain16 and unary at 2^20 and 2^24 elements on `Device::cpu()`, fused, against a
//! hand-written rayon loop of the same math (timed alternately with lazor, run by run), the same graph on
//! `Device::new()` (lavapipe where there is no GPU; sizes it cannot bind skipped with a note), the expression in
//! ndarray, and lazor unfused; then `x.sum(-1)` and `x.softmax(-1)` of `[4096, 4096]` against ndarray; then
//! `a.t() + &b` and `cat` of `[n, n]` inputs along axis 0 and 1 against `a * 2`, per element (n = 1024 and 4096).
//!
//! Knobs (environment):
//! - `LAZOR_BENCH_RUNS` (default 20): timed runs per cell, after warm-up; tables show the median.
//! - `LAZOR_BENCH_BUDGET_MS` (default 3000): a cell stops early once it has spent this long and has 5 runs.
//! - `LAZOR_BENCH_BIG=1`: on a CPU adapter (lavapipe) also run 2^24 and 2^26 elements, skipped by default.
//! - `LAZOR_BENCH_MAX_LOG2`: largest size to run, as a power of two (elementwise section).
//! - `LAZOR_BENCH_VIEW_LOG2` (default `24,26`): output elements of the view cases, comma-separated powers of two
//!   (transpose_add runs the even ones, as squares).
//! - `LAZOR_BENCH_REDUCE_SIZES` (`small` or `full`): the reductions' sizes; default `small` on a CPU adapter.
//! - `LAZOR_BENCH_CPU_LOG2` (default `20,24`): elements of the CPU section's elementwise cases, powers of two.
//! - `LAZOR_BENCH_CPU_VIEW_SIDE`: the one side `n` of the CPU views table (default: 1024 and 4096).
//! - `LAZOR_BACKEND`, `LAZOR_ADAPTER`: as for lazor itself.
//!
//! Every elementwise case reads three f32 inputs and writes one f32 output, so the fused ideal moves 16 bytes per
//! element; GB/s is those bytes (10^9 per second) over the median wall time of building the expression, `realize()`
//! and `synchronize()`. Copy rates count bytes read plus bytes written (8 per element). Each elementwise size runs on
//! a fresh lazor `Device`, so buffers pooled at one size do not crowd the pool at the next.

#[path = "report/check.rs"]
mod check;
#[path = "report/clock.rs"]
mod clock;
#[path = "common/mod.rs"]
mod common;
#[path = "report/cpu.rs"]
mod cpu;
#[path = "report/cpu_ops.rs"]
mod cpu_ops;
#[path = "report/cpu_views.rs"]
mod cpu_views;
#[path = "report/dtypes.rs"]
mod dtypes;
#[path = "report/elementwise.rs"]
mod elementwise;
#[path = "report/grouping.rs"]
mod grouping;
#[path = "report/life.rs"]
mod life;
#[path = "report/matmul.rs"]
mod matmul;
#[path = "report/random.rs"]
mod random;
#[path = "report/raw.rs"]
mod raw;
#[path = "report/reductions.rs"]
mod reductions;
#[path = "report/shapes.rs"]
mod shapes;
#[path = "report/steady.rs"]
mod steady;
#[path = "report/timing.rs"]
mod timing;
#[path = "report/training.rs"]
mod training;
#[path = "report/views.rs"]
mod views;

use lazor::Device;
use std::process::ExitCode;
use timing::Config;

/// The process-wide default device, as a user's program has, and whether it is a CPU (lazor's CPU backend or a
/// software adapter), where sections scale their sizes down.
fn default_device() -> (Device, bool) {
    let dev = Device::default();
    let small = dev.is_cpu() || dev.adapter_info().device_type == wgpu::DeviceType::Cpu;
    (dev, small)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    // One cell of the process-life section, run in a fresh process by that section.
    if args.first().is_some_and(|a| a == "life-compile") {
        life::compile_child();
        return ExitCode::SUCCESS;
    }
    if let [mode, cell] = &args[..] {
        if mode == "steady-cell" {
            steady::child(cell);
            return ExitCode::SUCCESS;
        }
    }
    if let [mode, case, n] = &args[..] {
        if mode == "life-cell" {
            life::child(case, n.parse().expect("a size"));
            return ExitCode::SUCCESS;
        }
    }
    const SECTIONS: [&str; 15] = [
        "elementwise",
        "views",
        "reductions",
        "cpu",
        "cpu-views",
        "matmul",
        "dtypes",
        "products",
        "life",
        "random",
        "training",
        "steady",
        "shapes",
        "clock",
        "grouping",
    ];
    if let Some(a) = args.iter().find(|a| !SECTIONS.contains(&a.as_str())) {
        eprintln!("bench: unknown section {a:?}; usage: bench [elementwise] [views] [reductions] [cpu] [cpu-views] [matmul] [dtypes] [products] [life] [random] [training] [steady] [shapes] [clock] [grouping] (default: all)");
        return ExitCode::FAILURE;
    }
    let wanted = |s: &str| args.is_empty() || args.iter().any(|a| a == s);
    if wanted("elementwise") && !elementwise::run() {
        return ExitCode::FAILURE;
    }
    if wanted("views") && !views::run() {
        return ExitCode::FAILURE;
    }
    if wanted("reductions") && !reductions::run() {
        return ExitCode::FAILURE;
    }
    if wanted("cpu") && !cpu::run() {
        return ExitCode::FAILURE;
    }
    // Only the CPU section's views table (`cpu` runs it too, last).
    if args.iter().any(|a| a == "cpu-views") && !cpu_views::run(&Device::cpu(), &Config::from_env(Vec::new(), 1)) {
        return ExitCode::FAILURE;
    }
    if wanted("matmul") {
        // The way a user runs: the process-wide default device, every case one after another.
        let (dev, small) = default_device();
        let cfg = Config::from_env(Vec::new(), if small { 2 } else { 8 });
        if !matmul::run(&dev, &cfg, small) {
            return ExitCode::FAILURE;
        }
    }
    if wanted("dtypes") {
        let (dev, small) = default_device();
        let cfg = Config::from_env(Vec::new(), if small { 2 } else { 8 });
        let (log2, mm): (&[u32], usize) = if small { (&[20], 256) } else { (&[24, 26], 4096) };
        if !dtypes::run(&dev, &cfg, log2, mm) {
            return ExitCode::FAILURE;
        }
    }
    // Only the element-type section's product table, at the sizes of `torch_reference.py matmul`.
    if args.iter().any(|a| a == "products") {
        let (dev, small) = default_device();
        let cfg = Config::from_env(Vec::new(), if small { 2 } else { 8 });
        let sizes: &[usize] = if small { &[256] } else { &[1024, 4096] };
        if !dtypes::products(&dev, &cfg, sizes) {
            return ExitCode::FAILURE;
        }
    }
    if wanted("random") {
        let (dev, small) = default_device();
        let cfg = Config::from_env(Vec::new(), if small { 2 } else { 8 });
        let log2: &[u32] = if small { &[20] } else { &[24, 26] };
        if !random::run(&dev, &cfg, log2) {
            return ExitCode::FAILURE;
        }
    }
    if wanted("training") {
        let (dev, small) = default_device();
        let cfg = Config::from_env(Vec::new(), if small { 2 } else { 8 });
        if !training::run(&dev, &cfg, small) {
            return ExitCode::FAILURE;
        }
    }
    if wanted("shapes") {
        let (dev, small) = default_device();
        let cfg = Config::from_env(Vec::new(), if small { 2 } else { 8 });
        if !shapes::run(&dev, &cfg, small) {
            return ExitCode::FAILURE;
        }
    }
    if wanted("clock") {
        let (dev, small) = default_device();
        if !clock::run(&dev, if small { 1 << 20 } else { 1 << 26 }) {
            return ExitCode::FAILURE;
        }
    }
    if wanted("grouping") {
        let (dev, small) = default_device();
        let cfg = Config::from_env(Vec::new(), if small { 2 } else { 8 });
        if !grouping::run(&dev, &cfg, small) {
            return ExitCode::FAILURE;
        }
    }
    if wanted("steady") {
        let (dev, _) = default_device();
        let cfg = Config::from_env(Vec::new(), 8);
        if !steady::run(&dev, &cfg) {
            return ExitCode::FAILURE;
        }
    }
    if wanted("life") {
        let (dev, small) = default_device();
        let cfg = Config::from_env(Vec::new(), 8);
        if !life::run(&dev, &cfg, small) {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
