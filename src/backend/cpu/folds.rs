//! Reduce and rows kernels on the CPU: folds per (block of outputs, chunk), phases per row, in a fixed tree order.

use super::batch::{ravel, tasks_with, unravel, Batch, Ctx, Out, Own, Regs, BATCH};
use super::eval::{eval, needs_coords, store};
use super::runs::{Run, Runs};
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
            pairwise8(op, &acc)
        }
        Class::Int => f32::from_bits(int_fold::<i32>(op, dt, cast_slice(values)) as u32),
        Class::Uint | Class::Bool => f32::from_bits(int_fold::<u32>(op, dt, cast_slice(values))),
    }
}

/// The 8 running folds of a float [`tree`], folded pairwise.
fn pairwise8(op: ReduceOp, acc: &[f32; 8]) -> f32 {
    let f = op.combine();
    let (a, b) = (
        f.eval(f.eval(acc[0], acc[4]), f.eval(acc[2], acc[6])),
        f.eval(f.eval(acc[1], acc[5]), f.eval(acc[3], acc[7])),
    );
    f.eval(a, b)
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
    // Partial folds are stored with the axis at the chunk.
    let mut part_dims = dims.clone();
    part_dims[r.axis] = chunks;
    let walk = Walk { k, ctx: &ctx, dims: &dims, axis: r.axis, rows: r.rows, strided };
    // The main fold, then its siblings (folds of values the same prologue computes, in the same walk).
    let folding = Folding { body: 0..r.prologue, folds: k.folds() };
    tasks_with(
        blocks * chunks,
        || (Regs::new(&ctx), Batch::empty()),
        |(regs, batch), t| {
            let (b, j) = (t / chunks, t % chunks);
            let block = b * BATCH..out_count.min((b + 1) * BATCH);
            let (lo, hi) = (j * len, n.min(j * len + len));
            // The epilogue runs at the outputs' coordinates (the folded axis at 0, as `out_dims` has it).
            let mut runs = Runs::default();
            runs.clear(dims.len());
            let bases: Vec<Vec<i64>> = block.clone().map(|o| unravel(o, &out_dims)).collect();
            // Per fold, per output.
            let mut accs: Vec<Vec<f32>> = if r.rows || block.len() < COLUMNS_MIN {
                let each: Vec<Vec<f32>> =
                    bases.iter().map(|base| walk.one(&folding, base, lo..hi, batch, regs)).collect();
                (0..folding.folds.len()).map(|f| each.iter().map(|a| a[f]).collect()).collect()
            } else {
                walk.columns(&folding, &bases, lo..hi, batch, regs)
            };
            for (o, mut base) in bases.into_iter().enumerate() {
                if r.partial {
                    // The chunk's folds, at the output's coordinates with the axis at the chunk: the main fold's to
                    // output 0, sibling `p`'s to output `p + 1`.
                    base[r.axis] = j as i64;
                    let at = ravel(&base, &part_dims);
                    for (f, acc) in accs.iter().enumerate() {
                        // SAFETY: each (output, chunk) pair is written by exactly one task.
                        unsafe { store(outs[f], k.out_types[f], at, &[acc[o]]) };
                    }
                } else {
                    runs.push_point(&base);
                }
            }
            if r.partial {
                return;
            }
            let siblings = accs.split_off(1);
            let folded = accs.pop().expect("the main fold");
            let own = Own::From(block.start);
            let batch = Batch {
                len: block.len(),
                own,
                runs,
                staged_at: 0,
                ahead: block.len(),
                folded,
                folds: Vec::new(),
                siblings,
            };
            eval(&ctx, r.prologue..k.body.len(), &batch, regs);
            for ((o, &(_, v)), &dt) in outs.iter().zip(&k.outputs).zip(&k.out_types) {
                // SAFETY: blocks of outputs are disjoint between tasks (a final fold has one chunk). Narrow outputs:
                // blocks are whole multiples of 4 elements, so no two tasks share a word.
                unsafe { store(*o, dt, block.start, regs.get(&ctx, v, block.len())) };
            }
        },
    );
}

/// Outputs a block needs before its folds walk the axis together ([`Walk::columns`]) rather than one by one.
const COLUMNS_MIN: usize = 8;

/// What a kernel's folds walk: its context, the domain's extents, the folded axis, whether the folded elements are
/// adjacent in memory (`rows`) and whether the folded body reads through views (and so needs coordinates).
#[derive(Clone, Copy)]
struct Walk<'a> {
    k: &'a Kernel,
    ctx: &'a Ctx<'a>,
    dims: &'a [usize],
    axis: usize,
    rows: bool,
    strided: bool,
}

/// Folds of the values instructions `body` give: each `(op, value)` folds instruction `value` with `op`.
#[derive(Clone)]
struct Folding {
    body: Range<usize>,
    folds: Vec<(ReduceOp, usize)>,
}

