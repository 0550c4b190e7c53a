//! Fusion: decides which nodes get a buffer and groups those into kernels.
//!
//! Rule: a node is *materialized* (written to memory) only when it is a requested output, when fusion is off and
//! it is an op, when it must be contiguous, when a view of it cannot be expressed as one stride vector (lowering
//! reports those), or when inlining it would make a kernel bind more buffers or compute more ops than allowed.
//! Everything else, views and concatenations included, is inlined into its consumers' kernels and evaluated at the
//! consumer's index. Materialized nodes of one shape share a kernel when no dependency runs through a later kernel
//! and none is read through a view (a kernel cannot read what its own other threads write).

use crate::graph::{Graph, NodeId, NodeOp};
use crate::hash::{FastMap, FastSet};
use crate::shape::Shape;
use crate::view::View;
use smallvec::SmallVec;

/// Leaves whose buffers a node's inlined expression reads; kept at most as long as the binding limit.
pub(super) type LeafSet = SmallVec<[NodeId; 8]>;

/// Most ops (and most buffers) an operand's expression may have and still run inside a matmul's loads: a scale, a
/// unary op, a broadcast bias. Anything larger is stored first, as re-evaluating it per tile load would cost more
/// than one pass over it.
const MAX_PROLOGUE_OPS: usize = 2;

/// How far back a node looks for a kernel of its shape to join.
const MERGE_WINDOW: usize = 16;

/// The knobs of a schedule.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Fuse elementwise chains (`false` is `LAZOR_NOFUSE=1`: one kernel per op).
    pub fuse: bool,
    /// Run independent kernels in shared dispatches (`LAZOR_GROUP=1`, `dispatch.rs`).
    pub group: bool,
    /// Storage buffers one kernel may bind, parameters included.
    pub max_bindings: usize,
    /// Ops one kernel may compute (`LAZOR_MAX_FUSED_OPS`): driver compile time grows faster than linearly with
    /// kernel length, while past ~100 ops per element a kernel is compute-bound and a split costs nothing.
    pub max_ops: usize,
    /// The blocking every tiled matmul uses instead of the shape table (`LAZOR_MATMUL_TILE`, a tuning knob read
    /// by the device, not here: the scheduler reads no environment of its own).
    pub matmul_tile: Option<crate::kernel::MatmulTile>,
    /// The blockings tiled matmuls choose from by shape: the backend's, for its adapter.
    pub matmul_tiles: crate::kernel::MatmulTiles,
    /// The fewest threads that fold one row of a reduce kernel (32 or 64): the backend's, as wide as its widest
    /// subgroup. Rows kernels go below it (`reduce.rs`, `ROWS_TEAM_MIN`).
    pub row_team_min: usize,
    /// Bytes of workgroup memory one dispatch may declare: the backend's limit, which kernels joining one
    /// dispatch share (`dispatch.rs`).
    pub workgroup_bytes: u32,
    /// Whether half products run on tensor cores, which fetch their f16 and bf16 operands from memory 16 bytes at a
    /// time: a cast to a half type that a product reads is then stored (by the kernel computing its input), not
    /// recomputed in the product's tile loads, which would fetch one element at a time (autocast's `linear`).
    pub half_operands: bool,
}

impl Options {
    /// Fusion on, 8 bindings, 256 ops per kernel, the tuned matmul table: the options unit tests plan with.
    #[cfg(test)]
    pub const TEST: Options = Options {
        fuse: true,
        group: false,
        max_bindings: 8,
        max_ops: 256,
        matmul_tile: None,
        matmul_tiles: crate::kernel::MatmulTiles::TUNED,
        row_team_min: 64,
        workgroup_bytes: 16384,
        half_operands: false,
    };
}

/// A group of materialized nodes: one future kernel.
pub(super) struct Group {
    pub shape: Shape,
    /// The fold or matrix product a group starts with; the other members are its epilogue, or, in a rows group,
    /// further folds and maps over the same rows.
    pub head: Option<NodeId>,
    /// A rows group: folds over the rows of one domain and maps over them, the later reading the earlier.
    pub rows: bool,
    pub members: Vec<NodeId>,
    /// Buffers the group reads (leaves and other groups' members).
    pub inputs: LeafSet,
    /// Ops the group computes.
    pub ops: usize,
}

