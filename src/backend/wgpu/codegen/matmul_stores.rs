//! A matmul's epilogue stores: the `store` function every skeleton calls (with `epi` and `store4` for outputs packed
//! two or four to a word, which write whole words, or, for f32 outputs of an n that is a multiple of 4, `store4`
//! alone, which writes 16-byte vectors), and the tiled kernel's calls of it, unrolled.

use super::emit::Emitter;
use std::fmt::Write;

/// The stores of one thread's `tm` x `tn` outputs, unrolled with constant indices into `acc`. As a loop, NVIDIA's
/// compiler (580) left it rolled when the epilogue was long (a GELU with its pre-activation also stored), indexing
/// `acc` at run time, which moved it out of registers and made the whole product far slower (figures:
/// docs/notes/source-measurements.md, `src/backend/wgpu/codegen/matmul_stores.rs`). With `store4` (packed or vector
/// outputs), each thread's 4 neighbouring columns go to it together, which writes whole words or vectors. Where the
/// product keeps one triangle of its output (`masked`), each value passes through the skeleton's `keep` (`keep4`)
/// first, which fills the other (0, or -inf for `Tri::Causal`).
pub(super) fn stores(tile: crate::kernel::MatmulTile, store4: bool, masked: bool) -> String {
    let keep = |name: &str, value: String| if masked { format!("{name}(row, col, {value})") } else { value };
    let (rm, rn) = (tile.tm / 4, tile.tn / 4);
    let mut out = String::new();
    for s in 0..rm {
        for r in 0..4 {
            let _ = writeln!(
                out,
                "    {{
        let row = m0 + {s}u * (BM / RM) + ty * 4u + {r}u;"
            );
            out.push_str(
                "        if (row < size.x) {
",
            );
            for q in 0..rn {
                let at = (s * 4 + r) * rn + q;
                if store4 {
                    let _ = writeln!(
                        out,
                        "            {{ let col = n0 + {q}u * (BN / RN) + tx * 4u; \
                         store4(row, col, (base_a + row) * size.y + col, {}); }}",
                        keep("keep4", format!("acc[{at}]"))
                    );
                    continue;
                }
                for c in 0..4 {
                    let _ = writeln!(
                        out,
                        "            {{ let col = n0 + {q}u * (BN / RN) + tx * 4u + {c}u; if (col < size.y) {{ \
                         store(row, col, (base_a + row) * size.y + col, {}); }} }}",
                        keep("keep", format!("acc[{at}][{c}]"))
                    );
                }
            }
            out.push_str(
                "        }
    }
",
            );
        }
    }
    out
}

/// Emits the epilogue's store functions from instruction `epilogue` on, with `row` and `col` the kernel's last two
/// axes: [`store4_functions`] for vector stores, [`packed_stores`] where an output is packed, else `store` alone;
/// whether the kernel has a `store4` (the first two).
pub(super) fn store_functions(e: &mut Emitter, epilogue: usize, row: usize, col: usize, quad: bool) -> bool {
    let k = e.k;
    if quad {
        store4_functions(e, epilogue, row, col);
        return true;
    }
    let packed: Vec<(usize, u32)> = (0..k.outputs.len()).filter_map(|o| e.packed_per(o).map(|per| (o, per))).collect();
    if !packed.is_empty() {
        packed_stores(e, &packed, epilogue, row, col);
        return true;
    }
    e.line(
        0,
        &format!(
            "fn store(r: u32, c: u32, i: u32, folded: f32) {{\n    let c{row} = i32(r);\n    let c{col} = i32(c);"
        ),
    );
    e.range(epilogue..k.body.len(), 1);
    let at = stored_at(e);
    for (o, &(_, value)) in k.outputs.iter().enumerate() {
        let st = e.store(o, &at, &format!("t{value}"));
        e.line(1, &st);
    }
    e.line(0, "}");
    false
}

/// Where the element at row `c{row}`, column `c{col}` and index `i` is stored: at `i`, or through the kernel's
/// store view ([`crate::kernel::Kernel::store_view`]), which the batch coordinates and those two reach.
fn stored_at(e: &Emitter) -> String {
    match e.k.store_view {
        Some(at) => format!("u32({})", e.index(at, 0)),
        None => "i".to_string(),
    }
}

/// Emits `fn epi(r, c, i, folded) -> array<T, N>` (`(ty, n)` = (T, N)): the epilogue of the element at row `r`, column
/// `c` and index `i` from instruction `epilogue` on, then `line(e, output, value)` for each output, filling `w`.
fn epi(
    e: &mut Emitter,
    (ty, n): (&str, usize),
    epilogue: usize,
    row: usize,
    col: usize,
    mut line: impl FnMut(&mut Emitter, usize, &str) -> String,
) {
    e.line(
        0,
        &format!(
            "fn epi(r: u32, c: u32, i: u32, folded: f32) -> array<{ty}, {n}> {{\n    let c{row} = i32(r);\n    \
             let c{col} = i32(c);\n    var w: array<{ty}, {n}>;"
        ),
    );
    e.range(epilogue..e.k.body.len(), 1);
    for (o, &(_, value)) in e.k.outputs.iter().enumerate() {
        let st = line(e, o, &format!("t{value}"));
        e.line(1, &st);
    }
    e.line(1, "return w;");
    e.line(0, "}");
}

