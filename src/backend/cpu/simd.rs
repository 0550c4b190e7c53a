//! The CPU backend's inner loops, compiled twice: for the baseline target and, chosen at run time, for AVX2 where
//! the processor has it. The loops are the op table's (`eval_slice`, always inlined), so semantics stay in one
//! place; no fused multiply-add is introduced, so both versions give the same bits.

use crate::op::{BinaryOp, ReduceOp, UnaryOp};

#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    std::is_x86_feature_detected!("avx2")
}

/// `op` over `a` into `out`.
pub fn unary(op: UnaryOp, a: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the processor has AVX2 (checked above).
        return unsafe { unary_avx2(op, a, out) };
    }
    op.eval_slice(a, out)
}

/// `op` over `a` and `b` into `out`.
pub fn binary(op: BinaryOp, a: &[f32], b: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the processor has AVX2 (checked above).
        return unsafe { binary_avx2(op, a, b, out) };
    }
    op.eval_slice(a, b, out)
}

/// Folds `values` into 8 running folds, element `j` into `acc[j % 8]`.
pub fn fold8(op: ReduceOp, values: &[f32], acc: &mut [f32; 8]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the processor has AVX2 (checked above).
        return unsafe { fold8_avx2(op, values, acc) };
    }
    fold8_generic(op, values, acc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn unary_avx2(op: UnaryOp, a: &[f32], out: &mut [f32]) {
    op.eval_slice(a, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn binary_avx2(op: BinaryOp, a: &[f32], b: &[f32], out: &mut [f32]) {
    op.eval_slice(a, b, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn fold8_avx2(op: ReduceOp, values: &[f32], acc: &mut [f32; 8]) {
    fold8_generic(op, values, acc)
}

#[inline(always)]
fn fold8_generic(op: ReduceOp, values: &[f32], acc: &mut [f32; 8]) {
    // One loop per combining op (a constant op's `eval` folds to its expression), so each vectorizes.
    match op.combine() {
        BinaryOp::Add => fold8_with(values, acc, |a, b| BinaryOp::Add.eval(a, b)),
        BinaryOp::Mul => fold8_with(values, acc, |a, b| BinaryOp::Mul.eval(a, b)),
        BinaryOp::Max => fold8_with(values, acc, |a, b| BinaryOp::Max.eval(a, b)),
        BinaryOp::Min => fold8_with(values, acc, |a, b| BinaryOp::Min.eval(a, b)),
        other => fold8_with(values, acc, |a, b| other.eval(a, b)),
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