/// The materialization decisions for one realize.
pub(super) struct Fusion {
    pub materialized: FastSet<NodeId>,
    /// For every compute node: the buffers its inlined expression reads and how many ops it computes.
    pub inlined: FastMap<NodeId, Inlined>,
    /// Each node's place in the realize's order: how kernels name the constants they hold in parameters
    /// ([`crate::kernel::Kernel::consts`]), so the kernel IR names no graph node.
    pub place: FastMap<NodeId, u32>,
}

/// What evaluating a node inline costs a kernel.
#[derive(Clone, Default)]
pub(super) struct Inlined {
    pub leaves: LeafSet,
    /// The leaves read through a view rather than at the node's own index.
    pub strided: LeafSet,
    /// Ops computed, counting a shared subexpression once per use (an upper bound).
    pub ops: usize,
}

impl Fusion {
    /// Whether `id` reads from a buffer when used as an operand (it is data, realized, or materialized).
    pub fn is_buffer(&self, graph: &Graph, id: NodeId) -> bool {
        matches!(graph.node(id).op, NodeOp::Data(_) | NodeOp::Buffer) || self.materialized.contains(&id)
    }
}

/// The extents other than 1: shapes equal under this read the same elements in the same order.
fn squeezed(shape: &Shape) -> SmallVec<[usize; 4]> {
    shape.dims().iter().copied().filter(|&d| d != 1).collect()
}

fn add(set: &mut LeafSet, id: NodeId) {
    if !set.contains(&id) {
        set.push(id);
    }
}

