//! Running kernel IR on the CPU: each instruction over a batch of a few hundred elements at a time (loops the
//! compiler vectorizes, no temporaries of the tensor's size), batches in parallel on rayon.

use super::simd;
use crate::kernel::{Access, Instr, Kernel, Kind, Phase};
use crate::op::ReduceOp;
use rayon::prelude::*;
use std::ops::Range;

/// Elements each instruction is applied to at once: a few kilobytes per register, so a kernel's registers stay in
/// the L1 and L2 caches while streams from memory stay long enough to prefetch (1024 measured best of 256-2048).
const BATCH: usize = 1024;
/// Elements one parallel task covers.
const TASK: usize = 32 * BATCH;

/// Runs `f` for every task index, in parallel on rayon's pool, or in order when called from one of its threads:
/// a pool thread waiting on nested tasks may run one of its caller's other tasks, which could lock this device
/// again on the same thread.
pub(super) fn tasks(n: usize, f: impl Fn(usize) + Send + Sync) {
    if rayon::current_thread_index().is_some() {
        (0..n).for_each(f);
    } else {
        (0..n).into_par_iter().for_each(f);
    }
}

/// A pointer to an output that parallel tasks write disjoint ranges of.
#[derive(Clone, Copy)]
pub(super) struct Out(pub(super) *mut f32);
// SAFETY: every task writes its own range of the output, and the outputs outlive the parallel loop.
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

impl Out {
    /// The address `i` elements on. Closures that call this capture the whole `Out` (`Sync`), not its raw pointer.
    pub(super) fn at(self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

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
    /// In a rows kernel: the row's folds so far.
    folds: Vec<f32>,
}

impl Batch {
    fn empty() -> Batch {
        Batch { len: 0, own: Own::From(0), coords: Vec::new(), folded: Vec::new(), folds: Vec::new() }
    }

