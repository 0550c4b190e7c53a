//! Orders the part of the graph that a realize needs, inputs before consumers, without recursion.

use crate::graph::{Graph, NodeId};

/// Every node reachable from `roots`, each after all of its inputs. Iterative depth-first search, so a chain of any
/// length fits in heap memory rather than on the stack.
pub fn toposort(graph: &Graph, roots: &[NodeId]) -> Vec<NodeId> {
    // Visited nodes by slot: no hashing per node.
    let mut visited: slotmap::SecondaryMap<NodeId, ()> = slotmap::SecondaryMap::new();
    let mut order = Vec::new();
    // (node, its inputs are done): a node is pushed again, marked done, beneath its inputs.
    let mut stack: Vec<(NodeId, bool)> = roots.iter().rev().map(|&r| (r, false)).collect();
    while let Some((id, done)) = stack.pop() {
        if done {
            order.push(id);
        } else if visited.insert(id, ()).is_none() {
            stack.push((id, true));
            for input in graph.node(id).op.inputs().into_iter().rev() {
                if !visited.contains_key(input) {
                    stack.push((input, false));
                }
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::graph::NodeOp;
    use crate::op::{BinaryOp, UnaryOp};
    use crate::shape::Shape;

    #[test]
    fn diamond_is_ordered_once() {
        let mut g = Graph::default();
        let s = || Shape::from([3]);
        let a = g.add(NodeOp::Data(vec![0; 3]), s(), DType::F32);
        let b = g.add(NodeOp::Unary(UnaryOp::Exp, a), s(), DType::F32);
        let c = g.add(NodeOp::Unary(UnaryOp::Sin, a), s(), DType::F32);
        let d = g.add(NodeOp::Binary(BinaryOp::Add, b, c), s(), DType::F32);
        let order = toposort(&g, &[d, b]);
        assert_eq!(order.len(), 4);
        let pos = |n| order.iter().position(|&x| x == n).unwrap();
        assert!(pos(a) < pos(b) && pos(a) < pos(c) && pos(b) < pos(d) && pos(c) < pos(d));
    }

    #[test]
    fn long_chain_does_not_overflow() {
        let mut g = Graph::default();
        let mut x = g.add(NodeOp::Data(vec![0; 1]), Shape::from([1]), DType::F32);
        for _ in 0..100_000 {
            x = g.add(NodeOp::Unary(UnaryOp::Neg, x), Shape::from([1]), DType::F32);
        }
        assert_eq!(toposort(&g, &[x]).len(), 100_001);
    }
}
