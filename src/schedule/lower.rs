//! Lowering: one group of materialized nodes to the kernel IR, every input read through its composed view.
//!
//! A node is evaluated under a *mapping*: a [`View`] from the kernel's coordinates (in some frame) into the node's
//! row-major index space. The root is evaluated at the identity. An elementwise op passes its mapping to
//! same-shaped operands and composes it with the broadcast view of the others; a view node composes it with its
//! own view; a concatenation branches on one coordinate and evaluates each part in a frame shifted to the part's
//! start. A buffer is loaded through the mapping that reaches it. Values are cached per (node, mapping), so a node
//! read twice through one view is computed once and read through two views is computed twice.
//!
//! When a mapping cannot be composed into one stride vector (merging a broadcast axis into another, say), lowering
//! fails with the node that must be stored instead: the source of the innermost view on the way.

use super::fuse::{Fusion, Group};
use crate::dtype::DType;
use crate::graph::{Graph, NodeId, NodeOp};
use crate::hash::{FastMap, FastSet};
use crate::kernel::{Access, CatPart, Frame, Instr, Kernel, Kind, ViewRef};
use crate::op::{BinaryOp, UnaryOp};
use crate::shape::Shape;
use crate::view::{contiguous_strides, View};

/// Where a node is evaluated: a view from the kernel's coordinates in `frame` into the node's index space.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Mapping {
    view: View,
    frame: usize,
}

pub(super) struct Lowerer<'a> {
    graph: &'a Graph,
    fusion: &'a Fusion,
    members: FastSet<NodeId>,
    pub k: Kernel,
    /// The shape the kernel's own coordinates range over while lowering (a reduce kernel's prologue folds over its
    /// input's shape, its epilogue runs over the output's).
    domain: Shape,
    /// A reduce kernel's reduce node: its value in the epilogue is the fold.
    reduced: Option<NodeId>,
    /// Names a node's buffer in the plan.
    slot: &'a mut dyn FnMut(NodeId) -> usize,
    cache: FastMap<(NodeId, Mapping), usize>,
    views: FastMap<(View, usize), usize>,
    /// The parameter holding each constant node: one per node, however often it is lowered, so that a rows
    /// kernel's phases computing the same value spell it alike (`codegen::rows`, values kept with the row).
    consts: FastMap<NodeId, usize>,
    /// In a rows kernel: its folds lowered so far (by phase), the axis of its rows, and the member being lowered.
    pub folds: FastMap<NodeId, usize>,
    pub row_axis: Option<usize>,
    pub current: Option<NodeId>,
}

impl<'a> Lowerer<'a> {
    pub fn new(
        graph: &'a Graph,
        fusion: &'a Fusion,
        members: &[NodeId],
        k: Kernel,
        slot: &'a mut dyn FnMut(NodeId) -> usize,
    ) -> Self {
        Lowerer {
            graph,
            fusion,
            members: members.iter().copied().collect(),
            domain: k.shape.clone(),
            k,
            reduced: None,
            slot,
            cache: FastMap::default(),
            views: FastMap::default(),
            consts: FastMap::default(),
            folds: FastMap::default(),
            row_axis: None,
            current: None,
        }
    }

    /// Whether `m` reads fold `id` (shape: the domain with the rows' axis at extent 1) broadcast along the rows:
    /// every element of a row sees the row's fold.
    fn row_broadcast(&self, id: NodeId, m: &Mapping) -> bool {
        let Some(axis) = self.row_axis else { return false };
        let shape = &self.graph.node(id).shape;
        let cs = contiguous_strides(shape);
        let dims = m.view.shape.dims();
        m.frame == 0
            && m.view.shape == self.domain
            && m.view.offset == 0
            && (0..dims.len()).all(|d| dims[d] == 1 || m.view.strides[d] == if d == axis { 0 } else { cs[d] })
    }

    /// Evaluates `id` at every element of `domain`, which has as many elements as `id`: the identity when the
    /// shapes match, a reshape that only adds or drops extent-1 axes otherwise.
    pub fn root(&mut self, id: NodeId, domain: &Shape) -> Result<usize, NodeId> {
        self.value(id, &Mapping { view: View::contiguous(domain), frame: 0 }, None)
    }

