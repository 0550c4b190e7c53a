//! WGSL for rows kernels: a workgroup per row runs the kernel's phases in order. A fold phase folds its element
//! over the row (threads striding, then a tree) and hands the result to every thread; a map phase computes its
//! outputs for every element of the row. The row is read from memory once; the later phases find it in cache.

use super::elementwise::Emitter;
use super::reduce::{accumulate, main_header, output_coords, row_major, tree, Fold};
use super::{lane_type, Target, WORKGROUP_SIZE};
use crate::kernel::{Kernel, Kind, Phase};

/// The WGSL source of a rows kernel.
pub(super) fn generate(k: &Kernel, target: &Target) -> String {
    let Kind::Rows { axis, team_at } = k.kind else { unreachable!("a rows kernel") };
    let mut e = Emitter::new(k, target);
    let rank = k.shape.ndim();
    let at = k.dims_at.expect("rows kernels have coordinates");
    let dim = |d: usize| format!("p[{}]", at + d);
    let wg = WORKGROUP_SIZE;
    main_header(&mut e, true, target.subgroups);
    // A team of threads per row, `256 / team` rows per workgroup.
    e.line(1, &format!("let team = p[{team_at}];"));
    e.line(1, "let lane_t = lid.x % team;");
    e.line(1, &format!("let first = (wid.x + wid.y * nwg.x) * ({wg}u / team);"));
    // Uniform per workgroup: the barriers below stay in uniform control flow.
    e.line(1, "if (first >= p[0]) { return; }");
    e.line(1, "let o = first + lid.x / team;");
    // A team past the last row computes nothing but still meets its workgroup's barriers.
    e.line(1, "let valid = o < p[0];");
    output_coords(&mut e, axis);
    e.line(1, &format!("let n = select(0u, {}, valid);", dim(axis)));
    // Wide (the row a whole number of vectors, every read allowing it): each step takes 4 adjacent elements.
    let wide = e.wide;
    let end = if wide { "n / 4u" } else { "n" };
    // Folds are numbered among folds (as `Instr::Folded` counts them), not among phases.
    let mut n = 0;
    for phase in &k.phases {
        match phase {
            Phase::Fold { op, body, value, output } => {
                let fold = Fold { op: *op, axis, body: body.clone(), value: *value };
                let dt = k.types[*value];
                let ty = lane_type(dt.lanes(), 1);
                e.line(1, &format!("var f{n}: {ty};"));
                e.line(1, "{");
                accumulate(&mut e, &fold, "lane_t", "team", end, 2);
                tree(&mut e, *op, dt, target.subgroups, 2);
                e.line(2, &format!("f{n} = bitcast<{ty}>(red[root]);"));
                if let Some(out) = output {
                    let st = e.store(*out, "o", &format!("f{n}"));
                    e.line(2, &format!("if (lane_t == 0u && valid) {{ {st} }}"));
                }
                // Before the next fold writes `red` again.
                e.line(2, "workgroupBarrier();");
                e.line(1, "}");
                // `accumulate` left the emitter scalar for the fold's result; the next phase is wide again.
                if wide {
                    e.wide = true;
                    e.b.set_width(4);
                }
                n += 1;
            }
            Phase::Map { body, outputs } => {
                e.line(1, &format!("for (var r = lane_t; r < {end}; r = r + team) {{"));
                let first = if wide { "4u * r" } else { "r" };
                e.line(2, &format!("let c{axis} = i32({first});"));
                let ix = row_major(rank, &dim, |d| format!("u32(c{d})"));
                // In vectors when wide: loads and stores at the kernel's own index take 4 elements from there.
                let ix = if wide { format!("({ix}) / 4u") } else { ix };
                e.line(2, &format!("let i = {ix};"));
                e.range(body.clone(), 2);
                for &out in outputs {
                    let st = e.store(out, "i", &format!("t{}", k.outputs[out].1));
                    e.line(2, &st);
                }
                e.line(1, "}");
            }
        }
    }
    e.out.push_str("}\n");
    let Emitter { b, out, .. } = e;
    b.finish(&out)
}
