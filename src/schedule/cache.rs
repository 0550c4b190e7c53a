//! The plan cache: a realize whose graph has the structure of an earlier realize's reuses that realize's plan.

// Planning (fusion, lowering, the memory plan) took most of a layer norm's host time per realize (figures:
// docs/notes/source-measurements.md, `src/schedule/cache.rs`), while programs mostly repeat a few structures at fixed
// shapes. The key is the realized subgraph with its nodes named by their place in topological order: each node's op
// with every operand that is not a node (`NodeOp::signature`), its shape and type, whether a leaf holds a buffer, the
// places of its inputs, then the places of the requested outputs and the schedule's options. `plan` reads nothing else
// of the graph (node ids only name nodes; buffer keys are looked up again) but constants' values, which only fill
// parameters (`Kernel::consts` says which), so a hit is the plan `plan` would make once this realize's constants are
// written into those parameters and its nodes and buffers replace the ones the plan was made with. A loop whose scalars
// change every step (a learning rate, a step count) reuses its plan too.

use super::{dedup, plan_ordered, toposort, Options, Plan, Slot, Source};
use crate::buffer::BufferKey;
use crate::graph::{Graph, NodeId, NodeOp};
use crate::hash::{FastMap, FastSet};
use crate::kernel::Kernel;
use std::sync::Arc;

/// Plans kept; past this the least recently used goes.
const MAX_PLANS: usize = 256;

/// Words of the largest key kept (about 8,000 nodes): a graph past it is planned every time rather than let 256
/// such keys hold hundreds of megabytes.
const MAX_KEY_WORDS: usize = 1 << 16;

/// A plan with its nodes named by their place in topological order.
struct Template {
    /// Each slot as (place of its node, bytes, source); an `Existing` source is refilled from the node.
    slots: Vec<(u32, u64, Source)>,
    /// The kernels as planned; their `consts` name the nodes of the realize that planned them.
    kernels: Arc<[Kernel]>,
    /// Parameters holding a constant: (kernel, parameter, place of the constant's node).
    consts: Vec<(usize, usize, u32)>,
    frees: Arc<[Vec<usize>]>,
    outputs: Vec<u32>,
    empty: Vec<u32>,
    used: u64,
    /// [`Plan::family`] of the plans made from it.
    family: u64,
}

/// The next [`Plan::family`]: process-wide, so two devices' plans never share one.
fn next_family() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Template {
    /// The kernels with the constants of the realize ordered as `order`, shared with the template, which keeps the
    /// latest constants: where they changed, written in place if no earlier plan still holds the kernels (a loop
    /// whose position or step count changes every realize copies nothing), else into a copy that the template
    /// keeps from then on. Also says whether the constants changed.
    fn kernels(&mut self, graph: &Graph, order: &[NodeId]) -> (Arc<[Kernel]>, bool) {
        let value = |place: u32| match graph.node(order[place as usize]).op {
            NodeOp::Const(bits) => bits,
            _ => unreachable!("the key places a constant there"),
        };
        let differs = |&(k, p, place): &(usize, usize, u32)| self.kernels[k].params[p] != value(place);
        let changed = self.consts.iter().any(differs);
        if changed {
            let kernels = Arc::make_mut(&mut self.kernels);
            for &(k, p, place) in &self.consts {
                kernels[k].params[p] = value(place);
            }
        }
        (self.kernels.clone(), changed)
    }
}

/// A device's recent plans, by the structure of what they realize.
#[derive(Default)]
pub struct PlanCache {
    plans: FastMap<Vec<u64>, Template>,
    /// The key being built, kept to reuse its allocation.
    key: Vec<u64>,
    place: super::Places,
    clock: u64,
}

