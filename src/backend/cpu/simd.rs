//! The CPU backend's inner loops, for the baseline target and, chosen at run time, for AVX2 (and AVX-512).

// The loops are the op table's (`eval_slice`, always inlined), so semantics stay in one place; no fused
// multiply-add is introduced, so every version gives the same bits.

use super::math::Vector;
use crate::op::{BinaryOp, ReduceOp, UnaryOp};

#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    std::is_x86_feature_detected!("avx2")
}

#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    // The AVX-512 loops are compiled with AVX2 enabled too; a virtual machine may hide one and not the other.
    std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx2")
}

/// Whether `op` is arithmetic-bound enough to gain from 512-bit vectors: the `exp`/`tanh` rows (the bench's unary case
/// at 2^24 ran markedly faster with them; figures: docs/notes/source-measurements.md, `src/backend/cpu/simd.rs`). The
/// cheap ones are bound by memory and stay 256-bit.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn wide(op: UnaryOp) -> bool {
    matches!(op, UnaryOp::Exp | UnaryOp::Tanh | UnaryOp::Sigmoid | UnaryOp::Silu | UnaryOp::Gelu)
}

/// Each loop as a public function that runs its body compiled for AVX2 where the processor has it (and, where the
/// `wide` condition holds, for AVX-512), else for the baseline target. The body is always inlined into each.
macro_rules! loops {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(wide if $wide:expr;)? $body:block
    )*) => {$(
        $(#[$doc])*
        pub fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,avx512f")]
                unsafe fn avx512($($arg: $ty),*) {
                    body($($arg),*)
                }
                if (false $(|| $wide)?) && has_avx512() {
                    // SAFETY: the processor has AVX-512F and AVX2 (checked above).
                    return unsafe { avx512($($arg),*) };
                }
                #[target_feature(enable = "avx2")]
                unsafe fn avx2($($arg: $ty),*) {
                    body($($arg),*)
                }
                if has_avx2() {
                    // SAFETY: the processor has AVX2 (checked above).
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
        }
    )*};
}

loops! {
    /// `op` over `a` into `out`.
    fn unary(op: UnaryOp, a: &[f32], out: &mut [f32]) wide if wide(op); {
        op.eval_slice::<Vector>(a, out)
    }

    /// `op` over `a` and `b` into `out`.
    fn binary(op: BinaryOp, a: &[f32], b: &[f32], out: &mut [f32]) {
        op.eval_slice(a, b, out)
    }

    /// `op` over `a` and the constant `s` (`a op s`) into `out`.
    fn binary_scalar(op: BinaryOp, a: &[f32], s: f32, out: &mut [f32]) {
        op.eval_slice_scalar(a, s, out)
    }

    /// `op` over the constant `s` and `b` (`s op b`) into `out`.
    fn scalar_binary(op: BinaryOp, s: f32, b: &[f32], out: &mut [f32]) {
        op.scalar_eval_slice(s, b, out)
    }

    /// `op2(op1(x, y), s)` (`op2(s, op1(x, y))` where `scalar_left`) into `out`: a pair of ops in one pass.
    fn pair(op1: BinaryOp, op2: BinaryOp, x: &[f32], y: &[f32], s: f32, scalar_left: bool, out: &mut [f32]) {
        pair_generic(op1, op2, x, y, s, scalar_left, out)
    }

    /// `u(op1(x, y))` into `out` in one pass (see [`super::regs::Step::Mapped`]).
    fn mapped(u: UnaryOp, op1: BinaryOp, x: Src, y: Src, out: &mut [f32]) wide if wide(u); {
        mapped_generic(u, op1, x, y, out)
    }

    /// The comparison `op` of float lanes `a` and `b` as 0/1 lanes into `out`.
    fn compare(op: BinaryOp, a: &[f32], b: &[f32], out: &mut [u32]) {
        op.compare_slice(a, b, out)
    }

    /// Per element, `a` where the bool lane `c` is set, else `b` (lanes of any type, moved as bits). Zipped, not
    /// indexed, so there are no bounds checks and the loop becomes blends.
    fn select(c: &[f32], a: &[f32], b: &[f32], out: &mut [f32]) {
        for (((o, &c), &a), &b) in out.iter_mut().zip(c).zip(a).zip(b) {
            *o = if c.to_bits() != 0 { a } else { b };
        }
    }

    /// Folds `values` into 8 running folds, element `j` into `acc[j % 8]`.
    fn fold8(op: ReduceOp, values: &[f32], acc: &mut [f32; 8]) {
        fold8_generic(op, values, acc)
    }

    /// `acc[i] = op(acc[i], values[i])`: a step of the column folds.
    fn fold_into(op: BinaryOp, acc: &mut [f32], values: &[f32]) {
        fold_into_generic(op, acc, values)
    }
}

