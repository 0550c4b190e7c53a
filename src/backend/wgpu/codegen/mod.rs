//! WGSL generation: turns the kernel IR into shader source. One file per kernel kind; this one holds what they
//! share: bindings, helper functions and op spellings (from the op table).
//!
//! The source depends only on a kernel's structure (ops, types, bindings, which loads are strided, the rank), never
//! on sizes, strides, offsets or scalar values, which travel in the parameter buffer; [`Key`] is that structure.

pub(crate) mod dispatch;
mod elementwise;
mod emit;
mod helpers;
mod matmul;
mod matmul_form;
mod matmul_stores;
mod matmul_tri;
mod online;
pub(crate) use matmul_form::uses_coop;
pub(crate) use matmul_form::COOP_WORKGROUP_BYTES;
#[cfg(test)]
pub(crate) use reduce::COLUMN_UNROLL;
mod reduce;
mod rows;

use crate::dtype::{Class, DType};
use crate::kernel::{Kernel, Kind};
use crate::op::{BinaryOp, Helper, UnaryOp};
use helpers::{helper_needs, helper_signature, helper_source};
use std::fmt::Write;

pub use crate::kernel::WORKGROUP_SIZE;

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

/// The most 16-byte rows a parameter block binds as a uniform buffer: 16 KiB, the least any adapter wgpu supports
/// allows. A longer block (a kernel fused past `LAZOR_MAX_FUSED_OPS`'s default) binds as a storage buffer.
const UNIFORM_PARAM_ROWS: usize = 1024;

/// The 16-byte rows a parameter block of `words` words is bound as (at least one).
pub(crate) fn param_vecs(words: usize) -> usize {
    words.div_ceil(4).max(1)
}

/// Parameter word `k`, four to a row: a uniform buffer's arrays have a 16-byte stride. A uniform lets a driver
/// read each word from its constant cache as an operand of the instruction that uses it, where a storage
/// buffer's word is a load (or a register held across the kernel).
pub(crate) fn param(k: usize) -> String {
    format!("p[{}].{}", k / 4, ["x", "y", "z", "w"][k % 4])
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
    /// Whether the shader uses cooperative matrices.
    coop: bool,
    /// Whether it may use 64-bit integers ([`Target::int64`]).
    pub int64: bool,
}

impl Builder {
    pub fn new(width: usize) -> Builder {
        Builder {
            width,
            wide_used: width == 4,
            decls: String::new(),
            helpers: Vec::new(),
            f16: false,
            coop: false,
            int64: false,
        }
    }

    /// Enables the `f16` extension.
    pub fn enable_f16(&mut self) {
        self.f16 = true;
    }

