//! WGSL for elementwise kernels: one thread per element or per 4 elements, coordinates when views need them,
//! strided loads, and concatenations as branches that only load the part they select.

use super::{Builder, WORKGROUP_SIZE};
use crate::kernel::{Access, Instr, Kernel, TILE};
use std::collections::HashMap;
use std::fmt::Write;

/// An `i32` parameter.
fn pi(k: usize) -> String {
    format!("bitcast<i32>(p[{k}])")
}

/// The element index of the view whose parameters start at `at`, at the coordinates named `names`.
fn index_at(rank: usize, at: usize, names: &[String]) -> String {
    let mut terms = vec![pi(at + rank)];
    for (d, name) in names.iter().enumerate() {
        terms.push(format!("{name} * {}", pi(at + d)));
    }
    terms.join(" + ")
}

/// Rows of a tile one pass of a workgroup covers.
const STEP: usize = WORKGROUP_SIZE as usize / TILE;

/// Row pitch of a tile in workgroup memory: one more than its side, so reading a column hits 32 banks.
const PITCH: usize = TILE + 1;

pub(super) struct Emitter<'a> {
    pub k: &'a Kernel,
    pub b: Builder,
    pub out: String,
    /// Whether instructions are being spelled 4 elements at a time.
    pub wide: bool,
    /// Cats by the index their parts' instructions start at.
    cat_starts: HashMap<usize, Vec<usize>>,
}

