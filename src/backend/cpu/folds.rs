//! Reduce and rows kernels on the CPU: folds per (block of outputs, chunk), phases per row, in a fixed tree order.

use super::eval::{eval, needs_coords, store, tasks_with, unravel, Batch, Ctx, Out, Own, Regs, BATCH};
use super::simd;
use crate::dtype::{Class, DType};
use crate::kernel::{Kernel, Kind, Phase};
use crate::op::{IntBits, IntLane, ReduceOp};
use bytemuck::cast_slice;
use std::ops::Range;

/// `values` (lanes of `dt`, accumulating in its lanes) folded with `op`. Floats: 8 interleaved running folds
/// (element `j` into fold `j % 8`, which the compiler vectorizes), then the 8 pairwise: the order depends on the
/// length alone. Integers fold in order (their folds are associative).
fn tree(op: ReduceOp, dt: DType, values: &[f32]) -> f32 {
    match dt.class() {
        Class::Float => {
            let mut acc = [op.identity(); 8];
            simd::fold8(op, values, &mut acc);
            let f = op.combine();
            let (a, b) = (
                f.eval(f.eval(acc[0], acc[4]), f.eval(acc[2], acc[6])),
                f.eval(f.eval(acc[1], acc[5]), f.eval(acc[3], acc[7])),
            );
            f.eval(a, b)
        }
        Class::Int => f32::from_bits(int_fold::<i32>(op, dt, cast_slice(values)) as u32),
        Class::Uint | Class::Bool => f32::from_bits(int_fold::<u32>(op, dt, cast_slice(values))),
    }
}

/// An integer fold, one loop per op so each vectorizes.
fn int_fold<T: IntLane + IntBits + bytemuck::Pod>(op: ReduceOp, dt: DType, values: &[T]) -> T {
    let bits = |t: T| t.to_u32();
    let id = T::from_u32(op.identity_lane(dt));
    match op {
        ReduceOp::Sum => values.iter().fold(id, |a, &x| T::from_u32(bits(a).wrapping_add(bits(x)))),
        ReduceOp::Prod => values.iter().fold(id, |a, &x| T::from_u32(bits(a).wrapping_mul(bits(x)))),
        ReduceOp::Max => values.iter().fold(id, |a, &x| a.max(x)),
        ReduceOp::Min => values.iter().fold(id, |a, &x| a.min(x)),
    }
}

/// Combines two partial folds (lanes of `dt`).
fn combine(op: ReduceOp, dt: DType, a: f32, b: f32) -> f32 {
    f32::from_bits(op.combine().eval_lane(dt, a.to_bits(), b.to_bits()))
}

/// Runs a reduce kernel: each (block of outputs, chunk of the axis) is one parallel task; each output folds its
/// chunk batch by batch, each batch as a tree.
pub(super) fn reduce(k: &Kernel, inputs: &[&[f32]], outputs: &mut [&mut [f32]]) {
    let Kind::Reduce(r) = k.kind else { unreachable!("a reduce kernel") };
    let ctx = Ctx::new(k, inputs);
    let dims = k.shape.dims().to_vec();
    let n = dims[r.axis];
    let out_count = k.params[0] as usize;
    let chunks = k.params[r.chunks_at] as usize;
    let len = n.div_ceil(chunks.max(1));
    let blocks = out_count.div_ceil(BATCH);
    let outs: Vec<Out> = outputs.iter_mut().map(|o| Out(o.as_mut_ptr())).collect();
    let mut out_dims = dims.clone();
    out_dims[r.axis] = 1;
    let strided = k.body[..r.prologue].iter().any(needs_coords);
    let lanes = k.types[r.value].lanes();
    tasks_with(
        blocks * chunks,
        || (Regs::new(&ctx), Batch::empty()),
        |(regs, batch), t| {
            let (b, j) = (t / chunks, t % chunks);
            let block = b * BATCH..out_count.min((b + 1) * BATCH);
            let (lo, hi) = (j * len, n.min(j * len + len));
            let mut folded = Vec::with_capacity(block.len());
            // The epilogue runs at the outputs' coordinates (the folded axis at 0, as `out_dims` has it).
            let mut coords = vec![Vec::with_capacity(block.len()); if r.partial { 0 } else { dims.len() }];
            for o in block.clone() {
                let mut base = unravel(o, &out_dims);
                let mut acc = f32::from_bits(r.op.identity_lane(lanes));
                for s in (lo..hi).step_by(BATCH) {
                    let e = hi.min(s + BATCH);
                    batch.along(&dims, r.axis, r.rows, &base, s..e, strided);
                    eval(&ctx, 0..r.prologue, batch, regs);
                    acc = combine(r.op, lanes, acc, tree(r.op, lanes, regs.get(&ctx, r.value, e - s)));
                }
                if r.partial {
                    // The chunk's fold, at the output's coordinates with the axis at the chunk.
                    base[r.axis] = j as i64;
                    let at =
                        base.iter().zip(&dims).enumerate().fold(0usize, |a, (d, (&c, &size))| {
                            a * if d == r.axis { chunks } else { size } + c as usize
                        });
                    // SAFETY: each (output, chunk) pair is written by exactly one task.
                    unsafe { store(outs[0], k.out_types[0], at, &[acc]) };
                } else {
                    for (axis, &c) in coords.iter_mut().zip(&base) {
                        axis.push(c);
                    }
                    folded.push(acc);
                }
            }
            if r.partial {
                return;
            }
            let batch = Batch { len: block.len(), own: Own::From(block.start), coords, folded, folds: Vec::new() };
            eval(&ctx, r.prologue..k.body.len(), &batch, regs);
            for ((o, &(_, v)), &dt) in outs.iter().zip(&k.outputs).zip(&k.out_types) {
                // SAFETY: blocks of outputs are disjoint between tasks (a final fold has one chunk). Narrow outputs:
                // blocks are whole multiples of 4 elements, so no two tasks share a word.
                unsafe { store(*o, dt, block.start, regs.get(&ctx, v, block.len())) };
            }
        },
    );
}

