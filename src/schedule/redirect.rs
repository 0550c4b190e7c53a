//! Products stored where their copy would go: a matmul whose only reader copies it whole into another layout (a
//! permutation, or one part of a concatenation) stores through that layout itself, and the copy goes.
//!
//! Attention makes both: its output `[b, heads, t, d]` is copied to `[b, t, heads * d]` for the projection, and its
//! three input gradients are stacked into the gradient of the fused `q k v` projection. Those copies were a kernel
//! each, a measurable part of nanoGPT's step (figures: docs/notes/source-measurements.md, `src/schedule/redirect.rs`).
//! A product's tiles can as well store each element at its place in the copy: strides per axis of the product and an
//! offset ([`Kernel::store_view`]).

use super::{Slot, Source};
use crate::dtype::DType;
use crate::hash::{FastMap, FastSet};
use crate::kernel::{Instr, Kernel, Kind};
use crate::shape::Shape;

/// One part of a copy kernel: the kernel of the product it reads, and the strides and offset that product stores
/// through into the copy's output.
struct Part {
    writer: usize,
    strides: Vec<i64>,
    offset: i64,
}

/// Removes each copy kernel whose every part can be stored by its product directly (see the module), pointing the
/// products at its output.
pub(super) fn redirect(seen: &FastSet<crate::graph::NodeId>, slots: &[Slot], kernels: Vec<Kernel>) -> Vec<Kernel> {
    let mut writers: FastMap<usize, Vec<usize>> = FastMap::default();
    let mut readers: FastMap<usize, usize> = FastMap::default();
    for (i, k) in kernels.iter().enumerate() {
        k.outputs.iter().for_each(|o| writers.entry(o.0).or_default().push(i));
        k.inputs.iter().for_each(|s| *readers.entry(s.0).or_default() += 1);
    }
    let mut kernels: Vec<Option<Kernel>> = kernels.into_iter().map(Some).collect();
    for c in 0..kernels.len() {
        let copy = kernels[c].as_ref().expect("copies are removed after they are looked at");
        let Some(parts) = parts(copy, &|s: usize| {
            let slot = &slots[s];
            let only = matches!(writers.get(&s).map(Vec::as_slice), Some([w]) if *w < c);
            if !only {
                return None;
            }
            let fresh = slot.source == Source::Kernel && !seen.contains(&slot.node) && readers.get(&s) == Some(&1);
            let w = writers[&s][0];
            let k = kernels[w].as_ref().filter(|k| fresh && storable(k))?;
            Some((w, k.shape.clone()))
        }) else {
            continue;
        };
        let out = copy.outputs[0].0;
        kernels[c] = None;
        for part in parts {
            let w = kernels[part.writer].as_mut().expect("a product is not a copy");
            w.outputs[0].0 = out;
            w.store_view = Some(w.params.len());
            w.params.extend(part.strides.iter().chain([&part.offset]).map(|&v| v as i32 as u32));
            if let Kind::Matmul(mm) = &mut w.kind {
                // 16-byte stores need 4 neighbouring columns adjacent and every quad's start aligned.
                let (cols, others) = part.strides.split_last().expect("a product has two axes or more");
                mm.quad &= *cols == 1 && others.iter().chain([&part.offset]).all(|s| s % 4 == 0);
            }
            w.fused_ops += 1;
        }
    }
    kernels.into_iter().flatten().collect()
}

/// Whether kernel `w` can store its output through a view: a product with one f32 output, which it stores nowhere
/// else.
fn storable(w: &Kernel) -> bool {
    matches!(w.kind, Kind::Matmul(_))
        && w.outputs.len() == 1
        && w.out_types[0] == DType::F32
        && w.aliases.is_empty()
        && w.store_view.is_none()
}

