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
