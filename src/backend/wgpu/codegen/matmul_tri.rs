//! The tiled skeleton specialised for a triangular product ([`Tri`]): the block's steps of k bounded by the triangle
//! kept, A's dropped elements staged as 0, and the output's dropped triangle stored as 0 (-inf for `Causal`).
//!
//! Full products use the skeleton as written: these edits apply only where a triangle is kept, so the kernels that have
//! been tuned compile from exactly the text they were tuned with (with the same edits guarded by constants, the f32
//! full product ran measurably slower; figures: docs/notes/source-measurements.md,
//! `src/backend/wgpu/codegen/matmul_tri.rs`).

use crate::op::Tri;
use std::borrow::Cow;

/// Helpers the edited skeleton calls, placed before its `main`.
const HELPERS: &str = "
// Whether A's element (gr, gk) lies past the diagonal of the triangle TRI_A keeps (it counts as 0).
fn dropped_a(gr: u32, gk: u32) -> bool {
    return (TRI_A == 1u && gk > gr) || (TRI_A == 2u && gk < gr);
}
// A's element (gr, gk), 0 where dropped_a; 4 along the rows from gr.
fn keep_a(gr: u32, gk: u32, x: f32) -> f32 {
    return select(x, 0.0, dropped_a(gr, gk));
}
fn keep4_a(gr: u32, gk: u32, v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(keep_a(gr, gk, v.x), keep_a(gr + 1u, gk, v.y), keep_a(gr + 2u, gk, v.z), keep_a(gr + 3u, gk, v.w));
}
// An output's value, fill() outside the triangle TRI_OUT keeps (the stores pass every value through these): 0, or
// -inf for 3 (the lower triangle of a causal mask's scores).
fn fill() -> f32 {
    if (TRI_OUT == 3u) { return lz_bits(0xff800000u); }
    return 0.0;
}
fn keep(r: u32, c: u32, x: f32) -> f32 {
    return select(x, fill(), (TRI_OUT != 2u && c > r) || (TRI_OUT == 2u && c < r));
}
fn keep4(r: u32, c: u32, v: vec4<f32>) -> vec4<f32> {
    let cs = vec4<u32>(c) + vec4<u32>(0u, 1u, 2u, 3u);
    let rs = vec4<u32>(r);
    if (TRI_OUT == 2u) { return select(v, vec4<f32>(fill()), (cs < rs)); }
    return select(v, vec4<f32>(fill()), (cs > rs));
}
";

/// The steps of k a block needs, after `base_b`: A's kept triangle ends (TRI_A 1) or starts (2) at the block's
/// rows, and a block wholly outside the output's kept triangle needs none (its accumulators stay 0). An empty
/// range is `0..0`, so the first fetch, which runs before the loop, stays inside k.
const RANGE: &str = "
    var k_lo = 0u;
    var k_hi = size.z;
    if (TRI_A == 1u) { k_hi = min(size.z, m0 + BM); }
    if (TRI_A == 2u) { k_lo = m0 / BK * BK; }
    if ((TRI_OUT % 2u == 1u && n0 >= m0 + BM) || (TRI_OUT == 2u && n0 + BN <= m0)) { k_hi = 0u; }
    if (k_lo >= k_hi) { k_lo = 0u; k_hi = 0u; }
";