    /// Evaluates `id` at every element of `view`'s shape, `view` mapping those coordinates into `id`'s row-major
    /// index space (a matrix product reads its operands this way, broadcast over the other operand's axis).
    pub fn at(&mut self, id: NodeId, view: View) -> Result<usize, NodeId> {
        self.value(id, &Mapping { view, frame: 0 }, None)
    }

    /// Starts lowering over another domain (a reduce kernel's epilogue): values computed so far stay in the body
    /// but are not reused.
    pub fn set_domain(&mut self, domain: &Shape, reduced: Option<NodeId>) {
        self.domain = domain.clone();
        self.reduced = reduced;
        self.cache.clear();
    }

    /// Evaluates every member of the group over `domain` and stores those that leave the kernel; `head` (a fold or
    /// product whose value the kernel already holds) reads as [`Instr::Reduced`].
    pub fn epilogue(
        &mut self,
        members: &[NodeId],
        domain: &Shape,
        head: Option<NodeId>,
        written: &dyn Fn(NodeId) -> bool,
    ) -> Result<(), NodeId> {
        self.set_domain(domain, head);
        for &member in members {
            let v = self.root(member, domain)?;
            self.output(member, v, written);
        }
        Ok(())
    }

    /// The constant `lane` of type `dt`, from the parameter block.
    pub fn constant(&mut self, lane: u32, dt: DType) -> usize {
        let at = self.param(lane);
        self.push(Instr::Scalar(at), dt)
    }

    /// The slot of a buffer holding `dt` elements, as an input of the kernel.
    pub fn input(&mut self, slot: usize, dt: DType) -> usize {
        self.k.inputs.iter().position(|i| i.0 == slot).unwrap_or_else(|| {
            self.k.inputs.push((slot, false));
            self.k.in_types.push(dt);
            self.k.inputs.len() - 1
        })
    }

    /// The slot of a node's buffer.
    pub fn slot(&mut self, id: NodeId) -> usize {
        (self.slot)(id)
    }

    /// Stores `member`'s value (instruction `value`) when it leaves the kernel; its index among the outputs.
    pub fn output(&mut self, member: NodeId, value: usize, written: &dyn Fn(NodeId) -> bool) -> Option<usize> {
        if !written(member) {
            return None;
        }
        let s = self.slot(member);
        self.k.outputs.push((s, value));
        self.k.out_types.push(self.graph.node(member).dtype);
        Some(self.k.outputs.len() - 1)
    }

    pub fn param(&mut self, word: u32) -> usize {
        self.k.params.push(word);
        self.k.params.len() - 1
    }

    fn param_i(&mut self, v: isize) -> usize {
        self.param(v as i32 as u32)
    }

    fn is_identity(&self, m: &Mapping) -> bool {
        m.frame == 0 && m.view.shape == self.domain && m.view.is_contiguous()
    }

    /// The kernel's extents, in the parameters once, the first time any coordinate is needed.
    pub fn need_coords(&mut self) {
        if self.k.dims_at.is_none() {
            let at = self.k.params.len();
            let dims: Vec<u32> = self.k.shape.dims().iter().map(|&d| d as u32).collect();
            self.k.params.extend(dims);
            self.k.dims_at = Some(at);
        }
    }

    /// Appends `instr`, whose value has type `dt`.
    pub fn push(&mut self, instr: Instr, dt: DType) -> usize {
        self.k.body.push(instr);
        self.k.types.push(dt);
        self.k.body.len() - 1
    }

    /// The element index (an `i32`) that `view` reaches at the kernel's own coordinates: [`Instr::Index`].
    pub fn index(&mut self, view: View) -> usize {
        let view = self.view_of(&Mapping { view, frame: 0 });
        self.push(Instr::Index { view }, DType::I32)
    }

