//! WGSL for matmul kernels: a hand-written skeleton, `kernels/matmul.wgsl` (tiled, every adapter),
//! `kernels/matmul_coop.wgsl` (f16 on tensor cores) or `kernels/matmul_thin.wgsl` (thin products), specialised with
//! its constants and with the generated functions it calls: the operands' loads (their prologues) and the epilogue.

use super::emit::Emitter;
use super::matmul_form::{coop_bytes, coop_layout, quad_stores, slab, uses_coop, COOP_WORKGROUP_BYTES};
use super::matmul_stores::{store_functions, stores};
use super::matmul_tri;
use super::{param, Target};
use crate::dtype::DType;
use crate::kernel::{Access, Instr, Kernel, Kind, ViewRef, COOP_BK};
use crate::op::Tri;
use std::fmt::Write;

const SKELETON: &str = include_str!("../../../../kernels/matmul.wgsl");
const COOP_SKELETON: &str = include_str!("../../../../kernels/matmul_coop.wgsl");
const THIN_SKELETON: &str = include_str!("../../../../kernels/matmul_thin.wgsl");

/// The WGSL source of a matmul kernel.
pub(super) fn generate(k: &Kernel, target: &Target) -> String {
    let Kind::Matmul(mm) = k.kind else { unreachable!("a matmul kernel") };
    let t = mm.tile;
    let layout = if uses_coop(k, &mm, target) { coop_layout(t.bm, t.bn) } else { None };
    let operands = [
        (true, 0..mm.a_end, mm.a, mm.a_along_k, mm.octets_a),
        (false, mm.a_end..mm.b_end, mm.b, !mm.b_along_k, mm.octets_b),
    ]
    .map(|(a, body, value, along, whole)| {
        let direct = layout.and(direct(k, body.clone()));
        Operand { whole: whole && direct.is_some(), direct, a, body, value, along }
    });
    let octet_inputs: Vec<usize> = operands.iter().filter_map(|o| o.direct.map(|d| d.0)).collect();
    let mut e = Emitter::with_octets(k, target, &octet_inputs);
    let rank = k.shape.ndim();
    let at = k.dims_at.expect("matmul kernels have their extents in the parameters");
    if let Some((sgn, fm, fn_)) = layout {
        e.b.enable_f16();
        e.b.enable_coop();
        let bk = COOP_BK;
        debug_assert!(coop_bytes(&mm) <= COOP_WORKGROUP_BYTES);
        // Slab lines run along each operand's contiguous axis, OA (OB) octets of 8 halves, padded by one octet (16
        // bytes) so fragment loads spread over the banks and stay 16-byte aligned.
        let ((sa, lines_a), (sb, lines_b)) = (slab(t.bm, mm.a_along_k), slab(t.bn, mm.b_along_k));
        let (oa, ob) = (sa / 8 - 1, sb / 8 - 1);
        let _ = write!(
            e.out,
            "const BM: u32 = {}u;\nconst BN: u32 = {}u;\nconst BK: u32 = {bk}u;\nconst SGN: u32 = {sgn}u;\n\
             const FM: u32 = {fm}u;\nconst FN: u32 = {fn_}u;\nconst OA: u32 = {oa}u;\nconst OB: u32 = {ob}u;\n\
             const SA: u32 = {}u;\nconst SB: u32 = {}u;\nconst SLAB_A: u32 = {}u;\nconst SLAB_B: u32 = {}u;\n\
             const A_ALONG_K: bool = {};\nconst B_ALONG_K: bool = {};\n",
            t.bm,
            t.bn,
            sa,
            sb,
            lines_a * sa,
            lines_b * sb,
            mm.a_along_k,
            mm.b_along_k
        );
    } else if let Some(thin) = mm.thin {
        let _ = write!(
            e.out,
            "const FEW_COLUMNS: bool = {};\nconst TEAM: bool = {};\nconst NT: u32 = {}u;\nconst LINES: u32 = {}u;\n",
            thin.columns,
            thin.team,
            thin.narrow,
            thin.lines()
        );
    } else {
        let _ = write!(
            e.out,
            "const BM: u32 = {}u;\nconst BN: u32 = {}u;\nconst BK: u32 = {}u;\nconst TM: u32 = {}u;\n\
             const TN: u32 = {}u;\nconst A_ALONG_K: bool = {};\nconst B_ALONG_K: bool = {};\nconst EVEN: bool = {};\n\
             const VA: bool = {};\nconst VB: bool = {};\n",
            t.bm, t.bn, t.bk, t.tm, t.tn, mm.a_along_k, mm.b_along_k, mm.even, mm.vec_a, mm.vec_b
        );
    }
    // A triangular product (tiled or on tensor cores; never thin) names its triangle, and fills outside it with a
    // run-time constant (-inf for a causal mask).
    if mm.tri != Tri::Full {
        let (out, a) = mm.tri.codes();
        let _ = writeln!(e.out, "const TRI_OUT: u32 = {out}u;\nconst TRI_A: u32 = {a}u;");
        e.b.need(&[crate::op::Helper::Bits]);
    }
    let (row, col) = (rank - 2, rank - 1);
    // Batch coordinates: set once per workgroup, read by every load and store.
    for d in 0..row {
        e.line(0, &format!("var<private> c{d}: i32;"));
    }
    e.line(
        0,
        &format!(
            "fn sizes() -> vec3<u32> {{ return vec3<u32>({}, {}, {}); }}",
            param(at + row),
            param(at + col),
            param(mm.k_at)
        ),
    );
    e.line(0, &format!("fn batches() -> u32 {{ return {} / ({} * {}); }}", param(0), param(at + row), param(at + col)));
    e.line(0, "fn set_batch(b: u32) {");
    e.line(1, "var q = b;");
    for d in (0..row).rev() {
        e.line(1, &format!("c{d} = i32(q % {});", param(at + d)));
        e.line(1, &format!("q = q / {};", param(at + d)));
    }
    e.line(0, "}");

    for op in &operands {
        if layout.is_some() {
            octets(&mut e, op);
        } else if mm.thin.is_none() && (if op.a { mm.vec_a } else { mm.vec_b }) {
            quads(&mut e, op);
        } else {
            load(&mut e, op);
            if mm.thin.is_none() {
                scalar_quads(&mut e, op);
            }
        }
    }
    let quad = quad_stores(k, &mm, target);
    let store4 = store_functions(&mut e, mm.b_end, row, col, quad);
    if let Some((_, fm, fn_)) = layout {
        let body = coop_body(fm, fn_, mm.a_along_k, mm.b_along_k, target.coop_slab);
        e.out.push_str(&matmul_tri::specialise_coop(body, mm.tri));
    } else if let Some(thin) = mm.thin {
        let mut puts = String::new();
        for j in 0..thin.narrow {
            let _ = writeln!(puts, "    put(x, {j}u, acc[{j}]);");
        }
        e.out.push_str(&THIN_SKELETON.replace("/*STORES*/", &puts));
    } else {
        let skeleton = matmul_tri::specialise(SKELETON, mm.tri);
        e.out.push_str(&skeleton.replace("/*STORES*/", &stores(mm.tile, store4, mm.tri.codes().0 != 0)));
    }
    let Emitter { b, out, .. } = e;
    b.finish(&out)
}

