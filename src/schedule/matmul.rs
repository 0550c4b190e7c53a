//! Lowering a matmul group: the product with its operands' expressions (the prologue, run on every load) and the
//! elementwise members that consume it (the epilogue, run before the one store). Thin shapes (at most 16 outputs
//! along a side) run on the thin kernel or, where it would not fill the device, as folds by the reduce path, which
//! is built for memory bandwidth; everything else is one tiled kernel.

use super::lower::{kernel, GroupCtx, Lowerer};
use super::reduce::{lower_fold, Fold};
use crate::dtype::DType;
use crate::graph::{Graph, NodeId, NodeOp};
use crate::kernel::{Instr, Kernel, Kind, Matmul, MatmulTile, MatmulTiles, Thin};
use crate::op::{BinaryOp, ReduceOp, Tri};
use crate::shape::Shape;
use crate::view::View;

/// Products with at most this many rows or columns of output are thin kernels ([`Thin`]) or folds over k, like
/// matrix-vector products: a tile would be mostly empty and there would be few of them, each walking all of k alone.
/// The weight gradient of a 10-class output layer, `h^T @ d` of [1024, 4096] x [4096, 10], ran as a tiled kernel at a
/// small fraction of the product rate (16 workgroups of 64 x 64, 10 columns used; figures:
/// docs/notes/source-measurements.md, `src/schedule/matmul.rs`).
pub(crate) const THIN: usize = crate::kernel::THIN_SIDE;

/// Tiles of 8 x 8 outputs per thread store 16-byte vectors ([`Matmul::quad`]) only where k is at most this: the vector
/// stores took short products faster (the attention's `q k^T`, k = 64; nanoGPT's `[16384, 384] x [384, n]`) but long
/// ones slower (4096^3; k = 1024-1536). Those threads sit at the driver's 128-register cap, which the epilogue's 4
/// columns at a time likely tighten for the main loop. `bench shapes` ran faster with the bound at 384 than with
/// vectors always (docs/matmul.md, "16-byte stores"). The deep large tile (quad fetches, 16 steps of k) stores vectors
/// at any k: there the bound cost the long products, which ran faster with vectors always, the split-k weight gradients
/// most (figures: docs/notes/source-measurements.md, `src/schedule/matmul.rs`).
const QUAD_MAX_K: usize = 384;

/// The tile for a product of `batch` matrices of `m` x `n` outputs keeping `tri`; `half` when both operands are f16
/// (or both bf16), which run on tensor cores where the device has them: there the 64 x 128 block was fastest at
/// 2048^3 and 4096^3, ahead of 128 x 128 (docs/matmul.md), at a small cost to the tiled kernel. A triangular product takes the square
/// `tri` tile whatever its shape ([`MatmulTiles::tri`]).
pub(super) fn choose_tile(m: usize, n: usize, batch: usize, half: bool, tri: Tri, tiles: &MatmulTiles) -> MatmulTile {
    if tri != Tri::Full {
        return tiles.tri;
    }
    let busy = |tile: MatmulTile| tile.groups(m, n) * batch >= tiles.min_large_groups;
    if half && busy(tiles.wide) {
        return tiles.wide;
    }
    // Thin shapes first: a large tile over 64 columns leaves half its threads' outputs empty (the attention's
    // `[256, 256] x [256, 64]` ran markedly faster on tall tiles than on large ones).
    if n <= 64 && busy(tiles.tall) {
        return tiles.tall;
    }
    if m <= 64 && busy(tiles.wide) {
        return tiles.wide;
    }
    if busy(tiles.large) {
        return tiles.large;
    }
    tiles.small
}

