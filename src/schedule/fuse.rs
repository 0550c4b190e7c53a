//! Fusion: decides which nodes get a buffer, groups them into kernels and lowers each group to the kernel IR.
//!
//! Rule: a node is *materialized* (written to memory) only when it is a requested output, when fusion is off, or
//! when inlining it would make a kernel bind more buffers than the adapter allows. Everything else is inlined into
//! its consumers' kernels, evaluated at the consumer's index (broadcasting composes, so a node's view inside a kernel
//! depends only on its own shape and the kernel's). Materialized nodes of one shape share a kernel when no
//! dependency runs through a later kernel, so shared subexpressions are computed once and each input read once.
//! A future reduction or matmul node is materialized the same way and simply never joins an elementwise group.

use super::kernel::{Instr, Kernel};
use crate::graph::{Graph, NodeId, Op};
use crate::shape::Shape;
use smallvec::SmallVec;
use std::collections::{HashMap, HashSet};

/// Leaves whose buffers a node's inlined expression reads; kept at most as long as the binding limit.
type LeafSet = SmallVec<[NodeId; 8]>;

/// How far back a node looks for a kernel of its shape to join.
const MERGE_WINDOW: usize = 16;

/// The knobs of a schedule.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Fuse elementwise chains (`false` is `LAZOR_NOFUSE=1`: one kernel per op).
    pub fuse: bool,
    /// Storage buffers one kernel may bind, parameters included.
    pub max_bindings: usize,
    /// Ops one kernel may compute (`LAZOR_MAX_FUSED_OPS`): driver compile time grows faster than linearly with
    /// kernel length, while past ~100 ops per element a kernel is compute-bound and a split costs nothing.
    pub max_ops: usize,
}

/// Groups of materialized nodes, each one future kernel.
struct Group {
    shape: Shape,
    members: Vec<NodeId>,
    /// Buffers the group reads (leaves and other groups' members).
    inputs: LeafSet,
    /// Ops the group computes.
    ops: usize,
}

/// The materialization decisions for one realize.
pub(super) struct Fusion {
    pub materialized: HashSet<NodeId>,
    /// For every compute node: the buffers its inlined expression reads and how many ops it computes.
    pub inlined: HashMap<NodeId, Inlined>,
}

/// What evaluating a node inline costs a kernel.
#[derive(Clone, Default)]
pub(super) struct Inlined {
    pub leaves: LeafSet,
    /// Ops computed, counting a shared subexpression once per use (an upper bound).
    pub ops: usize,
}

/// Whether `id` reads from a buffer when used as an operand (it is data, realized, or materialized).
fn is_buffer(graph: &Graph, fusion: &HashSet<NodeId>, id: NodeId) -> bool {
    matches!(graph.node(id).op, Op::Data(_) | Op::Buffer) || fusion.contains(&id)
}

/// Decides which nodes of `order` are materialized.
pub(super) fn materialize(graph: &Graph, order: &[NodeId], outputs: &HashSet<NodeId>, opts: &Options) -> Fusion {
    let mut materialized = HashSet::new();
    for &id in order {
        let node = graph.node(id);
        let wants = match node.op {
            Op::Unary(..) | Op::Binary(..) => !opts.fuse || outputs.contains(&id),
            Op::Const(_) => outputs.contains(&id),
            Op::Data(_) | Op::Buffer => false,
        };
        if wants && node.shape.numel() > 0 {
            materialized.insert(id);
        }
    }
    // A single-output kernel binds parameters, its output and its inputs.
    let max_inputs = opts.max_bindings.saturating_sub(2).max(2);
    let mut inlined: HashMap<NodeId, Inlined> = HashMap::new();
    for &id in order {
        let node = graph.node(id);
        if !node.op.is_compute() {
            continue;
        }
        let inputs = node.op.inputs();
        loop {
            let mut this = Inlined { leaves: LeafSet::new(), ops: 1 };
            for &i in &inputs {
                if is_buffer(graph, &materialized, i) {
                    if !this.leaves.contains(&i) {
                        this.leaves.push(i);
                    }
                } else if let Some(inner) = inlined.get(&i) {
                    this.ops += inner.ops;
                    for &leaf in &inner.leaves {
                        if !this.leaves.contains(&leaf) {
                            this.leaves.push(leaf);
                        }
                    }
                }
            }
            if this.leaves.len() <= max_inputs && this.ops <= opts.max_ops.max(1) {
                inlined.insert(id, this);
                break;
            }
            // Too many buffers or ops: give the input costing the most a buffer of its own.
            let cost = |i: &NodeId| inlined.get(i).map_or((0, 0), |c| (c.leaves.len(), c.ops));
            let widest = inputs
                .iter()
                .copied()
                .filter(|i| !is_buffer(graph, &materialized, *i) && graph.node(*i).op.is_compute())
                .max_by_key(|i| {
                    let (leaves, ops) = cost(i);
                    if this.leaves.len() > max_inputs {
                        (leaves, ops)
                    } else {
                        (ops, leaves)
                    }
                })
                .expect("a node of two buffer operands always fits");
            materialized.insert(widest);
        }
    }
    Fusion { materialized, inlined }
}

