//! Error bounds per element, propagated through a program op by op: how far a backend's value may be from the
//! reference interpreter's and still be right. Computed with lazor's own ops on the reference's values.
//!
//! A bound is an f32 tensor of the value's shape. 0 means exact; a finite bound allows that much absolute error
//! (plus the rounding of the comparison); infinity or NaN means the value is not determined by the program to
//! within rounding (a comparison of nearly equal values, an overflow in a half type), and is not checked.

use super::program::{apply, Red, Step};
use lazor::op::{BinaryOp, UnaryOp};
use lazor::{DType, Device, Tensor};

const INF: f32 = f32::INFINITY;

/// Relative rounding of one op in `dt`, with a factor 2 for GPU division and the like.
fn eps(dt: DType) -> f32 {
    match dt {
        DType::F16 => 2f32.powi(-10),
        DType::BF16 => 2f32.powi(-7),
        _ => 2f32.powi(-22),
    }
}

/// The absolute error a flushed subnormal causes.
fn tiny(dt: DType) -> f32 {
    match dt {
        DType::F16 => 2f32.powi(-24),
        _ => 2f32.powi(-125),
    }
}

/// One rounding of `r` in `dt`: 0 where `r` is infinite or NaN (those are exact or already unchecked).
fn ulp(r: &Tensor, dt: DType) -> Tensor {
    let a = r.abs();
    a.lt(INF).where_cond(&(&a * eps(dt) + tiny(dt)), 0.0f32)
}

fn zeros_like(r: &Tensor) -> Tensor {
    Tensor::zeros_on(r.shape().to_vec(), r.device())
}

/// `INF` where `cond`, else `b`.
fn unsure(cond: &Tensor, b: &Tensor) -> Tensor {
    cond.where_cond(INF, b)
}

/// The bound of step `step`, given the reference values `r` and bounds `b` of the steps before it (f32 tensors on
/// the CPU device `dev`) and the step's own reference value `ro` and type `dt`.
pub fn bound(step: &Step, r: &[Tensor], b: &[Tensor], ro: &Tensor, dt: DType, dev: &Device) -> Tensor {
    let float = dt.is_float();
    let out = match step {
        Step::Input { .. } => zeros_like(ro),
        Step::Unary { op, x } => unary(*op, &r[*x], &b[*x], ro, dt),
        Step::Binary { op, x, y } => binary(*op, &r[*x], &b[*x], &r[*y], &b[*y], ro, dt),
        Step::Scalar { op, x, s, left } => {
            let v = match s {
                super::program::Num::F(v) => *v,
                super::program::Num::I(v) => *v as f32,
                super::program::Num::U(v) => *v as f32,
            };
            let (rs, bs) = (Tensor::full_on([], v, dev), Tensor::zeros_on([], dev));
            if *left {
                binary(*op, &rs, &bs, &r[*x], &b[*x], ro, dt)
            } else {
                binary(*op, &r[*x], &b[*x], &rs, &bs, ro, dt)
            }
        }
        Step::Powf { x, p } => {
            let (rx, bx) = (&r[*x], &b[*x]);
            let rel = bx / &rx.abs();
            let lnx = rx.abs().ln().abs();
            let body =
                ro.abs() * (rel.clone() * (2.0 * p.abs()) + (lnx * (2.0 * p.abs()) + 8.0) * eps(dt)) + ulp(ro, dt);
            let exact = bx.le(0.0f32).where_cond(&(ulp(ro, dt) * 8.0 + &ro.abs() * (eps(dt) * 8.0)), &body);
            unsure(&(rel.ge(0.5f32) & bx.gt(0.0f32)), &exact)
        }
        Step::Clamp { x, .. } => b[*x].clone(),
        Step::Cast { x, dtype } => cast(&r[*x], &b[*x], ro, *dtype),
        Step::Where { c, a, b: e } => {
            let either = (&r[*a] - &r[*e]).abs() + b[*a].maximum(&b[*e]);
            let picked = r[*c].ne(0.0f32).where_cond(&b[*a], &b[*e]);
            b[*c].gt(0.0f32).where_cond(&either, &picked)
        }
        Step::Reduce { op, x, dim, keep } => reduce(*op, &r[*x], &b[*x], *dim, *keep, ro, dt),
        Step::Matmul { x, y } => {
            let k = if r[*x].ndim() == 1 { r[*x].shape()[0] } else { r[*x].shape()[r[*x].ndim() - 1] };
            product(&r[*x], &b[*x], &r[*y], &b[*y], k, dt) + ulp(ro, dt)
        }
        Step::Sdpa { q, k, v, causal } => {
            // The scores, their softmax and its product with the values, each bounded as those steps are, on the
            // reference's scores (computed here from its q and k; masked ones are -inf exactly).
            let (rk, bk) = (r[*k].transpose(-2, -1), b[*k].transpose(-2, -1));
            let e = rk.shape()[rk.ndim() - 2];
            let scale = 1.0 / (e as f32).sqrt();
            let mut scores = r[*q].matmul(&rk) * scale;
            let mut bs = (product(&r[*q], &b[*q], &rk, &bk, e, dt) * scale) + ulp(&scores, dt);
            if *causal {
                let (l, s) = (scores.shape()[scores.ndim() - 2], scores.shape()[scores.ndim() - 1]);
                let dropped = Tensor::ones_on([l, s], dev).tril(0).lt(0.5f32);
                scores = scores.masked_fill(&dropped, f32::NEG_INFINITY);
                bs = bs.masked_fill(&dropped, 0.0);
            }
            let p = scores.softmax(-1);
            let bp = reduce(Red::Softmax, &scores, &bs, Some(-1), true, &p, dt);
            product(&p, &bp, &r[*v], &b[*v], rk.shape()[rk.ndim() - 1], dt) + ulp(ro, dt)
        }
        // Views, copies and joins move values: the same view of the bounds.
        _ => apply(step, b, dev).expect("a view of the bounds"),
    };
    // Half types keep f32 inside a kernel but round (and overflow) per op in the reference.
    if float && matches!(dt, DType::F16 | DType::BF16) && arithmetic(step) {
        let max = if dt == DType::F16 { 65504.0 } else { 3.0e38 };
        // The reference rounds this step's value to the type; a kernel may carry it on in f32.
        return unsure(&ro.abs().ge(max / 4.0), &(out + ulp(ro, dt)));
    }
    out
}

