//! Which form a product kernel takes on a target: on tensor cores (the fragments' layout over the subgroups, the
//! workgroup memory it takes) or in tiles, and whether it stores 4 columns at a time. The emitter and the matmul
//! generator both ask, so the answer stands below both.

use super::Target;
use crate::dtype::DType;
use crate::kernel::{Kernel, Matmul, COOP_BK};
use crate::op::Tri;

/// How the tensor-core kernel lays its 8 subgroups over a `bm x bn` block: `(sgn, fm, fn)`, subgroups along n and
/// 16 x 16 fragments per subgroup along m and n, the most square split. `None` when the block does not split into
/// whole fragments evenly.
pub(crate) fn coop_layout(bm: u32, bn: u32) -> Option<(u32, u32, u32)> {
    if bm % 16 != 0 || bn % 16 != 0 {
        return None;
    }
    let (fm_all, fn_all) = (bm / 16, bn / 16);
    [1, 2, 4, 8]
        .into_iter()
        .filter(|&sgn| fn_all % sgn == 0 && fm_all % (8 / sgn) == 0)
        .map(|sgn| (sgn, fm_all / (8 / sgn), fn_all / sgn))
        .min_by_key(|&(_, fm, fn_)| fm.abs_diff(fn_))
}

/// Workgroup memory the tensor-core kernel may use: devices offer it only with at least this much (`gpu.rs`).
pub(crate) const COOP_WORKGROUP_BYTES: u32 = 48 * 1024;

/// Halves in one slab line and lines in a slab, for an operand whose block side is `side`, along k or not.
pub(super) fn slab(side: u32, along_k: bool) -> (u32, u32) {
    if along_k {
        (COOP_BK + 8, side)
    } else {
        (side + 8, COOP_BK)
    }
}

/// Bytes of workgroup memory the tensor-core kernel takes: both slabs (f16) and a 16 x 16 f32 fragment per subgroup.
pub(crate) fn coop_bytes(mm: &Matmul) -> u32 {
    let (pa, la) = slab(mm.tile.bm, mm.a_along_k);
    let (pb, lb) = slab(mm.tile.bn, mm.b_along_k);
    2 * (pa * la + pb * lb) + 8 * 256 * 4
}

/// Whether `k` runs on the tensor cores for `target`: a tiled product (not a thin one), both operands f16 (or bf16
/// where the SPIR-V path runs them: [`Target::bf16_coop`]), and the block splits over 8 subgroups
/// and fits in workgroup memory (a forced `LAZOR_MATMUL_TILE` may not).
pub(crate) fn uses_coop(k: &Kernel, mm: &Matmul, target: &Target) -> bool {
    // bf16 runs as f16 retyped to bf16 (`spirv::Edits::bf16`): every f16 of the kernel would be retyped with it,
    // so a kernel that also has f16 values (an f16 output, input or cast) stays tiled.
    let no_f16 = || ![&k.types[..], &k.in_types[..], &k.out_types[..]].iter().any(|ts| ts.contains(&DType::F16));
    let half = |t: DType| t == DType::F16 || (t == DType::BF16 && target.bf16_coop && no_f16());
    target.coop
        && target.f16
        && mm.thin.is_none()
        && half(k.types[mm.a])
        && k.types[mm.b] == k.types[mm.a]
        && coop_layout(mm.tile.bm, mm.tile.bn).is_some()
        && coop_bytes(mm) <= COOP_WORKGROUP_BYTES
        && (mm.tri == Tri::Full || target.coop_triangles)
}

/// Whether tiled kernel `k` stores its outputs 4 columns at a time ([`Matmul::quad`]; not the tensor-core or thin
/// kernels, which store their own way).
pub(crate) fn quad_stores(k: &Kernel, mm: &Matmul, target: &Target) -> bool {
    mm.quad && mm.thin.is_none() && !uses_coop(k, mm, target)
}
