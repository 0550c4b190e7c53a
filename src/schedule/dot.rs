//! The graph behind a realize as Graphviz DOT, its nodes grouped by the kernel they fuse into: what
//! `lazor::debug::dot` returns and `LAZOR_VIZ` writes.

use super::{kernel_nodes, Options};
use crate::graph::{Graph, NodeId, NodeOp};
use crate::hash::FastMap;
use crate::kernel::kernel_name;
use std::fmt::Write;

/// `lazor::debug::dot` over a graph: what `LAZOR_VIZ` writes for each realize.
pub(crate) fn graph_dot(graph: &Graph, outputs: &[NodeId], opts: &Options) -> String {
    let (order, kernels) = kernel_nodes(graph, outputs, opts);
    let name: FastMap<NodeId, usize> = order.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    let mut out = String::from("digraph lazor {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n");
    let mut placed = vec![false; order.len()];
    for (k, nodes) in kernels.iter().enumerate() {
        let ops: Vec<&str> = nodes.iter().filter_map(|&id| op_name(&graph.node(id).op)).collect();
        let shape = kernel_shape(graph, nodes);
        let _ = writeln!(out, "  subgraph cluster_{k} {{\n    label=\"kernel {k}: {}\";", kernel_name(&ops, &shape));
        for id in nodes {
            if !placed[name[id]] {
                placed[name[id]] = true;
                let _ = writeln!(out, "    {}", node_line(graph, *id, name[id]));
            }
        }
        out.push_str("  }\n");
    }
    for (i, &id) in order.iter().enumerate() {
        if !placed[i] {
            let _ = writeln!(out, "  {}", node_line(graph, id, i));
        }
    }
    for (i, &id) in order.iter().enumerate() {
        for input in graph.node(id).op.inputs() {
            if let Some(j) = name.get(&input) {
                let _ = writeln!(out, "  n{j} -> n{i};");
            }
        }
    }
    for id in outputs {
        let _ = writeln!(out, "  n{} [penwidth=2];", name[id]);
    }
    out.push_str("}\n");
    out
}

/// The iteration shape the kernel will have, as its name in profiles gives it: a fold's input, else the largest
/// value computed.
fn kernel_shape(graph: &Graph, nodes: &[NodeId]) -> Vec<usize> {
    let fold = nodes.iter().find_map(|&id| match graph.node(id).op {
        NodeOp::Reduce(_, x, _) => Some(x),
        _ => None,
    });
    let widest = || nodes.iter().copied().max_by_key(|&id| graph.node(id).shape.numel()).expect("a kernel node");
    graph.node(fold.unwrap_or_else(widest)).shape.dims().to_vec()
}

/// The op's name as the user called it; `None` for what computes nothing (data, views, buffers).
fn op_name(op: &NodeOp) -> Option<&'static str> {
    Some(match op {
        NodeOp::Unary(u, _) => u.name(),
        NodeOp::Binary(b, ..) => b.name(),
        NodeOp::Reduce(r, ..) => r.name(),
        NodeOp::Matmul(..) => "matmul",
        NodeOp::Cast(_) => "cast",
        NodeOp::Where(..) => "where",
        NodeOp::Random(d, ..) => d.name(),
        NodeOp::Cat(..) => "cat",
        NodeOp::Gather(..) => "gather",
        NodeOp::Write(..) => "write_at",
        NodeOp::Data(_)
        | NodeOp::Const(_)
        | NodeOp::Arange
        | NodeOp::Buffer
        | NodeOp::View(..)
        | NodeOp::Contiguous(_) => return None,
    })
}

fn node_line(graph: &Graph, id: NodeId, i: usize) -> String {
    let node = graph.node(id);
    let (label, shape) = match &node.op {
        NodeOp::Data(_) => ("data".to_string(), "ellipse"),
        NodeOp::Buffer => ("buffer".to_string(), "ellipse"),
        NodeOp::Const(c) => {
            (format!("const {}", f32::from_bits(crate::dtype::DType::F32.cast_lane(node.dtype, *c))), "plain")
        }
        NodeOp::Arange => ("arange".to_string(), "plain"),
        NodeOp::View(..) => ("view".to_string(), "box"),
        NodeOp::Contiguous(_) => ("contiguous".to_string(), "box"),
        NodeOp::Reduce(r, _, axis) => (format!("{} (axis {axis})", r.name()), "box"),
        op => (op_name(op).unwrap_or("?").to_string(), "box"),
    };
    format!("n{i} [label=\"{label}\\n{} {}\", shape={shape}];", node.shape, node.dtype)
}
