//! The views section: each view case against its plain twin, next to raw copy and transpose kernels.

use crate::check::{fits, realize_counts, worst_error, wrong};
use crate::common::ViewCase;
use crate::raw::{Raw, RawOp};
use crate::timing::{env_log2s, gbs, inputs, measure_parts, ms, Config, Pair, Timing};
use lazor::{Device, Tensor};
use std::time::Instant;

struct ViewResult {
    case: ViewCase,
    numel: usize,
    /// `batch` realizes then one synchronize, per realize: view, plain (interleaved run by run).
    many: [Timing; 2],
    /// realize then synchronize every time: view, plain (interleaved).
    one: [Timing; 2],
    /// Raw vec4 copy kernel of `numel` elements on the same device: 1/submit, `batch` per submit.
    copy_kernel: Pair,
    /// `transpose_add` only: hand-written `a.t() + b`, in lazor's vec4 gather shape and tiled.
    raw_transpose: Option<[Pair; 2]>,
    /// Submits and dispatches of one realize: view, plain.
    counts: [(u64, u64); 2],
}

/// Host values of the inputs of `case` at `numel` output elements.
fn view_host_inputs(case: ViewCase, numel: usize) -> Vec<Vec<f32>> {
    case.input_shapes(numel).iter().enumerate().map(|(j, s)| inputs(s.iter().product(), 11 + j as u64)).collect()
}

/// Compares the view case and its twin at `numel` elements with the host, over inputs already on the device.
fn check_view(case: ViewCase, host: &[Vec<f32>], x: &[Tensor]) -> Result<(), String> {
    let view = case.build_view(x).try_to_vec().map_err(|e| e.to_string())?;
    let plain = case.build_plain(x).try_to_vec().map_err(|e| e.to_string())?;
    for (what, got, worst) in [
        ("view", &view, worst_error(&view, |i| case.host_view(host, i))),
        ("plain", &plain, worst_error(&plain, |i| case.host_plain(host, i))),
    ] {
        if worst.is_nan() || worst > 1e-6 {
            return Err(format!(
                "{} ({what}) at {} elements differs from the host by {worst:e}",
                case.name(),
                got.len()
            ));
        }
    }
    Ok(())
}

/// Inputs of `case` at `numel` output elements, on the default device (as `Tensor::from_vec` puts them), realized.
fn view_inputs(case: ViewCase, numel: usize, host: &[Vec<f32>]) -> Vec<Tensor> {
    let x: Vec<Tensor> =
        host.iter().zip(case.input_shapes(numel)).map(|(h, s)| Tensor::from_vec(h.clone(), s)).collect();
    lazor::realize(&x.iter().collect::<Vec<_>>()).expect("upload view inputs");
    x
}

fn run_view(dev: &Device, raw: &Raw, cfg: &Config, case: ViewCase, numel: usize) -> Result<ViewResult, String> {
    let batch = cfg.batch;
    let host = view_host_inputs(case, numel);
    let x = view_inputs(case, numel, &host);
    dev.synchronize().map_err(|e| e.to_string())?;
    // The kernels timed below, checked in full first.
    check_view(case, &host, &x)?;
    drop(host);
    let counts =
        [true, false].map(|view| realize_counts(dev, || if view { case.build_view(&x) } else { case.build_plain(&x) }));
    let run = |view: bool, k: u32| {
        let t = Instant::now();
        for _ in 0..k {
            // Dropped at once: its buffer goes back to the pool and the next realize reuses it (in queue order).
            let y = if view { case.build_view(&x) } else { case.build_plain(&x) };
            y.realize().expect("realize");
        }
        dev.synchronize().expect("synchronize");
        t.elapsed()
    };
    // View and plain alternate run by run, so drifts of clock or temperature reach both alike.
    let many = measure_parts(cfg, || [run(true, batch), run(false, batch)]).map(|t| t.per(batch));
    let one = measure_parts(cfg, || [run(true, 1), run(false, 1)]);
    drop(x);
    dev.synchronize().map_err(|e| e.to_string())?;
    let copy_kernel = raw.time(cfg, RawOp::CopyVec4, numel);
    let raw_transpose = (case == ViewCase::TransposeAdd && ViewCase::TransposeAdd.side(numel) % 32 == 0)
        .then(|| [RawOp::TransposeAddGather4, RawOp::TransposeAddTiled].map(|op| raw.time(cfg, op, numel)));
    raw.wait();
    Ok(ViewResult { case, numel, many, one, copy_kernel, raw_transpose, counts })
}

