//! The gradient tape: one node per tracked result, naming the rule that sends its gradient to its inputs.

use super::var::VarInner;
use crate::dtype::DType;
use crate::op::{BinaryOp, ReduceOp, UnaryOp};
use crate::shape::Shape;
use crate::tensor::Tensor;
use smallvec::SmallVec;
use std::cell::Cell;
use std::sync::{Arc, Weak};

/// A tracked tensor's place on the tape. Shared by every clone of the tensor; the tape is a DAG of these.
pub(crate) type Tape = Arc<Node>;

/// One recorded op: its rule (with the values the rule reads, untracked) and the tape nodes of its inputs, in the
/// rule's order (`None` for an input that depends on no `Var`).
pub(crate) struct Node {
    pub rule: Rule,
    pub inputs: SmallVec<[Option<Tape>; 3]>,
}

/// How an op's output gradient becomes its inputs' gradients. Saved tensors are untracked handles on the forward
/// graph: lazy values that a backward kernel reads from a buffer or recomputes, as the scheduler decides.
pub(crate) enum Rule {
    /// A `Var`: the gradient stops here. Weak, so that a `Var`'s own value does not keep the `Var` alive.
    Leaf(Weak<VarInner>),
    /// `y = op(x)`.
    Unary { op: UnaryOp, x: Tensor, y: Tensor },
    /// `y = op(a, b)`, `a` and `b` in the type the op computes in, broadcast to `y`'s shape.
    Binary { op: BinaryOp, a: Tensor, b: Tensor, y: Tensor },
    /// A conversion from `from` (float to float; other sources get no gradient).
    Cast { from: DType },
    /// `mask.where_cond(t, f)`: inputs `t` and `f`, of the given shapes.
    Where { mask: Tensor, t: Shape, f: Shape },
    /// `reshape`, `flatten`, `squeeze`, `unsqueeze` of a tensor of shape `from`.
    Reshape { from: Shape },
    /// `permute` (and `transpose`, `t`): axis `d` of the output is axis `dims[d]` of the input.
    Permute { dims: SmallVec<[usize; 4]> },
    /// `narrow(axis, start, len)` of an axis of extent `extent`.
    Narrow { axis: usize, start: usize, extent: usize },
    /// `expand` of a tensor of shape `from`.
    Expand { from: Shape },
    /// `flip` of these axes.
    Flip { axes: SmallVec<[usize; 4]> },
    /// `unfold(axis, size, step)` of an axis of extent `extent`.
    Unfold { axis: usize, size: usize, step: usize, extent: usize },
    /// `cumsum(axis)`.
    Cumsum { axis: usize },
    /// The maximum over the last `axes` axes of `x` (a pooling window), with output `y` (those axes dropped).
    WindowMax { axes: usize, x: Tensor, y: Tensor },
    /// `cat` along `axis` of parts of these extents along it.
    Cat { axis: usize, sizes: Vec<usize> },
    /// `contiguous`: the same values.
    Identity,
    /// A fold along `axis`, kept with extent 1: `y = op(x)`.
    Reduce { op: ReduceOp, axis: usize, x: Tensor, y: Tensor },
    /// The matrix product node over equal batch axes, keeping triangle `tri`.
    Matmul { a: Tensor, b: Tensor, tri: crate::op::Tri },
    /// `softmax(axis)` with output `y`.
    Softmax { axis: usize, y: Tensor },
    /// `log_softmax(axis)` with output `y`.
    LogSoftmax { axis: usize, y: Tensor },
    /// `logsumexp(axis)` of `x`, with output `y` (the axis dropped).
    LogSumExp { axis: usize, x: Tensor, y: Tensor },
    /// `clamp(min, max)` of `x`.
    Clamp { x: Tensor, min: f32, max: f32 },
    /// `dropout(p, seed)`: the mask is drawn again from the seed, not saved.
    Dropout { p: f32, seed: u64 },
    /// `gather(axis, index)` of a tensor of shape `from` (and `index_select`, through its 1-D index `line`
    /// spread into `index`).
    Gather { axis: usize, index: Tensor, line: Option<Tensor>, from: Shape },
    /// `scatter_add(axis, index, src)` (and `index_add`) of the tensor, then `src` of shape `src`.
    ScatterAdd { axis: usize, index: Tensor, src: Shape },
    /// The mean cross-entropy of `logits` `[rows, classes]` against `targets` `[rows]` (`I32`), given the rows'
    /// log-sum-exp `lse` `[rows, 1]`.
    CrossEntropy { logits: Tensor, targets: Tensor, lse: Tensor },
    /// The mean binary cross-entropy of logits `x` against targets `t` (broadcast together).
    BceWithLogits { x: Tensor, t: Tensor },
}

thread_local! {
    /// Depth of `no_grad` calls on this thread: nothing is recorded while it is above 0.
    static PAUSED: Cell<u32> = const { Cell::new(0) };
}

/// Whether ops on this thread record onto the tape.
pub(crate) fn recording() -> bool {
    PAUSED.with(|p| p.get() == 0)
}

/// Runs `f` with recording paused on this thread; restores it even when `f` panics.
pub(crate) fn paused<R>(f: impl FnOnce() -> R) -> R {
    struct Resume;
    impl Drop for Resume {
        fn drop(&mut self) {
            PAUSED.with(|p| p.set(p.get() - 1));
        }
    }
    PAUSED.with(|p| p.set(p.get() + 1));
    let _resume = Resume;
    f()
}

/// `out`, tracked when some input is, the output is a float and recording is on; `rule` saves what the backward
/// pass reads (it gets the untracked output). The one hook every differentiable op calls where it builds its node.
pub(crate) fn record(mut out: Tensor, inputs: &[&Tensor], rule: impl FnOnce(Tensor) -> Rule) -> Tensor {
    if !out.dtype.is_float() || inputs.iter().all(|t| t.tape.is_none()) || !recording() {
        out.tape = None;
        return out;
    }
    let rule = rule(out.detach());
    let inputs = inputs.iter().map(|t| t.tape.clone()).collect();
    out.tape = Some(Arc::new(Node { rule, inputs }));
    out
}

/// The tape nodes `root` depends on, each once, inputs before the nodes that read them (`root` last).
pub(crate) fn order(root: &Tape) -> Vec<Tape> {
    let mut seen = crate::hash::FastSet::default();
    let mut out = Vec::new();
    let mut stack = vec![(root.clone(), false)];
    while let Some((node, done)) = stack.pop() {
        if done {
            out.push(node);
            continue;
        }
        if !seen.insert(key(&node)) {
            continue;
        }
        stack.push((node.clone(), true));
        for input in node.inputs.iter().rev().flatten() {
            if !seen.contains(&key(input)) {
                stack.push((input.clone(), false));
            }
        }
    }
    out
}

/// A tape node's identity.
pub(crate) fn key(node: &Tape) -> usize {
    Arc::as_ptr(node) as usize
}

impl Drop for Node {
    /// Iterative, so dropping the end of a 100,000-op tracked chain does not overflow the stack.
    fn drop(&mut self) {
        let mut stack: Vec<Tape> = self.inputs.drain(..).flatten().collect();
        while let Some(node) = stack.pop() {
            if let Some(mut node) = Arc::into_inner(node) {
                stack.extend(node.inputs.drain(..).flatten());
            }
        }
    }
}
