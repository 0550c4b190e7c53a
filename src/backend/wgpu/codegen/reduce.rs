//! WGSL for reduce kernels: each output's fold over a chunk of the axis, the prologue evaluated per element, then
//! either the epilogue per output or, in a first stage, the chunk's partial fold.
//!
//! Rows (the folded elements adjacent): a workgroup per (output, chunk); threads stride along the axis, each folding
//! its elements in order, then meet in a tree in workgroup memory. Columns: a thread per (output, chunk) folds its
//! elements in order while its neighbours fold the neighbouring outputs, so loads stay coalesced; or, with
//! `column_team`, a team of threads per (output, chunk) strides along it and meets in a tree in workgroup memory.
//! Either way the order is fixed by the sizes alone: the same input gives the same bits on every run.

use super::emit::Emitter;
use super::{lane_type, param, Target, WORKGROUP_SIZE};
use crate::dtype::DType;
use crate::kernel::{Kernel, Kind};
use crate::op::ReduceOp;
use std::fmt::Write;

/// The WGSL source of a reduce kernel.
pub(super) fn generate(k: &Kernel, target: &Target) -> String {
    let Kind::Reduce(r) = k.kind else { unreachable!("a reduce kernel") };
    let mut e = Emitter::new(k, target);
    let rank = k.shape.ndim();
    let at = k.dims_at.expect("reduce kernels have coordinates");
    let dt = k.types[r.value];
    let dim = |d: usize| param(at + d);
    let wg = WORKGROUP_SIZE;
    let subgroups = target.subgroups && r.rows;
    main_header(&mut e, r.rows || r.column_team, subgroups);
    e.line(1, "let w = wid.x + wid.y * nwg.x;");
    e.line(1, &format!("let chunks = {};", param(r.chunks_at)));
    if r.rows {
        // A team of threads per (output, chunk), `256 / team` of them per workgroup.
        e.line(1, &format!("let team = {};", param(r.team_at)));
        e.line(1, "let lane_t = lid.x % team;");
        e.line(1, &format!("let first = w * ({wg}u / team);"));
        // Uniform per workgroup: the barriers below stay in uniform control flow.
        e.line(1, &format!("if (first >= {} * chunks) {{ return; }}", param(0)));
        e.line(1, "let job = first + lid.x / team;");
        e.line(1, &format!("let valid = job < {} * chunks;", param(0)));
        e.line(1, "let o = job / chunks;");
        e.line(1, "let j = job % chunks;");
    } else if r.column_team {
        // `per` outputs a workgroup, a team of `team` threads each, thread `sub` of a team `per` threads on.
        e.line(1, &format!("let team = {};", param(r.team_at)));
        e.line(1, &format!("let per = {wg}u / team;"));
        e.line(1, &format!("let groups = ({} + per - 1u) / per;", param(0)));
        // Uniform per workgroup: the barriers below stay in uniform control flow.
        e.line(1, "if (w >= groups * chunks) { return; }");
        e.line(1, "let sub = lid.x / per;");
        e.line(1, "let o = (w % groups) * per + lid.x % per;");
        e.line(1, "let j = w / groups;");
        e.line(1, &format!("let valid = o < {};", param(0)));
    } else {
        e.line(1, &format!("let groups = ({} + {}u) / {wg}u;", param(0), wg - 1));
        e.line(1, "if (w >= groups * chunks) { return; }");
        e.line(1, &format!("let o = (w % groups) * {wg}u + lid.x;"));
        e.line(1, "let j = w / groups;");
        e.line(1, &format!("if (o >= {}) {{ return; }}", param(0)));
    }
    output_coords(&mut e, r.axis);
    e.line(1, &format!("let n = {};", dim(r.axis)));
    if e.wide {
        // Chunks of whole vectors.
        e.line(1, "let len = ((n + chunks - 1u) / chunks + 3u) / 4u * 4u;");
    } else {
        e.line(1, "let len = (n + chunks - 1u) / chunks;");
    }
    e.line(1, "let lo = j * len;");
    if r.rows || r.column_team {
        // A team past the last output folds nothing but still meets its workgroup's barriers.
        e.line(1, "let hi = select(lo, min(n, lo + len), valid);");
    } else {
        e.line(1, "let hi = min(n, lo + len);");
    }
    let unroll = if r.rows { UNROLL } else { COLUMN_UNROLL };
    let f = Fold { op: r.op, axis: r.axis, body: 0..r.prologue, value: r.value, unroll };
    // Sibling folds share the walk: the prologue computes every value, each folded into accumulators of its own.
    let siblings: Vec<Fold> = k.folds()[1..]
        .iter()
        .map(|&(op, value)| Fold { op, axis: r.axis, body: 0..r.prologue, value, unroll })
        .collect();
    if r.rows && siblings.is_empty() {
        if e.wide {
            accumulate(&mut e, &f, "lo / 4u + lane_t", "team", "hi / 4u", 1, false);
        } else {
            accumulate(&mut e, &f, "lo + lane_t", "team", "hi", 1, false);
        }
        tree(&mut e, r.op, dt, 1, None);
        e.line(1, "if (lane_t != 0u || !valid) { return; }");
        e.line(1, &format!("let folded = bitcast<{}>(total);", lane_type(dt, 1)));
    } else if r.rows {
        let (start, end) = if e.wide { ("lo / 4u + lane_t", "hi / 4u") } else { ("lo + lane_t", "hi") };
        accumulate_all(&mut e, &f, &siblings, start, "team", end, 1, false);
        // Each fold's tree in a block of its own (`acc` naming its accumulator there), alternating between the
        // halves of `red` as a rows kernel's folds do, so one barrier a fold keeps them apart.
        let folds = std::iter::once((&f, "folded".to_string(), "acc".to_string()))
            .chain(siblings.iter().enumerate().map(|(p, s)| (s, format!("f{p}"), sibling_acc(p))));
        for (n, (fold, name, acc)) in folds.enumerate() {
            let dt = k.types[fold.value];
            e.line(1, &format!("var {name}: {};", lane_type(dt, 1)));
            e.line(1, "{");
            if acc != "acc" {
                e.line(2, &format!("let acc = {acc};"));
            }
            tree(&mut e, fold.op, dt, 2, Some(n % 2));
            e.line(2, &format!("{name} = bitcast<{}>(total);", lane_type(dt, 1)));
            e.line(1, "}");
        }
        e.line(1, "if (lane_t != 0u || !valid) { return; }");
    } else if r.column_team {
        accumulate_all(&mut e, &f, &siblings, "lo + sub", "team", "hi", 1, false);
        // Each thread reads only its own word of `red` before writing it again for the next fold's tree, whose
        // first barrier comes after that write: the folds need no barrier between them.
        column_tree(&mut e, r.op, dt, "acc");
        e.line(1, &format!("let folded = bitcast<{}>(red[lid.x]);", lane_type(dt.lanes(), 1)));
        for (p, s) in siblings.iter().enumerate() {
            let dt = k.types[s.value];
            column_tree(&mut e, s.op, dt, &sibling_acc(p));
            e.line(1, &format!("let f{p} = bitcast<{}>(red[lid.x]);", lane_type(dt.lanes(), 1)));
        }
        e.line(1, "if (sub != 0u || !valid) { return; }");
    } else {
        accumulate_all(&mut e, &f, &siblings, "lo", "1u", "hi", 1, false);
        e.line(1, "let folded = acc;");
        for p in 0..siblings.len() {
            e.line(1, &format!("let f{p} = {};", sibling_acc(p)));
        }
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
        // Output 0 holds the main fold's partials, output `p + 1` sibling `p`'s.
        for n in 0..k.outputs.len() {
            let value = if n == 0 { "folded".to_string() } else { format!("f{}", n - 1) };
            let st = e.store(n, &ix, &value);
            e.line(1, &st);
        }
    } else {
        e.line(1, &format!("let c{} = 0;", r.axis));
        e.line(1, "let i = o;");
        e.range(r.prologue..k.body.len(), 1);
        for (n, &(_, value)) in k.outputs.iter().enumerate() {
            let st = e.store(n, "o", &format!("t{value}"));
            e.line(1, &st);
        }
    }
    e.out.push_str("}\n");
    let Emitter { b, out, .. } = e;
    b.finish(&out)
}