    fn load(&mut self, id: NodeId, m: &Mapping) -> usize {
        let slot = self.slot(id);
        let dt = self.graph.node(id).dtype;
        let input = self.input(slot, dt);
        match self.view_of(m) {
            None => self.push(Instr::Load { input, view: None, access: Access::Own }, dt),
            Some(view) => self.push(Instr::Load { input, view: Some(view), access: Access::Gather }, dt),
        }
    }

    /// Where a read under `m` finds its element: `None` at the kernel's own index, else a view in the parameters.
    fn view_of(&mut self, m: &Mapping) -> Option<ViewRef> {
        if self.is_identity(m) {
            return None;
        }
        self.need_coords();
        let key = (m.view.clone(), m.frame);
        let at = match self.views.get(&key) {
            Some(&at) => at,
            None => {
                let at = self.k.params.len();
                for &s in &m.view.strides {
                    self.param_i(s);
                }
                self.param_i(m.view.offset);
                self.views.insert(key, at);
                at
            }
        };
        Some(ViewRef { at, frame: m.frame })
    }

    /// The instruction holding node `id` under mapping `m`. `anchor` is the node to store if a view on the way
    /// cannot be composed.
    fn value(&mut self, id: NodeId, m: &Mapping, anchor: Option<NodeId>) -> Result<usize, NodeId> {
        let key = (id, m.clone());
        if let Some(&v) = self.cache.get(&key) {
            return Ok(v);
        }
        if let Some(&f) = self.folds.get(&id) {
            // A fold of this rows kernel: its value for the row, or, read any other way, the member reading it
            // leaves the rows kernel.
            return match self.row_broadcast(id, m) {
                true => Ok(self.push(Instr::Folded(f), self.graph.node(id).dtype)),
                false => Err(self.current.unwrap_or(id)),
            };
        }
        let fail = anchor.unwrap_or(id);
        let node = self.graph.node(id);
        let computed_here = self.members.contains(&id) && self.is_identity(m);
        let dt = node.dtype;
        let v = if computed_here && self.reduced == Some(id) {
            self.push(Instr::Reduced, dt)
        } else if !computed_here && self.fusion.is_buffer(self.graph, id) {
            self.load(id, m)
        } else {
            match &node.op {
                NodeOp::Const(c) => match self.consts.get(&id) {
                    Some(&at) => self.push(Instr::Scalar(at), dt),
                    None => {
                        let v = self.constant(*c, dt);
                        let at = self.k.params.len() - 1;
                        self.k.consts.push((at, self.fusion.place[&id]));
                        self.consts.insert(id, at);
                        v
                    }
                },
                NodeOp::Arange => {
                    let view = self.view_of(m);
                    self.push(Instr::Index { view }, dt)
                }
                NodeOp::Random(d, lo, hi) => {
                    // The counter is the element's index in the node's own row-major order, wherever it is read.
                    let view = self.view_of(m);
                    let index = self.push(Instr::Index { view }, DType::I32);
                    let lo = self.value(*lo, m, anchor)?;
                    let hi = self.value(*hi, m, anchor)?;
                    self.k.fused_ops += 1;
                    self.push(Instr::Random(*d, index, lo, hi), dt)
                }
                NodeOp::Unary(op, a) => {
                    let a = self.value(*a, m, anchor)?;
                    self.k.fused_ops += 1;
                    self.push(Instr::Unary(*op, a), dt)
                }
                NodeOp::Cast(a) => {
                    let a = self.value(*a, m, anchor)?;
                    self.k.fused_ops += 1;
                    self.push(Instr::Cast(a), dt)
                }
                NodeOp::Binary(op, a, b) => {
                    let mut a = self.operand(*a, &node.shape, m, anchor, fail)?;
                    let mut b = self.operand(*b, &node.shape, m, anchor, fail)?;
                    self.k.fused_ops += 1;
                    match self.same_operands(*op, a, b, dt) {
                        Some(v) => v,
                        None => {
                            if op.is_compare() {
                                // Half values stay in f32 inside a kernel; a comparison sees them as stored, so
                                // `x == max` holds where the max was rounded on its way through memory (argmax of
                                // an f16 chain).
                                a = self.rounded(a);
                                b = self.rounded(b);
                            }
                            self.push(Instr::Binary(*op, a, b), dt)
                        }
                    }
                }
                NodeOp::Where(c, a, b) => {
                    let c = self.operand(*c, &node.shape, m, anchor, fail)?;
                    let a = self.operand(*a, &node.shape, m, anchor, fail)?;
                    let b = self.operand(*b, &node.shape, m, anchor, fail)?;
                    self.k.fused_ops += 1;
                    self.push(Instr::Select(c, a, b), dt)
                }
                NodeOp::View(v, src) => {
                    let view = m.view.compose(v).ok_or(fail)?;
                    self.value(*src, &Mapping { view, frame: m.frame }, Some(*src))?
                }
                NodeOp::Contiguous(src) => self.value(*src, m, anchor)?,
                NodeOp::Gather(src, index, axis) => self.gather(id, *src, *index, *axis, m, anchor, fail)?,
                NodeOp::Cat(parts, dim) => self.cat(id, parts, *dim, m, fail)?,
                NodeOp::Data(_) | NodeOp::Buffer | NodeOp::Reduce(..) | NodeOp::Matmul(..) | NodeOp::Write(..) => {
                    unreachable!("leaves, folds, products and writes are loads")
                }
            }
        };
        self.cache.insert(key, v);
        Ok(v)
    }