/// One operand of a matmul kernel: its instructions and the value they compute, as a matrix `[x, y]` (A is
/// `[row, k]`, B `[k, col]`).
struct Operand {
    /// Whether it is A (otherwise B).
    a: bool,
    body: std::ops::Range<usize>,
    value: usize,
    /// Whether its slab lines in the tensor-core kernel run along y (A along k, B along n).
    along: bool,
    /// The input it reads as it is, on the tensor-core path ([`direct`]).
    direct: Option<(usize, Option<ViewRef>)>,
    /// Whether that input's every octet is whole and aligned ([`Matmul::octets_a`]): one load, no checks.
    whole: bool,
}

impl Operand {
    fn name(&self) -> &'static str {
        if self.a {
            "a"
        } else {
            "b"
        }
    }

    /// WGSL extents of its two axes, and its row-major index at `(x, y)` (what unstrided loads read).
    fn extents(&self) -> (&'static str, &'static str, fn(&str, &str) -> String) {
        if self.a {
            ("size.x", "size.z", |x, y| format!("(base + {x}) * size.z + {y}"))
        } else {
            ("size.z", "size.y", |x, y| format!("(base + {x}) * size.y + {y}"))
        }
    }
}

/// The input an operand reads as it is: its instructions are one load of an f16 input in the kernel's own
/// coordinates, and nothing else in the kernel reads that input. The tensor-core kernel binds it as octets
/// (`vec4<u32>`) and reads it 16 bytes at a time where the layout allows.
fn direct(k: &Kernel, body: std::ops::Range<usize>) -> Option<(usize, Option<ViewRef>)> {
    let [Instr::Load { input, view, access }] = &k.body[body] else { return None };
    if k.in_types[*input] != DType::F16 || view.is_some_and(|v| v.frame != 0) || matches!(access, Access::Tile(_)) {
        return None;
    }
    let reads = k.body.iter().filter(|i| matches!(i, Instr::Load { input: n, .. } if n == input)).count();
    (reads == 1).then_some((*input, *view))
}

