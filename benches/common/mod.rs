//! What the benchmarks measure, shared by `benches/elementwise.rs` and `examples/bench.rs`: the cases and the
//! bytes their fused ideal moves.
#![allow(dead_code)] // each includer uses part of it

use lazor::Tensor;

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
