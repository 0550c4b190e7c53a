//! Criterion benchmarks of lazor's zero-copy views against plain kernels of the same size, in one run on one
//! device (`Device::default()`), the way a user's program runs them.
//!
//! ```text
//! cargo bench --bench views                    # everything
//! cargo bench --bench views -- transpose_add   # one case
//! ```
//!
//! Benchmark ids are `<case>/<view|plain>/<1|xK>/<size>`: `view` is `a.t() + b` (`transpose_add`, square
//! `[n, n]` inputs, n = 4096 and 8192) or `Tensor::cat(&[&a, &b], 0) * 2.0` (`cat`, 2^24 and 2^26 elements in
//! all); `plain` is the same arithmetic over contiguous inputs of the same size (`a + b`, `a2 * 2.0`). `1` builds
//! the expression, `realize()`s it and `synchronize()`s; `xK` does K realizes (32, or 8 on a CPU adapter) then one
//! synchronize. Throughput is the bytes the ideal kernel moves: 12 per element for `transpose_add` (two reads, one
//! write), 8 for `cat`. Sizes whose tensors exceed `Device::max_tensor_bytes` (lavapipe: 128 MiB) are skipped with
//! a note on stderr. `benches/report.rs -- views` prints the same as a table.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput};
mod common;

use common::ViewCase;
use lazor::{Device, Tensor};

fn inputs(n: usize, k: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7 + k * 13) % 1024) as f32 / 512.0 - 1.0).collect()
}

fn views(c: &mut Criterion) {
    // No adapter is a failure (Device::default panics with the reason), not a skip.
    let dev = Device::default();
    let cpu = dev.is_cpu() || dev.adapter_info().device_type == wgpu::DeviceType::Cpu;
    let batch: u32 = if cpu { 8 } else { 32 };
    eprintln!("views: {}, max tensor bytes {}", dev.name(), dev.max_tensor_bytes());
    for case in ViewCase::ALL {
        for log2 in ViewCase::DEFAULT_LOG2 {
            let numel = 1usize << log2;
            let label = case.size_label(numel);
            if numel as u64 * 4 > dev.max_tensor_bytes() {
                eprintln!(
                    "views: skipped {} {label}: {} bytes per tensor exceed max_tensor_bytes ({})",
                    case.name(),
                    numel * 4,
                    dev.max_tensor_bytes()
                );
                continue;
            }
            let host: Vec<Vec<f32>> =
                case.input_shapes(numel).iter().enumerate().map(|(k, s)| inputs(s.iter().product(), k)).collect();
            let x: Vec<Tensor> =
                host.iter().zip(case.input_shapes(numel)).map(|(h, s)| Tensor::from_vec(h.clone(), s)).collect();
            lazor::realize(&x.iter().collect::<Vec<_>>()).expect("upload inputs");
            // Spot check against the host before timing: the first and last elements and a stride through the rest.
            for (view, got) in [(true, case.build_view(&x).to_vec()), (false, case.build_plain(&x).to_vec())] {
                for i in (0..numel).step_by(numel / 4099).chain([numel - 1]) {
                    let want = if view { case.host_view(&host, i) } else { case.host_plain(&host, i) };
                    assert_eq!(got[i], want, "{} (view: {view}) element {i}", case.name());
                }
            }
            drop(host);
            let mut g = c.benchmark_group(case.name());
            g.sampling_mode(SamplingMode::Flat);
            for view in [true, false] {
                let build = || if view { case.build_view(&x) } else { case.build_plain(&x) };
                let mode = if view { "view" } else { "plain" };
                for k in [1, batch] {
                    g.throughput(Throughput::Bytes(k as u64 * numel as u64 * case.bytes_per_element()));
                    let sync = if k == 1 { "1".to_string() } else { format!("x{k}") };
                    g.bench_with_input(BenchmarkId::new(format!("{mode}/{sync}"), &label), &k, |bench, &k| {
                        bench.iter(|| {
                            for _ in 0..k {
                                build().realize().expect("realize");
                            }
                            dev.synchronize().expect("synchronize");
                        })
                    });
                }
            }
            g.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = common::criterion_config();
    targets = views
}
criterion_main!(benches);
