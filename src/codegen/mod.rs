//! WGSL generation: turns the kernel IR into shader source. One file per kernel kind; this one holds what they
//! share: bindings, helper functions and op spellings (from the op table).
//!
//! The source depends only on a kernel's structure (ops, types, bindings, which loads are strided, the rank), never
//! on sizes, strides, offsets or scalar values, which travel in the parameter buffer; [`Key`] is that structure.

mod elementwise;
mod matmul;
mod reduce;
mod rows;

use crate::dtype::{Class, DType};
use crate::kernel::{Kernel, Kind};
use crate::op::{BinaryOp, Helper, UnaryOp};
use std::fmt::Write;

/// Threads per workgroup.
pub const WORKGROUP_SIZE: u32 = 256;

/// Helper functions by name. They pin down IEEE behaviour and Rust's conversion rules that WGSL leaves open.
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
        // By bits, not through f16 arithmetic or pack2x16float, whose rounding and overflow WGSL leaves to the
        // implementation: normals drop 13 mantissa bits to nearest even; below 2^-14 the step is 2^-24, where
        // `round` (ties to even in WGSL) does it; from 65520 up is infinity.
        Helper::RoundF16 => {
            "fn lz_f16(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    let a = b & 0x7fffffffu;
    if (a >= 0x7f800000u) { return x; }
    if (a >= 0x477ff000u) { return bitcast<f32>((b & 0x80000000u) | 0x7f800000u); }
    if (a < 0x38800000u) { return round(x * 16777216.0) * 5.9604644775390625e-8; }
    return bitcast<f32>((b & 0x80000000u) | ((a + 0xfffu + ((a >> 13u) & 1u)) & 0xffffe000u));
}
"
        }
        Helper::RoundBf16 => {
            "fn lz_bf16(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) { return bitcast<f32>((b | 0x00400000u) & 0xffff0000u); }
    return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}
"
        }
        // Clamped before converting: WGSL's conversion of an out-of-range float is not Rust's saturation.
        Helper::F2I => {
            "fn lz_f2i(x: f32) -> i32 {
    if (lz_isnan(x)) { return 0; }
    if (x >= 2147483648.0) { return 2147483647; }
    return i32(max(x, -2147483648.0));
}
"
        }
        Helper::F2U => {
            "fn lz_f2u(x: f32) -> u32 {
    if (lz_isnan(x)) { return 0u; }
    if (x >= 4294967296.0) { return 4294967295u; }
    return u32(max(x, 0.0));
}
"
        }
        Helper::HalfBits => {
            "fn lz_h(x: f32) -> u32 {
    let b = bitcast<u32>(x);
    let s = (b >> 16u) & 0x8000u;
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) { return s | 0x7e00u; }
    if (a >= 0x47800000u) { return s | 0x7c00u; }
    if (a < 0x38800000u) { return s | u32(bitcast<f32>(a) * 16777216.0); }
    return s | ((a - 0x38000000u) >> 13u);
}
"
        }
    }
}

/// Helpers in the order they are emitted, each after those it calls.
const HELPERS: [Helper; 9] = [
    Helper::IsNan,
    Helper::Max,
    Helper::Min,
    Helper::Pow,
    Helper::RoundF16,
    Helper::RoundBf16,
    Helper::F2I,
    Helper::F2U,
    Helper::HalfBits,
];

/// A helper's name, parameter types and result type, for its componentwise vec4 form.
fn helper_signature(h: Helper) -> (&'static str, &'static [&'static str], &'static str) {
    match h {
        Helper::IsNan => ("lz_isnan", &["f32"], "bool"),
        Helper::Max => ("lz_max", &["f32", "f32"], "f32"),
        Helper::Min => ("lz_min", &["f32", "f32"], "f32"),
        Helper::Pow => ("lz_pow", &["f32", "f32"], "f32"),
        Helper::RoundF16 => ("lz_f16", &["f32"], "f32"),
        Helper::RoundBf16 => ("lz_bf16", &["f32"], "f32"),
        Helper::F2I => ("lz_f2i", &["f32"], "i32"),
        Helper::F2U => ("lz_f2u", &["f32"], "u32"),
        Helper::HalfBits => ("lz_h", &["f32"], "u32"),
    }
}

/// The helpers a helper calls.
fn helper_needs(h: Helper) -> &'static [Helper] {
    match h {
        Helper::Max | Helper::Min | Helper::Pow | Helper::F2I | Helper::F2U => &[Helper::IsNan],
        _ => &[],
    }
}

