//! Running kernel IR on the CPU: each instruction over a batch of elements at a time, batches in parallel on rayon.

// Batch-sized loops the compiler vectorizes, and no temporaries of the tensor's size.

use super::regs::{operands, Plan, Step};
use super::simd;
use crate::dtype::{Class, DType};
use crate::kernel::{Access, Instr, Kernel};
use bytemuck::{cast_slice, cast_slice_mut};
use rayon::prelude::*;
use std::ops::Range;

/// Elements each instruction is applied to at once: a few kilobytes per register, so a kernel's registers stay in
/// the L1 and L2 caches while streams from memory stay long enough to prefetch (1024 measured best of 256-2048).
pub(super) const BATCH: usize = 1024;
/// Outputs of at least this many bytes are written with non-temporal stores ([`simd::stream`]): they would not
/// stay in the cache anyway.
const STREAM_BYTES: usize = 8 << 20;
/// Inputs of at least this many bytes have each window prefetched a batch ahead: past the L2 cache.
const PREFETCH_BYTES: usize = 1 << 20;
/// Elements one parallel task covers.
const TASK: usize = 32 * BATCH;

/// Runs `f` for every task index, in parallel on rayon's pool, or in order when called from one of its threads:
/// a pool thread waiting on nested tasks may run one of its caller's other tasks, which could lock this device
/// again on the same thread.
pub(super) fn tasks(n: usize, f: impl Fn(usize) + Send + Sync) {
    tasks_with(n, || (), |_, t| f(t));
}

