//! WGSL for rows kernels: a workgroup per row runs the kernel's phases in order, from registers where the row fits.

use super::emit::Emitter;
use super::reduce::{accumulate, main_header, output_coords, own_index, tree, Fold, UNROLL};
use super::{lane_type, param, Target, WORKGROUP_SIZE};
use crate::hash::FastMap;
use crate::kernel::{Access, Instr, Kernel, Kind, Phase};

// A fold phase folds its element over the row (threads striding, then a tree) and hands the result to every thread; a
// map phase computes its outputs for every element of the row. Wide kernels whose row is at most `UNROLL` vectors per
// thread read the row from memory once, into registers (`rc{input}`), and every phase reads it there; longer rows
// stream it in each phase and the later phases find it in cache. Which path runs depends on the row length, a
// parameter, so a new length compiles nothing. The cached path also keeps what several phases compute alike from the
// row before any fold (`row_values`: an attention's mask and scale), so each phase reads it instead of computing it
// again, which made nanoGPT's masked softmax markedly faster (figures: docs/notes/source-measurements.md,
// `src/backend/wgpu/codegen/rows.rs`).

/// The WGSL source of a rows kernel.
pub(super) fn generate(k: &Kernel, target: &Target) -> String {
    let Kind::Rows { axis, team_at, online } = k.kind else { unreachable!("a rows kernel") };
    let mut e = Emitter::new(k, target);
    let at = k.dims_at.expect("rows kernels have coordinates");
    let dim = |d: usize| param(at + d);
    let wg = WORKGROUP_SIZE;
    main_header(&mut e, true, target.subgroups);
    // A team of threads per row, `256 / team` rows per workgroup.
    e.line(1, &format!("let team = {};", param(team_at)));
    e.line(1, "let lane_t = lid.x % team;");
    e.line(1, &format!("let first = (wid.x + wid.y * nwg.x) * ({wg}u / team);"));
    // Uniform per workgroup: the barriers below stay in uniform control flow.
    e.line(1, &format!("if (first >= {}) {{ return; }}", param(0)));
    e.line(1, "let o = first + lid.x / team;");
    // A team past the last row computes nothing but still meets its workgroup's barriers.
    e.line(1, &format!("let valid = o < {};", param(0)));
    output_coords(&mut e, axis);
    e.line(1, &format!("let n = select(0u, {}, valid);", dim(axis)));
    // Inputs read at the kernel's own index, with the type of their values.
    let mut cached: Vec<(usize, String)> = Vec::new();
    for (q, instr) in k.body.iter().enumerate().filter(|_| e.wide) {
        if let Instr::Load { input, view: None, .. } = instr {
            if !cached.iter().any(|(c, _)| c == input) {
                cached.push((*input, e.b.ty(k.types[q]).to_string()));
            }
        }
    }
    if cached.is_empty() {
        phases(&mut e, axis, 1, false, online);
    } else {
        // The condition reads the parameters only: uniform, so the barriers in both branches stay legal.
        e.line(1, &format!("if ({} / 4u <= team * {UNROLL}u) {{", dim(axis)));
        for (input, ty) in &cached {
            e.line(2, &format!("var rc{input}: array<{ty}, {UNROLL}>;"));
        }
        let RowValues { kept, needs, of, dead } = row_values(k);
        for &first in &kept {
            e.line(2, &format!("var rv{first}: array<{}, {UNROLL}>;", e.b.ty(k.types[first])));
        }
        // What the kept values compute from the row's statistics alone, once, ahead of the row's steps.
        let needed = |n: usize| needs.binary_search(&n).is_ok();
        e.hoisted_where(0..k.body.len(), needed, 2, |e| {
            for u in 0..UNROLL {
                step(e, axis, u, 3);
                for (input, _) in &cached {
                    let load = e.own_load(*input);
                    e.line(5, &format!("rc{input}[{u}] = {load};"));
                }
                e.cache = Some(u);
                for &n in &needs {
                    if !e.is_hoisted(n) {
                        e.instr(n, 5);
                    }
                }
                e.cache = None;
                for &first in &kept {
                    e.line(5, &format!("rv{first}[{u}] = t{first};"));
                }
                e.line(4, "}");
                e.line(3, "}");
            }
        });
        (e.row_values, e.dead) = (of, dead);
        phases(&mut e, axis, 2, true, online);
        (e.row_values, e.dead) = Default::default();
        e.line(1, "} else {");
        phases(&mut e, axis, 2, false, online);
        e.line(1, "}");
    }
    e.out.push_str("}\n");
    let Emitter { b, out, .. } = e;
    b.finish(&out)
}