/// Assigns materialized nodes (in topological order) to kernels.
fn group(graph: &Graph, order: &[NodeId], fusion: &Fusion, opts: &Options) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let mut group_of: HashMap<NodeId, usize> = HashMap::new();
    for &id in order.iter().filter(|id| fusion.materialized.contains(id)) {
        let shape = &graph.node(id).shape;
        let Inlined { leaves: deps, ops } = fusion.inlined.get(&id).cloned().unwrap_or_default();
        let fits = |g: usize, grp: &Group| -> bool {
            if grp.shape != *shape {
                return false;
            }
            // Every materialized dependency must come from this group or an earlier one, or the kernels would
            // need each other.
            if deps.iter().any(|d| group_of.get(d).is_some_and(|&dg| dg > g)) {
                return false;
            }
            let mut inputs = grp.inputs.clone();
            for d in deps.iter().filter(|d| group_of.get(d) != Some(&g)) {
                if !inputs.contains(d) {
                    inputs.push(*d);
                }
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
            groups.push(Group { shape: shape.clone(), members: Vec::new(), inputs: LeafSet::new(), ops: 0 });
            groups.len() - 1
        });
        for d in deps.iter().filter(|d| group_of.get(d) != Some(&g)) {
            if !groups[g].inputs.contains(d) {
                groups[g].inputs.push(*d);
            }
        }
        groups[g].members.push(id);
        groups[g].ops += ops;
        group_of.insert(id, g);
    }
    groups
}

/// Lowers one group to the kernel IR. `written` says which members leave the kernel.
fn lower(graph: &Graph, fusion: &Fusion, grp: &Group, written: &dyn Fn(NodeId) -> bool) -> Kernel {
    let mut k = Kernel {
        shape: grp.shape.clone(),
        inputs: Vec::new(),
        outputs: Vec::new(),
        body: Vec::new(),
        views: Vec::new(),
        scalars: Vec::new(),
        fused_ops: 0,
    };
    let members: HashSet<NodeId> = grp.members.iter().copied().collect();
    let numel = grp.shape.numel();
    let mut value: HashMap<NodeId, usize> = HashMap::new();
    for &member in &grp.members {
        // Iterative post-order walk of the member's inlined expression.
        let mut stack = vec![(member, false)];
        while let Some((id, ready)) = stack.pop() {
            if value.contains_key(&id) {
                continue;
            }
            let node = graph.node(id);
            let is_load = id != member && !members.contains(&id) && is_buffer(graph, &fusion.materialized, id);
            let instr = if is_load {
                let input = k.inputs.iter().position(|&i| i == id).unwrap_or_else(|| {
                    k.inputs.push(id);
                    k.inputs.len() - 1
                });
                let view = (node.shape.numel() != numel).then(|| {
                    let strides = node.shape.broadcast_strides(&grp.shape);
                    k.views.iter().position(|v| *v == strides).unwrap_or_else(|| {
                        k.views.push(strides);
                        k.views.len() - 1
                    })
                });
                Instr::Load { input, view }
            } else {
                match node.op {
                    Op::Const(c) => {
                        k.scalars.push(c);
                        Instr::Scalar(k.scalars.len() - 1)
                    }
                    Op::Unary(op, a) if ready => Instr::Unary(op, value[&a]),
                    Op::Binary(op, a, b) if ready => Instr::Binary(op, value[&a], value[&b]),
                    Op::Unary(..) | Op::Binary(..) => {
                        stack.push((id, true));
                        // Reversed, so the first operand is evaluated (and numbered) first.
                        for input in node.op.inputs().into_iter().rev() {
                            if !value.contains_key(&input) {
                                stack.push((input, false));
                            }
                        }
                        continue;
                    }
                    Op::Data(_) | Op::Buffer => unreachable!("leaves are loads"),
                }
            };
            if matches!(instr, Instr::Unary(..) | Instr::Binary(..)) {
                k.fused_ops += 1;
            }
            k.body.push(instr);
            value.insert(id, k.body.len() - 1);
        }
        if written(member) {
            k.outputs.push((member, value[&member]));
        }
    }
    k
}

/// Groups the materialized nodes into kernels and lowers them. Returns the kernels in execution order.
pub(super) fn kernels(
    graph: &Graph,
    order: &[NodeId],
    outputs: &HashSet<NodeId>,
    fusion: &Fusion,
    opts: &Options,
) -> Vec<Kernel> {
    let groups = group(graph, order, fusion, opts);
    // Members read by another group must be written even when nobody asked for them.
    let mut read_elsewhere: HashSet<NodeId> = HashSet::new();
    for grp in &groups {
        for &i in &grp.inputs {
            read_elsewhere.insert(i);
        }
    }
    let written = |id: NodeId| outputs.contains(&id) || read_elsewhere.contains(&id);
    groups.iter().map(|g| lower(graph, fusion, g, &written)).collect()
}
