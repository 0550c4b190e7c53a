//! The CPU section's per-op table: each part of the `unary` case alone, on the CPU backend and on lavapipe, to show
//! what bounds the fused case's ratio between the two (its memory traffic plus its math on the host's cores).

use crate::timing::{measure, ms, Config};
use lazor::{Device, Tensor};

type Op = fn(&Tensor, &Tensor, &Tensor) -> Tensor;

/// The parts of `unary`, `sqrt(exp(a * 0.1) + abs(b)) * tanh(c)`, then the whole and chain3 for reference.
const OPS: [(&str, Op); 7] = [
    ("`a * 2` (one input, one output)", |a, _, _| a * 2.0),
    ("`(a * 0.1).exp()`", |a, _, _| (a * 0.1).exp()),
    ("`c.tanh()`", |_, _, c| c.tanh()),
    ("`b.abs().sqrt()`", |_, b, _| b.abs().sqrt()),
    ("`a.exp() + b.abs()`", |a, b, _| a.exp() + b.abs()),
    ("unary `sqrt(exp(a * 0.1) + abs(b)) * tanh(c)`", |a, b, c| ((a * 0.1).exp() + b.abs()).sqrt() * c.tanh()),
    ("chain3 `((a + b) * 5 - c) / 2`", |a, b, c| ((a + b) * 5.0 - c) / 2.0),
];

/// Three realized inputs of `n` elements in [-1, 1) on `dev`.
fn inputs(dev: &Device, n: usize) -> [Tensor; 3] {
    let t = [1, 2, 3].map(|s| Tensor::from_vec_on(crate::timing::inputs(n, s), [n], dev));
    lazor::realize(&t.iter().collect::<Vec<_>>()).expect("upload inputs");
    t
}

/// Prints the table for `n` elements; lavapipe's column is left out where `gpu` is `None`.
pub fn run(cpu: &Device, gpu: Option<&Device>, cfg: &Config, n: usize) {
    println!("\n### The parts of `unary` on the CPU backend and on lavapipe, 2^{}\n", n.trailing_zeros());
    println!("| expression | lazor CPU ms | lavapipe ms | lavapipe / lazor CPU |");
    println!("|---|---:|---:|---:|");
    let time = |dev: &Device, f: Op| {
        let [a, b, c] = inputs(dev, n);
        measure(cfg, || {
            f(&a, &b, &c).realize().expect("realize");
            dev.synchronize().expect("synchronize");
        })
        .median
    };
    for (name, f) in OPS {
        let c = time(cpu, f);
        match gpu {
            Some(g) => {
                let l = time(g, f);
                println!("| {name} | {} | {} | {:.2}x |", ms(c), ms(l), l.as_secs_f64() / c.as_secs_f64());
            }
            None => println!("| {name} | {} | - | - |", ms(c)),
        }
    }
}