impl Emitter<'_> {
    /// The name of coordinate `axis` in `frame`.
    fn coord(&self, frame: usize, axis: usize) -> String {
        let mut f = frame;
        while f > 0 {
            let fr = self.k.frames[f - 1];
            if fr.axis == axis {
                return format!("f{f}c{axis}");
            }
            f = fr.parent;
        }
        format!("c{axis}")
    }

    pub fn line(&mut self, depth: usize, text: &str) {
        for _ in 0..depth {
            self.out.push_str("    ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    /// The element index of a strided load, as an `i32` expression.
    fn index(&self, at: usize, frame: usize) -> String {
        let names: Vec<String> = (0..self.k.shape.ndim()).map(|d| self.coord(frame, d)).collect();
        index_at(self.k.shape.ndim(), at, &names)
    }

    fn instr(&mut self, n: usize, depth: usize) {
        let wide = self.wide;
        let rhs = match &self.k.body[n] {
            Instr::Load { access: Access::Tile(t), .. } => format!("tile{t}[tx * {PITCH}u + ty + {STEP}u * k]"),
            Instr::Load { input, view: None, .. } => {
                let vector = self.k.inputs[*input].1;
                if !wide || vector {
                    format!("i{input}[i]")
                } else {
                    format!("vec4<f32>(i{input}[4u * i], i{input}[4u * i + 1u], i{input}[4u * i + 2u], i{input}[4u * i + 3u])")
                }
            }
            Instr::Load { input, view: Some(v), access } => {
                let ix = self.index(v.at, v.frame);
                self.line(depth, &format!("let x{n} = {ix};"));
                let inner = pi(v.at + self.k.shape.ndim() - 1);
                match (wide, access) {
                    (false, _) => format!("i{input}[u32(x{n})]"),
                    (true, Access::Vector) if self.k.inputs[*input].1 => format!("i{input}[u32(x{n}) / 4u]"),
                    // The same input read another way too is bound as scalars: 4 adjacent loads.
                    (true, Access::Vector) => format!(
                        "vec4<f32>(i{input}[u32(x{n})], i{input}[u32(x{n}) + 1u], i{input}[u32(x{n}) + 2u], \
                         i{input}[u32(x{n}) + 3u])"
                    ),
                    (true, Access::Splat) => format!("vec4<f32>(i{input}[u32(x{n})])"),
                    (true, _) => format!(
                        "vec4<f32>(i{input}[u32(x{n})], i{input}[u32(x{n} + {inner})], \
                         i{input}[u32(x{n} + 2 * {inner})], i{input}[u32(x{n} + 3 * {inner})])"
                    ),
                }
            }
            Instr::Scalar(k) if wide => format!("vec4<f32>(bitcast<f32>(p[{k}]))"),
            Instr::Scalar(k) => format!("bitcast<f32>(p[{k}])"),
            Instr::Unary(op, a) => self.b.unary(*op, &format!("t{a}")),
            Instr::Binary(op, a, b) => self.b.binary(*op, &format!("t{a}"), &format!("t{b}")),
            Instr::Cat { .. } => return self.cat(n, depth),
            Instr::Reduced => "folded".to_string(),
            Instr::Folded(f) if wide => format!("vec4<f32>(f{f})"),
            Instr::Folded(f) => format!("f{f}"),
        };
        self.line(depth, &format!("let t{n} = {rhs};"));
    }

    fn cat(&mut self, n: usize, depth: usize) {
        let Instr::Cat { frame, axis, parts } = &self.k.body[n] else { unreachable!() };
        let ty = self.b.ty();
        self.line(depth, &format!("var t{n}: {ty};"));
        let sel = self.coord(*frame, *axis);
        let last = parts.len() - 1;
        for (k, part) in parts.iter().enumerate() {
            let head = match (k, k == last) {
                (0, true) => "{".to_string(),
                (_, true) => "} else {".to_string(),
                (0, false) => format!("if ({sel} < {}) {{", pi(part.bound)),
                _ => format!("}} else if ({sel} < {}) {{", pi(part.bound)),
            };
            self.line(depth, &head);
            // The part's frame: its coordinate along the selecting axis counts from the part's start.
            let fr = self.k.frames[part.frame - 1];
            let name = self.coord(part.frame, *axis);
            let parent = self.coord(fr.parent, fr.axis);
            self.line(depth + 1, &format!("let {name} = {parent} - {};", pi(fr.shift)));
            self.range(part.body.clone(), depth + 1);
            self.line(depth + 1, &format!("t{n} = t{};", part.value));
        }
        self.line(depth, "}");
    }

    /// Emits instructions `lo..hi`, each concatenation with its parts nested in its branches.
    pub fn range(&mut self, r: std::ops::Range<usize>, depth: usize) {
        let mut i = r.start;
        while i < r.end {
            let cat = self.cat_starts.get(&i).and_then(|qs| qs.iter().copied().filter(|&q| q < r.end).max());
            match cat {
                Some(q) => {
                    self.instr(q, depth);
                    i = q + 1;
                }
                None => {
                    self.instr(i, depth);
                    i += 1;
                }
            }
        }
    }
}

impl<'a> Emitter<'a> {
    /// An emitter for `k`, its bindings declared: 0 parameters, then outputs, then inputs.
    pub fn new(k: &'a Kernel) -> Emitter<'a> {
        let mut b = Builder::new(k.width);
        b.params(k.params.len());
        // Only elementwise kernels store 4 at a time; folds store one value per output.
        let wide_out = k.width == 4 && k.kind == crate::kernel::Kind::Elementwise;
        for o in 0..k.outputs.len() {
            b.buffer(1 + o, &format!("o{o}"), wide_out, true);
        }
        for (i, &(_, vector)) in k.inputs.iter().enumerate() {
            b.buffer(1 + k.outputs.len() + i, &format!("i{i}"), vector, false);
        }
        let mut cat_starts: HashMap<usize, Vec<usize>> = HashMap::new();
        for (q, instr) in k.body.iter().enumerate() {
            if let Instr::Cat { parts, .. } = instr {
                cat_starts.entry(parts.first().map_or(q, |p| p.body.start)).or_default().push(q);
            }
        }
        Emitter { k, b, out: String::with_capacity(512 + 64 * k.body.len()), wide: k.width == 4, cat_starts }
    }
}

/// The WGSL source of an elementwise kernel.
pub(super) fn generate(k: &Kernel) -> String {
    let mut e = Emitter::new(k);
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
    let threads = match (k.width, k.dims_at) {
        (4, None) => "(p[0] + 3u) / 4u",
        (4, Some(_)) => "p[0] / 4u",
        _ => "p[0]",
    };
    let _ = write!(
        e.out,
        "@compute @workgroup_size({WORKGROUP_SIZE})\n\
         fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{\n\
         \x20   let i = gid.x + gid.y * nwg.x * {WORKGROUP_SIZE}u;\n\
         \x20   if (i >= {threads}) {{ return; }}\n"
    );
    // Coordinates of the thread's first element, innermost axis first.
    if let Some(at) = k.dims_at {
        let rank = k.shape.ndim();
        e.line(1, &format!("var r = i * {}u;", k.width));
        for d in (0..rank).rev() {
            if d == 0 {
                e.line(1, "let c0 = i32(r);");
            } else {
                e.line(1, &format!("let c{d} = i32(r % p[{}]);", at + d));
                e.line(1, &format!("r = r / p[{}];", at + d));
            }
        }
    }
    e.range(0..k.body.len(), 1);
    for (o, &(_, value)) in k.outputs.iter().enumerate() {
        e.line(1, &format!("o{o}[i] = t{value};"));
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
    let (rows, cols) = (format!("p[{}]", at + rank - 2), format!("p[{}]", at + rank - 1));
    let per = TILE / STEP;
    for t in 0..k.tiles.len() {
        let _ = writeln!(e.out, "var<workgroup> tile{t}: array<f32, {}>;", TILE * PITCH);
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
    e.line(1, &format!("if (w >= tiles_c * tiles_r * (p[0] / ({rows} * {cols}))) {{ return; }}"));
    e.line(1, &format!("let c0_ = (w % tiles_c) * {TILE}u;"));
    e.line(1, "var r = w / tiles_c;");
    e.line(1, &format!("let r0_ = (r % tiles_r) * {TILE}u;"));
    e.line(1, "r = r / tiles_r;");
    for d in (0..rank - 2).rev() {
        if d == 0 {
            e.line(1, "let c0 = i32(r);");
        } else {
            e.line(1, &format!("let c{d} = i32(r % p[{}]);", at + d));
            e.line(1, &format!("r = r / p[{}];", at + d));
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
            e.line(3, &format!("tile{t}[(ty + {STEP}u * k) * {PITCH}u + tx] = i{input}[u32({ix})];"));
        }
        e.line(2, "}");
    }
    e.line(1, "}");
    e.line(1, "workgroupBarrier();");
    let mut idx = String::from("col");
    let mut stride = format!("p[{}]", at + rank - 1);
    for d in (0..rank - 1).rev() {
        let c = if d + 2 == rank { "row".to_string() } else { format!("u32(c{d})") };
        idx = format!("{idx} + {c} * {stride}");
        stride = format!("{stride} * p[{}]", at + d);
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
            e.line(3, &format!("o{o}[i] = t{value};"));
        }
        e.line(2, "}");
    }
    e.line(1, "}");
    e.out.push_str("}\n");
}
