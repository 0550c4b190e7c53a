//! WGSL for reduce kernels: each output's fold over a chunk of the axis, the prologue evaluated per element, then
//! either the epilogue per output or, in a first stage, the chunk's partial fold.
//!
//! Rows (the folded elements adjacent): a workgroup per (output, chunk); threads stride along the axis, each folding
//! its elements in order, then meet in a tree in workgroup memory. Columns: a thread per (output, chunk) folds its
//! elements in order while its neighbours fold the neighbouring outputs, so loads stay coalesced. Either way the
//! order is fixed by the sizes alone: the same input gives the same bits on every run.

use super::elementwise::Emitter;
use super::{Target, WORKGROUP_SIZE};
use crate::kernel::{Kernel, Kind};
use crate::op::ReduceOp;
use std::fmt::Write;

/// The WGSL source of a reduce kernel.
pub(super) fn generate(k: &Kernel, target: &Target) -> String {
    let Kind::Reduce(r) = k.kind else { unreachable!("a reduce kernel") };
    let mut e = Emitter::new(k);
    let rank = k.shape.ndim();
    let at = k.dims_at.expect("reduce kernels have coordinates");
    let dim = |d: usize| format!("p[{}]", at + d);
    let combine = |e: &mut Emitter, a: &str, b: &str| e.b.binary(r.op.combine(), a, b);
    let identity = format!("bitcast<f32>({}u)", r.op.identity().to_bits());
    let wg = WORKGROUP_SIZE;
    if r.rows {
        let _ = writeln!(e.out, "var<workgroup> red: array<f32, {wg}>;");
    }
    let subgroups = target.subgroups && r.rows;
    let lanes =
        if subgroups { ", @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) lanes: u32" } else { "" };
    let _ = write!(
        e.out,
        "@compute @workgroup_size({wg})\n\
         fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, \
         @builtin(num_workgroups) nwg: vec3<u32>{lanes}) {{\n"
    );
    e.line(1, "let w = wid.x + wid.y * nwg.x;");
    e.line(1, &format!("let chunks = p[{}];", r.chunks_at));
    if r.rows {
        // Uniform per workgroup: the barriers below stay in uniform control flow.
        e.line(1, "if (w >= p[0] * chunks) { return; }");
        e.line(1, "let o = w / chunks;");
        e.line(1, "let j = w % chunks;");
    } else {
        e.line(1, &format!("let groups = (p[0] + {}u) / {wg}u;", wg - 1));
        e.line(1, "if (w >= groups * chunks) { return; }");
        e.line(1, &format!("let o = (w % groups) * {wg}u + lid.x;"));
        e.line(1, "let j = w / groups;");
        e.line(1, "if (o >= p[0]) { return; }");
    }
    // The output's coordinates: every axis but the folded one, innermost first.
    e.line(1, "var q = o;");
    for d in (0..rank).rev().filter(|&d| d != r.axis) {
        e.line(1, &format!("let c{d} = i32(q % {});", dim(d)));
        e.line(1, &format!("q = q / {};", dim(d)));
    }
    e.line(1, &format!("let n = {};", dim(r.axis)));
    e.line(1, "let len = (n + chunks - 1u) / chunks;");
    e.line(1, "let lo = j * len;");
    e.line(1, "let hi = min(n, lo + len);");
    // UNROLL independent folds per step, so that many loads are in flight; combined in a fixed order after.
    let step = if r.rows { format!("{wg}u") } else { "1u".to_string() };
    let start = if r.rows { "lo + lid.x" } else { "lo" };
    for u in 0..UNROLL {
        e.line(1, &format!("var acc{u} = {identity};"));
    }
    e.line(1, &format!("var r = {start};"));
    e.line(1, &format!("for (; r + {} * {step} < hi; r = r + {UNROLL}u * {step}) {{", UNROLL - 1));
    for u in 0..UNROLL {
        e.line(2, "{");
        element(&mut e, &format!("r + {u}u * {step}"), &format!("acc{u}"), 3);
        e.line(2, "}");
    }
    e.line(1, "}");
    e.line(1, &format!("for (; r < hi; r = r + {step}) {{"));
    element(&mut e, "r", "acc0", 2);
    e.line(1, "}");
    let mut pairs: Vec<String> = (0..UNROLL).map(|u| format!("acc{u}")).collect();
    while pairs.len() > 1 {
        let next: Vec<String> = pairs.chunks(2).map(|p| format!("({})", combine(&mut e, &p[0], &p[1]))).collect();
        pairs = next;
    }
    e.line(1, &format!("let acc = {};", pairs[0]));
    if subgroups {
        // Each subgroup folds its lanes at once; its first lane hands the result to a (shorter) tree.
        let op = match r.op {
            ReduceOp::Sum => "subgroupAdd",
            ReduceOp::Prod => "subgroupMul",
            ReduceOp::Max => "subgroupMax",
            ReduceOp::Min => "subgroupMin",
        };
        if matches!(r.op, ReduceOp::Max | ReduceOp::Min) {
            // Hardware max and min may drop NaN; lazor's propagate it.
            e.line(1, "let nan = subgroupAny((bitcast<u32>(acc) & 0x7fffffffu) > 0x7f800000u);");
            e.line(1, &format!("let part = select({op}(acc), bitcast<f32>(0x7fc00000u), nan);"));
        } else {
            e.line(1, &format!("let part = {op}(acc);"));
        }
        e.line(1, "if (lane == 0u) { red[lid.x / lanes] = part; }");
        e.line(1, "workgroupBarrier();");
        e.line(1, &format!("for (var s = {wg}u / lanes / 2u; s > 0u; s = s >> 1u) {{"));
        let pair = combine(&mut e, "red[lid.x]", "red[lid.x + s]");
        e.line(2, &format!("if (lid.x < s) {{ red[lid.x] = {pair}; }}"));
        e.line(2, "workgroupBarrier();");
        e.line(1, "}");
        e.line(1, "if (lid.x != 0u) { return; }");
        e.line(1, "let folded = red[0];");
    } else if r.rows {
        e.line(1, "red[lid.x] = acc;");
        e.line(1, "workgroupBarrier();");
        e.line(1, &format!("for (var s = {}u; s > 0u; s = s >> 1u) {{", wg / 2));
        let pair = combine(&mut e, "red[lid.x]", "red[lid.x + s]");
        e.line(2, &format!("if (lid.x < s) {{ red[lid.x] = {pair}; }}"));
        e.line(2, "workgroupBarrier();");
        e.line(1, "}");
        e.line(1, "if (lid.x != 0u) { return; }");
        e.line(1, "let folded = red[0];");
    } else {
        e.line(1, "let folded = acc;");
    }
    if r.partial {
        // The chunk's fold, at the output's coordinates with the axis at the chunk.
        let ix = row_major(rank, &|d| if d == r.axis { "chunks".into() } else { dim(d) }, |d| {
            if d == r.axis {
                "j".into()
            } else {
                format!("u32(c{d})")
            }
        });
        e.line(1, &format!("o0[{ix}] = folded;"));
    } else {
        e.line(1, &format!("let c{} = 0;", r.axis));
        e.line(1, "let i = o;");
        e.range(r.prologue..k.body.len(), 1);
        for (n, &(_, value)) in k.outputs.iter().enumerate() {
            e.line(1, &format!("o{n}[o] = t{value};"));
        }
    }
    e.out.push_str("}\n");
    let Emitter { b, out, .. } = e;
    b.finish(&out)
}

