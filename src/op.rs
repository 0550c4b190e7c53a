//! The op table: every elementwise op once, with its name, arity, WGSL spelling, helpers and meaning.
//!
//! Each row is the whole definition of an op, per class of element type it is defined on (float, int, bool). The
//! reference interpreter evaluates `eval_lane`, the CPU backend the slice loops; codegen spells `wgsl` (`{a}`,
//! `{b}` are the operands, `{ty}` their WGSL type, `{v}` is `4` in vectorized kernels so helpers pick their vector
//! form); `helpers` lists the WGSL helper functions the spelling calls.

pub use crate::dtype::Class;
use crate::dtype::DType;

/// Declares the helpers and their list, so the list cannot miss one.
macro_rules! helpers {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// WGSL helper functions an op's spelling may call. Their source lives in codegen; the table only names them.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Helper {
            $($(#[$doc])* $name,)*
        }

        impl Helper {
            /// Every helper, in declaration order: the order their source is emitted in (a helper's dependencies
            /// come before it).
            pub const ALL: &'static [Helper] = &[$(Helper::$name),*];
        }
    };
}

helpers! {
    /// `lz_bits`: the f32 of a bit pattern, at run time. Infinities and NaN cannot be written as
    /// `bitcast<f32>(0x7f800000u)`: that is a const-expression, and WGSL makes one whose value is not finite a
    /// shader-creation error (Chrome's compiler enforces it; naga does not). A call of a function is never one.
    Bits,
    /// `lz_isnan`: a NaN test by bit mask, which no compiler folds away.
    IsNan,
    /// `lz_max`: NaN-propagating maximum.
    Max,
    /// `lz_min`: NaN-propagating minimum.
    Min,
    /// `lz_pow`: Rust's `powf`.
    Pow,
    /// `lz_log1p`: `ln(1 + x)`, accurate near 0 (WGSL's `log` only promises an absolute error near 1).
    Log1p,
    /// `lz_expm1`: `e^x - 1`, accurate near 0.
    Expm1,
    /// `lz_erf`: the error function, as [`erf`] (WGSL has none).
    Erf,
    /// `lz_sign`: -1 or +1 by the sign bit, `x` itself for ±0 and NaN.
    Sign,
    /// `lz_f16`: an f32 rounded to the nearest f16 value (ties to even), as an f32.
    RoundF16,
    /// `lz_bf16`: an f32 rounded to the nearest bf16 value (ties to even), as an f32.
    RoundBf16,
    /// `lz_f2i`: f32 to i32 as Rust's `as` (truncating, saturating, NaN to 0).
    F2I,
    /// `lz_f2u`: f32 to u32 as Rust's `as`.
    F2U,
    /// `lz_h`: the f16 bits of an f32 that holds an f16 value.
    HalfBits,
    /// `lz_philox`: the block of Philox4x32-10 at counter `(x, 0, 0, 0)`, and `lz_u01`, a word as a uniform value.
    Philox,
    /// `lz_rand`: uniform element `x` on `[0, 1)` under a key (`src/random.rs`).
    Rand,
    /// `lz_rand_x4`: uniform elements `x .. x + 3` (`x` a multiple of 4) from one block.
    RandX4,
    /// `lz_randn`: standard normal element `x` under a key (`src/random.rs`).
    Randn,
    /// `lz_randn_x4`: standard normal elements `x .. x + 3` (`x` a multiple of 4) from two blocks.
    RandnX4,
}

/// The GELU tanh approximation `0.5 x (1 + tanh(c (x + k x^3)))` (`c = sqrt(2 / pi)`, `k = 0.044715`) written as
/// `x sigmoid(2 c x + 2 c k x^3)`, the same function: `GELU_2C` is `2 c`, `GELU_2CK` is `2 c k`. The tanh form in a
/// matmul's epilogue made the product far slower under NVIDIA's compiler (580); this one runs it as fast as the bare
/// product (`x [16384, 384] w^T [384, 1536]`; figures: docs/notes/source-measurements.md, `src/op.rs`).
pub(crate) const GELU_2C: f32 = 1.595_769_2;
pub(crate) const GELU_2CK: f32 = 0.071_354_82;

/// Where [`erf`] switches from its odd polynomial to `1 - e^q(|x|)`.
pub(crate) const ERF_SPLIT: f32 = 0.921_875;
/// `erf(x) / x - 1` as a polynomial in `x^2` on `|x| <= ERF_SPLIT`, highest power first (a Chebyshev fit, within
/// 1.7e-8).
pub(crate) const ERF_SMALL: [f32; 6] =
    [-6.004_081e-4, 4.996_020_3e-3, -2.676_875_7e-2, 1.128_188_2e-1, -3.761_25e-1, 1.283_791_5e-1];
