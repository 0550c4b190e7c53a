//! Slice writes (`NodeOp::Write`, `Tensor::write_at`): a value stored into a slice of a buffer, the rest of the buffer
//! left as it is.
//!
//! A KV cache is the case it is for: each decoded token writes one position of a `[batch, heads, max_len, dim]`
//! buffer. Copying the buffer to change one position would cost a pass over all of it per token and a second
//! buffer; instead the write's kernel runs over the slice alone and stores each element at its place in the
//! buffer of the old value ([`Kernel::scatter`]), which the written node then owns (its slot is an
//! [`Source::Alias`](super::Source::Alias) of the old value's). That takes an old value that is a buffer nothing
//! else reads and that no handle holds ([`in_place`]); anything else (a lazy value, one a lazy result still
//! reads) is copied by a kernel over the whole buffer that takes each element from the slice or the old value.
//!
//! The start is an `I32` scalar: a graph constant, read from the kernel's parameters, so that the plan cache
//! reuses the plan at every position; or a tensor on the device. It is clamped so that the slice stays inside the
//! buffer: a store outside it would write another tensor's memory.
//!
//! Writes are realized with whatever reads them ([`with_writes`]): a written node left lazy would leave the next
//! write to the same cache a lazy old value, which is copied rather than written in place.

use super::lower::{kernel, GroupCtx, Lowerer};
use crate::dtype::DType;
use crate::graph::{Graph, NodeId, NodeOp};
use crate::hash::FastSet;
use crate::kernel::{Instr, Kernel, Kind};
use crate::op::BinaryOp;
use crate::shape::Shape;
use crate::view::{contiguous_strides, View};

/// `outputs` and, after them, every write in `order` they leave out.
pub(super) fn with_writes(graph: &Graph, order: &[NodeId], outputs: &[NodeId]) -> Vec<NodeId> {
    let mut all = outputs.to_vec();
    for &id in order {
        if matches!(graph.node(id).op, NodeOp::Write(..)) && !outputs.contains(&id) {
            all.push(id);
        }
    }
    all
}

/// Whether write `w` stores its slice into the buffer of its old value: a buffer this realize may overwrite
/// (`donors`, see [`super::donors`]) that the write alone reads. Both are part of the plan cache's key.
pub(super) fn in_place(graph: &Graph, donors: &FastSet<NodeId>, w: NodeId) -> bool {
    let NodeOp::Write(base, ..) = graph.node(w).op else { return false };
    donors.contains(&base) && graph.refs(base) == 1
}

/// Lowers write `grp.members[0]`: the slice stored in place, or the whole buffer copied with the slice in it.
pub(super) fn lower(cx: GroupCtx) -> Result<Kernel, NodeId> {
    let GroupCtx { graph, fusion, grp, slot, donors, .. } = cx;
    let w = grp.members[0];
    let node = graph.node(w);
    let NodeOp::Write(base, value, start, axis) = node.op else { unreachable!("a write group holds a write") };
    let (shape, dt) = (node.shape.clone(), node.dtype);
    let part = graph.node(value).shape.clone();
    let (len, extent) = (part.dims()[axis], shape.dims()[axis]);
    let strides = contiguous_strides(&shape);
    if in_place(graph, donors, w) {
        let k = kernel(Kind::Elementwise, &part, part.numel());
        let mut l = Lowerer::new(graph, fusion, &[], k, slot);
        let v = l.root(value, &part)?;
        let first = clamped_start(&mut l, &graph.node(start).shape, start, &part, extent - len)?;
        let step = l.constant(strides[axis] as u32, DType::I32);
        let shift = l.push(Instr::Binary(BinaryOp::Mul, first, step), DType::I32);
        // The slice's element at the same coordinates of the whole buffer, then moved along the axis.
        let at = l.index(View { shape: part.clone(), strides, offset: 0 });
        let to = l.push(Instr::Binary(BinaryOp::Add, at, shift), DType::I32);
        let out = l.slot(w);
        l.k.outputs.push((out, v));
        l.k.out_types.push(dt);
        l.k.scatter = Some(to);
        l.k.fused_ops += 1;
        return Ok(l.k);
    }
    // The copy: at each element of the buffer, the slice's element where the axis falls inside it, else the old
    // value's. The slice is read at a coordinate computed at run time: a gather, from a buffer: the value's own
    // where it has one (what the schedule counts the write as reading), else the one under its reshapes.
    let src = match fusion.is_buffer(graph, value) {
        true => value,
        false => super::fuse::gathered(graph, value),
    };
    if !fusion.is_buffer(graph, src) {
        return Err(src);
    }
    let k = kernel(Kind::Elementwise, &shape, shape.numel());
    let mut l = Lowerer::new(graph, fusion, &[], k, slot);
    let old = l.root(base, &shape)?;
    let first = clamped_start(&mut l, &graph.node(start).shape, start, &shape, extent - len)?;
    let mut along = vec![0; shape.ndim()];
    along[axis] = 1;
    let coord = l.index(View { shape: shape.clone(), strides: along.into(), offset: 0 });
    let inside = l.push(Instr::Binary(BinaryOp::Sub, coord, first), DType::I32);
    let mut read = contiguous_strides(&part);
    let stride = read[axis];
    read[axis] = 0;
    let from = l.index(View { shape: shape.clone(), strides: read, offset: 0 });
    let s = l.slot(src);
    let input = l.input(s, dt);
    let stride_at = l.param(stride as i32 as u32);
    l.param(len as u32);
    let new = l.push(Instr::Gather { input, base: from, index: inside, stride_at }, dt);
    let zero = l.constant(0, DType::I32);
    let end = l.constant(len as u32, DType::I32);
    let above = l.push(Instr::Binary(BinaryOp::Ge, inside, zero), DType::Bool);
    let below = l.push(Instr::Binary(BinaryOp::Lt, inside, end), DType::Bool);
    let within = l.push(Instr::Binary(BinaryOp::And, above, below), DType::Bool);
    let v = l.push(Instr::Select(within, new, old), dt);
    let out = l.slot(w);
    l.k.outputs.push((out, v));
    l.k.out_types.push(dt);
    l.k.fused_ops += 1;
    Ok(l.k)
}