    /// Enables cooperative matrices (`wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX`).
    pub fn enable_coop(&mut self) {
        self.coop = true;
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

    /// Binding 0: the parameter block of `words` words, read as [`param`] spells them. Every index into it is a
    /// constant, so no bounds check (and no branch) is emitted.
    pub fn params(&mut self, words: usize) {
        let rows = param_vecs(words);
        let space = if rows <= UNIFORM_PARAM_ROWS { "uniform" } else { "storage, read" };
        let _ = writeln!(self.decls, "@group(0) @binding(0) var<{space}> p: array<vec4<u32>, {rows}>;");
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

    /// The constant of bit pattern `bits` as a scalar of WGSL type `ty`: through [`Helper::Bits`] where it is a
    /// non-finite f32 (see there why), else a plain `bitcast`.
    pub fn lane_const(&mut self, ty: &str, bits: u32) -> String {
        if ty == "f32" && !f32::from_bits(bits).is_finite() {
            self.need(&[Helper::Bits]);
            format!("lz_bits({bits}u)")
        } else {
            format!("bitcast<{ty}>({bits}u)")
        }
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
        if self.coop {
            s.push_str("enable wgpu_cooperative_matrix;\n");
        }
        s.push_str(&self.decls);
        for &h in Helper::ALL {
            if !self.helpers.contains(&h) {
                continue;
            }
            if h == Helper::Philox {
                s.push_str(if self.int64 { helpers::MULHI_64 } else { helpers::MULHI });
            }
            s.push_str(helper_source(h));
            if !self.wide_used || matches!(h, Helper::Philox | Helper::RandX4 | Helper::RandnX4) {
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
    /// Cooperative matrices with a 16 x 16 x 16 f16 shape accumulating in f32, on subgroups of 32: f16 matmuls run
    /// on the tensor cores (`kernels/matmul_coop.wgsl`).
    pub coop: bool,
    /// bf16 products on the tensor cores too, through the SPIR-V path (`spirv::Edits::bf16`): the tensor-core
    /// kernel stages bf16 bits in its f16 slabs, retyped to bf16 in its SPIR-V. Only with `coop`.
    pub bf16_coop: bool,
    /// Triangular products ([`crate::op::Tri`]) on the tensor cores too (`matmul_tri::specialise_coop`), by
    /// `LAZOR_COOP_TRIANGLES=1`: off until checked on a GPU with cooperative matrices. Only with `coop`.
    pub coop_triangles: bool,
    /// Halves per element of the tensor-core kernel's slabs (1, 2 or 4; 0 reads as 1): the width of each
    /// workgroup store that stages an operand, and the element type its cooperative loads read
    /// (`LAZOR_COOP_SLAB`).
    pub coop_slab: u32,
    /// 64-bit integers (`wgpu::Features::SHADER_INT64`): the random generator's high-word multiply is one
    /// instruction.
    pub int64: bool,
}

/// What the SPIR-V path must do to a dispatch's module (`spirv::Edits`), or `None` where it is WGSL's: a
/// tensor-core product of bf16 operands always goes that way (its source means nothing as WGSL), one of f16
/// operands goes that way to stage its words as they are (no conversions), random numbers go that way to be
/// rounded as written, and `all` sends every kernel.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
pub fn edits(
    members: &[Kernel],
    target: &Target,
    mode: crate::backend::wgpu::spirv::Mode,
) -> Option<crate::backend::wgpu::spirv::Edits> {
    use crate::backend::wgpu::spirv::{Edits, Mode};
    let coop = |half: DType| {
        members.iter().any(|k| match k.kind {
            Kind::Matmul(mm) => matmul_form::uses_coop(k, &mm, target) && k.types[mm.a] == half,
            _ => false,
        })
    };
    let bf16 = coop(DType::BF16);
    let exact = mode != Mode::Off
        && members.iter().any(|k| k.body.iter().any(|i| matches!(i, crate::kernel::Instr::Random(..))));
    let bits = mode != Mode::Off && coop(DType::F16);
    match (bf16 || exact || bits, mode) {
        (true, _) => Some(Edits { bf16, exact, bits }),
        (false, Mode::All) => Some(Edits::default()),
        (false, _) => None,
    }
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

/// The WGSL of one dispatch: its kernel's own source, or the members of a grouped dispatch (`Kernel::joins`)
/// joined into one shader.
pub fn dispatch_source(members: &[Kernel], target: &Target) -> String {
    let sources: Vec<String> = members.iter().map(|k| generate(k, target)).collect();
    match &sources[..] {
        [one] => one.clone(),
        many => {
            let spans: Vec<usize> = members.iter().map(|k| k.binding_span()).collect();
            dispatch::generate(many, &spans)
        }
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
    vectors: usize,
    tiles: Vec<(usize, usize)>,
    phases: Vec<crate::kernel::Phase>,
    aliases: Vec<(usize, usize)>,
    store_view: Option<usize>,
    scatter: Option<usize>,
    target: Target,
}

impl Key {
    /// The key of `kernel`'s source for `target`.
    pub fn of(kernel: &Kernel, target: &Target) -> Key {
        // Every field named (no `..`): a field added to `Kernel` must be placed in the key or left out here on
        // purpose, or a pipeline could be reused for a kernel whose source differs.
        let Kernel {
            kind,
            shape,
            inputs,
            in_types,
            outputs,
            out_types,
            body,
            types,
            frames,
            params,
            consts: _,
            dims_at,
            width,
            vectors,
            tiles,
            phases,
            aliases,
            store_view,
            scatter,
            fused_ops: _,
            // A group's source is its members' (`group::generate`), keyed by theirs.
            joins: _,
        } = kernel;
        Key {
            kind: *kind,
            rank: shape.ndim(),
            inputs: inputs.iter().map(|i| i.1).collect(),
            outputs: outputs.iter().map(|o| o.1).collect(),
            body: body.clone(),
            types: types.clone(),
            in_types: in_types.clone(),
            out_types: out_types.clone(),
            frames: frames.clone(),
            params: params.len(),
            dims_at: *dims_at,
            width: *width,
            vectors: *vectors,
            tiles: tiles.clone(),
            phases: phases.clone(),
            aliases: aliases.clone(),
            store_view: *store_view,
            scatter: *scatter,
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

/// Parses and validates WGSL as wgpu would, with every capability (cooperative matrices, f16, subgroups), and
/// translates it to SPIR-V as wgpu's Vulkan backend does.
#[cfg(test)]
pub(crate) fn validate(src: &str) {
    use wgpu::naga;
    let module = naga::front::wgsl::parse_str(src).unwrap_or_else(|e| panic!("{}\n{src}", e.emit_to_string(src)));
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
        .validate(&module)
        .unwrap_or_else(|e| panic!("{}\n{src}", e.emit_to_string(src)));
    naga::back::spv::write_vec(&module, &info, &naga::back::spv::Options::default(), None)
        .unwrap_or_else(|e| panic!("{e}\n{src}"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::build::{bin, data, fold, un};
    use crate::graph::Graph;
    use crate::op::{BinaryOp, ReduceOp, UnaryOp};
    use crate::schedule::{plan, Options};

    /// The softmax kernel of `[8, cols]`, generated for `target`, of the input put first through `pre`, pairs of
    /// an op and a scalar operand (`None`: `tanh`).
    fn softmax_wgsl(cols: usize, pre: &[Option<(BinaryOp, f32)>], target: &Target) -> String {
        let mut g = Graph::default();
        let mut x = data(&mut g, &[8, cols]);
        for step in pre {
            x = match step {
                Some((op, v)) => {
                    let c = crate::graph::build::scalar(&mut g, *v);
                    bin(&mut g, *op, x, c)
                }
                None => un(&mut g, UnaryOp::Tanh, x),
            };
        }
        let m = fold(&mut g, ReduceOp::Max, x, 1);
        let d = bin(&mut g, BinaryOp::Sub, x, m);
        let e = un(&mut g, UnaryOp::Exp, d);
        let s = fold(&mut g, ReduceOp::Sum, e, 1);
        let out = bin(&mut g, BinaryOp::Div, e, s);
        let p = plan(&g, &[out], &Options::TEST);
        generate(&p.kernels[0], target)
    }

    #[test]
    fn helpers_combine_conditions_without_short_circuits() {
        for &h in Helper::ALL {
            let src = helper_source(h);
            assert!(!src.contains("||") && !src.contains("&&"), "{h:?}: `|` and `&`, not branches\n{src}");
        }
    }

    #[test]
    fn wide_rows_kernels_hold_the_row_in_registers_when_it_fits() {
        for subgroups in [false, true] {
            let target = Target { subgroups, ..Default::default() };
            let wide = softmax_wgsl(256, &[], &target);
            validate(&wide);
            assert!(wide.contains("var rc0: array<vec4<f32>, 4>;"), "{wide}");
            // The cached path (before the top-level `else`) reads memory only to fill the registers.
            let (cached, streamed) = wide.split_once("\n    } else {\n").expect("two paths");
            assert_eq!(cached.matches("i0[").count(), 4, "{wide}");
            assert!(streamed.matches("i0[").count() >= 3, "{wide}");
            let scalar = softmax_wgsl(258, &[], &target);
            validate(&scalar);
            assert!(!scalar.contains("rc0"), "{scalar}");
        }
    }

    #[test]
    fn a_value_every_phase_computes_is_kept_with_the_row() {
        // softmax(tanh(x * 0.5) * 3 + 1): each of the three passes computes the same 4 instructions.
        let pre = [Some((BinaryOp::Mul, 0.5)), None, Some((BinaryOp::Mul, 3.0)), Some((BinaryOp::Add, 1.0))];
        let src = softmax_wgsl(256, &pre, &Target::default());
        validate(&src);
        assert_eq!(src.matches("var rv").count(), 1, "{src}");
        let (cached, streamed) = src.split_once("\n    } else {\n").expect("two paths");
        // Computed once per slot ahead of the phases, read by each of the three, recomputed by none.
        assert_eq!(cached.matches(" = rv").count(), 3 * reduce::UNROLL, "{cached}");
        let tanhs = cached.lines().filter(|l| l.trim_start().starts_with("let t") && l.contains("tanh")).count();
        assert_eq!(tanhs, reduce::UNROLL, "{cached}");
        // The streamed path (a row past the registers) is as before: each pass computes them.
        assert!(!streamed.contains("rv"), "{streamed}");
        // A shared value of one instruction is cheaper to compute again than to keep.
        let scaled = softmax_wgsl(256, &[Some((BinaryOp::Mul, 0.125))], &Target::default());
        assert!(!scaled.contains("rv"), "{scaled}");
        // Nor is one kept where a phase still reads its input: it would take registers beside the row's.
        let mut g = Graph::default();
        let x = data(&mut g, &[8, 256]);
        let total = fold(&mut g, ReduceOp::Sum, x, 1);
        let mut y = x;
        for step in pre {
            y = match step {
                Some((op, v)) => {
                    let c = crate::graph::build::scalar(&mut g, v);
                    bin(&mut g, op, y, c)
                }
                None => un(&mut g, UnaryOp::Tanh, y),
            };
        }
        let m = fold(&mut g, ReduceOp::Max, y, 1);
        let s = fold(&mut g, ReduceOp::Sum, y, 1);
        let p = plan(&g, &[total, m, s], &Options::TEST);
        assert_eq!(p.kernels.len(), 1);
        let both = generate(&p.kernels[0], &Target::default());
        validate(&both);
        assert!(both.contains("var rc0") && !both.contains("rv"), "{both}");
    }

    #[test]
    fn loads_repeated_along_a_row_are_read_once_per_phase() {
        // y = (x - mean) / sqrt(var * 0.5 + 1e-5) with mean and var one value per row, then y / sum(y): the two
        // statistics are read and the square root computed once per row, ahead of the loop over it, by each phase
        // of the streamed path and by the cached path's computation of `y`, which both its phases then read.
        let mut g = Graph::default();
        let x = data(&mut g, &[8, 256]);
        let (mean, var) = (data(&mut g, &[8, 1]), data(&mut g, &[8, 1]));
        let half = crate::graph::build::scalar(&mut g, 0.5);
        let eps = crate::graph::build::scalar(&mut g, 1e-5);
        let centred = bin(&mut g, BinaryOp::Sub, x, mean);
        let scaled = bin(&mut g, BinaryOp::Mul, var, half);
        let shifted = bin(&mut g, BinaryOp::Add, scaled, eps);
        let root = un(&mut g, UnaryOp::Sqrt, shifted);
        let y = bin(&mut g, BinaryOp::Div, centred, root);
        let s = fold(&mut g, ReduceOp::Sum, y, 1);
        let out = bin(&mut g, BinaryOp::Div, y, s);
        let p = plan(&g, &[out], &Options::TEST);
        assert_eq!(p.kernels.len(), 1);
        let src = generate(&p.kernels[0], &Target::default());
        validate(&src);
        let (cached, streamed) = src.split_once("\n    } else {\n").expect("two paths");
        assert!(cached.contains("var rv"), "{cached}");
        assert_eq!((cached.matches("sqrt(").count(), cached.matches("select(0i, ").count()), (1, 2), "{cached}");
        assert_eq!((streamed.matches("sqrt(").count(), streamed.matches("select(0i, ").count()), (2, 4), "{streamed}");
        // A row of 258 is not read in vectors: per element, as before.
        let mut g = Graph::default();
        let x = data(&mut g, &[8, 258]);
        let mean = data(&mut g, &[8, 1]);
        let centred = bin(&mut g, BinaryOp::Sub, x, mean);
        let s = fold(&mut g, ReduceOp::Sum, centred, 1);
        let out = bin(&mut g, BinaryOp::Div, centred, s);
        let p = plan(&g, &[out], &Options::TEST);
        let src = generate(&p.kernels[0], &Target::default());
        validate(&src);
        assert!(!src.contains("select(0i, "), "{src}");
    }

    #[test]
    fn parameters_are_a_uniform_block_unless_too_long_for_one() {
        let mut g = Graph::default();
        let x = data(&mut g, &[3, 5]);
        let y = un(&mut g, UnaryOp::Exp, x);
        let mut k = plan(&g, &[y], &Options::TEST).kernels[0].clone();
        let src = generate(&k, &Target::default());
        validate(&src);
        let rows = param_vecs(k.params.len());
        assert!(src.contains(&format!("var<uniform> p: array<vec4<u32>, {rows}>;")), "{src}");
        assert!(src.contains(&param(0)) && !src.contains("p[0]]"), "{src}");
        // A block past 16 KiB (a kernel fused past the default op bound) is bound as storage, read the same way.
        k.params.resize(4 * UNIFORM_PARAM_ROWS + 1, 0);
        let src = generate(&k, &Target::default());
        validate(&src);
        let rows = UNIFORM_PARAM_ROWS + 1;
        assert!(src.contains(&format!("var<storage, read> p: array<vec4<u32>, {rows}>;")), "{src}");
    }

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
