//! The user-facing math: operator overloads (one macro for all of them), the elementwise methods, and the rules
//! that pick the type each op computes in.

use crate::autograd::{record, Rule};
use crate::dtype::{Class, DType, Scalar};
use crate::error::ok;
use crate::error::{Error, Result};
use crate::graph::NodeOp;
use crate::op::{BinaryOp, UnaryOp};
use crate::tensor::Tensor;
use std::borrow::Borrow;
use std::ops::{Add, AddAssign, BitAnd, BitOr, BitXor, Div, DivAssign, Mul, MulAssign, Neg, Not, Rem, Sub, SubAssign};

impl Tensor {
    /// The Rust number `value` as a tensor of shape `[]` on this tensor's device, of the type it computes in with
    /// this tensor ([`Scalar::with`]).
    pub(crate) fn constant(&self, value: impl Into<Scalar>) -> Tensor {
        let v = value.into();
        let dt = v.with(self.dtype);
        Tensor::full_lane([], dt.lane_of(v), dt, &self.device)
    }

    /// This tensor as `dt`: itself when it already is, else a cast node (which fuses into its consumers).
    pub(crate) fn cast_to(&self, dt: DType) -> Tensor {
        self.as_dtype(dt).into_owned()
    }

    /// [`Tensor::cast_to`], borrowing `self` where no cast is needed: a handle cloned and dropped again costs
    /// two trips through the device's graph, for each operand of every op.
    pub(crate) fn as_dtype(&self, dt: DType) -> std::borrow::Cow<'_, Tensor> {
        if self.dtype == dt {
            return std::borrow::Cow::Borrowed(self);
        }
        std::borrow::Cow::Owned(self.cast(dt))
    }

    fn cast(&self, dt: DType) -> Tensor {
        let out = Tensor::from_op(&self.device, NodeOp::Cast(self.id), self.shape.clone(), dt);
        record(out, &[self], |_| Rule::Cast { from: self.dtype })
    }

    /// `op(self, rhs)` with broadcasting and type promotion; the shape and type rules live here and nowhere else.
    pub(crate) fn try_binary(&self, op: BinaryOp, rhs: &Tensor) -> Result<Tensor> {
        if op == BinaryOp::Pow {
            if let Some((a, b)) = self.autocast_f32_pair(rhs) {
                return a.try_binary(op, &b);
            }
        }
        self.device.check_same(&rhs.device, op.name())?;
        let shape = self.shape.broadcast(&rhs.shape).ok_or_else(|| Error::Broadcast {
            op: op.name(),
            lhs: self.shape.clone(),
            rhs: rhs.shape.clone(),
        })?;
        let mut dt = self.dtype.promote(rhs.dtype).ok_or_else(|| Error::DType {
            op: op.name(),
            message: format!("{} and {} have no common type; cast one with to_dtype", self.dtype, rhs.dtype),
        })?;
        // Float-only math on integers computes in f32, as PyTorch's true division and pow do.
        if !op.supports(dt.class()) && op.supports(Class::Float) && dt.class() != Class::Bool {
            dt = DType::F32;
        }
        if !op.supports(dt.class()) {
            return Err(Error::DType { op: op.name(), message: format!("not defined on {dt} tensors") });
        }
        let out = if op.is_compare() { DType::Bool } else { dt };
        let (a, b) = (self.as_dtype(dt), rhs.as_dtype(dt));
        let out = Tensor::from_op(&self.device, NodeOp::Binary(op, a.id, b.id), shape, out);
        Ok(record(out, &[&a, &b], |y| Rule::Binary { op, a: a.saved(), b: b.saved(), y }))
    }

    #[track_caller]
    pub(crate) fn binary(&self, op: BinaryOp, rhs: &Tensor) -> Tensor {
        ok(self.try_binary(op, rhs))
    }

    /// `op(self)`: on its own type where the op is defined there, else in f32 (float math on integers and bools).
    pub(crate) fn try_unary(&self, op: UnaryOp) -> Result<Tensor> {
        if matches!(op, UnaryOp::Exp | UnaryOp::Ln | UnaryOp::Rsqrt) {
            if let Some(x) = self.autocast_f32() {
                return x.try_unary(op);
            }
        }
        let class = self.dtype.class();
        let dt = if op.supports(class) {
            self.dtype
        } else if op.supports(Class::Float) {
            DType::F32
        } else {
            return Err(Error::DType { op: op.name(), message: format!("not defined on {} tensors", self.dtype) });
        };
        let x = self.as_dtype(dt);
        let out = Tensor::from_op(&self.device, NodeOp::Unary(op, x.id), self.shape.clone(), dt);
        Ok(record(out, &[&x], |y| Rule::Unary { op, x: x.saved(), y }))
    }

    #[track_caller]
    fn unary(&self, op: UnaryOp) -> Tensor {
        ok(self.try_unary(op))
    }
}