/// The bound of the product `a b` over `k` terms (before its own rounding), from its operands' values and bounds.
fn product(ra: &Tensor, ba: &Tensor, rb: &Tensor, bb: &Tensor, k: usize, dt: DType) -> Tensor {
    let (ra, rb) = (ra.abs(), rb.abs());
    let mm = |p: &Tensor, q: &Tensor| p.matmul(q);
    mm(&ra, bb) + mm(ba, &rb) + mm(ba, bb) + mm(&ra, &rb) * ((k as f32 + 2.0) * eps(dt))
}

/// Whether the step computes new values (and so may round or overflow).
fn arithmetic(step: &Step) -> bool {
    match step {
        // Whole numbers and signs of a half value are half values.
        Step::Unary { op, .. } => !matches!(
            op,
            UnaryOp::Neg
                | UnaryOp::Abs
                | UnaryOp::Relu
                | UnaryOp::Floor
                | UnaryOp::Ceil
                | UnaryOp::Round
                | UnaryOp::Sign
        ),
        Step::Binary { op, .. } => !op.is_compare() && !matches!(op, BinaryOp::Max | BinaryOp::Min),
        Step::Scalar { .. } | Step::Powf { .. } | Step::Cast { .. } | Step::Matmul { .. } | Step::Sdpa { .. } => true,
        Step::Reduce { op, .. } => !matches!(op, Red::Max | Red::Min | Red::Argmax | Red::Argmin),
        _ => false,
    }
}