/// `ln(erfc(t))` as a polynomial in `t` on `ERF_SPLIT <= t <= 4`, highest power first (a Chebyshev fit, within
/// 1.9e-8); past 4, erf rounds to 1 in f32.
pub(crate) const ERF_TAIL: [f32; 9] = [
    1.643_571e-6,
    -4.617_827_7e-5,
    5.977_498_4e-4,
    -4.763_623_2e-3,
    2.643_121_2e-2,
    -1.100_949_4e-1,
    -6.318_139e-1,
    -1.130_238,
    3.205_816_3e-4,
];

/// The error function: `x + x p(x^2)` up to [`ERF_SPLIT`], then `±(1 - e^q(|x|))` with `q` a fit of `ln(erfc)`;
/// within 1.2 ulp of the true erf when `exp` is correctly rounded (measured on 110,000 points of [0, 4.5]).
/// Neither Rust nor WGSL has one, so the reference, the CPU backend and the WGSL helper `lz_erf` compute this same
/// formula: plain products and sums (no fused multiply-add), with `M`'s `exp`.
#[inline(always)]
pub fn erf<M: Math>(x: f32) -> f32 {
    let t = x.abs();
    if t > ERF_SPLIT {
        // NaN is not `> ERF_SPLIT` and stays NaN below; infinities take the tail, clamped to 4, and give ±1.
        let t = t.min(4.0);
        let q = ERF_TAIL.iter().fold(0.0, |r, &c| r * t + c);
        (1.0 - M::exp(q)).copysign(x)
    } else {
        let s = x * x;
        x + x * ERF_SMALL.iter().fold(0.0, |r, &c| r * s + c)
    }
}

/// Integer lane arithmetic shared by `i32` and `u32`, where Rust's own methods differ or leave a case open.
pub trait IntLane: Copy + Ord {
    /// `self / b` truncating toward zero, wrapping (`i32::MIN / -1` is `i32::MIN`); `a / 0` is `a`, as WGSL
    /// defines it, so every backend gives it without a branch of its own.
    fn div_w(self, b: Self) -> Self;
    /// The remainder of [`IntLane::div_w`], with the dividend's sign; `a % 0` is 0.
    fn rem_w(self, b: Self) -> Self;
    /// `|self|`, wrapping (`i32::MIN` stays `i32::MIN`).
    fn abs_w(self) -> Self;
    /// `max(self, 0)`.
    fn relu_w(self) -> Self;
}

impl IntLane for i32 {
    #[inline]
    fn div_w(self, b: i32) -> i32 {
        if b == 0 {
            self
        } else {
            self.wrapping_div(b)
        }
    }
    #[inline]
    fn rem_w(self, b: i32) -> i32 {
        if b == 0 {
            0
        } else {
            self.wrapping_rem(b)
        }
    }
    #[inline]
    fn abs_w(self) -> i32 {
        self.wrapping_abs()
    }
    #[inline]
    fn relu_w(self) -> i32 {
        self.max(0)
    }
}

impl IntLane for u32 {
    #[inline]
    fn div_w(self, b: u32) -> u32 {
        self.checked_div(b).unwrap_or(self)
    }
    #[inline]
    fn rem_w(self, b: u32) -> u32 {
        self.checked_rem(b).unwrap_or(0)
    }
    #[inline]
    fn abs_w(self) -> u32 {
        self
    }
    #[inline]
    fn relu_w(self) -> u32 {
        self
    }
}

