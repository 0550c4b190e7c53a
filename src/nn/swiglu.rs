//! `SwiGlu`: the gated MLP of Llama-style blocks, `down(silu(gate(x)) * up(x))`.

use super::functional::swiglu;
use super::linear::Linear;
use super::module::{prefixed, Module};
use crate::autograd::Var;
use crate::device::Device;
use crate::tensor::Tensor;

/// The MLP of a Llama-style block, as Hugging Face's `LlamaMLP`: `down_proj(silu(gate_proj(x)) * up_proj(x))`,
/// three [`Linear`] layers without biases (`[hidden, dim]`, `[hidden, dim]`, `[dim, hidden]`), initialised as
/// PyTorch's default from `seed`. Parameters: `gate_proj.weight`, `up_proj.weight`, `down_proj.weight`.
///
/// # Examples
/// ```no_run
/// use lazor::nn::{Module, SwiGlu};
/// use lazor::Tensor;
/// let mlp = SwiGlu::new(8, 32, 1);
/// assert_eq!(mlp.forward(&Tensor::ones([3, 8])).shape(), &[3, 8]);
/// assert_eq!(mlp.parameters()[0].0, "gate_proj.weight");
/// ```
pub struct SwiGlu {
    /// `dim` to `hidden`, gated by SiLU.
    pub gate_proj: Linear,
    /// `dim` to `hidden`.
    pub up_proj: Linear,
    /// `hidden` back to `dim`.
    pub down_proj: Linear,
}

impl SwiGlu {
    /// An MLP from `dim` features through `hidden` and back, on the default device.
    pub fn new(dim: usize, hidden: usize, seed: u64) -> SwiGlu {
        SwiGlu::new_on(dim, hidden, seed, &Device::default())
    }

    /// [`SwiGlu::new`] on `device`.
    pub fn new_on(dim: usize, hidden: usize, seed: u64, device: &Device) -> SwiGlu {
        SwiGlu {
            gate_proj: Linear::new_on(dim, hidden, false, seed, device),
            up_proj: Linear::new_on(dim, hidden, false, seed.wrapping_add(1), device),
            down_proj: Linear::new_on(hidden, dim, false, seed.wrapping_add(2), device),
        }
    }
}

impl Module for SwiGlu {
    /// `x` (`[..., dim]`) through the gated MLP.
    ///
    /// # Panics
    /// If the last axis of `x` is not `dim` long.
    fn forward(&self, x: &Tensor) -> Tensor {
        self.down_proj.forward(&swiglu(&self.gate_proj.forward(x), &self.up_proj.forward(x)))
    }

    fn parameters(&self) -> Vec<(String, Var)> {
        let mut all = prefixed("gate_proj", &self.gate_proj);
        all.extend(prefixed("up_proj", &self.up_proj));
        all.extend(prefixed("down_proj", &self.down_proj));
        all
    }
}
