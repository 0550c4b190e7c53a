//! The matmul section of the benchmark: the cases of `torch_reference.py matmul` on one device, in one process.

use crate::timing::{self, measure, measure_parts, ms, Config};
use lazor::{Device, Tensor};
use std::time::{Duration, Instant};

/// One case: a name, the work it does (FLOPs, or bytes for a memory-bound one) and how to build it.
struct Case {
    name: &'static str,
    /// `true`: the rate is GB/s of `work` bytes; `false`: TFLOP/s of `work` FLOPs.
    bytes: bool,
    work: f64,
    inputs: Vec<Vec<usize>>,
    build: fn(&[Tensor]) -> Tensor,
}

fn flops(m: usize, n: usize, k: usize, batch: usize) -> f64 {
    2.0 * (m * n * k * batch) as f64
}

fn cases(small: bool) -> Vec<Case> {
    // Square sizes: torch_reference.py's on a GPU; a software adapter gets a tenth of the work or less.
    let (big, mid) = if small { (512, 256) } else { (4096, 1024) };
    let square = |name, n: usize| Case {
        name,
        bytes: false,
        work: flops(n, n, n, 1),
        inputs: vec![vec![n, n], vec![n, n]],
        build: |t| t[0].matmul(&t[1]),
    };
    let mut v = vec![
        square("matmul (large)", big),
        Case {
            name: "relu(x.matmul(w) + bias) (large)",
            bytes: false,
            work: flops(big, big, big, 1),
            inputs: vec![vec![big, big], vec![big, big], vec![big]],
            build: |t| (t[0].matmul(&t[1]) + &t[2]).relu(),
        },
        Case {
            name: "x.matmul(w.t()) (large)",
            bytes: false,
            work: flops(big, big, big, 1),
            inputs: vec![vec![big, big], vec![big, big]],
            build: |t| t[0].matmul(&t[1].t()),
        },
        square("matmul (mid)", mid),
        Case {
            name: "gemv [1, n] x [n, n] (GB/s of the matrix)",
            bytes: true,
            work: (big * big * 4) as f64,
            inputs: vec![vec![1, big], vec![big, big]],
            build: |t| t[0].matmul(&t[1]),
        },
        Case {
            name: "gemv [n, n] x [n] (GB/s of the matrix)",
            bytes: true,
            work: (big * big * 4) as f64,
            inputs: vec![vec![big, big], vec![big]],
            build: |t| t[0].matmul(&t[1]),
        },
    ];
    // The floor: a realize of one tiny elementwise kernel.
    v.push(Case {
        name: "floor: x + 1.0 over 1024 elements (GB/s of x)",
        bytes: true,
        work: 4096.0,
        inputs: vec![vec![1024]],
        build: |t| &t[0] + 1.0,
    });
    let (b, s) = if small { (8, 128) } else { (64, 256) };
    v.push(Case {
        name: "batched [b, s, s] x [b, s, s]",
        bytes: false,
        work: flops(s, s, s, b),
        inputs: vec![vec![b, s, s], vec![b, s, s]],
        build: |t| t[0].matmul(&t[1]),
    });
    v
}

/// Runs the section on `dev`; `small` scales sizes down for a software adapter.
pub fn run(dev: &Device, cfg: &Config, small: bool) -> bool {
    println!("\n## lazor matmul benchmark\n");
    println!(
        "- device: {}; one device for the whole section; sizes {}",
        dev.name(),
        if small {
            "scaled down (CPU adapter): large = 512, mid = 256, batched 8 x 128^3"
        } else {
            "those of torch_reference.py matmul"
        }
    );
    println!(
        "- median of up to {} runs after warm-up; each run: build the expression, `realize()`, `synchronize()`; \
         x{} = that many realizes per synchronize; host ms = the time to build and submit one realize (of the \
         x{} runs); shader checks: {}",
        cfg.runs,
        cfg.batch,
        cfg.batch,
        if std::env::var("LAZOR_SHADER_CHECKS").is_ok_and(|v| v.trim() != "0") {
            "on (LAZOR_SHADER_CHECKS=1)"
        } else {
            "off for matmul kernels (default)"
        }
    );
    if !dev.is_cpu() {
        // 8 workgroups per compute unit of a 132-unit GPU; a token amount on a software adapter.
        let raw = crate::raw::Raw::open(dev);
        let (groups, rounds) = if small { (16, 16) } else { (1056, 4096) };
        let rate = raw.fma_rate(cfg, groups, rounds);
        println!(
            "- FMA ceiling: {rate:.2} TFLOP/s (a hand-written WGSL kernel of 64 independent register FMA chains per \
             thread, no memory traffic: what the shader compiler reaches without loads)"
        );
    }
    println!();
    println!(
        "| case | shape | dispatches | host ms | ms (x{0}) | rate | ms ({0} in 1 realize) | rate | ms (1/sync) | rate |",
        cfg.batch
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for case in cases(small) {
        let inputs: Vec<Tensor> = case
            .inputs
            .iter()
            .enumerate()
            .map(|(i, s)| Tensor::from_vec_on(timing::inputs(s.iter().product(), 7 + i as u64), s.as_slice(), dev))
            .collect();
        for t in &inputs {
            t.realize().unwrap();
        }
        let before = dev.stats().dispatches;
        (case.build)(&inputs).realize().unwrap();
        let dispatches = dev.stats().dispatches - before;
        // The host's share: building and submitting the realizes, before waiting for them.
        let [host, batched] = measure_parts(cfg, || {
            let t = Instant::now();
            for _ in 0..cfg.batch {
                (case.build)(&inputs).realize().unwrap();
            }
            let issued = t.elapsed();
            dev.synchronize().unwrap();
            [issued, t.elapsed()]
        });
        let (host, batched) = (host.per(cfg.batch), batched.per(cfg.batch));
        // The same products issued together: one realize of `batch` of them, one submit, so the GPU runs the kernels
        // back to back (as a CUDA stream does) without a submit between them.
        let together = measure(cfg, || {
            let outs: Vec<Tensor> = (0..cfg.batch).map(|_| (case.build)(&inputs)).collect();
            lazor::realize(&outs.iter().collect::<Vec<_>>()).unwrap();
            dev.synchronize().unwrap();
        })
        .per(cfg.batch);
        let single = measure(cfg, || {
            (case.build)(&inputs).realize().unwrap();
            dev.synchronize().unwrap();
        });
        let rate = |t: Duration| {
            if case.bytes {
                format!("{:.0} GB/s", case.work / t.as_secs_f64() / 1e9)
            } else {
                format!("{:.2} TFLOP/s", case.work / t.as_secs_f64() / 1e12)
            }
        };
        let shape: Vec<String> = case.inputs.iter().map(|s| format!("{s:?}")).collect();
        println!(
            "| {} | {} | {dispatches} | {} | {} | {} | {} | {} | {} | {} |",
            case.name,
            shape.join(" x "),
            ms(host.median),
            ms(batched.median),
            rate(batched.median),
            ms(together.median),
            rate(together.median),
            ms(single.median),
            rate(single.median)
        );
    }
    true
}