/// Independent folds each thread keeps, one element each per step.
const UNROLL: usize = 4;

/// The prologue at axis position `at`, folded into `acc`.
fn element(e: &mut Emitter, at: &str, acc: &str, depth: usize) {
    let Kind::Reduce(r) = e.k.kind else { unreachable!("a reduce kernel") };
    let rank = e.k.shape.ndim();
    let dims_at = e.k.dims_at.expect("reduce kernels have coordinates");
    e.line(depth, &format!("let c{} = i32({at});", r.axis));
    // The element's row-major index in the folded shape, for loads at the kernel's own index.
    let ix = row_major(rank, &|d| format!("p[{}]", dims_at + d), |d| format!("u32(c{d})"));
    e.line(depth, &format!("let i = {ix};"));
    e.range(0..r.prologue, depth);
    let folded = e.b.binary(r.op.combine(), acc, &format!("t{}", r.value));
    e.line(depth, &format!("{acc} = {folded};"));
}

/// The row-major index of coordinates `coord(d)` in a shape of extents `extent(d)`, as a `u32` expression.
fn row_major(rank: usize, extent: &dyn Fn(usize) -> String, coord: impl Fn(usize) -> String) -> String {
    let mut ix = "0u".to_string();
    for d in 0..rank {
        ix = format!("({ix}) * {} + {}", extent(d), coord(d));
    }
    ix
}
