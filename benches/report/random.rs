//! The random-numbers section: `rand` and `randn` drawn into a buffer, and noise added inside a kernel, against
//! a constant written the same way (the device's write rate through lazor), on the default device.

use crate::timing::{gbs, measure, size_name, Config};
use lazor::{Device, Tensor};

/// Times each case at each size as `cfg.batch` realizes then one `synchronize`; prints a markdown table.
pub fn run(dev: &Device, cfg: &Config, log2: &[u32]) -> bool {
    println!("## lazor random-numbers benchmark\n");
    println!("- device: {}; {}; x{} = that many realizes per synchronize", dev.name(), cfg.method(), cfg.batch);
    println!("- bytes: 4 per element written (draws), 12 per element for `x + randn * 0.1` (read x, write the sum)\n");
    println!("| case | elements | ms (x{}) | GB/s | of the constant fill |", cfg.batch);
    println!("|---|---:|---:|---:|---:|");
    for &l in log2 {
        let n = 1usize << l;
        let x = Tensor::ones_on([n], dev) + 0.0;
        x.realize().expect("realize x");
        type Build<'a> = Box<dyn Fn() -> Tensor + 'a>;
        let cases: [(&str, Build, u64); 4] = [
            ("constant fill `full(1.0)`", Box::new(|| Tensor::full_on([n], 1.0f32, dev)), 4),
            ("`Tensor::rand`", Box::new(|| Tensor::rand_on([n], 7, dev)), 4),
            ("`Tensor::randn`", Box::new(|| Tensor::randn_on([n], 7, dev)), 4),
            ("`x + randn(x.shape()) * 0.1`", Box::new(|| &x + Tensor::randn_on([n], 7, dev) * 0.1), 12),
        ];
        let mut fill = None;
        for (name, build, bytes) in &cases {
            let t = measure(cfg, || {
                let outs: Vec<Tensor> = (0..cfg.batch).map(|_| build()).collect();
                for o in &outs {
                    o.realize().expect("realize");
                }
                dev.synchronize().expect("synchronize");
            })
            .per(cfg.batch);
            let rate = gbs(bytes * n as u64, t.median);
            let share = fill.map_or("-".to_string(), |f: f64| format!("{:.0}%", rate / f * 100.0));
            fill.get_or_insert(rate);
            println!("| {name} | {} | {:.4} | {rate:.0} | {share} |", size_name(n), t.median.as_secs_f64() * 1e3);
        }
    }
    true
}
