//! Running kernel IR on the CPU: each instruction over a batch of elements at a time, batches in parallel on rayon.

// Batch-sized loops the compiler vectorizes, and no temporaries of the tensor's size.

use super::batch::{Batch, Ctx, Out, Own, Regs, Window};
use super::cat::cat;
use super::regs::Step;
use super::runs::view_at;
use super::simd;
use crate::dtype::{Class, DType};
use crate::kernel::{Access, Instr};
use bytemuck::{cast_slice, cast_slice_mut};
use std::ops::Range;

/// Evaluates instructions `range` over `batch`, each into `regs`.
pub(super) fn eval(ctx: &Ctx, range: Range<usize>, batch: &Batch, regs: &mut Regs) {
    let k = ctx.k;
    let n = batch.len;
    let mut i = range.start;
    while i < range.end {
        // A concatenation's parts are evaluated inside it, on the elements each part covers.
        if let Some(&q) = ctx.cats[i].iter().filter(|&&q| q < range.end).max() {
            cat(ctx, q, batch, regs, eval);
            i = q + 1;
            continue;
        }
        if let Some(s) = ctx.staged[i] {
            regs.window[i] = Some(Window::Staged(s, batch.staged_at));
            i += 1;
            continue;
        }
        if let Some(lo) = ctx.window(i, batch) {
            let Instr::Load { input, .. } = k.body[i] else { unreachable!("windows are loads") };
            regs.window[i] = Some(Window::Input(input, lo));
            if ctx.prefetch[input] {
                prefetch(ctx.inputs[input], lo + batch.ahead, n);
            }
            i += 1;
            continue;
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
            Own::From(lo) => ctx.read(*input, *lo as i64, 1, out),
            Own::At(at) => ctx.gather(*input, out, |j| at[j]),
            Own::Runs => {
                for (run, _) in batch.runs.iter() {
                    ctx.read(*input, run.own as i64, run.own_step as i64, &mut out[run.at..run.at + run.len]);
                }
            }
        },
        Instr::Load { input, view: Some(_), access } => {
            debug_assert!(!matches!(access, Access::Own));
            ctx.read_view(*input, ctx.views[i].as_ref().expect("a strided load's view"), batch, out);
        }
        Instr::Index { view: None } => match &batch.own {
            Own::From(lo) => out.iter_mut().enumerate().for_each(|(j, o)| *o = f32::from_bits((lo + j) as u32)),
            Own::At(at) => out.iter_mut().zip(at).for_each(|(o, &j)| *o = f32::from_bits(j as u32)),
            Own::Runs => {
                for (run, _) in batch.runs.iter() {
                    for (j, o) in out[run.at..run.at + run.len].iter_mut().enumerate() {
                        *o = f32::from_bits((run.own + j * run.own_step) as u32);
                    }
                }
            }
        },
        Instr::Index { view: Some(_) } => {
            let (strides, offset) = ctx.views[i].as_ref().expect("an index's view");
            for (run, start) in batch.runs.iter() {
                let (base, step) = view_at(strides, *offset, run, start);
                for (j, o) in out[run.at..run.at + run.len].iter_mut().enumerate() {
                    *o = f32::from_bits((base + j as i64 * step) as u32);
                }
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
                *o = crate::philox::sample(*d, c[j].to_bits(), [k0[j].to_bits(), k1[j].to_bits()]);
            }
        }
        Instr::Select(c, a, b) => {
            let (c, a, b) = (regs.get(ctx, *c, n), regs.get(ctx, *a, n), regs.get(ctx, *b, n));
            simd::select(c, a, b, out);
        }
        Instr::Gather { input, base, index, stride_at } => {
            let (stride, extent) = (k.signed(*stride_at), k.signed(stride_at + 1));
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
        Instr::Folded(f) => match batch.siblings.get(*f) {
            Some(values) => out.copy_from_slice(values),
            None => out.fill(batch.folds[*f]),
        },
        Instr::Cat { .. } => unreachable!("handled above"),
    }
}

/// Asks for `len` elements of `v` from `at` on (as far as there are) to be brought into the cache: the next batch
/// of a window, so its memory streams in while this batch computes.
#[inline]
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
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
