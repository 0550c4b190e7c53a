//! WGSL generation: turns the kernel IR into shader source. The one place that spells each op in WGSL.
//!
//! The source depends only on the kernel's structure (ops, how many inputs, which loads are strided, the rank),
//! never on sizes or scalar values, which travel in the parameter buffer. So the source itself is the pipeline
//! cache key.

use crate::dtype::DType;
use crate::op::{BinaryOp, UnaryOp};
use crate::schedule::{Instr, Kernel};
use std::fmt::Write;

/// Threads per workgroup.
pub const WORKGROUP_SIZE: u32 = 256;

/// Helper functions, emitted only when a kernel uses them. They pin down IEEE behaviour that WGSL leaves open.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Helper {
    IsNan,
    Max,
    Min,
    Pow,
}

const HELPERS: [(Helper, &str); 4] = [
    (
        Helper::IsNan,
        // Bit test: `x != x` may be folded away by compilers that assume no NaNs.
        "fn lz_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }\n",
    ),
    (
        Helper::Max,
        "fn lz_max(a: f32, b: f32) -> f32 { return select(max(a, b), a + b, lz_isnan(a) || lz_isnan(b)); }\n",
    ),
    (
        Helper::Min,
        "fn lz_min(a: f32, b: f32) -> f32 { return select(min(a, b), a + b, lz_isnan(a) || lz_isnan(b)); }\n",
    ),
    (
        Helper::Pow,
        // Rust's powf: x^0 = 1 and 1^y = 1 even for NaN; a negative base needs an integer exponent, whose parity
        // gives the sign; zeros and infinities follow IEEE pow. WGSL's pow is only defined for finite x > 0.
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
",
    ),
];

/// `op` applied to `a`, whose WGSL type is `ty` (`f32` or `vec4<f32>`); `v` is `"4"` in vectorized kernels.
fn unary(op: UnaryOp, a: &str, ty: &str, v: &str) -> String {
    match op {
        UnaryOp::Neg => format!("-{a}"),
        UnaryOp::Exp => format!("exp({a})"),
        UnaryOp::Ln => format!("log({a})"),
        UnaryOp::Sqrt => format!("sqrt({a})"),
        // `inverseSqrt` is undefined at 0 and below; this keeps 1/sqrt(0) = inf and NaN for negatives.
        UnaryOp::Rsqrt => format!("1.0 / sqrt({a})"),
        UnaryOp::Abs => format!("abs({a})"),
        // Not `select(a, 0, a < 0)`: NVIDIA's compiler turns that into a max that drops NaN.
        UnaryOp::Relu => format!("select(max({a}, {ty}(0.0)), {a}, lz_isnan{v}({a}))"),
        UnaryOp::Sigmoid => format!("1.0 / (1.0 + exp(-{a}))"),
        UnaryOp::Tanh => format!("tanh({a})"),
        UnaryOp::Sin => format!("sin({a})"),
        UnaryOp::Cos => format!("cos({a})"),
        UnaryOp::Recip => format!("1.0 / {a}"),
        UnaryOp::Square => format!("{a} * {a}"),
        UnaryOp::Gelu => format!("0.5 * {a} * (1.0 + tanh(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a})))"),
        UnaryOp::Silu => format!("{a} / (1.0 + exp(-{a}))"),
    }
}

/// `op` applied to `a` and `b`; `v` is `"4"` in vectorized kernels, selecting the helpers' vector forms.
fn binary(op: BinaryOp, a: &str, b: &str, v: &str) -> String {
    match op {
        BinaryOp::Add => format!("{a} + {b}"),
        BinaryOp::Sub => format!("{a} - {b}"),
        BinaryOp::Mul => format!("{a} * {b}"),
        BinaryOp::Div => format!("{a} / {b}"),
        BinaryOp::Max => format!("lz_max{v}({a}, {b})"),
        BinaryOp::Min => format!("lz_min{v}({a}, {b})"),
        BinaryOp::Pow => format!("lz_pow{v}({a}, {b})"),
    }
}

impl Helper {
    /// The name of a two-operand helper, which vectorized kernels wrap componentwise.
    fn binary_name(self) -> Option<&'static str> {
        match self {
            Helper::IsNan => None,
            Helper::Max => Some("lz_max"),
            Helper::Min => Some("lz_min"),
            Helper::Pow => Some("lz_pow"),
        }
    }
}

fn helpers_of(op: BinaryOp) -> &'static [Helper] {
    match op {
        BinaryOp::Max => &[Helper::IsNan, Helper::Max],
        BinaryOp::Min => &[Helper::IsNan, Helper::Min],
        BinaryOp::Pow => &[Helper::IsNan, Helper::Pow],
        _ => &[],
    }
}

