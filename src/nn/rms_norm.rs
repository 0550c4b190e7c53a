//! `RmsNorm`: root-mean-square normalisation over the last axis with a learned scale, as Llama's `LlamaRMSNorm`
//! and `torch.nn.RMSNorm`.

use super::init;
use super::module::Module;
use crate::autograd::Var;
use crate::device::Device;
use crate::dtype::DType;
use crate::tensor::Tensor;

/// `x / sqrt(mean(x^2) + eps)` over the last axis, times `weight` (`[dim]`) where given, as Hugging Face's
/// `LlamaRMSNorm`: computed in f32 whatever `x`'s float type, rounded back to it, then scaled (in the promoted type
/// of `x` and `weight`). One rows kernel: the mean of squares is a fold of the row.
///
/// # Panics
/// If `x` has no axes, is not a float tensor, or `weight` does not broadcast against the last axis.
///
/// # Examples
/// ```no_run
/// use lazor::{nn::functional::rms_norm, Tensor};
/// let y = rms_norm(&Tensor::from_vec(vec![3.0, 4.0], [1, 2]), None, 0.0);
/// assert!((y.to_vec()[1] - 4.0 / 12.5f32.sqrt()).abs() < 1e-6);
/// ```
#[track_caller]
pub fn rms_norm(x: &Tensor, weight: Option<&Tensor>, eps: f32) -> Tensor {
    assert!(x.ndim() > 0, "lazor: rms_norm: the input must have an axis to normalise, not be a scalar");
    assert!(x.dtype().is_float(), "lazor: rms_norm: the input must be a float tensor, not {}", x.dtype());
    let wide = x.to_dtype(DType::F32);
    let y = (&wide * (wide.square().mean_keepdim(-1) + eps).rsqrt()).to_dtype(x.dtype());
    match weight {
        Some(w) => y * w,
        None => y,
    }
}

/// Root-mean-square normalisation over the last axis, as `LlamaRMSNorm(dim, eps)` and `torch.nn.RMSNorm`: see
/// [`rms_norm`]. `weight` starts at ones. Parameters: `weight`.
///
/// # Examples
/// ```no_run
/// use lazor::nn::{Module, RmsNorm};
/// use lazor::Tensor;
/// let norm = RmsNorm::new(4, 1e-6);
/// assert_eq!(norm.forward(&Tensor::ones([2, 4])).shape(), &[2, 4]);
/// assert_eq!(norm.parameters()[0].0, "weight");
/// ```
pub struct RmsNorm {
    /// The scale, `[dim]`.
    pub weight: Var,
    /// Added to the mean of squares before the square root.
    pub eps: f32,
}

impl RmsNorm {
    /// A norm over a last axis of `dim` values on the default device.
    pub fn new(dim: usize, eps: f32) -> RmsNorm {
        RmsNorm::new_on(dim, eps, &Device::default())
    }

    /// [`RmsNorm::new`] on `device`.
    pub fn new_on(dim: usize, eps: f32, device: &Device) -> RmsNorm {
        RmsNorm { weight: init::constant(&[dim], 1.0, device), eps }
    }
}

impl Module for RmsNorm {
    /// `x` normalised over its last axis and scaled.
    ///
    /// # Panics
    /// As [`rms_norm`].
    fn forward(&self, x: &Tensor) -> Tensor {
        rms_norm(x, Some(&self.weight), self.eps)
    }

    fn parameters(&self) -> Vec<(String, Var)> {
        vec![("weight".to_string(), self.weight.clone())]
    }
}