/// Decides which nodes of `order` are materialized; `forced` are nodes lowering found must be.
pub(super) fn materialize(
    graph: &Graph,
    order: &[NodeId],
    outputs: &FastSet<NodeId>,
    forced: &FastSet<NodeId>,
    opts: &Options,
) -> Fusion {
    let place = order.iter().enumerate().map(|(i, &id)| (id, i as u32)).collect();
    let mut fusion = Fusion { materialized: FastSet::default(), inlined: FastMap::default(), place };
    for &id in order {
        let node = graph.node(id);
        let wants = match node.op {
            NodeOp::Unary(..) | NodeOp::Binary(..) | NodeOp::Cast(_) | NodeOp::Where(..) | NodeOp::Gather(..) => {
                !opts.fuse || outputs.contains(&id)
            }
            NodeOp::Contiguous(_) | NodeOp::Reduce(..) | NodeOp::Matmul(..) | NodeOp::Write(..) => true,
            // Random numbers are recomputed by every reader, like an arange: storing them would cost a buffer
            // and a pass over memory, and dropout's backward regenerates its mask instead of reading it.
            NodeOp::Const(_) | NodeOp::Arange | NodeOp::Random(..) | NodeOp::View(..) | NodeOp::Cat(..) => {
                outputs.contains(&id)
            }
            NodeOp::Data(_) | NodeOp::Buffer => false,
        };
        // A constant or an arange lowering asks for too (a slice write's value, read at run-time places).
        let forced_here = forced.contains(&id) && !matches!(node.op, NodeOp::Data(_) | NodeOp::Buffer);
        if (wants || forced_here) && node.shape.numel() > 0 {
            fusion.materialized.insert(id);
        }
        // A gather reads its source at data-dependent places: from a buffer, which no expression can stand in for.
        if let NodeOp::Gather(src, ..) = node.op {
            let src = gathered(graph, src);
            let source = graph.node(src);
            if !matches!(source.op, NodeOp::Data(_) | NodeOp::Buffer) && source.shape.numel() > 0 {
                fusion.materialized.insert(src);
            }
        }
    }
    // A single-output kernel binds parameters, its output and its inputs.
    let max_inputs = opts.max_bindings.saturating_sub(2).max(2);
    let readers = readers(graph, order);
    // Whether a node was stored after costs that count it as inlined were taken (see the end).
    let mut stored_late = false;
    for &id in order {
        let node = graph.node(id);
        if !node.op.is_compute() {
            continue;
        }
        let inputs = node.op.inputs();
        loop {
            let this = inlined_cost(graph, &fusion, id);
            // A matmul runs its operands' expressions on every load of a tile: only cheap ones stay inlined, and
            // none over another product or fold (a layer's bias and activation read by the next layer, or by a
            // weight gradient through a transpose): the kernel producing that value stores it in its epilogue,
            // once. Stored at the view's source, so a transposed read stays a view.
            let over_product = |i: &NodeId| -> Option<NodeId> {
                let src = readable_source(graph, &fusion, *i);
                let cost = fusion.inlined.get(&src)?;
                let reads_product =
                    cost.leaves.iter().any(|l| matches!(graph.node(*l).op, NodeOp::Matmul(..) | NodeOp::Reduce(..)));
                (cost.ops > 0 && reads_product && !fusion.is_buffer(graph, src) && graph.node(src).shape.numel() > 0)
                    .then_some(src)
            };
            let heavy = match node.op {
                // An empty operand (k = 0) is never read: the product is zeros, and nothing empty is stored.
                NodeOp::Matmul(..) => inputs
                    .iter()
                    .copied()
                    .find(|i| {
                        fusion
                            .inlined
                            .get(i)
                            .is_some_and(|c| c.ops > MAX_PROLOGUE_OPS || c.leaves.len() > MAX_PROLOGUE_OPS)
                            && !fusion.is_buffer(graph, *i)
                            && !fusion.is_buffer(graph, stored_for_view(graph, &fusion, *i))
                            && graph.node(*i).shape.numel() > 0
                    })
                    .map(|i| stored_for_view(graph, &fusion, i))
                    .or_else(|| inputs.iter().find_map(over_product))
                    .or_else(|| {
                        opts.half_operands.then(|| inputs.iter().find_map(|&i| half_cast(graph, &fusion, i))).flatten()
                    }),
                _ => None,
            };
            if let Some(h) = heavy {
                stored_late |= fusion.materialized.insert(h);
                // The views over it read a buffer now: their costs, taken before, are taken again.
                for &i in inputs.iter().filter(|&&i| views_reach(graph, i, h)) {
                    let mut chain = Vec::new();
                    let mut v = i;
                    while v != h {
                        chain.push(v);
                        let NodeOp::View(_, src) = graph.node(v).op else { unreachable!("views down to {h:?}") };
                        v = src;
                    }
                    for &v in chain.iter().rev() {
                        let cost = inlined_cost(graph, &fusion, v);
                        fusion.inlined.insert(v, cost);
                    }
                }
                continue;
            }
            if this.leaves.len() <= max_inputs && this.ops <= opts.max_ops.max(1) {
                // An expression several ops read that loads many buffers of its own size (a residual stream, sum
                // of every layer's output) is stored once rather than loaded again by every reader.
                let elementwise =
                    matches!(node.op, NodeOp::Unary(..) | NodeOp::Binary(..) | NodeOp::Cast(_) | NodeOp::Where(..));
                if elementwise && readers.get(&id).is_some_and(|&r| r >= 2) && node.shape.numel() > 0 {
                    let numel = node.shape.numel();
                    let full = this.leaves.iter().filter(|l| graph.node(**l).shape.numel() == numel).count();
                    if full > MAX_SHARED_READS {
                        fusion.materialized.insert(id);
                    }
                }
                fusion.inlined.insert(id, this);
                break;
            }
            // Too many buffers or ops: give the input costing the most a buffer of its own.
            let cost = |i: &NodeId| fusion.inlined.get(i).map_or((0, 0), |c| (c.leaves.len(), c.ops));
            let widest = inputs
                .iter()
                .copied()
                .filter(|i| {
                    !fusion.is_buffer(graph, *i) && graph.node(*i).op.is_compute() && graph.node(*i).shape.numel() > 0
                })
                .max_by_key(|i| {
                    let (leaves, ops) = cost(i);
                    if this.leaves.len() > max_inputs {
                        (leaves, ops)
                    } else {
                        (ops, leaves)
                    }
                });
            match widest {
                Some(w) => {
                    stored_late |= fusion.materialized.insert(w);
                }
                // Every input is already a buffer (a concatenation of more parts than a kernel binds): keep it.
                None => {
                    fusion.inlined.insert(id, this);
                    break;
                }
            }
        }
    }
    // A node stored above, after some of its consumers' costs were taken, is a leaf of theirs now: the costs are
    // taken again over the final set, as grouping reads which buffers each node's expression loads. Most plans
    // store nothing late and skip this.
    if stored_late {
        for &id in order.iter().filter(|&&id| graph.node(id).op.is_compute()) {
            let this = inlined_cost(graph, &fusion, id);
            fusion.inlined.insert(id, this);
        }
    }
    fusion
}

/// The node whose buffer a gather of `src` reads: `src`, or the source under reshapes that keep its elements in
/// order, whose buffer is laid out as `src` would be. Storing the reshape instead copied a stored node: nanoGPT's
/// token embedding gradient gathers the residual stream's gradient `[64, 256, 384]` read as `[16384, 384]`, one
/// copy a step.
pub(super) fn gathered(graph: &Graph, mut src: NodeId) -> NodeId {
    while let NodeOp::View(ref v, under) = graph.node(src).op {
        if !v.is_contiguous() || v.shape.numel() != graph.node(under).shape.numel() {
            break;
        }
        src = under;
    }
    src
}

