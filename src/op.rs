//! The op table: every elementwise op once, with its name, arity, WGSL spelling, helpers and meaning.
//!
//! Each row is the whole definition of an op. The reference interpreter and the CPU side of the tests evaluate
//! `eval`; codegen spells `wgsl` (`{a}`, `{b}` are the operands, `{ty}` their WGSL type, `{v}` is `4` in vectorized
//! kernels so helpers pick their vector form); `helpers` lists the WGSL helper functions the spelling calls.

/// WGSL helper functions an op's spelling may call. Their source lives in codegen; the table only names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Helper {
    /// `lz_isnan`: a NaN test by bit mask, which no compiler folds away.
    IsNan,
    /// `lz_max`: NaN-propagating maximum.
    Max,
    /// `lz_min`: NaN-propagating minimum.
    Min,
    /// `lz_pow`: Rust's `powf`.
    Pow,
}

/// `sqrt(2 / pi)`, the GELU tanh approximation's constant.
const GELU_C: f32 = 0.797_884_6;

macro_rules! op_table {
    (
        unary { $( $(#[$udoc:meta])* $U:ident $uname:literal
            wgsl $uw:literal needs [$($uh:ident),*] eval |$x:ident| $ue:expr; )* }
        binary { $( $(#[$bdoc:meta])* $B:ident $bname:literal
            wgsl $bw:literal needs [$($bh:ident),*] eval |$a:ident, $b:ident| $be:expr; )* }
    ) => {
        /// Elementwise operations of one operand.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum UnaryOp { $( $(#[$udoc])* $U, )* }

        /// Elementwise operations of two operands, broadcast by NumPy's rule.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum BinaryOp { $( $(#[$bdoc])* $B, )* }

        impl UnaryOp {
            /// Every unary op, for tests that sweep the op set.
            pub const ALL: [UnaryOp; [$(stringify!($U)),*].len()] = [$(UnaryOp::$U),*];

            /// The method name users call.
            pub fn name(self) -> &'static str {
                match self { $(UnaryOp::$U => $uname,)* }
            }

            /// The WGSL spelling, a template over `{a}`, `{ty}` and `{v}`.
            pub fn wgsl(self) -> &'static str {
                match self { $(UnaryOp::$U => $uw,)* }
            }

            /// The helpers the WGSL spelling calls.
            pub fn helpers(self) -> &'static [Helper] {
                match self { $(UnaryOp::$U => &[$(Helper::$uh),*],)* }
            }

            /// The op's value at `x`: the definition every backend must match.
            #[inline]
            pub fn eval(self, x: f32) -> f32 {
                match self { $(UnaryOp::$U => (|$x: f32| $ue)(x),)* }
            }

            /// `eval` over a slice: one loop per op, which the compiler vectorizes (the CPU backend's kernel body).
            /// Always inlined, so a caller compiled for wider vectors gets wider loops.
            #[inline(always)]
            pub fn eval_slice(self, a: &[f32], out: &mut [f32]) {
                match self { $(UnaryOp::$U => for (o, &$x) in out.iter_mut().zip(a) { *o = $ue; },)* }
            }
        }

        impl BinaryOp {
            /// Every binary op, for tests that sweep the op set.
            pub const ALL: [BinaryOp; [$(stringify!($B)),*].len()] = [$(BinaryOp::$B),*];

            /// The method name users call.
            pub fn name(self) -> &'static str {
                match self { $(BinaryOp::$B => $bname,)* }
            }

            /// The WGSL spelling, a template over `{a}`, `{b}`, `{ty}` and `{v}`.
            pub fn wgsl(self) -> &'static str {
                match self { $(BinaryOp::$B => $bw,)* }
            }

            /// The helpers the WGSL spelling calls.
            pub fn helpers(self) -> &'static [Helper] {
                match self { $(BinaryOp::$B => &[$(Helper::$bh),*],)* }
            }

            /// The op's value at `(a, b)`: the definition every backend must match.
            #[inline]
            pub fn eval(self, a: f32, b: f32) -> f32 {
                match self { $(BinaryOp::$B => (|$a: f32, $b: f32| $be)(a, b),)* }
            }

            /// `eval` over slices: one loop per op, which the compiler vectorizes (the CPU backend's kernel body).
            /// Always inlined, so a caller compiled for wider vectors gets wider loops.
            #[inline(always)]
            pub fn eval_slice(self, a: &[f32], b: &[f32], out: &mut [f32]) {
                match self {
                    $(BinaryOp::$B => for ((o, &$a), &$b) in out.iter_mut().zip(a).zip(b) { *o = $be; },)*
                }
            }
        }
    };
}