/// The start (an `I32` scalar node) at every element of `domain`, clamped to `[0, last]`.
fn clamped_start(l: &mut Lowerer, own: &Shape, start: NodeId, domain: &Shape, last: usize) -> Result<usize, NodeId> {
    let s = l.at(start, View::broadcast(own, domain))?;
    let zero = l.constant(0, DType::I32);
    let top = l.constant(last as u32, DType::I32);
    let low = l.push(Instr::Binary(BinaryOp::Max, s, zero), DType::I32);
    Ok(l.push(Instr::Binary(BinaryOp::Min, low, top), DType::I32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::BufferKey;
    use crate::graph::build::data;
    use crate::schedule::{plan, Options, Source};

    /// A realized `[2, 3, 8, 4]` cache and a `[2, 3, 1, 4]` value written at a constant position along axis 2.
    fn cache_write(g: &mut Graph, pos: i32) -> NodeId {
        let cache = data(g, &[2, 3, 8, 4]);
        g.set_realized(cache, Some(BufferKey::from(slotmap::KeyData::from_ffi(1))), &mut Vec::new());
        let value = data(g, &[2, 3, 1, 4]);
        let start = g.add(NodeOp::Const(pos as u32), Shape::from([]), DType::I32);
        g.write(cache, value, start, 2);
        // The caller's handles on the value and the position go; the cache's stays.
        g.release(start, &mut Vec::new());
        g.release(value, &mut Vec::new());
        cache
    }

    #[test]
    fn a_write_into_a_buffer_nothing_else_reads_stores_the_slice_in_place() {
        let mut g = Graph::default();
        let cache = cache_write(&mut g, 5);
        let p = plan(&g, &[cache], &Options::TEST);
        assert_eq!(p.kernels.len(), 1);
        let k = &p.kernels[0];
        assert_eq!(k.shape.dims(), &[2, 3, 1, 4], "the kernel covers the slice");
        assert!(k.scatter.is_some());
        let out = k.outputs[0].0;
        let Source::Alias(old) = p.slots[out].source else { panic!("{:?}", p.slots[out]) };
        assert!(matches!(p.slots[old].source, Source::Existing(_)));
        assert!(k.consts.iter().any(|&(at, _)| k.params[at] == 5), "the position is a constant's parameter");
    }

    #[test]
    fn a_write_of_a_buffer_something_else_reads_copies_it() {
        let mut g = Graph::default();
        let cache = data(&mut g, &[2, 3, 8, 4]);
        g.set_realized(cache, Some(BufferKey::from(slotmap::KeyData::from_ffi(1))), &mut Vec::new());
        let reader = g.add(NodeOp::Unary(crate::op::UnaryOp::Neg, cache), Shape::from([2, 3, 8, 4]), DType::F32);
        let value = data(&mut g, &[2, 3, 1, 4]);
        let start = g.add(NodeOp::Const(3), Shape::from([]), DType::I32);
        g.write(cache, value, start, 2);
        // The old value stays for `reader`: the write copies it whole, with the slice in it.
        let p = plan(&g, &[cache], &Options::TEST);
        let k = p.kernels.last().expect("a kernel");
        assert_eq!(k.shape.dims(), &[2, 3, 8, 4]);
        assert!(k.scatter.is_none() && k.body.iter().any(|i| matches!(i, Instr::Gather { .. })));
        assert!(p.slots.iter().all(|s| !matches!(s.source, Source::Alias(_))));
        let NodeOp::Unary(_, old) = g.node(reader).op else { panic!() };
        assert!(old != cache && g.node(old).buffer.is_some(), "the reader keeps the old buffer");
    }

    #[test]
    fn writes_are_realized_with_their_readers_and_plan_alike_at_every_position() {
        let mut g = Graph::default();
        let mut cache = crate::schedule::PlanCache::default();
        let c1 = cache_write(&mut g, 1);
        let r1 = g.add(NodeOp::Unary(crate::op::UnaryOp::Exp, c1), Shape::from([2, 3, 8, 4]), DType::F32);
        let (p1, hit) = cache.plan(&g, &[r1], &Options::TEST);
        assert!(!hit);
        assert!(p1.outputs.contains(&c1), "the write is an output too");
        let c2 = cache_write(&mut g, 6);
        let r2 = g.add(NodeOp::Unary(crate::op::UnaryOp::Exp, c2), Shape::from([2, 3, 8, 4]), DType::F32);
        let (p2, hit) = cache.plan(&g, &[r2], &Options::TEST);
        assert!(hit, "another position is the same plan");
        let k = &p2.kernels[0];
        assert!(k.consts.iter().any(|&(at, _)| k.params[at] == 6));
    }
}