    /// A gather under `m`: the index at the node's coordinates, the source's element index at them with the
    /// gathered axis's term left out, and the load that adds the index's term where it is in range.
    #[allow(clippy::too_many_arguments)]
    fn gather(
        &mut self,
        id: NodeId,
        src: NodeId,
        index: NodeId,
        axis: usize,
        m: &Mapping,
        anchor: Option<NodeId>,
        fail: NodeId,
    ) -> Result<usize, NodeId> {
        let node = self.graph.node(id);
        let (shape, dt) = (node.shape.clone(), node.dtype);
        let mut index = self.value(index, m, anchor)?;
        if self.k.types[index] != DType::I32 {
            // A u32 index past i32's range turns negative: out of range either way.
            index = self.push(Instr::Cast(index), DType::I32);
        }
        let source = &self.graph.node(src).shape;
        let (stride, extent) = (source.contiguous_strides()[axis] as isize, source.dims()[axis] as isize);
        let mut strides = contiguous_strides(source);
        strides[axis] = 0;
        let inner = View { shape, strides, offset: 0 };
        let view = m.view.compose(&inner).ok_or(fail)?;
        let view = self.view_of(&Mapping { view, frame: m.frame });
        let base = self.push(Instr::Index { view }, DType::I32);
        let slot = self.slot(super::fuse::gathered(self.graph, src));
        let input = self.input(slot, self.graph.node(src).dtype);
        let stride_at = self.param_i(stride);
        self.param_i(extent);
        self.k.fused_ops += 1;
        Ok(self.push(Instr::Gather { input, base, index, stride_at }, dt))
    }

    /// An op whose operands are one value (`x - x`, `x / x`, `x + -x`, `x < x`, `x > x`), computed as IEEE says
    /// from constants read from the parameters, or `None`. A shader compiler knows these identities too, but
    /// folds them to constants that ignore NaN and infinities (`x - x` to 0), and folds onward from a constant it
    /// sees (`x < x` to false, then the `0 / y` it selects to 0 where y is NaN: lavapipe, differential seed 1362).
    fn same_operands(&mut self, op: BinaryOp, a: usize, b: usize, dt: DType) -> Option<usize> {
        if matches!(op, BinaryOp::Lt | BinaryOp::Gt) && a == b {
            // False for every x, NaN included.
            return Some(self.constant(0, DType::Bool));
        }
        if !dt.is_float() {
            return None;
        }
        let neg_of = |n: usize, x: usize| matches!(self.k.body[n], Instr::Unary(UnaryOp::Neg, y) if y == x);
        match op {
            BinaryOp::Sub if a == b => Some(self.ieee_zero(a, dt)),
            BinaryOp::Div if a == b => Some(self.ieee_one(a, dt)),
            BinaryOp::Add if neg_of(b, a) => Some(self.ieee_zero(a, dt)),
            BinaryOp::Add if neg_of(a, b) => Some(self.ieee_zero(b, dt)),
            _ => None,
        }
    }

