//! WGSL for matmul kernels: the hand-written skeleton in `kernels/matmul.wgsl`, specialised with the tile's
//! constants and with the generated functions it calls: the operands' loads (their prologues) and the epilogue.

use super::elementwise::Emitter;
use super::Target;
use crate::kernel::{Kernel, Kind};
use std::fmt::Write;

const SKELETON: &str = include_str!("../../kernels/matmul.wgsl");

/// The WGSL source of a matmul kernel.
pub(super) fn generate(k: &Kernel, target: &Target) -> String {
    let Kind::Matmul(mm) = k.kind else { unreachable!("a matmul kernel") };
    let mut e = Emitter::new(k, target);
    let rank = k.shape.ndim();
    let at = k.dims_at.expect("matmul kernels have their extents in the parameters");
    let t = mm.tile;
    let _ = write!(
        e.out,
        "const BM: u32 = {}u;\nconst BN: u32 = {}u;\nconst BK: u32 = {}u;\nconst TM: u32 = {}u;\nconst TN: u32 = {}u;\n\
         const A_ALONG_K: bool = {};\nconst B_ALONG_K: bool = {};\n",
        t.bm, t.bn, t.bk, t.tm, t.tn, mm.a_along_k, mm.b_along_k
    );
    let (row, col) = (rank - 2, rank - 1);
    // Batch coordinates: set once per workgroup, read by every load and store.
    for d in 0..row {
        e.line(0, &format!("var<private> c{d}: i32;"));
    }
    e.line(
        0,
        &format!("fn sizes() -> vec3<u32> {{ return vec3<u32>(p[{}], p[{}], p[{}]); }}", at + row, at + col, mm.k_at),
    );
    e.line(0, &format!("fn batches() -> u32 {{ return p[0] / (p[{}] * p[{}]); }}", at + row, at + col));
    e.line(0, "fn set_batch(b: u32) {");
    e.line(1, "var q = b;");
    for d in (0..row).rev() {
        e.line(1, &format!("c{d} = i32(q % p[{}]);", at + d));
        e.line(1, &format!("q = q / p[{}];", at + d));
    }
    e.line(0, "}");

    e.line(
        0,
        &format!("fn load_a(r: u32, k: u32, i: u32) -> f32 {{\n    let c{row} = i32(r);\n    let c{col} = i32(k);"),
    );
    e.range(0..mm.a_end, 1);
    e.line(1, &format!("return t{};", mm.a));
    e.line(0, "}");
    e.line(
        0,
        &format!("fn load_b(k: u32, c: u32, i: u32) -> f32 {{\n    let c{row} = i32(k);\n    let c{col} = i32(c);"),
    );
    e.range(mm.a_end..mm.b_end, 1);
    e.line(1, &format!("return t{};", mm.b));
    e.line(0, "}");
    e.line(
        0,
        &format!(
            "fn store(r: u32, c: u32, i: u32, folded: f32) {{\n    let c{row} = i32(r);\n    let c{col} = i32(c);"
        ),
    );
    e.range(mm.b_end..k.body.len(), 1);
    for (o, &(_, value)) in k.outputs.iter().enumerate() {
        let st = e.store(o, "i", &format!("t{value}"));
        e.line(1, &st);
    }
    e.line(0, "}");
    e.out.push_str(SKELETON);
    let Emitter { b, out, .. } = e;
    b.finish(&out)
}