/// The fewest instructions (arithmetic, indices, loads through a view) a shared value must take to compute for
/// [`row_values`] to keep it: below that, computing it again costs about what reading it back does, and the
/// generated code would change for nothing. nanoGPT's masked softmax recomputed its mask and scale in 9.
const KEEP_MIN_WORK: usize = 4;

/// The instructions of `k` that computing `roots` reads, roots included, not looking past the instructions `stop`
/// accepts (their values come from elsewhere).
fn reads(k: &Kernel, roots: impl IntoIterator<Item = usize>, stop: impl Fn(usize) -> bool) -> Vec<bool> {
    let mut read = vec![false; k.body.len()];
    roots.into_iter().for_each(|n| read[n] = true);
    for n in (0..k.body.len()).rev() {
        if read[n] && !stop(n) {
            k.body[n].operands().into_iter().for_each(|o| read[o] = true);
        }
    }
    read
}

/// The instructions computing value `n` of `k` takes, parameters and loads at the kernel's own index not counted.
fn work(k: &Kernel, n: usize) -> usize {
    let read = reads(k, [n], |_| false);
    let costs = |i: usize| !matches!(k.body[i], Instr::Scalar(_) | Instr::Load { view: None, .. });
    (0..=n).filter(|&i| read[i] && costs(i)).count()
}

/// What the phases of rows kernel `k` fold or store, per element: the values everything else is computed for.
fn phase_roots(k: &Kernel) -> Vec<usize> {
    k.phases
        .iter()
        .flat_map(|phase| match phase {
            Phase::Fold { value, .. } => vec![*value],
            Phase::Map { outputs, .. } => outputs.iter().map(|&o| k.outputs[o].1).collect(),
        })
        .collect()
}

/// Values the phases of a rows kernel share ([`row_values`]).
#[derive(Default)]
struct RowValues {
    /// The instructions that compute them first: each is kept per slot in `rv{n}`.
    kept: Vec<usize>,
    /// What computing the kept values takes, ascending.
    needs: Vec<usize>,
    /// For each instruction of a phase with such a value, the kept instruction that computed it.
    of: FastMap<usize, usize>,
    /// Instructions of the phases that nothing reads once kept values are read from `rv`.
    dead: Vec<bool>,
}

