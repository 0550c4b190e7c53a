//! The scheduler: from requested outputs to an ordered list of kernels over a table of buffers, with a memory plan.
//! Pure graph code, no backend.

mod cache;
mod chunks;
mod dispatch;
pub(crate) mod dot;
mod fuse;
mod lower;
mod matmul;
mod redirect;
mod reduce;
mod siblings;
pub(crate) mod split_k;
pub mod toposort;
mod widen;
mod write;

pub use cache::PlanCache;
pub use fuse::Options;
pub(crate) use matmul::THIN;

use crate::buffer::BufferKey;
use crate::graph::{Graph, NodeId, NodeOp};
use crate::hash::{FastMap, FastSet};
use crate::kernel::{Access, Instr, Kernel};
use std::sync::Arc;

/// Each node's place in a realize's order, by slot: no hashing for the lookups every node of a plan-cache key makes.
pub(crate) type Places = slotmap::SecondaryMap<NodeId, u32>;

/// Where the value of a plan slot comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A buffer the node already holds.
    Existing(BufferKey),
    /// The node's host data, uploaded before the first kernel.
    Upload,
    /// Written by a kernel of this plan.
    Kernel,
    /// Written and read by kernels of this plan and no node's value (partial folds); `node` is the node it helps
    /// compute.
    Scratch,
    /// Written by a kernel of this plan into the buffer of slot `.0`, an input of that kernel whose value dies
    /// with it (see [`Kernel::aliases`]).
    Alias(usize),
}

/// One buffer of a plan: the node whose value it holds, its size and where the value comes from.
#[derive(Clone, Debug)]
pub struct Slot {
    pub node: NodeId,
    /// Bytes of the value (not padded).
    pub bytes: u64,
    pub source: Source,
}

/// Everything one realize does, in order.
#[derive(Debug, Default)]
pub struct Plan {
    /// Every buffer the plan touches; kernels name them by index.
    pub slots: Vec<Slot>,
    /// Kernels in execution order (shared with the plan cache).
    pub kernels: Arc<[Kernel]>,
    /// For each kernel, the intermediate slots whose last reader it is: their buffers go back to the pool after it.
    pub frees: Arc<[Vec<usize>]>,
    /// The requested outputs, without duplicates.
    pub outputs: Vec<NodeId>,
    /// Requested outputs and uploads with no elements: realized without a buffer.
    pub empty: Vec<NodeId>,
    /// Nodes the realize looked at.
    pub nodes: usize,
    /// The plan cache's name for the structure of these kernels, shared by every plan reused from the same
    /// template (they differ only in constants and buffers) and never given to another: a backend may keep what it
    /// derives from the kernels' structure (their pipelines) under it. `None` for a plan the cache did not keep.
    pub family: Option<u64>,
}

impl Plan {
    /// The slot holding `node`'s value, if the plan has one.
    pub fn slot_of(&self, node: NodeId) -> Option<usize> {
        self.slots.iter().position(|s| s.node == node && s.source != Source::Scratch)
    }
}

/// The slot table being built: one slot per node, in first-use order.
struct Slots<'a> {
    graph: &'a Graph,
    donors: &'a FastSet<NodeId>,
    slots: Vec<Slot>,
    of: FastMap<NodeId, usize>,
}

impl Slots<'_> {
    fn scratch(&mut self, node: NodeId, bytes: u64) -> usize {
        self.slots.push(Slot { node, bytes, source: Source::Scratch });
        self.slots.len() - 1
    }

    fn get(&mut self, id: NodeId) -> usize {
        if let Some(&s) = self.of.get(&id) {
            return s;
        }
        let graph = self.graph;
        let node = graph.node(id);
        let source = match (&node.op, node.buffer) {
            (NodeOp::Data(_), _) => Source::Upload,
            (NodeOp::Buffer, Some(key)) => Source::Existing(key),
            (&NodeOp::Write(base, ..), _) if write::in_place(graph, self.donors, id) => Source::Alias(self.get(base)),
            _ => Source::Kernel,
        };
        let bytes = node.dtype.bytes(node.shape.numel());
        self.slots.push(Slot { node: id, bytes, source });
        self.of.insert(id, self.slots.len() - 1);
        self.slots.len() - 1
    }
}

/// Schedules the realize of `outputs`.
///
/// # Panics
/// If lowering keeps asking to store a node that is already stored (a scheduler bug, reported rather than looped).
#[cfg(test)]
pub fn plan(graph: &Graph, outputs: &[NodeId], opts: &Options) -> Plan {
    let order = toposort::toposort(graph, outputs);
    let (unique, seen) = dedup(&write::with_writes(graph, &order, outputs));
    let donors = donors(graph, &order, &seen);
    plan_ordered(graph, unique, &seen, &order, &donors, opts)
}

