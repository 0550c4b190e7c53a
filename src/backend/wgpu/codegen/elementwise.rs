//! WGSL for elementwise kernels: one thread per element or per 4 elements, coordinates when views need them,
//! strided loads, and concatenations as branches that only load the part they select.

use super::emit::{index_at, Emitter, PITCH, STEP};
use super::{lane_type, param, Target, WORKGROUP_SIZE};
use crate::kernel::{Kernel, TILE};
use std::fmt::Write;

/// The WGSL source of an elementwise kernel.
pub(super) fn generate(k: &Kernel, target: &Target) -> String {
    let mut e = Emitter::new(k, target);
    if k.tiles.is_empty() {
        linear_main(&mut e);
    } else {
        tiled_main(&mut e);
    }
    let Emitter { b, out, .. } = e;
    b.finish(&out)
}

/// One thread per element (or per 4): coordinates from the thread's index.
fn linear_main(e: &mut Emitter) {
    let k = e.k;
    let n = param(0);
    let threads = match (k.width, k.dims_at) {
        (4, None) => format!("({n} + 3u) / 4u"),
        (4, Some(_)) => format!("{n} / 4u"),
        _ => n,
    };
    if k.vectors == 2 {
        return paired_main(e, &threads);
    }
    let _ = write!(
        e.out,
        "@compute @workgroup_size({WORKGROUP_SIZE})\n\
         fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{\n\
         \x20   let i = gid.x + gid.y * nwg.x * {WORKGROUP_SIZE}u;\n\
         \x20   if (i >= {threads}) {{ return; }}\n"
    );
    coords(e, 1);
    e.range(0..k.body.len(), 1);
    // A slice written into a larger buffer stores at the index its body computed (`Kernel::scatter`).
    let at = k.scatter.map_or_else(|| "i".to_string(), |s| format!("u32(t{s})"));
    for (o, &(_, value)) in k.outputs.iter().enumerate() {
        let st = e.store(o, &at, &format!("t{value}"));
        e.line(1, &st);
    }
    e.out.push_str("}\n");
}

/// The coordinates of vector (or element) `i`'s first element, innermost axis first, where the body needs them.
fn coords(e: &mut Emitter, depth: usize) {
    let k = e.k;
    if let Some(at) = k.dims_at {
        let rank = k.shape.ndim();
        e.line(depth, &format!("var r = i * {}u;", k.width));
        for d in (0..rank).rev() {
            if d == 0 {
                e.line(depth, "let c0 = i32(r);");
            } else {
                e.line(depth, &format!("let c{d} = i32(r % {});", param(at + d)));
                e.line(depth, &format!("r = r / {};", param(at + d)));
            }
        }
    }
}

/// Two vectors per thread, `g` and `g + half` (each warp's loads stay contiguous): both computed before either is
/// stored, so that the second's loads are in flight with the first's. The driver must assume a store may alias
/// any input, so a store between them would hold the second's loads back. The second's index is clamped rather
/// than branched on, which keeps the loads in straight-line code; only its stores are guarded.
fn paired_main(e: &mut Emitter, threads: &str) {
    let k = e.k;
    let _ = write!(
        e.out,
        "@compute @workgroup_size({WORKGROUP_SIZE})\n\
         fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{\n\
         \x20   let g = gid.x + gid.y * nwg.x * {WORKGROUP_SIZE}u;\n\
         \x20   let n = {threads};\n\
         \x20   let half = (n + 1u) / 2u;\n\
         \x20   if (g >= half) {{ return; }}\n"
    );
    for u in 0..2 {
        for (o, &(_, value)) in k.outputs.iter().enumerate() {
            let ty = e.b.ty(k.types[value]);
            e.line(1, &format!("var r{o}_{u}: {ty};"));
        }
    }
    for u in 0..2 {
        e.line(1, "{");
        e.line(2, if u == 0 { "let i = g;" } else { "let i = min(g + half, n - 1u);" });
        coords(e, 2);
        e.range(0..k.body.len(), 2);
        for (o, &(_, value)) in k.outputs.iter().enumerate() {
            e.line(2, &format!("r{o}_{u} = t{value};"));
        }
        e.line(1, "}");
    }
    for u in 0..2 {
        e.line(1, if u == 0 { "{" } else { "if (g + half < n) {" });
        e.line(2, if u == 0 { "let i = g;" } else { "let i = g + half;" });
        for o in 0..k.outputs.len() {
            let st = e.store(o, "i", &format!("r{o}_{u}"));
            e.line(2, &st);
        }
        e.line(1, "}");
    }
    e.out.push_str("}\n");
}