/// The parts of `copy` if it is a copy of products into its one f32 output, each product read whole, once, in an
/// order its own strides can reach: its output is one load, or a concatenation whose parts are each one load.
/// `product(slot)` names the kernel that can store the input in `slot` through a view, if any, and its shape.
fn parts(copy: &Kernel, product: &dyn Fn(usize) -> Option<(usize, Shape)>) -> Option<Vec<Part>> {
    if copy.kind != Kind::Elementwise || copy.outputs.len() != 1 || !copy.tiles.is_empty() || !copy.aliases.is_empty() {
        return None;
    }
    if copy.out_types[0] != DType::F32 || copy.store_view.is_some() {
        return None;
    }
    let dims = copy.shape.dims();
    let strides: Vec<i64> = Shape::contiguous_strides(&copy.shape).iter().map(|&s| s as i64).collect();
    let value = copy.outputs[0].1;
    // Each loaded instruction, with its frame, the extents it covers there and the frame's offset into the output.
    let mut loads: Vec<(usize, usize, Vec<usize>, i64)> = Vec::new();
    match &copy.body[value] {
        Instr::Load { .. } => loads.push((value, 0, dims.to_vec(), 0)),
        Instr::Cat { frame: 0, axis, parts } => {
            let mut lo = 0i64;
            for part in parts {
                let frame = copy.frames[part.frame - 1];
                let (shift, bound) = (copy.signed(frame.shift), copy.signed(part.bound));
                if part.body.len() != 1 || part.value != part.body.start || frame.parent != 0 || lo != shift {
                    return None;
                }
                let mut extents = dims.to_vec();
                extents[*axis] = (bound - shift) as usize;
                loads.push((part.value, part.frame, extents, shift * strides[*axis]));
                lo = bound;
            }
            if lo != dims[*axis] as i64 {
                return None;
            }
        }
        _ => return None,
    }
    // Every instruction is one of those loads or the concatenation.
    if copy.body.len() != loads.len() + usize::from(loads.len() > 1 || loads[0].0 != value) {
        return None;
    }
    let mut parts = Vec::with_capacity(loads.len());
    let mut inputs = FastSet::default();
    for (at, frame, extents, offset) in loads {
        let Instr::Load { input, view, .. } = copy.body[at] else { return None };
        if copy.in_types[input] != DType::F32 || !inputs.insert(input) || view.map_or(0, |v| v.frame) != frame {
            return None;
        }
        let (writer, shape) = product(copy.inputs[input].0)?;
        let (read, start): (Vec<i64>, i64) = match view {
            None => (strides.clone(), 0),
            Some(v) => ((0..dims.len()).map(|d| copy.signed(v.at + d)).collect(), copy.signed(v.at + dims.len())),
        };
        if start != 0 {
            return None;
        }
        let strides = place(shape.dims(), &extents, &read, &strides)?;
        parts.push(Part { writer, strides, offset });
    }
    Some(parts)
}