/// Generates, for each operator, every pairing of `Tensor`, `&Tensor` and the Rust scalars `f32`, `i32` and
/// `u32` (either side), and the assigning forms. No closures in the bodies: they would hide the caller's line from
/// `#[track_caller]`.
macro_rules! binary_operators {
    ($($Trait:ident $method:ident $op:ident;)*) => {$(
        binary_operators!(@tensors $Trait $method $op, Tensor, Tensor);
        binary_operators!(@tensors $Trait $method $op, Tensor, &Tensor);
        binary_operators!(@tensors $Trait $method $op, &Tensor, Tensor);
        binary_operators!(@tensors $Trait $method $op, &Tensor, &Tensor);
        binary_operators!(@scalars $Trait $method $op, f32 i32 u32);
    )*};
    (@scalars $Trait:ident $method:ident $op:ident, $($S:ty)*) => {$(
        binary_operators!(@scalar_right $Trait $method $op, Tensor, $S);
        binary_operators!(@scalar_right $Trait $method $op, &Tensor, $S);
        binary_operators!(@scalar_left $Trait $method $op, Tensor, $S);
        binary_operators!(@scalar_left $Trait $method $op, &Tensor, $S);
    )*};
    (@tensors $Trait:ident $method:ident $op:ident, $Lhs:ty, $Rhs:ty) => {
        impl $Trait<$Rhs> for $Lhs {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: $Rhs) -> Tensor {
                Borrow::<Tensor>::borrow(&self).binary(BinaryOp::$op, rhs.borrow())
            }
        }
    };
    (@scalar_right $Trait:ident $method:ident $op:ident, $Lhs:ty, $S:ty) => {
        impl $Trait<$S> for $Lhs {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: $S) -> Tensor {
                let lhs: &Tensor = self.borrow();
                lhs.binary(BinaryOp::$op, &lhs.constant(rhs))
            }
        }
    };
    (@scalar_left $Trait:ident $method:ident $op:ident, $Rhs:ty, $S:ty) => {
        impl $Trait<$Rhs> for $S {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: $Rhs) -> Tensor {
                let rhs: &Tensor = rhs.borrow();
                rhs.constant(self).binary(BinaryOp::$op, rhs)
            }
        }
    };
}

binary_operators! {
    Add add Add;
    Sub sub Sub;
    Mul mul Mul;
    Div div Div;
    Rem rem Rem;
    BitAnd bitand And;
    BitOr bitor Or;
    BitXor bitxor Xor;
}

/// The assigning forms: `t += &u`, `t *= 2.0`, ...
macro_rules! assign_operators {
    ($($Assign:ident $assign:ident $op:ident;)*) => {$(
        impl $Assign<Tensor> for Tensor {
            #[track_caller]
            fn $assign(&mut self, rhs: Tensor) {
                *self = self.binary(BinaryOp::$op, &rhs);
            }
        }
        impl $Assign<&Tensor> for Tensor {
            #[track_caller]
            fn $assign(&mut self, rhs: &Tensor) {
                *self = self.binary(BinaryOp::$op, rhs);
            }
        }
        assign_operators!(@scalar $Assign $assign $op, f32 i32 u32);
    )*};
    (@scalar $Assign:ident $assign:ident $op:ident, $($S:ty)*) => {$(
        impl $Assign<$S> for Tensor {
            #[track_caller]
            fn $assign(&mut self, rhs: $S) {
                *self = self.binary(BinaryOp::$op, &self.constant(rhs));
            }
        }
    )*};
}

assign_operators! {
    AddAssign add_assign Add;
    SubAssign sub_assign Sub;
    MulAssign mul_assign Mul;
    DivAssign div_assign Div;
}

impl Neg for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        self.unary(UnaryOp::Neg)
    }
}

impl Neg for &Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        self.unary(UnaryOp::Neg)
    }
}

/// Logical not of a bool tensor, bitwise not of an integer one.
///
/// # Panics
/// On a float tensor.
impl Not for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn not(self) -> Tensor {
        self.unary(UnaryOp::Not)
    }
}

impl Not for &Tensor {
    type Output = Tensor;
    #[track_caller]
    fn not(self) -> Tensor {
        self.unary(UnaryOp::Not)
    }
}

/// Generates the elementwise methods of one operand.
macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {$(
            $(#[$doc])*
            #[track_caller]
            pub fn $name(&self) -> Tensor {
                self.unary(UnaryOp::$op)
            }
        )*}
    };
}