/// One loop per (op1, op2, side): each op is a constant in its loop, so `eval` folds to its expression and the
/// loop vectorizes. The values are those of the two ops run one after the other.
#[inline(always)]
fn pair_generic(op1: BinaryOp, op2: BinaryOp, x: &[f32], y: &[f32], s: f32, scalar_left: bool, out: &mut [f32]) {
    macro_rules! both {
        ($o1:ident, $o2:ident) => {
            if scalar_left {
                pair_loop(x, y, out, |a, b| BinaryOp::$o1.eval(a, b), |v| BinaryOp::$o2.eval(s, v))
            } else {
                pair_loop(x, y, out, |a, b| BinaryOp::$o1.eval(a, b), |v| BinaryOp::$o2.eval(v, s))
            }
        };
    }
    macro_rules! inner {
        ($o1:ident) => {
            match op2 {
                BinaryOp::Add => both!($o1, Add),
                BinaryOp::Sub => both!($o1, Sub),
                BinaryOp::Mul => both!($o1, Mul),
                BinaryOp::Div => both!($o1, Div),
                op2 => unreachable!("{} is not paired", op2.name()),
            }
        };
    }
    match op1 {
        BinaryOp::Add => inner!(Add),
        BinaryOp::Sub => inner!(Sub),
        BinaryOp::Mul => inner!(Mul),
        BinaryOp::Div => inner!(Div),
        op1 => unreachable!("{} is not paired", op1.name()),
    }
}

#[inline(always)]
fn pair_loop(x: &[f32], y: &[f32], out: &mut [f32], f: impl Fn(f32, f32) -> f32, g: impl Fn(f32) -> f32) {
    for ((o, &a), &b) in out.iter_mut().zip(x).zip(y) {
        *o = g(f(a, b));
    }
}

/// An operand of a [`mapped`] loop: a batch of values or one constant.
#[derive(Clone, Copy)]
pub enum Src<'a> {
    Slice(&'a [f32]),
    Const(f32),
}

/// One loop per (u, op1, operand form), each op a constant in its loop so the loop vectorizes.
#[inline(always)]
fn mapped_generic(u: UnaryOp, op1: BinaryOp, x: Src, y: Src, out: &mut [f32]) {
    macro_rules! forms {
        ($u:ident, $o:ident) => {{
            let f = |v: f32| UnaryOp::$u.eval_with::<Vector>(v);
            let g = |a: f32, b: f32| BinaryOp::$o.eval(a, b);
            // `for` loops, not `for_each`: the adapters' `fold` may stay an out-of-line call compiled without this
            // function's target features (it did: the bench's unary case then ran slower than with no mapped loops).
            match (x, y) {
                (Src::Slice(x), Src::Slice(y)) => {
                    for ((o, &a), &b) in out.iter_mut().zip(x).zip(y) {
                        *o = f(g(a, b));
                    }
                }
                (Src::Slice(x), Src::Const(c)) => {
                    for (o, &a) in out.iter_mut().zip(x) {
                        *o = f(g(a, c));
                    }
                }
                (Src::Const(c), Src::Slice(y)) => {
                    for (o, &b) in out.iter_mut().zip(y) {
                        *o = f(g(c, b));
                    }
                }
                (Src::Const(_), Src::Const(_)) => unreachable!("a mapped op has a vector operand"),
            }
        }};
    }
    macro_rules! binary {
        ($u:ident) => {
            match op1 {
                BinaryOp::Add => forms!($u, Add),
                BinaryOp::Sub => forms!($u, Sub),
                BinaryOp::Mul => forms!($u, Mul),
                BinaryOp::Div => forms!($u, Div),
                op1 => unreachable!("{} is not mapped", op1.name()),
            }
        };
    }
    match u {
        UnaryOp::Exp => binary!(Exp),
        UnaryOp::Sqrt => binary!(Sqrt),
        UnaryOp::Relu => binary!(Relu),
        UnaryOp::Tanh => binary!(Tanh),
        UnaryOp::Sigmoid => binary!(Sigmoid),
        UnaryOp::Abs => binary!(Abs),
        u => unreachable!("{} is not mapped", u.name()),
    }
}

/// `$call($args, f)` with `f` the op's `eval` as a closure over a constant op, one arm per common op, so the loop
/// inside each call vectorizes.
macro_rules! per_op {
    ($op:expr, $call:ident($($arg:expr),*)) => {
        match $op {
            BinaryOp::Add => $call($($arg,)* |a, b| BinaryOp::Add.eval(a, b)),
            BinaryOp::Mul => $call($($arg,)* |a, b| BinaryOp::Mul.eval(a, b)),
            BinaryOp::Max => $call($($arg,)* |a, b| BinaryOp::Max.eval(a, b)),
            BinaryOp::Min => $call($($arg,)* |a, b| BinaryOp::Min.eval(a, b)),
            other => $call($($arg,)* |a, b| other.eval(a, b)),
        }
    };
}