/// `skeleton` for a product keeping `tri`: unchanged for [`Tri::Full`].
///
/// # Panics
/// If an edit does not find its text in the skeleton as often as it expects (a changed skeleton; every codegen
/// test of a triangular product would fail).
pub(super) fn specialise(skeleton: &str, tri: Tri) -> Cow<'_, str> {
    if tri == Tri::Full {
        return Cow::Borrowed(skeleton);
    }
    let base_b = "    let base_b = batch * size.z;\n";
    let edits: [(&str, String, usize); 9] = [
        ("@compute @workgroup_size(256)", format!("{HELPERS}\n@compute @workgroup_size(256)"), 1),
        (base_b, format!("{base_b}{RANGE}"), 1),
        ("m0, 0u, base_a", "m0, k_lo, base_a".into(), 2),
        ("n0, 0u, base_b", "n0, k_lo, base_b".into(), 2),
        ("for (var k0 = 0u; k0 < size.z; k0 += BK)", "for (var k0 = k_lo; k0 < k_hi; k0 += BK)".into(), 1),
        ("if (k0 + BK < size.z)", "if (k0 + BK < k_hi)".into(), 1),
        // A's elements are zeroed as they are staged, after the loop over the previous slab: zeroed as they are
        // fetched, each select waits for its load before that loop, and the A-masked products ran slower than with no
        // masking, slower even than as full products.
        (
            "slab_a[(c.y + t) * SA + c.x / 4u][c.x % 4u] = next_a[j + t];",
            "slab_a[(c.y + t) * SA + c.x / 4u][c.x % 4u] = keep_a(m0 + c.x, k0 + c.y + t, next_a[j + t]);".into(),
            1,
        ),
        (
            "slab_a[c.y * SA + c.x / 4u] = vec4<f32>(next_a[j], next_a[j + 1u], next_a[j + 2u], next_a[j + 3u]);",
            "slab_a[c.y * SA + c.x / 4u] = keep4_a(m0 + c.x, k0 + c.y, \
             vec4<f32>(next_a[j], next_a[j + 1u], next_a[j + 2u], next_a[j + 3u]));"
                .into(),
            1,
        ),
        (
            "slab_a[at.x][at.y] = next_a[j];",
            "let ca = coords_a(e);\n                    slab_a[at.x][at.y] = keep_a(m0 + ca.x, k0 + ca.y, next_a[j]);"
                .into(),
            1,
        ),
    ];
    let mut s = skeleton.to_string();
    let masks_a = tri.codes().1 != 0;
    for (i, (from, to, count)) in edits.into_iter().enumerate() {
        // A's elements are masked only where A's triangle is kept (the last three edits).
        if i >= 6 && !masks_a {
            continue;
        }
        assert_eq!(s.matches(from).count(), count, "the tiled skeleton has `{from}` {count} times");
        s = s.replace(from, &to);
    }
    Cow::Owned(s)
}

/// A's octets in the tensor-core kernel with its elements past the kept triangle zeroed, as they go into the slab
/// (after the previous step's products, so the loads have landed): 0 bits are 0 in f16 and bf16 alike, and the low
/// half of each word is the octet's earlier element.
const MASK_OCTETS: &str = "
fn mask_a(li: u32, m0: u32, k0: u32, ra: array<vec4<u32>, LA>) -> array<vec4<u32>, LA> {
    var r = ra;
    for (var j = 0u; j < LA; j++) {
        let o = li + j * THREADS;
        let line = o / OA;
        let pos = (o % OA) * 8u;
        for (var w = 0u; w < 4u; w++) {
            var bits = r[j][w];
            for (var h = 0u; h < 2u; h++) {
                let e = pos + 2u * w + h;
                var gr = m0 + e;
                var gk = k0 + line;
                if (A_ALONG_K) {
                    gr = m0 + line;
                    gk = k0 + e;
                }
                if (dropped_a(gr, gk)) {
                    bits = bits & ~(0xffffu << (16u * h));
                }
            }
            r[j][w] = bits;
        }
    }
    return r;
}
";

