//! The process-life section: every elementwise case at every size in one process on the default device, twice, in
//! one long sequence with a `to_vec` per cell, against the same cells each in a fresh process; read-back speeds;
//! per-realize latency at small sizes; the first realize of a new expression (pipeline compile); and the host time
//! to schedule large graphs.

use crate::common::Case;
use crate::timing::{abc, inputs, measure, measure_parts, ms, Config, Timing};
use lazor::{Device, Tensor};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Realizes per wait when timing a cell.
const BATCH: u32 = 8;

/// The elementwise sizes of the long sequence.
fn sizes(dev: &Device, small: bool) -> Vec<usize> {
    let top = if small { 22 } else { 26 };
    (10..=top).step_by(2).map(|l| 1usize << l).filter(|&n| 4 * n as u64 <= dev.max_tensor_bytes()).collect()
}

/// One cell: `BATCH` realizes of `case` at `n` then a wait, median per realize; then one `to_vec` (as a user's
/// program reads results), whose time is returned too.
fn cell(dev: &Device, cfg: &Config, case: Case, n: usize) -> (Timing, Duration) {
    let [a, b, c] = abc(dev, n);
    let t = measure(cfg, || {
        for _ in 0..BATCH {
            case.build(&a, &b, &c).realize().expect("realize");
        }
        dev.synchronize().expect("sync");
    })
    .per(BATCH);
    let start = Instant::now();
    black_box(case.build(&a, &b, &c).to_vec());
    (t, start.elapsed())
}

/// GB/s of a cell of `n` elements (16 bytes each).
fn gbs(n: usize, t: Timing) -> f64 {
    crate::timing::gbs(16 * n as u64, t.median)
}

/// Runs one cell in this process and prints its GB/s: what the parent reads from a child.
pub fn child(case: &str, n: usize) {
    let dev = Device::default();
    let case = Case::ALL.into_iter().find(|c| c.name() == case).expect("a case name");
    let cfg = Config::from_env(Vec::new(), BATCH);
    let (t, _) = cell(&dev, &cfg, case, n);
    println!("{:.1}", gbs(n, t));
}

/// Compiles a set of distinct kernels (elementwise, reductions, a matmul) in this process and prints the
/// milliseconds their first realizes took: what the parent reads from a child.
pub fn compile_child() {
    let dev = Device::default();
    let x = Tensor::from_vec_on(inputs(1 << 12, 5), [64, 64], &dev);
    x.realize().expect("upload");
    dev.synchronize().expect("sync");
    let start = Instant::now();
    let exprs = [
        (&x * 2.0 + 1.0).exp(),
        (&x - 0.5).abs().sqrt() * x.tanh(),
        x.softmax(-1),
        x.sum(0),
        x.max_keepdim(-1) + &x,
        (&x - x.mean_keepdim(-1)) / (x.var_keepdim(-1) + 1e-5).sqrt(),
        x.matmul(&x).relu(),
        x.t() + &x,
    ];
    for e in &exprs {
        e.realize().expect("realize");
    }
    dev.synchronize().expect("sync");
    println!("{:.3} {}", start.elapsed().as_secs_f64() * 1e3, dev.stats().pipelines_compiled);
}