    /// `a * 0 + 0` with the zero read from the parameters, which no compiler folds: +0 for finite `a`, NaN for NaN
    /// and infinities, the IEEE value of `a - a`.
    fn ieee_zero(&mut self, a: usize, dt: DType) -> usize {
        let zero = self.constant(0, dt);
        let scaled = self.push(Instr::Binary(BinaryOp::Mul, a, zero), dt);
        self.push(Instr::Binary(BinaryOp::Add, scaled, zero), dt)
    }

    /// `a == 0 ? NaN : a * 0 + 1` with the constants read from the parameters: the IEEE value of `a / a`.
    fn ieee_one(&mut self, a: usize, dt: DType) -> usize {
        let zero = self.constant(0, dt);
        let is_zero = self.push(Instr::Binary(BinaryOp::Eq, a, zero), DType::Bool);
        let one = self.constant(1.0f32.to_bits(), dt);
        let scaled = self.push(Instr::Binary(BinaryOp::Mul, a, zero), dt);
        let finite = self.push(Instr::Binary(BinaryOp::Add, scaled, one), dt);
        let nan = self.constant(f32::NAN.to_bits(), dt);
        self.push(Instr::Select(is_zero, nan, finite), dt)
    }

    /// Value `v` rounded to its own type where that is f16 or bf16 (a cast to the same type rounds).
    fn rounded(&mut self, v: usize) -> usize {
        let dt = self.k.types[v];
        // A value loaded from memory was rounded when it was stored.
        let loaded = matches!(self.k.body[v], Instr::Load { .. });
        match dt {
            DType::F16 | DType::BF16 if !loaded => self.push(Instr::Cast(v), dt),
            _ => v,
        }
    }

    /// Operand `x` of an elementwise node of shape `shape` evaluated under `m`: at the same mapping when the shapes
    /// match, else through its broadcast.
    fn operand(
        &mut self,
        x: NodeId,
        shape: &Shape,
        m: &Mapping,
        anchor: Option<NodeId>,
        fail: NodeId,
    ) -> Result<usize, NodeId> {
        let xs = &self.graph.node(x).shape;
        if xs == shape {
            self.value(x, m, anchor)
        } else {
            let view = m.view.compose(&View::broadcast(xs, shape)).ok_or(fail)?;
            self.value(x, &Mapping { view, frame: m.frame }, anchor)
        }
    }