/// Lowers the group whose first member is a matmul node.
pub(super) fn lower(cx: GroupCtx) -> Result<Vec<Kernel>, NodeId> {
    let graph = cx.graph;
    let mm = cx.grp.members[0];
    let NodeOp::Matmul(a, b, tri) = graph.node(mm).op else { unreachable!("a matmul group starts with its product") };
    let out = graph.node(mm).shape.clone();
    let r = out.ndim();
    let (m, n) = (out.dims()[r - 2], out.dims()[r - 1]);
    let (sa, sb) = (graph.node(a).shape.clone(), graph.node(b).shape.clone());
    let k = sa.dims()[r - 1];
    // A triangular product runs tiled whatever its shape: only the tiled kernel skips blocks and masks.
    let thin = if m.min(n) <= THIN && tri == Tri::Full {
        match thin_kernel(graph, (a, b), (m, k, n), out.numel() / (m * n).max(1), &cx.tiles) {
            None => return matrix_vector(cx),
            thin => thin,
        }
    } else {
        None
    };
    let GroupCtx { fusion, grp, written, slot, tile: forced, tiles, .. } = cx;
    let mut l = Lowerer::new(graph, fusion, &grp.members, kernel(Kind::Elementwise, &out, out.numel()), slot);
    l.need_coords();
    let k_at = l.param(k as u32);
    l.set_domain(&sa, None);
    let va = operand(&mut l, a, &sa)?;
    let a_end = l.k.body.len();
    l.set_domain(&sb, None);
    let vb = operand(&mut l, b, &sb)?;
    let b_end = l.k.body.len();
    l.k.fused_ops += 1;
    l.epilogue(&grp.members, &out, Some(mm), written)?;
    let (a_along_k, b_along_k) = (along_k(&l.k, 0..a_end, r - 1, r - 2), along_k(&l.k, a_end..b_end, r - 2, r - 1));
    let batch = out.numel() / (m * n);
    // Half operands of one type: the product may run on tensor cores (f16 always, bf16 where the backend can).
    let ta = graph.node(a).dtype;
    let half = matches!(ta, DType::F16 | DType::BF16) && graph.node(b).dtype == ta;
    let chosen = forced.unwrap_or_else(|| choose_tile(m, n, batch, half, tri, &tiles));
    // Whether `tile`'s blocks, `bk` steps of k deep, cover the product exactly.
    let covers =
        |tile: MatmulTile, bk: u32| [(m, tile.bm), (n, tile.bn), (k, bk)].iter().all(|&(x, b)| x % b as usize == 0);
    let plan = |tile: MatmulTile| {
        let even = covers(tile, tile.bk);
        let fetch = Fetch::plan(&l.k, tile, even && thin.is_none(), (0..a_end, a_along_k), (a_end..b_end, b_along_k));
        (tile, even, fetch)
    };
    let mut planned = plan(chosen);
    let mut deep = false;
    // The large tile 16 steps of k deep where both operands are fetched as quads (`MatmulTiles::deep`).
    if chosen == tiles.large && forced.is_none() && tiles.deep != tiles.large {
        let deeper = plan(tiles.deep);
        if deeper.2.a.is_some() && deeper.2.b.is_some() {
            (planned, deep) = (deeper, true);
        }
    }
    let (tile, even, fetch) = planned;
    let quad = thin.is_none()
        && n % 4 == 0
        && l.k.out_types.iter().all(|&t| t == DType::F32)
        && (tile.tm * tile.tn < 64 || deep || k <= QUAD_MAX_K);
    for i in [fetch.a, fetch.b].into_iter().flatten() {
        l.k.inputs[i].1 = true;
    }
    let (vec_a, vec_b) = (fetch.a.is_some(), fetch.b.is_some());
    // The tensor-core kernel's octets (`Matmul::octets_a`), should the backend run this product there.
    let coop_even = half && thin.is_none() && covers(tile, crate::kernel::COOP_BK);
    let octets = |body: std::ops::Range<usize>, axis: usize| coop_even && wide_input(&l.k, body, axis, ta, 8).is_some();
    let octets_a = octets(0..a_end, if a_along_k { r - 1 } else { r - 2 });
    let octets_b = octets(a_end..b_end, if b_along_k { r - 2 } else { r - 1 });
    l.k.kind = Kind::Matmul(Matmul {
        a: va,
        a_end,
        b: vb,
        b_end,
        k_at,
        a_along_k,
        b_along_k,
        tile,
        thin,
        quad,
        even,
        vec_a,
        vec_b,
        octets_a,
        octets_b,
        tri,
    });
    Ok(vec![l.k])
}

/// The thin kernel for `batch` products of `m x k x n` with at most [`THIN`] outputs along one side, where its wide
/// operand is contiguous along k or along its wide axis and it makes enough workgroups to fill the device (half the
/// tiled kernel's `min_large_groups`); otherwise `None`, and the product is a fold. A fold computes each output alone
/// and so reads the wide operand once per output: the two 10-wide products of an MLP's output layer
/// (`[4096, 1024] x [1024, 10]` and its weight gradient) were slow as folds (figures:
/// docs/notes/source-measurements.md, `src/schedule/matmul.rs`).
fn thin_kernel(
    graph: &Graph,
    (a, b): (NodeId, NodeId),
    (m, k, n): (usize, usize, usize),
    batch: usize,
    tiles: &MatmulTiles,
) -> Option<Thin> {
    let r = graph.node(a).shape.ndim();
    let thin =
        Thin::choose(m, n, |is_a, last| graph.contiguous_along(if is_a { a } else { b }, r - 2 + usize::from(last)))?;
    (k > 0 && thin.groups(m, n, batch) * 2 >= tiles.min_large_groups).then_some(thin)
}

/// An operand's value at every element of its domain; a constant 0 when k = 0 (nothing is read).
fn operand(l: &mut Lowerer, id: NodeId, domain: &Shape) -> Result<usize, NodeId> {
    if domain.numel() == 0 {
        return Ok(l.constant(0, DType::F32));
    }
    l.root(id, domain)
}

