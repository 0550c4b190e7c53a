//! `Sequential`: layers applied one after another, as `torch.nn.Sequential`.

use super::module::{prefixed, Module};
use crate::autograd::Var;
use crate::tensor::Tensor;

/// Layers applied in order, as `torch.nn.Sequential`. Parameters are named by the layer's place and the layer's
/// own name, as PyTorch's `state_dict`: `0.weight`, `0.bias`, `2.weight` (an activation at place 1 has none).
///
/// # Examples
/// ```no_run
/// use lazor::nn::{self, Module};
/// use lazor::Tensor;
/// let mlp = nn::Sequential::new(vec![
///     Box::new(nn::Linear::new(784, 128, true, 1)),
///     Box::new(nn::relu),
///     Box::new(nn::Dropout::new(0.1)),
///     Box::new(nn::Linear::new(128, 10, true, 2)),
/// ]);
/// mlp.train(false); // dropout off for evaluation
/// assert_eq!(mlp.forward(&Tensor::zeros([1, 784])).shape(), &[1, 10]);
/// assert_eq!(mlp.parameters()[2].0, "3.weight");
/// ```
pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
}

impl Sequential {
    /// The layers `layers`, applied in order.
    pub fn new(layers: Vec<Box<dyn Module>>) -> Sequential {
        Sequential { layers }
    }

    /// Appends a layer.
    pub fn push(&mut self, layer: Box<dyn Module>) {
        self.layers.push(layer);
    }

    /// The layers, in order.
    pub fn layers(&self) -> &[Box<dyn Module>] {
        &self.layers
    }

    /// How many layers there are.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no layers (the forward pass is then the identity).
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

impl Module for Sequential {
    fn forward(&self, x: &Tensor) -> Tensor {
        self.layers.iter().fold(x.clone(), |h, layer| layer.forward(&h))
    }

    fn parameters(&self) -> Vec<(String, Var)> {
        self.layers.iter().enumerate().flat_map(|(i, layer)| prefixed(&i.to_string(), &**layer)).collect()
    }

    fn train(&self, on: bool) {
        for layer in &self.layers {
            layer.train(on);
        }
    }
}