/// [`tasks`] with a state made by `init` for each worker (not each task): registers are allocated, and constants
/// filled, once per thread rather than once per task.
pub(super) fn tasks_with<S>(n: usize, init: impl Fn() -> S + Send + Sync, f: impl Fn(&mut S, usize) + Send + Sync) {
    if rayon::current_thread_index().is_some() {
        let mut state = init();
        (0..n).for_each(|t| f(&mut state, t));
    } else {
        (0..n).into_par_iter().for_each_init(init, f);
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
pub(super) enum Own {
    /// Consecutive, from this index.
    From(usize),
    /// At these indices.
    At(Vec<usize>),
}

/// A batch of elements: their coordinates (per axis, one per element) and own indices.
pub(super) struct Batch {
    pub(super) len: usize,
    pub(super) own: Own,
    pub(super) coords: Vec<Vec<i64>>,
    /// In a reduce kernel's epilogue: each element's folded value.
    pub(super) folded: Vec<f32>,
    /// In a rows kernel: the row's folds so far.
    pub(super) folds: Vec<f32>,
}

impl Batch {
    pub(super) fn empty() -> Batch {
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

/// The row-major index of coordinates `c` in `dims` (the inverse of [`unravel`]).
pub(super) fn ravel(c: &[i64], dims: &[usize]) -> usize {
    c.iter().zip(dims).fold(0, |a, (&c, &d)| a * d + c as usize)
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

/// A kernel being run: its IR, its inputs (words, as stored), and where each concatenation's parts start.
pub(super) struct Ctx<'a> {
    k: &'a Kernel,
    inputs: &'a [&'a [f32]],
    /// Inputs whose elements are 32-bit words, read in place; narrower ones are widened to lanes as they load.
    word_inputs: Vec<bool>,
    /// For each instruction, the concatenations whose parts start there (outermost last).
    cats: Vec<Vec<usize>>,
    /// For each strided load, its strides and offset, read from the parameters once.
    views: Vec<Option<(Vec<i64>, i64)>>,
    /// Registers, pairs and vector reads (see [`Plan`]).
    plan: Plan,
    /// For each input, whether its windows are prefetched a batch ahead: those too large to stay in the caches.
    prefetch: Vec<bool>,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(k: &'a Kernel, inputs: &'a [&'a [f32]]) -> Ctx<'a> {
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
                Instr::Load { view: Some(v), .. } | Instr::Index { view: Some(v) } => {
                    Some(((0..rank).map(|d| param(k, v.at + d)).collect(), param(k, v.at + rank)))
                }
                _ => None,
            })
            .collect();
        let word_inputs = k.in_types.iter().map(|d| d.size_in_bytes() == 4).collect();
        let prefetch = inputs.iter().map(|i| i.len() * 4 >= PREFETCH_BYTES).collect();
        Ctx { k, inputs, word_inputs, cats, views, plan: Plan::new(k), prefetch }
    }

    /// Fills `out[j]` with element `at(j)` of input `n`, as lanes: 32-bit elements are copied, narrower ones
    /// widened. The type is looked at once per batch, not per element.
    fn gather(&self, n: usize, out: &mut [f32], at: impl Fn(usize) -> usize) {
        let src = self.inputs[n];
        if self.word_inputs[n] {
            out.iter_mut().enumerate().for_each(|(j, o)| *o = src[at(j)]);
        } else {
            let (dt, words) = (self.k.in_types[n], bytemuck::cast_slice(src));
            out.iter_mut().enumerate().for_each(|(j, o)| *o = f32::from_bits(dt.load(words, at(j))));
        }
    }
}

/// Each instruction's values over the current batch: computed into its register, or, for a load at the kernel's
/// own index over consecutive elements, a window of the input itself (no copy).
pub(super) struct Regs {
    /// Per register (see [`Plan`]).
    vals: Vec<Vec<f32>>,
    /// Per instruction.
    window: Vec<Option<(usize, usize)>>,
    /// For scalar registers: the length they were last filled to.
    filled: Vec<usize>,
}

impl Regs {
    pub(super) fn new(ctx: &Ctx) -> Regs {
        let slots = ctx.plan.slots;
        Regs { vals: vec![Vec::new(); slots], window: vec![None; ctx.k.body.len()], filled: vec![0; slots] }
    }

    /// The values of instruction `i` over a batch of `len` elements.
    pub(super) fn get<'a>(&'a self, ctx: &'a Ctx, i: usize, len: usize) -> &'a [f32] {
        match self.window[i] {
            Some((input, lo)) => &ctx.inputs[input][lo..lo + len],
            None => &self.vals[ctx.plan.slot[i]],
        }
    }
}

/// Evaluates instructions `range` over `batch`, each into `regs`.
pub(super) fn eval(ctx: &Ctx, range: Range<usize>, batch: &Batch, regs: &mut Regs) {
    let k = ctx.k;
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
            if ctx.word_inputs[*input] {
                regs.window[i] = Some((*input, *lo));
                if ctx.prefetch[*input] {
                    prefetch(ctx.inputs[*input], lo + n, n);
                }
                i += 1;
                continue;
            }
        }
        regs.window[i] = None;
        let skip = match ctx.plan.step[i] {
            Step::Skip => true,
            _ => !ctx.plan.vector_read[i] && matches!(k.body[i], Instr::Scalar(_)),
        };
        if skip {
            i += 1;
            continue;
        }
        // Every instruction overwrites its register whole, so it is only resized, never cleared.
        let r = ctx.plan.slot[i];
        let mut out = std::mem::take(&mut regs.vals[r]);
        out.resize(n, 0.0);
        match ctx.plan.step[i] {
            Step::Pair { op1, x, y, op2, s, scalar_left } => {
                simd::pair(op1, op2, regs.get(ctx, x, n), regs.get(ctx, y, n), s, scalar_left, &mut out)
            }
            Step::Mapped { u, op1, x, y, cx, cy } => {
                let src = |v: usize, c: Option<f32>| match c {
                    Some(c) => simd::Src::Const(c),
                    None => simd::Src::Slice(regs.get(ctx, v, n)),
                };
                simd::mapped(u, op1, src(x, cx), src(y, cy), &mut out)
            }
            Step::Plain => instr(ctx, i, batch, regs, &mut out),
            Step::Skip => unreachable!("skipped above"),
        }
        regs.vals[r] = out;
        i += 1;
    }
}

/// Computes instruction `i` (a plain step) over `batch` into `out`, its register's vector.
fn instr(ctx: &Ctx, i: usize, batch: &Batch, regs: &mut Regs, out: &mut [f32]) {
    let (k, n) = (ctx.k, batch.len);
    let dt = k.types[i];
    match &k.body[i] {
        Instr::Load { input, view: None, .. } => match &batch.own {
            Own::From(lo) => ctx.gather(*input, out, |j| lo + j),
            Own::At(at) => ctx.gather(*input, out, |j| at[j]),
        },
        Instr::Load { input, view: Some(_), access } => {
            debug_assert!(!matches!(access, Access::Own));
            let (strides, offset) = ctx.views[i].as_ref().expect("a strided load's view");
            ctx.gather(*input, out, |j| view_index(&batch.coords, j, strides, *offset));
        }
        Instr::Index { view: None } => match &batch.own {
            Own::From(lo) => out.iter_mut().enumerate().for_each(|(j, o)| *o = f32::from_bits((lo + j) as u32)),
            Own::At(at) => out.iter_mut().zip(at).for_each(|(o, &j)| *o = f32::from_bits(j as u32)),
        },
        Instr::Index { view: Some(_) } => {
            let (strides, offset) = ctx.views[i].as_ref().expect("an index's view");
            for (j, o) in out.iter_mut().enumerate() {
                *o = f32::from_bits(view_index(&batch.coords, j, strides, *offset) as u32);
            }
        }
        Instr::Cast(a) => {
            // A half value is rounded to its own type first: within a kernel it may still hold f32 bits.
            let from = k.types[*a];
            let src = regs.get(ctx, *a, n);
            out.iter_mut()
                .zip(src)
                .for_each(|(o, &x)| *o = f32::from_bits(dt.cast_lane(from, from.round(x).to_bits())));
        }
        Instr::Random(d, c, k0, k1) => {
            let (c, k0, k1) = (regs.get(ctx, *c, n), regs.get(ctx, *k0, n), regs.get(ctx, *k1, n));
            for (j, o) in out.iter_mut().enumerate() {
                *o = crate::random::sample(*d, c[j].to_bits(), [k0[j].to_bits(), k1[j].to_bits()]);
            }
        }
        Instr::Select(c, a, b) => {
            let (c, a, b) = (regs.get(ctx, *c, n), regs.get(ctx, *a, n), regs.get(ctx, *b, n));
            simd::select(c, a, b, out);
        }
        Instr::Gather { input, base, index, stride_at } => {
            let (stride, extent) = (param(k, *stride_at), param(k, stride_at + 1));
            let (base, index) = (regs.get(ctx, *base, n), regs.get(ctx, *index, n));
            let at = |j: usize| {
                let x = index[j].to_bits() as i32 as i64;
                (0..extent).contains(&x).then(|| (base[j].to_bits() as i32 as i64 + x * stride) as usize)
            };
            ctx.gather(*input, out, |j| at(j).unwrap_or(0));
            for (j, o) in out.iter_mut().enumerate() {
                if at(j).is_none() {
                    *o = 0.0;
                }
            }
        }
        // The same value for every batch of a task: filled when the batch length changes, not per batch.
        Instr::Scalar(at) => {
            let v = f32::from_bits(k.params[*at]);
            let r = ctx.plan.slot[i];
            if out.first() != Some(&v) || regs.filled[r] != n {
                out.fill(v);
                regs.filled[r] = n;
            }
        }
        Instr::Unary(op, a) => {
            let a = regs.get(ctx, *a, n);
            match dt.class() {
                Class::Float => simd::unary(*op, a, out),
                Class::Int => op.eval_int_slice::<i32>(false, cast_slice(a), cast_slice_mut(out)),
                Class::Uint => op.eval_int_slice::<u32>(false, cast_slice(a), cast_slice_mut(out)),
                Class::Bool => op.eval_int_slice::<u32>(true, cast_slice(a), cast_slice_mut(out)),
            }
        }
        Instr::Binary(op, a, b) => {
            let (x, y) = (regs.get(ctx, *a, n), regs.get(ctx, *b, n));
            let operands = k.types[*a];
            if op.is_compare() {
                let o: &mut [u32] = cast_slice_mut(out);
                match operands.class() {
                    Class::Float => simd::compare(*op, x, y, o),
                    Class::Int => op.compare_slice::<i32>(cast_slice(x), cast_slice(y), o),
                    Class::Uint | Class::Bool => op.compare_slice::<u32>(cast_slice(x), cast_slice(y), o),
                }
            } else {
                match dt.class() {
                    Class::Float => match (ctx.plan.scalar[*a], ctx.plan.scalar[*b]) {
                        (_, Some(s)) => simd::binary_scalar(*op, x, s, out),
                        (Some(s), None) => simd::scalar_binary(*op, s, y, out),
                        (None, None) => simd::binary(*op, x, y, out),
                    },
                    Class::Int => op.eval_int_slice::<i32>(false, cast_slice(x), cast_slice(y), cast_slice_mut(out)),
                    Class::Uint => op.eval_int_slice::<u32>(false, cast_slice(x), cast_slice(y), cast_slice_mut(out)),
                    Class::Bool => op.eval_int_slice::<u32>(true, cast_slice(x), cast_slice(y), cast_slice_mut(out)),
                }
            }
        }
        Instr::Reduced => out.copy_from_slice(&batch.folded),
        Instr::Folded(f) => out.fill(batch.folds[*f]),
        Instr::Cat { .. } => unreachable!("handled above"),
    }
}

/// Asks for `len` elements of `v` from `at` on (as far as there are) to be brought into the cache: the next batch
/// of a window, so its memory streams in while this batch computes.
#[inline]
fn prefetch(v: &[f32], at: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let end = v.len().min(at + len);
        let mut j = at;
        while j < end {
            // SAFETY: a prefetch of an address inside the slice; it has no architectural effect.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(v.as_ptr().add(j) as *const i8)
            };
            j += 16;
        }
    }
}