/// For pictures of the graph: the nodes each future kernel computes (its stored members and the expressions
/// inlined into them), kernels in execution order, and the nodes that are buffers (leaves and stored results).
/// The first grouping, before lowering's retries: a view lowering cannot express may later split a kernel, a copy
/// its products store into themselves (`redirect.rs`) is drawn though it never runs, and sibling folds that run as
/// one kernel (`siblings.rs`) are drawn apart.
pub fn kernel_nodes(graph: &Graph, outputs: &[NodeId], opts: &Options) -> (Vec<NodeId>, Vec<Vec<NodeId>>) {
    let order = toposort::toposort(graph, outputs);
    let (_, seen) = dedup(&write::with_writes(graph, &order, outputs));
    let fusion = fuse::materialize(graph, &order, &seen, &FastSet::default(), opts);
    let groups = fuse::group(graph, &order, &fusion, opts, &FastSet::default());
    let place: FastMap<NodeId, usize> = order.iter().enumerate().map(|(i, &id)| (id, i)).collect();
    let kernels = groups
        .iter()
        .map(|g| {
            let mut nodes: Vec<NodeId> = Vec::new();
            let mut stack: Vec<NodeId> = g.members.clone();
            while let Some(id) = stack.pop() {
                if nodes.contains(&id) {
                    continue;
                }
                nodes.push(id);
                for i in graph.node(id).op.inputs() {
                    if !fusion.is_buffer(graph, i) && graph.node(i).op.is_compute() {
                        stack.push(i);
                    }
                }
            }
            nodes.sort_by_key(|id| place[id]);
            nodes
        })
        .collect();
    (order, kernels)
}

/// `outputs` without repeats, in order, and as a set.
fn dedup(outputs: &[NodeId]) -> (Vec<NodeId>, FastSet<NodeId>) {
    let mut unique = Vec::with_capacity(outputs.len());
    let mut seen = FastSet::default();
    for &o in outputs {
        if seen.insert(o) {
            unique.push(o);
        }
    }
    (unique, seen)
}