/// Rows name the classes they are defined on (see [`Class`]): `@float` (WGSL spelling, helpers, f32 semantics),
/// `int` (spelling and semantics, written once for i32 and u32) and `bool` (on 0/1 lanes). An op without a column
/// is not defined there; the API casts or reports an error first. Comparisons are defined everywhere and give
/// bool lanes.
macro_rules! op_table {
    (
        unary { $( $(#[$udoc:meta])* $U:ident $uname:literal
            $(@float $uw:literal needs [$($uh:ident),*] |$x:ident| $ue:expr;)?
            $(@int $uiw:literal |$ix:ident| $uie:expr;)?
            $(@bool $ubw:literal |$bx:ident| $ube:expr;)? )* }
        binary { $( $(#[$bdoc:meta])* $B:ident $bname:literal
            $(@float $bw:literal needs [$($bh:ident),*] |$a:ident, $b:ident| $be:expr;)?
            $(@int $biw:literal |$ia:ident, $ib:ident| $bie:expr;)?
            $(@bool $bbw:literal |$ba:ident, $bb:ident| $bbe:expr;)? )* }
        compare { $( $(#[$cdoc:meta])* $C:ident $cname:literal $cw:literal |$ca:ident, $cb:ident| $ce:expr; )* }
    ) => {
        /// Elementwise operations of one operand.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum UnaryOp { $( $(#[$udoc])* $U, )* }

        /// Elementwise operations of two operands of one type, broadcast by NumPy's rule. Comparisons give bools.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum BinaryOp { $( $(#[$bdoc])* $B, )* $( $(#[$cdoc])* $C, )* }

        impl UnaryOp {
            /// Every unary op, for tests that sweep the op set.
            pub const ALL: [UnaryOp; [$(stringify!($U)),*].len()] = [$(UnaryOp::$U),*];

            /// The method name users call.
            pub fn name(self) -> &'static str {
                match self { $(UnaryOp::$U => $uname,)* }
            }

            /// Whether the op is defined on values of `class`.
            pub fn supports(self, class: Class) -> bool {
                match self { $(UnaryOp::$U => match class {
                    Class::Float => false $(|| { let _ = $uw; true })?,
                    Class::Int | Class::Uint => false $(|| { let _ = $uiw; true })?,
                    Class::Bool => false $(|| { let _ = $ubw; true })?,
                },)* }
            }

            /// The WGSL spelling on `class`, a template over `{a}`, `{ty}` and `{v}`.
            pub fn wgsl(self, class: Class) -> &'static str {
                match self { $(UnaryOp::$U => {
                    $(if class == Class::Float { return $uw; })?
                    $(if matches!(class, Class::Int | Class::Uint) { return $uiw; })?
                    $(if class == Class::Bool { return $ubw; })?
                    unreachable!("{} on {class:?}", $uname)
                })* }
            }

            /// The helpers the float spelling calls.
            pub fn helpers(self) -> &'static [Helper] {
                match self { $(UnaryOp::$U => &[$($(Helper::$uh),*)?],)* }
            }

            /// The op's value at `x`: the definition every backend must match.
            #[inline]
            pub fn eval(self, x: f32) -> f32 {
                self.eval_with::<Libm>(x)
            }

            /// `eval` with the transcendental functions of `M`: the same row, as a backend spells it.
            #[inline(always)]
            #[allow(unreachable_code)]
            pub fn eval_with<M: Math>(self, x: f32) -> f32 {
                match self { $(UnaryOp::$U => { $(return (|$x: f32| $ue)(x);)? unreachable!("{} on f32", $uname) })* }
            }

            /// `eval` over a slice: one loop per op, which the compiler vectorizes (the CPU backend's kernel body).
            /// Always inlined, so a caller compiled for wider vectors gets wider loops.
            #[inline(always)]
            pub fn eval_slice<M: Math>(self, a: &[f32], out: &mut [f32]) {
                match self {
                    $(UnaryOp::$U => { $(for (o, &$x) in out.iter_mut().zip(a) { *o = $ue; } return;)? })*
                }
                unreachable!("{} on f32", self.name())
            }

            /// The op on integer lanes of type `T` (i32 or u32) or, for `bool`, on 0/1 lanes; the CPU backend's
            /// integer loop.
            #[inline(always)]
            pub fn eval_int_slice<T: IntLane + IntBits>(self, bool: bool, a: &[T], out: &mut [T]) {
                match self {
                    $(UnaryOp::$U => {
                        $(if bool {
                            let _ = $ubw;
                            for (o, &v) in out.iter_mut().zip(a) { let $bx = v.to_u32(); *o = T::from_u32($ube); }
                            return;
                        })?
                        $(let _ = $uiw; for (o, &$ix) in out.iter_mut().zip(a) { *o = $uie; } return;)?
                    })*
                }
                #[allow(unreachable_code)]
                { unreachable!("{} on integers", self.name()) }
            }

            /// The op on one lane of dtype `dt` (the reference interpreter's definition), rounded to `dt`.
            pub fn eval_lane(self, dt: DType, x: u32) -> u32 {
                let mut out = [0u32];
                match dt.class() {
                    Class::Float => return dt.round(self.eval(f32::from_bits(x))).to_bits(),
                    Class::Int => self.eval_int_slice::<i32>(false, &[x as i32], bytemuck::cast_slice_mut(&mut out)),
                    Class::Uint => self.eval_int_slice::<u32>(false, &[x], &mut out),
                    Class::Bool => self.eval_int_slice::<u32>(true, &[x], &mut out),
                }
                out[0]
            }
        }

        impl BinaryOp {
            /// Every binary op, for tests that sweep the op set.
            pub const ALL: [BinaryOp; [$(stringify!($B)),* $(,stringify!($C))*].len()] =
                [$(BinaryOp::$B,)* $(BinaryOp::$C,)*];

            /// The method name users call.
            pub fn name(self) -> &'static str {
                match self { $(BinaryOp::$B => $bname,)* $(BinaryOp::$C => $cname,)* }
            }

            /// Whether the op compares, giving bools.
            pub fn is_compare(self) -> bool {
                match self { $(BinaryOp::$B => false,)* $(BinaryOp::$C => true,)* }
            }

            /// Whether the op is defined on operands of `class`.
            pub fn supports(self, class: Class) -> bool {
                match self {
                    $(BinaryOp::$B => match class {
                        Class::Float => false $(|| { let _ = $bw; true })?,
                        Class::Int | Class::Uint => false $(|| { let _ = $biw; true })?,
                        Class::Bool => false $(|| { let _ = $bbw; true })?,
                    },)*
                    $(BinaryOp::$C => true,)*
                }
            }

            /// The WGSL spelling on `class`, a template over `{a}`, `{b}`, `{ty}` and `{v}`. A comparison's
            /// spelling is the `bool` condition; codegen turns it into a 0/1 lane.
            pub fn wgsl(self, class: Class) -> &'static str {
                match self {
                    $(BinaryOp::$B => {
                        $(if class == Class::Float { return $bw; })?
                        $(if matches!(class, Class::Int | Class::Uint) { return $biw; })?
                        $(if class == Class::Bool { return $bbw; })?
                        unreachable!("{} on {class:?}", $bname)
                    })*
                    $(BinaryOp::$C => $cw,)*
                }
            }

            /// The helpers the float spelling calls.
            pub fn helpers(self) -> &'static [Helper] {
                match self { $(BinaryOp::$B => &[$($(Helper::$bh),*)?],)* $(BinaryOp::$C => &[Helper::IsNan],)* }
            }

            /// The op's value at `(a, b)` on f32 (a comparison gives 1.0 or 0.0): the definition every backend must
            /// match.
            #[inline]
            #[allow(unreachable_code)]
            pub fn eval(self, a: f32, b: f32) -> f32 {
                match self {
                    $(BinaryOp::$B => { $(return (|$a: f32, $b: f32| $be)(a, b);)? unreachable!("{} on f32", $bname) })*
                    $(BinaryOp::$C => ((|$ca: f32, $cb: f32| $ce)(a, b)) as u32 as f32,)*
                }
            }

            /// `eval` over slices: one loop per op, which the compiler vectorizes (the CPU backend's kernel body).
            /// Always inlined, so a caller compiled for wider vectors gets wider loops. Not for comparisons.
            #[inline(always)]
            pub fn eval_slice(self, a: &[f32], b: &[f32], out: &mut [f32]) {
                match self {
                    $(BinaryOp::$B => {
                        $(for ((o, &$a), &$b) in out.iter_mut().zip(a).zip(b) { *o = $be; } return;)?
                    })*
                    $(BinaryOp::$C => {})*
                }
                unreachable!("{} on f32", self.name())
            }

            /// `eval_slice` with a constant second operand (`a op s`): one stream fewer than a filled vector.
            #[inline(always)]
            pub fn eval_slice_scalar(self, a: &[f32], s: f32, out: &mut [f32]) {
                match self {
                    $(BinaryOp::$B => {
                        $(for (o, &$a) in out.iter_mut().zip(a) { let $b = s; *o = $be; } return;)?
                    })*
                    $(BinaryOp::$C => {})*
                }
                unreachable!("{} on f32", self.name())
            }

            /// `eval_slice` with a constant first operand (`s op b`).
            #[inline(always)]
            pub fn scalar_eval_slice(self, s: f32, b: &[f32], out: &mut [f32]) {
                match self {
                    $(BinaryOp::$B => {
                        $(for (o, &$b) in out.iter_mut().zip(b) { let $a = s; *o = $be; } return;)?
                    })*
                    $(BinaryOp::$C => {})*
                }
                unreachable!("{} on f32", self.name())
            }

            /// The op on integer lanes of type `T` or, for `bool`, on 0/1 lanes. Not for comparisons.
            #[inline(always)]
            pub fn eval_int_slice<T: IntLane + IntBits>(self, bool: bool, a: &[T], b: &[T], out: &mut [T]) {
                match self {
                    $(BinaryOp::$B => {
                        $(if bool {
                            let _ = $bbw;
                            for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                                let ($ba, $bb) = (x.to_u32(), y.to_u32());
                                *o = T::from_u32($bbe);
                            }
                            return;
                        })?
                        $(let _ = $biw; for ((o, &$ia), &$ib) in out.iter_mut().zip(a).zip(b) { *o = $bie; } return;)?
                    })*
                    $(BinaryOp::$C => {})*
                }
                #[allow(unreachable_code)]
                { unreachable!("{} on integers", self.name()) }
            }

            /// A comparison over slices of any lane type, giving 0/1 lanes.
            #[inline(always)]
            pub fn compare_slice<T: PartialOrd + Copy>(self, a: &[T], b: &[T], out: &mut [u32]) {
                match self {
                    $(BinaryOp::$C => for ((o, &$ca), &$cb) in out.iter_mut().zip(a).zip(b) { *o = ($ce) as u32; },)*
                    $(BinaryOp::$B => unreachable!("{} is not a comparison", $bname),)*
                }
            }

            /// The op on lanes of dtype `dt` (the reference interpreter's definition): rounded to `dt`, or a 0/1
            /// lane for a comparison.
            pub fn eval_lane(self, dt: DType, a: u32, b: u32) -> u32 {
                let mut out = [0u32];
                if self.is_compare() {
                    match dt.class() {
                        Class::Float => self.compare_slice(&[f32::from_bits(a)], &[f32::from_bits(b)], &mut out),
                        Class::Int => self.compare_slice(&[a as i32], &[b as i32], &mut out),
                        Class::Uint | Class::Bool => self.compare_slice(&[a], &[b], &mut out),
                    }
                    return out[0];
                }
                match dt.class() {
                    Class::Float => return dt.round(self.eval(f32::from_bits(a), f32::from_bits(b))).to_bits(),
                    Class::Int => {
                        self.eval_int_slice::<i32>(false, &[a as i32], &[b as i32], bytemuck::cast_slice_mut(&mut out))
                    }
                    Class::Uint => self.eval_int_slice::<u32>(false, &[a], &[b], &mut out),
                    Class::Bool => self.eval_int_slice::<u32>(true, &[a], &[b], &mut out),
                }
                out[0]
            }
        }
    };
}

