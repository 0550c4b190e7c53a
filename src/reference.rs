//! The CPU reference interpreter: evaluates a graph with the op table's definitions, one op at a time, in plain
//! Rust. Tests check every backend against it.

use crate::graph::{NodeId, Op};
use crate::op::{BinaryOp, ReduceOp, UnaryOp};
use crate::schedule::toposort::toposort;
use crate::shape::Shape;
use crate::tensor::Tensor;
use crate::view::View;
use std::collections::HashMap;

/// The value of a unary op at `x` (the op table's definition).
pub fn unary(op: UnaryOp, x: f32) -> f32 {
    op.eval(x)
}

/// The value of a binary op at `(a, b)` (the op table's definition).
pub fn binary(op: BinaryOp, a: f32, b: f32) -> f32 {
    op.eval(a, b)
}

/// The elements of `values` (row-major) that `view` selects, row-major.
pub fn gather(values: &[f32], view: &View) -> Vec<f32> {
    let dims = view.shape.dims();
    (0..view.shape.numel())
        .map(|mut i| {
            let mut at = view.offset;
            for d in (0..dims.len()).rev() {
                at += (i % dims[d]) as isize * view.strides[d];
                i /= dims[d];
            }
            values[at as usize]
        })
        .collect()
}

/// `values` (row-major, of `shape`) folded with `op` along `axis`, which the result keeps with extent 1. Sums and
/// products accumulate in `f64`: the reference is the exact side of every tolerance.
pub fn reduce(values: &[f32], shape: &Shape, op: ReduceOp, axis: usize) -> Vec<f32> {
    let dims = shape.dims();
    let n = dims[axis];
    let inner: usize = dims[axis + 1..].iter().product();
    let outer: usize = dims[..axis].iter().product();
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let at = |r: usize| values[(o * n + r) * inner + i];
            let v = match op {
                ReduceOp::Sum => (0..n).map(|r| at(r) as f64).sum::<f64>() as f32,
                ReduceOp::Prod => (0..n).map(|r| at(r) as f64).product::<f64>() as f32,
                ReduceOp::Max | ReduceOp::Min => (0..n).fold(op.identity(), |acc, r| op.combine().eval(acc, at(r))),
            };
            out.push(v);
        }
    }
    out
}

/// The batched matrix product of `a` (`[..., m, k]`) and `b` (`[..., k, n]`, the same batch axes), accumulated in
/// `f64` and rounded once: the exact side of every matmul tolerance.
pub fn matmul(a: &[f32], b: &[f32], sa: &Shape, sb: &Shape) -> Vec<f32> {
    let (da, db) = (sa.dims(), sb.dims());
    let r = da.len();
    let (m, k, n) = (da[r - 2], da[r - 1], db[r - 1]);
    let batch: usize = da[..r - 2].iter().product();
    let mut out = Vec::with_capacity(batch * m * n);
    for bi in 0..batch {
        let (a, b) = (&a[bi * m * k..], &b[bi * k * n..]);
        for i in 0..m {
            for j in 0..n {
                out.push((0..k).map(|p| a[i * k + p] as f64 * b[p * n + j] as f64).sum::<f64>() as f32);
            }
        }
    }
    out
}

/// `parts` (row-major, of `shapes`) joined along axis `dim`.
pub fn concat(parts: &[&[f32]], shapes: &[&Shape], dim: usize) -> Vec<f32> {
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
pub fn broadcast(values: &[f32], from: &Shape, to: &Shape) -> Vec<f32> {
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

/// Evaluates `tensors` on the CPU by interpreting their graph. Values already on the device (realized tensors) are
/// read back and taken as given; everything else is computed here.
///
/// # Panics
/// On a device failure while reading a realized value back.
pub fn eval(tensors: &[&Tensor]) -> Vec<Vec<f32>> {
    let Some(first) = tensors.first() else { return Vec::new() };
    let device = first.device().clone();
    let roots: Vec<NodeId> = tensors.iter().map(|t| t.id).collect();
    let stored: Vec<NodeId> = {
        let state = device.state();
        toposort(&state.graph, &roots).into_iter().filter(|&id| matches!(state.graph.node(id).op, Op::Buffer)).collect()
    };
    let read = if stored.is_empty() { Vec::new() } else { device.read(&stored).unwrap_or_else(|e| panic!("{e}")) };
    let mut values: HashMap<NodeId, Vec<f32>> = stored.into_iter().zip(read).collect();

    let state = device.state();
    let graph = &state.graph;
    for id in toposort(graph, &roots) {
        let node = graph.node(id);
        let shape = &node.shape;
        let v = match &node.op {
            Op::Buffer => continue,
            Op::Data(d) => d.clone(),
            Op::Const(c) => vec![*c; shape.numel()],
            Op::Unary(op, a) => values[a].iter().map(|&x| op.eval(x)).collect(),
            Op::Binary(op, a, b) => {
                let va = broadcast(&values[a], &graph.node(*a).shape, shape);
                let vb = broadcast(&values[b], &graph.node(*b).shape, shape);
                va.iter().zip(&vb).map(|(&x, &y)| op.eval(x, y)).collect()
            }
            Op::View(view, a) => gather(&values[a], view),
            Op::Contiguous(a) => values[a].clone(),
            Op::Reduce(op, a, axis) => reduce(&values[a], &graph.node(*a).shape, *op, *axis),
            Op::Matmul(a, b) => matmul(&values[a], &values[b], &graph.node(*a).shape, &graph.node(*b).shape),
            Op::Cat(parts, dim) => {
                let vals: Vec<&[f32]> = parts.iter().map(|p| values[p].as_slice()).collect();
                let shapes: Vec<&Shape> = parts.iter().map(|p| &graph.node(*p).shape).collect();
                concat(&vals, &shapes, *dim)
            }
        };
        values.insert(id, v);
    }
    roots.iter().map(|r| values[r].clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
