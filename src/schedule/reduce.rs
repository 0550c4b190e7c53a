//! Lowering a reduce group: the fold with its prologue (the expression folded, evaluated per element) and its
//! epilogue (elementwise members of the output's shape that read the fold), in one kernel or, for long axes with
//! few outputs, two: partial folds per chunk of the axis, then a fold of the partials with the epilogue.

use super::chunks::{chunks, team};
use super::lower::{kernel, GroupCtx, Lowerer};
use crate::dtype::DType;
use crate::graph::{Graph, NodeId, NodeOp};
use crate::kernel::{Access, Instr, Kernel, Kind, Phase, Reduce};
use crate::op::{BinaryOp, ReduceOp, UnaryOp};
use crate::shape::Shape;

/// The fewest threads per row of a rows kernel, below a subgroup's width: a team within one subgroup folds by
/// exchanging values between its lanes (`subgroupShuffleXor`, `codegen/reduce.rs`), so a short row needs no more
/// threads than its 16 elements each: teams of 16 ran nanoGPT's masked softmax over rows of 256 faster than a
/// subgroup's 32, and 64 or 128 slower still (figures: docs/notes/source-measurements.md, `src/schedule/reduce.rs`).
/// The floor is 4, not 8, so that lavapipe's subgroups of 8 run the exchanges in CI too.
const ROWS_TEAM_MIN: usize = 4;

/// A fold to lower: `op` along `axis` of `domain`, folding the value `value` computes per element of the domain.
/// Its output is the domain with the axis at extent 1, whose elements are the group's head's in order.
pub(super) struct Fold<'f> {
    pub op: crate::op::ReduceOp,
    pub domain: Shape,
    pub axis: usize,
    /// The type of the folded value.
    pub dtype: DType,
    pub value: &'f mut dyn FnMut(&mut Lowerer) -> Result<usize, NodeId>,
}

/// Lowers the group whose first member is a reduce node.
pub(super) fn lower(cx: GroupCtx) -> Result<Vec<Kernel>, NodeId> {
    let graph = cx.graph;
    let NodeOp::Reduce(op, x, axis) = graph.node(cx.grp.members[0]).op else {
        unreachable!("a reduce group starts with its fold")
    };
    let domain = graph.node(x).shape.clone();
    let mut value = |l: &mut Lowerer| l.root(x, &graph.node(x).shape);
    let dtype = graph.node(x).dtype;
    lower_fold(cx, Fold { op, domain, axis, dtype, value: &mut value })
}