impl Batch {
    /// Becomes the elements `range` along the folded axis at the output whose coordinates are `base`, reusing its
    /// vectors. Coordinates are made only when the body reads through a view (`coords`); when the folded elements
    /// are adjacent (`rows`) they are a window of the inputs.
    fn along(&mut self, dims: &[usize], axis: usize, rows: bool, base: &[i64], range: Range<usize>, coords: bool) {
        self.len = range.len();
        let first =
            (0..dims.len()).fold(0usize, |a, d| a * dims[d] + if d == axis { range.start } else { base[d] as usize });
        if rows {
            self.own = Own::From(first);
        } else {
            let stride: usize = dims[axis + 1..].iter().product();
            let mut at = match std::mem::replace(&mut self.own, Own::From(0)) {
                Own::At(at) => at,
                Own::From(_) => Vec::new(),
            };
            at.clear();
            at.extend((0..self.len).map(|j| first + j * stride));
            self.own = Own::At(at);
        }
        self.coords.resize(if coords { dims.len() } else { 0 }, Vec::new());
        for (d, c) in self.coords.iter_mut().enumerate() {
            c.clear();
            if d == axis {
                c.extend(range.clone().map(|x| x as i64));
            } else {
                c.resize(self.len, base[d]);
            }
        }
    }
}

/// Runs a rows kernel: each row is one parallel task running the phases in order, each over the row in batches.
pub(super) fn rows(k: &Kernel, inputs: &[&[f32]], outputs: &mut [&mut [f32]]) {
    let Kind::Rows { axis, .. } = k.kind else { unreachable!("a rows kernel") };
    let ctx = Ctx::new(k, inputs);
    let dims = k.shape.dims().to_vec();
    let n = dims[axis];
    let mut out_dims = dims.clone();
    out_dims[axis] = 1;
    let strided = k.body.iter().any(needs_coords);
    let outs: Vec<Out> = outputs.iter_mut().map(|o| Out(o.as_mut_ptr())).collect();
    tasks_with(
        k.params[0] as usize,
        || (Regs::new(&ctx), Batch::empty()),
        |(regs, batch), o| {
            let base = unravel(o, &out_dims);
            // The row's folds so far: each phase reads those of the phases before it.
            batch.folds.clear();
            for phase in &k.phases {
                match phase {
                    Phase::Fold { op, body, value, output } => {
                        let lanes = k.types[*value].lanes();
                        let mut acc = f32::from_bits(op.identity_lane(lanes));
                        for s in (0..n).step_by(BATCH) {
                            let e = n.min(s + BATCH);
                            batch.along(&dims, axis, true, &base, s..e, strided);
                            eval(&ctx, body.clone(), batch, regs);
                            acc = combine(*op, lanes, acc, tree(*op, lanes, regs.get(&ctx, *value, e - s)));
                        }
                        batch.folds.push(acc);
                        if let Some(m) = output {
                            // SAFETY: each row's elements, and its fold at the row's index, are written by its own
                            // task only.
                            unsafe { store(outs[*m], k.out_types[*m], o, &[acc]) };
                        }
                    }
                    Phase::Map { body, outputs } => {
                        for s in (0..n).step_by(BATCH) {
                            let e = n.min(s + BATCH);
                            batch.along(&dims, axis, true, &base, s..e, strided);
                            eval(&ctx, body.clone(), batch, regs);
                            for &m in outputs {
                                // SAFETY: as above.
                                unsafe {
                                    store(outs[m], k.out_types[m], o * n + s, regs.get(&ctx, k.outputs[m].1, e - s))
                                };
                            }
                        }
                    }
                }
            }
        },
    );
}
