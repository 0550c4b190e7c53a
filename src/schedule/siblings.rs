//! Sibling folds: reduce kernels of one depth that fold the same domain along the same axis in the same way and
//! read a common buffer merge into one kernel that walks the domain once and keeps a fold per value. A layer
//! norm's weight and bias gradients, `(dy * xhat).sum(0)` and `dy.sum(0)`, read `dy` once, and their second passes
//! (each reading partials the merged first pass wrote) merge too; so do `x.min()` and `x.max()`.

use crate::kernel::{CatPart, Frame, Instr, Kernel, Kind, Phase, ViewRef};
use std::ops::Range;

/// The most folds one kernel keeps: each holds its own unrolled accumulators in registers (16 per thread in a
/// column fold).
const MAX_FOLDS: usize = 4;

/// `kernels` (in [`super::by_depth`]'s order, so kernels of one depth are neighbours and none of them reads
/// another) with each sibling fold merged into the first kernel of its depth it fits: that kernel keeps its main
/// fold and holds the sibling's as [`Kernel::phases`], its epilogue reading it as [`Instr::Folded`].
pub(super) fn merge(kernels: Vec<Kernel>, max_bindings: usize) -> Vec<Kernel> {
    let n = kernels.len();
    let writer = super::writers(&kernels);
    let depth = super::depths(&kernels, &writer);
    let mut kernels: Vec<Option<Kernel>> = kernels.into_iter().map(Some).collect();
    // The kernel each one was merged into (itself if none): where a merged kernel's outputs now come from.
    let mut into: Vec<usize> = (0..n).collect();
    for j in 0..n {
        if !kernels[j].as_ref().is_some_and(|k| foldable(k) && k.phases.is_empty()) {
            continue;
        }
        let b = kernels[j].as_ref().expect("not merged yet");
        let writers = |k: &Kernel| -> Vec<usize> {
            k.inputs.iter().filter_map(|(s, _)| writer.get(s)).map(|&w| into[w]).collect()
        };
        let b_writers = writers(b);
        let related = |a: &Kernel| {
            a.inputs.iter().any(|x| b.inputs.iter().any(|y| x.0 == y.0))
                || writers(a).iter().any(|w| b_writers.contains(w))
        };
        let target = (0..j)
            .rev()
            .take_while(|&i| depth[i] == depth[j])
            .find(|&i| kernels[i].as_ref().is_some_and(|a| fits(a, b, max_bindings) && related(a)));
        if let Some(i) = target {
            let b = kernels[j].take().expect("not merged yet");
            absorb(kernels[i].as_mut().expect("a live kernel"), b);
            into[j] = i;
        }
    }
    kernels.into_iter().flatten().collect()
}

/// Whether `k` is a fold whose walk another fold can share: a reduce kernel reading no tiles and storing at its own
/// index.
fn foldable(k: &Kernel) -> bool {
    matches!(k.kind, Kind::Reduce(_))
        && k.vectors == 1
        && k.tiles.is_empty()
        && k.aliases.is_empty()
        && k.store_view.is_none()
        && k.dims_at.is_some()
}

/// Whether `b` (one fold) can join `a`: the same domain, axis, layout (rows or columns), elements per thread,
/// chunks and teams, room for one more fold, and bindings within `max`.
fn fits(a: &Kernel, b: &Kernel, max: usize) -> bool {
    let (Kind::Reduce(ra), Kind::Reduce(rb)) = (a.kind, b.kind) else { return false };
    let same = ra.axis == rb.axis
        && ra.rows == rb.rows
        && a.width == b.width
        && ra.column_team == rb.column_team
        && ra.partial == rb.partial
        && a.shape == b.shape
        && a.params[0] == b.params[0]
        && a.params[ra.chunks_at] == b.params[rb.chunks_at]
        && a.params[ra.team_at] == b.params[rb.team_at];
    if !same || !foldable(a) || a.phases.len() + 2 > MAX_FOLDS {
        return false;
    }
    let shared = b.inputs.iter().zip(&b.in_types).filter(|&(x, t)| shared_input(a, *x, *t).is_some()).count();
    let inputs = a.inputs.len() + b.inputs.len() - shared;
    1 + a.outputs.len() + b.outputs.len() + inputs <= max
}