/// [`plan`] once the outputs are deduplicated (`unique`, also as the set `seen`) and ordered (`order`).
/// [`plan`] of `unique` in `order`, `donors` being [`donors`] of them (the plan cache computes it for its key).
fn plan_ordered(
    graph: &Graph,
    unique: Vec<NodeId>,
    seen: &FastSet<NodeId>,
    order: &[NodeId],
    donors: &FastSet<NodeId>,
    opts: &Options,
) -> Plan {
    // Lowering may find a view it cannot express over its source; that source is then stored, and we start over.
    let mut forced: FastSet<NodeId> = FastSet::default();
    // A member of a rows kernel that reads one of its folds other than broadcast along the rows leaves it.
    let mut apart: FastSet<NodeId> = FastSet::default();
    let (kernels, mut slots, fusion) = loop {
        let fusion = fuse::materialize(graph, order, seen, &forced, opts);
        let groups = fuse::group(graph, order, &fusion, opts, &apart);
        // Members read by another group must be written even when nobody asked for them.
        let read_elsewhere: FastSet<NodeId> = groups.iter().flat_map(|g| g.inputs.iter().copied()).collect();
        let written = |id: NodeId| seen.contains(&id) || read_elsewhere.contains(&id);
        let mut slots = Slots { graph, donors, slots: Vec::new(), of: FastMap::default() };
        let mut lower_all = || -> Result<Vec<Kernel>, NodeId> {
            let mut kernels = Vec::with_capacity(groups.len());
            for g in &groups {
                // Both closures name slots: a cell lets them share the table.
                let cell = std::cell::RefCell::new(&mut slots);
                let head = g.head.unwrap_or(g.members[0]);
                let cx = lower::GroupCtx {
                    graph,
                    fusion: &fusion,
                    grp: g,
                    written: &written,
                    slot: &mut |id| cell.borrow_mut().get(id),
                    scratch: &mut |bytes| cell.borrow_mut().scratch(head, bytes),
                    donors,
                    tile: opts.matmul_tile,
                    tiles: opts.matmul_tiles,
                    team_min: opts.row_team_min,
                };
                match g.head {
                    Some(_) if g.rows => kernels.push(reduce::lower_rows(cx)?),
                    Some(w) if matches!(graph.node(w).op, NodeOp::Write(..)) => kernels.push(write::lower(cx)?),
                    None => kernels.push(lower::lower(cx)?),
                    Some(r) if matches!(graph.node(r).op, NodeOp::Matmul(..)) => kernels.extend(matmul::lower(cx)?),
                    Some(_) => kernels.extend(reduce::lower(cx)?),
                }
            }
            Ok(kernels)
        };
        let lowered = lower_all();
        match lowered {
            Ok(kernels) => break (kernels, slots, fusion),
            // A node already stored can only be asked to leave its fold's or product's kernel (rows or epilogue).
            Err(id) if fusion.materialized.contains(&id) => {
                assert!(apart.insert(id), "lazor: scheduler asked twice to split node {id:?} from its kernel")
            }
            Err(id) => assert!(forced.insert(id), "lazor: scheduler asked twice to store node {id:?}"),
        }
    };

    let mut empty = Vec::new();
    for &id in order {
        let node = graph.node(id);
        let is_empty = node.shape.numel() == 0;
        match node.op {
            NodeOp::Data(_) if is_empty => empty.push(id),
            NodeOp::Data(_) => {
                slots.get(id);
            }
            NodeOp::Buffer => {}
            _ if is_empty && seen.contains(&id) => empty.push(id),
            _ => {}
        }
    }
    // Requested outputs that are already stored still need a slot to be read from.
    for &id in &unique {
        if graph.node(id).shape.numel() > 0 {
            slots.get(id);
        }
    }

    let kernels = by_depth(kernels);
    let kernels = if opts.fuse { siblings::merge(kernels, opts.max_bindings) } else { kernels };
    let mut kernels = redirect::redirect(seen, &slots.slots, kernels);
    donate(seen, donors, &mut slots.slots, &mut kernels);
    if opts.group {
        dispatch::join(&mut kernels, opts.max_bindings, opts.workgroup_bytes);
    }

    // Lifetimes: an intermediate (written, not requested) lives until the last kernel that reads it.
    let mut last_use: FastMap<usize, usize> = FastMap::default();
    for (k, kernel) in kernels.iter().enumerate() {
        let touched = kernel.outputs.iter().map(|o| o.0).chain(kernel.inputs.iter().map(|i| i.0));
        for s in touched {
            let slot = &slots.slots[s];
            let intermediate = fusion.materialized.contains(&slot.node) && !seen.contains(&slot.node);
            if intermediate || slot.source == Source::Scratch {
                last_use.insert(s, k);
            }
        }
    }
    let mut frees = vec![Vec::new(); kernels.len()];
    for (s, k) in last_use {
        frees[k].push(s);
    }
    // A dispatch's kernels run side by side: what one of them read last goes back when all have run, or another
    // could take it for an output while it is still read.
    for run in crate::kernel::dispatches(&kernels) {
        for k in run.start..run.end - 1 {
            let moved = std::mem::take(&mut frees[k]);
            frees[run.end - 1].extend(moved);
        }
    }
    Plan {
        slots: slots.slots,
        kernels: kernels.into(),
        frees: frees.into(),
        outputs: unique,
        empty,
        nodes: order.len(),
        family: None,
    }
}

/// `kernels` (in an order where each reads only what earlier ones write) ordered by their depth in the graph of what
/// reads what, stably: a kernel goes right after the last of the kernels it reads, so kernels that do not depend on
/// each other sit side by side and the GPU runs them together (a layer's weight gradient beside the gradient of its
/// input, which the depth-first order put at the end of the backward pass). nanoGPT's step ran faster in this order,
/// and two independent products in one realize take less time than one after the other (figures:
/// docs/notes/source-measurements.md, `src/schedule/mod.rs`). Buffers' lifetimes are planned on this order.
fn by_depth(kernels: Vec<Kernel>) -> Vec<Kernel> {
    let depth = depths(&kernels, &writers(&kernels));
    let mut at: Vec<usize> = (0..kernels.len()).collect();
    at.sort_by_key(|&i| depth[i]);
    let mut slots: Vec<Option<Kernel>> = kernels.into_iter().map(Some).collect();
    at.into_iter().map(|i| slots[i].take().expect("each kernel once")).collect()
}

/// The first kernel that writes each slot.
fn writers(kernels: &[Kernel]) -> FastMap<usize, usize> {
    let mut writer: FastMap<usize, usize> = FastMap::default();
    for (i, k) in kernels.iter().enumerate() {
        for &(s, _) in &k.outputs {
            writer.entry(s).or_insert(i);
        }
    }
    writer
}

