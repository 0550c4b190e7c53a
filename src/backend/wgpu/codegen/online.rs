//! WGSL for logsumexp's two folds in one pass over a row: a running maximum and a sum rescaled as it grows.
//!
//! A rows kernel folds `m = max(x)` and then `s = sum(exp(x - clamp(m)))` (`clamp` to the finite floats, as
//! `Tensor::logsumexp` writes it), each phase reading the row. A row longer than the cache (cross-entropy over a
//! 50257-word vocabulary) is then read from memory twice, and the pair of folds streamed at about half one fold's rate
//! (figures: docs/notes/source-measurements.md, `src/backend/wgpu/codegen/online.rs`). Here each thread keeps, per
//! element it reads, its maximum `m_t` so far and `s_t = sum(exp(x - clamp(m_t)))`, rescaling `s_t` by
//! `exp(clamp(m_old) - clamp(m_new))` when the maximum grows; the team then folds `M = max(m_t)` and
//! `sum(s_t exp(clamp(m_t) - clamp(M)))`, which is the second fold up to rounding. `M` is the first fold exactly. The
//! CPU backend runs the two phases as written.

use super::emit::Emitter;
use super::reduce::{own_index, steps, tree, UNROLL};
use crate::dtype::DType;
use crate::op::{BinaryOp, ReduceOp, UnaryOp};

/// Emits phases `f{n}` (the maximum of instruction `value`, computed by `body` per element) and `f{n + 1}` (the
/// sum of `exp(value - clamp(f{n}))`) in one pass, storing each to its output if any. `end` bounds the row in
/// steps; `cached` reads it from registers as the rows kernel's cached path does.
#[allow(clippy::too_many_arguments)]
pub(super) fn logsumexp(
    e: &mut Emitter,
    axis: usize,
    (body, value): (std::ops::Range<usize>, usize),
    outputs: [Option<usize>; 2],
    n: usize,
    end: &str,
    depth: usize,
    cached: bool,
) {
    e.line(depth, &format!("var f{n}: f32;"));
    e.line(depth, &format!("var f{}: f32;", n + 1));
    e.hoisted(body.clone(), depth, |e| {
        let d = depth + 1;
        let ty = e.b.ty(DType::F32);
        let minus_inf = e.b.lane_const("f32", f32::NEG_INFINITY.to_bits());
        for u in 0..UNROLL {
            e.line(d, &format!("var om{u} = {ty}({minus_inf});"));
            e.line(d, &format!("var os{u} = {ty}(0.0);"));
            // The running maximum clamped, kept so that each element clamps once.
            e.line(d, &format!("var oc{u} = {ty}(bitcast<f32>(0xff7fffffu));"));
        }
        let element = |e: &mut Emitter, at: &str, u: usize, depth: usize| {
            own_index(e, axis, at, depth);
            e.range(body.clone(), depth);
            let grown = e.b.binary(BinaryOp::Max, DType::F32, &format!("om{u}"), &format!("t{value}"));
            e.line(depth, &format!("om{u} = {grown};"));
            let now = clamp(e, &format!("om{u}"));
            e.line(depth, &format!("let cn = {now};"));
            let rescale = e.b.unary(UnaryOp::Exp, DType::F32, &format!("(oc{u} - cn)"));
            let term = e.b.unary(UnaryOp::Exp, DType::F32, &format!("(t{value} - cn)"));
            e.line(depth, &format!("os{u} = os{u} * {rescale} + {term};"));
            e.line(depth, &format!("oc{u} = cn;"));
        };
        steps(e, ["lane_t", "team", end], d, cached, UNROLL, element);
        // The unrolled pairs meet in a fixed order, then a vector's lanes.
        let mut pairs: Vec<(String, String)> = (0..UNROLL).map(|u| (format!("om{u}"), format!("os{u}"))).collect();
        let mut made = 0;
        while pairs.len() > 1 {
            let next = pairs.chunks(2).map(|p| merge(e, &p[0], &p[1], &mut made, d)).collect();
            pairs = next;
        }
        let (mut m, mut s) = pairs.pop().expect("a pair");
        if e.wide {
            e.wide = false;
            e.b.set_width(1);
            let lane = |v: &str, c: char| format!("{v}.{c}");
            let xy = merge(e, &(lane(&m, 'x'), lane(&s, 'x')), &(lane(&m, 'y'), lane(&s, 'y')), &mut made, d);
            let zw = merge(e, &(lane(&m, 'z'), lane(&s, 'z')), &(lane(&m, 'w'), lane(&s, 'w')), &mut made, d);
            (m, s) = merge(e, &xy, &zw, &mut made, d);
        }
        e.line(d, "{");
        e.line(d + 1, &format!("let acc = {m};"));
        tree(e, ReduceOp::Max, DType::F32, d + 1, Some(n % 2));
        e.line(d + 1, &format!("f{n} = bitcast<f32>(total);"));
        e.line(d, "}");
        e.line(d, "{");
        let (mine, all) = (clamp(e, &m), clamp(e, &format!("f{n}")));
        let scale = e.b.unary(UnaryOp::Exp, DType::F32, &format!("({mine} - {all})"));
        e.line(d + 1, &format!("let acc = {s} * {scale};"));
        tree(e, ReduceOp::Sum, DType::F32, d + 1, Some((n + 1) % 2));
        e.line(d + 1, &format!("f{} = bitcast<f32>(total);", n + 1));
        e.line(d, "}");
        for (j, out) in outputs.iter().enumerate() {
            if let Some(out) = *out {
                let st = e.store(out, "o", &format!("f{}", n + j));
                e.line(d, &format!("if (lane_t == 0u && valid) {{ {st} }}"));
            }
        }
    });
}

/// `x` clamped to the finite floats, as `Tensor::logsumexp` clamps its maximum, in the emitter's width.
fn clamp(e: &mut Emitter, x: &str) -> String {
    let ty = e.b.ty(DType::F32);
    let low = e.b.binary(BinaryOp::Max, DType::F32, x, &format!("{ty}(bitcast<f32>(0xff7fffffu))"));
    e.b.binary(BinaryOp::Min, DType::F32, &format!("({low})"), &format!("{ty}(bitcast<f32>(0x7f7fffffu))"))
}

/// Declares the pair that folds pairs `a` and `b` (maximum, sum relative to its clamp) and returns its names.
fn merge(
    e: &mut Emitter,
    a: &(String, String),
    b: &(String, String),
    made: &mut usize,
    depth: usize,
) -> (String, String) {
    let (m, s) = (format!("pm{made}"), format!("ps{made}"));
    *made += 1;
    let max = e.b.binary(BinaryOp::Max, DType::F32, &a.0, &b.0);
    e.line(depth, &format!("let {m} = {max};"));
    let (ca, cb, c) = (clamp(e, &a.0), clamp(e, &b.0), clamp(e, &m));
    let ea = e.b.unary(UnaryOp::Exp, DType::F32, &format!("({ca} - {c})"));
    let eb = e.b.unary(UnaryOp::Exp, DType::F32, &format!("({cb} - {c})"));
    e.line(depth, &format!("let {s} = {} * {ea} + {} * {eb};", a.1, b.1));
    (m, s)
}
