//! The reductions section: sums, dot, softmax and layer norm, fused and unfused, against the targets.

use crate::check::{fits, realize_counts, with_fusion, wrong};
use crate::common::{uniform, ReduceCase, REDUCE_TOLERANCE};
use crate::raw::{Raw, RawOp};
use crate::timing::{gbs, measure, ms, Config, Pair, Timing};
use lazor::{Device, Tensor};

/// The acceptance targets of the reductions issue, from PyTorch figures the issue quotes (the same script's figures
/// in the same device call are the ones to compare with; docs/BENCHMARKS.md does): case, shape, share of the
/// PyTorch rate, that rate (GB/s), where it comes from.
const REDUCE_TARGETS: [(ReduceCase, &[usize], f64, f64, &str); 5] = [
    (ReduceCase::Dot, &[1 << 26], 0.85, 4120.0, "85% of torch.compile (eager 2076)"),
    (ReduceCase::SumRows, &[16384, 4096], 0.85, 3923.0, "85% of eager"),
    (ReduceCase::SumCols, &[16384, 4096], 0.85, 3556.0, "85% of eager"),
    (ReduceCase::Softmax, &[4096, 4096], 1.0, 2930.0, "100% of torch.compile (eager 2369)"),
    (ReduceCase::LayerNorm, &[4096, 4096], 0.85, 3747.0, "85% of torch.compile"),
];

struct ReduceResult {
    case: ReduceCase,
    shape: Vec<usize>,
    /// `batch` realizes then one synchronize, per realize: fused, unfused.
    many: [Timing; 2],
    /// realize then synchronize every time: fused, unfused.
    one: [Timing; 2],
    /// Raw vec4 copy kernel of as many elements on the same device (8 bytes/element): 1/submit, `batch` per submit;
    /// none on lazor's CPU backend.
    copy_kernel: Option<Pair>,
    /// Submits and dispatches of one realize: fused, unfused.
    counts: [(u64, u64); 2],
    /// Submits per realize in a fused x`batch` run: below 1 where realizes made while the GPU was busy were
    /// batched into one submit.
    submits: f64,
    /// Largest relative error against the host: fused, unfused.
    errors: [f64; 2],
}

impl ReduceResult {
    fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    fn gbs(&self, t: Timing) -> f64 {
        gbs(self.numel() as u64 * self.case.bytes_per_element(), t.median)
    }
}

fn run_reduce(
    dev: &Device,
    raw: Option<&Raw>,
    cfg: &Config,
    case: ReduceCase,
    shape: &[usize],
) -> Result<ReduceResult, String> {
    let batch = cfg.batch;
    let numel: usize = shape.iter().product();
    let host: Vec<Vec<f32>> = (0..case.inputs()).map(|j| uniform(numel, 21 + j as u64)).collect();
    let want = case.host(&host, shape);
    // As a user's program does: `Tensor::from_vec` onto the default device, realized before anything is timed.
    let x: Vec<Tensor> = host.into_iter().map(|h| Tensor::from_vec(h, shape.to_vec())).collect();
    lazor::realize(&x.iter().collect::<Vec<_>>()).map_err(|e| e.to_string())?;
    dev.synchronize().map_err(|e| e.to_string())?;
    // The kernels timed below, checked in full first, fused and unfused.
    let mut errors = [0.0; 2];
    for (k, fuse) in [true, false].into_iter().enumerate() {
        let got = with_fusion(dev, fuse, || case.build(&x).try_to_vec()).map_err(|e| e.to_string())?;
        errors[k] = ReduceCase::worst_error(&got, &want);
        if errors[k].is_nan() || errors[k] > REDUCE_TOLERANCE {
            return Err(format!(
                "{} {} (fused: {fuse}) differs from the host by {:e} (relative; allowed {REDUCE_TOLERANCE:e})",
                case.name(),
                ReduceCase::shape_label(shape),
                errors[k]
            ));
        }
    }
    drop(want);
    let counts = [true, false].map(|fuse| with_fusion(dev, fuse, || realize_counts(dev, || case.build(&x))));
    let run = |k: u32| {
        for _ in 0..k {
            // Dropped at once: its buffer goes back to the pool and the next realize reuses it (in queue order).
            case.build(&x).realize().expect("realize");
        }
        dev.synchronize().expect("synchronize");
    };
    let mut many = [None; 2];
    let mut one = [None; 2];
    let mut submits = 0.0;
    for (k, fuse) in [true, false].into_iter().enumerate() {
        dev.set_fusion(fuse);
        many[k] = Some(measure(cfg, || run(batch)).per(batch));
        if fuse {
            // Realizes made while the GPU is busy share submits: how many, in one more timed-like run.
            let before = dev.stats().submits;
            run(batch);
            submits = (dev.stats().submits - before) as f64 / batch as f64;
        }
        one[k] = Some(measure(cfg, || run(1)));
        dev.set_fusion(true);
    }
    drop(x);
    dev.synchronize().map_err(|e| e.to_string())?;
    let copy_kernel = raw.map(|raw| {
        let pair = raw.time(cfg, RawOp::CopyVec4, numel);
        raw.wait();
        pair
    });
    Ok(ReduceResult {
        case,
        shape: shape.to_vec(),
        many: many.map(|t| t.expect("timed")),
        one: one.map(|t| t.expect("timed")),
        copy_kernel,
        counts,
        submits,
        errors,
    })
}