/// Buffers of its own size an expression read by more than one op may load and still be inlined into each: past this,
/// it is stored once and each reader loads one buffer instead. A transformer's residual stream is such an expression:
/// inlined, every layer norm of nanoGPT's step (forward and backward) loaded each earlier layer's output again. With 2,
/// `train_gpt --nanogpt` ran markedly faster per step (1, which stored two more values, was no faster), the dispatches
/// unchanged (figures: docs/notes/source-measurements.md, `src/schedule/fuse.rs`).
const MAX_SHARED_READS: usize = 2;

/// How many ops read each node, directly or through views (an op reading it twice, as `x * x` does, counts once).
fn readers(graph: &Graph, order: &[NodeId]) -> FastMap<NodeId, usize> {
    let mut readers: FastMap<NodeId, usize> = FastMap::default();
    for &id in order {
        if matches!(graph.node(id).op, NodeOp::View(..)) {
            continue;
        }
        let mut read: SmallVec<[NodeId; 4]> =
            graph.node(id).op.inputs().iter().map(|&i| view_source(graph, i)).collect();
        read.sort_unstable();
        read.dedup();
        for i in read {
            *readers.entry(i).or_default() += 1;
        }
    }
    readers
}

/// What to store so that a product can read `id` from memory: the source under its views where that is no larger
/// (a reshape, a transpose or a broadcast of it: the product then reads the source through the view, and so does
/// anything else that reads it, as the weight gradient reads a layer's input transposed), else `id` itself (a
/// narrow part of a larger expression); where the views do not compose, the view where they stop
/// ([`readable_source`]). Storing the view of a stored-anyway source was a copy: 5 per layer of
/// nanoGPT's training step, `[16384, 384]` each.
fn stored_for_view(graph: &Graph, fusion: &Fusion, id: NodeId) -> NodeId {
    let src = readable_source(graph, fusion, id);
    if matches!(graph.node(src).op, NodeOp::View(..)) || graph.node(src).shape.numel() <= graph.node(id).shape.numel() {
        src
    } else {
        id
    }
}

/// The cast to f16 or bf16 a product's operand `id` reads through its views, where it is not stored yet
/// ([`Options::half_operands`]).
fn half_cast(graph: &Graph, fusion: &Fusion, id: NodeId) -> Option<NodeId> {
    let src = stored_for_view(graph, fusion, id);
    let node = graph.node(src);
    let half = matches!(node.dtype, crate::dtype::DType::F16 | crate::dtype::DType::BF16);
    (half && matches!(node.op, NodeOp::Cast(_)) && !fusion.is_buffer(graph, src) && node.shape.numel() > 0)
        .then_some(src)
}

/// What a read of `id` through its views reaches in one composed view: the first stored node under the views or
/// their source, or, where the views do not compose into one stride vector (a reshape of a transpose: nanoGPT's
/// attention gradient `[3, B, H, T, D]` read as `[B * T, 3 * H * D]` by the products), the view at which they stop
/// composing, which lowering would have to store anyway. Stored there, that copy computes the expression under it
/// (the three heads' gradients concatenated) instead of reading it from a buffer of its own: one kernel and one
/// pass over memory fewer.
fn readable_source(graph: &Graph, fusion: &Fusion, id: NodeId) -> NodeId {
    let mut at = id;
    let mut view = View::contiguous(&graph.node(id).shape);
    while let NodeOp::View(ref v, src) = graph.node(at).op {
        if at != id && fusion.is_buffer(graph, at) {
            return at;
        }
        match view.compose(v) {
            Some(composed) => view = composed,
            None => return at,
        }
        at = src;
    }
    at
}

/// Whether `id` is `to` or a chain of views over it.
fn views_reach(graph: &Graph, mut id: NodeId, to: NodeId) -> bool {
    loop {
        if id == to {
            return true;
        }
        let NodeOp::View(_, src) = graph.node(id).op else { return false };
        id = src;
    }
}

/// The node under `id`'s views: what a view reads.
pub(super) fn view_source(graph: &Graph, mut id: NodeId) -> NodeId {
    while let NodeOp::View(_, src) = graph.node(id).op {
        id = src;
    }
    id
}

