//! The CPU-backend section: `Device::cpu()` against a rayon loop, lavapipe, ndarray and itself unfused.

use crate::check::{realize_counts, rel_error, with_fusion, wrong};
use crate::common::{ndarray_softmax, ndarray_sum_rows, uniform, Case, ReduceCase, IDEAL_BYTES_PER_ELEMENT};
use crate::common::{RAYON_CHUNK, REDUCE_TOLERANCE};
use crate::timing::{env_log2s, gbs, inputs, measure, measure_parts, ms, size_name, Config, Timing};
use lazor::{Device, Tensor};
use std::hint::black_box;
use std::time::Instant;

/// One elementwise case at one size on the CPU backend and its yardsticks, each a median per call.
struct CpuRow {
    case: Case,
    n: usize,
    /// lazor on `Device::cpu()`, fused, and the hand-written rayon loop, timed alternately run by run.
    lazor: Timing,
    rayon: Timing,
    ndarray: Timing,
    unfused: Timing,
    /// The same graph on `Device::new()` (lavapipe here), fused; none where it cannot bind the tensors.
    wgpu: Option<Timing>,
    /// Dispatches of one realize on the CPU backend: fused, unfused.
    dispatches: [u64; 2],
    /// Largest relative error against the host: lazor fused, unfused, rayon, ndarray, wgpu (0 when not run).
    errors: [f32; 5],
}

impl CpuRow {
    fn gbs(&self, t: Timing) -> f64 {
        gbs(self.n as u64 * IDEAL_BYTES_PER_ELEMENT, t.median)
    }
}

/// `x.sum(-1)` or `x.softmax(-1)` on the CPU backend against ndarray.
struct CpuReduceRow {
    case: ReduceCase,
    shape: Vec<usize>,
    /// lazor fused and ndarray, timed alternately run by run.
    lazor: Timing,
    ndarray: Timing,
    unfused: Timing,
    dispatches: [u64; 2],
    /// Largest relative error against the f64 host: lazor fused, unfused, ndarray.
    errors: [f64; 3],
}

/// Dispatches of one realize of `y()` on `dev`, fused then unfused.
fn cpu_dispatches(dev: &Device, y: impl Fn() -> Tensor) -> [u64; 2] {
    [true, false].map(|fuse| with_fusion(dev, fuse, || realize_counts(dev, &y).1))
}