fn unary(op: UnaryOp, rx: &Tensor, bx: &Tensor, ro: &Tensor, dt: DType) -> Tensor {
    if !dt.is_float() {
        return bx.clone();
    }
    let e = eps(dt);
    let ax = rx.abs();
    let near_pole = bx.ge(&(&ax * 0.5)) & bx.gt(0.0f32);
    match op {
        UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu | UnaryOp::Not => bx.clone(),
        // The GPU's exp is within 3 + 2|x| ulp (Vulkan's precision table).
        UnaryOp::Exp => ro.abs() * (bx.exp() - 1.0 + (&ax * 2.0 + 3.0) * e) + tiny(dt),
        UnaryOp::Ln => unsure(&near_pole, &(bx / &ax * 2.0 + ulp(ro, dt) * 3.0 + 2f32.powi(-21))),
        UnaryOp::Sqrt => (bx / &ax.sqrt()).minimum(&bx.sqrt()) + ulp(ro, dt) * 2.0,
        UnaryOp::Rsqrt => unsure(&near_pole, &(ro.abs() * (bx / &ax * 1.5) + ulp(ro, dt) * 4.0)),
        UnaryOp::Recip => unsure(&near_pole, &(ro.square() * (bx * 2.0) + ulp(ro, dt) * 2.0)),
        UnaryOp::Square => &ax * (bx * 2.0) + bx.square() + ulp(ro, dt),
        UnaryOp::Sigmoid => bx * 0.25 + ulp(ro, dt) * 8.0 + 2f32.powi(-21),
        UnaryOp::Tanh => bx.clone() + ulp(ro, dt) * 8.0 + 2f32.powi(-20),
        UnaryOp::Sin | UnaryOp::Cos => bx.clone() + (&ax * 1e-6 + 2e-5),
        UnaryOp::Gelu => bx * 1.2 + ulp(ro, dt) * 16.0 + (&ax + 1.0) * 2f32.powi(-20),
        UnaryOp::Silu => bx * 1.1 + ulp(ro, dt) * 16.0 + (&ax + 1.0) * 2f32.powi(-21),
        // The helpers keep a relative error of a few ulp, near 0 too.
        UnaryOp::Log1p => {
            let a1 = (rx + 1.0).abs();
            unsure(&(bx.ge(&(&a1 * 0.5)) & bx.gt(0.0f32)), &(bx / &a1 * 2.0 + ulp(ro, dt) * 3.0))
        }
        // The derivative is e^x = ro + 1.
        UnaryOp::Expm1 => (ro.abs() + 1.0) * bx.expm1() + ulp(ro, dt) * 3.0,
        // |erf'| <= 2 / sqrt(pi); in the tail, GPU `exp`'s error is a few ulp of erfc <= 0.19.
        UnaryOp::Erf => bx * 1.13 + ulp(ro, dt) * 4.0,
        // Exact, unless the input's interval reaches a step.
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => {
            let step = |t: Tensor| super::program::unary(op, &t);
            unsure(&(step(rx - bx).ne(step(rx + bx)) & bx.gt(0.0f32)), &(bx * 0.0))
        }
        UnaryOp::Sign => unsure(&(rx.abs().le(bx) & bx.gt(0.0f32)), &(bx * 0.0)),
    }
}

fn binary(op: BinaryOp, rx: &Tensor, bx: &Tensor, ry: &Tensor, by: &Tensor, ro: &Tensor, dt: DType) -> Tensor {
    if op.is_compare() {
        let slack = bx + by;
        return unsure(&((rx - ry).abs().le(&slack) & slack.gt(0.0f32)), &(&slack * 0.0));
    }
    if !dt.is_float() {
        return bx.maximum(by);
    }
    match op {
        BinaryOp::Add | BinaryOp::Sub => bx + by + ulp(ro, dt),
        BinaryOp::Mul => rx.abs() * by + ry.abs() * bx + bx * by + ulp(ro, dt),
        BinaryOp::Div => {
            let ay = ry.abs();
            let spread = (bx + &(ro.abs() * by)) / &ay * 2.0 + ulp(ro, dt) * 3.0;
            let exact = (bx + by).le(0.0f32).where_cond(&(ulp(ro, dt) * 3.0), &spread);
            unsure(&(by.ge(&(&ay * 0.5)) & by.gt(0.0f32)), &exact)
        }
        BinaryOp::Pow => {
            // ln|o| moves by |y| dx / |x| + |ln x| dy; GPU pow is exp2(y log2 x), whose log2 has an absolute
            // error, and whose exp2 rounds y log2 x.
            let (ax, ay) = (rx.abs(), ry.abs());
            let lnx = ax.ln().abs();
            let spread = (bx / &ax * &ay + &lnx * by) * 2.0 + ((&lnx + 1.0) * &ay * 2.0 + 8.0) * eps(dt);
            // An infinite value stays infinite with a positive bound: an overflow may land either side.
            let size = ro.abs().minimum(&Tensor::full_on([], f32::MAX, ro.device()));
            let body = size * spread + ulp(ro, dt);
            // What the helper spells out exactly: y = 0, x = 1, zero or infinite operands.
            let special = ry.eq(0.0f32) | rx.eq(1.0f32) | ax.eq(0.0f32) | ax.eq(INF) | ay.eq(INF);
            let exact = (bx.le(0.0f32) & by.le(0.0f32) & special).where_cond(zeros_like(ro), &body);
            // A negative or zero base with an inexact exponent may be NaN, 0 or infinite; so may a base near 0.
            let flips = (rx.le(0.0f32) & by.gt(0.0f32)) | (bx.ge(&(&ax * 0.5)) & bx.gt(0.0f32));
            unsure(&flips, &exact)
        }
        _ => bx.maximum(by),
    }
}

