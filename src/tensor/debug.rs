//! Looking inside: the graph behind tensors as Graphviz DOT, its nodes grouped by the kernel they fuse into.

use crate::error::ok;
use crate::graph::NodeId;
use crate::schedule::dot::graph_dot;
use crate::tensor::Tensor;

/// The graph behind `tensors` as Graphviz DOT: one box per node (its op, shape and type), one cluster per kernel
/// the next realize of them would run (labelled with the kernel's name, as profiles name it), buffers (data,
/// realized values, stored results) as ellipses. Runs nothing. Render with `dot -Tsvg`.
///
/// The grouping is the scheduler's first: where lowering finds a view it cannot express over its source, the
/// realize stores that source and runs one kernel more than drawn.
///
/// # Panics
/// If the tensors live on different devices.
///
/// # Examples
/// ```no_run
/// let x = lazor::Tensor::from_vec(vec![1.0, -2.0, 3.0], [3]);
/// let y = (x.exp() + 1.0).relu().sum_all();
/// let text = lazor::debug::dot(&[&y]);
/// assert!(text.starts_with("digraph"));
/// ```
#[track_caller]
pub fn dot(tensors: &[&Tensor]) -> String {
    let Some(first) = tensors.first() else { return "digraph lazor {\n}\n".to_string() };
    for t in tensors {
        ok(first.device.check_same(&t.device, "dot"));
    }
    let ids: Vec<NodeId> = tensors.iter().map(|t| t.id).collect();
    let opts = first.device.schedule_options();
    let state = first.device.state();
    graph_dot(&state.graph, &ids, &opts)
}
