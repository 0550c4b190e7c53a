//! What the benchmarks measure, shared by `benches/*.rs` and `benches/report.rs`: the cases and the bytes their
//! fused ideal moves.
#![allow(dead_code)] // each includer uses part of it

use lazor::Tensor;
use ndarray::{Array1, Array2, Axis};
use rayon::prelude::*;

/// Bytes per element the fused ideal moves: three f32 inputs read once, one f32 output written once.
pub const IDEAL_BYTES_PER_ELEMENT: u64 = 16;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Case {
    Chain3,
    Chain16,
    Unary,
}

impl Case {
    pub const ALL: [Case; 3] = [Case::Chain3, Case::Chain16, Case::Unary];

    pub fn name(self) -> &'static str {
        match self {
            Case::Chain3 => "chain3",
            Case::Chain16 => "chain16",
            Case::Unary => "unary",
        }
    }

    /// The lazy expression (nothing runs here).
    pub fn build(self, a: &Tensor, b: &Tensor, c: &Tensor) -> Tensor {
        match self {
            Case::Chain3 => ((a + b) * 5.0 - c) / 2.0,
            Case::Chain16 => {
                let mut x = a.clone();
                for _ in 0..4 {
                    x = ((&x + b) * 1.01 - c) / 1.02;
                }
                x
            }
            Case::Unary => ((a * 0.1).exp() + b.abs()).sqrt() * c.tanh(),
        }
    }

    /// The same math on the host, for the correctness check.
    pub fn host(self, a: f32, b: f32, c: f32) -> f32 {
        match self {
            Case::Chain3 => ((a + b) * 5.0 - c) / 2.0,
            Case::Chain16 => {
                let mut x = a;
                for _ in 0..4 {
                    x = ((x + b) * 1.01 - c) / 1.02;
                }
                x
            }
            Case::Unary => ((a * 0.1).exp() + b.abs()).sqrt() * c.tanh(),
        }
    }
}

/// Output elements each task of the hand-written rayon loop ([`Case::rayon_into`]) covers: 64 KiB of output.
pub const RAYON_CHUNK: usize = 1 << 14;

/// `out[i] = f(a[i], b[i], c[i])` over chunks of [`RAYON_CHUNK`] output elements, in parallel on rayon's pool: the
/// loop a programmer writes by hand (zipped slices, which the compiler vectorizes where `f` allows).
fn par_map3(a: &[f32], b: &[f32], c: &[f32], out: &mut [f32], f: impl Fn(f32, f32, f32) -> f32 + Sync) {
    assert!(a.len() == out.len() && b.len() == out.len() && c.len() == out.len(), "inputs and output differ in length");
    out.par_chunks_mut(RAYON_CHUNK).enumerate().for_each(|(k, o)| {
        let (s, e) = (k * RAYON_CHUNK, k * RAYON_CHUNK + o.len());
        for (((o, &a), &b), &c) in o.iter_mut().zip(&a[s..e]).zip(&b[s..e]).zip(&c[s..e]) {
            *o = f(a, b, c);
        }
    });
}

impl Case {
    /// The same math as a hand-written rayon loop into `out` (reused between calls): the CPU backend's yardstick.
    pub fn rayon_into(self, a: &[f32], b: &[f32], c: &[f32], out: &mut [f32]) {
        // One monomorphic loop per case, so nothing is decided per element.
        match self {
            Case::Chain3 => par_map3(a, b, c, out, |a, b, c| Case::Chain3.host(a, b, c)),
            Case::Chain16 => par_map3(a, b, c, out, |a, b, c| Case::Chain16.host(a, b, c)),
            Case::Unary => par_map3(a, b, c, out, |a, b, c| Case::Unary.host(a, b, c)),
        }
    }

    /// The same expression in `ndarray`, written the way its users write it: operators on arrays, one new array per
    /// operation on borrowed operands (those on an owned left operand reuse its memory), `mapv` for functions.
    /// Single-threaded, as ndarray's operators are.
    pub fn ndarray(self, a: &Array1<f32>, b: &Array1<f32>, c: &Array1<f32>) -> Array1<f32> {
        match self {
            Case::Chain3 => ((a + b) * 5.0 - c) / 2.0,
            Case::Chain16 => {
                let mut x = ((a + b) * 1.01 - c) / 1.02;
                for _ in 1..4 {
                    x = ((x + b) * 1.01 - c) / 1.02;
                }
                x
            }
            Case::Unary => ((a * 0.1).mapv(f32::exp) + b.mapv(f32::abs)).mapv(f32::sqrt) * c.mapv(f32::tanh),
        }
    }
}

/// `x.sum(-1)` in ndarray, as its users write it.
pub fn ndarray_sum_rows(x: &Array2<f32>) -> Array1<f32> {
    x.sum_axis(Axis(1))
}