/// The transcendental functions the float rows of the op table are written with, so that a backend evaluates
/// the same rows with its own versions (the CPU backend's vectorize); [`Libm`]'s are the definition.
pub trait Math {
    fn exp(x: f32) -> f32;
    fn tanh(x: f32) -> f32;
}

/// Rust's standard library (the platform's libm): the functions of the reference interpreter.
pub struct Libm;

impl Math for Libm {
    #[inline]
    fn exp(x: f32) -> f32 {
        x.exp()
    }
    #[inline]
    fn tanh(x: f32) -> f32 {
        x.tanh()
    }
}

/// Integer lanes as raw `u32` bits, for the bool column (0/1 lanes of either integer type).
pub trait IntBits: Copy {
    /// The lane's bits.
    fn to_u32(self) -> u32;
    /// A lane of these bits.
    fn from_u32(v: u32) -> Self;
}

impl IntBits for i32 {
    #[inline]
    fn to_u32(self) -> u32 {
        self as u32
    }
    #[inline]
    fn from_u32(v: u32) -> i32 {
        v as i32
    }
}

impl IntBits for u32 {
    #[inline]
    fn to_u32(self) -> u32 {
        self
    }
    #[inline]
    fn from_u32(v: u32) -> u32 {
        v
    }
}

op_table! {
    unary {
        Neg "neg"
            @float "-{a}" needs [] |x| -x;
            @int "{ty}(0) - {a}" |x| T::from_u32(0u32.wrapping_sub(x.to_u32()));
        Exp "exp" @float "exp({a})" needs [] |x| M::exp(x);
        Ln "ln" @float "log({a})" needs [] |x| x.ln();
        Sqrt "sqrt" @float "sqrt({a})" needs [] |x| x.sqrt();
        // `inverseSqrt` is undefined at 0 and below; this keeps 1/sqrt(0) = inf and NaN for negatives.
        Rsqrt "rsqrt" @float "1.0 / sqrt({a})" needs [] |x| 1.0 / x.sqrt();
        Abs "abs" @float "abs({a})" needs [] |x| x.abs(); @int "abs({a})" |x| x.abs_w();
        // Not `select(a, 0, a < 0)`: NVIDIA's compiler turns that into a max that drops NaN.
        Relu "relu"
            @float "select(max({a}, {ty}(0.0)), {a}, lz_isnan{v}({a}))" needs [IsNan] |x| if x < 0.0 { 0.0 } else { x };
            @int "max({a}, {ty}(0))" |x| x.relu_w();
        Sigmoid "sigmoid" @float "1.0 / (1.0 + exp(-{a}))" needs [] |x| 1.0 / (1.0 + M::exp(-x));
        Tanh "tanh" @float "tanh({a})" needs [] |x| M::tanh(x);
        Sin "sin" @float "sin({a})" needs [] |x| x.sin();
        Cos "cos" @float "cos({a})" needs [] |x| x.cos();
        Recip "recip" @float "1.0 / {a}" needs [] |x| 1.0 / x;
        Square "square"
            @float "{a} * {a}" needs [] |x| x * x;
            @int "{a} * {a}" |x| T::from_u32(x.to_u32().wrapping_mul(x.to_u32()));
        Gelu "gelu" @float "{a} / (1.0 + exp(-{a} * (1.5957692 + 0.07135482 * {a} * {a})))"
            needs [] |x| x / (1.0 + M::exp(-x * (GELU_2C + GELU_2CK * x * x)));
        Silu "silu" @float "{a} / (1.0 + exp(-{a}))" needs [] |x| x / (1.0 + M::exp(-x));
        // Not `log(1 + x)` or `exp(x) - 1`, which lose every digit near 0, nor the compensated `u = 1 + x;
        // log(u) * x / (u - 1)`: WGSL's `log` promises only an absolute error near 1 (on lavapipe that form gives
        // -1.03e-7 for log1p(-5.96e-8), fused or not), and `(1 + x) - 1` is algebra a compiler may fold to `x`.
        // The helpers reduce by bits and sum their own series, within 2 ulp of libm (which the rows call).
        Log1p "log1p" @float "lz_log1p{v}({a})" needs [IsNan, Log1p] |x| x.ln_1p();
        Expm1 "expm1" @float "lz_expm1{v}({a})" needs [IsNan, Expm1] |x| x.exp_m1();
        Erf "erf" @float "lz_erf{v}({a})" needs [IsNan, Erf] |x| erf::<M>(x);
        /// Integers are whole already: floor, ceil and rounding leave them as they are.
        Floor "floor" @float "floor({a})" needs [] |x| x.floor(); @int "{a}" |x| x;
        Ceil "ceil" @float "ceil({a})" needs [] |x| x.ceil(); @int "{a}" |x| x;
        /// Half-way values to the even neighbour (WGSL's `round`, `torch.round`), not away from 0 as `f32::round`.
        Round "round" @float "round({a})" needs [] |x| x.round_ties_even(); @int "{a}" |x| x;
        /// -1, 0 or +1; ±0 and NaN stay as they are (unlike `f32::signum`, which gives ±1 for ±0).
        Sign "sign" @float "lz_sign{v}({a})" needs [Sign]
            |x| if x == 0.0 || x.is_nan() { x } else { 1.0f32.copysign(x) };
            @int "{ty}({a} > {ty}(0)) - {ty}({a} < {ty}(0))"
            |x| T::from_u32(((x > T::from_u32(0)) as u32).wrapping_sub((x < T::from_u32(0)) as u32));
        /// Logical not of bools, bitwise not of integers.
        Not "not" @int "~{a}" |x| T::from_u32(!x.to_u32()); @bool "{a} ^ {ty}(1u)" |x| x ^ 1;
    }
    binary {
        // Integer add, sub and mul wrap; on two's complement bits they are the same for i32 and u32.
        Add "add" @float "{a} + {b}" needs [] |a, b| a + b;
            @int "{a} + {b}" |a, b| T::from_u32(a.to_u32().wrapping_add(b.to_u32()));
        Sub "sub" @float "{a} - {b}" needs [] |a, b| a - b;
            @int "{a} - {b}" |a, b| T::from_u32(a.to_u32().wrapping_sub(b.to_u32()));
        Mul "mul" @float "{a} * {b}" needs [] |a, b| a * b;
            @int "{a} * {b}" |a, b| T::from_u32(a.to_u32().wrapping_mul(b.to_u32()));
        /// Integers: truncating toward zero, `a / 0 = a` and `i32::MIN / -1 = i32::MIN` (WGSL's definition).
        Div "div" @float "{a} / {b}" needs [] |a, b| a / b; @int "{a} / {b}" |a, b| a.div_w(b);
        /// Integers only: the remainder of truncating division (sign of `a`), `a % 0 = 0`.
        Rem "rem" @int "{a} % {b}" |a, b| a.rem_w(b);
        /// NaN-propagating maximum (as `numpy.maximum`).
        Max "maximum" @float "lz_max{v}({a}, {b})" needs [IsNan, Max]
            |a, b| if a.is_nan() || b.is_nan() { f32::NAN } else { a.max(b) };
            @int "max({a}, {b})" |a, b| a.max(b); @bool "max({a}, {b})" |a, b| a.max(b);
        /// NaN-propagating minimum (as `numpy.minimum`).
        Min "minimum" @float "lz_min{v}({a}, {b})" needs [IsNan, Min]
            |a, b| if a.is_nan() || b.is_nan() { f32::NAN } else { a.min(b) };
            @int "min({a}, {b})" |a, b| a.min(b); @bool "min({a}, {b})" |a, b| a.min(b);
        /// `a.powf(b)`, with Rust's rules for negative bases and integer exponents.
        Pow "pow" @float "lz_pow{v}({a}, {b})" needs [IsNan, Pow] |a, b| a.powf(b);
        /// Bitwise (logical on bools).
        And "bitand" @int "{a} & {b}" |a, b| T::from_u32(a.to_u32() & b.to_u32()); @bool "{a} & {b}" |a, b| a & b;
        /// Bitwise (logical on bools).
        Or "bitor" @int "{a} | {b}" |a, b| T::from_u32(a.to_u32() | b.to_u32()); @bool "{a} | {b}" |a, b| a | b;
        /// Bitwise (logical on bools).
        Xor "bitxor" @int "{a} ^ {b}" |a, b| T::from_u32(a.to_u32() ^ b.to_u32()); @bool "{a} ^ {b}" |a, b| a ^ b;
    }
    compare {
        // IEEE: every comparison with NaN is false except `!=`.
        Lt "lt" "{a} < {b}" |a, b| a < b;
        Le "le" "{a} <= {b}" |a, b| a <= b;
        Gt "gt" "{a} > {b}" |a, b| a > b;
        Ge "ge" "{a} >= {b}" |a, b| a >= b;
        Eq "eq" "{a} == {b}" |a, b| a == b;
        Ne "ne" "{a} != {b}" |a, b| a != b;
    }
}

