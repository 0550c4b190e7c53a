//! A concatenation on the CPU: each part evaluated on the runs (or pieces of runs) whose selecting coordinate falls in
//! it, then copied into the concatenation's register piece by piece; a batch inside one part takes its values as they
//! are. Sorting elements one by one into parts, with fresh vectors per batch, made `cat` many times slower per element
//! than a plain read (figures: docs/notes/source-measurements.md, `src/backend/cpu/cat.rs`).

use super::batch::{Batch, Ctx, Eval, Own, Regs, Scratch};
use super::runs::Run;
use crate::kernel::{CatPart, Instr};
use std::ops::Range;

/// Evaluates the concatenation at instruction `q` over `batch` into `regs`: each element takes the first part whose
/// bound exceeds its coordinate along the concatenation's axis (none past the last: 0). Each part's body runs
/// through `eval`, the evaluator that called this: a part may hold a concatenation of its own.
pub(super) fn cat(ctx: &Ctx, q: usize, batch: &Batch, regs: &mut Regs, eval: Eval) {
    let k = ctx.k;
    let Instr::Cat { axis, parts, .. } = &k.body[q] else { unreachable!("a concatenation") };
    regs.window[q] = None;
    // The least and greatest coordinate along the axis in the batch.
    let (least, most) = batch.runs.iter().fold((i64::MAX, i64::MIN), |(lo, hi), (run, start)| {
        let end = start[*axis] + if run.axis == *axis { run.len as i64 - 1 } else { 0 };
        (lo.min(start[*axis]), hi.max(end))
    });
    let mut s = regs.spare.pop().unwrap_or_else(|| Scratch::new(ctx));
    let first = parts.iter().position(|p| k.signed(p.bound) > least);
    let inside = first.filter(|&p| k.signed(parts[p].bound) > most);
    match inside {
        Some(p) => whole(ctx, q, &parts[p], batch, regs, &mut s, eval),
        None => pieces(ctx, q, parts, *axis, batch, regs, &mut s, eval),
    }
    regs.spare.push(s);
}

/// A batch inside one part (a batch of rows of one concatenated tensor, the common case): the part runs on the
/// batch itself, its coordinates shifted, in the registers around it (every instruction of a kernel with a
/// concatenation has a register of its own), and its values become the concatenation's without a copy.
fn whole(ctx: &Ctx, q: usize, part: &CatPart, batch: &Batch, regs: &mut Regs, s: &mut Scratch, eval: Eval) {
    let frame = ctx.k.frames[part.frame - 1];
    let shift = ctx.k.signed(frame.shift);
    let sub = &mut s.batch;
    sub.runs.clear(batch.runs.rank());
    for (run, first) in batch.runs.iter() {
        sub.runs.push(run, first);
    }
    sub.runs.shift_axis(frame.axis, -shift);
    sub.len = batch.len;
    sub.own = match &batch.own {
        Own::From(lo) => Own::From(*lo),
        Own::At(at) => {
            let mut v = indices(&mut sub.own);
            v.extend_from_slice(at);
            Own::At(v)
        }
        Own::Runs => Own::Runs,
    };
    (sub.staged_at, sub.ahead) = (batch.staged_at, batch.ahead);
    sub.folded.clone_from(&batch.folded);
    sub.folds.clone_from(&batch.folds);
    eval(ctx, part.body.clone(), sub, regs);
    let (r, v) = (ctx.plan.slot[q], ctx.plan.slot[part.value]);
    match regs.window[part.value] {
        Some(w) => regs.window[q] = Some(w),
        // Nothing after the concatenation reads inside its parts: the part's register is handed over.
        None if part.body.contains(&part.value) => {
            regs.vals.swap(r, v);
            // The vector swapped in is no longer a filled constant there.
            regs.filled[v] = 0;
        }
        // A value from before the part may be read again: copied.
        None => {
            let mut out = std::mem::take(&mut regs.vals[r]);
            out.clear();
            out.extend_from_slice(&regs.vals[v][..batch.len]);
            regs.vals[r] = out;
        }
    }
}

/// The index vector `own` held, emptied, for reuse (a new one if it held none).
fn indices(own: &mut Own) -> Vec<usize> {
    let mut v = match std::mem::replace(own, Own::Runs) {
        Own::At(v) => v,
        _ => Vec::new(),
    };
    v.clear();
    v
}

