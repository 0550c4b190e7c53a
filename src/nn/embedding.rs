//! `Embedding`: rows of a table picked by integer indices, as `torch.nn.Embedding`.

use super::functional::embedding;
use super::init;
use super::module::Module;
use crate::autograd::Var;
use crate::device::Device;
use crate::tensor::Tensor;

/// A lookup table of `n` rows of `dim` values, as `torch.nn.Embedding`: the forward pass maps `I32`/`U32`
/// indices of any shape to `[idx.., dim]`. Initialised as PyTorch's default, N(0, 1), from `seed` with
/// [`Tensor::randn`]. Parameter: `weight`, `[n, dim]`.
///
/// # Examples
/// ```no_run
/// use lazor::nn::{Embedding, Module};
/// use lazor::Tensor;
/// let emb = Embedding::new(65, 16, 3);
/// let x = emb.forward(&Tensor::from_vec(vec![1i32, 4, 4], [3]));
/// assert_eq!(x.shape(), &[3, 16]);
/// ```
pub struct Embedding {
    /// The table, `[n, dim]`.
    pub weight: Var,
}

impl Embedding {
    /// A table of `n` rows of `dim` values on the default device, initialised from `seed`.
    pub fn new(n: usize, dim: usize, seed: u64) -> Embedding {
        Embedding::new_on(n, dim, seed, &Device::default())
    }

    /// [`Embedding::new`] on `device`.
    pub fn new_on(n: usize, dim: usize, seed: u64, device: &Device) -> Embedding {
        Embedding { weight: init::normal(&[n, dim], init::stream(seed, 0), device) }
    }
}

impl Module for Embedding {
    /// The rows at the indices `x`; see [`embedding`].
    ///
    /// # Panics
    /// If `x` is not an integer tensor, or is host data with an index outside `[0, n)`.
    fn forward(&self, x: &Tensor) -> Tensor {
        embedding(x, &self.weight)
    }

    fn parameters(&self) -> Vec<(String, Var)> {
        vec![("weight".to_string(), self.weight.clone())]
    }
}
