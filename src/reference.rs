//! The CPU reference interpreter: what every op means, once, in plain Rust. Tests check the GPU against it.

use crate::graph::{NodeId, Op};
use crate::op::{BinaryOp, UnaryOp};
use crate::schedule::toposort::toposort;
use crate::shape::Shape;
use crate::tensor::Tensor;
use std::collections::HashMap;

/// `sqrt(2 / pi)`, the GELU tanh approximation's constant.
const GELU_C: f32 = 0.797_884_6;

/// The value of a unary op at `x`.
pub fn unary(op: UnaryOp, x: f32) -> f32 {
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Ln => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Recip => 1.0 / x,
        UnaryOp::Square => x * x,
        UnaryOp::Gelu => 0.5 * x * (1.0 + (GELU_C * (x + 0.044715 * x * x * x)).tanh()),
        UnaryOp::Silu => x / (1.0 + (-x).exp()),
    }
}

/// The value of a binary op at `(a, b)`.
pub fn binary(op: BinaryOp, a: f32, b: f32) -> f32 {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Max if a.is_nan() || b.is_nan() => f32::NAN,
        BinaryOp::Max => a.max(b),
        BinaryOp::Min if a.is_nan() || b.is_nan() => f32::NAN,
        BinaryOp::Min => a.min(b),
        BinaryOp::Pow => a.powf(b),
    }
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
            Op::Unary(op, a) => values[a].iter().map(|&x| unary(*op, x)).collect(),
            Op::Binary(op, a, b) => {
                let va = broadcast(&values[a], &graph.node(*a).shape, shape);
                let vb = broadcast(&values[b], &graph.node(*b).shape, shape);
                va.iter().zip(&vb).map(|(&x, &y)| binary(*op, x, y)).collect()
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
    fn ieee_edges() {
        assert!(binary(BinaryOp::Max, f32::NAN, 1.0).is_nan());
        assert_eq!(binary(BinaryOp::Pow, -2.0, 3.0), -8.0);
        assert!(binary(BinaryOp::Pow, -2.0, 0.5).is_nan());
        assert_eq!(unary(UnaryOp::Relu, -3.0), 0.0);
        assert!(unary(UnaryOp::Relu, f32::NAN).is_nan());
        assert_eq!(binary(BinaryOp::Div, 1.0, 0.0), f32::INFINITY);
    }
}