    /// Becomes elements `lo..hi` of `k`'s row-major order, reusing its vectors.
    fn fill(&mut self, k: &Kernel, lo: usize, hi: usize) {
        self.len = hi - lo;
        self.own = Own::From(lo);
        if k.dims_at.is_none() {
            return;
        }
        let dims = k.shape.dims();
        self.coords.resize(dims.len(), Vec::new());
        let mut c = unravel(lo, dims);
        for axis in &mut self.coords {
            axis.clear();
        }
        for _ in lo..hi {
            for (axis, v) in self.coords.iter_mut().zip(&c) {
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
    }
}

/// The coordinates of row-major index `i` in `dims`.
pub(super) fn unravel(mut i: usize, dims: &[usize]) -> Vec<i64> {
    let mut c = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        c[d] = (i % dims[d].max(1)) as i64;
        i /= dims[d].max(1);
    }
    c
}

pub(super) fn param(k: &Kernel, at: usize) -> i64 {
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

/// Each instruction's values over the current batch: computed into its own vector, or, for a load at the kernel's
/// own index over consecutive elements, a window of the input itself (no copy).
struct Regs {
    vals: Vec<Vec<f32>>,
    window: Vec<Option<(usize, usize)>>,
    /// For scalar registers: the length they were last filled to.
    filled: Vec<usize>,
}

impl Regs {
    fn new(n: usize) -> Regs {
        Regs { vals: vec![Vec::new(); n], window: vec![None; n], filled: vec![0; n] }
    }

    /// The values of instruction `i` over a batch of `len` elements.
    fn get<'a>(&'a self, ctx: &'a Ctx, i: usize, len: usize) -> &'a [f32] {
        match self.window[i] {
            Some((input, lo)) => &ctx.inputs[input][lo..lo + len],
            None => &self.vals[i],
        }
    }
}

/// Evaluates instructions `range` over `batch`, each into `regs`.
fn eval(ctx: &Ctx, range: Range<usize>, batch: &Batch, regs: &mut Regs) {
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
        if let (Instr::Load { input, view: None, .. }, Own::From(lo)) = (&k.body[i], &batch.own) {
            regs.window[i] = Some((*input, *lo));
            i += 1;
            continue;
        }
        regs.window[i] = None;
        // Every instruction overwrites its register whole, so it is only resized, never cleared.
        let mut out = std::mem::take(&mut regs.vals[i]);
        out.resize(n, 0.0);
        match &k.body[i] {
            Instr::Load { input, view: None, .. } => match &batch.own {
                Own::From(_) => unreachable!("a window, above"),
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
            // The same value for every batch of a task: filled when the batch length changes, not per batch.
            Instr::Scalar(at) => {
                let v = f32::from_bits(k.params[*at]);
                if out.first() != Some(&v) || regs.filled[i] != n {
                    out.fill(v);
                    regs.filled[i] = n;
                }
            }
            Instr::Unary(op, a) => simd::unary(*op, regs.get(ctx, *a, n), &mut out),
            Instr::Binary(op, a, b) => simd::binary(*op, regs.get(ctx, *a, n), regs.get(ctx, *b, n), &mut out),
            Instr::Reduced => out.copy_from_slice(&batch.folded),
            Instr::Folded(f) => out.fill(batch.folds[*f]),
            Instr::Cat { .. } => unreachable!("handled above"),
        }
        regs.vals[i] = out;
        i += 1;
    }
}

/// Evaluates the concatenation at instruction `q`: each part on the elements whose selecting coordinate falls in it.
fn cat(ctx: &Ctx, q: usize, batch: &Batch, regs: &mut Regs) {
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
        let sub = Batch { len: at.len(), own, coords, folded, folds: batch.folds.clone() };
        // Values from outside the part that it reads, narrowed to its elements.
        let mut sub_regs = Regs::new(k.body.len());
        for instr in &k.body[part.body.clone()] {
            let operands: &[usize] = match instr {
                Instr::Unary(_, a) => std::slice::from_ref(a),
                Instr::Binary(_, a, b) => &[*a, *b],
                _ => &[],
            };
            for &o in operands {
                if o < part.body.start && sub_regs.vals[o].is_empty() {
                    let values = regs.get(ctx, o, batch.len);
                    sub_regs.vals[o] = at.iter().map(|&j| values[j]).collect();
                }
            }
        }
        eval(ctx, part.body.clone(), &sub, &mut sub_regs);
        let values = sub_regs.get(ctx, part.value, at.len());
        for (n, &j) in at.iter().enumerate() {
            out[j] = values[n];
            taken[j] = true;
        }
    }
    regs.window[q] = None;
    regs.vals[q] = out;
}

/// Runs an elementwise kernel.
pub(super) fn elementwise(k: &Kernel, inputs: &[&[f32]], outputs: &mut [&mut [f32]]) {
    let values: Vec<usize> = k.outputs.iter().map(|&(_, v)| v).collect();
    map(k, 0..k.body.len(), inputs, &values, outputs, None);
}

/// Runs instructions `range` of `k` at every element of its shape, storing the values of instructions `values` to
/// `outputs` at the element's row-major index; `reduced`, if given, is [`Instr::Reduced`] at each element.
pub(super) fn map(
    k: &Kernel,
    range: Range<usize>,
    inputs: &[&[f32]],
    values: &[usize],
    outputs: &mut [&mut [f32]],
    reduced: Option<&[f32]>,
) {
    let ctx = Ctx::new(k, inputs);
    let numel = k.shape.numel();
    let outs: Vec<Out> = outputs.iter_mut().map(|o| Out(o.as_mut_ptr())).collect();
    tasks(numel.div_ceil(TASK), |t| {
        let mut regs = Regs::new(k.body.len());
        let mut batch = Batch::empty();
        let end = numel.min((t + 1) * TASK);
        for lo in (t * TASK..end).step_by(BATCH) {
            let hi = end.min(lo + BATCH);
            batch.fill(k, lo, hi);
            if let Some(r) = reduced {
                batch.folded.clear();
                batch.folded.extend_from_slice(&r[lo..hi]);
            }
            eval(&ctx, range.clone(), &batch, &mut regs);
            for (o, &v) in outs.iter().zip(values) {
                // SAFETY: tasks write disjoint ranges `lo..hi` of outputs of `numel` elements.
                let dst = unsafe { std::slice::from_raw_parts_mut(o.0.add(lo), hi - lo) };
                dst.copy_from_slice(regs.get(&ctx, v, hi - lo));
            }
        }
    });
}

/// `values` folded with `op`: 8 interleaved running folds (element `j` into fold `j % 8`, which the compiler
/// vectorizes), then the 8 pairwise. The order depends on the length alone.
fn tree(op: ReduceOp, values: &[f32]) -> f32 {
    let mut acc = [op.identity(); 8];
    simd::fold8(op, values, &mut acc);
    let f = op.combine();
    let (a, b) = (
        f.eval(f.eval(acc[0], acc[4]), f.eval(acc[2], acc[6])),
        f.eval(f.eval(acc[1], acc[5]), f.eval(acc[3], acc[7])),
    );
    f.eval(a, b)
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
    let strided =
        k.body[..r.prologue].iter().any(|i| matches!(i, Instr::Load { view: Some(_), .. } | Instr::Cat { .. }));
    tasks(blocks * chunks, |t| {
        let (b, j) = (t / chunks, t % chunks);
        let block = b * BATCH..out_count.min((b + 1) * BATCH);
        let (lo, hi) = (j * len, n.min(j * len + len));
        let mut regs = Regs::new(k.body.len());
        let mut folded = Vec::with_capacity(block.len());
        for o in block.clone() {
            let base = unravel(o, &out_dims);
            let mut acc = r.op.identity();
            for s in (lo..hi).step_by(BATCH) {
                let e = hi.min(s + BATCH);
                let batch = along_axis(&dims, r.axis, r.rows, &base, s..e, strided);
                eval(&ctx, 0..r.prologue, &batch, &mut regs);
                acc = r.op.combine().eval(acc, tree(r.op, regs.get(&ctx, r.value, e - s)));
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
        let batch = Batch { len: block.len(), own: Own::From(block.start), coords, folded, folds: Vec::new() };
        eval(&ctx, r.prologue..k.body.len(), &batch, &mut regs);
        for (o, &(_, v)) in outs.iter().zip(&k.outputs) {
            // SAFETY: blocks of outputs are disjoint between tasks (a final fold has one chunk).
            let dst = unsafe { std::slice::from_raw_parts_mut(o.0.add(block.start), block.len()) };
            dst.copy_from_slice(regs.get(&ctx, v, block.len()));
        }
    });
}

/// The elements `range` along the folded axis at the output whose coordinates are `base`. Coordinates are made
/// only when the prologue reads through a view (`coords`); when the folded elements are adjacent they are a window
/// of the inputs.
fn along_axis(dims: &[usize], axis: usize, rows: bool, base: &[i64], range: Range<usize>, coords: bool) -> Batch {
    let len = range.len();
    let linear = |c: &dyn Fn(usize) -> i64| (0..dims.len()).fold(0usize, |a, d| a * dims[d] + c(d) as usize);
    let first = linear(&|d| if d == axis { range.start as i64 } else { base[d] });
    let own = if rows {
        Own::From(first)
    } else {
        let stride: usize = dims[axis + 1..].iter().product();
        Own::At((0..len).map(|j| first + j * stride).collect())
    };
    let coords = if coords {
        (0..dims.len())
            .map(|d| if d == axis { range.clone().map(|x| x as i64).collect() } else { vec![base[d]; len] })
            .collect()
    } else {
        Vec::new()
    };
    Batch { len, own, coords, folded: Vec::new(), folds: Vec::new() }
}

/// Runs a rows kernel: each row is one parallel task running the phases in order, each over the row in batches.
pub(super) fn rows(k: &Kernel, inputs: &[&[f32]], outputs: &mut [&mut [f32]]) {
    let Kind::Rows { axis, .. } = k.kind else { unreachable!("a rows kernel") };
    let ctx = Ctx::new(k, inputs);
    let dims = k.shape.dims().to_vec();
    let n = dims[axis];
    let mut out_dims = dims.clone();
    out_dims[axis] = 1;
    let strided = k.body.iter().any(|i| matches!(i, Instr::Load { view: Some(_), .. } | Instr::Cat { .. }));
    let outs: Vec<Out> = outputs.iter_mut().map(|o| Out(o.as_mut_ptr())).collect();
    tasks(k.params[0] as usize, |o| {
        let mut regs = Regs::new(k.body.len());
        let base = unravel(o, &out_dims);
        let mut folds: Vec<f32> = Vec::new();
        for phase in &k.phases {
            let mut acc = None;
            for s in (0..n).step_by(BATCH) {
                let e = n.min(s + BATCH);
                let mut batch = along_axis(&dims, axis, true, &base, s..e, strided);
                batch.folds.clone_from(&folds);
                match phase {
                    Phase::Fold { op, body, value, .. } => {
                        eval(&ctx, body.clone(), &batch, &mut regs);
                        let a = acc.unwrap_or(op.identity());
                        acc = Some(op.combine().eval(a, tree(*op, regs.get(&ctx, *value, e - s))));
                    }
                    Phase::Map { body, outputs } => {
                        eval(&ctx, body.clone(), &batch, &mut regs);
                        for &m in outputs {
                            // SAFETY: each row's elements are written by its own task only.
                            let dst = unsafe { std::slice::from_raw_parts_mut(outs[m].0.add(o * n + s), e - s) };
                            dst.copy_from_slice(regs.get(&ctx, k.outputs[m].1, e - s));
                        }
                    }
                }
            }
            if let Phase::Fold { op, output, .. } = phase {
                let v = acc.unwrap_or(op.identity());
                folds.push(v);
                if let Some(m) = output {
                    // SAFETY: as above; a row's fold is at the row's index.
                    unsafe { *outs[*m].0.add(o) = v };
                }
            }
        }
    });
}