/// The values the phases of `k` share: an element's value that more than one phase computes from the row (the
/// same instructions on the same inputs, parameters and views) without a fold's result, such as a mask and a scale
/// applied before a softmax's three passes. The cached path computes each once per element, ahead of the phases,
/// and keeps it with the row; the phases read it there. Only the frontier is kept: a shared value that a later
/// shared value alone reads is not.
fn row_values(k: &Kernel) -> RowValues {
    let len = k.body.len();
    if k.body.iter().any(|i| matches!(i, Instr::Cat { .. })) {
        return RowValues::default();
    }
    let mut phase_of = vec![usize::MAX; len];
    for (p, phase) in k.phases.iter().enumerate() {
        let (Phase::Fold { body, .. } | Phase::Map { body, .. }) = phase;
        phase_of[body.clone()].iter_mut().for_each(|x| *x = p);
    }
    // Each candidate's first equal, its operands compared by their own first equals. Candidates are loads, indices,
    // parameters and arithmetic on candidates: no fold's result, no random numbers.
    let mut first: Vec<usize> = (0..len).collect();
    let mut candidate = vec![false; len];
    let mut per_element = vec![false; len];
    let mut seen: FastMap<(Instr, crate::dtype::DType), usize> = FastMap::default();
    for n in 0..len {
        let f = |i: usize| first[i];
        let key = match &k.body[n] {
            Instr::Load { access, .. } if !matches!(access, Access::Tile(_)) => k.body[n].clone(),
            Instr::Index { .. } | Instr::Scalar(_) => k.body[n].clone(),
            Instr::Unary(op, a) => Instr::Unary(*op, f(*a)),
            Instr::Cast(a) => Instr::Cast(f(*a)),
            Instr::Binary(op, a, b) => Instr::Binary(*op, f(*a), f(*b)),
            Instr::Select(c, a, b) => Instr::Select(f(*c), f(*a), f(*b)),
            _ => continue,
        };
        let ops = k.body[n].operands();
        if !ops.iter().all(|&o| candidate[o]) {
            continue;
        }
        candidate[n] = true;
        // A load repeated along the row (a layer norm's saved statistics) is the same for the whole row: a register
        // per slot would hold one value.
        let varies = match &k.body[n] {
            Instr::Load { access, .. } => !matches!(access, Access::Splat),
            Instr::Index { .. } => true,
            _ => false,
        };
        per_element[n] = varies || ops.iter().any(|&o| per_element[o]);
        first[n] = *seen.entry((key, k.types[n])).or_insert(n);
    }
    let mut phases: FastMap<usize, Vec<usize>> = FastMap::default();
    for n in (0..len).filter(|&n| candidate[n] && per_element[n] && phase_of[n] != usize::MAX) {
        let ps = phases.entry(first[n]).or_default();
        if !ps.contains(&phase_of[n]) {
            ps.push(phase_of[n]);
        }
    }
    let shared = |n: usize| candidate[n] && per_element[n] && phases.get(&first[n]).is_some_and(|p| p.len() > 1);
    // The frontier: shared values read by something that is not, folded or stored. Loads at the row's own index
    // are kept already (`rc{input}`).
    let mut roots = phase_roots(k);
    roots.extend((0..len).filter(|&n| !shared(n)).flat_map(|n| k.body[n].operands()));
    let mut kept: Vec<usize> = roots
        .into_iter()
        .filter(|&n| shared(n) && !matches!(k.body[n], Instr::Load { view: None, .. }))
        .map(|n| first[n])
        .collect();
    kept.sort_unstable();
    kept.dedup();
    // Worth a register only where recomputing costs several instructions.
    kept.retain(|&n| work(k, n) >= KEEP_MIN_WORK);
    let of: FastMap<usize, usize> =
        (0..len).filter(|&n| shared(n) && kept.binary_search(&first[n]).is_ok()).map(|n| (n, first[n])).collect();
    // What the phases read once kept values come from registers, and what computing the kept values reads.
    let live = reads(k, phase_roots(k), |n| of.contains_key(&n));
    let need = reads(k, kept.iter().copied(), |_| false);
    // No more registers than the row's loads hold already: the kept values must free as many of them as they take.
    // nanoGPT's layer-norm backward kept two values while its first phase still read all three of their inputs, and ran
    // slower for it; its masked softmax's one kept value replaces the one load it reads, and ran faster (figures:
    // docs/notes/source-measurements.md, `src/backend/wgpu/codegen/rows.rs`).
    let own_inputs = |only_live: bool| {
        let mut inputs: Vec<usize> = (0..len)
            .filter(|&n| phase_of[n] != usize::MAX && (live[n] || !only_live))
            .filter_map(|n| match k.body[n] {
                Instr::Load { input, view: None, .. } => Some(input),
                _ => None,
            })
            .collect();
        inputs.sort_unstable();
        inputs.dedup();
        inputs.len()
    };
    if kept.len() + own_inputs(true) > own_inputs(false) {
        return RowValues::default();
    }
    let needs = (0..len).filter(|&n| need[n]).collect();
    let dead = live.iter().map(|l| !l).collect();
    RowValues { kept, needs, of, dead }
}