/// Which triangle of each batch matrix a product keeps (the third operand of a matmul node), so that causal
/// attention's products skip the blocks its mask zeroes instead of computing them and throwing them away. With row
/// `i` and column `j` of the output and step `p` of k:
/// - `Full`: `sum_p a[i, p] * b[p, j]`, the plain product;
/// - `OutLower` / `OutUpper`: that sum where `j <= i` (`j >= i`), 0 elsewhere;
/// - `Causal`: that sum where `j <= i`, -inf elsewhere (a causal mask's scores, which a softmax takes as they are);
/// - `ALower` / `AUpper`: `sum_p a[i, p] * b[p, j]` over the steps `p <= i` (`p >= i`) alone, as if `a` were 0
///   past its diagonal.
///
/// The set is closed under differentiation (each mode's operand gradients are products of these modes), so a
/// backward pass keeps the skipping. Where a dropped element of A meets a NaN or infinity in B, the sums above
/// leave it out but a kernel that drops whole blocks and zeroes A inside the diagonal block may not (it computes
/// `0 * NaN` there, as fused attention kernels do): only finite operands are compared with the reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Tri {
    #[default]
    Full,
    OutLower,
    OutUpper,
    Causal,
    ALower,
    AUpper,
}

impl Tri {
    /// Whether output `(i, j)` is computed (otherwise it is 0).
    pub fn keeps_out(self, i: usize, j: usize) -> bool {
        match self {
            Tri::OutLower | Tri::Causal => j <= i,
            Tri::OutUpper => j >= i,
            _ => true,
        }
    }