/// Small sizes, below and above the vec4 threshold, aligned and not: every view path against the host.
fn check_views_small() -> Result<(), String> {
    for case in ViewCase::ALL {
        let sizes: &[usize] = match case {
            ViewCase::TransposeAdd => &[36 * 36, 100 * 100, 256 * 256, 1024 * 1024],
            ViewCase::Cat => &[2 * 1001, 1 << 12, 2 * 65_538, 1 << 17, 1 << 20],
        };
        for &numel in sizes {
            let host = view_host_inputs(case, numel);
            check_view(case, &host, &view_inputs(case, numel, &host))?;
        }
    }
    Ok(())
}

/// The views section. False on a failure.
pub fn run() -> bool {
    // The way a user runs: the process-wide default device, for every case and size, one after another.
    let dev = Device::default();
    if dev.is_cpu() {
        println!(
            "\n## lazor views benchmark\n\n- skipped: the default device is {}, lazor's CPU backend, and this \
             section needs a wgpu device for its raw kernels (LAZOR_BACKEND=vulkan picks a software Vulkan adapter)",
            dev.name()
        );
        return true;
    }
    let raw = Raw::open(&dev);
    let cpu = raw.info.device_type == wgpu::DeviceType::Cpu;
    let log2s = env_log2s("LAZOR_BENCH_VIEW_LOG2", &ViewCase::DEFAULT_LOG2);
    let cfg = Config::from_env(Vec::new(), if cpu { 8 } else { 32 });
    let batch = cfg.batch;

    println!("\n## lazor views benchmark\n");
    println!(
        "- adapter: {} ({}, {:?}); driver: {} {}; max tensor bytes: {}; one device (`Device::default()`) for the \
         whole section",
        dev.adapter_name(),
        dev.backend(),
        raw.info.device_type,
        raw.info.driver,
        raw.info.driver_info,
        dev.max_tensor_bytes()
    );
    println!(
        "- {}; view and plain alternate run by run; x{batch}/sync = {batch} realizes then one synchronize, per \
         realize; 1/sync = realize then synchronize; GB/s = 10^9 bytes/s of the ideal kernel (transpose_add 12 \
         bytes/element, cat 8, kernel copy 8)",
        cfg.method()
    );
    if let Err(e) = check_views_small().and_then(|()| raw.check()) {
        return wrong(e);
    }
    println!(
        "- correctness: view and plain match the host within 1e-6 (relative) at small sizes (transpose_add 36^2, \
         100^2, 256^2, 1024^2; cat 2002, 2^12, 131076, 2^17, 2^20) and in full at every timed size before timing; \
         the raw kernels match at 2^12"
    );

    let mut results = Vec::new();
    for case in ViewCase::ALL {
        for &k in &log2s {
            let Some(numel) = 1usize.checked_shl(k) else {
                println!("- skipped {} at 2^{k}: too large", case.name());
                continue;
            };
            if !case.valid(numel) {
                println!("- skipped {} at 2^{k}: not a valid size (transpose_add needs a square)", case.name());
                continue;
            }
            let label = case.size_label(numel);
            let label = if label == format!("2^{k}") { label } else { format!("{label} (2^{k} elements)") };
            if !fits(&dev, case.name(), &label, numel as u64 * 4) {
                continue;
            }
            eprintln!("views: {} {}", case.name(), case.size_label(numel));
            match run_view(&dev, &raw, &cfg, case, numel) {
                Ok(r) => results.push(r),
                Err(e) => return wrong(e),
            }
        }
    }

    println!("\n### Views vs plain, device-resident\n");
    println!(
        "view / plain = plain time / view time (the view's bytes/s as a share of the plain twin's). kernel copy: a \
         raw WGSL vec4 copy of as many elements on the same device.\n"
    );
    println!(
        "| case | size | view | plain | view x{batch} ms | GB/s | plain x{batch} ms | GB/s | view / plain x{batch} | \
         view 1/sync ms | GB/s | plain 1/sync ms | GB/s | view / plain 1/sync | kernel copy x{batch} GB/s | \
         kernel copy 1/submit GB/s | dispatches view/plain | runs x{batch}; 1/sync |"
    );
    println!("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &results {
        let bytes = r.numel as u64 * r.case.bytes_per_element();
        let copy = r.numel as u64 * 8;
        println!(
            "| {} | {} | `{}` | `{}` | {} | {:.1} | {} | {:.1} | {:.0}% | {} | {:.1} | {} | {:.1} | {:.0}% | {:.1} | \
             {:.1} | {}/{} | {}; {} |",
            r.case.name(),
            r.case.size_label(r.numel),
            r.case.view_name(),
            r.case.plain_name(),
            ms(r.many[0].median),
            gbs(bytes, r.many[0].median),
            ms(r.many[1].median),
            gbs(bytes, r.many[1].median),
            100.0 * r.many[1].median.as_secs_f64() / r.many[0].median.as_secs_f64(),
            ms(r.one[0].median),
            gbs(bytes, r.one[0].median),
            ms(r.one[1].median),
            gbs(bytes, r.one[1].median),
            100.0 * r.one[1].median.as_secs_f64() / r.one[0].median.as_secs_f64(),
            gbs(copy, r.copy_kernel.many.median),
            gbs(copy, r.copy_kernel.one.median),
            r.counts[0].1,
            r.counts[1].1,
            r.many[0].runs,
            r.one[0].runs
        );
    }
    let transposes: Vec<&ViewResult> = results.iter().filter(|r| r.raw_transpose.is_some()).collect();
    if !transposes.is_empty() {
        println!("\n### transpose_add: lazor next to hand-written kernels, GB/s (12 bytes/element)\n");
        println!(
            "raw gather4: WGSL in the shape of lazor's vec4 kernel (4 outputs per thread, `a` by 4 scalar loads down a \
             column, `b` and the output as vec4); raw tiled: a 32x32 tile of `a` through workgroup memory (32x8 \
             threads, 4 outputs each), so every global access is coalesced. `1` = 1/sync (lazor) or 1/submit (raw).\n"
        );
        println!(
            "| size | lazor view x{batch} | raw gather4 x{batch} | raw tiled x{batch} | lazor plain x{batch} | lazor view 1 \
             | raw gather4 1 | raw tiled 1 | lazor view / raw gather4 x{batch} | lazor view / raw tiled x{batch} | raw \
             tiled / lazor plain x{batch} |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in transposes {
            let b = r.numel as u64 * 12;
            let [g, t] = r.raw_transpose.expect("raw transpose");
            let x = [r.many[0], g.many, t.many, r.many[1], r.one[0], g.one, t.one].map(|t| gbs(b, t.median));
            println!(
                "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0}% | {:.0}% | {:.0}% |",
                r.case.size_label(r.numel),
                x[0],
                x[1],
                x[2],
                x[3],
                x[4],
                x[5],
                x[6],
                100.0 * x[0] / x[1],
                100.0 * x[0] / x[2],
                100.0 * x[2] / x[3]
            );
        }
    }
    let odd: Vec<String> = results
        .iter()
        .filter(|r| r.counts.iter().any(|&c| c != (1, 1)))
        .map(|r| format!("{} {}: {:?}", r.case.name(), r.case.size_label(r.numel), r.counts))
        .collect();
    if odd.is_empty() {
        println!("\n- every realize above: 1 submit, 1 dispatch (as expected)");
    } else {
        println!("\n- UNEXPECTED (submits, dispatches) per realize, view then plain: {}", odd.join("; "));
    }
    true
}