/// The epilogue of a kernel whose f32 outputs are bound as `vec4<f32>` ([`crate::kernel::Matmul::quad`]): `epi` runs
/// the epilogue of one element and returns every output's value; `store4` runs it for 4 neighbouring columns of one
/// row (all inside n, which is a multiple of 4) and stores one vector per output. Element by element, a warp's
/// store wrote 4-byte values 16 bytes apart, four times over the same sectors.
fn store4_functions(e: &mut Emitter, epilogue: usize, row: usize, col: usize) {
    let n = e.k.outputs.len();
    epi(e, ("f32", n), epilogue, row, col, |_, o, v| format!("w[{o}] = {v};"));
    e.line(0, "fn store4(r: u32, c: u32, i: u32, v: vec4<f32>) {");
    e.line(1, "if (c >= sizes().y) { return; }");
    for j in 0..4 {
        e.line(1, &format!("let w{j} = epi(r, c + {j}u, i + {j}u, v[{j}]);"));
    }
    e.line(1, &format!("let c{row} = i32(r);\n    let c{col} = i32(c);"));
    let at = stored_at(e);
    for o in 0..n {
        let st = e.store(o, &format!("{at} >> 2u"), &format!("vec4<f32>(w0[{o}], w1[{o}], w2[{o}], w3[{o}])"));
        e.line(1, &st);
    }
    e.line(0, "}");
}

/// The epilogue of a kernel with `packed` outputs (narrow elements stored by atomic word updates where they are stored
/// one at a time), as three functions: `epi` runs the epilogue of one element, stores its word-sized outputs and
/// returns the packed outputs' bits; `store` writes those bits one element at a time; `store4` takes 4 neighbouring
/// columns of one row, and where they fill whole words (the first one's flat index a multiple of the elements per word,
/// all 4 inside) writes each word once. Element by element, a bf16 product's two atomic updates per output made it far
/// slower than the f32 kernel.
fn packed_stores(e: &mut Emitter, packed: &[(usize, u32)], epilogue: usize, row: usize, col: usize) {
    debug_assert!(e.k.store_view.is_none(), "only f32 outputs are stored through a view");
    epi(e, ("u32", packed.len()), epilogue, row, col, |e, o, v| match packed.iter().position(|&(p, _)| p == o) {
        Some(j) => format!("w[{j}] = {};", e.packed_bits(o, v)),
        None => e.store(o, "i", v),
    });
    e.line(0, "fn store(r: u32, c: u32, i: u32, folded: f32) {");
    e.line(1, "let w = epi(r, c, i, folded);");
    for (j, &(o, _)) in packed.iter().enumerate() {
        e.line(1, &format!("st{o}(i, w[{j}]);"));
    }
    e.line(0, "}");
    e.line(0, "fn store4(r: u32, c: u32, i: u32, v: vec4<f32>) {");
    // The 4 fill whole words where their first index is a multiple of the most elements a word of any packed
    // output holds: 2 for 16-bit outputs, so rows of an n that is 2 mod 4 qualify too.
    let per = packed.iter().map(|&(_, per)| per).max().unwrap_or(4);
    e.line(1, &format!("if ((i & {}u) == 0u && c + 3u < sizes().y) {{", per - 1));
    for j in 0..4 {
        e.line(2, &format!("let w{j} = epi(r, c + {j}u, i + {j}u, v[{j}]);"));
    }
    for (j, &(o, per)) in packed.iter().enumerate() {
        if per == 2 {
            e.line(2, &format!("atomicStore(&o{o}[i >> 1u], w0[{j}] | (w1[{j}] << 16u));"));
            e.line(2, &format!("atomicStore(&o{o}[(i >> 1u) + 1u], w2[{j}] | (w3[{j}] << 16u));"));
        } else {
            debug_assert_eq!(per, 4);
            e.line(
                2,
                &format!(
                    "atomicStore(&o{o}[i >> 2u], w0[{j}] | (w1[{j}] << 8u) | (w2[{j}] << 16u) | (w3[{j}] << 24u));"
                ),
            );
        }
    }
    e.line(1, "} else {");
    e.line(2, "for (var j = 0u; j < 4u; j++) { if (c + j < sizes().y) { store(r, c + j, i + j, v[j]); } }");
    e.line(1, "}");
    e.line(0, "}");
}