/// Declares the tree's workgroup memory (when `tree`) and opens `main` with the builtins folds use.
pub(super) fn main_header(e: &mut Emitter, tree: bool, subgroups: bool) {
    let wg = WORKGROUP_SIZE;
    if tree {
        // Words, so folds of any lane type share it (through bitcasts).
        let _ = writeln!(e.out, "var<workgroup> red: array<u32, {wg}>;");
    }
    let lanes =
        if subgroups { ", @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) lanes: u32" } else { "" };
    let _ = write!(
        e.out,
        "@compute @workgroup_size({wg})\n\
         fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, \
         @builtin(num_workgroups) nwg: vec3<u32>{lanes}) {{\n"
    );
}

/// The coordinates `c{d}` of output `o` on every axis but the folded one, innermost first.
pub(super) fn output_coords(e: &mut Emitter, axis: usize) {
    let at = e.k.dims_at.expect("folds have coordinates");
    e.line(1, "var q = o;");
    for d in (0..e.k.shape.ndim()).rev().filter(|&d| d != axis) {
        e.line(1, &format!("let c{d} = i32(q % {});", param(at + d)));
        e.line(1, &format!("q = q / {};", param(at + d)));
    }
}

/// Independent folds each thread keeps, one element each per step.
pub(super) const UNROLL: usize = 4;