/// `x.softmax(-1)` in ndarray, as its users write it: the row maxima, `exp(x - max)` (broadcast through a new axis),
/// divided by its row sums.
pub fn ndarray_softmax(x: &Array2<f32>) -> Array2<f32> {
    let max = x.fold_axis(Axis(1), f32::NEG_INFINITY, |&m, &v| m.max(v)).insert_axis(Axis(1));
    let e = (x - &max).mapv(f32::exp);
    let sum = e.sum_axis(Axis(1)).insert_axis(Axis(1));
    e / &sum
}

/// A view case and its plain twin, timed side by side in one run: the view reads its operands through strides
/// (`transpose_add`) or picks between two buffers per element (`cat`); the twin does the same arithmetic over
/// contiguous inputs of the same size, so the ratio of their times is the price of the view.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ViewCase {
    /// `a.t() + &b` over `[n, n]` inputs; twin `&a + &b`. Two reads and one write: 12 bytes/element.
    TransposeAdd,
    /// `Tensor::cat(&[&a, &b], 0) * 2.0` over two halves of `numel` elements; twin `&a2 * 2.0` over one input of
    /// `numel` elements. One read and one write: 8 bytes/element.
    Cat,
}

impl ViewCase {
    pub const ALL: [ViewCase; 2] = [ViewCase::TransposeAdd, ViewCase::Cat];

    /// Output elements of the default sizes: 4096^2 and 8192^2 for `transpose_add`, 2^24 and 2^26 for `cat`.
    pub const DEFAULT_LOG2: [u32; 2] = [24, 26];

    pub fn name(self) -> &'static str {
        match self {
            ViewCase::TransposeAdd => "transpose_add",
            ViewCase::Cat => "cat",
        }
    }

    /// What the twin computes, for table headers.
    pub fn plain_name(self) -> &'static str {
        match self {
            ViewCase::TransposeAdd => "a + b",
            ViewCase::Cat => "a2 * 2.0",
        }
    }

    /// What the view case computes, for table headers.
    pub fn view_name(self) -> &'static str {
        match self {
            ViewCase::TransposeAdd => "a.t() + b",
            ViewCase::Cat => "cat([a, b], 0) * 2.0",
        }
    }

    /// Bytes per output element of the ideal kernel: inputs read once, output written once.
    pub fn bytes_per_element(self) -> u64 {
        match self {
            ViewCase::TransposeAdd => 12,
            ViewCase::Cat => 8,
        }
    }

    /// The size for `numel` output elements, for labels: `4096x4096` or `2^26`.
    pub fn size_label(self, numel: usize) -> String {
        match self {
            ViewCase::TransposeAdd => {
                let n = self.side(numel);
                format!("{n}x{n}")
            }
            ViewCase::Cat => format!("2^{}", numel.trailing_zeros()),
        }
    }

    /// The side of the square `transpose_add` operates on (`numel` must be a square).
    pub fn side(self, numel: usize) -> usize {
        let n = (numel as f64).sqrt().round() as usize;
        assert_eq!(n * n, numel, "{}: {numel} elements are not a square", self.name());
        n
    }

    /// Whether `numel` output elements make a valid size of this case.
    pub fn valid(self, numel: usize) -> bool {
        match self {
            ViewCase::TransposeAdd => {
                let n = (numel as f64).sqrt().round() as usize;
                n * n == numel
            }
            ViewCase::Cat => numel >= 2 && numel % 2 == 0,
        }
    }

    /// Shapes of the inputs for `numel` output elements: those the view case reads, then those the twin reads
    /// beyond them (`cat`'s `a2`).
    pub fn input_shapes(self, numel: usize) -> Vec<Vec<usize>> {
        match self {
            ViewCase::TransposeAdd => {
                let n = self.side(numel);
                vec![vec![n, n], vec![n, n]]
            }
            ViewCase::Cat => vec![vec![numel / 2], vec![numel / 2], vec![numel]],
        }
    }

    /// The view expression (nothing runs here); `x` as [`ViewCase::input_shapes`].
    pub fn build_view(self, x: &[Tensor]) -> Tensor {
        match self {
            ViewCase::TransposeAdd => x[0].t() + &x[1],
            ViewCase::Cat => Tensor::cat(&[&x[0], &x[1]], 0) * 2.0,
        }
    }

    /// The plain twin (nothing runs here).
    pub fn build_plain(self, x: &[Tensor]) -> Tensor {
        match self {
            ViewCase::TransposeAdd => &x[0] + &x[1],
            ViewCase::Cat => &x[2] * 2.0,
        }
    }

    /// Element `i` (row-major) of the view case on the host.
    pub fn host_view(self, x: &[Vec<f32>], i: usize) -> f32 {
        match self {
            ViewCase::TransposeAdd => {
                let n = self.side(x[0].len());
                let (r, c) = (i / n, i % n);
                x[0][c * n + r] + x[1][i]
            }
            ViewCase::Cat => {
                let h = x[0].len();
                (if i < h { x[0][i] } else { x[1][i - h] }) * 2.0
            }
        }
    }

    /// Element `i` of the plain twin on the host.
    pub fn host_plain(self, x: &[Vec<f32>], i: usize) -> f32 {
        match self {
            ViewCase::TransposeAdd => x[0][i] + x[1][i],
            ViewCase::Cat => x[2][i] * 2.0,
        }
    }
}