/// Emits `load_{a,b}(x, y, i) -> f32`: the operand's value at matrix coordinate `(x, y)` (its prologue applied),
/// `i` being its row-major index.
fn load(e: &mut Emitter, op: &Operand) {
    let rank = e.k.shape.ndim();
    let (row, col) = (rank - 2, rank - 1);
    e.line(0, &format!("fn load_{}(x: u32, y: u32, i: u32) -> f32 {{", op.name()));
    e.line(1, &format!("let c{row} = i32(x);\n    let c{col} = i32(y);"));
    e.range(op.body.clone(), 1);
    e.line(1, &format!("return t{};", op.value));
    e.line(0, "}");
}

/// Emits `load4_{a,b}(x, y, base, size) -> vec4<f32>` for an operand fetched 16 bytes at a time
/// ([`crate::kernel::Matmul::vec_a`]): its input, bound as `vec4<f32>`, at the quad whose first element is matrix
/// coordinate `(x, y)`, which the scheduler made sure is 16-byte aligned; and `load_{a,b}`, which the skeleton's
/// other path names, reading one element of that binding.
fn quads(e: &mut Emitter, op: &Operand) {
    let rank = e.k.shape.ndim();
    let (row, col) = (rank - 2, rank - 1);
    let name = op.name();
    let (_, _, flat) = op.extents();
    let [Instr::Load { input, view, .. }] = e.k.body[op.body.clone()] else {
        unreachable!("a quad operand is one load")
    };
    // Through a view, the index comes from the coordinates; without one it is the row-major index, which
    // `load_{a,b}` is handed as `i` (it has no `base` and `size` to compute it from).
    let strided = view.map(|v| format!("u32({})", e.index(v.at, 0)));
    let coords = format!("let c{row} = i32(x);\n    let c{col} = i32(y);");
    let index = strided.clone().unwrap_or_else(|| flat("x", "y"));
    e.line(0, &format!("fn load4_{name}(x: u32, y: u32, base: u32, size: vec3<u32>) -> vec4<f32> {{"));
    e.line(1, &format!("{coords}\n    return i{input}[({index}) / 4u];"));
    e.line(0, "}");
    let index = strided.unwrap_or_else(|| "i".to_string());
    e.line(0, &format!("fn load_{name}(x: u32, y: u32, i: u32) -> f32 {{"));
    e.line(1, &format!("{coords}\n    let e = {index};\n    return i{input}[e / 4u][e % 4u];"));
    e.line(0, "}");
}

/// Emits `load4_{a,b}` for an operand fetched element by element: the skeleton names it on its other path (not
/// taken), and it gives the same 4 elements through `load_{a,b}`.
fn scalar_quads(e: &mut Emitter, op: &Operand) {
    let name = op.name();
    let (_, _, flat) = op.extents();
    // Element t of the quad, along the operand's contiguous axis.
    let elem = |t: u32| {
        let (xt, yt) =
            if op.along { ("x".to_string(), format!("y + {t}u")) } else { (format!("x + {t}u"), "y".to_string()) };
        format!("load_{name}({xt}, {yt}, {})", flat(&xt, &yt))
    };
    e.line(0, &format!("fn load4_{name}(x: u32, y: u32, base: u32, size: vec3<u32>) -> vec4<f32> {{"));
    e.line(1, &format!("return vec4<f32>({}, {}, {}, {});", elem(0), elem(1), elem(2), elem(3)));
    e.line(0, "}");
}