/// Independent folds of a column fold's thread. A thread per output walks its chunk of the axis alone, each step a
/// round trip to memory, so more steps in flight shorten that chain: 16 against 4 sped up the fold of a GEMV's partial
/// sums (`[1, 4096] x [4096, 4096]`), `x.sum(0)` of nanoGPT's bias gradients and its training step, where 8 was no
/// better than 4 (figures: docs/notes/source-measurements.md, `src/backend/wgpu/codegen/reduce.rs`).
pub(crate) const COLUMN_UNROLL: usize = 16;

/// What one fold loop computes: instructions `body` give the element folded (in `value`) with `op` along `axis`.
pub(super) struct Fold {
    pub op: ReduceOp,
    pub axis: usize,
    pub body: std::ops::Range<usize>,
    pub value: usize,
    /// Independent folds each thread keeps: [`UNROLL`], or [`COLUMN_UNROLL`] in a column fold.
    pub unroll: usize,
}

/// Declares `acc` and folds into it the elements `start`, `start + step`, ... below `end` along the fold's axis:
/// `f.unroll` independent folds per step, so that many loads are in flight, combined in a fixed order after.
/// With `cached` (a rows kernel's cached path, see `rows.rs`), the range holds at most [`UNROLL`] steps per
/// thread and loads at the kernel's own index read the cached row: one guarded step per accumulator, no loop.
pub(super) fn accumulate(e: &mut Emitter, f: &Fold, start: &str, step: &str, end: &str, depth: usize, cached: bool) {
    accumulate_all(e, f, &[], start, step, end, depth, cached);
}

/// The accumulator of sibling fold `p`, as `acc` is the main fold's (its running folds are `{name}{u}`).
fn sibling_acc(p: usize) -> String {
    format!("s{p}acc")
}

