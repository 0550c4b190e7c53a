//! Autocast: a thread-local half-precision region in which products run in f16 or bf16 and precision-hungry ops in
//! f32, as PyTorch's CUDA autocast. The ops consult it through the hooks here; the casts they add are graph ops.
//!
//! Inside [`autocast`], two lists of ops change their types, and nothing else does:
//! - the products, [`Tensor::matmul`], [`crate::nn::functional::linear`], [`Tensor::conv2d`] and
//!   [`crate::nn::functional::scaled_dot_product_attention`] (and the layers built on them), cast their float
//!   operands to the region's type ([`cast_half`]) and give it;
//! - the ops that lose too much in half precision (softmax and its kin, layer norm, the losses, sums, means and
//!   variances, `exp`, `ln`, `pow`, `rsqrt`, `cumsum`) widen half operands to f32 ([`Tensor::autocast_f32`]) and
//!   give f32.
//!
//! A product's body, and the backward pass, run with autocast off ([`suspended`]): the folds and sums inside a
//! product (a split-k sum) keep its type, and gradients keep the types of the values they belong to. A cast is a
//! recorded op whose gradient casts back, so an f32 `Var` read by a bf16 product gets an f32 gradient.

use crate::dtype::DType;
use crate::error::{ok, Error, Result};
use crate::tensor::Tensor;
use std::cell::Cell;

thread_local! {
    /// The type of the innermost autocast region on this thread; `None` outside any (or where it is suspended).
    static REGION: Cell<Option<DType>> = const { Cell::new(None) };
}

/// Runs `f` with autocast to `dtype` (`DType::F16` or `DType::BF16`) on this thread and returns its value, as
/// `torch.autocast(device_type, dtype)`: inside, matrix products (`matmul`, `linear`, `conv2d`,
/// `scaled_dot_product_attention` and the layers built on them) compute in `dtype` and return it, whatever float
/// types their operands have, while `softmax`, `log_softmax`, `logsumexp`, `layer_norm`, the losses
/// (`cross_entropy`, `nll_loss`, `mse_loss`, `binary_cross_entropy_with_logits`), `sum`, `mean` and `var` of half
/// inputs, `exp`, `ln`, `pow`, `rsqrt` and `cumsum` compute in f32 and return f32; every other op follows the
/// ordinary promotion rules. Regions nest (the innermost wins) and end when `f` returns or panics. Parameters stay
/// in their own type (f32 master weights): their casts are graph ops, fused into the kernels that read them, and
/// gradients cast back, so an f32 `Var` gets an f32 gradient. Call `backward` and the optimizer's step inside or
/// outside: both run with autocast off.
///
/// # Panics
/// At the caller when `dtype` is not a half type; [`try_autocast`] returns the error instead.
///
/// # Examples
/// ```no_run
/// use lazor::nn::{self, Module};
/// use lazor::{DType, Tensor};
/// let fc = nn::Linear::new(4, 3, true, 0);
/// let x = Tensor::rand([2, 4], 1);
/// let (y, p) = lazor::autocast(DType::BF16, || {
///     let y = fc.forward(&x); // bf16, from f32 weights
///     (y.clone(), y.softmax(-1)) // the softmax in f32
/// });
/// assert_eq!((y.dtype(), p.dtype()), (DType::BF16, DType::F32));
/// assert_eq!(fc.weight.dtype(), DType::F32);
/// ```
#[track_caller]
pub fn autocast<R>(dtype: DType, f: impl FnOnce() -> R) -> R {
    ok(try_autocast(dtype, f))
}

/// [`autocast`], returning an error instead of panicking; `f` does not run on an error.
///
/// # Errors
/// [`Error::DType`] when `dtype` is not `DType::F16` or `DType::BF16`.
pub fn try_autocast<R>(dtype: DType, f: impl FnOnce() -> R) -> Result<R> {
    if !matches!(dtype, DType::F16 | DType::BF16) {
        return Err(Error::DType {
            op: "autocast",
            message: format!("autocast takes f16 or bf16, not {dtype} (outside autocast, ops compute in f32)"),
        });
    }
    Ok(within(Some(dtype), f))
}

/// The type of the autocast region this thread is in, `None` outside any.
///
/// # Examples
/// ```no_run
/// use lazor::DType;
/// assert_eq!(lazor::autocast_dtype(), None);
/// lazor::autocast(DType::F16, || assert_eq!(lazor::autocast_dtype(), Some(DType::F16)));
/// ```
pub fn autocast_dtype() -> Option<DType> {
    REGION.with(Cell::get)
}

/// Runs `f` with autocast off on this thread: the bodies of the products, the backward pass, optimizer steps.
pub(crate) fn suspended<R>(f: impl FnOnce() -> R) -> R {
    within(None, f)
}

/// Runs `f` in the region `region`, restoring the enclosing one afterwards, also when `f` panics.
fn within<R>(region: Option<DType>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<DType>);
    impl Drop for Restore {
        fn drop(&mut self) {
            REGION.with(|r| r.set(self.0));
        }
    }
    let _restore = Restore(REGION.with(|r| r.replace(region)));
    f()
}

/// `t` as `dtype` where it is a float of another type: how a product's operands enter a half region (integers and
/// bools are left to the op's own rules).
pub(crate) fn cast_half(t: &Tensor, dtype: DType) -> Tensor {
    if t.dtype.is_float() {
        t.cast_to(dtype)
    } else {
        t.clone()
    }
}

impl Tensor {
    /// Inside autocast, this half tensor widened to f32 (a recorded cast), for the ops that compute in f32 there;
    /// `None` outside autocast or for a tensor that is not f16 or bf16.
    pub(crate) fn autocast_f32(&self) -> Option<Tensor> {
        let half = matches!(self.dtype, DType::F16 | DType::BF16);
        (half && autocast_dtype().is_some()).then(|| self.cast_to(DType::F32))
    }

    /// Inside autocast, both operands of a binary f32-list op (`pow`, a loss) with the half ones widened; `None`
    /// when neither changes.
    pub(crate) fn autocast_f32_pair(&self, rhs: &Tensor) -> Option<(Tensor, Tensor)> {
        match (self.autocast_f32(), rhs.autocast_f32()) {
            (None, None) => None,
            (a, b) => Some((a.unwrap_or_else(|| self.clone()), b.unwrap_or_else(|| rhs.clone()))),
        }
    }
}

/// Inside autocast, `operands` cast to the region's type ([`cast_half`]), for a product to run on with autocast
/// [`suspended`]; `None` outside autocast. What the products call first.
pub(crate) fn half_operands<const N: usize>(operands: [&Tensor; N]) -> Option<[Tensor; N]> {
    let dtype = autocast_dtype()?;
    Some(operands.map(|t| cast_half(t, dtype)))
}