/// The WGSL source of `kernel`. Bindings: 0 parameters, then outputs, then inputs.
pub fn generate(kernel: &Kernel) -> String {
    let scalar = DType::F32.wgsl();
    // Kernels without strided loads run 4 elements per thread on vec4 (16-byte loads and stores).
    let vectorized = kernel.width() == 4;
    let ty = if vectorized { format!("vec4<{scalar}>") } else { scalar.to_string() };
    let v = if vectorized { "4" } else { "" };
    let layout = kernel.layout();
    let mut used: Vec<Helper> = Vec::new();
    for instr in &kernel.body {
        let needs: &[Helper] = match instr {
            Instr::Binary(op, ..) => helpers_of(*op),
            Instr::Unary(UnaryOp::Relu, _) => &[Helper::IsNan],
            _ => &[],
        };
        for h in needs {
            if !used.contains(h) {
                used.push(*h);
            }
        }
    }

    let mut s = String::with_capacity(512 + 48 * kernel.body.len());
    // A fixed-size parameter array: every index is a constant, so no bounds check (and no branch) is emitted.
    let _ = writeln!(s, "@group(0) @binding(0) var<storage, read> p: array<u32, {}>;", layout.len);
    for o in 0..kernel.outputs.len() {
        let _ = writeln!(s, "@group(0) @binding({}) var<storage, read_write> o{o}: array<{ty}>;", 1 + o);
    }
    for i in 0..kernel.inputs.len() {
        let b = 1 + kernel.outputs.len() + i;
        let _ = writeln!(s, "@group(0) @binding({b}) var<storage, read> i{i}: array<{ty}>;");
    }
    for (h, src) in HELPERS {
        if used.contains(&h) {
            s.push_str(src);
            if vectorized && h == Helper::IsNan {
                s.push_str(
                    "fn lz_isnan4(x: vec4<f32>) -> vec4<bool> { \
                     return (bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u); }\n",
                );
            }
            if let (true, Some(name)) = (vectorized, h.binary_name()) {
                // Componentwise vector form of a scalar helper.
                let _ = writeln!(
                    s,
                    "fn {name}4(a: {ty}, b: {ty}) -> {ty} {{ return {ty}({name}(a.x, b.x), {name}(a.y, b.y), \
                     {name}(a.z, b.z), {name}(a.w, b.w)); }}"
                );
            }
        }
    }
    let _ = write!(
        s,
        "@compute @workgroup_size({WORKGROUP_SIZE})\n\
         fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{\n\
         \x20   let i = gid.x + gid.y * nwg.x * {WORKGROUP_SIZE}u;\n\
         \x20   if (i >= {threads}) {{ return; }}\n",
        threads = if vectorized { "(p[0] + 3u) / 4u" } else { "p[0]" },
    );
    // Coordinates of `i` in the iteration shape, innermost axis first, for strided loads.
    let rank = layout.rank;
    if rank > 0 {
        s.push_str("    var r = i;\n");
        for d in (0..rank).rev() {
            if d == 0 {
                s.push_str("    let c0 = r;\n");
            } else {
                let _ = writeln!(s, "    let c{d} = r % p[{}];\n    r = r / p[{}];", layout.dims + d, layout.dims + d);
            }
        }
    }
    for (n, instr) in kernel.body.iter().enumerate() {
        let rhs = match *instr {
            Instr::Load { input, view: None } => format!("i{input}[i]"),
            Instr::Load { input, view: Some(v) } => {
                let base = layout.views + v * rank;
                let terms: Vec<String> = (0..rank).map(|d| format!("c{d} * p[{}]", base + d)).collect();
                format!("i{input}[{}]", terms.join(" + "))
            }
            Instr::Scalar(k) if vectorized => format!("{ty}(bitcast<f32>(p[{}]))", layout.scalars + k),
            Instr::Scalar(k) => format!("bitcast<f32>(p[{}])", layout.scalars + k),
            Instr::Unary(op, a) => unary(op, &format!("t{a}"), &ty, v),
            Instr::Binary(op, a, b) => binary(op, &format!("t{a}"), &format!("t{b}"), v),
        };
        let _ = writeln!(s, "    let t{n} = {rhs};");
    }
    for (o, &(_, value)) in kernel.outputs.iter().enumerate() {
        let _ = writeln!(s, "    o{o}[i] = t{value};");
    }
    s.push_str("}\n");
    s
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

    #[test]
    fn source_does_not_depend_on_sizes_or_constants() {
        let k = |n: usize, c: f32| Kernel {
            shape: [n].into(),
            inputs: vec![],
            outputs: vec![],
            body: vec![Instr::Scalar(0), Instr::Unary(UnaryOp::Exp, 0)],
            views: vec![],
            scalars: vec![c],
            fused_ops: 1,
        };
        assert_eq!(generate(&k(10, 5.0)), generate(&k(1 << 20, 6.0)));
    }
}
