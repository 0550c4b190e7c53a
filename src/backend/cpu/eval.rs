//! Running kernel IR on the CPU: each instruction over a batch of a few hundred elements at a time (loops the
//! compiler vectorizes, no temporaries of the tensor's size), batches in parallel on rayon.

use crate::kernel::{Access, Instr, Kernel, Kind, Reduce};
use crate::op::ReduceOp;
use rayon::prelude::*;
use std::ops::Range;

/// Elements each instruction is applied to at once.
const BATCH: usize = 256;
/// Elements one parallel task covers.
const TASK: usize = 32 * BATCH;

/// A pointer to an output that parallel tasks write disjoint ranges of.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: every task writes its own range of the output, and the outputs outlive the parallel loop.
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

/// Where a batch's elements are at the kernel's own index.
enum Own {
    /// Consecutive, from this index.
    From(usize),
    /// At these indices.
    At(Vec<usize>),
}

/// A batch of elements: their coordinates (per axis, one per element) and own indices.
struct Batch {
    len: usize,
    own: Own,
    coords: Vec<Vec<i64>>,
    /// In a reduce kernel's epilogue: each element's folded value.
    folded: Vec<f32>,
}

impl Batch {
    /// Elements `lo..hi` of `k`'s row-major order.
    fn range(k: &Kernel, lo: usize, hi: usize) -> Batch {
        let dims = k.shape.dims();
        let coords = if k.dims_at.is_some() {
            let mut coords = vec![Vec::with_capacity(hi - lo); dims.len()];
            let mut c = unravel(lo, dims);
            for _ in lo..hi {
                for (axis, v) in coords.iter_mut().zip(&c) {
                    axis.push(*v);
                }
                for d in (0..dims.len()).rev() {
                    c[d] += 1;
                    if c[d] < dims[d] as i64 || d == 0 {
                        break;
                    }
                    c[d] = 0;
                }
            }
            coords
        } else {
            Vec::new()
        };
        Batch { len: hi - lo, own: Own::From(lo), coords, folded: Vec::new() }
    }
}

/// The coordinates of row-major index `i` in `dims`.
fn unravel(mut i: usize, dims: &[usize]) -> Vec<i64> {
    let mut c = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        c[d] = (i % dims[d].max(1)) as i64;
        i /= dims[d].max(1);
    }
    c
}

fn param(k: &Kernel, at: usize) -> i64 {
    k.params[at] as i32 as i64
}

/// A kernel being run: its IR, its inputs, and where each concatenation's parts start.
struct Ctx<'a> {
    k: &'a Kernel,
    inputs: &'a [&'a [f32]],
    /// For each instruction, the concatenations whose parts start there (outermost last).
    cats: Vec<Vec<usize>>,
    /// For each strided load, its strides and offset, read from the parameters once.
    views: Vec<Option<(Vec<i64>, i64)>>,
}

