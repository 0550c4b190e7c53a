//! The per-device expression graph: nodes in a slotmap, reference counts, and freeing what nothing needs.
//!
//! Nothing here touches wgpu: a realized node names its buffer by a [`BufferKey`] that the backend resolves.

use crate::buffer::BufferKey;
use crate::dtype::DType;
use crate::hash::FastMap;
use crate::op::{BinaryOp, ReduceOp, Tri, UnaryOp};
use crate::shape::Shape;
use crate::view::View;
use slotmap::{new_key_type, SlotMap};
use smallvec::SmallVec;

new_key_type! {
    /// A node of a device's graph.
    pub struct NodeId;
}

/// What a node computes.
#[derive(Debug)]
pub enum NodeOp {
    /// Host data not yet uploaded, as the buffer's words (see [`DType::encode`]); replaced by `Buffer` on the first
    /// realize that needs it.
    Data(Vec<u32>),
    /// One value (a lane of the node's dtype) repeated over the node's shape. Never stored: kernels read it as a
    /// parameter.
    Const(u32),
    /// `0, 1, ..., n - 1` (i32) over the node's shape `[n]`. Never stored: kernels compute it from the index they
    /// read it at.
    Arange,
    /// Random numbers over the node's shape, drawn at each element's row-major index with the key held by two
    /// scalar `U32` constants (the seed's low and high words). Never stored: kernels compute each element where they
    /// read it, and the seed, being constants, is a parameter.
    Random(crate::philox::Distribution, NodeId, NodeId),
    /// A realized value: its buffer is in `Node::buffer` (`None` only for an empty tensor).
    Buffer,
    Unary(UnaryOp, NodeId),
    Binary(BinaryOp, NodeId, NodeId),
    /// The input converted to the node's dtype (see [`DType::cast_lane`]).
    Cast(NodeId),
    /// Per element, the second input where the first (bool) is true, else the third; all broadcast.
    Where(NodeId, NodeId, NodeId),
    /// The input seen through a strided view of its row-major index space: no data moves.
    View(View, NodeId),
    /// The inputs joined along an axis; each consumer picks the right input per element.
    Cat(SmallVec<[NodeId; 4]>, usize),
    /// The input stored in its own row-major buffer (always materialized).
    Contiguous(NodeId),
    /// The input folded along one axis, which the node keeps with extent 1.
    Reduce(ReduceOp, NodeId, usize),
    /// The matrix product of `[..., m, k]` and `[..., k, n]` with equal batch axes (the API broadcasts them by
    /// views first), giving `[..., m, n]`, keeping the triangle [`Tri`] names of each batch matrix.
    Matmul(NodeId, NodeId, Tri),
    /// `src` (the first input) read along `axis` at the position the second input (an `I32` or `U32` index of the
    /// node's shape) holds, at the node's own coordinates on every other axis, as `torch.gather`; 0 where the index
    /// is outside the axis. The source is always stored, the index computed where it is read.
    Gather(NodeId, NodeId, usize),
    /// The first input (`base`) with its slice `[start, start + len)` along `axis` replaced by the second input
    /// (`value`: `base`'s shape but `len` along `axis`), `start` being the third input (an `I32` scalar) clamped to
    /// `[0, extent - len]`: `Tensor::write_at`. Always stored; into `base`'s own buffer, writing the slice alone,
    /// where `base` is a buffer that nothing else reads and dies with it (`schedule/write.rs`).
    Write(NodeId, NodeId, NodeId, usize),
}

impl NodeOp {
    /// The nodes this op reads.
    pub fn inputs(&self) -> SmallVec<[NodeId; 4]> {
        match self {
            NodeOp::Data(_) | NodeOp::Const(_) | NodeOp::Arange | NodeOp::Buffer => SmallVec::new(),
            NodeOp::Unary(_, a)
            | NodeOp::Cast(a)
            | NodeOp::View(_, a)
            | NodeOp::Contiguous(a)
            | NodeOp::Reduce(_, a, _) => {
                smallvec::smallvec![*a]
            }
            NodeOp::Where(c, a, b) => smallvec::smallvec![*c, *a, *b],
            NodeOp::Binary(_, a, b) | NodeOp::Matmul(a, b, _) | NodeOp::Random(_, a, b) | NodeOp::Gather(a, b, _) => {
                smallvec::smallvec![*a, *b]
            }
            NodeOp::Cat(parts, _) => parts.clone(),
            NodeOp::Write(base, value, start, _) => smallvec::smallvec![*base, *value, *start],
        }
    }

