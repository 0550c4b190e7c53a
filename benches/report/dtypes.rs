//! The element-type section of the benchmark: chain3 in f32, f16 (native and packed), bf16, and a bool mask, and
//! matmul in f32, f16 and bf16, on one device in one process.

use crate::timing::{gbs, measure, ms, Config};
use lazor::half::{bf16, f16};
use lazor::{DType, Device, Tensor};

/// `n` inputs of `dt`, realized.
fn inputs(dev: &Device, dt: DType, n: usize, seed: u64) -> Tensor {
    let v = crate::timing::inputs(n, seed);
    let t = match dt {
        DType::F16 => Tensor::from_vec_on(v.iter().map(|&x| f16::from_f32(x)).collect(), [n], dev),
        DType::BF16 => Tensor::from_vec_on(v.iter().map(|&x| bf16::from_f32(x)).collect(), [n], dev),
        _ => Tensor::from_vec_on(v, [n], dev),
    };
    t.realize().unwrap();
    t
}

fn chain3(a: &Tensor, b: &Tensor, c: &Tensor) -> Tensor {
    ((a + b) * 5.0 - c) / 2.0
}

/// Runs the section on `dev`; `log2` are the chain3 sizes, `mm` the matmul side.
pub fn run(dev: &Device, cfg: &Config, log2: &[u32], mm: usize) -> bool {
    println!("\n## lazor element-type benchmark\n");
    println!(
        "- device: {}; native f16: {}; tensor cores: {}; bf16 tensor cores (SPIR-V): {}; int64: {}; one device for the whole section; median of up to {} runs of x{} realizes \
         then `synchronize()`; GB/s of the bytes each case must move (inputs read once, output written once)",
        dev.name(),
        dev.wgpu().is_some_and(|g| g.native_f16()),
        dev.wgpu().is_some_and(|g| g.tensor_cores()),
        dev.wgpu().is_some_and(|g| g.bf16_tensor_cores()),
        dev.wgpu().is_some_and(|g| g.int64()),
        cfg.runs,
        cfg.batch
    );
    println!();
    println!("| case | n | dtype | dispatches | ms | GB/s | time / f32's |");
    println!("|---|---|---|---|---|---|---|");
    let native = dev.wgpu().is_some_and(|g| g.native_f16());
    // Two passes over the sizes: the first allocates each case's buffers, the second reuses them from the pool.
    for (pass, &l) in log2.iter().chain(log2).enumerate() {
        let pass = if pass < log2.len() { "" } else { ", 2nd pass" };
        let n = 1usize << l;
        let mut f32_ms = None;
        for (dt, packed, label) in [
            (DType::F32, false, "f32"),
            (DType::F16, false, if native { "f16 (native)" } else { "f16 (packed)" }),
            (DType::F16, true, "f16 (packed)"),
            (DType::BF16, false, "bf16"),
            // Again, last: a slower repeat means the process slowed down, not the type (see issue "core speed").
            (DType::F32, false, "f32, again"),
        ] {
            if packed && !native {
                continue;
            }
            if let Some(gpu) = dev.wgpu() {
                gpu.set_native_f16(native && !packed);
            }
            let (a, b, c) = (inputs(dev, dt, n, 1), inputs(dev, dt, n, 2), inputs(dev, dt, n, 3));
            let before = dev.stats().dispatches;
            chain3(&a, &b, &c).realize().unwrap();
            let dispatches = dev.stats().dispatches - before;
            let t = measure(cfg, || {
                for _ in 0..cfg.batch {
                    chain3(&a, &b, &c).realize().unwrap();
                }
                dev.synchronize().unwrap();
            })
            .per(cfg.batch)
            .median;
            let base = *f32_ms.get_or_insert(t.as_secs_f64());
            let bytes = (4 * n * dt.size_in_bytes()) as u64;
            println!(
                "| chain3 | 2^{l}{pass} | {label} | {dispatches} | {} | {:.0} | {:.2} |",
                ms(t),
                gbs(bytes, t),
                t.as_secs_f64() / base
            );
        }
        if let Some(gpu) = dev.wgpu() {
            gpu.set_native_f16(native);
        }
        // A mask and a select: f32 in, bool mask (1 byte) out, then where_cond reading it back.
        let x = inputs(dev, DType::F32, n, 4);
        let mask = x.gt(0.0);
        mask.realize().unwrap();
        let t_mask = measure(cfg, || {
            for _ in 0..cfg.batch {
                x.gt(0.0).realize().unwrap();
            }
            dev.synchronize().unwrap();
        })
        .per(cfg.batch)
        .median;
        println!("| x.gt(0.0) | 2^{l} | f32 -> bool | 1 | {} | {:.0} | |", ms(t_mask), gbs(5 * n as u64, t_mask));
        let t_sel = measure(cfg, || {
            for _ in 0..cfg.batch {
                mask.where_cond(&x, 0.0).realize().unwrap();
            }
            dev.synchronize().unwrap();
        })
        .per(cfg.batch)
        .median;
        println!(
            "| mask.where_cond(&x, 0.0) | 2^{l} | bool, f32 -> f32 | 1 | {} | {:.0} | |",
            ms(t_sel),
            gbs(9 * n as u64, t_sel)
        );
        // The leaky select, mask and both branches in one kernel: x read once, the result written.
        let leaky = || x.gt(0.0).where_cond(&x, &(&x * 0.01));
        let before = dev.stats().dispatches;
        leaky().realize().unwrap();
        let dispatches = dev.stats().dispatches - before;
        let t_leaky = measure(cfg, || {
            for _ in 0..cfg.batch {
                leaky().realize().unwrap();
            }
            dev.synchronize().unwrap();
        })
        .per(cfg.batch)
        .median;
        println!(
            "| x.gt(0.0).where_cond(&x, &(&x * 0.01)) | 2^{l} | f32 -> f32 | {dispatches} | {} | {:.0} | |",
            ms(t_leaky),
            gbs(8 * n as u64, t_leaky)
        );
    }
    products(dev, cfg, &[mm])
}