#[inline(always)]
fn fold8_generic(op: ReduceOp, values: &[f32], acc: &mut [f32; 8]) {
    per_op!(op.combine(), fold8_with(values, acc))
}

#[inline(always)]
fn fold_into_generic(op: BinaryOp, acc: &mut [f32], values: &[f32]) {
    per_op!(op, fold_into_with(acc, values))
}

#[inline(always)]
fn fold_into_with(acc: &mut [f32], values: &[f32], f: impl Fn(f32, f32) -> f32) {
    for (a, &v) in acc.iter_mut().zip(values) {
        *a = f(*a, v);
    }
}

#[inline(always)]
fn fold8_with(values: &[f32], acc: &mut [f32; 8], f: impl Fn(f32, f32) -> f32) {
    let mut chunks = values.chunks_exact(8);
    for c in &mut chunks {
        for j in 0..8 {
            acc[j] = f(acc[j], c[j]);
        }
    }
    for (j, &v) in chunks.remainder().iter().enumerate() {
        acc[j] = f(acc[j], v);
    }
}

/// Copies `src` to `dst` with non-temporal stores where the processor has AVX: a large output then goes straight
/// to memory, without first reading each line it overwrites (a fifth of chain3's traffic) or evicting the inputs
/// from the cache. Callers end the stores of a task with [`stream_fence`].
///
/// # Safety
/// `dst` must be valid for `src.len()` writes of `f32` that no other thread makes at the same time.
pub unsafe fn stream(dst: *mut f32, src: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx") {
        return stream_avx(dst, src);
    }
    std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len())
}

/// Orders a task's non-temporal stores before whatever follows it (another thread reading the output).
pub fn stream_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no preconditions (SSE is part of x86-64).
    unsafe {
        std::arch::x86_64::_mm_sfence()
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn stream_avx(dst: *mut f32, src: &[f32]) {
    use std::arch::x86_64::{_mm256_loadu_ps, _mm256_stream_ps};
    let n = src.len();
    // Plain stores up to the first 32-byte boundary, streamed vectors, plain stores for the tail.
    let head = (dst.align_offset(32)).min(n);
    std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head);
    let mut j = head;
    while j + 8 <= n {
        _mm256_stream_ps(dst.add(j), _mm256_loadu_ps(src.as_ptr().add(j)));
        j += 8;
    }
    std::ptr::copy_nonoverlapping(src.as_ptr().add(j), dst.add(j), n - j);
}

/// Copies an 8 x 8 block transposed: element `r` of source row `k` (8 consecutive values from `src + k * stride`)
/// to element `k` of destination row `r` (at `dst + r * dst_stride`). Returns false, doing nothing, where the
/// processor lacks AVX.
///
/// # Safety
/// The 8 source rows of 8 elements and the 8 destination rows of 8 elements must be valid to read and to write.
#[inline]
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
pub unsafe fn transpose8(src: *const f32, stride: isize, dst: *mut f32, dst_stride: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx") {
        transpose8_avx(src, stride, dst, dst_stride);
        return true;
    }
    false
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose8_avx(src: *const f32, stride: isize, dst: *mut f32, dst_stride: usize) {
    use std::arch::x86_64::*;
    let r: [__m256; 8] = std::array::from_fn(|k| _mm256_loadu_ps(src.offset(k as isize * stride)));
    // Pairs of rows interleaved, then pairs of pairs, then the 128-bit halves swapped into place.
    let t: [__m256; 8] = std::array::from_fn(|k| {
        let (a, b) = (r[k / 2 * 2], r[k / 2 * 2 + 1]);
        if k % 2 == 0 {
            _mm256_unpacklo_ps(a, b)
        } else {
            _mm256_unpackhi_ps(a, b)
        }
    });
    let u: [__m256; 8] = std::array::from_fn(|k| {
        // u[0..4]: rows 0-3, u[4..8]: rows 4-7; within each, columns 0/4, 1/5, 2/6, 3/7.
        let (base, c) = (k / 4 * 4, k % 4);
        let (a, b) = (t[base + c / 2], t[base + 2 + c / 2]);
        if c % 2 == 0 {
            _mm256_shuffle_ps::<0x44>(a, b)
        } else {
            _mm256_shuffle_ps::<0xEE>(a, b)
        }
    });
    for c in 0..4 {
        _mm256_storeu_ps(dst.add(c * dst_stride), _mm256_permute2f128_ps::<0x20>(u[c], u[4 + c]));
        _mm256_storeu_ps(dst.add((c + 4) * dst_stride), _mm256_permute2f128_ps::<0x31>(u[c], u[4 + c]));
    }
}