/// The tensor-core skeleton (its parts filled in) for a product keeping `tri`, by the same rules as [`specialise`]:
/// the block's steps of k bounded by the triangle, A's dropped elements zeroed as they are staged, and the outputs
/// of a kept output triangle passed through `keep` on their way to the epilogue. Unchanged for [`Tri::Full`].
///
/// # Panics
/// If an edit does not find its text in the skeleton as often as it expects (a changed skeleton; every codegen
/// test of a triangular product on tensor cores would fail).
pub(super) fn specialise_coop(skeleton: String, tri: Tri) -> String {
    if tri == Tri::Full {
        return skeleton;
    }
    let base_b = "    let base_b = batch * size.z;\n";
    // Outputs pass through `keep` only where an output triangle is kept (`keep` fills everything past the
    // diagonal); A's octets are masked only where A's triangle is.
    let (keeps_out, masks_a) = (tri.codes().0 != 0, tri.codes().1 != 0);
    let mut edits: Vec<(&str, String)> = vec![
        (
            "@compute @workgroup_size(256)",
            format!("{HELPERS}{}\n@compute @workgroup_size(256)", if masks_a { MASK_OCTETS } else { "" }),
        ),
        (base_b, format!("{base_b}{RANGE}")),
        ("fetch_a(li, m0, 0u, base_a, size)", "fetch_a(li, m0, k_lo, base_a, size)".into()),
        ("fetch_b(li, n0, 0u, base_b, size)", "fetch_b(li, n0, k_lo, base_b, size)".into()),
        ("for (var k0 = 0u; k0 < size.z; k0 += BK)", "for (var k0 = k_lo; k0 < k_hi; k0 += BK)".into()),
        ("if (k0 + BK < size.z)", "if (k0 + BK < k_hi)".into()),
    ];
    if keeps_out {
        let frag = "frag[sg * 256u + e]";
        edits.push((frag, format!("keep(row, col, {frag})")));
    }
    if masks_a {
        edits.push(("put(li, ra, rb);", "put(li, mask_a(li, m0, k0, ra), rb);".into()));
    }
    let mut s = skeleton;
    for (from, to) in edits {
        assert_eq!(s.matches(from).count(), 1, "the tensor-core skeleton has `{from}` once");
        s = s.replace(from, &to);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::wgpu::codegen::{generate, validate, Target};
    use crate::dtype::DType;
    use crate::graph::{Graph, NodeOp};
    use crate::kernel::Kind;
    use crate::schedule::{plan, Options};
    use crate::shape::Shape;
    use crate::view::View;

    /// The WGSL of `a b` keeping `tri` over `[batch, m, k] x [batch, k, n]`, A read transposed or not.
    fn product(tri: Tri, (batch, m, k, n): (usize, usize, usize, usize), a_transposed: bool) -> String {
        let mut g = Graph::default();
        let a = if a_transposed {
            let d = g.add(NodeOp::Data(vec![0; batch * m * k]), Shape::from([batch, k, m]), DType::F32);
            let v = View {
                shape: Shape::from([batch, m, k]),
                strides: vec![(m * k) as isize, 1, m as isize].into(),
                offset: 0,
            };
            g.add(NodeOp::View(v, d), Shape::from([batch, m, k]), DType::F32)
        } else {
            g.add(NodeOp::Data(vec![0; batch * m * k]), Shape::from([batch, m, k]), DType::F32)
        };
        let b = g.add(NodeOp::Data(vec![0; batch * k * n]), Shape::from([batch, k, n]), DType::F32);
        let p = g.add(NodeOp::Matmul(a, b, tri), Shape::from([batch, m, n]), DType::F32);
        let kernels = plan(&g, &[p], &Options::TEST).kernels;
        if tri != Tri::Full {
            assert_eq!(kernels.len(), 1);
            let Kind::Matmul(mm) = kernels[0].kind else { panic!("a matmul kernel") };
            assert_eq!(mm.tri, tri);
            assert_eq!(mm.tile, crate::kernel::MatmulTiles::TUNED.tri, "triangular products take the square tile");
            assert!(mm.thin.is_none(), "triangular products run tiled, thin shapes included");
        }
        generate(&kernels[0], &Target::default())
    }

    #[test]
    fn triangular_kernels_are_valid_wgsl_and_full_ones_are_the_skeleton_as_written() {
        let modes = [Tri::OutLower, Tri::OutUpper, Tri::Causal, Tri::ALower, Tri::AUpper];
        for shape in [(4, 256, 64, 256), (3, 70, 33, 12), (2, 8, 256, 64)] {
            for transposed in [false, true] {
                let full = product(Tri::Full, shape, transposed);
                assert!(!full.contains("k_lo") && !full.contains("keep"), "{shape:?}: the full product is unedited");
                for tri in modes {
                    let src = product(tri, shape, transposed);
                    validate(&src);
                    assert!(src.contains("for (var k0 = k_lo; k0 < k_hi; k0 += BK)"), "{tri:?} {shape:?}");
                    // Outputs pass through `keep` only where the output keeps a triangle, A's staging through
                    // `keep_a` only where A does.
                    let out = matches!(tri, Tri::OutLower | Tri::OutUpper | Tri::Causal);
                    assert_eq!(
                        src.contains("store4(row, col, (base_a + row) * size.y + col, keep4(")
                            || src.contains("col, keep(row, col,"),
                        out,
                        "{tri:?} {shape:?}"
                    );
                    assert_eq!(src.contains("= keep_a(") || src.contains("= keep4_a("), !out, "{tri:?} {shape:?}");
                }
            }
        }
    }
}
