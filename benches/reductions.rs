//! Criterion benchmarks of lazor's reductions, fused and unfused, in one run on one device (`Device::default()`),
//! the way a user's program runs them.
//!
//! ```text
//! cargo bench --bench reductions               # everything
//! cargo bench --bench reductions -- softmax    # one case
//! ```
//!
//! Benchmark ids are `<case>/<fused|unfused>/<1|xK>/<shape>`, the cases of `benches/report.rs -- reductions`:
//! `sum_all` (`x.sum_all()`), `dot` (`(a * &b).sum_all()`), `sum_rows` (`x.sum(-1)`), `sum_cols` (`x.sum(0)`),
//! `softmax` (`x.softmax(-1)`) and `layernorm` (`(&x - x.mean_keepdim(-1)) / (x.var_keepdim(-1) + 1e-5).sqrt()`).
//! `unfused` runs with `dev.set_fusion(false)` (= `LAZOR_NOFUSE=1`). `1` builds the expression, `realize()`s it and
//! `synchronize()`s; `xK` does K realizes (32, or 8 on a CPU adapter) then one synchronize. Throughput is the bytes
//! the ideal kernel moves (inputs read once, a full-size output written once): 4 per element for the sums, 8 for
//! dot, softmax and layer norm, unfused too. Sizes: those of `benches/report.rs` (dot 2^26, sums `[16384, 4096]`,
//! softmax and layer norm `[4096, 4096]`, and more); on a CPU adapter (lavapipe binds at most 128 MiB) scaled down
//! to 2^22 elements and `[2048, 1024]` (`LAZOR_BENCH_REDUCE_SIZES=small|full` chooses). Every result is checked
//! against an f64 host computation before timing. Where no hardware GPU exists `Device::default()` is lazor's CPU
//! backend: `LAZOR_BACKEND=vulkan cargo bench --bench reductions` measures lavapipe instead.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput};
mod common;

use common::{uniform, ReduceCase, REDUCE_TOLERANCE};
use lazor::{Device, Tensor};

fn reductions(c: &mut Criterion) {
    // No adapter is a failure (Device::default panics with the reason), not a skip.
    let dev = Device::default();
    // lazor's CPU backend (the default where no hardware GPU exists; LAZOR_BACKEND=vulkan picks lavapipe instead) or
    // a software adapter: scaled-down sizes, 8 per synchronize.
    let cpu = dev.is_cpu() || dev.adapter_info().device_type == wgpu::DeviceType::Cpu;
    let small = match std::env::var("LAZOR_BENCH_REDUCE_SIZES").as_deref().map(str::trim) {
        Ok("small") => true,
        Ok("full") => false,
        _ => cpu,
    };
    let batch: u32 = if cpu { 8 } else { 32 };
    eprintln!("reductions: {}, max tensor bytes {}", dev.name(), dev.max_tensor_bytes());
    for case in ReduceCase::ALL {
        let mut g = c.benchmark_group(case.name());
        g.sampling_mode(SamplingMode::Flat);
        for shape in if small { case.small_shapes() } else { case.shapes() } {
            let label = ReduceCase::shape_label(&shape);
            let numel: usize = shape.iter().product();
            if numel as u64 * 4 > dev.max_tensor_bytes() {
                eprintln!(
                    "reductions: skipped {} {label}: {} bytes per tensor exceed max_tensor_bytes ({})",
                    case.name(),
                    numel * 4,
                    dev.max_tensor_bytes()
                );
                continue;
            }
            let host: Vec<Vec<f32>> = (0..case.inputs()).map(|j| uniform(numel, 21 + j as u64)).collect();
            let want = case.host(&host, &shape);
            let x: Vec<Tensor> = host.into_iter().map(|h| Tensor::from_vec(h, shape.clone())).collect();
            lazor::realize(&x.iter().collect::<Vec<_>>()).expect("upload inputs");
            for fuse in [true, false] {
                dev.set_fusion(fuse);
                let got = case.build(&x).to_vec();
                dev.set_fusion(true);
                let worst = ReduceCase::worst_error(&got, &want);
                assert!(worst <= REDUCE_TOLERANCE, "{} {label} (fused: {fuse}): relative error {worst:e}", case.name());
            }
            drop(want);
            for fuse in [true, false] {
                let mode = if fuse { "fused" } else { "unfused" };
                for k in [1, batch] {
                    g.throughput(Throughput::Bytes(k as u64 * numel as u64 * case.bytes_per_element()));
                    let sync = if k == 1 { "1".to_string() } else { format!("x{k}") };
                    dev.set_fusion(fuse);
                    g.bench_with_input(BenchmarkId::new(format!("{mode}/{sync}"), &label), &k, |bench, &k| {
                        bench.iter(|| {
                            for _ in 0..k {
                                case.build(&x).realize().expect("realize");
                            }
                            dev.synchronize().expect("synchronize");
                        })
                    });
                    dev.set_fusion(true);
                }
            }
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = common::criterion_config();
    targets = reductions
}
criterion_main!(benches);