impl<'a> Ctx<'a> {
    fn new(k: &'a Kernel, inputs: &'a [&'a [f32]]) -> Ctx<'a> {
        let mut cats = vec![Vec::new(); k.body.len() + 1];
        for (q, instr) in k.body.iter().enumerate() {
            if let Instr::Cat { parts, .. } = instr {
                cats[parts.first().map_or(q, |p| p.body.start)].push(q);
            }
        }
        let rank = k.shape.ndim();
        let views = k
            .body
            .iter()
            .map(|instr| match instr {
                Instr::Load { view: Some(v), .. } => {
                    Some(((0..rank).map(|d| param(k, v.at + d)).collect(), param(k, v.at + rank)))
                }
                _ => None,
            })
            .collect();
        Ctx { k, inputs, cats, views }
    }
}

/// Evaluates instructions `range` over `batch`, each into `regs[instruction]`.
fn eval(ctx: &Ctx, range: Range<usize>, batch: &Batch, regs: &mut [Vec<f32>]) {
    let (k, inputs) = (ctx.k, ctx.inputs);
    let n = batch.len;
    let mut i = range.start;
    while i < range.end {
        // A concatenation's parts are evaluated inside it, on the elements each part covers.
        if let Some(&q) = ctx.cats[i].iter().filter(|&&q| q < range.end).max() {
            cat(ctx, q, batch, regs);
            i = q + 1;
            continue;
        }
        // Every instruction overwrites its register whole, so it is only resized, never cleared.
        let mut out = std::mem::take(&mut regs[i]);
        out.resize(n, 0.0);
        match &k.body[i] {
            Instr::Load { input, view: None, .. } => match &batch.own {
                Own::From(lo) => out.copy_from_slice(&inputs[*input][*lo..lo + n]),
                Own::At(at) => out.iter_mut().zip(at).for_each(|(o, &j)| *o = inputs[*input][j]),
            },
            Instr::Load { input, view: Some(_), access } => {
                debug_assert!(!matches!(access, Access::Own));
                let src = inputs[*input];
                let (strides, offset) = ctx.views[i].as_ref().expect("a strided load's view");
                for (j, o) in out.iter_mut().enumerate() {
                    let mut at = *offset;
                    for (c, s) in batch.coords.iter().zip(strides) {
                        at += c[j] * s;
                    }
                    *o = src[at as usize];
                }
            }
            Instr::Scalar(at) => out.fill(f32::from_bits(k.params[*at])),
            Instr::Unary(op, a) => op.eval_slice(&regs[*a], &mut out),
            Instr::Binary(op, a, b) => op.eval_slice(&regs[*a], &regs[*b], &mut out),
            Instr::Reduced => out.copy_from_slice(&batch.folded),
            Instr::Cat { .. } => unreachable!("handled above"),
        }
        regs[i] = out;
        i += 1;
    }
}

/// Evaluates the concatenation at instruction `q`: each part on the elements whose selecting coordinate falls in it.
fn cat(ctx: &Ctx, q: usize, batch: &Batch, regs: &mut [Vec<f32>]) {
    let k = ctx.k;
    let Instr::Cat { axis, parts, .. } = &k.body[q] else { unreachable!() };
    let mut out = vec![0.0; batch.len];
    let mut taken = vec![false; batch.len];
    for part in parts {
        let bound = param(k, part.bound);
        let at: Vec<usize> = (0..batch.len).filter(|&j| !taken[j] && batch.coords[*axis][j] < bound).collect();
        if at.is_empty() {
            continue;
        }
        let frame = k.frames[part.frame - 1];
        let shift = param(k, frame.shift);
        let coords = batch
            .coords
            .iter()
            .enumerate()
            .map(|(d, c)| at.iter().map(|&j| if d == frame.axis { c[j] - shift } else { c[j] }).collect())
            .collect();
        let own = match &batch.own {
            Own::From(lo) => Own::At(at.iter().map(|&j| lo + j).collect()),
            Own::At(idx) => Own::At(at.iter().map(|&j| idx[j]).collect()),
        };
        let folded = if batch.folded.is_empty() { Vec::new() } else { at.iter().map(|&j| batch.folded[j]).collect() };
        let sub = Batch { len: at.len(), own, coords, folded };
        // Values from outside the part that it reads, narrowed to its elements.
        let mut sub_regs: Vec<Vec<f32>> = vec![Vec::new(); k.body.len()];
        for instr in &k.body[part.body.clone()] {
            let operands: &[usize] = match instr {
                Instr::Unary(_, a) => std::slice::from_ref(a),
                Instr::Binary(_, a, b) => &[*a, *b],
                _ => &[],
            };
            for &o in operands {
                if o < part.body.start && sub_regs[o].is_empty() {
                    sub_regs[o] = at.iter().map(|&j| regs[o][j]).collect();
                }
            }
        }
        eval(ctx, part.body.clone(), &sub, &mut sub_regs);
        for (n, &j) in at.iter().enumerate() {
            out[j] = sub_regs[part.value][n];
            taken[j] = true;
        }
    }
    regs[q] = out;
}

/// Runs an elementwise kernel.
pub(super) fn elementwise(k: &Kernel, inputs: &[&[f32]], outputs: &mut [&mut [f32]]) {
    let ctx = Ctx::new(k, inputs);
    let numel = k.shape.numel();
    let outs: Vec<Out> = outputs.iter_mut().map(|o| Out(o.as_mut_ptr())).collect();
    (0..numel.div_ceil(TASK)).into_par_iter().for_each(|t| {
        let mut regs = vec![Vec::new(); k.body.len()];
        let end = numel.min((t + 1) * TASK);
        for lo in (t * TASK..end).step_by(BATCH) {
            let hi = end.min(lo + BATCH);
            eval(&ctx, 0..k.body.len(), &Batch::range(k, lo, hi), &mut regs);
            for (o, &(_, v)) in outs.iter().zip(&k.outputs) {
                // SAFETY: tasks write disjoint ranges `lo..hi` of outputs of `numel` elements.
                let dst = unsafe { std::slice::from_raw_parts_mut(o.0.add(lo), hi - lo) };
                dst.copy_from_slice(&regs[v]);
            }
        }
    });
}

/// `values` folded with `op` pairwise, as a tree.
fn tree(op: ReduceOp, values: &mut [f32]) -> f32 {
    let f = op.combine();
    let mut n = values.len();
    if n == 0 {
        return op.identity();
    }
    while n > 1 {
        let half = n.div_ceil(2);
        for i in 0..n / 2 {
            values[i] = f.eval(values[i], values[i + half]);
        }
        n = half;
    }
    values[0]
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
    (0..blocks * chunks).into_par_iter().for_each(|t| {
        let (b, j) = (t / chunks, t % chunks);
        let block = b * BATCH..out_count.min((b + 1) * BATCH);
        let (lo, hi) = (j * len, n.min(j * len + len));
        let mut regs = vec![Vec::new(); k.body.len()];
        let mut folded = Vec::with_capacity(block.len());
        for o in block.clone() {
            let base = unravel(o, &out_dims);
            let mut acc = r.op.identity();
            for s in (lo..hi).step_by(BATCH) {
                let e = hi.min(s + BATCH);
                let batch = along_axis(&dims, &r, &base, s..e);
                eval(&ctx, 0..r.prologue, &batch, &mut regs);
                let mut v = std::mem::take(&mut regs[r.value]);
                acc = r.op.combine().eval(acc, tree(r.op, &mut v));
                regs[r.value] = v;
            }
            folded.push(acc);
        }
        if r.partial {
            let mut part_dims = out_dims.clone();
            part_dims[r.axis] = chunks;
            for (o, &v) in block.clone().zip(&folded) {
                let mut c = unravel(o, &out_dims);
                c[r.axis] = j as i64;
                let at = c.iter().zip(&part_dims).fold(0usize, |a, (&c, &d)| a * d + c as usize);
                // SAFETY: each (output, chunk) pair is written by exactly one task.
                unsafe { *outs[0].0.add(at) = v };
            }
            return;
        }
        let coords = (0..dims.len())
            .map(|d| block.clone().map(|o| if d == r.axis { 0 } else { unravel(o, &out_dims)[d] }).collect())
            .collect();
        let batch = Batch { len: block.len(), own: Own::From(block.start), coords, folded };
        eval(&ctx, r.prologue..k.body.len(), &batch, &mut regs);
        for (o, &(_, v)) in outs.iter().zip(&k.outputs) {
            // SAFETY: blocks of outputs are disjoint between tasks (a final fold has one chunk).
            let dst = unsafe { std::slice::from_raw_parts_mut(o.0.add(block.start), block.len()) };
            dst.copy_from_slice(&regs[v]);
        }
    });
}

/// The elements `range` along the folded axis at the output whose coordinates are `base`.
fn along_axis(dims: &[usize], r: &Reduce, base: &[i64], range: Range<usize>) -> Batch {
    let len = range.len();
    let coords: Vec<Vec<i64>> = (0..dims.len())
        .map(|d| if d == r.axis { range.clone().map(|x| x as i64).collect() } else { vec![base[d]; len] })
        .collect();
    let own =
        Own::At((0..len).map(|j| coords.iter().zip(dims).fold(0usize, |a, (c, &d)| a * d + c[j] as usize)).collect());
    Batch { len, own, coords, folded: Vec::new() }
}
