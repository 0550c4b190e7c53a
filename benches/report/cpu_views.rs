//! The CPU backend on views: a transposed read and a concatenation against the contiguous `a * 2`, per element.

use crate::check::{worst_error, wrong};
use crate::timing::{env_num, inputs, measure, ms, Config, Timing};
use lazor::{Device, Tensor};

/// One expression over `[n, n]` inputs `a` and `b` (and `[2n, n]` `c`).
#[derive(Clone, Copy, PartialEq)]
enum Expr {
    /// `a * 2.0`: one contiguous read and write per element, the yardstick.
    Scale,
    /// `&a + &b`: the contiguous twin of the transposed add.
    Add,
    /// `c * 2.0`: the contiguous twin of the concatenations, as many elements.
    Scale2,
    /// `a.t() + &b`: a read down the columns of `a`.
    TransposeAdd,
    /// `Tensor::cat(&[&a, &b], 0) * 2.0`: `[2n, n]`.
    Cat0,
    /// `Tensor::cat(&[&a, &b], 1) * 2.0`: `[n, 2n]`, the parts alternating every `n` elements.
    Cat1,
}

impl Expr {
    const ALL: [Expr; 6] = [Expr::Scale, Expr::Add, Expr::TransposeAdd, Expr::Scale2, Expr::Cat0, Expr::Cat1];

    fn name(self) -> &'static str {
        match self {
            Expr::Scale => "a * 2",
            Expr::Add => "a + &b",
            Expr::Scale2 => "c * 2",
            Expr::TransposeAdd => "a.t() + &b",
            Expr::Cat0 => "cat(&[&a, &b], 0) * 2",
            Expr::Cat1 => "cat(&[&a, &b], 1) * 2",
        }
    }

    /// The contiguous expression that moves as many elements: what a view case costs beyond its reads.
    fn twin(self) -> Expr {
        match self {
            Expr::TransposeAdd => Expr::Add,
            Expr::Cat0 | Expr::Cat1 => Expr::Scale2,
            e => e,
        }
    }

    fn build(self, a: &Tensor, b: &Tensor, c: &Tensor) -> Tensor {
        match self {
            Expr::Scale => a * 2.0,
            Expr::Add => a + b,
            Expr::Scale2 => c * 2.0,
            Expr::TransposeAdd => a.t() + b,
            Expr::Cat0 => Tensor::cat(&[a, b], 0) * 2.0,
            Expr::Cat1 => Tensor::cat(&[a, b], 1) * 2.0,
        }
    }

    /// Output elements at side `n`.
    fn numel(self, n: usize) -> usize {
        match self {
            Expr::Scale2 | Expr::Cat0 | Expr::Cat1 => 2 * n * n,
            _ => n * n,
        }
    }

    /// Element `i` (row-major) of the result on the host.
    fn host(self, [a, b, c2]: [&[f32]; 3], n: usize, i: usize) -> f32 {
        let (r, c) = (i / n, i % n);
        match self {
            Expr::Scale => a[i] * 2.0,
            Expr::Add => a[i] + b[i],
            Expr::Scale2 => c2[i] * 2.0,
            Expr::TransposeAdd => a[c * n + r] + b[i],
            Expr::Cat0 => (if i < n * n { a[i] } else { b[i - n * n] }) * 2.0,
            Expr::Cat1 => {
                let (r, c) = (i / (2 * n), i % (2 * n));
                (if c < n { a[r * n + c] } else { b[r * n + c - n] }) * 2.0
            }
        }
    }
}

/// Times every expression at side `n` (each checked in full against the host first); prints one row each.
fn run_side(cpu: &Device, cfg: &Config, n: usize) -> Result<(), String> {
    let (ha, hb, hc) = (inputs(n * n, 31), inputs(n * n, 32), inputs(2 * n * n, 33));
    let a = Tensor::from_vec_on(ha.clone(), [n, n], cpu);
    let b = Tensor::from_vec_on(hb.clone(), [n, n], cpu);
    let c = Tensor::from_vec_on(hc.clone(), [2 * n, n], cpu);
    lazor::realize(&[&a, &b, &c]).map_err(|e| e.to_string())?;
    let mut timings: Vec<(Expr, Timing)> = Vec::new();
    for e in Expr::ALL {
        eprintln!("cpu views: {} {n}x{n}", e.name());
        let got = e.build(&a, &b, &c).try_to_vec().map_err(|e| e.to_string())?;
        // The same data movement and math as the host loop: equal bits, not just close values.
        let worst = worst_error(&got, |i| e.host([&ha, &hb, &hc], n, i));
        if worst != 0.0 {
            return Err(format!("{} at {n}x{n} differs from the host by {worst:e}", e.name()));
        }
        let t = measure(cfg, || {
            e.build(&a, &b, &c).realize().expect("realize");
            cpu.synchronize().expect("synchronize");
        });
        timings.push((e, t));
    }
    let per = |e: Expr| {
        let t = timings.iter().find(|t| t.0 == e).expect("timed").1;
        t.median.as_secs_f64() / e.numel(n) as f64
    };
    for &(e, t) in &timings {
        println!(
            "| `{}` | {n}x{n} | {} | {} | {:.2} | {:.2}x | {:.2}x | {} |",
            e.name(),
            e.numel(n),
            ms(t.median),
            per(e) * 1e9,
            per(e) / per(Expr::Scale),
            per(e) / per(e.twin()),
            t.runs
        );
    }
    Ok(())
}

/// The CPU views table: sides from `LAZOR_BENCH_CPU_VIEW_SIDE` (one side) or 1024 and 4096. False on a failure.
pub fn run(cpu: &Device, cfg: &Config) -> bool {
    let sides: Vec<usize> = match env_num("LAZOR_BENCH_CPU_VIEW_SIDE") {
        Some(n) => vec![n as usize],
        None => vec![1024, 4096],
    };
    println!("\n### Views on the CPU backend\n");
    println!(
        "`a`, `b`: `[n, n]` f32 on `Device::cpu()`, realized; each run builds the expression, `realize()`, \
         `synchronize()`; `c`: `[2n, n]`. Ratios are per element (ms / output elements): to `a * 2` at the same \
         side, and to the contiguous twin that moves as many elements (`a + &b` for the transpose, `c * 2` for the \
         concatenations). Every result equals the host loop's bits before timing.\n"
    );
    println!("| expression | side | elements | ms | ns/element | to `a * 2` | to twin | runs |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for n in sides {
        if let Err(e) = run_side(cpu, cfg, n) {
            return wrong(e);
        }
    }
    true
}