/// Each kernel's depth in the graph of what reads what (kernels in an order where each reads only what earlier ones
/// write, `writer` from [`writers`]): 0 for a kernel that reads no kernel's output, else one more than the deepest
/// kernel it reads.
fn depths(kernels: &[Kernel], writer: &FastMap<usize, usize>) -> Vec<usize> {
    let mut depth = vec![0usize; kernels.len()];
    for (i, k) in kernels.iter().enumerate() {
        let reads = k.inputs.iter().filter_map(|(s, _)| writer.get(s)).filter(|&&w| w < i);
        depth[i] = reads.map(|&w| depth[w] + 1).max().unwrap_or(0);
    }
    depth
}

/// The leaves of `order` whose buffers a realize of `outputs` may overwrite: buffers no handle and no node outside
/// the realize refers to, read only by nodes that let go of them once it is done (requested outputs, which become
/// leaves, and nodes that only such nodes hold). An optimizer's old states, dropped as the step is built, are
/// such leaves; anything a caller still holds is not.
#[cfg(test)]
pub fn donors(graph: &Graph, order: &[NodeId], outputs: &FastSet<NodeId>) -> FastSet<NodeId> {
    let place: Places = order.iter().enumerate().map(|(p, &id)| (id, p as u32)).collect();
    donors_placed(graph, order, outputs, &place)
}

/// [`donors`], with each node's place in `order` known (`order` holds every input of its nodes). One pass from the
/// last node back, counted by place rather than in maps of nodes: a node's readers all come after it, so when it is
/// reached its count of readers in the realize and whether any of them keeps its inputs are complete. The plan
/// cache computes this for every realize, a decode step's 1,400 nodes included.
pub(super) fn donors_placed(
    graph: &Graph,
    order: &[NodeId],
    outputs: &FastSet<NodeId>,
    place: &Places,
) -> FastSet<NodeId> {
    // Per place: reads by nodes of the realize, and whether a reader keeps its inputs after it.
    let mut reads = vec![0u32; order.len()];
    let mut kept = vec![false; order.len()];
    let mut donors = FastSet::default();
    for (p, &id) in order.iter().enumerate().rev() {
        let unheld = graph.refs(id) == reads[p];
        let readers_drop = !kept[p];
        let output = outputs.contains(&id);
        let node = graph.node(id);
        if !output && unheld && readers_drop && matches!(node.op, NodeOp::Buffer) && node.buffer.is_some() {
            donors.insert(id);
        }
        // Whether this node lets go of its inputs after the realize.
        let drops = output || (unheld && readers_drop);
        for i in node.op.inputs() {
            let q = place[i] as usize;
            reads[q] += 1;
            kept[q] |= !drops;
        }
    }
    donors
}

/// Lets elementwise kernels store a requested output into the buffer of an input that dies with them (see
/// [`donors`]): an input of 4-byte elements read only by that kernel, only at the kernel's own index, into an
/// output of its type and size. So an optimizer step writes each state's new value where the old one was.
fn donate(seen: &FastSet<NodeId>, donors: &FastSet<NodeId>, slots: &mut [Slot], kernels: &mut [Kernel]) {
    if donors.is_empty() {
        return;
    }
    let mut readers: FastMap<usize, usize> = FastMap::default();
    for k in kernels.iter() {
        for &(s, _) in &k.inputs {
            *readers.entry(s).or_default() += 1;
        }
    }
    for k in kernels.iter_mut() {
        // Each element is read and stored by one thread, loads first (a tiled kernel stages only strided reads).
        if k.kind != crate::kernel::Kind::Elementwise {
            continue;
        }
        for n in 0..k.inputs.len() {
            let (s, whole) = k.inputs[n];
            let dt = k.in_types[n];
            let own = k.body.iter().all(|i| match i {
                Instr::Load { input, view, access } => *input != n || (view.is_none() && *access == Access::Own),
                Instr::Gather { input, .. } => *input != n,
                _ => true,
            });
            let donated = matches!(slots[s].source, Source::Existing(_)) && donors.contains(&slots[s].node);
            // Bound as the output is: vectors in a vectorized kernel, elements otherwise.
            let as_output = if k.width == 4 { whole } else { !whole };
            if !donated || !own || readers[&s] != 1 || dt.size_in_bytes() != 4 || !as_output {
                continue;
            }
            let free = (0..k.outputs.len()).find(|&o| {
                let out = &slots[k.outputs[o].0];
                k.out_types[o] == dt
                    && out.bytes == slots[s].bytes
                    && out.source == Source::Kernel
                    && seen.contains(&out.node)
                    && !k.aliases.iter().any(|&(_, taken)| taken == o)
            });
            if let Some(o) = free {
                k.aliases.push((n, o));
                slots[k.outputs[o].0].source = Source::Alias(s);
            }
        }
    }
}

#[cfg(test)]
mod tests;