/// The strides a product of extents `dims` stores through so that its element lands where a copy puts it: the copy
/// covers `extents` (its axes), reading the product at `read` strides (its axes) and writing at `strides`. Each
/// product axis longer than 1 must be one copy axis of the same extent read at the product's own stride, and every
/// copy axis longer than 1 one of them: the copy then reads the whole product once, and the product's element at
/// a coordinate is the copy's at the matching one.
fn place(dims: &[usize], extents: &[usize], read: &[i64], strides: &[i64]) -> Option<Vec<i64>> {
    let own = Shape::from(dims).contiguous_strides();
    let mut used = vec![false; extents.len()];
    let mut out = Vec::with_capacity(dims.len());
    for (p, &e) in dims.iter().enumerate() {
        if e == 1 {
            out.push(0);
            continue;
        }
        let j = (0..extents.len()).find(|&j| !used[j] && extents[j] == e && read[j] == own[p] as i64)?;
        used[j] = true;
        out.push(strides[j]);
    }
    (0..extents.len()).all(|j| used[j] || extents[j] == 1).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::build::data;
    use crate::graph::{Graph, NodeId, NodeOp};
    use crate::op::Tri;
    use crate::view::View;

    #[test]
    fn a_product_lands_where_its_copy_reads_it() {
        // `[2, 3, 5, 4]` read as `[2, 5, 3, 4]`: its axes 1 and 2 swap places in the copy.
        let read = [60, 4, 20, 1];
        let copy = [60, 12, 4, 1];
        assert_eq!(place(&[2, 3, 5, 4], &[2, 5, 3, 4], &read, &copy), Some(vec![60, 4, 12, 1]));
        // One part of a stack along an axis of extent 1 in the part; the product's unit axis stores nowhere.
        assert_eq!(place(&[1, 5, 4], &[5, 1, 4], &[4, 0, 1], &[8, 4, 1]), Some(vec![0, 8, 1]));
        // Not the whole product (an extent differs), a read twice along two axes, a broadcast read.
        assert_eq!(place(&[2, 3, 5, 4], &[2, 5, 2, 4], &read, &copy), None);
        assert_eq!(place(&[3, 4], &[3, 4], &[4, 4], &[4, 1]), None);
        assert_eq!(place(&[3, 4], &[3, 2, 4], &[4, 0, 1], &[8, 4, 1]), None);
    }

    /// `x y` (`[2, 3, 33, 32]`) read by its copy as `[2, 33, 3 * 32]`, the operand of the product with `w`.
    fn heads(g: &mut Graph) -> (NodeId, NodeId) {
        heads_of(g, [2, 3, 33, 32], 32, Tri::Full)
    }

    /// `x y` of `[b, h, t, d]` (`x` of depth `k`, keeping `tri`) read by its copy as `[b, t, h * d]`, the operand of
    /// the product with `w`.
    fn heads_of(g: &mut Graph, [b, h, t, d]: [usize; 4], k: usize, tri: Tri) -> (NodeId, NodeId) {
        let (x, y, w) = (data(g, &[b, h, t, k]), data(g, &[b, h, k, d]), data(g, &[h * d, 5]));
        let p = g.add(NodeOp::Matmul(x, y, tri), Shape::from([b, h, t, d]), DType::F32);
        let strides = vec![(h * t * d) as isize, d as isize, (t * d) as isize, 1];
        let swapped = View { shape: Shape::from([b, t, h, d]), strides: strides.into(), offset: 0 };
        let v = g.add(NodeOp::View(swapped, p), Shape::from([b, t, h, d]), DType::F32);
        let c = g.add(NodeOp::Contiguous(v), Shape::from([b, t, h, d]), DType::F32);
        let flat = Shape::from([b * t, h * d]);
        let flat = g.add(NodeOp::View(View::contiguous(&flat), c), flat, DType::F32);
        (c, g.add(NodeOp::Matmul(flat, w, Tri::Full), Shape::from([b * t, 5]), DType::F32))
    }

    #[test]
    fn thin_and_triangular_products_store_through_views_too() {
        // A thin product (8 columns, each thread a whole row of them) and a causal mask's `P v` (A's upper
        // triangle dropped, on the square tile): their WGSL compiles with the view's stores.
        for (dims, k, tri) in [([2, 3, 300, 8], 64, Tri::Full), ([2, 3, 64, 32], 64, Tri::ALower)] {
            let mut g = Graph::default();
            let (_, out) = heads_of(&mut g, dims, k, tri);
            let p = super::super::plan(&g, &[out], &super::super::Options::TEST);
            assert_eq!(p.kernels.len(), 2, "{dims:?}");
            let Kind::Matmul(mm) = p.kernels[0].kind else { panic!("a product first") };
            assert_eq!((mm.thin.is_some(), mm.tri), (tri == Tri::Full, tri), "{dims:?}");
            assert!(p.kernels[0].store_view.is_some(), "{dims:?}");
            crate::backend::wgpu::codegen::validate(&crate::backend::wgpu::codegen::generate(
                &p.kernels[0],
                &Default::default(),
            ));
        }
    }

    #[test]
    fn a_product_read_only_by_its_copy_stores_through_it() {
        let mut g = Graph::default();
        let (c, out) = heads(&mut g);
        let p = super::super::plan(&g, &[out], &super::super::Options::TEST);
        assert_eq!(p.kernels.len(), 2, "the product, then the next one: no copy");
        let k = &p.kernels[0];
        let at = k.store_view.expect("stored through a view");
        let strides: Vec<i32> = k.params[at..at + 5].iter().map(|&w| w as i32).collect();
        assert_eq!(strides, [3168, 32, 96, 1, 0], "axes of [2, 33, 3, 32], offset 0");
        assert_eq!(k.outputs[0].0, p.slot_of(c).expect("the copy's node has the slot"));
        assert!(p.kernels[1].inputs.iter().any(|&(s, _)| s == k.outputs[0].0), "read by the next product");
        let src = crate::backend::wgpu::codegen::generate(k, &Default::default());
        crate::backend::wgpu::codegen::validate(&src);
        assert!(src.contains("store4(") && src.contains(") >> 2u]"), "16-byte stores at the view's index");
    }

    #[test]
    fn a_copy_that_is_asked_for_or_read_elsewhere_stays() {
        let mut g = Graph::default();
        let (c, out) = heads(&mut g);
        // The product asked for too keeps its own buffer and the copy its kernel.
        let product = g.node(g.node(c).op.inputs()[0]).op.inputs()[0];
        let p = super::super::plan(&g, &[out, product], &super::super::Options::TEST);
        assert_eq!(p.kernels.len(), 3);
        assert!(p.kernels.iter().all(|k| k.store_view.is_none()));
    }
}