/// Which input of `a` binds `input` (its slot, and whether as vectors) with element type `dt`, if one does.
fn shared_input(a: &Kernel, input: (usize, bool), dt: crate::dtype::DType) -> Option<usize> {
    a.inputs.iter().zip(&a.in_types).position(|(&x, &t)| x == input && t == dt)
}

/// Merges fold kernel `b` into `a`. The body becomes `a`'s prologue, `b`'s prologue, `a`'s epilogue, `b`'s
/// epilogue; `b`'s parameters follow `a`'s, its frames follow `a`'s, its inputs are `a`'s where `a` binds the same
/// buffer, and its fold becomes `a`'s next sibling (a first pass stores that sibling's partials as its next output).
fn absorb(a: &mut Kernel, b: Kernel) {
    let (Kind::Reduce(mut ra), Kind::Reduce(rb)) = (a.kind, b.kind) else { unreachable!("two folds") };
    let (apro, bpro, aepi) = (ra.prologue, rb.prologue, a.body.len() - ra.prologue);
    let (p0, f0) = (a.params.len(), a.frames.len());
    let sibling = a.phases.len();
    let inputs: Vec<usize> = b
        .inputs
        .iter()
        .zip(&b.in_types)
        .map(|(&x, &t)| {
            shared_input(a, x, t).unwrap_or_else(|| {
                a.inputs.push(x);
                a.in_types.push(t);
                a.inputs.len() - 1
            })
        })
        .collect();
    let a_at = |i: usize| if i < apro { i } else { i + bpro };
    let b_at = |i: usize| if i < bpro { apro + i } else { apro + bpro + aepi + (i - bpro) };
    let keep = Renumber { at: &a_at, input: &|i| i, param: &|p| p, frame: &|f| f, reduced: None };
    let moved = Renumber {
        at: &b_at,
        input: &|i| inputs[i],
        param: &|p| p + p0,
        frame: &|f| if f == 0 { 0 } else { f + f0 },
        reduced: Some(sibling),
    };
    let mut body = Vec::with_capacity(a.body.len() + b.body.len());
    let mut types = Vec::with_capacity(body.capacity());
    let segments = [(&a.body, &a.types, 0..apro, &keep), (&b.body, &b.types, 0..bpro, &moved)];
    let tails = [(&a.body, &a.types, apro..a.body.len(), &keep), (&b.body, &b.types, bpro..b.body.len(), &moved)];
    for (src, ty, range, r) in segments.into_iter().chain(tails) {
        for i in range {
            body.push(r.instr(&src[i]));
            types.push(ty[i]);
        }
    }
    for o in &mut a.outputs {
        o.1 = a_at(o.1);
    }
    a.outputs.extend(b.outputs.iter().map(|&(s, v)| (s, b_at(v))));
    a.out_types.extend(&b.out_types);
    a.frames.extend(b.frames.iter().map(|f| moved.frame_of(f)));
    a.consts.extend(b.consts.iter().map(|&(p, id)| (p + p0, id)));
    a.params.extend(&b.params);
    // Earlier siblings' values lie in `a`'s prologue, whose numbering stays.
    a.phases.push(Phase::Fold { op: rb.op, body: apro..apro + bpro, value: b_at(rb.value), output: None });
    ra.prologue = apro + bpro;
    a.kind = Kind::Reduce(ra);
    a.body = body;
    a.types = types;
    a.fused_ops += b.fused_ops;
}

