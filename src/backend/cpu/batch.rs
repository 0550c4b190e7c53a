//! What the CPU backend evaluates a kernel's body over: batches of elements (their coordinates as runs), the
//! kernel's context (inputs, plan, staged loads), the registers that hold each instruction's values, and the scratch
//! of concatenations' parts; plus the task and index helpers every map and fold shares.

use super::regs::Plan;
use super::runs::{read_strided, view_at, Runs};
use crate::kernel::{Instr, Kernel};
use std::ops::Range;

/// The evaluator of instructions over a batch (`eval::eval`), handed to what runs bodies of its own inside one
/// (a concatenation's parts), so that neither file needs the other's.
pub(super) type Eval = fn(&Ctx, Range<usize>, &Batch, &mut Regs);

/// Elements each instruction is applied to at once: a few kilobytes per register, so a kernel's registers stay in
/// the L1 and L2 caches while streams from memory stay long enough to prefetch (1024 measured best of 256-2048).
pub(super) const BATCH: usize = 1024;
/// Inputs of at least this many bytes have each window prefetched a batch ahead: past the L2 cache.
const PREFETCH_BYTES: usize = 1 << 20;

/// Runs `f` for every task index, in parallel on rayon's pool, or in order when called from one of its threads
/// (see [`crate::backend::par::on_pool_thread`]) and on wasm32.
pub(super) fn tasks(n: usize, f: impl Fn(usize) + Send + Sync) {
    tasks_with(n, || (), |_, t| f(t));
}

/// [`tasks`] with a state made by `init` for each worker (not each task): registers are allocated, and constants
/// filled, once per thread rather than once per task.
pub(super) fn tasks_with<S>(n: usize, init: impl Fn() -> S + Send + Sync, f: impl Fn(&mut S, usize) + Send + Sync) {
    crate::backend::par::for_each_init(n, init, f);
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
    /// Per run, from its `own` by its `own_step` (a tile of a transposing map, a part of a concatenation).
    Runs,
}

/// A batch of elements: their coordinates (as runs, where the body reads them) and own indices.
pub(super) struct Batch {
    pub(super) len: usize,
    pub(super) own: Own,
    pub(super) runs: Runs,
    /// Where the batch starts in the staged values of a tiled map ([`Window::Staged`]).
    pub(super) staged_at: usize,
    /// How far the next batch's own indices are on from this one's: where windows are prefetched.
    pub(super) ahead: usize,
    /// In a reduce kernel's epilogue: each element's folded value.
    pub(super) folded: Vec<f32>,
    /// In a rows kernel: the row's folds so far.
    pub(super) folds: Vec<f32>,
    /// In a reduce kernel's epilogue: each sibling fold's value per element.
    pub(super) siblings: Vec<Vec<f32>>,
}

impl Batch {
    pub(super) fn empty() -> Batch {
        Batch {
            len: 0,
            own: Own::From(0),
            runs: Runs::default(),
            staged_at: 0,
            ahead: 0,
            folded: Vec::new(),
            folds: Vec::new(),
            siblings: Vec::new(),
        }
    }