/// The WGSL type of a lane of `dt` at `width` (1 or 4).
pub(crate) fn lane_type(dt: DType, width: usize) -> &'static str {
    match (dt.class(), width) {
        (Class::Float, 4) => "vec4<f32>",
        (Class::Float, _) => "f32",
        (Class::Int, 4) => "vec4<i32>",
        (Class::Int, _) => "i32",
        (_, 4) => "vec4<u32>",
        _ => "u32",
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
    /// Whether the shader binds native f16 buffers (and so must enable them).
    f16: bool,
}

impl Builder {
    pub fn new(width: usize) -> Builder {
        Builder { width, wide_used: width == 4, decls: String::new(), helpers: Vec::new(), f16: false }
    }

    /// Enables the `f16` extension.
    pub fn enable_f16(&mut self) {
        self.f16 = true;
    }

    /// Spells what follows at `width` (a reduce kernel's prologue is vectorized, its tree and epilogue are not).
    pub fn set_width(&mut self, width: usize) {
        self.width = width;
        self.wide_used |= width == 4;
    }

    /// The WGSL type of one value of `dt` at the current width.
    pub fn ty(&self, dt: DType) -> &'static str {
        lane_type(dt, self.width)
    }

    /// Binding 0: the parameter block, a fixed-size array. Every index into it is a constant, so no bounds check
    /// (and no branch) is emitted.
    pub fn params(&mut self, words: usize) {
        let _ = writeln!(self.decls, "@group(0) @binding(0) var<storage, read> p: array<u32, {}>;", words.max(1));
    }

    /// A storage binding `name` of elements `elem` (a WGSL type).
    pub fn buffer(&mut self, binding: usize, name: &str, elem: &str, writable: bool) {
        let access = if writable { "read_write" } else { "read" };
        let _ = writeln!(self.decls, "@group(0) @binding({binding}) var<storage, {access}> {name}: array<{elem}>;");
    }

    /// Declares a function or other text among the declarations.
    pub fn decl(&mut self, text: &str) {
        self.decls.push_str(text);
    }

    /// Notes that the body calls `helpers`.
    pub fn need(&mut self, helpers: &[Helper]) {
        for &h in helpers {
            self.need(helper_needs(h));
            if !self.helpers.contains(&h) {
                self.helpers.push(h);
            }
        }
    }

    fn spell(&self, template: &str, ty: &str, a: &str, b: &str) -> String {
        let v = if self.width == 4 { "4" } else { "" };
        template.replace("{a}", a).replace("{b}", b).replace("{ty}", ty).replace("{v}", v)
    }

    /// A helper's name at the current width.
    pub fn helper(&mut self, h: Helper) -> String {
        self.need(&[h]);
        let v = if self.width == 4 { "4" } else { "" };
        format!("{}{v}", helper_signature(h).0)
    }

    /// `x` (a float lane) rounded to `dt` when that is f16 or bf16.
    pub fn round(&mut self, dt: DType, x: String) -> String {
        match dt {
            DType::F16 => format!("{}({x})", self.helper(Helper::RoundF16)),
            DType::BF16 => format!("{}({x})", self.helper(Helper::RoundBf16)),
            _ => x,
        }
    }

    /// `op` applied to the WGSL expression `a`, of type `dt`. Half results are not rounded here: within a kernel
    /// they stay in f32, and are rounded where they are stored or cast.
    pub fn unary(&mut self, op: UnaryOp, dt: DType, a: &str) -> String {
        if dt.is_float() {
            self.need(op.helpers());
        }
        self.spell(op.wgsl(dt.class()), self.ty(dt), a, "")
    }

    /// `op` applied to the WGSL expressions `a` and `b`, both of type `dt`.
    pub fn binary(&mut self, op: BinaryOp, dt: DType, a: &str, b: &str) -> String {
        let ty = self.ty(dt);
        if op.is_compare() {
            let cond = self.spell(op.wgsl(dt.class()), ty, a, b);
            let cond = if dt.is_float() {
                // Compilers may assume no NaNs; a bit test keeps IEEE's answers (all false but `!=`).
                let nan = self.helper(Helper::IsNan);
                match op {
                    BinaryOp::Ne => format!("({cond}) | {nan}({a}) | {nan}({b})"),
                    _ => format!("({cond}) & !({nan}({a}) | {nan}({b}))"),
                }
            } else {
                cond
            };
            let u = self.ty(DType::U32);
            return format!("select({u}(0u), {u}(1u), {cond})");
        }
        if dt.is_float() {
            self.need(op.helpers());
        }
        self.spell(op.wgsl(dt.class()), ty, a, b)
    }

    /// `x`, a lane of `from`, converted to `to` ([`DType::cast_lane`]).
    pub fn cast(&mut self, from: DType, to: DType, x: &str) -> String {
        let (f, i, u) = (self.ty(DType::F32), self.ty(DType::I32), self.ty(DType::U32));
        match (from.class(), to.class()) {
            // A half value is rounded to its own type first: within a kernel it may still hold f32 bits.
            (Class::Float, Class::Float) => {
                let x = self.round(from, x.to_string());
                self.round(to, x)
            }
            (Class::Float, Class::Int) => format!("{}({x})", self.helper(Helper::F2I)),
            (Class::Float, Class::Uint) => format!("{}({x})", self.helper(Helper::F2U)),
            (Class::Float, Class::Bool) => {
                format!("select({u}(0u), {u}(1u), (bitcast<{u}>({x}) & {u}(0x7fffffffu)) != {u}(0u))")
            }
            (_, Class::Float) => self.round(to, format!("{f}({x})")),
            (Class::Int, Class::Uint) => format!("bitcast<{u}>({x})"),
            (Class::Uint | Class::Bool, Class::Int) => format!("bitcast<{i}>({x})"),
            (Class::Int, Class::Bool) => format!("select({u}(0u), {u}(1u), {x} != {i}(0))"),
            (Class::Uint, Class::Bool) => format!("select({u}(0u), {u}(1u), {x} != {u}(0u))"),
            _ => x.to_string(),
        }
    }

    /// The whole shader: declarations, the helpers used (with vector forms in vectorized kernels), then `body`.
    pub fn finish(self, body: &str) -> String {
        let mut s = if self.f16 { String::from("enable f16;\n") } else { String::new() };
        s.push_str(&self.decls);
        for h in HELPERS {
            if !self.helpers.contains(&h) {
                continue;
            }
            s.push_str(helper_source(h));
            if !self.wide_used {
                continue;
            }
            let (name, params, ret) = helper_signature(h);
            if h == Helper::IsNan {
                s.push_str(
                    "fn lz_isnan4(x: vec4<f32>) -> vec4<bool> { \
                     return (bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u); }\n",
                );
                continue;
            }
            let args: Vec<String> = params.iter().enumerate().map(|(j, t)| format!("x{j}: vec4<{t}>")).collect();
            let call = |c: &str| {
                let a: Vec<String> = (0..params.len()).map(|j| format!("x{j}.{c}")).collect();
                format!("{name}({})", a.join(", "))
            };
            let _ = writeln!(
                s,
                "fn {name}4({}) -> vec4<{ret}> {{ return vec4<{ret}>({}, {}, {}, {}); }}",
                args.join(", "),
                call("x"),
                call("y"),
                call("z"),
                call("w")
            );
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
    /// Native f16 storage (`wgpu::Features::SHADER_F16`): f16 buffers bind as `array<f16>`. Without it they bind as
    /// words of two.
    pub f16: bool,
}

/// The WGSL source of `kernel` for `target`. Bindings: 0 parameters, then outputs, then inputs.
pub fn generate(kernel: &Kernel, target: &Target) -> String {
    match kernel.kind {
        Kind::Elementwise => elementwise::generate(kernel, target),
        Kind::Reduce(_) => reduce::generate(kernel, target),
        Kind::Rows { .. } => rows::generate(kernel, target),
        Kind::Matmul(_) => matmul::generate(kernel, target),
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
    types: Vec<DType>,
    in_types: Vec<DType>,
    out_types: Vec<DType>,
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
            types: kernel.types.clone(),
            in_types: kernel.in_types.clone(),
            out_types: kernel.out_types.clone(),
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