/// A batch across parts: each part runs on its pieces of the batch in the scratch's registers, its values copied
/// into the concatenation's piece by piece.
#[allow(clippy::too_many_arguments)]
fn pieces(
    ctx: &Ctx,
    q: usize,
    parts: &[CatPart],
    axis: usize,
    batch: &Batch,
    regs: &mut Regs,
    s: &mut Scratch,
    eval: Eval,
) {
    let (n, r) = (batch.len, ctx.plan.slot[q]);
    let mut out = std::mem::take(&mut regs.vals[r]);
    out.resize(n, 0.0);
    // Elements past the last part's bound take none: 0.
    out.fill(0.0);
    let mut lo = i64::MIN;
    for part in parts {
        let hi = ctx.k.signed(part.bound);
        split(ctx, part, axis, lo..hi, batch, s);
        lo = hi;
        if s.pieces.is_empty() {
            continue;
        }
        narrow(ctx, part, regs, n, s);
        eval(ctx, part.body.clone(), &s.batch, &mut s.regs);
        let values = s.regs.get(ctx, part.value, s.batch.len);
        for &(outer, inner, len) in &s.pieces {
            out[outer..outer + len].copy_from_slice(&values[inner..inner + len]);
        }
    }
    regs.vals[r] = out;
}

/// Makes `s.batch` the elements of `batch` whose coordinate along `axis` is in `range`, as coordinates of the
/// part's frame, and `s.pieces` where they are.
fn split(ctx: &Ctx, part: &CatPart, axis: usize, range: Range<i64>, batch: &Batch, s: &mut Scratch) {
    let frame = ctx.k.frames[part.frame - 1];
    let shift = ctx.k.signed(frame.shift);
    let (sub, pieces) = (&mut s.batch, &mut s.pieces);
    sub.runs.clear(batch.runs.rank());
    pieces.clear();
    let mut start: smallvec::SmallVec<[i64; 8]> = smallvec::SmallVec::new();
    for (run, first) in batch.runs.iter() {
        let c = first[axis];
        // The run's elements inside the range: a stretch of it where it moves along the axis, else all or none.
        let (j0, j1) = if run.axis == axis && run.len > 1 {
            let clamp = |x: i64| x.clamp(0, run.len as i64) as usize;
            (clamp(range.start.saturating_sub(c)), clamp(range.end.saturating_sub(c)))
        } else if range.contains(&c) {
            (0, run.len)
        } else {
            continue;
        };
        if j0 >= j1 {
            continue;
        }
        let at = pieces.last().map_or(0, |&(_, inner, len)| inner + len);
        let len = j1 - j0;
        pieces.push((run.at + j0, at, len));
        start.clear();
        start.extend_from_slice(first);
        start[axis] += j0 as i64;
        start[frame.axis] -= shift;
        let (own, own_step) = match batch.own {
            Own::From(lo) => (lo + run.at + j0, 1),
            Own::Runs => (run.own + j0 * run.own_step, run.own_step),
            Own::At(_) => (0, 0),
        };
        sub.runs.push(Run { at, len, axis: run.axis, own, own_step }, &start);
    }
    sub.len = pieces.last().map_or(0, |&(_, inner, len)| inner + len);
    sub.own = match &batch.own {
        Own::At(at) => {
            let mut v = indices(&mut sub.own);
            pieces.iter().for_each(|&(outer, _, len)| v.extend_from_slice(&at[outer..outer + len]));
            Own::At(v)
        }
        _ => Own::Runs,
    };
    sub.folded.clear();
    if !batch.folded.is_empty() {
        pieces.iter().for_each(|&(outer, _, len)| sub.folded.extend_from_slice(&batch.folded[outer..outer + len]));
    }
    sub.folds.clone_from(&batch.folds);
}

/// Copies the values the part reads from before it (`regs`, over the `n` elements of the batch around it) into its
/// registers, narrowed to its pieces.
fn narrow(ctx: &Ctx, part: &CatPart, regs: &Regs, n: usize, s: &mut Scratch) {
    s.reads.clear();
    for instr in &ctx.k.body[part.body.clone()] {
        s.reads.extend(instr.operands().into_iter().filter(|&o| o < part.body.start));
    }
    // A part whose value was computed before it (no body of its own) reads that value too.
    if part.value < part.body.start {
        s.reads.push(part.value);
    }
    s.reads.sort_unstable();
    s.reads.dedup();
    for &o in &s.reads {
        let values = regs.get(ctx, o, n);
        let slot = ctx.plan.slot[o];
        let dst = &mut s.regs.vals[slot];
        dst.clear();
        for &(outer, _, len) in &s.pieces {
            dst.extend_from_slice(&values[outer..outer + len]);
        }
        s.regs.window[o] = None;
        s.regs.filled[slot] = 0;
    }
}
