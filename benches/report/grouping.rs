//! Independent kernels one by one and grouped two to a dispatch (`Device::set_grouping`), on one device: sets
//! of small folds and maps that fusion cannot merge (other shapes, other kinds), and large folds. Each cell
//! alternates the two settings run by run, so both see the same clock.

use crate::timing::{measure_parts, Config};
use lazor::{Device, Tensor};
use std::time::{Duration, Instant};

type Case<'a> = (&'static str, Box<dyn Fn() -> Vec<Tensor> + 'a>);

/// Prints, per case, its kernels, the dispatches of each setting and the median time of one realize of all of
/// them (`cfg.batch` realizes per synchronize); grouping restored to what it was.
pub fn run(dev: &Device, cfg: &Config, small: bool) -> bool {
    let was = dev.grouping();
    // A sixteenth of the rows of each large input on a CPU or software adapter.
    let rows = if small { 1024 } else { 16384 };
    let fill = |dims: &[usize], seed: u64| Tensor::randn_on(dims, seed, dev) + 0.0;
    let same: Vec<Tensor> = (0..64).map(|i| fill(&[64, 384], i)).collect();
    let odd: Vec<Tensor> = (0..64).map(|i| fill(&[64 + i as usize, 384], 100 + i)).collect();
    let large: Vec<Tensor> = (0..8).map(|i| fill(&[rows, 384], 200 + i)).collect();
    let all: Vec<&Tensor> = same.iter().chain(&odd).chain(&large).collect();
    lazor::realize(&all).expect("inputs");
    let cases: Vec<Case> = vec![
        ("64 column sums of [64, 384]", Box::new(|| same.iter().map(|t| t.sum(0)).collect())),
        ("64 maps of [64 + i, 384]", Box::new(|| odd.iter().map(|t| (t * 2.0).exp()).collect())),
        ("64 row sums of [64 + i, 384]", Box::new(|| odd.iter().map(|t| t.sum(1)).collect())),
        ("8 column sums of [rows, 384]", Box::new(|| large.iter().map(|t| t.sum(0)).collect())),
    ];
    println!("## lazor grouped-dispatch benchmark\n");
    println!("- device: {}; {}; x{} = realizes per synchronize; rows = {rows}\n", dev.name(), cfg.method(), cfg.batch);
    println!("| case | kernels | dispatches alone | grouped | us alone | us grouped | alone / grouped |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (name, make) in &cases {
        let counts = |on: bool| {
            dev.set_grouping(on);
            let before = dev.stats();
            let outs = make();
            lazor::realize(&outs.iter().collect::<Vec<_>>()).expect("realize");
            let after = dev.stats();
            (after.kernels - before.kernels, after.dispatches - before.dispatches)
        };
        let ((kernels, alone), (_, grouped)) = (counts(false), counts(true));
        let time = |on: bool| {
            dev.set_grouping(on);
            let start = Instant::now();
            for _ in 0..cfg.batch {
                let outs = make();
                lazor::realize(&outs.iter().collect::<Vec<_>>()).expect("realize");
            }
            dev.synchronize().expect("synchronize");
            start.elapsed() / cfg.batch
        };
        let [off, on] = measure_parts::<2>(cfg, || -> [Duration; 2] { [time(false), time(true)] });
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "| {name} | {kernels} | {alone} | {grouped} | {:.1} | {:.1} | {:.2} |",
            us(off.median),
            us(on.median),
            us(off.median) / us(on.median)
        );
    }
    dev.set_grouping(was);
    true
}