    /// Calls `f` on each node this op reads, in place (a `Var`'s old value moved to a node of its own).
    pub fn for_each_input_mut(&mut self, mut f: impl FnMut(&mut NodeId)) {
        match self {
            NodeOp::Data(_) | NodeOp::Const(_) | NodeOp::Arange | NodeOp::Buffer => {}
            NodeOp::Unary(_, a)
            | NodeOp::Cast(a)
            | NodeOp::View(_, a)
            | NodeOp::Contiguous(a)
            | NodeOp::Reduce(_, a, _) => f(a),
            NodeOp::Where(c, a, b) => {
                f(c);
                f(a);
                f(b);
            }
            NodeOp::Binary(_, a, b) | NodeOp::Matmul(a, b, _) | NodeOp::Random(_, a, b) | NodeOp::Gather(a, b, _) => {
                f(a);
                f(b);
            }
            NodeOp::Cat(parts, _) => parts.iter_mut().for_each(f),
            NodeOp::Write(base, value, start, _) => {
                f(base);
                f(value);
                f(start);
            }
        }
    }

    /// Appends what the op is, apart from which nodes it reads, as words: its variant and every operand that is not
    /// a node (the op of a `Unary`, a view's extents, strides and offset, an axis), except a constant's value. Two
    /// ops with equal words and equal inputs are scheduled alike: the plan cache keys on it, and writes constants'
    /// values into the parameters they fill (`Kernel::consts`).
    pub fn signature(&self, out: &mut Vec<u64>) {
        let tag = |n: u64, out: &mut Vec<u64>| out.push(n << 56);
        match self {
            NodeOp::Data(_) => tag(0, out),
            NodeOp::Const(_) => tag(1, out),
            NodeOp::Arange => tag(2, out),
            NodeOp::Buffer => tag(3, out),
            NodeOp::Unary(op, _) => out.push(4 << 56 | *op as u64),
            NodeOp::Binary(op, ..) => out.push(5 << 56 | *op as u64),
            NodeOp::Cast(_) => tag(6, out),
            NodeOp::Where(..) => tag(7, out),
            NodeOp::View(v, _) => {
                out.push(8 << 56 | v.shape.ndim() as u64);
                out.extend(v.shape.dims().iter().map(|&d| d as u64));
                out.extend(v.strides.iter().map(|&s| s as u64));
                out.push(v.offset as u64);
            }
            NodeOp::Cat(parts, axis) => out.extend([9 << 56 | parts.len() as u64, *axis as u64]),
            NodeOp::Contiguous(_) => tag(10, out),
            NodeOp::Reduce(op, _, axis) => out.extend([11 << 56 | *op as u64, *axis as u64]),
            NodeOp::Matmul(_, _, tri) => out.push(12 << 56 | *tri as u64),
            NodeOp::Random(d, ..) => out.push(13 << 56 | *d as u64),
            NodeOp::Gather(_, _, axis) => out.extend([14 << 56, *axis as u64]),
            NodeOp::Write(.., axis) => out.extend([15 << 56, *axis as u64]),
        }
    }

    /// Whether the op is evaluated inside a kernel (as opposed to being a buffer or a constant).
    pub fn is_compute(&self) -> bool {
        !matches!(self, NodeOp::Data(_) | NodeOp::Const(_) | NodeOp::Arange | NodeOp::Buffer)
    }
}

/// One node: an op, its result's shape and type, and who still needs it.
#[derive(Debug)]
pub struct Node {
    pub op: NodeOp,
    pub shape: Shape,
    pub dtype: DType,
    /// Tensor handles plus consumer nodes that refer to this node. At 0 the node is freed.
    refs: u32,
    /// The device buffer holding the value, once realized or uploaded.
    pub buffer: Option<BufferKey>,
}

/// A device's expression graph.
#[derive(Default, Debug)]
pub struct Graph {
    nodes: SlotMap<NodeId, Node>,
    /// Live folds by what they fold: asking twice for the same reduction of the same node (a layer norm's mean and
    /// its variance's mean) gets the same node, computed once.
    folds: FastMap<(ReduceOp, NodeId, usize), NodeId>,
    fold_keys: FastMap<NodeId, (ReduceOp, NodeId, usize)>,
}