/// Opens step `u` of the cached path (`{ let r = ..; if (r < n / 4u) {`, with the element's coordinates and
/// vector index `i`); the caller closes both braces.
fn step(e: &mut Emitter, axis: usize, u: usize, depth: usize) {
    e.line(depth, "{");
    e.line(depth + 1, &format!("let r = lane_t + {u}u * team;"));
    e.line(depth + 1, "if (r < n / 4u) {");
    own_index(e, axis, "r", depth + 2);
}

/// The kernel's phases in order, streaming the row or (`cached`) reading it from `rc{input}`; phases `online` and
/// the next in one pass ([`Kind::Rows`]).
fn phases(e: &mut Emitter, axis: usize, depth: usize, cached: bool, online: Option<usize>) {
    let k = e.k;
    // Wide (the row a whole number of vectors, every read allowing it): each step takes 4 adjacent elements.
    let wide = e.wide;
    let end = if wide { "n / 4u" } else { "n" };
    // Folds are numbered among folds (as `Instr::Folded` counts them), not among phases.
    let mut n = 0;
    for (p, phase) in k.phases.iter().enumerate() {
        if online.is_some_and(|o| p == o + 1) {
            continue;
        }
        match phase {
            Phase::Fold { body, value, output, .. } if online == Some(p) => {
                let Phase::Fold { output: sum_output, .. } = &k.phases[p + 1] else { unreachable!("a fold pair") };
                super::online::logsumexp(
                    e,
                    axis,
                    (body.clone(), *value),
                    [*output, *sum_output],
                    n,
                    end,
                    depth,
                    cached,
                );
                if wide {
                    e.wide = true;
                    e.b.set_width(4);
                }
                n += 2;
            }
            Phase::Fold { op, body, value, output } => {
                let fold = Fold { op: *op, axis, body: body.clone(), value: *value, unroll: UNROLL };
                let dt = k.types[*value];
                let ty = lane_type(dt.lanes(), 1);
                e.line(depth, &format!("var f{n}: {ty};"));
                e.hoisted(body.clone(), depth, |e| {
                    accumulate(e, &fold, "lane_t", "team", end, depth + 1, cached);
                    // Folds alternate between the halves of `red`, so with subgroups one barrier a fold suffices.
                    tree(e, *op, dt, depth + 1, Some(n % 2));
                    e.line(depth + 1, &format!("f{n} = bitcast<{ty}>(total);"));
                    if let Some(out) = output {
                        let st = e.store(*out, "o", &format!("f{n}"));
                        e.line(depth + 1, &format!("if (lane_t == 0u && valid) {{ {st} }}"));
                    }
                });
                // `accumulate` left the emitter scalar for the fold's result; the next phase is wide again.
                if wide {
                    e.wide = true;
                    e.b.set_width(4);
                }
                n += 1;
            }
            Phase::Map { body, outputs } if cached => e.hoisted(body.clone(), depth, |e| {
                for u in 0..UNROLL {
                    step(e, axis, u, depth + 1);
                    e.cache = Some(u);
                    e.range(body.clone(), depth + 3);
                    e.cache = None;
                    for &out in outputs {
                        let st = e.store(out, "i", &format!("t{}", k.outputs[out].1));
                        e.line(depth + 3, &st);
                    }
                    e.line(depth + 2, "}");
                    e.line(depth + 1, "}");
                }
            }),
            Phase::Map { body, outputs } => e.hoisted(body.clone(), depth, |e| {
                e.line(depth + 1, &format!("for (var r = lane_t; r < {end}; r = r + team) {{"));
                // In vectors when wide: loads and stores at the kernel's own index take 4 elements from there.
                own_index(e, axis, "r", depth + 2);
                e.range(body.clone(), depth + 2);
                for &out in outputs {
                    let st = e.store(out, "i", &format!("t{}", k.outputs[out].1));
                    e.line(depth + 2, &st);
                }
                e.line(depth + 1, "}");
            }),
        }
    }
}