/// Emits `octet_{a,b}(x, y, base, size) -> vec4<u32>`: the operand's 8 elements from matrix coordinate `(x, y)`
/// along its slab line, as f16 pairs, zeros outside the matrix. A direct operand whose 8 elements are whole,
/// contiguous and 16-byte aligned is one load; other direct reads go element by element through the same index
/// math, and other operands through [`load`].
fn octets(e: &mut Emitter, op: &Operand) {
    let rank = e.k.shape.ndim();
    let (row, col) = (rank - 2, rank - 1);
    let name = op.name();
    let (ex, ey, flat) = op.extents();
    // The operands' type: f16, or bf16 on the SPIR-V path (`coop_body`).
    let half = e.k.types[op.value];
    let bf16 = half == DType::BF16;
    // The coordinates of element t of the octet.
    let (xt, yt) = if op.along { ("x", "y + t") } else { ("x + t", "y") };
    match op.direct {
        Some((input, view)) => {
            let index = match view {
                None => flat("x", "y"),
                Some(v) => format!("u32({})", e.index(v.at, 0)),
            };
            e.line(0, &format!("fn index_{name}(x: u32, y: u32, base: u32, size: vec3<u32>) -> u32 {{"));
            e.line(1, &format!("let c{row} = i32(x);\n    let c{col} = i32(y);\n    return {index};"));
            e.line(0, "}");
            let (next_x, next_y, whole) = if op.along {
                ("x", "y + 1u", format!("y + 8u <= {ey} && x < {ex}"))
            } else {
                ("x + 1u", "y", format!("x + 8u <= {ex} && y < {ey}"))
            };
            e.line(0, &format!("fn octet_{name}(x: u32, y: u32, base: u32, size: vec3<u32>) -> vec4<u32> {{"));
            if op.whole {
                e.line(1, &format!("return i{input}[index_{name}(x, y, base, size) / 8u];"));
                e.line(0, "}");
                return;
            }
            e.line(1, &format!("let e0 = index_{name}(x, y, base, size);"));
            let contiguous = format!("index_{name}({next_x}, {next_y}, base, size) == e0 + 1u");
            e.line(1, &format!("if ({whole} && e0 % 8u == 0u && {contiguous}) {{ return i{input}[e0 / 8u]; }}"));
            e.line(1, "var h: array<f32, 8>;");
            e.line(1, "for (var t = 0u; t < 8u; t++) {");
            e.line(2, &format!("if ({xt} < {ex} && {yt} < {ey}) {{"));
            e.line(3, &format!("let q = index_{name}({xt}, {yt}, base, size);"));
            if bf16 {
                e.line(3, &format!("let w = i{input}[q / 8u][(q / 2u) % 4u];"));
                e.line(3, "h[t] = bitcast<f32>(select(w << 16u, w & 0xffff0000u, q % 2u == 1u));");
            } else {
                e.line(3, &format!("let pair = unpack2x16float(i{input}[q / 8u][(q / 2u) % 4u]);"));
                e.line(3, "h[t] = select(pair.x, pair.y, q % 2u == 1u);");
            }
            e.line(2, "}");
            e.line(1, "}");
        }
        None => {
            load(e, op);
            e.line(0, &format!("fn octet_{name}(x: u32, y: u32, base: u32, size: vec3<u32>) -> vec4<u32> {{"));
            e.line(1, "var h: array<f32, 8>;");
            e.line(1, "for (var t = 0u; t < 8u; t++) {");
            e.line(2, &format!("let xt = {xt};\n        let yt = {yt};"));
            // Rounded here, by bits: pack2x16float's rounding is the implementation's.
            let value = e.b.round(half, format!("load_{name}(xt, yt, {})", flat("xt", "yt")));
            e.line(2, &format!("if (xt < {ex} && yt < {ey}) {{ h[t] = {value}; }}"));
            e.line(1, "}");
        }
    }
    if bf16 {
        // Each value is a bf16 already (read from one, or rounded to one): its high half is the bits.
        let pair = |i: usize| format!("(bitcast<u32>(h[{i}]) >> 16u) | (bitcast<u32>(h[{}]) & 0xffff0000u)", i + 1);
        e.line(1, &format!("return vec4<u32>({}, {}, {}, {});", pair(0), pair(2), pair(4), pair(6)));
    } else {
        e.line(
            1,
            "return vec4<u32>(pack2x16float(vec2<f32>(h[0], h[1])), pack2x16float(vec2<f32>(h[2], h[3])), \
             pack2x16float(vec2<f32>(h[4], h[5])), pack2x16float(vec2<f32>(h[6], h[7])));",
        );
    }
    e.line(0, "}");
}