/// What evaluating `id` inline costs, given the nodes stored so far and the costs of its inputs.
fn inlined_cost(graph: &Graph, fusion: &Fusion, id: NodeId) -> Inlined {
    let node = graph.node(id);
    // Views and copies compute nothing; a concatenation costs a comparison per part.
    let own_ops = match node.op {
        NodeOp::Unary(..)
        | NodeOp::Binary(..)
        | NodeOp::Cast(_)
        | NodeOp::Where(..)
        | NodeOp::Reduce(..)
        | NodeOp::Matmul(..) => 1,
        NodeOp::Random(..) | NodeOp::Gather(..) => 1,
        NodeOp::Cat(ref parts, _) => parts.len(),
        _ => 0,
    };
    let mut this = Inlined { ops: own_ops, ..Default::default() };
    for i in node.op.inputs() {
        // Read at the node's own index only when the input has the node's shape and is not viewed.
        let own_index = match &node.op {
            NodeOp::View(v, _) => v.is_contiguous(),
            NodeOp::Cat(..) | NodeOp::Reduce(..) | NodeOp::Matmul(..) => false,
            NodeOp::Gather(src, ..) if i == *src => false,
            _ => graph.node(i).shape == node.shape,
        };
        if fusion.is_buffer(graph, i) {
            add(&mut this.leaves, i);
            if !own_index {
                add(&mut this.strided, i);
            }
        } else if let Some(inner) = fusion.inlined.get(&i) {
            this.ops += inner.ops;
            for &leaf in &inner.leaves {
                add(&mut this.leaves, leaf);
                if !own_index {
                    add(&mut this.strided, leaf);
                }
            }
            for &leaf in &inner.strided {
                add(&mut this.strided, leaf);
            }
        }
    }
    this
}

/// The domain and axis a fold runs over, when a workgroup can own each of its rows: the folded elements are
/// adjacent (every later axis has extent 1) and one pass per row keeps the device busy (no two-stage split).
fn row_fold(graph: &Graph, id: NodeId) -> Option<(&Shape, usize)> {
    match graph.node(id).op {
        NodeOp::Reduce(_, x, axis) => {
            let domain = &graph.node(x).shape;
            let adjacent = domain.dims()[axis + 1..].iter().all(|&d| d == 1);
            let rows = graph.node(id).shape.numel();
            (adjacent && super::chunks::one_pass(domain.dims()[axis], rows)).then_some((domain, axis))
        }
        _ => None,
    }
}

/// Assigns materialized nodes (in topological order) to kernels. Nodes in `apart` never join a fold's or product's
/// kernel (its rows kernel or its epilogue): lowering found that kernel could not compute them.
pub(super) fn group(
    graph: &Graph,
    order: &[NodeId],
    fusion: &Fusion,
    opts: &Options,
    apart: &FastSet<NodeId>,
) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let mut group_of: FastMap<NodeId, usize> = FastMap::default();
    for &id in order.iter().filter(|id| fusion.materialized.contains(id)) {
        let shape = &graph.node(id).shape;
        let is_head = matches!(graph.node(id).op, NodeOp::Reduce(..) | NodeOp::Matmul(..) | NodeOp::Write(..));
        let Inlined { leaves: deps, strided, ops } = fusion.inlined.get(&id).cloned().unwrap_or_default();
        let fits = |g: usize, grp: &Group| -> bool {
            // A slice write runs alone: its kernel covers the slice, not the buffer it writes.
            let write = |n: NodeId| matches!(graph.node(n).op, NodeOp::Write(..));
            if write(id) || grp.head.is_some_and(write) {
                return false;
            }
            if let Some(rows) = joins_rows(graph, g, grp, id, &deps, &group_of, apart) {
                return rows
                    && bindings_fit(grp, &deps, g, &group_of, opts.max_bindings)
                    && grp.ops + ops <= opts.max_ops;
            }
            // A member its fold's or product's kernel could not compute (a reshaped product's epilogue reading a
            // broadcast operand no view composes into the product's rows) runs in a kernel of its own.
            if grp.head.is_some() && apart.contains(&id) {
                return false;
            }
            // A fold or product starts its own kernel; its epilogue takes only members that read it, or that read
            // another member at its own index (an optimizer's new parameter from the new moments a bias
            // gradient's fold computes in its epilogue). A product's may also take a member of another shape with
            // as many elements that reads it at its own row-major index (through a reshape, below): `conv2d`'s
            // `[N, O, OH OW]` product with its bias, seen as `[N, O, OH, OW]`, then an activation.
            let reshaped_product = grp.head.is_some_and(|h| matches!(graph.node(h).op, NodeOp::Matmul(..)))
                && grp.shape.numel() == shape.numel();
            let reads_group = |grp: &Group| {
                deps.iter().any(|d| group_of.get(d) == Some(&g) && !strided.contains(d))
                    || grp.head.is_some_and(|r| deps.contains(&r))
            };
            if is_head
                || (squeezed(&grp.shape) != squeezed(shape) && !reshaped_product)
                || (grp.head.is_some() && !reads_group(grp))
            {
                return false;
            }
            // Every materialized dependency must come from an earlier kernel, or from this one when it is read at
            // the same index that computes it.
            let bad = |d: &NodeId| match group_of.get(d) {
                Some(&dg) => dg > g || (dg == g && strided.contains(d)),
                None => false,
            };
            if deps.iter().any(bad) {
                return false;
            }
            let mut inputs = grp.inputs.clone();
            for d in deps.iter().filter(|d| group_of.get(d) != Some(&g)) {
                add(&mut inputs, *d);
            }
            1 + grp.members.len() + 1 + inputs.len() <= opts.max_bindings && grp.ops + ops <= opts.max_ops
        };
        let target = if opts.fuse {
            let first = groups.len().saturating_sub(MERGE_WINDOW);
            (first..groups.len()).rev().find(|&g| fits(g, &groups[g]))
        } else {
            None
        };
        let g = target.unwrap_or_else(|| {
            let grp = Group {
                shape: shape.clone(),
                head: is_head.then_some(id),
                rows: false,
                members: Vec::new(),
                inputs: LeafSet::new(),
                ops: 0,
            };
            groups.push(grp);
            groups.len() - 1
        });
        if groups[g].head.is_some_and(|r| r != id)
            && joins_rows(graph, g, &groups[g], id, &deps, &group_of, apart) == Some(true)
        {
            groups[g].rows = true;
        }
        for d in deps.iter().filter(|d| group_of.get(d) != Some(&g)) {
            add(&mut groups[g].inputs, *d);
        }
        groups[g].members.push(id);
        groups[g].ops += ops;
        group_of.insert(id, g);
    }
    groups
}

