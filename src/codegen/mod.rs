//! WGSL generation: turns the kernel IR into shader source. One file per kernel kind; this one holds what they
//! share: bindings, helper functions and op spellings (from the op table).
//!
//! The source depends only on a kernel's structure (ops, bindings, which loads are strided, the rank), never on
//! sizes, strides, offsets or scalar values, which travel in the parameter buffer. So the source itself is the
//! pipeline cache key.

mod elementwise;
mod matmul;
mod reduce;
mod rows;

use crate::kernel::{Kernel, Kind};
use crate::op::{BinaryOp, Helper, UnaryOp};
use std::fmt::Write;

/// Threads per workgroup.
pub const WORKGROUP_SIZE: u32 = 256;

/// Helper functions by name. They pin down IEEE behaviour that WGSL leaves open.
fn helper_source(h: Helper) -> &'static str {
    match h {
        // Bit test: `x != x` may be folded away by compilers that assume no NaNs.
        Helper::IsNan => "fn lz_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }\n",
        Helper::Max => {
            "fn lz_max(a: f32, b: f32) -> f32 { return select(max(a, b), a + b, lz_isnan(a) || lz_isnan(b)); }\n"
        }
        Helper::Min => {
            "fn lz_min(a: f32, b: f32) -> f32 { return select(min(a, b), a + b, lz_isnan(a) || lz_isnan(b)); }\n"
        }
        // Rust's powf: x^0 = 1 and 1^y = 1 even for NaN; a negative base needs an integer exponent, whose parity
        // gives the sign; zeros and infinities follow IEEE pow. WGSL's pow is only defined for finite x > 0.
        Helper::Pow => {
            "fn lz_pow(x: f32, y: f32) -> f32 {
    if (y == 0.0 || x == 1.0) { return 1.0; }
    if (lz_isnan(x) || lz_isnan(y)) { return x + y; }
    let big = bitcast<f32>(0x7f800000u);
    let ax = abs(x);
    let ay = abs(y);
    let integer = ay >= 16777216.0 || fract(ay) == 0.0;
    let odd = ay < 16777216.0 && fract(ay) == 0.0 && (ay % 2.0) == 1.0;
    var m = pow(ax, y);
    if (ax == 0.0) { m = select(0.0, big, y < 0.0); }
    else if (ax == big) { m = select(0.0, big, y > 0.0); }
    else if (ay == big) {
        m = select(select(0.0, big, y > 0.0), select(big, 0.0, y > 0.0), ax < 1.0);
        if (ax == 1.0) { m = 1.0; }
    }
    if ((bitcast<u32>(x) & 0x80000000u) != 0u) {
        if (odd) { return -m; }
        if (!integer && ax != 0.0 && ax != big) { return bitcast<f32>(0x7fc00000u); }
    }
    return m;
}
"
        }
    }
}

/// The name of a two-operand helper, which vectorized kernels wrap componentwise.
fn binary_helper_name(h: Helper) -> Option<&'static str> {
    match h {
        Helper::IsNan => None,
        Helper::Max => Some("lz_max"),
        Helper::Min => Some("lz_min"),
        Helper::Pow => Some("lz_pow"),
    }
}

/// What every kernel kind shares: the binding declarations, the helpers in use, and op spellings at one width.
pub(crate) struct Builder {
    /// Elements per value: 1 (`f32`) or 4 (`vec4<f32>`).
    width: usize,
    /// Whether anything was spelled at width 4 (its helpers then need vector forms).
    wide_used: bool,
    decls: String,
    helpers: Vec<Helper>,
}

impl Builder {
    pub fn new(width: usize) -> Builder {
        Builder { width, wide_used: width == 4, decls: String::new(), helpers: Vec::new() }
    }

    /// Spells what follows at `width` (a reduce kernel's prologue is vectorized, its tree and epilogue are not).
    pub fn set_width(&mut self, width: usize) {
        self.width = width;
        self.wide_used |= width == 4;
    }