/// Runs `compile_child` in a fresh process with the driver's own disk caches off, so only lazor's counts.
fn compile_in_fresh_process(cache_dir: &std::path::Path) -> Option<(f64, u64)> {
    let exe = std::env::current_exe().ok()?;
    let out = std::process::Command::new(exe)
        .arg("life-compile")
        .env("LAZOR_CACHE_DIR", cache_dir)
        .env("__GL_SHADER_DISK_CACHE", "0")
        .env("MESA_SHADER_CACHE_DISABLE", "true")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// The first realizes of new kernels in a fresh process: with an empty disk cache, then with what that run saved,
/// then with the cache off.
fn warm_start(dev: &Device) {
    let dir = std::env::temp_dir().join(format!("lazor-bench-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "
### Warm starts: compiling 8 new kernels in a fresh process (driver disk caches off)
"
    );
    println!("- this device keeps a pipeline cache: {}", dev.wgpu().and_then(|g| g.pipeline_cache_file()).is_some());
    println!(
        "
| run | ms | pipelines compiled |"
    );
    println!("|---|---|---|");
    let runs = [
        ("first process, empty cache", dir.clone()),
        ("second process, cache from the first", dir.clone()),
        ("cache off (`LAZOR_CACHE_DIR=`)", std::path::PathBuf::new()),
    ];
    for (name, d) in runs {
        match compile_in_fresh_process(&d) {
            Some((ms, n)) => println!("| {name} | {ms:.1} | {n} |"),
            None => println!("| {name} | failed | - |"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The cell measured in a fresh process (this binary, run again for one cell).
fn fresh(case: Case, n: usize) -> Option<f64> {
    let exe = std::env::current_exe().ok()?;
    let out = std::process::Command::new(exe).args(["life-cell", case.name(), &n.to_string()]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

pub fn run(dev: &Device, cfg: &Config, small: bool) -> bool {
    println!("\n## lazor process-life benchmark\n");
    println!(
        "- device: {}; `Device::default()` for the whole section, as a user's program; median of up to {} runs of \
         x{BATCH} realizes then `synchronize()`; GB/s = 16 bytes per element; each cell ends with one `to_vec()`",
        dev.name(),
        cfg.runs
    );
    let sizes = sizes(dev, small);
    let mut passes: Vec<Vec<(Case, usize, Timing, Duration)>> = Vec::new();
    for _ in 0..2 {
        let mut pass = Vec::new();
        for case in Case::ALL {
            for &n in &sizes {
                let (t, read) = cell(dev, cfg, case, n);
                pass.push((case, n, t, read));
            }
        }
        passes.push(pass);
    }
    println!("\n| case | n | pass 1 GB/s | pass 2 GB/s | fresh process GB/s | pass 2 / fresh | to_vec ms (pass 2) |");
    println!("|---|---|---|---|---|---|---|");
    for (p1, p2) in passes[0].iter().zip(&passes[1]) {
        let (case, n) = (p1.0, p1.1);
        // Fresh processes for the sizes where the GPU, not the host, sets the pace.
        let fresh = (n >= 1 << 20).then(|| fresh(case, n)).flatten();
        let ratio = fresh.map_or("-".into(), |f| format!("{:.2}", gbs(n, p2.2) / f));
        println!(
            "| {} | 2^{} | {:.1} | {:.1} | {} | {ratio} | {} |",
            case.name(),
            n.trailing_zeros(),
            gbs(n, p1.2),
            gbs(n, p2.2),
            fresh.map_or("-".into(), |f| format!("{f:.1}")),
            ms(p2.3)
        );
    }
    let stats = dev.stats();
    println!(
        "\n- after both passes: {} buffers allocated, pool {} MiB of a {} MiB budget, peak live {} MiB",
        stats.buffers_allocated,
        stats.pool_bytes >> 20,
        dev.pool_budget() >> 20,
        stats.peak_buffer_bytes >> 20
    );
    reads(dev, cfg, small);
    latency(dev, cfg);
    warm_start(dev);
    huge(dev, cfg, small);
    schedule_cost(dev);
    true
}

/// `to_vec`, `read_into` (into memory read before) and `read_with` of chain3 at the largest size.
fn reads(dev: &Device, cfg: &Config, small: bool) {
    let n = if small { 1 << 22 } else { 1 << 26 };
    let [a, b, c] = abc(dev, n);
    let y = || Case::Chain3.build(&a, &b, &c);
    let realized = measure(cfg, || {
        y().realize().expect("realize");
        dev.synchronize().expect("sync");
    });
    let to_vec = measure(cfg, || drop(black_box(y().to_vec())));
    let mut out = vec![0.0f32; n];
    let into = measure(cfg, || y().read_into(&mut out));
    let with = measure(cfg, || {
        black_box(y().read_with(|v| v[v.len() / 2]));
    });
    println!("\n### Read-back, chain3 at 2^{}\n", n.trailing_zeros());
    println!("| call | ms | GB/s of the 4-byte result |");
    println!("|---|---|---|");
    for (name, t) in [
        ("`realize()` + `synchronize()` (no read)", realized),
        ("`to_vec()`", to_vec),
        ("`read_into(&mut out)`", into),
        ("`read_with(|v| ..)`", with),
    ] {
        println!("| {name} | {} | {:.1} |", ms(t.median), crate::timing::gbs(4 * n as u64, t.median));
    }
}

/// Per-realize latency of chain3 at 1024 elements.
fn latency(dev: &Device, cfg: &Config) {
    let [a, b, c] = abc(dev, 1024);
    let y = || Case::Chain3.build(&a, &b, &c);
    let [host] = measure_parts(cfg, || {
        let start = Instant::now();
        y().realize().expect("realize");
        let t = start.elapsed();
        dev.synchronize().expect("sync");
        [t]
    });
    let synced = measure(cfg, || {
        y().realize().expect("realize");
        dev.synchronize().expect("sync");
    });
    let read = measure(cfg, || drop(black_box(y().to_vec())));
    let first = {
        let start = Instant::now();
        // A new expression: its pipeline is compiled now (from the disk cache where there is one).
        ((&a * 1.5 - &b).abs().sqrt() + &c).realize().expect("realize");
        dev.synchronize().expect("sync");
        start.elapsed()
    };
    println!("\n### Small realizes, chain3 at 1024 elements\n");
    println!("| call | us |");
    println!("|---|---|");
    for (name, t) in [
        ("`realize()` returns (host time)", host.median),
        ("`realize()` + `synchronize()`", synced.median),
        ("`to_vec()`", read.median),
        ("first realize of a new expression (compile) + `synchronize()`", first),
    ] {
        println!("| {name} | {:.1} |", t.as_secs_f64() * 1e6);
    }
}

/// chain3 at 2^27 elements (512 MiB per tensor), where the device binds that much.
fn huge(dev: &Device, cfg: &Config, small: bool) {
    let n = 1usize << 27;
    if small || 4 * n as u64 > dev.max_tensor_bytes() {
        println!("\n- chain3 at 2^27: skipped (small device or above the binding limit)");
        return;
    }
    let (t, _) = cell(dev, cfg, Case::Chain3, n);
    let fresh = fresh(Case::Chain3, n).map_or("failed".into(), |f| format!("{f:.1} GB/s"));
    println!(
        "\n- chain3 at 2^27 (512 MiB per tensor), x{BATCH} realizes then sync: {} ms each, {:.1} GB/s here, after \
         the cells above; {fresh} in a fresh process",
        ms(t.median),
        gbs(n, t)
    );
}

/// Host time to schedule and submit chains of 10^3, 10^4 and 10^5 elementwise nodes (realize() without a wait).
fn schedule_cost(dev: &Device) {
    println!("\n### Schedule cost\n");
    println!("| nodes | kernels | realize() host ms | us per node |");
    println!("|---|---|---|---|");
    let x = Tensor::from_vec_on(inputs(1024, 9), [1024], dev);
    x.realize().expect("upload");
    for nodes in [1_000, 10_000, 100_000] {
        let mut best = Duration::MAX;
        let mut kernels = 0;
        for _ in 0..3 {
            let mut y = x.clone();
            for i in 0..nodes / 2 {
                y = if i % 2 == 0 { (&y * 0.999) + &x } else { (&y - &x) * 1.001 };
            }
            let before = dev.stats().dispatches;
            let start = Instant::now();
            y.realize().expect("realize");
            best = best.min(start.elapsed());
            kernels = dev.stats().dispatches - before;
            dev.synchronize().expect("sync");
        }
        println!("| {nodes} | {kernels} | {} | {:.2} |", ms(best), best.as_secs_f64() * 1e6 / nodes as f64);
    }
}