    /// The multiply-adds an `m x k x n` product keeping this triangle counts: every one for the full product, the
    /// kept outputs' or kept elements of A's for the others (what a profile's rate is worked out from).
    pub fn products(self, m: usize, k: usize, n: usize) -> u64 {
        let rows = |kept: &dyn Fn(usize) -> usize| (0..m).map(|i| kept(i) as u64).sum::<u64>();
        match self {
            Tri::Full => (m * k * n) as u64,
            Tri::OutLower | Tri::Causal => rows(&|i| (i + 1).min(n)) * k as u64,
            Tri::OutUpper => rows(&|i| n - i.min(n)) * k as u64,
            Tri::ALower => rows(&|i| (i + 1).min(k)) * n as u64,
            Tri::AUpper => rows(&|i| k - i.min(k)) * n as u64,
        }
    }

    /// What a dropped output holds: -inf for [`Tri::Causal`], else 0.
    pub fn fill(self) -> f32 {
        if self == Tri::Causal {
            f32::NEG_INFINITY
        } else {
            0.0
        }
    }

    /// Whether `a[i, p]` takes part in the product (otherwise it counts as 0).
    pub fn keeps_a(self, i: usize, p: usize) -> bool {
        match self {
            Tri::ALower => p <= i,
            Tri::AUpper => p >= i,
            _ => true,
        }
    }