/// [`accumulate`] of `f` and its `siblings` (folds of values the same body computes) in one walk: each element's
/// body is evaluated once and each value folded into accumulators of its own, `acc` for `f`, [`sibling_acc`] for
/// the siblings.
#[allow(clippy::too_many_arguments)]
fn accumulate_all(
    e: &mut Emitter,
    f: &Fold,
    siblings: &[Fold],
    start: &str,
    step: &str,
    end: &str,
    depth: usize,
    cached: bool,
) {
    let names: Vec<String> = std::iter::once("acc".to_string()).chain((0..siblings.len()).map(sibling_acc)).collect();
    let folds: Vec<&Fold> = std::iter::once(f).chain(siblings).collect();
    for (fold, name) in folds.iter().zip(&names) {
        // Accumulates in the value's lanes: f16 and bf16 values in f32, rounded only when the fold is read.
        let dt = e.k.types[fold.value].lanes();
        let identity = e.b.lane_const(lane_type(dt, 1), fold.op.identity_lane(dt));
        // Wide: each step folds 4 adjacent elements as one vector (the range counts vectors); the lanes meet after.
        let init = if e.wide { format!("{}({identity})", lane_type(dt, 4)) } else { identity };
        for u in 0..f.unroll {
            e.line(depth, &format!("var {name}{u} = {init};"));
        }
    }
    let each = |e: &mut Emitter, at: &str, u: usize, depth: usize| {
        own_index(e, f.axis, at, depth);
        e.range(f.body.clone(), depth);
        for (fold, name) in folds.iter().zip(&names) {
            fold_into(e, fold, &format!("{name}{u}"), depth);
        }
    };
    steps(e, [start, step, end], depth, cached, f.unroll, each);
    let wide = e.wide;
    for (fold, name) in folds.iter().zip(&names) {
        let dt = e.k.types[fold.value].lanes();
        let mut pairs: Vec<String> = (0..f.unroll).map(|u| format!("{name}{u}")).collect();
        while pairs.len() > 1 {
            let next: Vec<String> =
                pairs.chunks(2).map(|p| format!("({})", e.b.binary(fold.op.combine(), dt, &p[0], &p[1]))).collect();
            pairs = next;
        }
        // The combined vector is `{name}v`, not `{name}{unroll}`, which would be an accumulator's name were unroll
        // above 4.
        let whole = if wide { format!("{name}v") } else { name.clone() };
        e.line(depth, &format!("let {whole} = {};", pairs[0]));
    }
    if wide {
        // Each vector's lanes meet, scalar from here on.
        e.wide = false;
        e.b.set_width(1);
        for (fold, name) in folds.iter().zip(&names) {
            let dt = e.k.types[fold.value].lanes();
            let xy = e.b.binary(fold.op.combine(), dt, &format!("{name}v.x"), &format!("{name}v.y"));
            let zw = e.b.binary(fold.op.combine(), dt, &format!("{name}v.z"), &format!("{name}v.w"));
            let all = e.b.binary(fold.op.combine(), dt, &format!("({xy})"), &format!("({zw})"));
            e.line(depth, &format!("let {name} = {all};"));
        }
    }
}

/// Emits `var r = start;` and the loop over the elements `r`, `r + step`, ... below `end` (`range` is `[start,
/// step, end]`), calling `element(e, at, u, depth)` to fold the element at `at` into accumulator `u` (of
/// `unroll`): `unroll` independent steps a pass, then (past 4) 4 a pass, and a tail into accumulator 0; or,
/// `cached`, one guarded step per accumulator reading the cached row.
pub(super) fn steps(
    e: &mut Emitter,
    range: [&str; 3],
    depth: usize,
    cached: bool,
    unroll: usize,
    mut element: impl FnMut(&mut Emitter, &str, usize, usize),
) {
    let [start, step, end] = range;
    e.line(depth, &format!("var r = {start};"));
    if cached {
        for u in 0..unroll {
            e.line(depth, &format!("if (r + {u}u * {step} < {end}) {{"));
            e.cache = Some(u);
            element(e, &format!("r + {u}u * {step}"), u, depth + 1);
            e.cache = None;
            e.line(depth, "}");
        }
    } else {
        // A wide unroll leaves up to `unroll - 1` steps: 4 at a time first, so that they do not wait on each
        // other's loads one by one.
        let widths = if unroll > UNROLL { vec![unroll, UNROLL] } else { vec![unroll] };
        for w in widths {
            e.line(depth, &format!("for (; r + {} * {step} < {end}; r = r + {w}u * {step}) {{", w - 1));
            for u in 0..w {
                e.line(depth + 1, "{");
                element(e, &format!("r + {u}u * {step}"), u, depth + 2);
                e.line(depth + 1, "}");
            }
            e.line(depth, "}");
        }
        e.line(depth, &format!("for (; r < {end}; r = r + {step}) {{"));
        element(e, "r", 0, depth + 1);
        e.line(depth, "}");
    }
}

