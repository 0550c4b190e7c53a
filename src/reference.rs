//! The CPU reference interpreter: evaluates a graph with the op table's definitions, one op at a time, in plain
//! Rust, on lanes of each node's type. Tests check every backend against it.

use crate::dtype::{Class, DType};
use crate::graph::{Graph, NodeId, NodeOp};
use crate::op::{BinaryOp, ReduceOp, Tri, UnaryOp};
use crate::schedule::toposort::toposort;
use crate::shape::Shape;
use crate::tensor::element::Element;
use crate::tensor::Tensor;
use std::collections::HashMap;

/// The value of a unary op at `x` (the op table's definition).
pub fn unary(op: UnaryOp, x: f32) -> f32 {
    op.eval(x)
}

/// The value of a binary op at `(a, b)` (the op table's definition).
pub fn binary(op: BinaryOp, a: f32, b: f32) -> f32 {
    op.eval(a, b)
}

/// The elements of `values` (row-major) that `view` selects (the rule lives beside `View`; segments use it too).
pub use crate::view::gather;

/// `lanes` (row-major, of `shape`, of type `dt`) folded with `op` along `axis`, which the result keeps with
/// extent one. Float sums and products accumulate in `f64` and round once to `dt`: the exact side of every
/// tolerance; integer ones wrap.
pub fn reduce(lanes: &[u32], dt: DType, shape: &Shape, op: ReduceOp, axis: usize) -> Vec<u32> {
    let dims = shape.dims();
    let n = dims[axis];
    let inner: usize = dims[axis + 1..].iter().product();
    let outer: usize = dims[..axis].iter().product();
    let mut out = Vec::with_capacity(outer * inner);
    let combine = op.combine();
    for o in 0..outer {
        for i in 0..inner {
            let at = |r: usize| lanes[(o * n + r) * inner + i];
            let exact = |x: f64| dt.round(x as f32).to_bits();
            let v = match (op, dt.class()) {
                (ReduceOp::Sum, Class::Float) => exact((0..n).map(|r| f32::from_bits(at(r)) as f64).sum::<f64>()),
                (ReduceOp::Prod, Class::Float) => exact((0..n).map(|r| f32::from_bits(at(r)) as f64).product::<f64>()),
                _ => (0..n).fold(op.identity_lane(dt), |acc, r| combine.eval_lane(dt.lanes(), acc, at(r))),
            };
            out.push(v);
        }
    }
    out
}

/// The batched matrix product of `a` (`[..., m, k]`) and `b` (`[..., k, n]`, the same batch axes), float lanes,
/// accumulated in `f64` and rounded once to `dt`: the exact side of every matmul tolerance.
pub fn matmul(a: &[u32], b: &[u32], sa: &Shape, sb: &Shape, dt: DType, tri: Tri) -> Vec<u32> {
    let (da, db) = (sa.dims(), sb.dims());
    let r = da.len();
    let (m, k, n) = (da[r - 2], da[r - 1], db[r - 1]);
    let batch: usize = da[..r - 2].iter().product();
    let f = |x: u32| f32::from_bits(x) as f64;
    let mut out = Vec::with_capacity(batch * m * n);
    for bi in 0..batch {
        let (a, b) = (&a[bi * m * k..], &b[bi * k * n..]);
        for i in 0..m {
            for j in 0..n {
                if !tri.keeps_out(i, j) {
                    out.push(dt.round(tri.fill()).to_bits());
                    continue;
                }
                let kept = (0..k).filter(|&p| tri.keeps_a(i, p));
                let dot = kept.map(|p| f(a[i * k + p]) * f(b[p * n + j])).sum::<f64>();
                out.push(dt.round(dot as f32).to_bits());
            }
        }
    }
    out
}

/// `parts` (row-major, of `shapes`) joined along axis `dim`.
pub fn concat<T: Copy>(parts: &[&[T]], shapes: &[&Shape], dim: usize) -> Vec<T> {
    let outer: usize = shapes.first().map_or(1, |s| s.dims()[..dim].iter().product());
    let mut out = Vec::new();
    for o in 0..outer {
        for (p, s) in parts.iter().zip(shapes) {
            let run: usize = s.dims()[dim..].iter().product();
            out.extend_from_slice(&p[o * run..(o + 1) * run]);
        }
    }
    out
}

/// `values` (of shape `from`) broadcast to `to`, row-major.
pub fn broadcast<T: Copy>(values: &[T], from: &Shape, to: &Shape) -> Vec<T> {
    if from == to {
        return values.to_vec();
    }
    let strides = from.broadcast_strides(to);
    let dims = to.dims();
    (0..to.numel())
        .map(|mut i| {
            let mut at = 0;
            for d in (0..dims.len()).rev() {
                at += (i % dims[d]) * strides[d];
                i /= dims[d];
            }
            values[at]
        })
        .collect()
}