fn cast(rx: &Tensor, bx: &Tensor, ro: &Tensor, to: DType) -> Tensor {
    let moved = bx.gt(0.0f32);
    match to {
        DType::F32 | DType::F16 | DType::BF16 => bx + ulp(ro, to),
        // Truncation flips where the interval around the value crosses an integer.
        DType::I32 | DType::U32 => {
            let flips =
                (rx - bx).ne(rx + bx) & moved & (rx - bx).to_dtype(DType::I32).ne((rx + bx).to_dtype(DType::I32));
            unsure(&flips, &(bx * 0.0))
        }
        DType::Bool => unsure(&(rx.abs().le(bx) & moved), &(bx * 0.0)),
    }
}

fn reduce(op: Red, rx: &Tensor, bx: &Tensor, dim: Option<isize>, keep: bool, ro: &Tensor, dt: DType) -> Tensor {
    let (rx, bx, d) = match dim {
        Some(d) => (rx.clone(), bx.clone(), d),
        None => (rx.flatten(), bx.flatten(), 0),
    };
    let n = rx.shape().get(if d < 0 { (rx.ndim() as isize + d) as usize } else { d as usize }).copied().unwrap_or(1);
    let n = n as f32;
    let e = eps(dt);
    let maxb = || bx.max_keepdim(d);
    let out_shape = ro.shape().to_vec();
    let fit = |t: Tensor| t.reshape(out_shape.clone());
    let keepfit = |t: Tensor| if keep || dim.is_none() { t } else { t.squeeze(d) };
    let int = !dt.is_float() && !matches!(op, Red::Argmax | Red::Argmin);
    if int || rx.numel() == 0 {
        return if rx.numel() == 0 { Tensor::zeros_on(out_shape, rx.device()) } else { fit(keepfit(maxb())) };
    }
    match op {
        Red::Sum => fit(keepfit(bx.sum_keepdim(d) + rx.abs().sum_keepdim(d) * (n * e))) + ulp(ro, dt),
        Red::Mean => fit(keepfit((bx.sum_keepdim(d) + rx.abs().sum_keepdim(d) * (n * e)) / n)) + ulp(ro, dt),
        Red::Max | Red::Min => fit(keepfit(maxb())),
        Red::Prod => {
            let hi = (rx.abs() + &bx).prod_keepdim(d);
            let lo = rx.abs().prod_keepdim(d);
            // Where a partial product may overflow or underflow, the order of the factors decides between 0,
            // infinity and NaN (0 * inf): products of the factors' magnitudes clamped above and below 1 bound
            // every partial product, in any order.
            let a = rx.abs();
            let big = a.maximum(&Tensor::ones_on([], a.device())).prod_keepdim(d);
            let nonzero = a.eq(0.0f32).where_cond(1.0f32, &a);
            let small = nonzero.minimum(&Tensor::ones_on([], a.device())).prod_keepdim(d);
            let order = big.ge(f32::MAX / 2.0) | small.le(2f32.powi(-100));
            fit(keepfit(unsure(&order, &(&hi - &lo + &hi * (n * e))))) + ulp(ro, dt)
        }
        Red::Var => {
            let m = rx.mean_keepdim(d);
            let spread = (&rx - &m).abs().max_keepdim(d);
            let mb = maxb();
            let sq = rx.square().mean_keepdim(d);
            fit(keepfit((spread + &mb) * &mb * 2.0 + sq * (4.0 * n * e))) + ulp(ro, dt)
        }
        Red::Logsumexp => fit(keepfit(maxb() + (n + 8.0) * e)) + ulp(ro, dt),
        Red::LogSoftmax => &bx + maxb() + (n + 8.0) * e + ulp(ro, dt) + rx.abs() * e,
        Red::Softmax => ro.abs() * ((&bx + maxb() + (n + 16.0) * e).exp() - 1.0) + ulp(ro, dt) + tiny(DType::F32),
        Red::Argmax | Red::Argmin => {
            let mb = maxb();
            let near = if op == Red::Argmax {
                (&rx + &bx + &mb).ge(rx.max_keepdim(d))
            } else {
                (&rx - &bx - &mb).le(rx.min_keepdim(d))
            };
            let tied = near.sum_keepdim(d).ge(2i32) & mb.gt(0.0f32);
            fit(keepfit(unsure(&tied, &(&mb * 0.0))))
        }
    }
}