    /// The WGSL type of one value.
    pub fn ty(&self) -> &'static str {
        if self.width == 4 {
            "vec4<f32>"
        } else {
            "f32"
        }
    }

    /// Binding 0: the parameter block, a fixed-size array. Every index into it is a constant, so no bounds check
    /// (and no branch) is emitted.
    pub fn params(&mut self, words: usize) {
        let _ = writeln!(self.decls, "@group(0) @binding(0) var<storage, read> p: array<u32, {}>;", words.max(1));
    }

    /// A storage binding `name` of `f32` (or `vec4<f32>` when `vector`).
    pub fn buffer(&mut self, binding: usize, name: &str, vector: bool, writable: bool) {
        let access = if writable { "read_write" } else { "read" };
        let elem = if vector { "vec4<f32>" } else { "f32" };
        let _ = writeln!(self.decls, "@group(0) @binding({binding}) var<storage, {access}> {name}: array<{elem}>;");
    }

    fn need(&mut self, helpers: &[Helper]) {
        for h in helpers {
            if !self.helpers.contains(h) {
                self.helpers.push(*h);
            }
        }
    }

    fn spell(&self, template: &str, a: &str, b: &str) -> String {
        let v = if self.width == 4 { "4" } else { "" };
        template.replace("{a}", a).replace("{b}", b).replace("{ty}", self.ty()).replace("{v}", v)
    }

    /// `op` applied to the WGSL expression `a`.
    pub fn unary(&mut self, op: UnaryOp, a: &str) -> String {
        self.need(op.helpers());
        self.spell(op.wgsl(), a, "")
    }

    /// `op` applied to the WGSL expressions `a` and `b`.
    pub fn binary(&mut self, op: BinaryOp, a: &str, b: &str) -> String {
        self.need(op.helpers());
        self.spell(op.wgsl(), a, b)
    }

    /// The whole shader: declarations, the helpers used (with vector forms in vectorized kernels), then `body`.
    pub fn finish(self, body: &str) -> String {
        let mut s = self.decls;
        // Helpers in a fixed order, each after those it calls.
        for h in [Helper::IsNan, Helper::Max, Helper::Min, Helper::Pow] {
            if !self.helpers.contains(&h) {
                continue;
            }
            s.push_str(helper_source(h));
            if self.wide_used && h == Helper::IsNan {
                s.push_str(
                    "fn lz_isnan4(x: vec4<f32>) -> vec4<bool> { \
                     return (bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u); }\n",
                );
            }
            if let (true, Some(name)) = (self.wide_used, binary_helper_name(h)) {
                let _ = writeln!(
                    s,
                    "fn {name}4(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {{ return vec4<f32>({name}(a.x, b.x), \
                     {name}(a.y, b.y), {name}(a.z, b.z), {name}(a.w, b.w)); }}"
                );
            }
        }
        s.push_str(body);
        s
    }
}

/// What a device lets generated code use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Target {
    /// Subgroup operations (`subgroupAdd` and friends).
    pub subgroups: bool,
}

/// The WGSL source of `kernel` for `target`. Bindings: 0 parameters, then outputs, then inputs.
pub fn generate(kernel: &Kernel, target: &Target) -> String {
    match kernel.kind {
        Kind::Elementwise => elementwise::generate(kernel),
        Kind::Reduce(_) => reduce::generate(kernel, target),
        Kind::Rows { .. } => rows::generate(kernel, target),
        Kind::Matmul(_) => matmul::generate(kernel),
    }
}

/// What a kernel's WGSL depends on: its structure without its parameter values or plan slots. Two kernels with
/// equal keys generate the same source, so a backend caches pipelines by key and generates source only on a miss.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    kind: Kind,
    rank: usize,
    /// Per input, whether it is bound as vectors.
    inputs: Vec<bool>,
    /// Per output, the instruction it stores.
    outputs: Vec<usize>,
    body: Vec<crate::kernel::Instr>,
    frames: Vec<crate::kernel::Frame>,
    params: usize,
    dims_at: Option<usize>,
    width: usize,
    tiles: Vec<(usize, usize)>,
    phases: Vec<crate::kernel::Phase>,
    target: Target,
}

impl Key {
    /// The key of `kernel`'s source for `target`.
    pub fn of(kernel: &Kernel, target: &Target) -> Key {
        Key {
            kind: kernel.kind,
            rank: kernel.shape.ndim(),
            inputs: kernel.inputs.iter().map(|i| i.1).collect(),
            outputs: kernel.outputs.iter().map(|o| o.1).collect(),
            body: kernel.body.clone(),
            frames: kernel.frames.clone(),
            params: kernel.params.len(),
            dims_at: kernel.dims_at,
            width: kernel.width,
            tiles: kernel.tiles.clone(),
            phases: kernel.phases.clone(),
            target: *target,
        }
    }
}

/// Workgroup counts for `threads` threads: x up to `max_per_dim`, the rest folded into y.
pub fn dispatch_size(threads: usize, max_per_dim: u32) -> (u32, u32) {
    let groups = threads.div_ceil(WORKGROUP_SIZE as usize) as u64;
    if groups <= max_per_dim as u64 {
        return (groups as u32, 1);
    }
    let y = groups.div_ceil(max_per_dim as u64);
    let x = groups.div_ceil(y);
    (x as u32, y as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_folds_past_the_per_dimension_limit() {
        assert_eq!(dispatch_size(0, 65535), (0, 1));
        assert_eq!(dispatch_size(1, 65535), (1, 1));
        assert_eq!(dispatch_size(256 * 65535, 65535), (65535, 1));
        let (x, y) = dispatch_size(256 * 65536, 65535);
        assert!(y == 2 && x as u64 * y as u64 * 256 >= 256 * 65536 && x <= 65535);
        let (x, y) = dispatch_size(1 << 28, 65535);
        assert!(x <= 65535 && (x as u64 * y as u64) << 8 >= 1 << 28);
    }
}