/// Evaluates `tensors` on the CPU by interpreting their graph, each as f32 values (other types converted as
/// [`Tensor::to_dtype`] would). Values already on the device (realized tensors) are read back and taken as given;
/// everything else is computed here.
///
/// # Panics
/// On a device failure while reading a realized value back.
pub fn eval(tensors: &[&Tensor]) -> Vec<Vec<f32>> {
    as_f32(eval_lanes(tensors), tensors)
}

/// [`eval`], reading the realized values back without blocking: the oracle of the browser test suite, where a
/// WebGPU device cannot block.
///
/// # Panics
/// As [`eval`].
pub async fn eval_async(tensors: &[&Tensor]) -> Vec<Vec<f32>> {
    let Some((device, roots, stored)) = leaves(tensors) else { return Vec::new() };
    let read =
        if stored.is_empty() { Vec::new() } else { device.read_async(&stored).await.unwrap_or_else(|e| panic!("{e}")) };
    as_f32(interpret_read(&device, &roots, stored, read), tensors)
}

/// Lanes of each tensor's type as f32 values.
fn as_f32(lanes: Vec<Vec<u32>>, tensors: &[&Tensor]) -> Vec<Vec<f32>> {
    lanes
        .into_iter()
        .zip(tensors)
        .map(|(lanes, t)| lanes.into_iter().map(|l| f32::from_bits(DType::F32.cast_lane(t.dtype(), l))).collect())
        .collect()
}

/// The exact values of `t` as `T` (its element type), by the reference.
///
/// # Panics
/// If `T` is not `t`'s element type, or as [`eval`].
pub fn eval_as<T: Element>(t: &Tensor) -> Vec<T> {
    assert_eq!(T::DTYPE, t.dtype(), "lazor: reference::eval_as: the tensor is {}", t.dtype());
    eval_lanes(&[t]).remove(0).into_iter().map(T::from_lane).collect()
}

/// The device's values of `t` (realized and read back), as lanes of its type: what [`eval_lanes`] checks.
///
/// # Panics
/// On a device failure.
pub fn device_lanes(t: &Tensor) -> Vec<u32> {
    let words = t.device().read(&[t.id]).unwrap_or_else(|e| panic!("{e}")).remove(0);
    t.dtype().decode(&words, t.numel())
}

/// Evaluates `tensors` by interpreting their graph, each as lanes of its type (see [`DType`]).
///
/// # Panics
/// As [`eval`].
pub fn eval_lanes(tensors: &[&Tensor]) -> Vec<Vec<u32>> {
    let Some((device, roots, stored)) = leaves(tensors) else { return Vec::new() };
    let read = if stored.is_empty() { Vec::new() } else { device.read(&stored).unwrap_or_else(|e| panic!("{e}")) };
    interpret_read(&device, &roots, stored, read)
}

/// The device of `tensors`, their nodes, and the realized nodes their values depend on; `None` for no tensors.
fn leaves(tensors: &[&Tensor]) -> Option<(crate::Device, Vec<NodeId>, Vec<NodeId>)> {
    let device = tensors.first()?.device().clone();
    let roots: Vec<NodeId> = tensors.iter().map(|t| t.id).collect();
    let stored: Vec<NodeId> = {
        let state = device.state();
        toposort(&state.graph, &roots)
            .into_iter()
            .filter(|&id| matches!(state.graph.node(id).op, NodeOp::Buffer))
            .collect()
    };
    Some((device, roots, stored))
}

/// [`interpret`] on `device`'s graph, given the words read back from the realized nodes `stored`.
fn interpret_read(device: &crate::Device, roots: &[NodeId], stored: Vec<NodeId>, read: Vec<Vec<u32>>) -> Vec<Vec<u32>> {
    let state = device.state();
    let graph = &state.graph;
    let values: HashMap<NodeId, Vec<u32>> = stored
        .into_iter()
        .zip(read)
        .map(|(id, words)| {
            let node = graph.node(id);
            (id, node.dtype.decode(&words, node.shape.numel()))
        })
        .collect();
    interpret(graph, roots, values)
}

