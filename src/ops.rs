//! The user-facing math: operator overloads (one macro for all of them) and the elementwise methods.

use crate::error::{Error, Result};
use crate::graph::Op;
use crate::op::{BinaryOp, UnaryOp};
use crate::tensor::Tensor;
use std::borrow::Borrow;
use std::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};

impl Tensor {
    /// A scalar constant on this tensor's device, to broadcast against it.
    fn constant(&self, value: f32) -> Tensor {
        Tensor::full_on([], value, &self.device)
    }

    /// `op(self, rhs)` with broadcasting; the shape rule lives here and nowhere else.
    pub(crate) fn try_binary(&self, op: BinaryOp, rhs: &Tensor) -> Result<Tensor> {
        self.device.check_same(&rhs.device, op.name())?;
        let shape = self.shape.broadcast(&rhs.shape).ok_or_else(|| Error::Broadcast {
            op: op.name(),
            lhs: self.shape.clone(),
            rhs: rhs.shape.clone(),
        })?;
        Ok(Tensor::from_op(&self.device, Op::Binary(op, self.id, rhs.id), shape))
    }

    #[track_caller]
    pub(crate) fn binary(&self, op: BinaryOp, rhs: &Tensor) -> Tensor {
        match self.try_binary(op, rhs) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        }
    }

    fn unary(&self, op: UnaryOp) -> Tensor {
        Tensor::from_op(&self.device, Op::Unary(op, self.id), self.shape.clone())
    }
}

/// Generates, for each operator, every pairing of `Tensor`, `&Tensor` and `f32`, and the assigning forms.
/// No closures in the bodies: they would hide the caller's line from `#[track_caller]`.
macro_rules! binary_operators {
    ($($Trait:ident $method:ident $Assign:ident $assign:ident $op:ident;)*) => {$(
        binary_operators!(@tensors $Trait $method $op, Tensor, Tensor);
        binary_operators!(@tensors $Trait $method $op, Tensor, &Tensor);
        binary_operators!(@tensors $Trait $method $op, &Tensor, Tensor);
        binary_operators!(@tensors $Trait $method $op, &Tensor, &Tensor);
        binary_operators!(@scalar_right $Trait $method $op, Tensor);
        binary_operators!(@scalar_right $Trait $method $op, &Tensor);
        binary_operators!(@scalar_left $Trait $method $op, Tensor);
        binary_operators!(@scalar_left $Trait $method $op, &Tensor);
        binary_operators!(@assign $Assign $assign $op, Tensor);
        binary_operators!(@assign $Assign $assign $op, &Tensor);
        impl $Assign<f32> for Tensor {
            #[track_caller]
            fn $assign(&mut self, rhs: f32) {
                *self = self.binary(BinaryOp::$op, &self.constant(rhs));
            }
        }
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
    (@scalar_right $Trait:ident $method:ident $op:ident, $Lhs:ty) => {
        impl $Trait<f32> for $Lhs {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: f32) -> Tensor {
                let lhs: &Tensor = self.borrow();
                lhs.binary(BinaryOp::$op, &lhs.constant(rhs))
            }
        }
    };
    (@scalar_left $Trait:ident $method:ident $op:ident, $Rhs:ty) => {
        impl $Trait<$Rhs> for f32 {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: $Rhs) -> Tensor {
                let rhs: &Tensor = rhs.borrow();
                rhs.constant(self).binary(BinaryOp::$op, rhs)
            }
        }
    };
    (@assign $Assign:ident $assign:ident $op:ident, $Rhs:ty) => {
        impl $Assign<$Rhs> for Tensor {
            #[track_caller]
            fn $assign(&mut self, rhs: $Rhs) {
                *self = self.binary(BinaryOp::$op, rhs.borrow());
            }
        }
    };
}

binary_operators! {
    Add add AddAssign add_assign Add;
    Sub sub SubAssign sub_assign Sub;
    Mul mul MulAssign mul_assign Mul;
    Div div DivAssign div_assign Div;
}

impl Neg for Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        self.unary(UnaryOp::Neg)
    }
}

impl Neg for &Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        self.unary(UnaryOp::Neg)
    }
}

/// Generates the elementwise methods of one operand.
macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {$(
            $(#[$doc])*
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
}

/// Generates the fallible binary methods (`try_add`, ...).
macro_rules! try_binary_methods {
    ($($(#[$doc:meta])* $try_name:ident => $op:ident;)*) => {
        impl Tensor {$(
            $(#[$doc])*
            ///
            /// # Errors
            /// [`Error::Broadcast`] when the shapes cannot broadcast, [`Error::DeviceMismatch`] across devices.
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

    /// `x^exponent`, with `f32::powf`'s rules (a negative base needs an integer exponent).
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
        self.binary(BinaryOp::Max, &self.constant(min)).binary(BinaryOp::Min, &self.constant(max))
    }
}