impl PlanCache {
    /// The plan of realizing `outputs`, as [`super::plan`] makes it, and whether it came from the cache.
    pub fn plan(&mut self, graph: &Graph, outputs: &[NodeId], opts: &Options) -> (Plan, bool) {
        // Repeated outputs are keyed as given (toposort visits each node once): only a miss deduplicates them.
        let order = toposort::toposort(graph, outputs);
        // Slices written into buffers are realized with whatever reads them (`write.rs`).
        let outputs = &super::write::with_writes(graph, &order, outputs);
        let (unique, seen) = dedup(outputs);
        let donors = self.make_key(graph, &order, outputs, &seen, opts);
        self.clock += 1;
        if let Some(t) = self.plans.get_mut(self.key.as_slice()) {
            t.used = self.clock;
            let node = |p: &u32| order[*p as usize];
            let slots = t
                .slots
                .iter()
                .map(|&(p, bytes, source)| {
                    let node = order[p as usize];
                    let source = match source {
                        Source::Existing(_) => Source::Existing(graph.node(node).buffer.expect("a keyed buffer")),
                        s => s,
                    };
                    Slot { node, bytes, source }
                })
                .collect();
            let (kernels, changed) = t.kernels(graph, &order);
            let plan = Plan {
                slots,
                kernels,
                frees: t.frees.clone(),
                outputs: t.outputs.iter().map(node).collect(),
                empty: t.empty.iter().map(node).collect(),
                nodes: order.len(),
                family: Some(t.family),
            };
            // Debug builds check the rule a rewritten plan rests on: a constant's value changes nothing but the
            // parameters it fills. A scheduler that ever decides something by a constant's value fails here.
            if cfg!(debug_assertions) && changed {
                let fresh = plan_ordered(graph, unique, &seen, &order, &donors, opts);
                let (reused, fresh) = (without_consts(&plan.kernels), without_consts(&fresh.kernels));
                assert_eq!(reused, fresh, "lazor: a reused plan with new constants");
            }
            return (plan, true);
        }
        let mut plan = plan_ordered(graph, unique, &seen, &order, &donors, opts);
        if self.key.len() > MAX_KEY_WORDS {
            return (plan, false);
        }
        if self.plans.len() >= MAX_PLANS {
            let oldest = self.plans.iter().min_by_key(|(_, t)| t.used).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.plans.remove(&k);
            }
        }
        let place = |id: &NodeId| self.place[*id];
        let template = Template {
            slots: plan
                .slots
                .iter()
                .map(|s| {
                    let source = match s.source {
                        Source::Existing(_) => Source::Existing(BufferKey::default()),
                        other => other,
                    };
                    (place(&s.node), s.bytes, source)
                })
                .collect(),
            kernels: plan.kernels.clone(),
            consts: plan
                .kernels
                .iter()
                .enumerate()
                .flat_map(|(k, kernel)| kernel.consts.iter().map(move |&(p, at)| (k, p, at)))
                .collect(),
            frees: plan.frees.clone(),
            outputs: plan.outputs.iter().map(place).collect(),
            empty: plan.empty.iter().map(place).collect(),
            used: self.clock,
            family: next_family(),
        };
        plan.family = Some(template.family);
        self.plans.insert(self.key.clone(), template);
        (plan, false)
    }

    /// Plans kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.plans.len()
    }

    /// Builds the key of realizing `outputs` (ordered as `order`) into `self.key`, and each node's place.
    /// Returns the realize's donors ([`super::donors`]), which the key records and a fresh plan uses.
    fn make_key(
        &mut self,
        graph: &Graph,
        order: &[NodeId],
        outputs: &[NodeId],
        seen: &FastSet<NodeId>,
        opts: &Options,
    ) -> FastSet<NodeId> {
        let (key, place) = (&mut self.key, &mut self.place);
        key.clear();
        place.clear();
        key.extend([
            u64::from(opts.fuse),
            u64::from(opts.group),
            u64::from(opts.half_operands),
            opts.max_bindings as u64,
            opts.max_ops as u64,
            order.len() as u64,
        ]);
        let tile = opts.matmul_tile.map_or([0; 5], |t| [t.bm, t.bn, t.bk, t.tm, t.tn]);
        key.extend(tile.map(u64::from));
        let tiles = &opts.matmul_tiles;
        for t in [tiles.large, tiles.small, tiles.tall, tiles.wide] {
            key.extend([t.bm, t.bn, t.bk, t.tm, t.tn].map(u64::from));
        }
        key.push(tiles.min_large_groups as u64);
        place.extend(order.iter().enumerate().map(|(p, &id)| (id, p as u32)));
        // Whether a leaf's buffer may be overwritten depends on who else holds it, which the structure does not say.
        let donors = super::donors_placed(graph, order, seen, place);
        for &id in order {
            let node = graph.node(id);
            node.op.signature(key);
            let leaf = matches!(node.op, NodeOp::Buffer) && node.buffer.is_some();
            let donor = u64::from(donors.contains(&id));
            key.push((node.dtype as u64) << 32 | u64::from(leaf) << 31 | donor << 30 | node.shape.ndim() as u64);
            key.extend(node.shape.dims().iter().map(|&d| d as u64));
            // Inputs come before their consumer in `order`, so each has its place already.
            key.extend(node.op.inputs().iter().map(|&i| u64::from(place[i])));
        }
        key.extend(outputs.iter().map(|&o| u64::from(place[o])));
        donors
    }
}

