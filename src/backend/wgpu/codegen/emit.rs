//! The emitter every kernel kind writes WGSL with: bindings by element type, loads through views, an SSA body
//! spelled from the kernel IR, tiles in workgroup memory, concatenations as branches.

use super::{lane_type, param, Builder, Target, WORKGROUP_SIZE};
use crate::dtype::DType;
use crate::hash::FastMap;
use crate::kernel::{Access, Instr, Kernel, Kind, Phase, TILE};
use crate::op::Helper;
use crate::philox::Distribution;
use std::fmt::Write;

/// An `i32` parameter.
fn pi(k: usize) -> String {
    format!("bitcast<i32>({})", param(k))
}

/// The element index of the view whose parameters start at `at`, at the coordinates named `names`.
pub(super) fn index_at(rank: usize, at: usize, names: &[String]) -> String {
    let mut terms = vec![pi(at + rank)];
    for (d, name) in names.iter().enumerate() {
        terms.push(format!("{name} * {}", pi(at + d)));
    }
    terms.join(" + ")
}

/// Rows of a tile one pass of a workgroup covers.
pub(super) const STEP: usize = WORKGROUP_SIZE as usize / TILE;

/// Row pitch of a tile in workgroup memory: one more than its side, so reading a column hits 32 banks.
pub(super) const PITCH: usize = TILE + 1;

pub(super) struct Emitter<'a> {
    pub k: &'a Kernel,
    pub b: Builder,
    pub out: String,
    /// Whether instructions are being spelled 4 elements at a time.
    pub wide: bool,
    /// Cats by the index their parts' instructions start at.
    cat_starts: FastMap<usize, Vec<usize>>,
    target: Target,
    /// Per output: whether it is stored 4 elements (whole words) per thread; otherwise a narrow output is stored
    /// by atomic read-modify-write of its word, as neighbouring elements belong to other threads.
    wide_out: Vec<bool>,
    /// In a rows kernel's cached path: the slot of the row's values that loads at the kernel's own index read
    /// (`rc{input}[slot]`) instead of memory.
    pub cache: Option<usize>,
    /// In a rows kernel's cached path: instructions whose value is one computed ahead of the phases and kept per
    /// slot (`rv{first}[slot]`, `first` the instruction that computed it), where `cache` is set.
    pub row_values: FastMap<usize, usize>,
    /// In a rows kernel's cached path: instructions nothing reads once `row_values` are read from registers.
    pub dead: Vec<bool>,
    /// Instructions emitted once ahead of a loop over a row ([`Emitter::hoisted`]): `range` leaves them out.
    hoisted: Vec<bool>,
    /// While [`Emitter::hoisted`] emits a load ahead of the loop: its index is taken only for a valid row.
    hoisting: bool,
}

/// How a buffer of a dtype is bound and addressed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Storage {
    /// One 32-bit element per array element (f32, i32, u32).
    Word,
    /// Native `f16` elements.
    Half,
    /// Narrow elements packed into `u32` words, `per` to a word.
    Packed { per: u32 },
}

