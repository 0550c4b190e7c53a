//! The training-ops section: an embedding lookup and its gradient, cross-entropy forward and backward, at the
//! shapes of PyTorch's reference (`benches/torch_bench.py ops`), on the default device.

use crate::timing::{gbs, measure, Config};
use lazor::{Device, Tensor, Var};

/// One timed case: a name, what it moves or computes, and the realize it times.
struct Case<'a> {
    name: &'a str,
    rate: Rate,
    run: Box<dyn Fn() + 'a>,
}

enum Rate {
    Bytes(u64),
    Flops(u64),
}

/// Times each case as `cfg.batch` realizes then one `synchronize`; prints a markdown table.
pub fn run(dev: &Device, cfg: &Config, small: bool) -> bool {
    // PyTorch's shapes on a GPU; a twentieth of them on a CPU or a software adapter.
    let (vocab, width, tokens, classes) = if small { (2_513, 768, 410, 2_513) } else { (50_257, 768, 8_192, 50_257) };
    println!("## lazor training-ops benchmark\n");
    println!("- device: {}; {}; x{} = that many realizes per synchronize", dev.name(), cfg.method(), cfg.batch);
    println!("- rates count each input read and each output written once, as PyTorch's reference script does\n");
    println!("| case | ms (x{}) | rate |", cfg.batch);
    println!("|---|---:|---:|");
    let table = Tensor::randn_on([vocab, width], 1, dev) + 0.0;
    let ids = (Tensor::rand_on([tokens], 2, dev) * vocab as f32).to_dtype(lazor::DType::I32);
    let upstream = Tensor::randn_on([tokens, width], 3, dev) + 0.0;
    let logits = Var::new(Tensor::randn_on([tokens, classes], 4, dev) + 0.0);
    let targets = (Tensor::rand_on([tokens], 5, dev) * classes as f32).to_dtype(lazor::DType::I32);
    lazor::realize(&[&table, &ids, &upstream, &logits.tensor(), &targets]).expect("inputs");
    let rows = (tokens * width * 4) as u64;
    // Token ids as a training step has them: host data, fresh each step.
    let host_ids: Vec<i32> = crate::common::uniform(tokens, 6).iter().map(|u| (u * vocab as f32) as i32).collect();
    // A ResNet stage's 3x3 convolution, stride 1, padding 1.
    let (batch, chans, side) = if small { (4, 16, 28) } else { (64, 64, 56) };
    let image = Var::new(Tensor::randn_on([batch, chans, side, side], 7, dev) + 0.0);
    let kernel = Var::new(Tensor::randn_on([chans, chans, 3, 3], 8, dev) * 0.1);
    lazor::realize(&[&image.tensor(), &kernel.tensor()]).expect("conv inputs");
    let flops = (2 * batch * chans * side * side * chans * 9) as u64;
    let conv = || image.tensor().conv2d(&kernel.tensor(), None, (1, 1), (1, 1));
    let mut cases = vec![
        Case {
            name: "`table.index_select(0, ids)` (embedding lookup)",
            rate: Rate::Bytes(2 * rows),
            run: Box::new(|| keep(table.index_select(0, &ids))),
        },
        Case {
            name: "`zeros.index_add(0, ids, g)`, host ids (embedding gradient)",
            rate: Rate::Bytes(2 * rows),
            run: Box::new(|| {
                let ids = Tensor::from_slice_on(&host_ids, [tokens], dev);
                keep(Tensor::zeros_on([vocab, width], dev).index_add(0, &ids, &upstream))
            }),
        },
        Case {
            name: "`logits.cross_entropy(targets)`",
            rate: Rate::Bytes((tokens * classes * 4) as u64),
            run: Box::new(|| keep(logits.tensor().cross_entropy(&targets))),
        },
        Case {
            name: "`logits.logsumexp(1)`",
            rate: Rate::Bytes((tokens * classes * 4) as u64),
            run: Box::new(|| keep(logits.tensor().logsumexp(1))),
        },
        Case {
            name: "cross-entropy forward + backward",
            rate: Rate::Bytes((3 * tokens * classes * 4) as u64),
            run: Box::new(|| {
                let loss = logits.tensor().cross_entropy(&targets);
                let g = loss.backward().get(&logits).expect("a gradient");
                lazor::realize(&[&loss, &g]).expect("realize");
            }),
        },
    ];
    cases.push(Case {
        name: "`x.conv2d(w)` [N, 64, 56, 56] x [64, 64, 3, 3]",
        rate: Rate::Flops(flops),
        run: Box::new(|| keep(conv())),
    });
    cases.push(Case {
        name: "conv2d forward + backward (`sum` loss)",
        rate: Rate::Flops(3 * flops),
        run: Box::new(|| {
            let loss = conv().sum_all();
            let grads = loss.backward();
            let (gx, gw) = (grads.get(&image).expect("dx"), grads.get(&kernel).expect("dw"));
            lazor::realize(&[&loss, &gx, &gw]).expect("realize");
        }),
    });
    if !small {
        // A fold per output element over the whole index: what ids computed on the device cost.
        cases.push(Case {
            name: "`zeros.index_add(0, ids, g)`, device ids",
            rate: Rate::Bytes(2 * rows),
            run: Box::new(|| keep(Tensor::zeros_on([vocab, width], dev).index_add(0, &ids, &upstream))),
        });
    }
    for case in &cases {
        let t = measure(cfg, || {
            for _ in 0..cfg.batch {
                (case.run)();
            }
            dev.synchronize().expect("synchronize");
        })
        .per(cfg.batch);
        let secs = t.median.as_secs_f64();
        let rate = match case.rate {
            Rate::Bytes(b) => format!("{:.0} GB/s", gbs(b, t.median)),
            Rate::Flops(f) => format!("{:.1} TFLOP/s", f as f64 / secs / 1e12),
        };
        println!("| {} | {:.4} | {rate} |", case.name, secs * 1e3);
    }
    true
}

/// Realizes `t` (its buffer is freed when the handle drops, after the batch's work is queued).
fn keep(t: Tensor) {
    t.realize().expect("realize");
}