/// Folds `acc` across each team (`team` threads, `lane_t` the thread's place in it) into `total` (the result's
/// bits), valid for every thread of the team: subgroups first where the target has them (and no subgroup is wider
/// than the team), then the subgroups' results.
///
/// A team of exactly one subgroup (a short row on 32-wide subgroups) takes the subgroup's fold as its own: no
/// workgroup memory, no barrier. Where a team has at most `lanes` subgroups (a team of 256 on subgroups of 16 or
/// more), each subgroup folds the subgroups' results again with one more subgroup operation: one barrier in all.
/// Otherwise a tree in workgroup memory, one barrier a level. `half`: a kernel that folds again names the half of `red` this fold's subgroup
/// results go to; alternating halves, the next fold's barrier keeps its writes from this fold's reads, and only
/// the paths that use all of `red` end with a barrier after `total` is read. Both orders are fixed for an adapter,
/// so results repeat bit for bit.
pub(super) fn tree(e: &mut Emitter, op: ReduceOp, dt: DType, depth: usize, half: Option<usize>) {
    let subgroups = e.target_subgroups();
    let region = half.map_or(0, |h| h as u32 * WORKGROUP_SIZE / 2);
    let again = half.is_some();
    let dt = dt.lanes();
    let ty = lane_type(dt, 1);
    // `red` holds words: each operand is read through a bitcast and the result written back as bits.
    let pair = |e: &mut Emitter, a: &str, b: &str| {
        let v = e.b.binary(op.combine(), dt, &format!("bitcast<{ty}>({a})"), &format!("bitcast<{ty}>({b})"));
        format!("bitcast<u32>({v})")
    };
    e.line(depth, "var total: u32;");
    let d = if subgroups {
        let sg = match op {
            ReduceOp::Sum => "subgroupAdd",
            ReduceOp::Prod => "subgroupMul",
            ReduceOp::Max => "subgroupMax",
            ReduceOp::Min => "subgroupMin",
        };
        // Hardware max and min may drop NaN; lazor's propagate it.
        let nan_aware = matches!(op, ReduceOp::Max | ReduceOp::Min) && dt.is_float();
        let fold = |e: &mut Emitter, name: &str, v: &str, depth: usize| {
            if nan_aware {
                e.line(
                    depth,
                    &format!("let {name}_nan = subgroupAny((bitcast<u32>({v}) & 0x7fffffffu) > 0x7f800000u);"),
                );
                let nan = e.b.lane_const("f32", 0x7fc0_0000);
                e.line(depth, &format!("let {name} = select({sg}({v}), {nan}, {name}_nan);"));
            } else {
                e.line(depth, &format!("let {name} = {sg}({v});"));
            }
        };
        // A team of one subgroup: its fold is the team's, in every lane, without workgroup memory or a barrier.
        e.line(depth, "if (lanes == team) {");
        fold(e, "part", "acc", depth + 1);
        e.line(depth + 1, "total = bitcast<u32>(part);");
        // With halves, subgroups of one lane would write their results past the end of `red`; every fold of a
        // kernel takes the same path, or the halves would not keep the folds apart.
        e.line(depth, if again { "} else if (1u < lanes && lanes <= team) {" } else { "} else if (lanes <= team) {" });
        // Each subgroup folds its lanes at once; its first lane hands the result on.
        fold(e, "part", "acc", depth + 1);
        e.line(depth + 1, &format!("if (lane == 0u) {{ red[{region}u + lid.x / lanes] = bitcast<u32>(part); }}"));
        e.line(depth + 1, "workgroupBarrier();");
        e.line(depth + 1, "let base = (lid.x - lane_t) / lanes;");
        e.line(depth + 1, "if (team <= lanes * lanes) {");
        // Lanes past the team's subgroups contribute the fold's identity.
        let identity = e.b.lane_const(ty, op.identity_lane(dt));
        e.line(
            depth + 2,
            &format!(
                "let mine = select({identity}, bitcast<{ty}>(red[{region}u + base + min(lane, team / lanes - 1u)]), \
                 lane < team / lanes);"
            ),
        );
        fold(e, "all", "mine", depth + 2);
        e.line(depth + 2, "total = bitcast<u32>(all);");
        e.line(depth + 1, "} else {");
        e.line(depth + 2, &format!("let at = {region}u + base;"));
        e.line(depth + 2, "for (var s = team / lanes / 2u; s > 0u; s = s >> 1u) {");
        let p = pair(e, "red[at + lane_t]", "red[at + lane_t + s]");
        e.line(depth + 3, &format!("if (lane_t < s) {{ red[at + lane_t] = {p}; }}"));
        e.line(depth + 3, "workgroupBarrier();");
        e.line(depth + 2, "}");
        e.line(depth + 2, "total = red[at];");
        if again {
            e.line(depth + 2, "workgroupBarrier();");
        }
        e.line(depth + 1, "}");
        // A team within one subgroup: its lanes exchange values, halving the distance each step.
        e.line(depth, "} else if (team < lanes) {");
        e.line(depth + 1, "var v = acc;");
        e.line(depth + 1, "for (var s = team / 2u; s > 0u; s = s >> 1u) {");
        let v = e.b.binary(op.combine(), dt, "v", "subgroupShuffleXor(v, s)");
        e.line(depth + 2, &format!("v = {v};"));
        e.line(depth + 1, "}");
        e.line(depth + 1, "total = bitcast<u32>(v);");
        e.line(depth, "} else {");
        depth + 1
    } else {
        depth
    };
    memory_tree(e, op, dt, d, "lane_t", "", "acc");
    e.line(d, "total = red[lid.x - lane_t];");
    if again {
        e.line(d, "workgroupBarrier();");
    }
    if subgroups {
        e.line(depth, "}");
    }
}