fn run_cpu_case(cpu: &Device, gpu: Option<&Device>, cfg: &Config, case: Case, n: usize) -> Result<CpuRow, String> {
    let host: Vec<Vec<f32>> = (1..=3).map(|s| inputs(n, s)).collect();
    let want: Vec<f32> = (0..n).map(|i| case.host(host[0][i], host[1][i], host[2][i])).collect();
    let on = |dev: &Device| -> Vec<Tensor> {
        let x: Vec<Tensor> = host.iter().map(|h| Tensor::from_vec_on(h.clone(), [n], dev)).collect();
        lazor::realize(&x.iter().collect::<Vec<_>>()).expect("upload inputs");
        dev.synchronize().expect("synchronize");
        x
    };
    let x = on(cpu);
    let nd: Vec<ndarray::Array1<f32>> = host.iter().map(|h| ndarray::Array1::from_vec(h.clone())).collect();
    let mut out = vec![0.0f32; n];

    // Every result checked in full against the host before anything is timed.
    let mut errors = [0.0f32; 5];
    for (k, fuse) in [true, false].into_iter().enumerate() {
        let got = with_fusion(cpu, fuse, || case.build(&x[0], &x[1], &x[2]).try_to_vec());
        errors[k] = rel_error(&got.map_err(|e| e.to_string())?, &want);
    }
    case.rayon_into(&host[0], &host[1], &host[2], &mut out);
    errors[2] = rel_error(&out, &want);
    errors[3] = rel_error(case.ndarray(&nd[0], &nd[1], &nd[2]).as_slice().expect("contiguous"), &want);
    let g = gpu.map(on);
    if let (Some(gpu), Some(g)) = (gpu, &g) {
        let got = case.build(&g[0], &g[1], &g[2]).try_to_vec().map_err(|e| e.to_string())?;
        gpu.synchronize().map_err(|e| e.to_string())?;
        errors[4] = rel_error(&got, &want);
    }
    drop(want);
    let names = ["lazor CPU fused", "lazor CPU unfused", "rayon loop", "ndarray", "wgpu"];
    if let Some(k) = errors.iter().position(|e| e.is_nan() || *e > 1e-4) {
        return Err(format!("{} {}: {} differs from the host by {:e}", case.name(), size_name(n), names[k], errors[k]));
    }
    let dispatches = cpu_dispatches(cpu, || case.build(&x[0], &x[1], &x[2]));

    let realize = |dev: &Device, x: &[Tensor]| {
        // Built, realized, and dropped at once: its buffer goes back to the pool for the next run.
        case.build(&x[0], &x[1], &x[2]).realize().expect("realize");
        dev.synchronize().expect("synchronize");
    };
    let [lazor, rayon] = measure_parts(cfg, || {
        let t = Instant::now();
        realize(cpu, &x);
        let l = t.elapsed();
        let t = Instant::now();
        case.rayon_into(&host[0], &host[1], &host[2], &mut out);
        black_box(&mut out);
        [l, t.elapsed()]
    });
    let ndarray = measure(cfg, || {
        black_box(case.ndarray(&nd[0], &nd[1], &nd[2]));
    });
    cpu.set_fusion(false);
    let unfused = measure(cfg, || realize(cpu, &x));
    cpu.set_fusion(true);
    drop((x, nd, out, host));
    let wgpu = gpu.zip(g).map(|(gpu, g)| measure(cfg, || realize(gpu, &g)));
    Ok(CpuRow { case, n, lazor, rayon, ndarray, unfused, wgpu, dispatches, errors })
}

fn run_cpu_reduce(cpu: &Device, cfg: &Config, case: ReduceCase, shape: &[usize]) -> Result<CpuReduceRow, String> {
    let (rows, cols) = (shape[0], shape[1]);
    let h = uniform(rows * cols, 21);
    let want = case.host(std::slice::from_ref(&h), shape);
    let nd = ndarray::Array2::from_shape_vec((rows, cols), h.clone()).expect("shape");
    let x = [Tensor::from_vec_on(h, shape.to_vec(), cpu)];
    x[0].realize().map_err(|e| e.to_string())?;
    let nd_run = || -> Vec<f32> {
        match case {
            ReduceCase::SumRows => ndarray_sum_rows(&nd).into_raw_vec_and_offset().0,
            ReduceCase::Softmax => ndarray_softmax(&nd).into_raw_vec_and_offset().0,
            _ => unreachable!("the CPU section runs sum(-1) and softmax(-1)"),
        }
    };
    let mut errors = [0.0; 3];
    for (k, fuse) in [true, false].into_iter().enumerate() {
        let got = with_fusion(cpu, fuse, || case.build(&x).try_to_vec());
        errors[k] = ReduceCase::worst_error(&got.map_err(|e| e.to_string())?, &want);
    }
    errors[2] = ReduceCase::worst_error(&nd_run(), &want);
    drop(want);
    let names = ["lazor CPU fused", "lazor CPU unfused", "ndarray"];
    if let Some(k) = errors.iter().position(|e| e.is_nan() || *e > REDUCE_TOLERANCE) {
        return Err(format!(
            "{} {}: {} differs from the host by {:e} (allowed {REDUCE_TOLERANCE:e})",
            case.name(),
            ReduceCase::shape_label(shape),
            names[k],
            errors[k]
        ));
    }
    let dispatches = cpu_dispatches(cpu, || case.build(&x));
    let realize = || {
        case.build(&x).realize().expect("realize");
        cpu.synchronize().expect("synchronize");
    };
    let [lazor, ndarray] = measure_parts(cfg, || {
        let t = Instant::now();
        realize();
        let l = t.elapsed();
        let t = Instant::now();
        black_box(nd_run());
        [l, t.elapsed()]
    });
    cpu.set_fusion(false);
    let unfused = measure(cfg, realize);
    cpu.set_fusion(true);
    Ok(CpuReduceRow { case, shape: shape.to_vec(), lazor, ndarray, unfused, dispatches, errors })
}