/// How a tiled product's operands are fetched: the inputs fetched 16 bytes at a time ([`Matmul::vec_a`], `vec_b`).
struct Fetch {
    a: Option<usize>,
    b: Option<usize>,
}

impl Fetch {
    /// The quad fetches of kernel `k` on `tile`, where every fetch is inside the matrices (`inside`: an even
    /// product), for operands computed by `a.0` and `b.0`, read along k where `.1`. An input is fetched as quads
    /// only where nothing else reads it (both operands may: an attention's `q k^T` reads one buffer twice).
    fn plan(
        k: &Kernel,
        tile: MatmulTile,
        inside: bool,
        a: (std::ops::Range<usize>, bool),
        b: (std::ops::Range<usize>, bool),
    ) -> Fetch {
        let rank = k.shape.ndim();
        // A quad a thread: the slab's elements are a whole number of quads per thread.
        let whole = |rows: u32| (rows * tile.bk) % (4 * crate::kernel::WORKGROUP_SIZE) == 0;
        // A along k reads its rows' axis (rank - 1), else its columns' (rank - 2); B the other way round.
        let qa =
            (inside && whole(tile.bm)).then(|| quad_input(k, a.0, if a.1 { rank - 1 } else { rank - 2 })).flatten();
        let qb =
            (inside && whole(tile.bn)).then(|| quad_input(k, b.0, if b.1 { rank - 2 } else { rank - 1 })).flatten();
        let reads = |input: usize| {
            let of =
                |i: &Instr| matches!(i, Instr::Load { input: n, .. } | Instr::Gather { input: n, .. } if *n == input);
            k.body.iter().filter(|i| of(i)).count()
        };
        let alone = |q: Option<usize>, other: Option<usize>| {
            q.filter(|&i| reads(i) == 1 + usize::from(other == Some(i)) && !k.aliases.iter().any(|a| a.0 == i))
        };
        Fetch { a: alone(qa, qb), b: alone(qb, qa) }
    }
}

/// The input the operand computed by `body` reads, where it can be fetched 4 elements at a time along `axis`
/// ([`Matmul::vec_a`]).
fn quad_input(k: &Kernel, body: std::ops::Range<usize>, axis: usize) -> Option<usize> {
    wide_input(k, body, axis, DType::F32, 4)
}

/// The input the operand computed by `body` reads, where it can be fetched `lanes` elements (16 bytes) at a time
/// along `axis`: one load of a `dt` input with stride 1 along `axis` and every other stride and its offset a
/// multiple of `lanes` (a row-major read's pitch is the product's k or n, a multiple of the tile in an even
/// product).
fn wide_input(k: &Kernel, body: std::ops::Range<usize>, axis: usize, dt: DType, lanes: i32) -> Option<usize> {
    let [Instr::Load { input, view, .. }] = k.body[body] else { return None };
    let rank = k.shape.ndim();
    let aligned = match view {
        None => axis + 1 == rank,
        Some(v) => {
            let p = |i: usize| k.params[v.at + i] as i32;
            v.frame == 0 && p(axis) == 1 && (0..=rank).all(|d| d == axis || p(d) % lanes == 0)
        }
    };
    (aligned && k.in_types[input] == dt).then_some(input)
}

/// Whether the loads among `body` are contiguous along axis `k` rather than `other`, judged by the first strided
/// load (an unstrided one reads its domain row-major, so its innermost axis is the contiguous one).
fn along_k(kernel: &Kernel, body: std::ops::Range<usize>, k: usize, other: usize) -> bool {
    let rank = kernel.shape.ndim();
    let p = |i: usize| kernel.params[i] as i32;
    for instr in &kernel.body[body] {
        if let Instr::Load { view, .. } = instr {
            return match view {
                None => k + 1 == rank,
                Some(v) => p(v.at + k).abs() == 1 || p(v.at + other).abs() != 1,
            };
        }
    }
    true
}

/// The view that reads a `shape`-shaped tensor at the coordinates of `domain`, where domain axis `d` is the
/// tensor's axis `axes[d]` or, for `None`, an axis the tensor is broadcast along.
fn pick(shape: &Shape, domain: &[usize], axes: &[Option<usize>]) -> View {
    let cs = shape.contiguous_strides();
    View {
        shape: Shape::from(domain),
        strides: axes.iter().map(|a| a.map_or(0, |j| cs[j] as isize)).collect(),
        offset: 0,
    }
}