    /// Its number in kernels' constants: 0 for none, 1 for the lower triangle, 2 for the upper, on the output (3
    /// for the lower one filled with -inf) and on A (`(out, a)`).
    pub fn codes(self) -> (u32, u32) {
        match self {
            Tri::Full => (0, 0),
            Tri::OutLower => (1, 0),
            Tri::OutUpper => (2, 0),
            Tri::Causal => (3, 0),
            Tri::ALower => (0, 1),
            Tri::AUpper => (0, 2),
        }
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
    /// Every fold, for tests that sweep the op set.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];

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

    /// The identity as a lane of dtype `dt`: the extreme values of integers for max and min.
    pub fn identity_lane(self, dt: DType) -> u32 {
        match (dt.class(), self) {
            (Class::Float, _) => self.identity().to_bits(),
            (_, ReduceOp::Sum) => 0,
            (_, ReduceOp::Prod) => 1,
            (Class::Int, ReduceOp::Max) => i32::MIN as u32,
            (Class::Int, ReduceOp::Min) => i32::MAX as u32,
            (_, ReduceOp::Max) => 0,
            (Class::Bool, ReduceOp::Min) => 1,
            (_, ReduceOp::Min) => u32::MAX,
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
        assert_eq!(UnaryOp::Round.eval(2.5), 2.0);
        assert_eq!(UnaryOp::Round.eval(-0.5), -0.0);
        assert!(UnaryOp::Sign.eval(f32::NAN).is_nan());
        assert!(UnaryOp::Sign.eval(-0.0).is_sign_negative());
        assert_eq!(UnaryOp::Sign.eval(-1e-40), -1.0);
        assert_eq!(UnaryOp::Log1p.eval(1e-30), 1e-30);
        assert_eq!(UnaryOp::Expm1.eval(-1e-30), -1e-30);
    }

    #[test]
    fn erf_is_within_2_ulp_of_the_true_values() {
        // erf of these f32 values, from mpmath at 30 digits.
        let known: [(f32, f64); 15] = [
            (1e-30, 1.128_379_170_673_689_6e-30),
            (1e-8, 1.128_379_160_237_820_9e-08),
            (0.001, 0.001_128_378_844_564_317_3),
            (-0.1, -0.112_462_917_682_970_51),
            (0.5, 0.520_499_877_813_046_5),
            (0.921_875, 0.807_673_704_510_655_7),
            (0.93, 0.811_563_561_983_119_1),
            (-1.0, -0.842_700_792_949_714_9),
            (1.5, 0.966_105_146_475_310_8),
            (2.0, 0.995_322_265_018_952_7),
            (-2.5, -0.999_593_047_982_555),
            (3.0, 0.999_977_909_503_001_4),
            (3.5, 0.999_999_256_901_627_6),
            (3.9, 0.999_999_965_207_778_1),
            (4.5, 0.999_999_999_803_383_9),
        ];
        for (x, want) in known {
            let got = UnaryOp::Erf.eval(x) as f64;
            assert!((got - want).abs() <= 2.0 * f32::EPSILON as f64 * want.abs(), "erf({x}) = {got}, want {want}");
        }
        assert_eq!(UnaryOp::Erf.eval(f32::INFINITY), 1.0);
        assert_eq!(UnaryOp::Erf.eval(f32::NEG_INFINITY), -1.0);
        assert!(UnaryOp::Erf.eval(f32::NAN).is_nan());
        assert!(UnaryOp::Erf.eval(-0.0).is_sign_negative());
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