op_table! {
    unary {
        Neg "neg" wgsl "-{a}" needs [] eval |x| -x;
        Exp "exp" wgsl "exp({a})" needs [] eval |x| x.exp();
        Ln "ln" wgsl "log({a})" needs [] eval |x| x.ln();
        Sqrt "sqrt" wgsl "sqrt({a})" needs [] eval |x| x.sqrt();
        // `inverseSqrt` is undefined at 0 and below; this keeps 1/sqrt(0) = inf and NaN for negatives.
        Rsqrt "rsqrt" wgsl "1.0 / sqrt({a})" needs [] eval |x| 1.0 / x.sqrt();
        Abs "abs" wgsl "abs({a})" needs [] eval |x| x.abs();
        // Not `select(a, 0, a < 0)`: NVIDIA's compiler turns that into a max that drops NaN.
        Relu "relu" wgsl "select(max({a}, {ty}(0.0)), {a}, lz_isnan{v}({a}))" needs [IsNan]
            eval |x| if x < 0.0 { 0.0 } else { x };
        Sigmoid "sigmoid" wgsl "1.0 / (1.0 + exp(-{a}))" needs [] eval |x| 1.0 / (1.0 + (-x).exp());
        Tanh "tanh" wgsl "tanh({a})" needs [] eval |x| x.tanh();
        Sin "sin" wgsl "sin({a})" needs [] eval |x| x.sin();
        Cos "cos" wgsl "cos({a})" needs [] eval |x| x.cos();
        Recip "recip" wgsl "1.0 / {a}" needs [] eval |x| 1.0 / x;
        Square "square" wgsl "{a} * {a}" needs [] eval |x| x * x;
        Gelu "gelu" wgsl "0.5 * {a} * (1.0 + tanh(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a})))"
            needs [] eval |x| 0.5 * x * (1.0 + (GELU_C * (x + 0.044715 * x * x * x)).tanh());
        Silu "silu" wgsl "{a} / (1.0 + exp(-{a}))" needs [] eval |x| x / (1.0 + (-x).exp());
    }
    binary {
        Add "add" wgsl "{a} + {b}" needs [] eval |a, b| a + b;
        Sub "sub" wgsl "{a} - {b}" needs [] eval |a, b| a - b;
        Mul "mul" wgsl "{a} * {b}" needs [] eval |a, b| a * b;
        Div "div" wgsl "{a} / {b}" needs [] eval |a, b| a / b;
        /// NaN-propagating maximum (as `numpy.maximum`).
        Max "maximum" wgsl "lz_max{v}({a}, {b})" needs [IsNan, Max]
            eval |a, b| if a.is_nan() || b.is_nan() { f32::NAN } else { a.max(b) };
        /// NaN-propagating minimum (as `numpy.minimum`).
        Min "minimum" wgsl "lz_min{v}({a}, {b})" needs [IsNan, Min]
            eval |a, b| if a.is_nan() || b.is_nan() { f32::NAN } else { a.min(b) };
        /// `a.powf(b)`, with Rust's rules for negative bases and integer exponents.
        Pow "powf" wgsl "lz_pow{v}({a}, {b})" needs [IsNan, Pow] eval |a, b| a.powf(b);
    }
}

/// Reductions along one axis. Each folds with an associative combine from its identity; the order of folding is
/// fixed per backend (a tree), so results are deterministic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum; 0 over an empty axis.
    Sum,
    /// Product; 1 over an empty axis.
    Prod,
    /// NaN-propagating maximum; an empty axis is an error.
    Max,
    /// NaN-propagating minimum; an empty axis is an error.
    Min,
}

impl ReduceOp {
    /// The method name users call.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }

    /// The value folding starts from.
    pub fn identity(self) -> f32 {
        match self {
            ReduceOp::Sum => 0.0,
            ReduceOp::Prod => 1.0,
            ReduceOp::Max => f32::NEG_INFINITY,
            ReduceOp::Min => f32::INFINITY,
        }
    }

    /// The binary op that folds two partial results.
    pub fn combine(self) -> BinaryOp {
        match self {
            ReduceOp::Sum => BinaryOp::Add,
            ReduceOp::Prod => BinaryOp::Mul,
            ReduceOp::Max => BinaryOp::Max,
            ReduceOp::Min => BinaryOp::Min,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ieee_edges() {
        assert!(BinaryOp::Max.eval(f32::NAN, 1.0).is_nan());
        assert_eq!(BinaryOp::Pow.eval(-2.0, 3.0), -8.0);
        assert!(BinaryOp::Pow.eval(-2.0, 0.5).is_nan());
        assert_eq!(UnaryOp::Relu.eval(-3.0), 0.0);
        assert!(UnaryOp::Relu.eval(f32::NAN).is_nan());
        assert_eq!(BinaryOp::Div.eval(1.0, 0.0), f32::INFINITY);
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<&str> = UnaryOp::ALL.iter().map(|o| o.name()).collect();
        names.extend(BinaryOp::ALL.iter().map(|o| o.name()));
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
    }
}