impl Walk<'_> {
    /// The fold of one output (coordinates `base`, the axis at 0) over `range` of the axis: batch by batch, each
    /// batch a [`tree`].
    fn one(&self, f: &Folding, base: &[i64], range: Range<usize>, batch: &mut Batch, regs: &mut Regs) -> Vec<f32> {
        let lanes = |v: usize| self.k.types[v].lanes();
        let mut acc: Vec<f32> = f.folds.iter().map(|&(op, v)| f32::from_bits(op.identity_lane(lanes(v)))).collect();
        for s in range.clone().step_by(BATCH) {
            let e = range.end.min(s + BATCH);
            batch.along(self.dims, self.axis, self.rows, base, s..e);
            eval(self.ctx, f.body.clone(), batch, regs);
            for (a, &(op, v)) in acc.iter_mut().zip(&f.folds) {
                *a = combine(op, lanes(v), *a, tree(op, lanes(v), regs.get(self.ctx, v, e - s)));
            }
        }
        acc
    }

    /// The folds of a block of outputs (coordinates `bases`) over `range` of a non-last axis, walked together: each
    /// step of the axis is one batch across the block, adjacent in memory where the block is, so the input is read in
    /// order rather than gathered a stride apart per output (gathered that way, `x.sum(0)` of a large matrix ran far
    /// slower than `x.sum(-1)`; figures: docs/notes/source-measurements.md, `src/backend/cpu/folds.rs`). Each output's
    /// fold order is [`Walk::one`]'s: element `j` of each stretch of `BATCH` along the axis into running fold `j % 8`,
    /// the 8 pairwise, the stretches in order; so the results are bit-identical to it. Integer folds are associative
    /// and run in order.
    fn columns(
        &self,
        f: &Folding,
        bases: &[Vec<i64>],
        range: Range<usize>,
        batch: &mut Batch,
        regs: &mut Regs,
    ) -> Vec<Vec<f32>> {
        let Walk { ctx, dims, axis, strided, .. } = *self;
        let n = bases.len();
        let inner: usize = dims[axis + 1..].iter().product();
        // Each output's input index with the axis at 0; consecutive outputs are usually adjacent.
        let first: Vec<usize> = bases.iter().map(|b| ravel(b, dims)).collect();
        let adjacent = first.windows(2).all(|w| w[1] == w[0] + 1);
        batch.len = n;
        // The next step along the axis.
        batch.ahead = inner;
        batch.runs.clear(dims.len());
        if strided {
            bases.iter().for_each(|b| batch.runs.push_point(b));
        }
        let lanes = |v: usize| self.k.types[v].lanes();
        let mut acc: Vec<Vec<f32>> =
            f.folds.iter().map(|&(op, v)| vec![f32::from_bits(op.identity_lane(lanes(v))); n]).collect();
        let float = |v: usize| lanes(v).class() == Class::Float;
        // Per fold, the 8 running folds, lane-major: lane `l` of every output is one slice, so each step folds into
        // one contiguous slice (vectorized, as `simd::fold8` is).
        let mut eight: Vec<Vec<f32>> =
            f.folds.iter().map(|&(op, v)| vec![op.identity(); if float(v) { 8 * n } else { 0 }]).collect();
        for stretch in range.clone().step_by(BATCH) {
            let end = range.end.min(stretch + BATCH);
            for s in stretch..end {
                if adjacent {
                    batch.own = Own::From(first[0] + s * inner);
                } else {
                    batch.own_at(first.iter().map(|&i| i + s * inner));
                }
                if strided {
                    batch.runs.set_axis(axis, s as i64);
                }
                eval(ctx, f.body.clone(), batch, regs);
                for (p, &(op, v)) in f.folds.iter().enumerate() {
                    let values = regs.get(ctx, v, n);
                    if float(v) {
                        let lane = (s - stretch) % 8;
                        simd::fold_into(op.combine(), &mut eight[p][lane * n..(lane + 1) * n], values);
                    } else {
                        for (a, &x) in acc[p].iter_mut().zip(values) {
                            *a = combine(op, lanes(v), *a, x);
                        }
                    }
                }
            }
            for (p, &(op, v)) in f.folds.iter().enumerate().filter(|&(_, &(_, v))| float(v)) {
                for (i, a) in acc[p].iter_mut().enumerate() {
                    let e: [f32; 8] = std::array::from_fn(|l| eight[p][l * n + i]);
                    *a = combine(op, lanes(v), *a, pairwise8(op, &e));
                }
                eight[p].fill(op.identity());
            }
        }
        acc
    }
}

impl Batch {
    /// Owns the elements at `at`, reusing the index vector it had.
    fn own_at(&mut self, at: impl Iterator<Item = usize>) {
        let mut v = match std::mem::replace(&mut self.own, Own::From(0)) {
            Own::At(v) => v,
            Own::From(_) | Own::Runs => Vec::new(),
        };
        v.clear();
        v.extend(at);
        self.own = Own::At(v);
    }

    /// Becomes the elements `range` along the folded axis at the output whose coordinates are `base` (the axis at
    /// 0), reusing its vectors: one run. When the folded elements are adjacent (`rows`) they are a window of the
    /// inputs.
    fn along(&mut self, dims: &[usize], axis: usize, rows: bool, base: &[i64], range: Range<usize>) {
        self.len = range.len();
        let stride: usize = dims[axis + 1..].iter().product();
        let first = ravel(base, dims) + range.start * stride;
        self.own = if rows { Own::From(first) } else { Own::Runs };
        self.ahead = self.len;
        self.runs.clear(dims.len());
        if self.len > 0 {
            let mut start: smallvec::SmallVec<[i64; 8]> = base.into();
            start[axis] = range.start as i64;
            self.runs.push(Run { at: 0, len: self.len, axis, own: first, own_step: stride }, &start);
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
    let walk = Walk { k, ctx: &ctx, dims: &dims, axis, rows: true, strided };
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
                        let folding = Folding { body: body.clone(), folds: vec![(*op, *value)] };
                        let acc = walk.one(&folding, &base, 0..n, batch, regs)[0];
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
                            batch.along(&dims, axis, true, &base, s..e);
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
