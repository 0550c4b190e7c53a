//! Looking inside: the graph behind tensors as Graphviz DOT, its nodes grouped by the kernel they fuse into, and the
//! WGSL of the kernels the next realize would run.

use crate::backend::wgpu::codegen::{dispatch_source, Target};
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

/// The WGSL of every dispatch the next realize of `tensors` would run, each with its name as profiles and
/// `LAZOR_DEBUG` give it: what a wgpu device compiles, for its features as set now (subgroups, native f16, tensor
/// cores). The CPU backend runs the same kernels without WGSL: for it, the source an adapter without optional
/// features compiles (what any WebGPU browser accepts). Runs nothing; empty when everything is realized.
///
/// # Panics
/// If the tensors live on different devices.
///
/// # Examples
/// ```
/// let dev = lazor::Device::cpu();
/// let x = lazor::Tensor::from_vec_on(vec![1.0, -2.0, 3.0], [3], &dev);
/// let y = (x.exp() + 1.0).relu();
/// let kernels = lazor::debug::wgsl(&[&y]);
/// assert_eq!(kernels.len(), 1, "exp, add and relu fuse into one kernel");
/// assert!(kernels[0].1.contains("@compute"));
/// ```
#[track_caller]
pub fn wgsl(tensors: &[&Tensor]) -> Vec<(String, String)> {
    let Some(first) = tensors.first() else { return Vec::new() };
    for t in tensors {
        ok(first.device.check_same(&t.device, "wgsl"));
    }
    let ids: Vec<NodeId> = tensors.iter().map(|t| t.id).collect();
    let opts = first.device.schedule_options();
    let target = match first.device.inner.backend.wgpu() {
        Some(w) => w.target(),
        None => Target::default(),
    };
    let plan = {
        let mut state = first.device.state();
        let crate::realize::EngineState { graph, plans, .. } = &mut *state;
        plans.plan(graph, &ids, &opts).0
    };
    crate::kernel::dispatches(&plan.kernels)
        .into_iter()
        .map(|run| {
            let members = &plan.kernels[run];
            let name = members.iter().map(|k| k.name()).collect::<Vec<_>>().join(" | ");
            (name, dispatch_source(members, &target))
        })
        .collect()
}
