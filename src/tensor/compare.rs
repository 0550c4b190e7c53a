//! Casts, comparisons and selection: `to_dtype`, `lt` ... `ne` giving bool tensors, and `where_cond`.

use crate::dtype::{DType, Scalar};
use crate::error::ok;
use crate::error::{Error, Result};
use crate::graph::NodeOp;
use crate::op::BinaryOp;
use crate::tensor::Tensor;

/// The right-hand side of a comparison or a branch of [`Tensor::where_cond`]: a tensor (by value or reference) or
/// a Rust `f32`, `i32` or `u32`, which takes the other side's type as in arithmetic.
pub trait Operand {
    /// This operand as a tensor on `like`'s device, typed against `like`.
    #[doc(hidden)]
    fn to_tensor(&self, like: &Tensor) -> Tensor;
}

impl Operand for Tensor {
    fn to_tensor(&self, _like: &Tensor) -> Tensor {
        self.clone()
    }
}

impl Operand for &Tensor {
    fn to_tensor(&self, _like: &Tensor) -> Tensor {
        (*self).clone()
    }
}

macro_rules! scalar_operand {
    ($($t:ty)*) => {$(
        impl Operand for $t {
            fn to_tensor(&self, like: &Tensor) -> Tensor {
                like.constant(Scalar::from(*self))
            }
        }
    )*};
}

scalar_operand!(f32 i32 u32);

/// Generates each comparison and its fallible twin.
macro_rules! comparisons {
    ($($(#[$doc:meta])* $name:ident $try_name:ident $op:ident;)*) => {
        impl Tensor {$(
            $(#[$doc])*
            ///
            /// A bool tensor, broadcast; both sides are compared in their common type. Every comparison with NaN
            /// is false except `ne`.
            ///
            /// # Panics
            /// If the shapes cannot broadcast, the types have no common type (i32 with u32), or the tensors live
            /// on different devices; the `try_` form returns the error.
            #[track_caller]
            pub fn $name(&self, rhs: impl Operand) -> Tensor {
                ok(self.$try_name(rhs))
            }

            /// The fallible twin of the comparison of the same name.
            ///
            /// # Errors
            /// [`Error::Broadcast`], [`Error::DType`] or [`Error::DeviceMismatch`].
            pub fn $try_name(&self, rhs: impl Operand) -> Result<Tensor> {
                self.try_binary(BinaryOp::$op, &rhs.to_tensor(self))
            }
        )*}
    };
}

comparisons! {
    /// `self < rhs`, elementwise.
    lt try_lt Lt;
    /// `self <= rhs`, elementwise.
    le try_le Le;
    /// `self > rhs`, elementwise.
    gt try_gt Gt;
    /// `self >= rhs`, elementwise.
    ge try_ge Ge;
    /// `self == rhs`, elementwise.
    eq try_eq Eq;
    /// `self != rhs`, elementwise.
    ne try_ne Ne;
}

impl Tensor {
    /// The values converted to `dtype`, with Rust's `as` rules: float to integer truncates toward zero and
    /// saturates (NaN to 0); i32 and u32 keep their bits; a number to bool is `!= 0` (NaN is true); bool to a
    /// number is 0 or 1; to f16 and bf16 rounds to nearest, ties to even. Lazy, and fuses like any elementwise op;
    /// the same tensor when it already has that type.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![-1.7, 2.5, f32::NAN], [3]);
    /// assert_eq!(x.to_dtype(DType::I32).to_vec_as::<i32>(), vec![-1, 2, 0]);
    /// ```
    pub fn to_dtype(&self, dtype: DType) -> Tensor {
        self.cast_to(dtype)
    }

    /// Per element, `on_true` where this bool mask is true, else `on_false`; all three broadcast. The branches
    /// take their common type (a Rust scalar takes the other branch's).
    ///
    /// # Panics
    /// If the mask is not bool, the shapes cannot broadcast, the branches have no common type, or the tensors live
    /// on different devices; [`Tensor::try_where_cond`] returns the error.
    ///
    /// # Examples
    /// ```no_run
    /// let x = lazor::Tensor::from_vec(vec![-1.0, 2.0], [2]);
    /// assert_eq!(x.gt(0.0).where_cond(&x, 0.0).to_vec(), vec![0.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn where_cond(&self, on_true: impl Operand, on_false: impl Operand) -> Tensor {
        ok(self.try_where_cond(on_true, on_false))
    }

    /// [`Tensor::where_cond`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::DType`], [`Error::Broadcast`] or [`Error::DeviceMismatch`].
    pub fn try_where_cond(&self, on_true: impl Operand, on_false: impl Operand) -> Result<Tensor> {
        let op = "where_cond";
        if self.dtype != DType::Bool {
            return Err(Error::DType {
                op,
                message: format!("the mask is {}, not bool; compare it (`.ne(0)`) or cast it first", self.dtype),
            });
        }
        // A scalar branch takes the type of a tensor branch; two tensors promote.
        let (t, f) = (on_true.to_tensor(self), on_false.to_tensor(self));
        let (t, f) = (on_true.to_tensor(&f), on_false.to_tensor(&t));
        self.device.check_same(&t.device, op)?;
        self.device.check_same(&f.device, op)?;
        let dt = t.dtype.promote(f.dtype).ok_or_else(|| Error::DType {
            op,
            message: format!("branches {} and {} have no common type; cast one with to_dtype", t.dtype, f.dtype),
        })?;
        let broadcast = |a: &Tensor, b: &Tensor| {
            a.shape.broadcast(&b.shape).ok_or_else(|| Error::Broadcast {
                op,
                lhs: a.shape.clone(),
                rhs: b.shape.clone(),
            })
        };
        let shape = broadcast(self, &t)?;
        let shape =
            shape.broadcast(&f.shape).ok_or_else(|| Error::Broadcast { op, lhs: shape, rhs: f.shape.clone() })?;
        let (t, f) = (t.as_dtype(dt), f.as_dtype(dt));
        let out = Tensor::from_op(&self.device, NodeOp::Where(self.id, t.id, f.id), shape, dt);
        Ok(crate::autograd::record(out, &[self, &t, &f], |_| crate::autograd::Rule::Where {
            mask: self.detach(),
            t: t.shape.clone(),
            f: f.shape.clone(),
        }))
    }
}
