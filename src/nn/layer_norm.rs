//! `LayerNorm`: normalisation over the last axis with a learned scale and shift, as `torch.nn.LayerNorm`.

use super::functional::layer_norm;
use super::init;
use super::module::Module;
use crate::autograd::Var;
use crate::device::Device;
use crate::tensor::Tensor;

/// Layer normalisation over the last axis, as `torch.nn.LayerNorm(dim, eps)`:
/// `(x - mean) / sqrt(var + eps) * weight + bias`, the variance dividing by `dim`. Initialised as PyTorch's
/// default: `weight` ones, `bias` zeros, both `[dim]`. The forward pass is one rows kernel.
///
/// # Examples
/// ```no_run
/// use lazor::nn::{LayerNorm, Module};
/// use lazor::Tensor;
/// let ln = LayerNorm::new(4, 1e-5);
/// let y = ln.forward(&Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], [1, 4]));
/// assert!(y.to_vec()[0] < -1.3);
/// ```
pub struct LayerNorm {
    /// The scale, `[dim]`.
    pub weight: Var,
    /// The shift, `[dim]`.
    pub bias: Var,
    /// Added to the variance before the square root.
    pub eps: f32,
}

impl LayerNorm {
    /// A layer norm over a last axis of `dim` values on the default device.
    pub fn new(dim: usize, eps: f32) -> LayerNorm {
        LayerNorm::new_on(dim, eps, &Device::default())
    }

    /// [`LayerNorm::new`] on `device`.
    pub fn new_on(dim: usize, eps: f32, device: &Device) -> LayerNorm {
        LayerNorm { weight: init::constant(&[dim], 1.0, device), bias: init::constant(&[dim], 0.0, device), eps }
    }
}

impl Module for LayerNorm {
    /// `x` normalised over its last axis, scaled and shifted.
    ///
    /// # Panics
    /// If the last axis of `x` is not `dim` long.
    fn forward(&self, x: &Tensor) -> Tensor {
        layer_norm(x, Some(&self.weight), Some(&self.bias), self.eps)
    }

    fn parameters(&self) -> Vec<(String, Var)> {
        vec![("weight".to_string(), self.weight.clone()), ("bias".to_string(), self.bias.clone())]
    }
}