/// How one kernel's instructions, inputs, parameters and frames are numbered in the merged kernel; `reduced`: the
/// sibling its [`Instr::Reduced`] becomes.
struct Renumber<'a> {
    at: &'a dyn Fn(usize) -> usize,
    input: &'a dyn Fn(usize) -> usize,
    param: &'a dyn Fn(usize) -> usize,
    frame: &'a dyn Fn(usize) -> usize,
    reduced: Option<usize>,
}

impl Renumber<'_> {
    fn instr(&self, i: &Instr) -> Instr {
        let at = self.at;
        let view = |v: &Option<ViewRef>| v.map(|v| ViewRef { at: (self.param)(v.at), frame: (self.frame)(v.frame) });
        match i {
            Instr::Load { input, view: v, access } => {
                Instr::Load { input: (self.input)(*input), view: view(v), access: *access }
            }
            Instr::Scalar(p) => Instr::Scalar((self.param)(*p)),
            Instr::Unary(op, a) => Instr::Unary(*op, at(*a)),
            Instr::Binary(op, a, b) => Instr::Binary(*op, at(*a), at(*b)),
            Instr::Cast(a) => Instr::Cast(at(*a)),
            Instr::Select(c, a, b) => Instr::Select(at(*c), at(*a), at(*b)),
            Instr::Index { view: v } => Instr::Index { view: view(v) },
            Instr::Random(d, c, a, b) => Instr::Random(*d, at(*c), at(*a), at(*b)),
            Instr::Gather { input, base, index, stride_at } => Instr::Gather {
                input: (self.input)(*input),
                base: at(*base),
                index: at(*index),
                stride_at: (self.param)(*stride_at),
            },
            Instr::Reduced => match self.reduced {
                Some(s) => Instr::Folded(s),
                None => Instr::Reduced,
            },
            Instr::Folded(f) => {
                assert!(self.reduced.is_none(), "a kernel merged as a sibling has no siblings of its own");
                Instr::Folded(*f)
            }
            Instr::Cat { frame, axis, parts } => Instr::Cat {
                frame: (self.frame)(*frame),
                axis: *axis,
                parts: parts
                    .iter()
                    .map(|p| CatPart {
                        bound: (self.param)(p.bound),
                        frame: (self.frame)(p.frame),
                        body: self.range(p.body.clone()),
                        value: at(p.value),
                    })
                    .collect(),
            },
        }
    }

    /// A range of instructions within one segment (prologue or epilogue), which stays contiguous.
    fn range(&self, r: Range<usize>) -> Range<usize> {
        if r.is_empty() {
            let s = if r.start > 0 { (self.at)(r.start - 1) + 1 } else { (self.at)(0) };
            return s..s;
        }
        (self.at)(r.start)..(self.at)(r.end - 1) + 1
    }

    fn frame_of(&self, f: &Frame) -> Frame {
        Frame { parent: (self.frame)(f.parent), axis: f.axis, shift: (self.param)(f.shift) }
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::build::{bin, data, fold};
    use crate::graph::Graph;
    use crate::kernel::{Instr, Kind, Phase};
    use crate::op::{BinaryOp, ReduceOp};
    use crate::schedule::{plan, Options};

    /// A layer norm's weight and bias gradients over `[rows, 384]`: `(dy * xh).sum(0)` and `dy.sum(0)`, each with
    /// an epilogue, and a third fold that reads the first's result.
    fn gradients(rows: usize, opts: &Options) -> Vec<crate::kernel::Kernel> {
        let mut g = Graph::default();
        let (dy, xh, w) = (data(&mut g, &[rows, 384]), data(&mut g, &[rows, 384]), data(&mut g, &[1, 384]));
        let prod = bin(&mut g, BinaryOp::Mul, dy, xh);
        let gw = fold(&mut g, ReduceOp::Sum, prod, 0);
        let gw = bin(&mut g, BinaryOp::Sub, w, gw);
        let gb = fold(&mut g, ReduceOp::Max, dy, 0);
        let gb = bin(&mut g, BinaryOp::Mul, gb, w);
        plan(&g, &[gw, gb], opts).kernels.to_vec()
    }

    #[test]
    fn folds_of_one_domain_sharing_a_buffer_merge_in_both_passes() {
        let k = gradients(4096, &Options::TEST);
        assert_eq!(k.len(), 2, "partials of both, then both folds of them");
        let (Kind::Reduce(first), Kind::Reduce(second)) = (k[0].kind, k[1].kind) else { panic!("two folds") };
        assert!(first.partial && !second.partial);
        for (k, r) in [(&k[0], first), (&k[1], second)] {
            let [Phase::Fold { op: ReduceOp::Max, value, body, output: None }] = k.phases.as_slice() else {
                panic!("one sibling, the maximum: {:?}", k.phases)
            };
            assert!(*value < r.prologue && body.end == r.prologue, "the sibling's value is in the prologue");
            crate::backend::wgpu::codegen::validate(&crate::backend::wgpu::codegen::generate(k, &Default::default()));
        }
        assert_eq!(k[0].inputs.len(), 2, "dy bound once: {:?}", k[0].inputs);
        assert_eq!(k[0].outputs.len(), 2, "the partials of each fold");
        assert_eq!(k[1].inputs.len(), 3, "both folds' partials and w");
        let epilogue = &k[1].body[second.prologue..];
        assert!(epilogue.contains(&Instr::Reduced) && epilogue.contains(&Instr::Folded(0)));
        assert_eq!(k[1].outputs.len(), 2);
        // One pass: a thread per column.
        let k = gradients(64, &Options::TEST);
        assert_eq!(k.len(), 1);
        assert_eq!(k[0].phases.len(), 1);
        crate::backend::wgpu::codegen::validate(&crate::backend::wgpu::codegen::generate(&k[0], &Default::default()));
    }

    #[test]
    fn row_folds_merge_and_fold_in_turn() {
        use crate::backend::wgpu::codegen::{generate, validate, Target};
        let mut g = Graph::default();
        let x = data(&mut g, &[1 << 20]);
        let (lo, hi) = (fold(&mut g, ReduceOp::Min, x, 0), fold(&mut g, ReduceOp::Max, x, 0));
        let k = plan(&g, &[lo, hi], &Options::TEST).kernels.to_vec();
        assert_eq!(k.len(), 2, "partials of both, then both folds of them");
        for k in &k {
            let Kind::Reduce(r) = k.kind else { panic!("a fold") };
            assert!(r.rows && k.phases.len() == 1);
            for subgroups in [false, true] {
                let src = generate(k, &Target { subgroups, ..Default::default() });
                validate(&src);
                // Each fold's tree on its own half of `red`.
                assert!(src.contains("let acc = s0acc;"), "{src}");
            }
        }
        assert_eq!(k[0].width, 4, "both read x 4 elements at a time");
    }

    #[test]
    fn unfused_dependent_and_unrelated_folds_stay_apart() {
        let nofuse = Options { fuse: false, ..Options::TEST };
        assert!(gradients(4096, &nofuse).iter().all(|k| k.phases.is_empty()));
        let mut g = Graph::default();
        let (x, y) = (data(&mut g, &[4096, 384]), data(&mut g, &[4096, 384]));
        // Unrelated: no buffer in common.
        let (sx, sy) = (fold(&mut g, ReduceOp::Sum, x, 0), fold(&mut g, ReduceOp::Sum, y, 0));
        // Dependent: folds x minus its own column sums.
        let centred = bin(&mut g, BinaryOp::Sub, x, sx);
        let sc = fold(&mut g, ReduceOp::Sum, centred, 0);
        let k = plan(&g, &[sx, sy, sc], &Options::TEST).kernels.to_vec();
        assert_eq!(k.len(), 6, "three folds of two passes each");
        assert!(k.iter().all(|k| k.phases.is_empty()));
    }
}