    /// Becomes elements `lo..hi` of `k`'s row-major order, reusing its vectors.
    pub(super) fn fill(&mut self, k: &Kernel, lo: usize, hi: usize) {
        self.len = hi - lo;
        self.own = Own::From(lo);
        self.ahead = self.len;
        if k.dims_at.is_some() {
            self.runs.row_major(k.shape.dims(), lo, hi);
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

/// A kernel being run: its IR, its inputs (words, as stored), and where each concatenation's parts start.
pub(super) struct Ctx<'a> {
    pub(super) k: &'a Kernel,
    pub(super) inputs: &'a [&'a [f32]],
    /// Inputs whose elements are 32-bit words, read in place; narrower ones are widened to lanes as they load.
    pub(super) word_inputs: Vec<bool>,
    /// For each instruction, the concatenations whose parts start there (outermost last).
    pub(super) cats: Vec<Vec<usize>>,
    /// For each strided load, its strides and offset, read from the parameters once.
    pub(super) views: Vec<Option<(Vec<i64>, i64)>>,
    /// Registers, pairs and vector reads (see [`Plan`]).
    pub(super) plan: Plan,
    /// For each load a tiled map stages ([`super::map`]), its slot in [`Regs::staged`].
    pub(super) staged: Vec<Option<usize>>,
    /// For each input, whether its windows are prefetched a batch ahead: those too large to stay in the caches.
    pub(super) prefetch: Vec<bool>,
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
                    Some(((0..rank).map(|d| k.signed(v.at + d)).collect(), k.signed(v.at + rank)))
                }
                _ => None,
            })
            .collect();
        let word_inputs = k.in_types.iter().map(|d| d.size_in_bytes() == 4).collect();
        let prefetch = inputs.iter().map(|i| i.len() * 4 >= PREFETCH_BYTES).collect();
        let staged = vec![None; k.body.len()];
        Ctx { k, inputs, word_inputs, cats, views, plan: Plan::new(k), prefetch, staged }
    }

    /// Fills `out[j]` with element `at(j)` of input `n`, as lanes: 32-bit elements are copied, narrower ones
    /// widened. The type is looked at once per batch, not per element.
    pub(super) fn gather(&self, n: usize, out: &mut [f32], at: impl Fn(usize) -> usize) {
        let src = self.inputs[n];
        if self.word_inputs[n] {
            out.iter_mut().enumerate().for_each(|(j, o)| *o = src[at(j)]);
        } else {
            let (dt, words) = (self.k.in_types[n], bytemuck::cast_slice(src));
            out.iter_mut().enumerate().for_each(|(j, o)| *o = f32::from_bits(dt.load(words, at(j))));
        }
    }

    /// Fills `out` with elements `base + j * step` of input `n`, as lanes.
    pub(super) fn read(&self, n: usize, base: i64, step: i64, out: &mut [f32]) {
        if self.word_inputs[n] {
            read_strided(self.inputs[n], base, step, out);
        } else {
            self.gather(n, out, |j| (base + j as i64 * step) as usize);
        }
    }

    /// Fills `out` with input `n` read through a view (`strides`, `offset`) at the batch's coordinates: a strided
    /// read per run.
    pub(super) fn read_view(&self, n: usize, (strides, offset): &(Vec<i64>, i64), batch: &Batch, out: &mut [f32]) {
        for (run, start) in batch.runs.iter() {
            let (base, step) = view_at(strides, *offset, run, start);
            self.read(n, base, step, &mut out[run.at..run.at + run.len]);
        }
    }

    /// Where load `i` finds the batch's values as one stretch of its input, when it does: at the own index of a
    /// batch of consecutive elements, or through a view stepping by 1 along a batch of one run (a row of a slice or
    /// of a concatenation's part). The load is then a window of the input, not a copy.
    pub(super) fn window(&self, i: usize, batch: &Batch) -> Option<usize> {
        let Instr::Load { input, view, .. } = &self.k.body[i] else { return None };
        if !self.word_inputs[*input] {
            return None;
        }
        let (base, step) = match (view, &batch.own) {
            (None, Own::From(lo)) => return Some(*lo),
            (None, Own::Runs) => {
                let (run, _) = batch.runs.single()?;
                (run.own as i64, if run.len > 1 { run.own_step as i64 } else { 1 })
            }
            (None, Own::At(_)) => return None,
            (Some(_), _) => {
                let (run, start) = batch.runs.single()?;
                let (strides, offset) = self.views[i].as_ref().expect("a strided load's view");
                let (base, step) = view_at(strides, *offset, run, start);
                (base, if run.len > 1 { step } else { 1 })
            }
        };
        (step == 1 && base >= 0).then_some(base as usize)
    }
}

/// Where a load's values over a batch are, when not in its register: a stretch of input `.0` from element `.1`
/// ([`Ctx::window`]), or of staged values `.0` ([`Regs::staged`]) from element `.1`.
#[derive(Clone, Copy, Debug)]
pub(super) enum Window {
    Input(usize, usize),
    Staged(usize, usize),
}

/// Each instruction's values over the current batch: computed into its register, or, for a load that reads one
/// stretch of its input or was staged, a window of those values (no copy).
pub(super) struct Regs {
    /// Per register (see [`Plan`]).
    pub(super) vals: Vec<Vec<f32>>,
    /// Per instruction.
    pub(super) window: Vec<Option<Window>>,
    /// Loads a tiled map reads transposed into a tile's order ahead of its batches, one vector per staged load.
    pub(super) staged: Vec<Vec<f32>>,
    /// For scalar registers: the length they were last filled to.
    pub(super) filled: Vec<usize>,
    /// Scratch of concatenations' parts, kept from batch to batch (one per nesting level in use).
    pub(super) spare: Vec<Scratch>,
}

impl Regs {
    pub(super) fn new(ctx: &Ctx) -> Regs {
        let slots = ctx.plan.slots;
        Regs {
            vals: vec![Vec::new(); slots],
            window: vec![None; ctx.k.body.len()],
            filled: vec![0; slots],
            spare: Vec::new(),
            staged: vec![Vec::new(); ctx.staged.iter().flatten().count()],
        }
    }

    /// The values of instruction `i` over a batch of `len` elements.
    pub(super) fn get<'a>(&'a self, ctx: &'a Ctx, i: usize, len: usize) -> &'a [f32] {
        match self.window[i] {
            Some(Window::Input(input, lo)) => &ctx.inputs[input][lo..lo + len],
            Some(Window::Staged(s, lo)) => &self.staged[s][lo..lo + len],
            None => &self.vals[ctx.plan.slot[i]],
        }
    }
}

/// What the parts of a concatenation are evaluated in, kept by the registers of the batch around them
/// ([`Regs::spare`]) from batch to batch, so that parts allocate nothing once the first batches sized these.
pub(super) struct Scratch {
    pub(super) regs: Regs,
    pub(super) batch: Batch,
    /// The part's pieces: where each starts in the batch around it and in the part's own, and its length.
    pub(super) pieces: Vec<(usize, usize, usize)>,
    /// Instructions before the part that it reads: their values are narrowed to its elements.
    pub(super) reads: Vec<usize>,
}

impl Scratch {
    pub(super) fn new(ctx: &Ctx) -> Scratch {
        Scratch { regs: Regs::new(ctx), batch: Batch::empty(), pieces: Vec::new(), reads: Vec::new() }
    }
}