impl Graph {
    /// Adds a node with one reference (the handle being created) and takes a reference on each input.
    pub fn add(&mut self, op: NodeOp, shape: Shape, dtype: DType) -> NodeId {
        let fold = match op {
            NodeOp::Reduce(r, x, axis) => Some((r, x, axis)),
            _ => None,
        };
        if let Some(&id) = fold.as_ref().and_then(|key| self.folds.get(key)) {
            self.nodes[id].refs += 1;
            return id;
        }
        for input in op.inputs() {
            self.nodes[input].refs += 1;
        }
        let id = self.nodes.insert(Node { op, shape, dtype, refs: 1, buffer: None });
        if let Some(key) = fold {
            self.folds.insert(key, id);
            self.fold_keys.insert(id, key);
        }
        id
    }

    /// The node `id`.
    ///
    /// # Panics
    /// If `id` was freed: a handle always keeps its node alive, so this is a lazor bug.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    /// Whether neighbouring elements of `id` along `axis` are neighbours in memory, as far as the graph tells: a
    /// view with stride 1 there (or extent 1); anything but a view is row-major. A thin product's layout rests on it.
    pub fn contiguous_along(&self, id: NodeId, axis: usize) -> bool {
        let node = self.node(id);
        match &node.op {
            NodeOp::View(v, _) => v.strides[axis].abs() == 1 || node.shape.dims()[axis] == 1,
            _ => axis + 1 == node.shape.ndim(),
        }
    }

    /// Whether `id` is a matrix (or a batch of them, along its last two axes) read down its columns: a view whose
    /// rows' elements lie a stride apart (not 0, not 1) and whose columns' are neighbours, as `weight.t()` is, or an
    /// attention's `k.transpose(-2, -1)`. A broadcast or a single row is not.
    pub fn transposed(&self, id: NodeId) -> bool {
        let node = self.node(id);
        let nd = node.shape.ndim();
        match &node.op {
            NodeOp::View(v, _) if nd >= 2 && node.shape.dims()[nd - 2] > 1 => {
                v.strides[nd - 2].abs() == 1 && !matches!(v.strides[nd - 1].abs(), 0 | 1)
            }
            _ => false,
        }
    }

    /// Whether `id` is still live.
    pub fn contains(&self, id: NodeId) -> bool {
        self.nodes.contains_key(id)
    }

    /// Number of live nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph holds no nodes.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// How many handles and consumer nodes refer to `id`.
    pub fn refs(&self, id: NodeId) -> u32 {
        self.nodes[id].refs
    }

    /// Gives node `v` (a `Var`'s, a leaf or a copy) the value of `x`, realized, in place: handles on `v` see the
    /// new value, while nodes that read `v` are moved onto a new node keeping the old value, so lazy results
    /// computed before stay what they were. `v` takes `x`'s buffer when nothing else holds `x`; otherwise `v`
    /// becomes a lazy copy of `x` and this returns `true` (the caller realizes it). The old buffer is pushed on
    /// `freed` when nothing reads it any more.
    pub fn assign(&mut self, v: NodeId, x: NodeId, freed: &mut Vec<BufferKey>) -> bool {
        let readers = self.readers(v);
        if readers.is_empty() {
            let old_op = std::mem::replace(&mut self.nodes[v].op, NodeOp::Buffer);
            freed.extend(self.nodes[v].buffer.take());
            for input in old_op.inputs() {
                self.release(input, freed);
            }
        } else {
            self.split_off(v, readers, 0);
        }
        let stolen = self.nodes[x].refs == 1 && matches!(self.nodes[x].op, NodeOp::Buffer);
        if stolen {
            self.nodes[v].buffer = self.nodes[x].buffer.take();
        } else {
            self.nodes[x].refs += 1;
            self.nodes[v].op = NodeOp::Contiguous(x);
        }
        !stolen
    }

    /// Makes node `v` the lazy value of its old value with `value` written into it along `axis` from `start` on
    /// ([`NodeOp::Write`]), in place: handles on `v` see the new value, while nodes that read `v` are moved onto the node
    /// now holding the old value (and its buffer), so lazy results computed before stay what they were. Where
    /// nothing read `v`, the write is the old value's only reader, and the scheduler writes the slice into its
    /// buffer.
    pub fn write(&mut self, v: NodeId, value: NodeId, start: NodeId, axis: usize) {
        let readers = self.readers(v);
        let old = self.split_off(v, readers, 1);
        self.nodes[value].refs += 1;
        self.nodes[start].refs += 1;
        self.nodes[v].op = NodeOp::Write(old, value, start, axis);
    }