/// Folds `acc` across each column team into `red[lid.x]` of the team's first thread: a tree in workgroup memory
/// whose levels pair threads `s * per` apart (`sub` and `sub + s` of one team), so the order is fixed by the team
/// size alone.
fn column_tree(e: &mut Emitter, op: ReduceOp, dt: DType, acc: &str) {
    memory_tree(e, op, dt.lanes(), 1, "sub", " * per", acc);
}

/// The workgroup-memory tree both layouts share: each thread's `acc` into `red[lid.x]`, then levels halving `team`,
/// where the thread whose place in its team (`place`) is below `s` folds in the value `s` places on, its threads
/// `stride` apart (`""` for neighbours, `" * per"` for a column team's). The team's fold ends at its first thread.
fn memory_tree(e: &mut Emitter, op: ReduceOp, dt: DType, depth: usize, place: &str, stride: &str, acc: &str) {
    let ty = lane_type(dt, 1);
    e.line(depth, &format!("red[lid.x] = bitcast<u32>({acc});"));
    e.line(depth, "workgroupBarrier();");
    e.line(depth, "for (var s = team / 2u; s > 0u; s = s >> 1u) {");
    let v = e.b.binary(
        op.combine(),
        dt,
        &format!("bitcast<{ty}>(red[lid.x])"),
        &format!("bitcast<{ty}>(red[lid.x + s{stride}])"),
    );
    e.line(depth + 1, &format!("if ({place} < s) {{ red[lid.x] = bitcast<u32>({v}); }}"));
    e.line(depth + 1, "workgroupBarrier();");
    e.line(depth, "}");
}

/// Folds the fold's value (computed by the body just emitted) into `acc`.
fn fold_into(e: &mut Emitter, f: &Fold, acc: &str, depth: usize) {
    let dt = e.k.types[f.value].lanes();
    let folded = e.b.binary(f.op.combine(), dt, acc, &format!("t{}", f.value));
    e.line(depth, &format!("{acc} = {folded};"));
}

/// Emits the coordinate `c{axis}` of position `at` along `axis` (a vector's first element when wide) and `i`, the
/// element's row-major index in the kernel's shape (in vectors when wide), for loads at the kernel's own index.
pub(super) fn own_index(e: &mut Emitter, axis: usize, at: &str, depth: usize) {
    let rank = e.k.shape.ndim();
    let dims_at = e.k.dims_at.expect("folds and rows have coordinates");
    let first = if e.wide { format!("4u * ({at})") } else { at.to_string() };
    e.line(depth, &format!("let c{axis} = i32({first});"));
    let ix = row_major(rank, &|d| param(dims_at + d), |d| format!("u32(c{d})"));
    let ix = if e.wide { format!("({ix}) / 4u") } else { ix };
    e.line(depth, &format!("let i = {ix};"));
}

/// The row-major index of coordinates `coord(d)` in a shape of extents `extent(d)`, as a `u32` expression.
pub(super) fn row_major(rank: usize, extent: &dyn Fn(usize) -> String, coord: impl Fn(usize) -> String) -> String {
    let mut ix = "0u".to_string();
    for d in 0..rank {
        ix = format!("({ix}) * {} + {}", extent(d), coord(d));
    }
    ix
}
