//! How a lowered elementwise or fold kernel reads its inputs: 4 adjacent elements per thread where every access
//! allows it (one 16-byte load, one element repeated, or 4 loads), and transposed views staged through workgroup
//! tiles.

use super::lower::Lowerer;
use crate::kernel::{Access, Instr, Kind, TILE};
use crate::shape::Shape;

/// Strided kernels smaller than this stay scalar: they are bound by launch latency, not bandwidth, and one
/// pipeline then serves every small size of a pattern.
const VEC4_MIN_STRIDED: usize = 1 << 16;

/// Linear kernels of 16-bit elements at least this large take two vectors per thread.
const TWO_VECTORS_MIN: usize = 1 << 20;

/// Most views one kernel stages through workgroup tiles (each takes 4 KiB of workgroup memory).
const MAX_TILES: usize = 4;

impl Lowerer<'_> {
    /// Stages transposed operands through workgroup tiles when the kernel is big enough for it to pay: a view
    /// with stride 1 along the rows and another stride along the columns. Returns whether the kernel is tiled.
    fn tile(&mut self) -> bool {
        let k = &mut self.k;
        let rank = k.shape.ndim();
        if rank < 2 || k.shape.numel() < VEC4_MIN_STRIDED || k.body.iter().any(|i| matches!(i, Instr::Cat { .. })) {
            return false;
        }
        let d = k.shape.dims();
        if d[rank - 1] < TILE / 2 || d[rank - 2] < TILE / 2 {
            return false;
        }
        let params = &k.params;
        let p = |i: usize| params[i] as i32 as isize;
        // One tile per (input, view): two inputs read through equal strides are two tiles.
        let mut tiles: Vec<(usize, usize)> = Vec::new();
        for instr in &mut k.body {
            if let Instr::Load { view: Some(v), access, input } = instr {
                let transposed = v.frame == 0 && p(v.at + rank - 2) == 1 && !matches!(p(v.at + rank - 1), 0 | 1);
                if !transposed {
                    continue;
                }
                let n = match tiles.iter().position(|&t| t == (*input, v.at)) {
                    Some(n) => n,
                    None if tiles.len() < MAX_TILES => {
                        tiles.push((*input, v.at));
                        tiles.len() - 1
                    }
                    None => continue,
                };
                *access = Access::Tile(n);
            }
        }
        k.tiles = tiles;
        !k.tiles.is_empty()
    }

    /// Picks 4 elements per thread where every access allows it, and how each load then reads its 4.
    pub fn vectorize(&mut self) {
        if self.k.kind != Kind::Elementwise || self.has_gather() || self.tile() {
            return;
        }
        let k = &mut self.k;
        let rank = k.shape.ndim();
        let numel = k.shape.numel();
        let p = |i: usize| k.params[i] as i32 as isize;
        // Total shift of the innermost axis in a frame, from the kernel's own coordinates.
        let inner_shift = |mut f: usize| {
            let mut s = 0;
            while f > 0 {
                let fr = k.frames[f - 1];
                if fr.axis + 1 == rank {
                    s += p(fr.shift);
                }
                f = fr.parent;
            }
            s
        };
        let wide = if k.dims_at.is_none() {
            true
        } else {
            let inner = k.shape.dims().last().copied().unwrap_or(1);
            let cats_aligned = k.body.iter().all(|i| match i {
                Instr::Cat { axis, parts, .. } if axis + 1 == rank => {
                    parts.iter().all(|c| p(c.bound) % 4 == 0) && k.frames.iter().all(|f| p(f.shift) % 4 == 0)
                }
                _ => true,
            });
            rank > 0 && inner % 4 == 0 && numel >= VEC4_MIN_STRIDED && cats_aligned
        };
        k.width = if wide { 4 } else { 1 };
        let mut vector_ok = vec![wide; k.inputs.len()];
        let accesses: Vec<Access> = k
            .body
            .iter()
            .map(|i| match *i {
                Instr::Load { view: Some(v), input, .. } if wide => {
                    let a = wide_access(&k.params, &k.shape, v.at, inner_shift(v.frame));
                    if a != Access::Vector {
                        vector_ok[input] = false;
                    }
                    a
                }
                Instr::Load { access, .. } => access,
                _ => Access::Own,
            })
            .collect();
        for (instr, a) in k.body.iter_mut().zip(accesses) {
            if let Instr::Load { access, .. } = instr {
                *access = a;
            }
        }
        for (input, ok) in k.inputs.iter_mut().zip(vector_ok) {
            input.1 = ok;
        }
        // A thread's vector of 16-bit elements is 8 bytes a load: two of them put as many bytes in flight as one vector
        // of f32 (bf16 chain3 then took a smaller share of f32's time, docs/BENCHMARKS.md).
        let half = k.in_types.iter().chain(&k.out_types).all(|t| t.size_in_bytes() <= 2);
        if wide && half && k.tiles.is_empty() && numel >= TWO_VECTORS_MIN {
            k.vectors = 2;
        }
    }

    /// Whether the body gathers: such kernels run one element per thread.
    fn has_gather(&self) -> bool {
        self.k.body.iter().any(|i| matches!(i, Instr::Gather { .. }))
    }

    /// Folds 4 adjacent elements at a time in a reduce kernel whose folded axis is the innermost, as long as every
    /// read of the prologue (instructions `..prologue`) allows it; the epilogue stays scalar. A rows kernel passes
    /// its whole body: every phase, folds and maps, then steps through the row 4 elements at a time.
    pub fn vectorize_fold(&mut self, prologue: usize, axis: usize) {
        if self.has_gather() {
            return;
        }
        let k = &mut self.k;
        let rank = k.shape.ndim();
        let n = k.shape.dims()[axis];
        if axis + 1 != rank || n % 4 != 0 || n < 64 || k.body[..prologue].iter().any(|i| matches!(i, Instr::Cat { .. }))
        {
            return;
        }
        // Inputs the epilogue reads one element at a time are bound as scalars.
        let mut vector_ok = vec![true; k.inputs.len()];
        for instr in &k.body[prologue..] {
            if let Instr::Load { input, .. } = instr {
                vector_ok[*input] = false;
            }
        }
        for instr in &mut k.body[..prologue] {
            if let Instr::Load { view: Some(v), input, access } = instr {
                *access = wide_access(&k.params, &k.shape, v.at, 0);
                if *access != Access::Vector {
                    vector_ok[*input] = false;
                }
            }
        }
        k.width = 4;
        for (input, ok) in k.inputs.iter_mut().zip(vector_ok) {
            input.1 = ok;
        }
    }
}

/// How a vectorized kernel over `shape` reads 4 elements adjacent along its innermost axis through the view whose
/// parameters start at `at`, in a frame whose innermost coordinate is shifted back by `shift`: one 16-byte load
/// (stride 1 and a 4-aligned start), one element repeated (stride 0), or 4 loads.
fn wide_access(params: &[u32], shape: &Shape, at: usize, shift: isize) -> Access {
    let rank = shape.ndim();
    let p = |i: usize| params[i] as i32 as isize;
    let inner = p(at + rank - 1);
    let aligned =
        (p(at + rank) - shift * inner) % 4 == 0 && (0..rank - 1).all(|d| p(at + d) % 4 == 0 || shape.dims()[d] == 1);
    match inner {
        0 => Access::Splat,
        1 if aligned => Access::Vector,
        _ => Access::Gather,
    }
}
