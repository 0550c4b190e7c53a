//! Criterion benchmarks of lazor's CPU backend against a hand-written rayon loop of the same math, the same graph
//! on wgpu (`Device::new()`: lavapipe on a machine without a GPU), the same expression in ndarray, and itself with
//! fusion off; then `x.sum(-1)` and `x.softmax(-1)` of `[4096, 4096]` against ndarray.
//!
//! ```text
//! cargo bench --bench cpu               # everything
//! cargo bench --bench cpu -- chain16    # one case
//! ```
//!
//! Benchmark ids are `<case>/<impl>/<elements>` (`<case>/<impl>/4096x4096` for the reductions), `impl` one of
//! `lazor_cpu` (`Device::cpu()`, fused: build over realized inputs, `realize()`, `synchronize()`), `rayon`
//! (`par_chunks_mut` over a reused output), `ndarray`, `lazor_cpu_unfused` (`set_fusion(false)`) and `wgpu`.
//! Throughput is the bytes of the ideal kernel for every impl: 16 per element elementwise (three f32 inputs read
//! once, one output written once), 4 for `sum(-1)`, 8 for softmax. Every result is checked against the host before
//! timing. `benches/report.rs` (`-- cpu`) prints the same as tables, with the ratios against the targets.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput};
mod common;

use common::{uniform, Case, ReduceCase, IDEAL_BYTES_PER_ELEMENT, REDUCE_TOLERANCE};
use lazor::{Device, Tensor};
use ndarray::{Array1, Array2};
use std::hint::black_box;

/// Inputs in [-1, 1), the same values as the example's (xorshift): `unary`'s libm calls take time that depends on
/// their argument, and a short period would let the branch predictor learn it.
fn inputs(n: usize, seed: u64) -> Vec<f32> {
    uniform(n, seed).into_iter().map(|v| v * 2.0 - 1.0).collect()
}

/// Panics unless `got` matches `want` within 1e-4 relative to `max(|want|, 1)`.
fn check(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let e = (g - w).abs() / w.abs().max(1.0);
        assert!(e <= 1e-4, "{what}: element {i} is {g}, the host's {w}");
    }
}

fn on(dev: &Device, host: &[Vec<f32>], shape: &[usize]) -> Vec<Tensor> {
    let x: Vec<Tensor> = host.iter().map(|h| Tensor::from_vec_on(h.clone(), shape.to_vec(), dev)).collect();
    lazor::realize(&x.iter().collect::<Vec<_>>()).expect("upload inputs");
    dev.synchronize().expect("synchronize");
    x
}