unary_methods! {
    /// `e^x`.
    exp => Exp;
    /// Natural logarithm.
    ln => Ln;
    /// Square root (NaN below 0).
    sqrt => Sqrt;
    /// `1 / sqrt(x)`.
    rsqrt => Rsqrt;
    /// Absolute value.
    abs => Abs;
    /// `max(x, 0)`, NaN staying NaN.
    relu => Relu;
    /// `1 / (1 + e^-x)`.
    sigmoid => Sigmoid;
    /// Hyperbolic tangent.
    tanh => Tanh;
    /// Sine (radians).
    sin => Sin;
    /// Cosine (radians).
    cos => Cos;
    /// `1 / x`.
    recip => Recip;
    /// `x * x`.
    square => Square;
    /// GELU, tanh approximation: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` (as `jax.nn.gelu`'s default).
    gelu => Gelu;
    /// SiLU (swish): `x / (1 + e^-x)`.
    silu => Silu;
    /// `ln(1 + x)`, accurate for `x` near 0 (as `torch.log1p` and `f32::ln_1p`).
    log1p => Log1p;
    /// `e^x - 1`, accurate for `x` near 0 (as `torch.expm1` and `f32::exp_m1`).
    expm1 => Expm1;
    /// The error function, within about 1e-7 ([`crate::op::erf`]: one formula on every backend).
    erf => Erf;
    /// The largest integer `<= x`; integers stay as they are.
    floor => Floor;
    /// The smallest integer `>= x`; integers stay as they are.
    ceil => Ceil;
    /// The nearest integer, half-way values to the even one (as `torch.round` and `f32::round_ties_even`; not `f32::round`, which rounds half away from 0);
    /// integers stay as they are.
    round => Round;
    /// -1, 0 or 1 by the sign of `x` (`torch.sign`); ±0 and NaN stay as they are (`torch.sign(NaN)` is 0). Not
    /// `f32::signum`, which gives ±1 at ±0.
    sign => Sign;
}

/// Generates the fallible binary methods (`try_add`, ...).
macro_rules! try_binary_methods {
    ($($(#[$doc:meta])* $try_name:ident => $op:ident;)*) => {
        impl Tensor {$(
            $(#[$doc])*
            ///
            /// # Errors
            /// [`Error::Broadcast`] when the shapes cannot broadcast, [`Error::DeviceMismatch`] across devices,
            /// [`Error::DType`] when the types have no common type or the op is not defined on it.
            pub fn $try_name(&self, rhs: &Tensor) -> Result<Tensor> {
                self.try_binary(BinaryOp::$op, rhs)
            }
        )*}
    };
}

try_binary_methods! {
    /// `self + rhs`, broadcast.
    try_add => Add;
    /// `self - rhs`, broadcast.
    try_sub => Sub;
    /// `self * rhs`, broadcast.
    try_mul => Mul;
    /// `self / rhs`, broadcast.
    try_div => Div;
    /// Elementwise maximum, broadcast; NaN if either operand is NaN (as `numpy.maximum`).
    try_maximum => Max;
    /// Elementwise minimum, broadcast; NaN if either operand is NaN (as `numpy.minimum`).
    try_minimum => Min;
    /// `self % rhs` (integers), broadcast.
    try_rem => Rem;
    /// `self^rhs` elementwise, broadcast, with `f32::powf`'s rules; integers compute in f32.
    try_pow => Pow;
}

impl Tensor {
    /// Elementwise maximum, broadcast; NaN if either operand is NaN (as `numpy.maximum`).
    ///
    /// # Panics
    /// If the shapes cannot broadcast or the tensors live on different devices.
    #[track_caller]
    pub fn maximum(&self, rhs: &Tensor) -> Tensor {
        self.binary(BinaryOp::Max, rhs)
    }

    /// Elementwise minimum, broadcast; NaN if either operand is NaN (as `numpy.minimum`).
    ///
    /// # Panics
    /// If the shapes cannot broadcast or the tensors live on different devices.
    #[track_caller]
    pub fn minimum(&self, rhs: &Tensor) -> Tensor {
        self.binary(BinaryOp::Min, rhs)
    }

    /// `-x` (wrapping for integers), as the unary `-` operator; a bool tensor gives f32.
    #[track_caller]
    #[allow(clippy::should_implement_trait)]
    pub fn neg(&self) -> Tensor {
        self.unary(UnaryOp::Neg)
    }

    /// `self^rhs` elementwise, broadcast, with `f32::powf`'s rules (a negative base needs an integer exponent);
    /// integers compute in f32. [`Tensor::powf`] takes a Rust number.
    ///
    /// # Panics
    /// If the shapes cannot broadcast or the tensors live on different devices.
    #[track_caller]
    pub fn pow(&self, rhs: &Tensor) -> Tensor {
        self.binary(BinaryOp::Pow, rhs)
    }

    /// `x^exponent`, with `f32::powf`'s rules (a negative base needs an integer exponent).
    #[track_caller]
    pub fn powf(&self, exponent: f32) -> Tensor {
        self.binary(BinaryOp::Pow, &self.constant(exponent))
    }

    /// Each element limited to `[min, max]`; NaN stays NaN (as `f32::clamp`).
    ///
    /// # Panics
    /// If `min > max` or either is NaN, as `f32::clamp` does.
    #[track_caller]
    pub fn clamp(&self, min: f32, max: f32) -> Tensor {
        assert!(min <= max, "lazor: clamp: min ({min}) must be <= max ({max}) and neither NaN");
        // Built untracked and recorded as one op: a tie on a bound passes the whole gradient, as PyTorch's clamp.
        let x = self.detach();
        let out = x.binary(BinaryOp::Max, &x.constant(min)).binary(BinaryOp::Min, &x.constant(max));
        record(out, &[self], |_| Rule::Clamp { x: self.saved(), min, max })
    }
}