/// Thin products (`m` or `n` at most [`THIN`]; `m = 1` or `n = 1` are matrix-vector products): every output is a
/// dot product of k elements, and the work is a fold of `a * b` over k, laid out so that the larger operand is
/// read along its contiguous axis: k innermost (a team of threads per output) when it is contiguous along k,
/// otherwise k outer (a thread per output, neighbours reading neighbours). Long k with few outputs folds in two
/// stages (the reduce path's chunks), so the GPU fills.
fn matrix_vector(cx: GroupCtx) -> Result<Vec<Kernel>, NodeId> {
    let graph = cx.graph;
    let NodeOp::Matmul(a, b, _) = graph.node(cx.grp.members[0]).op else {
        unreachable!("a matmul group starts with its product")
    };
    let (sa, sb) = (graph.node(a).shape.clone(), graph.node(b).shape.clone());
    let r = sa.ndim();
    let (m, k, n) = (sa.dims()[r - 2], sa.dims()[r - 1], sb.dims()[r - 1]);
    // Whether the larger operand is read along k.
    let k_inner = if m >= n {
        m == 1 || graph.contiguous_along(a, r - 1)
    } else {
        graph.contiguous_along(b, r - 2) && !graph.contiguous_along(b, r - 1)
    };
    let batch: Vec<Option<usize>> = (0..r - 2).map(Some).collect();
    let mut domain: Vec<usize> = sa.dims()[..r - 2].to_vec();
    // Per domain axis after the batch: (extent, A's axis, B's axis). The output axes in row-major order (a vector
    // product keeps only the one that varies), and k inside or outside them.
    let mut outputs = vec![(m, Some(r - 2), None), (n, None, Some(r - 1))];
    if n == 1 {
        outputs.pop();
    } else if m == 1 {
        outputs.remove(0);
    }
    let along_k = (k, Some(r - 1), Some(r - 2));
    let tail: Vec<(usize, Option<usize>, Option<usize>)> = if k_inner {
        outputs.into_iter().chain([along_k]).collect()
    } else {
        [along_k].into_iter().chain(outputs).collect()
    };
    let mut axes_a = batch.clone();
    let mut axes_b = batch;
    for (extent, ax, bx) in tail {
        domain.push(extent);
        axes_a.push(ax);
        axes_b.push(bx);
    }
    let view_a = pick(&sa, &domain, &axes_a);
    let view_b = pick(&sb, &domain, &axes_b);
    let mut value = |l: &mut Lowerer| -> Result<usize, NodeId> {
        let x = l.at(a, view_a.clone())?;
        let y = l.at(b, view_b.clone())?;
        // Products and their sum in f32, whatever the operands' float type: rounded once, at the end.
        Ok(l.push(Instr::Binary(BinaryOp::Mul, x, y), DType::F32))
    };
    let axis = if k_inner { domain.len() - 1 } else { r - 2 };
    let fold = Fold { op: ReduceOp::Sum, domain: Shape::from(domain), axis, dtype: DType::F32, value: &mut value };
    lower_fold(cx, fold)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_follow_the_backends_table() {
        let tuned = MatmulTiles::TUNED;
        assert_eq!(choose_tile(4096, 4096, 1, false, Tri::Full, &tuned), tuned.large);
        assert_eq!(
            choose_tile(512, 512, 1, false, Tri::Full, &tuned),
            tuned.small,
            "16 large workgroups do not fill the H200"
        );
        assert_eq!(choose_tile(4096, 4096, 1, true, Tri::Full, &tuned), tuned.wide);
        // The attention's products over 64 columns (or rows) of a head take the thin tiles.
        assert_eq!(choose_tile(256, 64, 384, false, Tri::Full, &tuned), tuned.tall);
        assert_eq!(choose_tile(64, 256, 384, false, Tri::Full, &tuned), tuned.wide);
        assert_eq!(choose_tile(256, 256, 384, false, Tri::Full, &tuned), tuned.large);
        // A device busy with 4 workgroups takes large tiles where the H200 would not.
        let cpu = MatmulTiles::fitted(16384, 4);
        assert_eq!(choose_tile(512, 512, 1, false, Tri::Full, &cpu), cpu.large);
        // Too little workgroup memory for the large tiles: the small one stands in.
        let tight = MatmulTiles::fitted(4096, 256);
        assert_eq!((tight.large, tight.tall, tight.wide), (tuned.small, tuned.small, tuned.small));
        assert!(tuned.small.workgroup_bytes() <= 16384 && tuned.large.workgroup_bytes() <= 16384);
        // The deep large tile (16896 bytes) needs more than WebGPU's minimum of 16 KiB: there the large tile stays
        // 8 deep, and where even that does not fit, neither is used.
        assert_eq!(MatmulTiles::fitted(32768, 4).deep, tuned.deep);
        assert_eq!(MatmulTiles::fitted(16384, 4).deep, tuned.large);
        assert_eq!(tight.deep, tuned.small);
        let t = tuned.tri;
        assert!(t.workgroup_bytes() <= 16384 && t.bm * t.bn / (t.tm * t.tn) == crate::kernel::WORKGROUP_SIZE);
    }
}