/// A reduction case: the expression, its input shapes at the default and the scaled-down sizes, the bytes its ideal
/// kernel moves, and the same math on the host in `f64` for the correctness check.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ReduceCase {
    /// `x.sum_all()` of `[n]`: one read, 4 bytes/element.
    SumAll,
    /// `(a * &b).sum_all()` of two `[n]`: two reads, 8 bytes/element (the product never reaches memory).
    Dot,
    /// `x.sum(-1)` of `[rows, cols]`: one read, 4 bytes/element (the `rows` outputs not counted).
    SumRows,
    /// `x.sum(0)` of `[rows, cols]`: one read, 4 bytes/element.
    SumCols,
    /// `x.softmax(-1)` of `[rows, cols]`: one read, one write, 8 bytes/element.
    Softmax,
    /// `(&x - x.mean_keepdim(-1)) / (x.var_keepdim(-1) + 1e-5).sqrt()` of `[rows, cols]`: 8 bytes/element.
    LayerNorm,
}

impl ReduceCase {
    pub const ALL: [ReduceCase; 6] = [
        ReduceCase::SumAll,
        ReduceCase::Dot,
        ReduceCase::SumRows,
        ReduceCase::SumCols,
        ReduceCase::Softmax,
        ReduceCase::LayerNorm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ReduceCase::SumAll => "sum_all",
            ReduceCase::Dot => "dot",
            ReduceCase::SumRows => "sum_rows",
            ReduceCase::SumCols => "sum_cols",
            ReduceCase::Softmax => "softmax",
            ReduceCase::LayerNorm => "layernorm",
        }
    }

    /// The expression, for table headers.
    pub fn expr(self) -> &'static str {
        match self {
            ReduceCase::SumAll => "x.sum_all()",
            ReduceCase::Dot => "(a * &b).sum_all()",
            ReduceCase::SumRows => "x.sum(-1)",
            ReduceCase::SumCols => "x.sum(0)",
            ReduceCase::Softmax => "x.softmax(-1)",
            ReduceCase::LayerNorm => "(&x - x.mean_keepdim(-1)) / (x.var_keepdim(-1) + 1e-5).sqrt()",
        }
    }

    /// Bytes per input element of the ideal kernel: each input read once, a full-size output written once.
    pub fn bytes_per_element(self) -> u64 {
        match self {
            ReduceCase::SumAll | ReduceCase::SumRows | ReduceCase::SumCols => 4,
            ReduceCase::Dot | ReduceCase::Softmax | ReduceCase::LayerNorm => 8,
        }
    }

    /// Inputs of the case (each of the same shape).
    pub fn inputs(self) -> usize {
        match self {
            ReduceCase::Dot => 2,
            _ => 1,
        }
    }

    /// Input shapes timed by default, the sizes of `../shared/bench/torch_reference.py` (`reduce`, `softmax`); the
    /// first is the one the acceptance targets name (dot 2^26, sums [16384, 4096], softmax and layer norm
    /// [4096, 4096]).
    pub fn shapes(self) -> Vec<Vec<usize>> {
        match self {
            ReduceCase::SumAll => vec![vec![1 << 26]],
            ReduceCase::Dot => vec![vec![1 << 26], vec![1 << 24]],
            ReduceCase::SumRows => vec![vec![16384, 4096], vec![4096, 4096], vec![4096, 16384]],
            // And a training step's bias gradient: nanoGPT's [B * T, width].
            ReduceCase::SumCols => vec![vec![16384, 4096], vec![4096, 4096], vec![4096, 16384], vec![16384, 384]],
            ReduceCase::Softmax | ReduceCase::LayerNorm => vec![vec![4096, 4096], vec![65536, 1024], vec![1024, 65536]],
        }
    }

    /// Scaled-down shapes for a CPU adapter (lavapipe binds at most 128 MiB, and runs about 1000x slower).
    pub fn small_shapes(self) -> Vec<Vec<usize>> {
        match self {
            ReduceCase::SumAll | ReduceCase::Dot => vec![vec![1 << 22]],
            _ => vec![vec![2048, 1024]],
        }
    }

    /// A shape for labels: `2^26` or `16384x4096`.
    pub fn shape_label(shape: &[usize]) -> String {
        match shape {
            [n] if n.is_power_of_two() => format!("2^{}", n.trailing_zeros()),
            _ => shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x"),
        }
    }

    /// The lazy expression over `x` ([`ReduceCase::inputs`] tensors of one shape); nothing runs here.
    pub fn build(self, x: &[Tensor]) -> Tensor {
        match self {
            ReduceCase::SumAll => x[0].sum_all(),
            ReduceCase::Dot => (&x[0] * &x[1]).sum_all(),
            ReduceCase::SumRows => x[0].sum(-1),
            ReduceCase::SumCols => x[0].sum(0),
            ReduceCase::Softmax => x[0].softmax(-1),
            ReduceCase::LayerNorm => {
                let x = &x[0];
                (x - x.mean_keepdim(-1)) / (x.var_keepdim(-1) + 1e-5).sqrt()
            }
        }
    }

    /// The result on the host in `f64`, each value with the magnitude its error is measured against: the sum of
    /// the absolute terms for sums, `|value|` for softmax, `max(|value|, 1)` for layer norm.
    pub fn host(self, x: &[Vec<f32>], shape: &[usize]) -> Vec<(f64, f64)> {
        let (rows, cols) = match shape {
            [n] => (1, *n),
            [r, c] => (*r, *c),
            _ => panic!("{}: shapes are of rank 1 or 2, not {shape:?}", self.name()),
        };
        let row = |r: usize| &x[0][r * cols..(r + 1) * cols];
        match self {
            ReduceCase::SumAll => {
                let (s, a) = x[0].iter().fold((0.0, 0.0), |(s, a), &v| (s + v as f64, a + (v as f64).abs()));
                vec![(s, a)]
            }
            ReduceCase::Dot => {
                let (s, a) = x[0].iter().zip(&x[1]).fold((0.0, 0.0), |(s, a), (&u, &v)| {
                    let p = u as f64 * v as f64;
                    (s + p, a + p.abs())
                });
                vec![(s, a)]
            }
            ReduceCase::SumRows => (0..rows)
                .map(|r| row(r).iter().fold((0.0, 0.0), |(s, a), &v| (s + v as f64, a + (v as f64).abs())))
                .collect(),
            ReduceCase::SumCols => {
                let mut out = vec![(0.0, 0.0); cols];
                for r in 0..rows {
                    for (o, &v) in out.iter_mut().zip(row(r)) {
                        o.0 += v as f64;
                        o.1 += (v as f64).abs();
                    }
                }
                out
            }
            ReduceCase::Softmax => {
                let mut out = Vec::with_capacity(rows * cols);
                for r in 0..rows {
                    let m = row(r).iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
                    let s: f64 = row(r).iter().map(|&v| (v as f64 - m).exp()).sum();
                    out.extend(row(r).iter().map(|&v| {
                        let y = (v as f64 - m).exp() / s;
                        (y, y.abs())
                    }));
                }
                out
            }
            ReduceCase::LayerNorm => {
                let mut out = Vec::with_capacity(rows * cols);
                for r in 0..rows {
                    let m = row(r).iter().map(|&v| v as f64).sum::<f64>() / cols as f64;
                    let var = row(r).iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / cols as f64;
                    let d = (var + 1e-5).sqrt();
                    out.extend(row(r).iter().map(|&v| {
                        let y = (v as f64 - m) / d;
                        (y, y.abs().max(1.0))
                    }));
                }
                out
            }
        }
    }

    /// The largest error of `got` against the host's `want`, each relative to its magnitude; NaN if any value is
    /// NaN or the lengths differ.
    pub fn worst_error(got: &[f32], want: &[(f64, f64)]) -> f64 {
        if got.len() != want.len() {
            return f64::NAN;
        }
        got.iter().zip(want).fold(0.0f64, |w, (&g, &(v, scale))| {
            let e = (g as f64 - v).abs() / scale.max(f64::MIN_POSITIVE);
            if e.is_nan() || w.is_nan() {
                f64::NAN
            } else {
                w.max(e)
            }
        })
    }
}

/// Relative error [`ReduceCase::worst_error`] allows: f32 accumulation over up to 2^26 terms.
pub const REDUCE_TOLERANCE: f64 = 1e-4;

/// Deterministic inputs in [0, 1), as `torch.rand` (xorshift; `seed` picks the stream).
pub fn uniform(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

/// The criterion settings every bench uses: short runs, as they run on a 2-core VM and on a GPU lent by the minute.
#[allow(dead_code)]
pub fn criterion_config() -> criterion::Criterion {
    criterion::Criterion::default()
        .sample_size(10)
        .warm_up_time(std::time::Duration::from_millis(300))
        .measurement_time(std::time::Duration::from_secs(1))
        .nresamples(10_000)
}