/// Whether `id` can join reduce group `g` as part of a rows kernel: `None` when the group cannot be one (then the
/// epilogue rule applies), `Some(false)` when it could but `id` does not fit.
fn joins_rows(
    graph: &Graph,
    g: usize,
    grp: &Group,
    id: NodeId,
    deps: &LeafSet,
    group_of: &FastMap<NodeId, usize>,
    apart: &FastSet<NodeId>,
) -> Option<bool> {
    let first = grp.head?;
    let (domain, axis) = row_fold(graph, first)?;
    // An epilogue already joined: the group stays a fold with its epilogue.
    if !grp.rows && grp.members.len() > 1 {
        return None;
    }
    let node = graph.node(id);
    // A product starts its own kernel, even of the rows' shape and reading a fold of them (a gradient through
    // `x.max_keepdim(1)` and a matmul, a matrix-vector product of a fold): a rows kernel has no phase for it.
    if matches!(node.op, NodeOp::Matmul(..)) {
        return Some(false);
    }
    let same_rows = match node.op {
        NodeOp::Reduce(..) => row_fold(graph, id) == Some((domain, axis)),
        _ => squeezed(&node.shape) == squeezed(domain),
    };
    if !same_rows {
        return if grp.rows { Some(false) } else { None };
    }
    if apart.contains(&id) {
        return Some(false);
    }
    // Inside the group it may read folds only (through their broadcast along the rows), and a map must read one.
    let is_fold = |d: &NodeId| matches!(graph.node(*d).op, NodeOp::Reduce(..));
    let mut reads_fold = false;
    for d in deps {
        if let Some(&dg) = group_of.get(d) {
            if dg > g || (dg == g && !is_fold(d)) {
                return Some(false);
            }
            reads_fold |= dg == g;
        }
    }
    // A fold of the same rows reading none of the group's is a sibling: one more phase over rows already read.
    Some(reads_fold || matches!(node.op, NodeOp::Reduce(..)))
}

/// Whether the group still binds at most `max` buffers with `deps` added (outputs counted as if every member
/// were one).
fn bindings_fit(grp: &Group, deps: &LeafSet, g: usize, group_of: &FastMap<NodeId, usize>, max: usize) -> bool {
    let mut inputs = grp.inputs.clone();
    for d in deps.iter().filter(|d| group_of.get(d) != Some(&g)) {
        add(&mut inputs, *d);
    }
    1 + grp.members.len() + 1 + inputs.len() <= max
}