/// Lowers `fold` with the rest of the group as its epilogue, in one kernel or two.
pub(super) fn lower_fold(cx: GroupCtx, fold: Fold) -> Result<Vec<Kernel>, NodeId> {
    let GroupCtx { graph, fusion, grp, written, slot, scratch, team_min, .. } = cx;
    let Fold { op, domain: input, axis, dtype, value: fold_value } = fold;
    let mut out_dims = input.dims().to_vec();
    out_dims[axis] = 1;
    let out = Shape::from(out_dims);
    let n = input.dims()[axis];
    let outputs = out.numel();
    let rows = input.dims()[axis + 1..].iter().all(|&d| d == 1);
    let wg = crate::kernel::WORKGROUP_SIZE as usize;
    let mut c = chunks(n, if rows { outputs } else { outputs.div_ceil(wg) }, rows);
    // Many chunks, and columns enough for teams to fill the device: one pass, a team per output (`ONE_PASS_TEAM`).
    let one_pass = !rows && c >= ONE_PASS_CHUNKS && outputs * ONE_PASS_TEAM as usize / wg >= ONE_PASS_GROUPS;
    if one_pass {
        c = 1;
    }

    // The fold, over the input's shape.
    let mut l = Lowerer::new(graph, fusion, &grp.members, kernel(Kind::Elementwise, &input, outputs), slot);
    l.need_coords();
    let chunks_at = l.param(c as u32);
    let team_at = l.param(if one_pass { ONE_PASS_TEAM } else { team(n.div_ceil(c), team_min) });
    let value = folded_value(&mut l, &input, op, dtype, fold_value)?;
    let info = Reduce {
        op,
        axis,
        rows,
        prologue: l.k.body.len(),
        value,
        chunks_at,
        team_at,
        column_team: one_pass,
        partial: c > 1,
    };
    l.k.fused_ops += 1;
    if c == 1 {
        l.k.kind = Kind::Reduce(info);
        l.epilogue(&grp.members, &out, Some(grp.members[0]), written)?;
        if rows {
            l.vectorize_fold(info.prologue, axis);
        }
        return Ok(vec![l.k]);
    }

    // Two stages: partial folds laid out as the input with the axis at `c`, then their fold.
    let mut partial_dims = out.dims().to_vec();
    partial_dims[axis] = c;
    let partial_shape = Shape::from(partial_dims);
    // Partial folds keep the accumulator's lanes (f32 for f16 and bf16), rounded only once, at the end.
    let lanes = l.k.types[value].lanes();
    let partials = scratch(partial_shape.numel() as u64 * 4);
    l.k.kind = Kind::Reduce(info);
    l.k.outputs.push((partials, value));
    l.k.out_types.push(lanes);
    if rows {
        l.vectorize_fold(info.prologue, axis);
    }
    let first = l.k;

    let mut l = Lowerer::new(graph, fusion, &grp.members, kernel(Kind::Elementwise, &partial_shape, outputs), slot);
    l.need_coords();
    let chunks_at = l.param(1);
    // Many partials per column: a team per output, each thread a share of them (see `COLUMN_TEAM`).
    let column_team = !rows && c >= COLUMN_TEAM_PARTIALS;
    let team_at = l.param(if column_team { COLUMN_TEAM } else { team(c, team_min) });
    let input = l.input(partials, lanes);
    let value = l.push(Instr::Load { input, view: None, access: Access::Own }, lanes);
    let info = Reduce { op, axis, rows, prologue: 1, value, chunks_at, team_at, column_team, partial: false };
    l.k.kind = Kind::Reduce(info);
    l.epilogue(&grp.members, &out, Some(grp.members[0]), written)?;
    Ok(vec![first, l.k])
}

/// Threads that fold one output's partials of a column fold, where there are at least [`COLUMN_TEAM_PARTIALS`]: a
/// thread alone walks them as a chain of round trips to memory (256 partials, nanoGPT's bias gradients), a team of 8
/// each walks an eighth, neighbouring threads still reading neighbouring columns. `train_gpt --nanogpt` ran slightly
/// faster per step for it; the column sums of `bench reductions` and the GEMV moved within their noise. (Laying each
/// output's partials out adjacent and folding them as rows was slower for `x.sum(0)` of `[16384, 384]`; figures:
/// docs/notes/source-measurements.md, `src/schedule/reduce.rs`.)
const COLUMN_TEAM: u32 = 8;
const COLUMN_TEAM_PARTIALS: usize = 32;

/// A column fold cut into at least `ONE_PASS_CHUNKS` chunks (a long axis, few columns: nanoGPT's bias gradients over
/// 16384 tokens, 170-204 chunks) whose columns make at least `ONE_PASS_GROUPS` workgroups with a team of
/// `ONE_PASS_TEAM` threads each runs in one pass: each team walks its column, each thread every 32nd element, 8
/// neighbouring columns a workgroup (32-byte reads), and meets in a tree; no partials, no second kernel.
/// `train_gpt --nanogpt` kept its step time in fewer dispatches, both with teams wherever they made 128 workgroups and
/// with this rule, which takes the `[16384, 1152]` and `[16384, 1536]` bias gradients. Where the chunks are fewer the
/// two passes stay: the GEMV `[1, 4096] x [4096, 4096]` (64 chunks) and `x.sum(0)` of `[4096, 4096]` ran slower in one
/// pass (figures: docs/notes/source-measurements.md, `src/schedule/reduce.rs`).
const ONE_PASS_CHUNKS: usize = 128;
const ONE_PASS_GROUPS: usize = 128;
const ONE_PASS_TEAM: u32 = 32;

/// The element a fold folds (of type `dt`): its input evaluated per element, or, over an empty axis, never
/// evaluated (the fold is its identity), so an empty input is not lowered at all.
fn folded_value(
    l: &mut Lowerer,
    domain: &Shape,
    op: crate::op::ReduceOp,
    dt: DType,
    value: &mut dyn FnMut(&mut Lowerer) -> Result<usize, NodeId>,
) -> Result<usize, NodeId> {
    if domain.numel() == 0 {
        return Ok(l.constant(op.identity_lane(dt), dt));
    }
    value(l)
}