    fn cat(&mut self, id: NodeId, parts: &[NodeId], dim: usize, m: &Mapping, fail: NodeId) -> Result<usize, NodeId> {
        let shape = &self.graph.node(id).shape;
        let coords = m.view.coords_in(shape).ok_or(fail)?;
        let origin = coords.origin[dim];
        let movers: Vec<usize> =
            (0..coords.axes.len()).filter(|&d| matches!(coords.axes[d], Some((j, _)) if j == dim)).collect();
        // The view of part `p` (starting at `start` along `dim`) from the same coordinates, its origin along `dim`
        // set to `along`.
        let part_view = |p: NodeId, along: isize, domain: &Shape| -> View {
            let cs = contiguous_strides(&self.graph.node(p).shape);
            let mut offset = 0;
            for (j, &o) in coords.origin.iter().enumerate() {
                offset += if j == dim { along } else { o } * cs[j];
            }
            let strides = coords.axes.iter().map(|a| a.map_or(0, |(j, mult)| mult * cs[j])).collect();
            View { shape: domain.clone(), strides, offset }
        };
        let mut starts = Vec::with_capacity(parts.len());
        let mut at = 0isize;
        for &p in parts {
            starts.push(at);
            at += self.graph.node(p).shape.dims()[dim] as isize;
        }
        if movers.is_empty() {
            // The coordinate along `dim` is the same everywhere: one part, chosen now.
            let k = (0..parts.len()).rev().find(|&k| starts[k] <= origin).unwrap_or(0);
            let view = part_view(parts[k], origin - starts[k], &m.view.shape);
            return self.value(parts[k], &Mapping { view, frame: m.frame }, Some(parts[k]));
        }
        let [d] = movers[..] else { return Err(fail) };
        if coords.axes[d].map(|(_, mult)| mult) != Some(1) {
            return Err(fail);
        }
        self.need_coords();
        let mut out = Vec::with_capacity(parts.len());
        for (k, &p) in parts.iter().enumerate() {
            let len = self.graph.node(p).shape.dims()[dim];
            if len == 0 {
                continue;
            }
            let shift = self.param_i(starts[k] - origin);
            let bound = self.param_i(starts[k] + len as isize - origin);
            self.k.frames.push(Frame { parent: m.frame, axis: d, shift });
            let frame = self.k.frames.len();
            let mut domain = m.view.shape.dims().to_vec();
            domain[d] = len;
            let view = part_view(p, 0, &domain.into());
            let saved = self.cache.clone();
            let lo = self.k.body.len();
            let value = self.value(p, &Mapping { view, frame }, Some(p))?;
            let hi = self.k.body.len();
            self.cache = saved;
            out.push(CatPart { bound, frame, body: lo..hi, value });
        }
        self.k.fused_ops += 1;
        Ok(self.push(Instr::Cat { frame: m.frame, axis: d, parts: out }, self.graph.node(id).dtype))
    }
}

/// An empty kernel of `kind` over `shape`, its parameter block starting with `numel`.
pub(super) fn kernel(kind: Kind, shape: &Shape, numel: usize) -> Kernel {
    Kernel {
        kind,
        shape: shape.clone(),
        inputs: Vec::new(),
        in_types: Vec::new(),
        outputs: Vec::new(),
        out_types: Vec::new(),
        body: Vec::new(),
        types: Vec::new(),
        frames: Vec::new(),
        params: vec![numel as u32],
        consts: Vec::new(),
        dims_at: None,
        width: 1,
        vectors: 1,
        tiles: Vec::new(),
        phases: Vec::new(),
        aliases: Vec::new(),
        store_view: None,
        scatter: None,
        fused_ops: 0,
        joins: false,
    }
}

/// One group to lower and what lowering it needs from the plan.
pub(super) struct GroupCtx<'a> {
    pub graph: &'a Graph,
    pub fusion: &'a Fusion,
    pub grp: &'a Group,
    /// Whether a member leaves its kernel (requested, or read by another group).
    pub written: &'a dyn Fn(NodeId) -> bool,
    /// Names a node's buffer in the plan.
    pub slot: &'a mut dyn FnMut(NodeId) -> usize,
    /// Makes a plan buffer of that many bytes for partial folds.
    pub scratch: &'a mut dyn FnMut(u64) -> usize,
    /// The leaves whose buffers this realize may overwrite ([`super::donors`]).
    pub donors: &'a FastSet<NodeId>,
    /// The blocking every tiled matmul uses instead of the shape table ([`super::Options::matmul_tile`]).
    pub tile: Option<crate::kernel::MatmulTile>,
    /// The backend's table of matmul blockings ([`super::Options::matmul_tiles`]).
    pub tiles: crate::kernel::MatmulTiles,
    /// The fewest threads per row of a fold ([`super::Options::row_team_min`]).
    pub team_min: usize,
}

/// Lowers one elementwise group to a kernel. Fails with a node that must be materialized first.
pub(super) fn lower(cx: GroupCtx) -> Result<Kernel, NodeId> {
    let GroupCtx { graph, fusion, grp, written, slot, .. } = cx;
    let k = kernel(Kind::Elementwise, &grp.shape, grp.shape.numel());
    let mut l = Lowerer::new(graph, fusion, &grp.members, k, slot);
    l.epilogue(&grp.members, &grp.shape, None, written)?;
    l.vectorize();
    Ok(l.k)
}