fn met(ok: bool) -> &'static str {
    if ok {
        "**yes**"
    } else {
        "**no**"
    }
}

/// The CPU-backend section. False on a failure.
pub fn run() -> bool {
    let sizes = env_log2s("LAZOR_BENCH_CPU_LOG2", &[20, 24]).into_iter().map(|k| 1usize << k).collect();
    let cfg = Config::from_env(sizes, 1);
    // One CPU device for the whole section, as a program has; inputs realized on it before anything is timed.
    let cpu = Device::cpu();
    let gpu = match Device::new() {
        Ok(d) => Some(d),
        Err(e) => {
            println!("- no wgpu adapter ({e}): the lavapipe column is left out");
            None
        }
    };
    println!("\n## lazor CPU backend benchmark\n");
    println!(
        "- lazor: `Device::cpu()`, {}; rayon's pool: {} threads (shared with the hand-written loop); {} logical CPUs",
        cpu.name(),
        rayon::current_num_threads(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    if let Some(g) = &gpu {
        let info = g.adapter_info();
        println!(
            "- wgpu: `Device::new()`: {} ({:?}, {:?}; driver {} {}); max tensor bytes {}",
            info.name,
            info.backend,
            info.device_type,
            info.driver,
            info.driver_info,
            g.max_tensor_bytes()
        );
    }
    println!(
        "- per run: lazor builds the expression over realized inputs, `realize()`, `synchronize()` (output dropped, \
         its buffer pooled); rayon: `par_chunks_mut({})` over a reused output, inputs as `Vec<f32>`; ndarray: the \
         expression on `Array1<f32>` (single-threaded, a new array per op on borrowed operands); unfused: \
         `set_fusion(false)`. lazor and the rayon loop (and lazor and ndarray for the reductions) alternate run by \
         run.",
        RAYON_CHUNK
    );
    println!(
        "- {}; GB/s = 10^9 bytes/s of the ideal kernel: 16 bytes/element elementwise, 4 for `sum(-1)`, 8 for \
         softmax, every column counted the same",
        cfg.method()
    );

    let mut rows = Vec::new();
    for &n in &cfg.sizes {
        let gpu = gpu.as_ref().filter(|g| {
            let fits = g.max_tensor_bytes() >= n as u64 * 4;
            if !fits {
                println!(
                    "- skipped the wgpu column at {}: its {}-byte tensors exceed max_tensor_bytes ({})",
                    size_name(n),
                    n * 4,
                    g.max_tensor_bytes()
                );
            }
            fits
        });
        for case in Case::ALL {
            eprintln!("cpu: {} {}", case.name(), size_name(n));
            match run_cpu_case(&cpu, gpu, &cfg, case, n) {
                Ok(r) => rows.push(r),
                Err(e) => return wrong(e),
            }
        }
    }
    let mut reduce_rows = Vec::new();
    for case in [ReduceCase::SumRows, ReduceCase::Softmax] {
        eprintln!("cpu: {} 4096x4096", case.name());
        match run_cpu_reduce(&cpu, &cfg, case, &[4096, 4096]) {
            Ok(r) => reduce_rows.push(r),
            Err(e) => return wrong(e),
        }
    }
    let worst = rows.iter().flat_map(|r| r.errors).fold(0.0f32, f32::max);
    let worst_reduce = reduce_rows.iter().flat_map(|r| r.errors).fold(0.0f64, f64::max);
    println!(
        "- correctness: every result of every timed case and size (lazor fused and unfused, rayon, ndarray, wgpu) \
         matches the host in full before timing: elementwise worst {worst:.1e} (relative to max(|v|, 1); allowed \
         1e-4), reductions worst {worst_reduce:.1e} against f64 (allowed {REDUCE_TOLERANCE:e})"
    );

    println!("\n### Elementwise on the CPU backend, device-resident\n");
    println!(
        "| case | elements | lazor CPU ms | GB/s | rayon loop ms | GB/s | ndarray ms | GB/s | lavapipe ms | GB/s | \
         lazor CPU unfused ms | GB/s | dispatches f/u | runs |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let wgpu = r.wgpu.map_or("- | -".to_string(), |t| format!("{} | {:.1}", ms(t.median), r.gbs(t)));
        println!(
            "| {} | {} | {} | {:.1} | {} | {:.1} | {} | {:.1} | {wgpu} | {} | {:.1} | {}/{} | {} |",
            r.case.name(),
            size_name(r.n),
            ms(r.lazor.median),
            r.gbs(r.lazor),
            ms(r.rayon.median),
            r.gbs(r.rayon),
            ms(r.ndarray.median),
            r.gbs(r.ndarray),
            ms(r.unfused.median),
            r.gbs(r.unfused),
            r.dispatches[0],
            r.dispatches[1],
            r.lazor.runs
        );
    }

    println!("\n### Against the targets\n");
    println!(
        "lazor / rayon = rayon time / lazor time (target >= 70%); lavapipe / lazor = lavapipe time / lazor time \
         (target >= 3x); ndarray / lazor (target > 1x: lazor faster); fused speedup = unfused / fused time.\n"
    );
    println!(
        "| case | elements | lazor / rayon | >= 70%? | lavapipe / lazor CPU | >= 3x? | ndarray / lazor | faster? | fused \
         speedup |"
    );
    println!("|---|---:|---:|---|---:|---|---:|---|---:|");
    let ratio = |a: Timing, b: Timing| a.median.as_secs_f64() / b.median.as_secs_f64();
    for r in &rows {
        let vs_rayon = ratio(r.rayon, r.lazor);
        let (vs_wgpu, wgpu_met) = match r.wgpu {
            Some(t) => (format!("{:.2}x", ratio(t, r.lazor)), met(ratio(t, r.lazor) >= 3.0)),
            None => ("-".into(), "not run"),
        };
        let vs_nd = ratio(r.ndarray, r.lazor);
        println!(
            "| {} | {} | {:.0}% | {} | {vs_wgpu} | {wgpu_met} | {vs_nd:.2}x | {} | {:.2}x |",
            r.case.name(),
            size_name(r.n),
            100.0 * vs_rayon,
            met(vs_rayon >= 0.7),
            met(vs_nd > 1.0),
            ratio(r.unfused, r.lazor)
        );
    }

    println!("\n### Reductions on the CPU backend, [4096, 4096]\n");
    println!(
        "ndarray: `x.sum_axis(Axis(1))`; softmax: max by `fold_axis`, `(x - &max.insert_axis(Axis(1))).mapv(f32::exp)`, \
         divided by its `sum_axis(Axis(1)).insert_axis(Axis(1))`.\n"
    );
    println!(
        "| case | lazor CPU ms | GB/s | ndarray ms | GB/s | ndarray / lazor | faster? | lazor CPU unfused ms | GB/s | \
         dispatches f/u | runs |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|");
    for r in &reduce_rows {
        let bytes = r.shape.iter().product::<usize>() as u64 * r.case.bytes_per_element();
        println!(
            "| `{}` | {} | {:.1} | {} | {:.1} | {:.2}x | {} | {} | {:.1} | {}/{} | {} |",
            r.case.expr(),
            ms(r.lazor.median),
            gbs(bytes, r.lazor.median),
            ms(r.ndarray.median),
            gbs(bytes, r.ndarray.median),
            ratio(r.ndarray, r.lazor),
            met(ratio(r.ndarray, r.lazor) > 1.0),
            ms(r.unfused.median),
            gbs(bytes, r.unfused.median),
            r.dispatches[0],
            r.dispatches[1],
            r.lazor.runs
        );
    }
    crate::cpu_ops::run(&cpu, gpu.as_ref(), &cfg, 1 << 20);
    crate::cpu_views::run(&cpu, &cfg)
}