fn cpu(c: &mut Criterion) {
    let cpu = Device::cpu();
    // Without a wgpu adapter the wgpu rows are left out (said once), the rest still runs.
    let gpu = Device::new().map_err(|e| eprintln!("cpu: no wgpu adapter ({e}): no wgpu rows")).ok();
    eprintln!("cpu: {}; wgpu: {}", cpu.name(), gpu.as_ref().map_or("none".into(), |g| g.adapter_name()));

    for n in [1usize << 20, 1 << 24] {
        let host: Vec<Vec<f32>> = (1..=3).map(|s| inputs(n, s)).collect();
        let x = on(&cpu, &host, &[n]);
        let nd: Vec<Array1<f32>> = host.iter().map(|h| Array1::from_vec(h.clone())).collect();
        let gpu = gpu.as_ref().filter(|g| {
            let fits = g.max_tensor_bytes() >= n as u64 * 4;
            if !fits {
                eprintln!("cpu: no wgpu rows at {n} elements: over max_tensor_bytes ({})", g.max_tensor_bytes());
            }
            fits
        });
        let g = gpu.map(|d| on(d, &host, &[n]));
        let mut out = vec![0.0f32; n];
        for case in Case::ALL {
            let want: Vec<f32> = (0..n).map(|i| case.host(host[0][i], host[1][i], host[2][i])).collect();
            for fuse in [true, false] {
                cpu.set_fusion(fuse);
                check(
                    &format!("{} lazor cpu (fused: {fuse})", case.name()),
                    &case.build(&x[0], &x[1], &x[2]).to_vec(),
                    &want,
                );
            }
            cpu.set_fusion(true);
            case.rayon_into(&host[0], &host[1], &host[2], &mut out);
            check(&format!("{} rayon", case.name()), &out, &want);
            let y = case.ndarray(&nd[0], &nd[1], &nd[2]);
            check(&format!("{} ndarray", case.name()), y.as_slice().expect("contiguous"), &want);
            if let Some(g) = &g {
                check(&format!("{} wgpu", case.name()), &case.build(&g[0], &g[1], &g[2]).to_vec(), &want);
            }
            drop(want);

            let mut group = c.benchmark_group(case.name());
            group.sampling_mode(SamplingMode::Flat).throughput(Throughput::Bytes(n as u64 * IDEAL_BYTES_PER_ELEMENT));
            for (name, fuse) in [("lazor_cpu", true), ("lazor_cpu_unfused", false)] {
                cpu.set_fusion(fuse);
                group.bench_with_input(BenchmarkId::new(name, n), &n, |bench, _| {
                    bench.iter(|| {
                        case.build(&x[0], &x[1], &x[2]).realize().expect("realize");
                        cpu.synchronize().expect("synchronize");
                    })
                });
                cpu.set_fusion(true);
            }
            group.bench_with_input(BenchmarkId::new("rayon", n), &n, |bench, _| {
                bench.iter(|| {
                    case.rayon_into(&host[0], &host[1], &host[2], &mut out);
                    black_box(&mut out);
                })
            });
            group.bench_with_input(BenchmarkId::new("ndarray", n), &n, |bench, _| {
                bench.iter(|| black_box(case.ndarray(&nd[0], &nd[1], &nd[2])))
            });
            if let (Some(gpu), Some(g)) = (gpu, &g) {
                group.bench_with_input(BenchmarkId::new("wgpu", n), &n, |bench, _| {
                    bench.iter(|| {
                        case.build(&g[0], &g[1], &g[2]).realize().expect("realize");
                        gpu.synchronize().expect("synchronize");
                    })
                });
            }
            group.finish();
        }
    }

    let shape = [4096usize, 4096];
    let h = uniform(shape[0] * shape[1], 21);
    let nd = Array2::from_shape_vec((shape[0], shape[1]), h.clone()).expect("shape");
    let x = on(&cpu, std::slice::from_ref(&h), &shape);
    for case in [ReduceCase::SumRows, ReduceCase::Softmax] {
        let nd_run = || -> Vec<f32> {
            match case {
                ReduceCase::SumRows => common::ndarray_sum_rows(&nd).into_raw_vec_and_offset().0,
                _ => common::ndarray_softmax(&nd).into_raw_vec_and_offset().0,
            }
        };
        let want = case.host(std::slice::from_ref(&h), &shape);
        for fuse in [true, false] {
            cpu.set_fusion(fuse);
            let e = ReduceCase::worst_error(&case.build(&x).to_vec(), &want);
            assert!(e <= REDUCE_TOLERANCE, "{} lazor cpu (fused: {fuse}) differs from the host by {e:e}", case.name());
        }
        cpu.set_fusion(true);
        let e = ReduceCase::worst_error(&nd_run(), &want);
        assert!(e <= REDUCE_TOLERANCE, "{} ndarray differs from the host by {e:e}", case.name());
        drop(want);

        let label = ReduceCase::shape_label(&shape);
        let mut group = c.benchmark_group(case.name());
        group
            .sampling_mode(SamplingMode::Flat)
            .throughput(Throughput::Bytes((shape[0] * shape[1]) as u64 * case.bytes_per_element()));
        for (name, fuse) in [("lazor_cpu", true), ("lazor_cpu_unfused", false)] {
            cpu.set_fusion(fuse);
            group.bench_function(BenchmarkId::new(name, &label), |bench| {
                bench.iter(|| {
                    case.build(&x).realize().expect("realize");
                    cpu.synchronize().expect("synchronize");
                })
            });
            cpu.set_fusion(true);
        }
        group.bench_function(BenchmarkId::new("ndarray", &label), |bench| bench.iter(|| black_box(nd_run())));
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = common::criterion_config();
    targets = cpu
}
criterion_main!(benches);