/// The kernels, each without its `consts` (which name the nodes of the realize that planned it), as text: what
/// two plans of one structure must agree on.
fn without_consts(kernels: &[Kernel]) -> String {
    let bare: Vec<Kernel> = kernels.iter().map(|k| Kernel { consts: Vec::new(), ..k.clone() }).collect();
    format!("{bare:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::graph::build::{bin, data, fold, scalar, un};
    use crate::op::{BinaryOp, ReduceOp, UnaryOp};
    use crate::shape::Shape;
    use crate::view::View;

    const FUSE: Options = Options::TEST;

    /// A layer norm of `x` as users write it: `(x - mean) / sqrt(var + eps)`.
    fn layer_norm(g: &mut Graph, x: NodeId, eps: f32) -> NodeId {
        let n = g.node(x).shape.dims()[1] as f32;
        let (sum, inv) = (fold(g, ReduceOp::Sum, x, 1), scalar(g, 1.0 / n));
        let mean = bin(g, BinaryOp::Mul, sum, inv);
        let d = bin(g, BinaryOp::Sub, x, mean);
        let sq = bin(g, BinaryOp::Mul, d, d);
        let ssum = fold(g, ReduceOp::Sum, sq, 1);
        let var = bin(g, BinaryOp::Mul, ssum, inv);
        let e = scalar(g, eps);
        let v = bin(g, BinaryOp::Add, var, e);
        let s = un(g, UnaryOp::Sqrt, v);
        bin(g, BinaryOp::Div, d, s)
    }

    /// The plan with node ids replaced by their place in `order`, for comparing plans of two graphs. A reused
    /// plan's `Kernel::consts` name the nodes of the realize that planned it, so they are left out.
    fn by_place(plan: &Plan, order: &[NodeId]) -> String {
        let place = |id: NodeId| order.iter().position(|&o| o == id).expect("a planned node");
        let slots: Vec<_> = plan.slots.iter().map(|s| (place(s.node), s.bytes, s.source)).collect();
        let outputs: Vec<_> = plan.outputs.iter().map(|&o| place(o)).collect();
        let kernels = without_consts(&plan.kernels);
        format!("{slots:?} {kernels} {:?} {outputs:?} {:?} {}", plan.frees, plan.empty, plan.nodes)
    }

    #[test]
    fn a_repeated_structure_reuses_the_plan_with_this_realizes_nodes() {
        let mut g = Graph::default();
        let mut cache = PlanCache::default();
        let x = data(&mut g, &[16, 64]);
        let first = layer_norm(&mut g, x, 1e-5);
        let (p1, hit1) = cache.plan(&g, &[first], &FUSE);
        assert!(!hit1, "a new structure is planned");
        // The same structure on other nodes (and the same input): a hit, naming the new nodes.
        let second = layer_norm(&mut g, x, 1e-5);
        let (p2, hit2) = cache.plan(&g, &[second], &FUSE);
        assert!(hit2, "the same structure is reused");
        assert_eq!(p2.outputs, vec![second]);
        let order = toposort::toposort(&g, &[second]);
        assert_eq!(by_place(&p2, &order), by_place(&super::super::plan(&g, &[second], &FUSE), &order));
        assert!(Arc::ptr_eq(&p1.kernels, &p2.kernels), "kernels are shared, not rebuilt");
        assert!(p1.family.is_some() && p1.family == p2.family, "one family: a backend keeps its pipelines");
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn other_constants_reuse_the_plan_with_their_values_in_its_parameters() {
        let mut g = Graph::default();
        let mut cache = PlanCache::default();
        let x = data(&mut g, &[16, 64]);
        let first = layer_norm(&mut g, x, 1e-5);
        let (p1, _) = cache.plan(&g, &[first], &FUSE);
        let second = layer_norm(&mut g, x, 1e-3);
        let (p2, hit) = cache.plan(&g, &[second], &FUSE);
        assert!(hit, "a new constant is the same structure");
        let order = toposort::toposort(&g, &[second]);
        assert_eq!(by_place(&p2, &order), by_place(&super::super::plan(&g, &[second], &FUSE), &order));
        assert!(!Arc::ptr_eq(&p1.kernels, &p2.kernels), "the parameters were rewritten in a copy: p1 holds its own");
        let holds = |p: &Plan, eps: f32| p.kernels[0].params.contains(&eps.to_bits());
        assert!(holds(&p1, 1e-5) && holds(&p2, 1e-3));
        // The same constants again: the template's kernels, shared.
        let again = layer_norm(&mut g, x, 1e-3);
        let (p3, hit) = cache.plan(&g, &[again], &FUSE);
        assert!(hit && Arc::ptr_eq(&p2.kernels, &p3.kernels));
        // Once no plan holds them, new constants are written into the template's kernels in place.
        let at = Arc::as_ptr(&p3.kernels);
        drop((p1, p2, p3));
        let fourth = layer_norm(&mut g, x, 1e-2);
        let (p4, hit) = cache.plan(&g, &[fourth], &FUSE);
        assert!(hit && std::ptr::eq(Arc::as_ptr(&p4.kernels), at) && holds(&p4, 1e-2), "rewritten in place");
        assert!(p4.family.is_some(), "other constants, the same family");
        let order = toposort::toposort(&g, &[fourth]);
        assert_eq!(by_place(&p4, &order), by_place(&super::super::plan(&g, &[fourth], &FUSE), &order));
    }

    #[test]
    fn anything_the_plan_depends_on_misses() {
        let mut g = Graph::default();
        let mut cache = PlanCache::default();
        let x = data(&mut g, &[16, 64]);
        let y = data(&mut g, &[16, 64]);
        let wide = data(&mut g, &[16, 128]);
        let base = layer_norm(&mut g, x, 1e-5);
        assert!(!cache.plan(&g, &[base], &FUSE).1);
        let wide = layer_norm(&mut g, wide, 1e-5);
        assert!(!cache.plan(&g, &[wide], &FUSE).1, "another shape");
        // Another op, axis, type, view, set of outputs or option: each a new plan.
        let e1 = un(&mut g, UnaryOp::Exp, x);
        let e2 = un(&mut g, UnaryOp::Sin, x);
        let f0 = fold(&mut g, ReduceOp::Sum, x, 0);
        let f1 = fold(&mut g, ReduceOp::Sum, x, 1);
        let xi = g.add(NodeOp::Data(vec![0; 16 * 64]), Shape::from([16, 64]), DType::I32);
        let ei = g.add(NodeOp::Unary(UnaryOp::Neg, xi), Shape::from([16, 64]), DType::I32);
        let vt = View::contiguous(&Shape::from([16, 64])).permute(&[1, 0]);
        let t = g.add(NodeOp::View(vt, x), Shape::from([64, 16]), DType::F32);
        let et = un(&mut g, UnaryOp::Exp, t);
        let xy = bin(&mut g, BinaryOp::Add, x, y);
        let xx = bin(&mut g, BinaryOp::Add, x, x);
        let mut seen = Vec::new();
        let mut families = crate::hash::FastSet::default();
        for outs in [vec![e1], vec![e2], vec![f0], vec![f1], vec![ei], vec![et], vec![xy], vec![xx], vec![e1, e2]] {
            let (plan, hit) = cache.plan(&g, &outs, &FUSE);
            assert!(!hit, "{outs:?} after {seen:?}");
            assert!(families.insert(plan.family.expect("a kept plan")), "another structure, another family");
            seen.push(outs);
        }
        let unfused = Options { fuse: false, ..FUSE };
        assert!(!cache.plan(&g, &[e1], &unfused).1, "fusion off is another plan");
        assert!(cache.plan(&g, &[e1], &FUSE).1, "and the first is still kept");
    }

    #[test]
    fn a_realized_input_is_bound_to_its_own_buffer() {
        let mut g = Graph::default();
        let mut cache = PlanCache::default();
        let a = data(&mut g, &[8]);
        let b = data(&mut g, &[8]);
        let mut freed = Vec::new();
        let (ka, kb) = (BufferKey::from(slotmap::KeyData::from_ffi(1)), BufferKey::from(slotmap::KeyData::from_ffi(2)));
        g.set_realized(a, Some(ka), &mut freed);
        g.set_realized(b, Some(kb), &mut freed);
        let ea = un(&mut g, UnaryOp::Exp, a);
        let eb = un(&mut g, UnaryOp::Exp, b);
        assert!(!cache.plan(&g, &[ea], &FUSE).1);
        let (plan, hit) = cache.plan(&g, &[eb], &FUSE);
        assert!(hit);
        let sources: Vec<Source> = plan.slots.iter().map(|s| s.source).collect();
        assert!(sources.contains(&Source::Existing(kb)) && !sources.contains(&Source::Existing(ka)), "{sources:?}");
    }

    #[test]
    fn an_upload_is_not_a_buffer_and_huge_graphs_are_not_kept() {
        let mut g = Graph::default();
        let mut cache = PlanCache::default();
        let a = data(&mut g, &[8]);
        let ea = un(&mut g, UnaryOp::Exp, a);
        assert!(!cache.plan(&g, &[ea], &FUSE).1);
        let b = data(&mut g, &[8]);
        g.set_realized(b, Some(BufferKey::from(slotmap::KeyData::from_ffi(1))), &mut Vec::new());
        let eb = un(&mut g, UnaryOp::Exp, b);
        assert!(!cache.plan(&g, &[eb], &FUSE).1, "reading a buffer is another plan than uploading");
        let mut x = data(&mut g, &[4]);
        for _ in 0..MAX_KEY_WORDS / 4 {
            x = un(&mut g, UnaryOp::Neg, x);
        }
        assert!(!cache.plan(&g, &[x], &FUSE).1);
        let (unkept, hit) = cache.plan(&g, &[x], &FUSE);
        assert!(!hit, "a key past MAX_KEY_WORDS is not kept");
        assert_eq!(unkept.family, None, "nor given a family");
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn the_least_recently_used_plan_goes_first() {
        let mut g = Graph::default();
        let mut cache = PlanCache::default();
        let mut nodes = Vec::new();
        for i in 0..=MAX_PLANS {
            let x = data(&mut g, &[i + 1]);
            nodes.push(un(&mut g, UnaryOp::Exp, x));
        }
        for &n in &nodes[..MAX_PLANS] {
            cache.plan(&g, &[n], &FUSE);
        }
        assert!(cache.plan(&g, &[nodes[0]], &FUSE).1, "touch the first");
        cache.plan(&g, &[nodes[MAX_PLANS]], &FUSE);
        assert_eq!(cache.len(), MAX_PLANS);
        assert!(cache.plan(&g, &[nodes[0]], &FUSE).1, "the touched plan stayed");
        assert!(!cache.plan(&g, &[nodes[1]], &FUSE).1, "the oldest went");
    }
}