/// A workgroup per `TILE` x `TILE` block of the two innermost axes (and one index of the outer ones): first the
/// tiled views are read along their contiguous axis into workgroup memory, then each thread computes `TILE / STEP`
/// elements of one column of the block, reading the tiles across.
fn tiled_main(e: &mut Emitter) {
    let k = e.k;
    let rank = k.shape.ndim();
    let at = k.dims_at.expect("tiled kernels use coordinates");
    let (rows, cols) = (param(at + rank - 2), param(at + rank - 1));
    let per = TILE / STEP;
    for (t, &(input, _)) in k.tiles.iter().enumerate() {
        let ty = lane_type(k.in_types[input], 1);
        let _ = writeln!(e.out, "var<workgroup> tile{t}: array<{ty}, {}>;", TILE * PITCH);
    }
    let _ = write!(
        e.out,
        "@compute @workgroup_size({WORKGROUP_SIZE})\n\
         fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, \
         @builtin(num_workgroups) nwg: vec3<u32>) {{\n"
    );
    e.line(1, &format!("let tiles_c = ({cols} + {}u) / {TILE}u;", TILE - 1));
    e.line(1, &format!("let tiles_r = ({rows} + {}u) / {TILE}u;", TILE - 1));
    e.line(1, "let w = wid.x + wid.y * nwg.x;");
    // Uniform per workgroup, so returning keeps the barrier below in uniform control flow.
    e.line(1, &format!("if (w >= tiles_c * tiles_r * ({} / ({rows} * {cols}))) {{ return; }}", param(0)));
    e.line(1, &format!("let c0_ = (w % tiles_c) * {TILE}u;"));
    e.line(1, "var r = w / tiles_c;");
    e.line(1, &format!("let r0_ = (r % tiles_r) * {TILE}u;"));
    e.line(1, "r = r / tiles_r;");
    for d in (0..rank - 2).rev() {
        if d == 0 {
            e.line(1, "let c0 = i32(r);");
        } else {
            e.line(1, &format!("let c{d} = i32(r % {});", param(at + d)));
            e.line(1, &format!("r = r / {};", param(at + d)));
        }
    }
    e.line(1, &format!("let tx = lid.x % {TILE}u;"));
    e.line(1, &format!("let ty = lid.x / {TILE}u;"));
    let mut names: Vec<String> = (0..rank - 2).map(|d| format!("c{d}")).collect();
    names.push("i32(r0_ + tx)".into());
    names.push(format!("i32(c0_ + ty + {STEP}u * k)"));
    // Whole tiles (all but the edges) skip the bounds checks, so the compiler can unroll and overlap the loads.
    e.line(1, &format!("let full = r0_ + {TILE}u <= {rows} && c0_ + {TILE}u <= {cols};"));
    for checked in [false, true] {
        e.line(1, if checked { "} else {" } else { "if (full) {" });
        e.line(2, &format!("for (var k = 0u; k < {per}u; k++) {{"));
        if checked {
            e.line(3, &format!("if (r0_ + tx >= {rows} || c0_ + ty + {STEP}u * k >= {cols}) {{ continue; }}"));
        }
        for (t, &(input, view_at)) in k.tiles.iter().enumerate() {
            let ix = index_at(rank, view_at, &names);
            let v = e.elem(input, &format!("u32({ix})"));
            e.line(3, &format!("tile{t}[(ty + {STEP}u * k) * {PITCH}u + tx] = {v};"));
        }
        e.line(2, "}");
    }
    e.line(1, "}");
    e.line(1, "workgroupBarrier();");
    let mut idx = String::from("col");
    let mut stride = param(at + rank - 1);
    for d in (0..rank - 1).rev() {
        let c = if d + 2 == rank { "row".to_string() } else { format!("u32(c{d})") };
        idx = format!("{idx} + {c} * {stride}");
        stride = format!("{stride} * {}", param(at + d));
    }
    for checked in [false, true] {
        e.line(1, if checked { "} else {" } else { "if (full) {" });
        e.line(2, &format!("for (var k = 0u; k < {per}u; k++) {{"));
        e.line(3, &format!("let row = r0_ + ty + {STEP}u * k;"));
        e.line(3, "let col = c0_ + tx;");
        if checked {
            e.line(3, &format!("if (row >= {rows} || col >= {cols}) {{ continue; }}"));
        }
        e.line(3, &format!("let c{} = i32(row);", rank - 2));
        e.line(3, &format!("let c{} = i32(col);", rank - 1));
        // The element's row-major index, for loads at the kernel's own index and the stores.
        e.line(3, &format!("let i = {idx};"));
        e.range(0..k.body.len(), 3);
        for (o, &(_, value)) in k.outputs.iter().enumerate() {
            let st = e.store(o, "i", &format!("t{value}"));
            e.line(3, &st);
        }
        e.line(2, "}");
    }
    e.line(1, "}");
    e.out.push_str("}\n");
}