/// The reductions section. False on a failure.
pub fn run() -> bool {
    // The way a user runs: the process-wide default device, for every case and size, one after another.
    let dev = Device::default();
    // The raw copy kernel needs a wgpu device; lazor's CPU backend (the default where no hardware GPU exists) has none.
    let raw = (!dev.is_cpu()).then(|| Raw::open(&dev));
    let cpu = raw.as_ref().is_none_or(|r| r.info.device_type == wgpu::DeviceType::Cpu);
    let small = match std::env::var("LAZOR_BENCH_REDUCE_SIZES").as_deref().map(str::trim) {
        Ok("small") => true,
        Ok("full") => false,
        _ => cpu,
    };
    let cfg = Config::from_env(Vec::new(), if cpu { 8 } else { 32 });
    let batch = cfg.batch;

    println!("\n## lazor reductions benchmark\n");
    let adapter = match &raw {
        Some(r) => format!(
            "{} ({:?}, {:?}); driver: {} {}",
            r.info.name, r.info.backend, r.info.device_type, r.info.driver, r.info.driver_info
        ),
        None => format!("{}, lazor's CPU backend (LAZOR_BACKEND=vulkan picks a software Vulkan adapter)", dev.name()),
    };
    println!(
        "- device: {adapter}; max tensor bytes: {}; one device (`Device::default()`) for the whole section",
        dev.max_tensor_bytes()
    );
    println!(
        "- sizes: {}",
        if small {
            "scaled down (CPU adapter or LAZOR_BENCH_REDUCE_SIZES=small): 2^22 elements, [2048, 1024]"
        } else {
            "those of torch_reference.py (reduce, softmax); the first of each case is the one its target names"
        }
    );
    println!(
        "- {}; x{batch}/sync = {batch} realizes then one synchronize, per realize; 1/sync = realize then \
         synchronize; unfused = `dev.set_fusion(false)` (= LAZOR_NOFUSE=1); GB/s = 10^9 bytes/s of the ideal kernel \
         (inputs read once, a full-size output written once; unfused rows count the same bytes); inputs uniform in \
         [0, 1)",
        cfg.method()
    );
    if let Some(Err(e)) = raw.as_ref().map(Raw::check) {
        return wrong(e);
    }

    let mut results = Vec::new();
    for case in ReduceCase::ALL {
        for shape in if small { case.small_shapes() } else { case.shapes() } {
            let label = ReduceCase::shape_label(&shape);
            let bytes = shape.iter().product::<usize>() as u64 * 4;
            if !fits(&dev, case.name(), &label, bytes) {
                continue;
            }
            eprintln!("reductions: {} {label}", case.name());
            match run_reduce(&dev, raw.as_ref(), &cfg, case, &shape) {
                Ok(r) => results.push(r),
                Err(e) => return wrong(e),
            }
        }
    }
    let worst = results.iter().flat_map(|r| r.errors).fold(0.0f64, f64::max);
    println!(
        "- correctness: every timed case and size, fused and unfused, matches an f64 host computation in full before \
         timing (worst relative error {worst:.1e}, allowed {REDUCE_TOLERANCE:e}; sums relative to the sum of \
         absolute terms)"
    );

    println!("\n### Reductions, device-resident\n");
    println!("fused / unfused = unfused time / fused time. kernel copy: a raw WGSL vec4 copy of as many elements.\n");
    println!(
        "| case | expression | shape | bytes/element | fused x{batch} ms | GB/s | fused 1/sync ms | GB/s | unfused \
         x{batch} ms | GB/s | unfused 1/sync ms | GB/s | fused / unfused x{batch} | dispatches fused/unfused | \
         submits per realize, fused x{batch} | kernel copy x{batch} GB/s | runs x{batch}; 1/sync |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &results {
        let copy =
            r.copy_kernel.map_or("-".to_string(), |k| format!("{:.1}", gbs(r.numel() as u64 * 8, k.many.median)));
        println!(
            "| {} | `{}` | {} | {} | {} | {:.1} | {} | {:.1} | {} | {:.1} | {} | {:.1} | {:.2}x | {}/{} | {:.2} | \
             {copy} | {}; {} |",
            r.case.name(),
            r.case.expr(),
            ReduceCase::shape_label(&r.shape),
            r.case.bytes_per_element(),
            ms(r.many[0].median),
            r.gbs(r.many[0]),
            ms(r.one[0].median),
            r.gbs(r.one[0]),
            ms(r.many[1].median),
            r.gbs(r.many[1]),
            ms(r.one[1].median),
            r.gbs(r.one[1]),
            r.many[1].median.as_secs_f64() / r.many[0].median.as_secs_f64(),
            r.counts[0].1,
            r.counts[1].1,
            r.submits,
            r.many[0].runs,
            r.one[0].runs
        );
    }
    let odd: Vec<String> = results
        .iter()
        .filter(|r| r.counts.iter().any(|&(s, _)| s != 1))
        .map(|r| format!("{} {}: {:?}", r.case.name(), ReduceCase::shape_label(&r.shape), r.counts))
        .collect();
    if odd.is_empty() {
        println!("\n- every realize above: 1 submit");
    } else {
        println!("\n- UNEXPECTED (submits, dispatches) per realize, fused then unfused: {}", odd.join("; "));
    }

    let targeted: Vec<_> = REDUCE_TARGETS
        .iter()
        .filter_map(|&(case, shape, share, torch, what)| {
            results.iter().find(|r| r.case == case && r.shape == shape).map(|r| (r, share, torch, what))
        })
        .collect();
    if !targeted.is_empty() && !cpu {
        println!("\n### Against the issue's targets (PyTorch figures quoted in the issue)\n");
        println!(
            "lazor fused x{batch}/sync against the target rate; PyTorch's figures from the same device call are the \
             ones to compare with (`torch_reference.py reduce softmax`).\n"
        );
        println!("| case | shape | lazor x{batch} GB/s | target | target GB/s | lazor / target | met? |");
        println!("|---|---|---:|---|---:|---:|---|");
        for (r, share, torch, what) in targeted {
            let got = r.gbs(r.many[0]);
            let target = share * torch;
            println!(
                "| {} | {} | {got:.1} | {what} ({torch:.0}) | {target:.1} | {:.0}% | {} |",
                r.case.name(),
                ReduceCase::shape_label(&r.shape),
                100.0 * got / target,
                if got >= target { "yes" } else { "no" }
            );
        }
    }
    true
}