    /// The nodes that read `v`, on which the caller holds a handle: with one reference, that handle's, nothing
    /// reads it and the walk over every node is skipped (a KV cache written token after token).
    fn readers(&self, v: NodeId) -> Vec<NodeId> {
        if self.nodes[v].refs == 1 {
            return Vec::new();
        }
        self.nodes.iter().filter(|(_, n)| n.op.inputs().contains(&v)).map(|(id, _)| id).collect()
    }

    /// Moves `v`'s op and buffer into a new node, which `readers` (every node reading `v`) then read instead, and
    /// `refs` more references hold; `v` is left a leaf without a buffer. Returns the new node.
    fn split_off(&mut self, v: NodeId, readers: Vec<NodeId>, refs: u32) -> NodeId {
        let old_op = std::mem::replace(&mut self.nodes[v].op, NodeOp::Buffer);
        let old_buffer = self.nodes[v].buffer.take();
        let (shape, dtype) = (self.nodes[v].shape.clone(), self.nodes[v].dtype);
        let old = self.nodes.insert(Node { op: old_op, shape, dtype, refs, buffer: old_buffer });
        for r in readers {
            if let Some(&key) = self.fold_keys.get(&r) {
                self.folds.remove(&key);
                let moved = (key.0, old, key.2);
                self.folds.insert(moved, r);
                self.fold_keys.insert(r, moved);
            }
            let mut moved = 0;
            self.nodes[r].op.for_each_input_mut(|i| {
                if *i == v {
                    *i = old;
                    moved += 1;
                }
            });
            self.nodes[old].refs += moved;
            self.nodes[v].refs -= moved;
        }
        old
    }

    /// Forgets the buffer of leaf `id`, which now holds another node's value (see `Kernel::aliases`): the leaf is
    /// about to die, and must not free it.
    pub fn take_buffer(&mut self, id: NodeId) {
        self.nodes[id].buffer = None;
    }

    /// Takes one more reference on `id` (a cloned handle).
    pub fn retain(&mut self, id: NodeId) {
        self.nodes[id].refs += 1;
    }

    /// Drops one reference on `id`; frees every node that no longer has any, pushing their buffers on `freed`.
    /// Iterative, so dropping the end of a 100,000-op chain does not overflow the stack.
    pub fn release(&mut self, id: NodeId, freed: &mut Vec<BufferKey>) {
        let mut stack = vec![id];
        while let Some(id) = stack.pop() {
            let node = &mut self.nodes[id];
            node.refs -= 1;
            if node.refs == 0 {
                let node = self.nodes.remove(id).expect("node present");
                if let Some(key) = self.fold_keys.remove(&id) {
                    self.folds.remove(&key);
                }
                freed.extend(node.buffer);
                stack.extend(node.op.inputs());
            }
        }
    }