/// The values of `roots` (as lanes of their types) by interpreting `graph`, given the values of its realized
/// nodes in `values`: the interpreter itself, on a graph rather than a device (the caller reads the buffers).
pub(crate) fn interpret(graph: &Graph, roots: &[NodeId], mut values: HashMap<NodeId, Vec<u32>>) -> Vec<Vec<u32>> {
    for id in toposort(graph, roots) {
        let node = graph.node(id);
        let (shape, dt) = (&node.shape, node.dtype);
        let operand = |x: &NodeId| broadcast(&values[x], &graph.node(*x).shape, shape);
        let v = match &node.op {
            NodeOp::Buffer => continue,
            NodeOp::Data(words) => dt.decode(words, shape.numel()),
            NodeOp::Const(c) => vec![*c; shape.numel()],
            NodeOp::Arange => (0..shape.numel() as u32).collect(),
            NodeOp::Random(d, lo, hi) => {
                let key = [values[lo][0], values[hi][0]];
                (0..shape.numel() as u32).map(|i| crate::philox::sample(*d, i, key).to_bits()).collect()
            }
            NodeOp::Unary(op, a) => values[a].iter().map(|&x| op.eval_lane(dt, x)).collect(),
            NodeOp::Binary(op, a, b) => {
                let operands = graph.node(*a).dtype;
                operand(a).iter().zip(&operand(b)).map(|(&x, &y)| op.eval_lane(operands, x, y)).collect()
            }
            NodeOp::Cast(a) => values[a].iter().map(|&x| dt.cast_lane(graph.node(*a).dtype, x)).collect(),
            NodeOp::Where(c, a, b) => {
                let (c, a, b) = (operand(c), operand(a), operand(b));
                c.iter().zip(a.iter().zip(&b)).map(|(&c, (&x, &y))| if c != 0 { x } else { y }).collect()
            }
            NodeOp::View(view, a) => gather(&values[a], view),
            NodeOp::Contiguous(a) => values[a].clone(),
            NodeOp::Reduce(op, a, axis) => reduce(&values[a], dt, &graph.node(*a).shape, *op, *axis),
            NodeOp::Matmul(a, b, tri) => {
                matmul(&values[a], &values[b], &graph.node(*a).shape, &graph.node(*b).shape, dt, *tri)
            }
            NodeOp::Gather(src, index, axis) => {
                let (sshape, itype) = (&graph.node(*src).shape, graph.node(*index).dtype);
                gather_along(&values[src], sshape, &values[index], itype, shape, *axis)
            }
            NodeOp::Write(base, value, start, axis) => {
                write_slice(&values[base], shape, &values[value], &graph.node(*value).shape, values[start][0], *axis)
            }
            NodeOp::Cat(parts, dim) => {
                let vals: Vec<&[u32]> = parts.iter().map(|p| values[p].as_slice()).collect();
                let shapes: Vec<&Shape> = parts.iter().map(|p| &graph.node(*p).shape).collect();
                concat(&vals, &shapes, *dim)
            }
        };
        values.insert(id, v);
    }
    roots.iter().map(|r| values[r].clone()).collect()
}

/// `base` (of `shape`) with `value` (of `part`: `shape` but shorter along `axis`) written along `axis` from `start`
/// (an `i32` lane) on, the start clamped so that the slice stays inside: `Tensor::write_at`.
pub fn write_slice(base: &[u32], shape: &Shape, value: &[u32], part: &Shape, start: u32, axis: usize) -> Vec<u32> {
    let (len, extent) = (part.dims()[axis], shape.dims()[axis]);
    let start = (start as i32 as i64).clamp(0, (extent - len) as i64) as usize;
    let inner: usize = shape.dims()[axis + 1..].iter().product();
    let mut out = base.to_vec();
    for (j, &x) in value.iter().enumerate() {
        let (outer, rest) = (j / (len * inner), j % (len * inner));
        out[(outer * extent + start) * inner + rest] = x;
    }
    out
}

/// `torch.gather` along `axis`: at each coordinate of `shape` (the index's), the source element at the same
/// coordinates with the axis's replaced by the index; 0 where the index is out of range.
fn gather_along(src: &[u32], sshape: &Shape, index: &[u32], itype: DType, shape: &Shape, axis: usize) -> Vec<u32> {
    let (dims, sstrides) = (shape.dims(), sshape.contiguous_strides());
    let extent = sshape.dims()[axis] as i64;
    let mut coords = vec![0usize; dims.len()];
    (0..shape.numel())
        .map(|flat| {
            let mut rest = flat;
            for d in (0..dims.len()).rev() {
                coords[d] = rest % dims[d];
                rest /= dims[d];
            }
            let x = if itype == DType::U32 { index[flat] as i64 } else { index[flat] as i32 as i64 };
            if !(0..extent).contains(&x) {
                return 0;
            }
            coords[axis] = x as usize;
            src[coords.iter().zip(sstrides.iter()).map(|(c, s)| c * s).sum::<usize>()]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::View;

    #[test]
    fn broadcast_repeats_rows() {
        let v = broadcast(&[1.0, 2.0, 3.0], &Shape::from([3]), &Shape::from([2, 3]));
        assert_eq!(v, vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
        let v = broadcast(&[1.0, 2.0], &Shape::from([2, 1]), &Shape::from([2, 3]));
        assert_eq!(v, vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
    }

    #[test]
    fn gather_and_concat() {
        let v: Vec<f32> = (0..6).map(|i| i as f32).collect();
        let t = View::contiguous(&Shape::from([2, 3])).permute(&[1, 0]);
        assert_eq!(gather(&v, &t), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        let (a, b) = (Shape::from([2, 1]), Shape::from([2, 2]));
        assert_eq!(concat(&[&[1.0, 2.0], &[3.0, 4.0, 5.0, 6.0]], &[&a, &b], 1), vec![1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
    }
}
