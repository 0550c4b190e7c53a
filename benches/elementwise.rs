//! Criterion benchmarks of lazor's elementwise kernels, fused and unfused, and of wgpu's own buffer copy.
//!
//! ```text
//! cargo bench --bench elementwise               # everything
//! cargo bench --bench elementwise -- chain16    # one case
//! LAZOR_BENCH_BIG=1 cargo bench --bench elementwise   # also 2^24+ on a CPU adapter (lavapipe)
//! ```
//!
//! Benchmark ids are `<case>/<mode>/<fused|unfused>/<elements>`: `resident` builds the expression over inputs
//! already on the device, then `realize()` and `synchronize()`; `to_vec` includes the read-back. Throughput is the
//! bytes the fused ideal moves (three f32 inputs read once, one f32 output written once: 16 bytes per element),
//! for the unfused rows too, so their GB/s compare directly. `copy/wgpu/<elements>` times one
//! `copy_buffer_to_buffer` of 4 bytes x elements per submit, then the wait, on lazor's own wgpu device
//! (`Device::wgpu_device()`), counting bytes read plus written (8 per element). `benches/report.rs` prints the same as a table.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput};
mod common;

use common::{Case, IDEAL_BYTES_PER_ELEMENT};
use lazor::{Device, Tensor};
use std::hint::black_box;

fn inputs(n: usize, k: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7 + k * 13) % 1024) as f32 / 512.0 - 1.0).collect()
}

fn elementwise(c: &mut Criterion) {
    // No adapter is a failure, not a skip: a benchmark that silently measures nothing hides the problem.
    let dev = Device::new().unwrap_or_else(|e| panic!("elementwise: no GPU adapter: {e}"));
    let big = std::env::var("LAZOR_BENCH_BIG").is_ok_and(|v| v.trim() == "1");
    let mut sizes = vec![1usize << 10, 1 << 16, 1 << 20, 1 << 24];
    if dev.max_tensor_bytes() >= 4 << 26 {
        sizes.push(1 << 26);
    }
    let cpu = dev.adapter_info().device_type == wgpu::DeviceType::Cpu;
    sizes.retain(|&n| big || !cpu || n < 1 << 24);
    eprintln!("elementwise: {} ({}), sizes {sizes:?}", dev.adapter_name(), dev.backend());

    drop(dev);
    for &n in &sizes {
        // A fresh device per size: lazor's pool keeps at most 1 GiB of free buffers and never evicts, so buffers
        // left from a smaller size would crowd out this size's intermediates and force reallocations.
        let dev = Device::new().expect("device");
        let a = Tensor::from_vec_on(inputs(n, 1), [n], &dev);
        let b = Tensor::from_vec_on(inputs(n, 2), [n], &dev);
        let t = Tensor::from_vec_on(inputs(n, 3), [n], &dev);
        lazor::realize(&[&a, &b, &t]).expect("upload inputs");
        dev.synchronize().expect("synchronize");
        for case in [Case::Chain3, Case::Chain16, Case::Unary] {
            for (mode, readback) in [("resident", false), ("to_vec", true)] {
                let mut g = c.benchmark_group(format!("{}/{mode}", case.name()));
                g.sampling_mode(SamplingMode::Flat).throughput(Throughput::Bytes(n as u64 * IDEAL_BYTES_PER_ELEMENT));
                for fuse in [true, false] {
                    dev.set_fusion(fuse);
                    let id = BenchmarkId::new(if fuse { "fused" } else { "unfused" }, n);
                    g.bench_with_input(id, &n, |bench, _| {
                        bench.iter(|| {
                            let y = case.build(&a, &b, &t);
                            if readback {
                                black_box(y.to_vec());
                            } else {
                                y.realize().expect("realize");
                                dev.synchronize().expect("synchronize");
                            }
                        })
                    });
                    dev.set_fusion(true);
                }
                g.finish();
            }
        }
    }

    // The copy runs on lazor's own wgpu device: the device's own copy rate, measured in the same run.
    let dev = Device::new().expect("device");
    let (device, queue) = (dev.wgpu().expect("a wgpu device").device(), dev.wgpu().expect("a wgpu device").queue());
    let mut g = c.benchmark_group("copy");
    g.sampling_mode(SamplingMode::Flat);
    for &n in &sizes {
        let bytes = n as u64 * 4;
        let buffer = |label| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        };
        let (src, dst) = (buffer("src"), buffer("dst"));
        g.throughput(Throughput::Bytes(2 * bytes));
        g.bench_with_input(BenchmarkId::new("wgpu", n), &n, |bench, _| {
            bench.iter(|| {
                let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("copy") });
                enc.copy_buffer_to_buffer(&src, 0, &dst, 0, bytes);
                queue.submit([enc.finish()]);
                device.poll(wgpu::PollType::wait_indefinitely()).expect("poll");
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = common::criterion_config();
    targets = elementwise
}
criterion_main!(benches);
