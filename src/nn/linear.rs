//! `Linear`: `x W^T + b`, as `torch.nn.Linear`.

use super::functional::linear;
use super::init;
use super::module::Module;
use crate::autograd::Var;
use crate::device::Device;
use crate::tensor::Tensor;

/// A fully connected layer, `y = x W^T + b`, as `torch.nn.Linear`: `weight` is `[out, in]` (PyTorch's layout, so
/// checkpoints exchange as they are) and read transposed through a view, with no copy; `bias` is `[out]`.
///
/// Initialised as PyTorch's default: weight and bias uniform on `[-1/sqrt(in), 1/sqrt(in))` (the weight's is
/// `kaiming_uniform_(a = sqrt(5))`), drawn from `seed` with [`Tensor::rand`], so a seed gives the same weights on
/// every backend. Parameters: `weight`, `bias`.
///
/// # Examples
/// ```no_run
/// use lazor::nn::{Linear, Module};
/// use lazor::Tensor;
/// let fc = Linear::new(3, 2, true, 7);
/// let y = fc.forward(&Tensor::ones([5, 3]));
/// assert_eq!(y.shape(), &[5, 2]);
/// assert_eq!(fc.weight.shape(), &[2, 3]);
/// ```
pub struct Linear {
    /// The weight, `[out, in]`.
    pub weight: Var,
    /// The bias, `[out]`, when the layer has one.
    pub bias: Option<Var>,
}

impl Linear {
    /// A layer from `input` to `output` features on the default device, with a bias when `bias`, initialised
    /// from `seed`.
    pub fn new(input: usize, output: usize, bias: bool, seed: u64) -> Linear {
        Linear::new_on(input, output, bias, seed, &Device::default())
    }

    /// [`Linear::new`] on `device`.
    pub fn new_on(input: usize, output: usize, bias: bool, seed: u64, device: &Device) -> Linear {
        // PyTorch's bound for both: 1 / sqrt(fan_in), 0 without inputs (its weight is then empty anyway).
        let bound = if input == 0 { 0.0 } else { 1.0 / (input as f32).sqrt() };
        Linear {
            weight: init::uniform(&[output, input], bound, init::stream(seed, 0), device),
            bias: bias.then(|| init::uniform(&[output], bound, init::stream(seed, 1), device)),
        }
    }
}

impl Module for Linear {
    /// `x W^T + b` over the last axis of `x` (`[.., in]` to `[.., out]`).
    ///
    /// # Panics
    /// If the last axis of `x` is not `in` long.
    fn forward(&self, x: &Tensor) -> Tensor {
        linear(x, &self.weight, self.bias.as_deref())
    }

    fn parameters(&self) -> Vec<(String, Var)> {
        let mut params = vec![("weight".to_string(), self.weight.clone())];
        params.extend(self.bias.iter().map(|b| ("bias".to_string(), b.clone())));
        params
    }
}
