//! Criterion benchmarks of lazor's matmul on one device (`Device::default()`), for catching regressions: square
//! products, a fused bias and activation, a transposed operand, matrix-vector products and a batch.
//!
//! ```text
//! cargo bench --bench matmul
//! LAZOR_BACKEND=vulkan cargo bench --bench matmul   # lavapipe where there is no GPU
//! ```
//!
//! Ids are `<case>/<n>`. Each iteration builds the expression, `realize()`s it and `synchronize()`s; throughput is
//! the multiply-adds' FLOPs counted as elements (2 m n k), or the matrix's bytes for matrix-vector products. Sizes
//! are small on the CPU backend and on software adapters (n = 256) and GPU-sized elsewhere (n = 2048). Each case is
//! checked against an f64 host product before timing.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
mod common;

use common::uniform;
use lazor::{Device, Tensor};

/// `a [m, k]` times `b [k, n]`, row-major, in f64.
fn host_matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let x = a[i * k + p] as f64;
            for j in 0..n {
                out[i * n + j] += x * b[p * n + j] as f64;
            }
        }
    }
    out
}

fn matmul(c: &mut Criterion) {
    let dev = Device::default();
    let small = dev.is_cpu() || dev.adapter_info().device_type == wgpu::DeviceType::Cpu;
    let n = if small { 256 } else { 2048 };
    eprintln!("matmul: {}, n = {n}", dev.name());
    let (ha, hb, hv) = (uniform(n * n, 1), uniform(n * n, 2), uniform(n, 3));
    let a = Tensor::from_vec(ha.clone(), [n, n]);
    let b = Tensor::from_vec(hb.clone(), [n, n]);
    let bias = Tensor::from_vec(hv.clone(), [n]);
    let v = Tensor::from_vec(hv.clone(), [1, n]);
    lazor::realize(&[&a, &b, &bias, &v]).expect("upload inputs");

    // Correctness first: the plain product and the matrix-vector product against f64.
    let want = host_matmul(&ha, &hb, n, n, n);
    let got = a.matmul(&b).to_vec();
    // Inputs are in [0, 1), so each output is its own sum of absolute terms: k roundings of at most that size.
    let close = |g: f32, w: f64| (g as f64 - w).abs() <= n as f64 * f32::EPSILON as f64 * w.abs() + 1e-6;
    assert!(got.iter().zip(&want).all(|(g, w)| close(*g, *w)), "matmul is wrong");
    let want = host_matmul(&hv, &hb, 1, n, n);
    let got = v.matmul(&b).to_vec();
    assert!(got.iter().zip(&want).all(|(g, w)| close(*g, *w)), "matrix-vector product is wrong");

    let flops = 2 * (n * n * n) as u64;
    type Build<'a> = Box<dyn Fn() -> Tensor + 'a>;
    let cases: [(&str, u64, Build); 5] = [
        ("matmul", flops, Box::new(|| a.matmul(&b))),
        ("bias_relu", flops, Box::new(|| (a.matmul(&b) + &bias).relu())),
        ("transposed", flops, Box::new(|| a.matmul(&b.t()))),
        ("gemv", (n * n * 4) as u64, Box::new(|| v.matmul(&b))),
        ("gemv_rows", (n * n * 4) as u64, Box::new(|| a.matmul(&v.t()))),
    ];
    let mut g = c.benchmark_group("matmul");
    for (name, work, build) in &cases {
        g.throughput(if name.starts_with("gemv") { Throughput::Bytes(*work) } else { Throughput::Elements(*work) });
        g.bench_function(BenchmarkId::new(*name, n), |bench| {
            bench.iter(|| {
                build().realize().unwrap();
                dev.synchronize().unwrap();
            })
        });
    }
    let (batch, s) = if small { (8, 64) } else { (64, 256) };
    let x = Tensor::from_vec(uniform(batch * s * s, 4), [batch, s, s]);
    let y = Tensor::from_vec(uniform(batch * s * s, 5), [batch, s, s]);
    lazor::realize(&[&x, &y]).expect("upload inputs");
    g.throughput(Throughput::Elements(2 * (batch * s * s * s) as u64));
    g.bench_function(BenchmarkId::new("batched", format!("{batch}x{s}")), |bench| {
        bench.iter(|| {
            x.matmul(&y).realize().unwrap();
            dev.synchronize().unwrap();
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = common::criterion_config();
    targets = matmul
}
criterion_main!(benches);
