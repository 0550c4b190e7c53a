//! Dispatches that run several kernels side by side: consecutive kernels of which none reads or writes what
//! another writes join one dispatch (`Kernel::joins`), each member on its own range of workgroups.
//!
//! Ordered by depth (`by_depth`), independent kernels sit side by side; joined, they share one launch. On by
//! `Device::set_grouping` (`LAZOR_GROUP=1`): many small independent kernels ran faster joined, but nanoGPT's step ran
//! slightly slower in fewer dispatches (docs/BENCHMARKS.md, "Grouped dispatches"): alone, a kernel off its chain of
//! dependent kernels overlaps the chain's next kernel; joined, the next dispatch waits for both members. Products never
//! join: a shader holding two products ran each slower (its registers are the larger member's and more; the tiled
//! product alone sits at the driver's cap).

use crate::hash::FastSet;
use crate::kernel::{Kernel, Kind};

/// The most kernels one dispatch runs. Lavapipe (Mesa 22.3) crashed running some shaders of three members
/// (three folds, or two folds and a map, with subgroup operations), never of two.
pub(super) const MAX_MEMBERS: usize = 2;

/// Marks the kernels that join the kernel before them, within `max_bindings` storage bindings (the group's
/// parameters and each member's own) and `workgroup_bytes` of workgroup memory a dispatch.
pub(super) fn join(kernels: &mut [Kernel], max_bindings: usize, workgroup_bytes: u32) {
    let mut run = Run::default();
    for k in kernels.iter_mut() {
        k.joins = run.admits(k, max_bindings, workgroup_bytes);
        if !k.joins {
            run = Run::default();
        }
        run.add(k);
    }
}

/// The dispatch being grown.
#[derive(Default)]
struct Run {
    members: usize,
    /// Whether a member is a product, which runs alone.
    product: bool,
    bindings: usize,
    workgroup_bytes: u32,
    reads: FastSet<usize>,
    writes: FastSet<usize>,
}

impl Run {
    fn admits(&self, k: &Kernel, max_bindings: usize, workgroup_bytes: u32) -> bool {
        let Some(bytes) = k.workgroup_bytes() else { return false };
        let writes = written(k);
        self.members > 0
            && self.members < MAX_MEMBERS
            && !self.product
            && !matches!(k.kind, Kind::Matmul(_))
            && 1 + self.bindings + k.bindings() <= max_bindings
            && self.workgroup_bytes + bytes <= workgroup_bytes
            && k.inputs.iter().all(|i| !self.writes.contains(&i.0))
            && writes.iter().all(|s| !self.writes.contains(s) && !self.reads.contains(s))
    }

    fn add(&mut self, k: &Kernel) {
        self.members += 1;
        self.product |= matches!(k.kind, Kind::Matmul(_));
        self.bindings += k.bindings();
        self.workgroup_bytes += k.workgroup_bytes().unwrap_or(u32::MAX / 2);
        self.reads.extend(k.inputs.iter().map(|i| i.0));
        self.writes.extend(written(k));
    }
}

/// The slots `k` writes: its outputs, and the inputs it stores into.
fn written(k: &Kernel) -> Vec<usize> {
    let outs = k.outputs.iter().map(|o| o.0);
    outs.chain(k.aliases.iter().map(|&(i, _)| k.inputs[i].0)).collect()
}

#[cfg(test)]
mod tests {
    use crate::graph::build::{data, fold};
    use crate::graph::Graph;
    use crate::kernel::{dispatches, Kind};
    use crate::op::ReduceOp;
    use crate::schedule::{plan, Options};

    const GROUP: Options = Options { group: true, ..Options::TEST };

    #[test]
    fn kernels_join_only_what_they_do_not_read_and_free_after_the_dispatch() {
        // Two chains of two folds: the first folds of each run side by side, then the second folds.
        let mut g = Graph::default();
        let (x, y) = (data(&mut g, &[8, 16]), data(&mut g, &[12, 16]));
        let (t, s) = (fold(&mut g, ReduceOp::Sum, x, 1), fold(&mut g, ReduceOp::Max, y, 1));
        let (a, c) = (fold(&mut g, ReduceOp::Sum, t, 0), fold(&mut g, ReduceOp::Sum, s, 0));
        let p = plan(&g, &[a, c], &GROUP);
        assert_eq!(p.kernels.len(), 4);
        assert_eq!(dispatches(&p.kernels), vec![0..2, 2..4]);
        // `t` and `s` are last read by the second dispatch's two kernels; both go back after it.
        assert!(p.frees[2].is_empty(), "{:?}", p.frees);
        assert_eq!(p.frees[3].len(), 2, "{:?}", p.frees);
        // Off, every kernel alone; the plans differ, so neither is the other's from the cache.
        let off = plan(&g, &[a, c], &Options::TEST);
        assert_eq!(dispatches(&off.kernels).len(), 4);
        assert!(off.kernels.iter().all(|k| !k.joins));
        // Three folds side by side, then a fold of the third: it may not join the third's dispatch, which has
        // room for it, since it reads what that dispatch writes.
        let mut g = Graph::default();
        let xs: Vec<_> = (0..3).map(|i| data(&mut g, &[8 + i, 16])).collect();
        let folds: Vec<_> = xs.iter().map(|&x| fold(&mut g, ReduceOp::Sum, x, 1)).collect();
        let last = fold(&mut g, ReduceOp::Max, folds[2], 0);
        let p = plan(&g, &[folds[0], folds[1], last], &GROUP);
        assert_eq!(dispatches(&p.kernels), vec![0..2, 2..3, 3..4]);
    }

    #[test]
    fn dispatches_hold_two_kernels_and_products_run_alone() {
        let mut g = Graph::default();
        let xs: Vec<_> = (0..5).map(|i| data(&mut g, &[8 + i, 16])).collect();
        let folds: Vec<_> = xs.iter().map(|&x| fold(&mut g, ReduceOp::Sum, x, 1)).collect();
        let p = plan(&g, &folds, &GROUP);
        assert_eq!(dispatches(&p.kernels), vec![0..2, 2..4, 4..5]);
        let (a, b) = (data(&mut g, &[32, 16]), data(&mut g, &[16, 32]));
        let mm =
            g.add(crate::graph::NodeOp::Matmul(a, b, crate::op::Tri::Full), [32, 32].into(), crate::dtype::DType::F32);
        let p = plan(&g, &[folds[0], mm, folds[1]], &GROUP);
        let kinds: Vec<bool> = p.kernels.iter().map(|k| matches!(k.kind, Kind::Matmul(_))).collect();
        for run in dispatches(&p.kernels) {
            assert!(run.len() == 1 || run.clone().all(|i| !kinds[i]), "a product joined: {kinds:?}");
        }
        // Only neighbours join: the folds on either side of the product stay apart.
        assert_eq!(dispatches(&p.kernels).len(), 3);
    }
}