/// Lowers a rows group: its folds and maps, in order, over the rows of the first fold's input.
pub(super) fn lower_rows(cx: GroupCtx) -> Result<Kernel, NodeId> {
    let GroupCtx { graph, fusion, grp, written, slot, .. } = cx;
    let NodeOp::Reduce(_, x, axis) = graph.node(grp.members[0]).op else {
        unreachable!("a rows group starts with a fold")
    };
    let domain = graph.node(x).shape.clone();
    let rows = graph.node(grp.members[0]).shape.numel();
    let mut l = Lowerer::new(graph, fusion, &grp.members, kernel(Kind::Elementwise, &domain, rows), slot);
    l.need_coords();
    let team_at = l.param(team(domain.dims()[axis], ROWS_TEAM_MIN));
    l.k.kind = Kind::Rows { axis, team_at, online: None };
    l.row_axis = Some(axis);
    // The member each phase computes, to find logsumexp's pair of folds.
    let mut phase_of: Vec<NodeId> = Vec::new();
    let mut online = None;
    for &member in &grp.members {
        // Each phase loops over the row on its own: nothing computed in one is reused in another.
        l.set_domain(&domain, None);
        l.current = Some(member);
        let lo = l.k.body.len();
        if let NodeOp::Reduce(op, input, _) = graph.node(member).op {
            let dt = graph.node(input).dtype;
            let value = folded_value(&mut l, &domain, op, dt, &mut |l: &mut Lowerer| l.root(input, &domain))?;
            let output = l.output(member, value, written);
            if let Some(&prev) = phase_of.last() {
                if online.is_none() && logsumexp_pair(graph, prev, member) {
                    online = Some(phase_of.len() - 1);
                }
            }
            l.k.phases.push(Phase::Fold { op, body: lo..l.k.body.len(), value, output });
            phase_of.push(member);
            let phase = l.folds.len();
            l.folds.insert(member, phase);
            l.k.fused_ops += 1;
        } else {
            let value = l.root(member, &domain)?;
            let outputs = l.output(member, value, written).into_iter().collect();
            l.k.phases.push(Phase::Map { body: lo..l.k.body.len(), outputs });
            phase_of.push(member);
        }
    }
    l.k.kind = Kind::Rows { axis, team_at, online };
    // Every phase reads the row 4 elements at a time where the row and its reads allow.
    let len = l.k.body.len();
    l.vectorize_fold(len, axis);
    Ok(l.k)
}

/// Whether fold `sum` folds `exp(x - clamp(max, f32::MIN, f32::MAX))` where fold `max` is the maximum of the same
/// f32 `x` along the same axis: the two folds of `Tensor::logsumexp`, which a GPU computes in one pass
/// ([`Kind::Rows`]'s `online`).
fn logsumexp_pair(graph: &Graph, max: NodeId, sum: NodeId) -> bool {
    let bare = |id: NodeId| super::fuse::view_source(graph, id);
    let constant = |id: NodeId, v: f32| matches!(graph.node(bare(id)).op, NodeOp::Const(bits) if bits == v.to_bits());
    let (NodeOp::Reduce(ReduceOp::Max, x, axis), NodeOp::Reduce(ReduceOp::Sum, e, axis2)) =
        (&graph.node(max).op, &graph.node(sum).op)
    else {
        return false;
    };
    if axis != axis2 || graph.node(*x).dtype != DType::F32 {
        return false;
    }
    let NodeOp::Unary(UnaryOp::Exp, d) = graph.node(*e).op else { return false };
    let NodeOp::Binary(BinaryOp::Sub, x2, c) = graph.node(d).op else { return false };
    let NodeOp::Binary(BinaryOp::Min, c1, hi) = graph.node(bare(c)).op else { return false };
    let NodeOp::Binary(BinaryOp::Max, m, lo) = graph.node(bare(c1)).op else { return false };
    x2 == *x && bare(m) == max && constant(lo, f32::MIN) && constant(hi, f32::MAX)
}