    /// Records that `id` now holds its value in `buffer`: the node becomes a leaf and lets go of its inputs,
    /// which frees whatever only it needed.
    pub fn set_realized(&mut self, id: NodeId, buffer: Option<BufferKey>, freed: &mut Vec<BufferKey>) {
        let node = &mut self.nodes[id];
        let old = std::mem::replace(&mut node.op, NodeOp::Buffer);
        node.buffer = buffer;
        for input in old.inputs() {
            self.release(input, freed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(g: &mut Graph, n: usize) -> NodeId {
        g.add(NodeOp::Data(vec![0; n]), Shape::from([n]), DType::F32)
    }

    #[test]
    fn releasing_the_last_handle_frees_the_chain() {
        let mut g = Graph::default();
        let a = leaf(&mut g, 4);
        let mut x = a;
        for _ in 0..100_000 {
            let y = g.add(NodeOp::Unary(UnaryOp::Exp, x), Shape::from([4]), DType::F32);
            if x != a {
                g.release(x, &mut Vec::new());
            }
            x = y;
        }
        assert_eq!(g.len(), 100_001);
        g.release(x, &mut Vec::new());
        assert_eq!(g.len(), 1, "only the input with a live handle remains");
        g.release(a, &mut Vec::new());
        assert!(g.is_empty());
    }

    #[test]
    fn assign_moves_readers_of_the_old_value_and_takes_the_new_buffer() {
        let mut g = Graph::default();
        let v = leaf(&mut g, 2);
        let x = leaf(&mut g, 2);
        let reader = g.add(NodeOp::Unary(UnaryOp::Exp, v), Shape::from([2]), DType::F32);
        let fold = g.add(NodeOp::Reduce(ReduceOp::Sum, v, 0), Shape::from([1]), DType::F32);
        let mut keys: SlotMap<BufferKey, ()> = SlotMap::with_key();
        let (old, new) = (keys.insert(()), keys.insert(()));
        g.set_realized(v, Some(old), &mut Vec::new());
        g.set_realized(x, Some(new), &mut Vec::new());
        let mut freed = Vec::new();
        assert!(!g.assign(v, x, &mut freed), "x has one handle: its buffer moves, no copy");
        assert!(freed.is_empty(), "the readers still need the old buffer");
        assert_eq!(g.node(v).buffer, Some(new));
        let NodeOp::Unary(_, moved) = g.node(reader).op else { panic!() };
        assert!(moved != v && g.node(moved).buffer == Some(old));
        assert_eq!(g.refs(v), 1, "only the handle");
        // The fold of the old value is found under its new input, not under `v`.
        let again = g.add(NodeOp::Reduce(ReduceOp::Sum, moved, 0), Shape::from([1]), DType::F32);
        assert_eq!(again, fold);
        let fresh = g.add(NodeOp::Reduce(ReduceOp::Sum, v, 0), Shape::from([1]), DType::F32);
        assert_ne!(fresh, fold);
        // Shared: `v` becomes a copy to realize; with no reader left, the old buffer is freed.
        let y = leaf(&mut g, 2);
        g.retain(y);
        for id in [reader, fold, again, fresh] {
            g.release(id, &mut Vec::new());
        }
        assert!(g.assign(v, y, &mut freed));
        assert_eq!(freed, vec![new]);
        assert!(matches!(g.node(v).op, NodeOp::Contiguous(src) if src == y));
    }

    #[test]
    fn realizing_drops_inputs() {
        let mut g = Graph::default();
        let a = leaf(&mut g, 2);
        let b = g.add(NodeOp::Unary(UnaryOp::Neg, a), Shape::from([2]), DType::F32);
        g.release(a, &mut Vec::new()); // the user dropped `a`; `b` keeps it alive
        assert_eq!(g.len(), 2);
        g.set_realized(b, None, &mut Vec::new());
        assert_eq!(g.len(), 1);
        assert!(matches!(g.node(b).op, NodeOp::Buffer));
    }
}

/// Graph builders for unit tests of the schedule and the backends (f32 nodes, shapes by NumPy's rule).
#[cfg(test)]
pub(crate) mod build {
    use super::{Graph, NodeId, NodeOp};
    use crate::dtype::DType;
    use crate::op::{BinaryOp, ReduceOp, UnaryOp};
    use crate::shape::Shape;

    pub fn data(g: &mut Graph, shape: &[usize]) -> NodeId {
        let s = Shape::from(shape);
        g.add(NodeOp::Data(vec![0; s.numel()]), s, DType::F32)
    }
    pub fn bin(g: &mut Graph, op: BinaryOp, a: NodeId, b: NodeId) -> NodeId {
        let s = g.node(a).shape.broadcast(&g.node(b).shape).unwrap();
        g.add(NodeOp::Binary(op, a, b), s, DType::F32)
    }
    pub fn un(g: &mut Graph, op: UnaryOp, a: NodeId) -> NodeId {
        let s = g.node(a).shape.clone();
        g.add(NodeOp::Unary(op, a), s, DType::F32)
    }
    pub fn scalar(g: &mut Graph, v: f32) -> NodeId {
        g.add(NodeOp::Const(v.to_bits()), Shape::from([]), DType::F32)
    }
    /// `op` over `axis`, kept with extent 1.
    pub fn fold(g: &mut Graph, op: ReduceOp, a: NodeId, axis: usize) -> NodeId {
        let mut dims = g.node(a).shape.dims().to_vec();
        dims[axis] = 1;
        g.add(NodeOp::Reduce(op, a, axis), Shape::from(dims.as_slice()), DType::F32)
    }
}
