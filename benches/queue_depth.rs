//! Measures 32 realizes in a row, then one `synchronize`, at queue depths 0 to 3: the figures behind lazor's
//! default `LAZOR_QUEUE_DEPTH`. Run with `cargo bench --bench queue_depth` (on a GPU: the default device).

use lazor::{Device, Tensor};
use std::time::Instant;

fn main() {
    let dev = Device::default();
    println!("device: {}", dev.name());
    // The reductions benchmark's shapes: a 256 MiB row and column sum, a 64 MiB softmax and layer norm.
    let (rows, cols) = if dev.max_tensor_bytes() >= 1 << 28 { (16384, 4096) } else { (4096, 4096) };
    let fill = |r: usize, c: usize| {
        Tensor::from_vec_on((0..r * c).map(|i| (i % 1000) as f32 * 1e-3).collect::<Vec<f32>>(), [r, c], &dev)
    };
    let big = fill(rows, cols);
    let square = fill(4096, 4096);
    big.realize().expect("upload");
    square.realize().expect("upload");
    for depth in [1, 2, 3, 0] {
        if let Some(gpu) = dev.wgpu() {
            gpu.set_queue_depth(depth);
        }
        for case in ["sum(-1)", "sum(0)", "softmax(-1)", "layer norm"] {
            let make = || match case {
                "sum(-1)" => big.sum(-1),
                "sum(0)" => big.sum(0),
                "softmax(-1)" => square.softmax(-1),
                _ => (&square - square.mean_keepdim(-1)) / (square.var_keepdim(-1) + 1e-5).sqrt(),
            };
            let bytes = if case.starts_with("sum") { 4 * rows * cols } else { 8 * 4096 * 4096 } as f64;
            for _ in 0..3 {
                make().realize().expect("warm-up");
            }
            dev.synchronize().expect("synchronize");
            let submits = dev.stats().submits;
            let mut us = Vec::new();
            for _ in 0..25 {
                let start = Instant::now();
                let mut last = None;
                for _ in 0..32 {
                    let t = make();
                    t.realize().expect("realize");
                    last = Some(t);
                }
                dev.synchronize().expect("synchronize");
                drop(last);
                us.push(start.elapsed().as_secs_f64() * 1e6 / 32.0);
            }
            us.sort_by(f64::total_cmp);
            let median = us[us.len() / 2];
            println!(
                "depth {depth} {case:<12} {median:7.1} us/realize {:7.0} GB/s  {:5.1} submits per 32",
                bytes / median / 1e3,
                (dev.stats().submits - submits) as f64 / 25.0
            );
        }
    }
}