impl Emitter<'_> {
    fn storage(&self, dt: DType) -> Storage {
        match dt.size_in_bytes() {
            4 => Storage::Word,
            2 if dt == DType::F16 && self.target.f16 => Storage::Half,
            n => Storage::Packed { per: 4 / n as u32 },
        }
    }

    /// Whether input `n` is bound as 16-byte vectors.
    fn vector_input(&self, n: usize) -> bool {
        self.k.inputs[n].1 && self.storage(self.k.in_types[n]) == Storage::Word
    }

    /// The array input `n` is read from: its own binding, or the output stored into its buffer.
    fn array(&self, n: usize) -> String {
        match self.k.aliases.iter().find(|a| a.0 == n) {
            Some(&(_, o)) => format!("o{o}"),
            None => format!("i{n}"),
        }
    }

    /// Element `e` (a `u32` expression) of input `n`, as a lane.
    pub fn elem(&mut self, n: usize, e: &str) -> String {
        let dt = self.k.in_types[n];
        match self.storage(dt) {
            Storage::Word => format!("{}[{e}]", self.array(n)),
            Storage::Half => format!("f32(i{n}[{e}])"),
            Storage::Packed { .. } => format!("ld{n}({e})"),
        }
    }

    /// Elements `4 t .. 4 t + 4` of input `n` as one vector lane, where the input is not bound as vectors.
    fn elem4(&mut self, n: usize, t: &str) -> String {
        let dt = self.k.in_types[n];
        let ty = lane_type(dt, 4);
        match (self.storage(dt), dt) {
            (Storage::Packed { .. }, DType::F16) => {
                format!("{ty}(unpack2x16float(i{n}[2u * {t}]), unpack2x16float(i{n}[2u * {t} + 1u]))")
            }
            (Storage::Packed { .. }, DType::BF16) => format!(
                "bitcast<vec4<f32>>((vec4<u32>(i{n}[2u * {t}], i{n}[2u * {t}], i{n}[2u * {t} + 1u], i{n}[2u * {t} + 1u]) << vec4<u32>(16u, 0u, 16u, 0u)) & vec4<u32>(0xffff0000u))"
            ),
            (Storage::Packed { .. }, _) => {
                format!("(vec4<u32>(i{n}[{t}]) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu)")
            }
            _ => {
                let parts: Vec<String> = (0..4).map(|j| self.elem(n, &format!("4u * {t} + {j}u"))).collect();
                format!("{ty}({})", parts.join(", "))
            }
        }
    }

    /// Stores `value` (a lane, or 4 lanes in a wide kernel) of output `o` at element `e`, or, wide, at elements
    /// `4 e .. 4 e + 4`.
    pub fn store(&mut self, o: usize, e: &str, value: &str) -> String {
        let dt = self.k.out_types[o];
        let wide = self.wide_out[o];
        // Half values are rounded to their type here, once, as they leave the kernel.
        let rounded = self.rounded(dt, value);
        let value = rounded.as_str();
        match self.storage(dt) {
            Storage::Word => format!("o{o}[{e}] = {value};"),
            Storage::Half if wide => format!("o{o}[{e}] = vec4<f16>({value});"),
            Storage::Half => format!("o{o}[{e}] = f16({value});"),
            Storage::Packed { .. } if wide => {
                // The thread owns whole words: 2 of 16-bit elements, 1 of bytes.
                let v = format!("v{o}_");
                let words = match dt {
                    DType::F16 => {
                        self.b.need(&[Helper::HalfBits]);
                        let h = "lz_h";
                        vec![format!("{h}({v}.x) | ({h}({v}.y) << 16u)"), format!("{h}({v}.z) | ({h}({v}.w) << 16u)")]
                    }
                    DType::BF16 => {
                        let w = |x: &str, y: &str| {
                            format!("(bitcast<u32>({v}.{x}) >> 16u) | (bitcast<u32>({v}.{y}) & 0xffff0000u)")
                        };
                        vec![w("x", "y"), w("z", "w")]
                    }
                    _ => vec![format!("dot({v} << vec4<u32>(0u, 8u, 16u, 24u), vec4<u32>(1u))")],
                };
                let mut s = format!("let {v} = {value}; ");
                let per = words.len();
                for (j, w) in words.iter().enumerate() {
                    let _ = write!(s, "o{o}[{per}u * {e} + {j}u] = {w}; ");
                }
                s
            }
            Storage::Packed { .. } => format!("st{o}({e}, {});", self.bits(dt, value)),
        }
    }

    /// The bits of `value` as a packed element, in the low bits of a `u32`: f16 rounded by `lz_h`, bf16 already
    /// rounded to its type.
    fn bits(&mut self, dt: DType, value: &str) -> String {
        match dt {
            DType::F16 => format!("{}({value})", self.b.helper(Helper::HalfBits)),
            DType::BF16 => format!("bitcast<u32>({value}) >> 16u"),
            _ => value.to_string(),
        }
    }

    /// Elements per word of output `o` where it is packed and stored one element at a time (`st{o}`), else `None`.
    pub fn packed_per(&self, o: usize) -> Option<u32> {
        match self.storage(self.k.out_types[o]) {
            Storage::Packed { per } if !self.wide_out[o] => Some(per),
            _ => None,
        }
    }

    /// `value` rounded to packed output `o`'s type, as its bits in the low bits of a `u32`: what `st{o}` stores,
    /// or one element of a whole word a thread owns.
    pub fn packed_bits(&mut self, o: usize, value: &str) -> String {
        let dt = self.k.out_types[o];
        let rounded = self.rounded(dt, value);
        self.bits(dt, &rounded)
    }

    /// `value` rounded to `dt` for a store, except where the store's conversion to bits rounds it itself: packed
    /// f16, whose `lz_h` rounds and converts in one pass (rounding first, then converting, took twice the
    /// integer work per element).
    fn rounded(&mut self, dt: DType, value: &str) -> String {
        match (self.storage(dt), dt) {
            (Storage::Packed { .. }, DType::F16) => value.to_string(),
            _ => self.b.round(dt, value.to_string()),
        }
    }

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

    /// Whether the kernel is generated for an adapter with subgroup operations.
    pub fn target_subgroups(&self) -> bool {
        self.target.subgroups
    }

    /// Input `input` at the kernel's own index `i` (4 elements from there when wide).
    pub fn own_load(&mut self, input: usize) -> String {
        if !self.wide {
            self.elem(input, "i")
        } else if self.vector_input(input) {
            format!("{}[i]", self.array(input))
        } else {
            self.elem4(input, "i")
        }
    }

    /// The element index of a strided load, as an `i32` expression.
    pub fn index(&self, at: usize, frame: usize) -> String {
        let names: Vec<String> = (0..self.k.shape.ndim()).map(|d| self.coord(frame, d)).collect();
        index_at(self.k.shape.ndim(), at, &names)
    }

    pub(super) fn instr(&mut self, n: usize, depth: usize) {
        let wide = self.wide;
        let dt = self.k.types[n];
        let ty = self.b.ty(dt);
        let kept = self.cache.and_then(|slot| self.row_values.get(&n).map(|first| (slot, *first)));
        let rhs = match &self.k.body[n] {
            _ if kept.is_some() => {
                let (slot, first) = kept.expect("checked");
                format!("rv{first}[{slot}]")
            }
            Instr::Load { access: Access::Tile(t), .. } => format!("tile{t}[tx * {PITCH}u + ty + {STEP}u * k]"),
            Instr::Load { input, view: None, .. } => match self.cache {
                Some(slot) => format!("rc{input}[{slot}]"),
                None => self.own_load(*input),
            },
            Instr::Load { input, view: Some(v), access } => {
                let ix = self.index(v.at, v.frame);
                if self.hoisting {
                    // A team past the last row has coordinates past the input.
                    self.line(depth, &format!("let x{n} = select(0i, {ix}, valid);"));
                } else {
                    self.line(depth, &format!("let x{n} = {ix};"));
                }
                let inner = pi(v.at + self.k.shape.ndim() - 1);
                let x = format!("u32(x{n})");
                match (wide, access) {
                    (false, _) => self.elem(*input, &x),
                    (true, Access::Vector) if self.vector_input(*input) => format!("i{input}[{x} / 4u]"),
                    (true, Access::Splat) => format!("{ty}({})", self.elem(*input, &x)),
                    // The same input read another way too is bound as scalars: 4 loads.
                    (true, Access::Vector) => {
                        let parts: Vec<String> = (0..4).map(|j| self.elem(*input, &format!("{x} + {j}u"))).collect();
                        format!("{ty}({})", parts.join(", "))
                    }
                    (true, _) => {
                        let parts: Vec<String> =
                            (0..4).map(|j| self.elem(*input, &format!("u32(x{n} + {j} * {inner})"))).collect();
                        format!("{ty}({})", parts.join(", "))
                    }
                }
            }
            Instr::Index { view: None } if wide => "vec4<i32>(i32(4u * i)) + vec4<i32>(0, 1, 2, 3)".to_string(),
            Instr::Index { view: None } => "i32(i)".to_string(),
            Instr::Index { view: Some(v) } => {
                let ix = self.index(v.at, v.frame);
                if wide {
                    let inner = pi(v.at + self.k.shape.ndim() - 1);
                    format!("vec4<i32>({ix}) + vec4<i32>(0, 1, 2, 3) * {inner}")
                } else {
                    ix
                }
            }
            Instr::Scalar(k) => {
                let one = lane_type(dt, 1);
                if wide {
                    format!("{ty}(bitcast<{one}>({}))", param(*k))
                } else {
                    format!("bitcast<{one}>({})", param(*k))
                }
            }
            Instr::Unary(op, a) => self.b.unary(*op, dt, &format!("t{a}")),
            Instr::Binary(op, a, b) => {
                let operands = if op.is_compare() { self.k.types[*a] } else { dt };
                self.b.binary(*op, operands, &format!("t{a}"), &format!("t{b}"))
            }
            Instr::Cast(a) => self.b.cast(self.k.types[*a], dt, &format!("t{a}")),
            Instr::Select(c, a, b) => {
                let u = self.b.ty(DType::U32);
                format!("select(t{b}, t{a}, t{c} != {u}(0u))")
            }
            Instr::Cat { .. } => return self.cat(n, depth),
            // Four consecutive elements from the thread's own index: whole Philox blocks, not one per element.
            Instr::Random(d, c, k0, k1) if wide && matches!(self.k.body[*c], Instr::Index { view: None }) => {
                let h = match d {
                    Distribution::Uniform => Helper::RandX4,
                    Distribution::Normal => Helper::RandnX4,
                };
                self.b.need(&[h]);
                format!("lz_{}_x4(bitcast<u32>(t{c}.x), t{k0}.x, t{k1}.x)", d.name())
            }
            Instr::Random(d, c, k0, k1) => {
                let h = match d {
                    Distribution::Uniform => Helper::Rand,
                    Distribution::Normal => Helper::Randn,
                };
                let name = self.b.helper(h);
                let u = self.b.ty(DType::U32);
                format!("{name}(bitcast<{u}>(t{c}), t{k0}, t{k1})")
            }
            Instr::Gather { input, base, index, stride_at } => {
                assert!(!wide, "kernels that gather run one element per thread");
                let (stride, extent) = (pi(*stride_at), pi(stride_at + 1));
                // Clamped, so that the load stays in bounds even where its value is not taken.
                self.line(depth, &format!("let x{n} = u32(t{base} + clamp(t{index}, 0, {extent} - 1) * {stride});"));
                let value = self.elem(*input, &format!("x{n}"));
                format!("select({ty}(0), {value}, (t{index} >= 0) & (t{index} < {extent}))")
            }
            Instr::Reduced => "folded".to_string(),
            Instr::Folded(f) if wide => format!("{ty}(f{f})"),
            Instr::Folded(f) => format!("f{f}"),
        };
        self.line(depth, &format!("let t{n} = {rhs};"));
    }

    fn cat(&mut self, n: usize, depth: usize) {
        let Instr::Cat { frame, axis, parts } = &self.k.body[n] else { unreachable!() };
        let ty = self.b.ty(self.k.types[n]);
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
            let dead = self.cache.is_some() && self.dead.get(i).copied().unwrap_or(false);
            if cat.is_none() && (self.hoisted[i] || dead) {
                i += 1;
                continue;
            }
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
    /// Whether instruction `n` was emitted ahead of the loop the current block runs.
    pub fn is_hoisted(&self, n: usize) -> bool {
        self.hoisted[n]
    }

    /// Emits a block at `depth`: `{`, then once the instructions of `body` whose value is the same for a whole row
    /// (parameters, fold results, loads repeated along the row and what is computed from them alone), then what
    /// `inner` emits, then `}`. Inside, `range` leaves the hoisted instructions out. A store to an output may alias
    /// the parameter buffer for all the driver knows, so without this a row's per-element code reloads and
    /// recomputes them after every store.
    ///
    /// A load repeated along the row (`Access::Splat` in a wide rows kernel: a layer norm's saved mean and
    /// variance) is read once, at row coordinate 0, with what is computed from it (`sqrt(var / n + eps)`), instead
    /// of per element in every phase.
    pub fn hoisted(&mut self, body: std::ops::Range<usize>, depth: usize, inner: impl FnOnce(&mut Self)) {
        self.hoisted_where(body, |_| true, depth, inner);
    }

    /// [`Emitter::hoisted`], hoisting only the instructions `wanted` accepts (and never one the cached phases no
    /// longer read, `dead`).
    pub fn hoisted_where(
        &mut self,
        body: std::ops::Range<usize>,
        wanted: impl Fn(usize) -> bool,
        depth: usize,
        inner: impl FnOnce(&mut Self),
    ) {
        self.line(depth, "{");
        // Splat is decided along the innermost axis, which a rows kernel's row is.
        let row_axis = match self.k.kind {
            Kind::Rows { axis, .. } if self.wide && axis + 1 == self.k.shape.ndim() => Some(axis),
            _ => None,
        };
        let mut at_row_start = false;
        // A concatenation's parts are emitted inside its branches, in their own frames: left alone.
        let mut in_cat = vec![false; self.k.body.len()];
        for instr in &self.k.body[body.clone()] {
            if let Instr::Cat { parts, .. } = instr {
                for part in parts {
                    in_cat[part.body.clone()].iter_mut().for_each(|c| *c = true);
                }
            }
        }
        for n in body {
            if in_cat[n] || !wanted(n) || self.dead.get(n).copied().unwrap_or(false) {
                continue;
            }
            let uniform = match &self.k.body[n] {
                Instr::Scalar(_) | Instr::Folded(_) => true,
                Instr::Unary(_, a) | Instr::Cast(a) => self.hoisted[*a],
                Instr::Binary(_, a, b) => self.hoisted[*a] && self.hoisted[*b],
                Instr::Select(a, b, c) | Instr::Random(_, a, b, c) => {
                    self.hoisted[*a] && self.hoisted[*b] && self.hoisted[*c]
                }
                Instr::Load { view: Some(v), access: Access::Splat, .. } => row_axis.is_some() && v.frame == 0,
                _ => false,
            };
            if uniform {
                let load = matches!(self.k.body[n], Instr::Load { .. });
                if load && !at_row_start {
                    // The row's own coordinate, which the load's stride multiplies by 0; the loop shadows it.
                    let axis = row_axis.expect("only a rows kernel's loads are hoisted");
                    self.line(depth + 1, &format!("let c{axis} = 0i;"));
                    at_row_start = true;
                }
                self.hoisting = load;
                self.instr(n, depth + 1);
                self.hoisting = false;
                self.hoisted[n] = true;
            }
        }
        inner(self);
        self.line(depth, "}");
        // The block's scope has closed.
        self.hoisted.iter_mut().for_each(|h| *h = false);
    }

    /// An emitter for `k` on `target`, its bindings declared: 0 parameters, then outputs, then inputs.
    pub fn new(k: &'a Kernel, target: &Target) -> Emitter<'a> {
        Emitter::with_octets(k, target, &[])
    }

    /// As [`Emitter::new`], with the f16 inputs `octets` bound as `vec4<u32>`, 8 halves to an element, for kernels
    /// that read them 16 bytes at a time (the tensor-core matmul).
    pub fn with_octets(k: &'a Kernel, target: &Target, octets: &[usize]) -> Emitter<'a> {
        let mut cat_starts: FastMap<usize, Vec<usize>> = FastMap::default();
        for (q, instr) in k.body.iter().enumerate() {
            if let Instr::Cat { parts, .. } = instr {
                cat_starts.entry(parts.first().map_or(q, |p| p.body.start)).or_default().push(q);
            }
        }
        // Linear elementwise kernels and the maps of rows kernels store 4 at a time, as do tiled products with
        // `quad` stores; folds, tiles and other products store one value per output.
        let wide_out: Vec<bool> = (0..k.outputs.len())
            .map(|o| match k.kind {
                Kind::Matmul(mm) => super::matmul_form::quad_stores(k, &mm, target),
                _ if k.width != 4 => false,
                Kind::Elementwise => k.tiles.is_empty(),
                Kind::Rows { .. } => {
                    k.phases.iter().any(|p| matches!(p, Phase::Map { outputs, .. } if outputs.contains(&o)))
                }
                _ => false,
            })
            .collect();
        let mut b = Builder::new(k.width);
        b.int64 = target.int64;
        let mut e = Emitter {
            k,
            b,
            out: String::with_capacity(512 + 64 * k.body.len()),
            wide: k.width == 4,
            cat_starts,
            target: *target,
            wide_out,
            cache: None,
            row_values: FastMap::default(),
            dead: Vec::new(),
            hoisted: vec![false; k.body.len()],
            hoisting: false,
        };
        e.b.params(k.params.len());
        for (o, &dt) in k.out_types.iter().enumerate() {
            let wide_out = e.wide_out[o];
            let elem = match e.storage(dt) {
                Storage::Word => lane_type(dt, if wide_out { 4 } else { 1 }),
                Storage::Half if wide_out => "vec4<f16>",
                Storage::Half => "f16",
                Storage::Packed { .. } if wide_out => "u32",
                Storage::Packed { per } => {
                    // Neighbouring elements share a word and may belong to other threads: replace this element's
                    // bits only, atomically.
                    let (shift, mask) = if per == 2 { (1, "0xffffu") } else { (2, "0xffu") };
                    let bits = 32 / per;
                    e.b.decl(&format!(
                        "fn st{o}(e: u32, v: u32) {{ let w = e >> {shift}u; let s = (e & {}u) * {bits}u; \
                         atomicAnd(&o{o}[w], ~({mask} << s)); atomicOr(&o{o}[w], v << s); }}\n",
                        per - 1
                    ));
                    "atomic<u32>"
                }
            };
            e.b.buffer(1 + o, &format!("o{o}"), elem, true);
        }
        for (n, &dt) in k.in_types.iter().enumerate() {
            let elem = match e.storage(dt) {
                _ if octets.contains(&n) => "vec4<u32>",
                Storage::Word if e.vector_input(n) => lane_type(dt, 4),
                Storage::Word => lane_type(dt, 1),
                Storage::Half => "f16",
                Storage::Packed { .. } => {
                    let load = match dt {
                        // The half shifted into the low bits: a run-time index into the unpacked pair ran the packed
                        // f16 product far slower than bf16's.
                        DType::F16 => format!("return unpack2x16float(i{n}[e >> 1u] >> ((e & 1u) * 16u)).x;"),
                        DType::BF16 => format!("return bitcast<f32>((i{n}[e >> 1u] >> ((e & 1u) * 16u)) << 16u);"),
                        _ => format!("return (i{n}[e >> 2u] >> ((e & 3u) * 8u)) & 0xffu;"),
                    };
                    e.b.decl(&format!("fn ld{n}(e: u32) -> {} {{ {load} }}\n", lane_type(dt, 1)));
                    "u32"
                }
            };
            // An input stored into is read from its output's binding (one buffer may not be bound twice).
            if !k.aliases.iter().any(|a| a.0 == n) {
                e.b.buffer(1 + k.outputs.len() + n, &format!("i{n}"), elem, false);
            }
        }
        if k.in_types.iter().chain(&k.out_types).any(|&dt| e.storage(dt) == Storage::Half) {
            e.b.enable_f16();
        }
        e
    }
}