/// The element index a strided read reaches at element `j` of a batch.
#[inline]
fn view_index(coords: &[Vec<i64>], j: usize, strides: &[i64], offset: i64) -> usize {
    let mut at = offset;
    for (c, s) in coords.iter().zip(strides) {
        at += c[j] * s;
    }
    at as usize
}

/// Whether an instruction reads the batch's coordinates.
pub(super) fn needs_coords(i: &Instr) -> bool {
    matches!(i, Instr::Load { view: Some(_), .. } | Instr::Index { view: Some(_) } | Instr::Cat { .. })
}

/// Stores `lanes` of type `dt` at elements `at..` of the output buffer `out` (words as stored).
///
/// # Safety
/// The elements must be inside the buffer and written by no other thread at the same time.
pub(super) unsafe fn store(out: Out, dt: DType, at: usize, lanes: &[f32]) {
    match dt.size_in_bytes() {
        4 => std::ptr::copy_nonoverlapping(lanes.as_ptr(), out.at(at), lanes.len()),
        2 => {
            let base = (out.0 as *mut u16).add(at);
            for (j, &l) in lanes.iter().enumerate() {
                *base.add(j) = dt.store_bits(l.to_bits()) as u16;
            }
        }
        _ => {
            let base = (out.0 as *mut u8).add(at);
            for (j, &l) in lanes.iter().enumerate() {
                *base.add(j) = dt.store_bits(l.to_bits()) as u8;
            }
        }
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
        let mut sub_regs = Regs::new(ctx);
        for instr in &k.body[part.body.clone()] {
            for o in operands(instr) {
                if o < part.body.start && sub_regs.vals[ctx.plan.slot[o]].is_empty() {
                    let values = regs.get(ctx, o, batch.len);
                    sub_regs.vals[ctx.plan.slot[o]] = at.iter().map(|&j| values[j]).collect();
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
    regs.vals[ctx.plan.slot[q]] = out;
}

/// Runs an elementwise kernel.
pub(super) fn elementwise(k: &Kernel, inputs: &[&[f32]], outputs: &mut [&mut [f32]]) {
    let values: Vec<usize> = k.outputs.iter().map(|&(_, v)| v).collect();
    map(k, 0..k.body.len(), inputs, &values, &k.out_types, outputs, None);
}

/// Runs instructions `range` of `k` at every element of its shape, storing the values of instructions `values` as
/// `types` to `outputs` at the element's row-major index; `reduced`, if given, is [`Instr::Reduced`] at each
/// element.
pub(super) fn map(
    k: &Kernel,
    range: Range<usize>,
    inputs: &[&[f32]],
    values: &[usize],
    types: &[DType],
    outputs: &mut [&mut [f32]],
    reduced: Option<&[f32]>,
) {
    let ctx = Ctx::new(k, inputs);
    let numel = k.shape.numel();
    let outs: Vec<Out> = outputs.iter_mut().map(|o| Out(o.as_mut_ptr())).collect();
    let stream = numel * 4 >= STREAM_BYTES;
    tasks_with(
        numel.div_ceil(TASK),
        || (Regs::new(&ctx), Batch::empty()),
        |(regs, batch), t| {
            let end = numel.min((t + 1) * TASK);
            for lo in (t * TASK..end).step_by(BATCH) {
                let hi = end.min(lo + BATCH);
                batch.fill(k, lo, hi);
                if let Some(r) = reduced {
                    batch.folded.clear();
                    batch.folded.extend_from_slice(&r[lo..hi]);
                }
                eval(&ctx, range.clone(), batch, regs);
                for ((o, &v), &dt) in outs.iter().zip(values).zip(types) {
                    let lanes = regs.get(&ctx, v, hi - lo);
                    // SAFETY: tasks write disjoint ranges `lo..hi` of outputs of `numel` elements.
                    unsafe {
                        if stream && dt.size_in_bytes() == 4 {
                            simd::stream(o.at(lo), lanes)
                        } else {
                            store(*o, dt, lo, lanes)
                        }
                    };
                }
            }
            if stream {
                simd::stream_fence();
            }
        },
    );
}