/// The tensor-core skeleton with its unrolled parts filled in: the slabs and their stores (`sw` halves an element),
/// one accumulator per fragment, the fragment loads and products of one 16-step of k, and the epilogue of each
/// accumulator. A slab stored along k holds A row-major (`coopLoadT`) and B column-major (`coopLoad`); the other way
/// round otherwise.
///
/// bf16 operands' octets hold bf16 bits, staged as f16 pairs unpacked from each word: the SPIR-V path makes each
/// such pair the word's bits as they are and retypes every f16 of the module to bf16 (`spirv::Edits::bf16`), so the
/// slabs, fragments and products are bf16 there, and no value is converted. As WGSL such a kernel would read bf16
/// bits as f16; it never runs so.
fn coop_body(fm: u32, fn_: u32, a_along_k: bool, b_along_k: bool, sw: u32) -> String {
    let mut acc = String::new();
    let mut mul = String::new();
    let mut epi = String::new();
    for i in 0..fm {
        let (load, at) = if a_along_k {
            ("coopLoadT", format!("(r0 + {}u) * SA + kk", 16 * i))
        } else {
            ("coopLoad", format!("kk * SA + r0 + {}u", 16 * i))
        };
        let _ = writeln!(mul, "let a{i} = {load}<coop_mat16x16<f16, A>>(&slab_a[({at}) / SW], SA / SW);");
    }
    for j in 0..fn_ {
        let (load, at) = if b_along_k {
            ("coopLoad", format!("(c0 + {}u) * SB + kk", 16 * j))
        } else {
            ("coopLoadT", format!("kk * SB + c0 + {}u", 16 * j))
        };
        let _ = writeln!(mul, "let b{j} = {load}<coop_mat16x16<f16, B>>(&slab_b[({at}) / SW], SB / SW);");
    }
    for i in 0..fm {
        for j in 0..fn_ {
            let _ = writeln!(acc, "var acc{i}_{j} = coop_mat16x16<f32, C>();");
            let _ = writeln!(mul, "acc{i}_{j} = coopMultiplyAdd(a{i}, b{j}, acc{i}_{j});");
            let _ = writeln!(
                epi,
                "coopStoreT(acc{i}_{j}, &frag[sg * 256u], 16u);\nworkgroupBarrier();\n\
                 drain(sg, lane, width, m0 + r0 + {}u, n0 + c0 + {}u, base_a, size);\nworkgroupBarrier();",
                16 * i,
                16 * j
            );
        }
    }
    COOP_SKELETON
        .replace("/*SLABS*/", &slabs(sw))
        .replace("/*ACCUMULATORS*/", &acc)
        .replace("/*MULTIPLY*/", &mul)
        .replace("/*EPILOGUE*/", &epi)
}