/// The product table: `a.matmul(&b)` of `n x n` operands for each `n` of `sizes`, in every element type and on
/// every path the device has (tensor cores through WGSL for f16, through the SPIR-V path for bf16; tiled).
pub fn products(dev: &Device, cfg: &Config, sizes: &[usize]) -> bool {
    let native = dev.wgpu().is_some_and(|g| g.native_f16());
    println!();
    println!("| matmul | n | dtype | ms | TFLOP/s |");
    println!("|---|---|---|---|---|");
    for &mm in sizes {
        let cores = dev.wgpu().is_some_and(|g| g.tensor_cores());
        let bf16_cores = dev.wgpu().is_some_and(|g| g.bf16_tensor_cores());
        // (dtype, f16 packed, tensor cores, label)
        let cases = [
            (DType::F32, false, false, "f32"),
            (DType::F16, false, true, "f16 (tensor cores)"),
            (DType::F16, false, false, "f16 (tiled)"),
            (DType::F16, true, false, "f16 (packed)"),
            (DType::BF16, false, true, "bf16 (tensor cores, SPIR-V)"),
            (DType::BF16, false, false, "bf16 (tiled)"),
        ];
        for (dt, packed, on_cores, label) in cases {
            let has = if dt == DType::BF16 { bf16_cores } else { cores };
            if (packed && !native) || (on_cores && !has) {
                continue;
            }
            if let Some(gpu) = dev.wgpu() {
                gpu.set_native_f16(native && !packed);
            }
            if let Some(gpu) = dev.wgpu() {
                gpu.set_tensor_cores(on_cores);
            }
            let a = inputs(dev, dt, mm * mm, 5).reshape([mm, mm]);
            let b = inputs(dev, dt, mm * mm, 6).reshape([mm, mm]);
            a.matmul(&b).realize().unwrap();
            let t = measure(cfg, || {
                for _ in 0..cfg.batch {
                    a.matmul(&b).realize().unwrap();
                }
                dev.synchronize().unwrap();
            })
            .per(cfg.batch)
            .median;
            println!(
                "| a.matmul(&b) | {mm} | {label} | {} | {:.2} |",
                ms(t),
                2.0 * (mm as f64).powi(3) / t.as_secs_f64() / 1e12
            );
        }
        if let Some(gpu) = dev.wgpu() {
            gpu.set_native_f16(native);
        }
        if let Some(gpu) = dev.wgpu() {
            gpu.set_tensor_cores(cores);
        }
    }
    true
}