/// The tensor-core kernel's slabs, `sw` halves (1, 2 or 4) an element, and the stores of an octet into them: the
/// wider the element, the fewer and wider the workgroup stores (8 of 2 bytes, 4 of 4, or 2 of 8 an octet), and the
/// cooperative loads read the same array, their stride counted in its elements.
fn slabs(sw: u32) -> String {
    let (sw, element, store) = match sw {
        2 => (2, "vec2<f16>", "for (var w = 0u; w < 4u; w++) { S[at / 2u + w] = halves(v[w]); }"),
        4 => (
            4,
            "vec4<f16>",
            "S[at / 4u] = vec4<f16>(halves(v.x), halves(v.y));\n    \
             S[at / 4u + 1u] = vec4<f16>(halves(v.z), halves(v.w));",
        ),
        _ => (
            1,
            "f16",
            "for (var w = 0u; w < 4u; w++) {\n        let h = halves(v[w]);\n        \
             S[at + 2u * w] = h.x;\n        S[at + 2u * w + 1u] = h.y;\n    }",
        ),
    };
    // An octet's word as two halves (for bf16 bits, the bits themselves on the SPIR-V path: see `coop_body`).
    let mut out =
        format!("const SW: u32 = {sw}u;\nfn halves(x: u32) -> vec2<f16> {{ return vec2<f16>(unpack2x16float(x)); }}\n");
    for (slab, size, put) in [("slab_a", "SLAB_A", "put_a"), ("slab_b", "SLAB_B", "put_b")] {
        let _ = write!(
            out,
            "var<workgroup> {slab}: array<{element}, {size} / SW>;\nfn {put}(at: u32, v: vec4<u32>) {{\n    {}\n}}\n",
            store.replace("S[", &format!("{slab}["))
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::wgpu::codegen::validate;
    use crate::graph::{Graph, NodeOp};
    use crate::kernel::Matmul;
    use crate::op::UnaryOp;
    use crate::schedule::{plan, Options};
    use crate::shape::Shape;
    use crate::view::View;

    /// The kernel of `relu(a b)` for f16 `a` (`[m, k]`, or its transpose's view) and `b` (`[k, n]`).
    fn f16_product(m: usize, k: usize, n: usize, a_transposed: bool, b_transposed: bool) -> Kernel {
        f16_product_keeping(Tri::Full, (m, k, n), a_transposed, b_transposed)
    }

    fn f16_product_keeping(
        tri: Tri,
        (m, k, n): (usize, usize, usize),
        a_transposed: bool,
        b_transposed: bool,
    ) -> Kernel {
        let mut g = Graph::default();
        let data = |g: &mut Graph, r: usize, c: usize, t: bool| {
            let (r0, c0) = if t { (c, r) } else { (r, c) };
            let d = g.add(NodeOp::Data(vec![0; (r0 * c0).div_ceil(2)]), Shape::from([r0, c0]), DType::F16);
            if !t {
                return d;
            }
            let v = View { shape: Shape::from([r, c]), strides: vec![1, r as isize].into(), offset: 0 };
            g.add(NodeOp::View(v, d), Shape::from([r, c]), DType::F16)
        };
        let a = data(&mut g, m, k, a_transposed);
        let b = data(&mut g, k, n, b_transposed);
        let p = g.add(NodeOp::Matmul(a, b, tri), Shape::from([m, n]), DType::F16);
        let out = g.add(NodeOp::Unary(UnaryOp::Relu, p), Shape::from([m, n]), DType::F16);
        let opts = Options::TEST;
        let kernels = plan(&g, &[out], &opts).kernels;
        assert_eq!(kernels.len(), 1, "the product and its epilogue are one kernel");
        kernels[0].clone()
    }

    #[test]
    fn triangular_products_run_on_tensor_cores_with_the_triangle_kept() {
        let coop = Target { subgroups: true, f16: true, coop: true, coop_triangles: true, ..Default::default() };
        for tri in [Tri::OutLower, Tri::OutUpper, Tri::Causal, Tri::ALower, Tri::AUpper] {
            for (ta, tb) in [(false, false), (true, true)] {
                let kernel = f16_product_keeping(tri, (200, 200, 72), ta, tb);
                let Kind::Matmul(mm) = kernel.kind else { panic!("a matmul kernel") };
                assert!(uses_coop(&kernel, &mm, &coop), "{tri:?}");
                let slabs = Target { coop_slab: 2 + 2 * u32::from(ta), ..coop };
                validate(&generate(&kernel, &slabs));
                let src = generate(&kernel, &coop);
                assert!(src.contains("coopMultiplyAdd(") && src.contains("k0 < k_hi"), "{tri:?}");
                // Only where A's triangle is kept are its octets masked; only where the output's is, its values.
                let masks_a = matches!(tri, Tri::ALower | Tri::AUpper);
                assert_eq!(src.contains("keep(row, col, frag["), !masks_a, "{tri:?}: outputs through keep");
                assert_eq!(src.contains("put(li, mask_a(li, m0, k0, ra), rb)"), masks_a, "{tri:?}");
                validate(&src);
                // Until `LAZOR_COOP_TRIANGLES` turns them on, triangular products stay tiled.
                let off = Target { coop_triangles: false, ..coop };
                assert!(!uses_coop(&kernel, &mm, &off) && !generate(&kernel, &off).contains("coop"), "{tri:?}");
            }
        }
    }

    #[test]
    fn subgroups_split_each_tile_into_whole_fragments() {
        for (bm, bn) in [(128, 128), (128, 64), (64, 128), (64, 64)] {
            let (sgn, fm, fn_) = coop_layout(bm, bn).unwrap();
            assert_eq!((8 / sgn) * fm * 16, bm, "{bm}x{bn}");
            assert_eq!(sgn * fn_ * 16, bn, "{bm}x{bn}");
            assert!(fm.abs_diff(fn_) <= 1 || fm * fn_ == 8, "{bm}x{bn}: {fm}x{fn_}");
        }
        assert_eq!(coop_layout(32, 32), None, "4 fragments for 8 subgroups");
        assert_eq!(coop_layout(40, 64), None);
    }

    #[test]
    fn the_tensor_core_kernel_is_valid_wgsl_for_every_layout() {
        let coop = Target { subgroups: true, f16: true, coop: true, ..Default::default() };
        for (m, k, n) in [(4096, 4096, 4096), (200, 72, 100), (64, 33, 64)] {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let kernel = f16_product(m, k, n, ta, tb);
                let Kind::Matmul(mm) = kernel.kind else { panic!("a matmul kernel") };
                assert_eq!((mm.a_along_k, mm.b_along_k), (!ta, tb), "{m}x{k}x{n}");
                assert!(uses_coop(&kernel, &mm, &coop));
                let src = generate(&kernel, &coop);
                assert!(src.starts_with("enable f16;\nenable wgpu_cooperative_matrix;\n"));
                assert!(src.contains("coopMultiplyAdd(") && src.contains("fn store("));
                validate(&src);
                // Every slab width is valid, each with its element type and stores.
                for (coop_slab, slab) in
                    [(1, "array<f16, SLAB_A / SW>"), (2, "array<vec2<f16>,"), (4, "array<vec4<f16>,")]
                {
                    let src = generate(&kernel, &Target { coop_slab, ..coop });
                    assert!(src.contains(&format!("const SW: u32 = {coop_slab}u;")) && src.contains(slab));
                    validate(&src);
                }
                // Whole blocks of plain operands fetch each octet with one unchecked load, either layout; the
                // other shapes check every octet at run time.
                let whole = m == 4096;
                assert_eq!((mm.octets_a, mm.octets_b), (whole, whole), "{m}x{k}x{n} {ta} {tb}");
                assert_eq!(src.contains("== e0 + 1u"), !whole, "{src}");
                // Without cooperative matrices the same kernel is the tiled one.
                let tiled = generate(&kernel, &Target { coop: false, ..coop });
                assert!(!tiled.contains("coop"));
                validate(&tiled);
            }
        }
    }

    #[test]
    fn only_f16_products_use_tensor_cores() {
        let coop = Target { subgroups: true, f16: true, coop: true, ..Default::default() };
        let mut kernel = f16_product(256, 256, 256, false, false);
        let Kind::Matmul(mm) = kernel.kind else { panic!("a matmul kernel") };
        assert!(!uses_coop(&kernel, &mm, &Target { f16: false, ..coop }), "packed f16 has no f16 slabs");
        kernel.types[mm.b] = DType::BF16;
        assert!(!uses_coop(&kernel, &mm, &coop));
        // Every block of the shape table fits; a forced 512 x 256 block does not (64.5 KiB).
        for (bm, bn) in [(128, 128), (128, 64), (64, 128), (64, 64)] {
            for (a_along_k, b_along_k) in [(false, false), (false, true), (true, false), (true, true)] {
                let tile = crate::kernel::MatmulTile { bm, bn, bk: 8, tm: 8, tn: 8 };
                let m = Matmul { tile, a_along_k, b_along_k, ..mm };
                assert!(coop_bytes(&m) <= COOP_WORKGROUP_BYTES, "{bm}x{bn}");
            }
        }
        let tile = crate::kernel::MatmulTile { bm: 512, bn: 256, bk: 8, tm: 32, tn: 16 };
        assert!(coop_bytes(&Matmul { tile, ..mm }) > COOP_WORKGROUP_BYTES);
    }
}
