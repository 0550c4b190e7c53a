//! The `Module` trait: a layer's forward pass and its named parameters.

use crate::autograd::Var;
use crate::tensor::Tensor;

/// A layer or a model: a forward pass over its parameters, which it owns as [`Var`]s.
///
/// [`Module::parameters`] names them as PyTorch's `state_dict` keys (`weight`, `bias`, nested with dots:
/// `0.weight`, `encoder.2.bias`), so the names match the PyTorch model of the same structure. Any function `Fn(&Tensor) -> Tensor` is a module without parameters, so activations go
/// into a [`Sequential`](super::Sequential) as they are (`Box::new(nn::relu)`).
///
/// # Examples
/// A model of one's own: a struct of layers, its parameters prefixed with the field names.
/// ```no_run
/// use lazor::nn::{self, Module};
/// use lazor::{Tensor, Var};
/// struct Mlp {
///     fc1: nn::Linear,
///     fc2: nn::Linear,
/// }
/// impl Module for Mlp {
///     fn forward(&self, x: &Tensor) -> Tensor {
///         self.fc2.forward(&nn::relu(&self.fc1.forward(x)))
///     }
///     fn parameters(&self) -> Vec<(String, Var)> {
///         let mut all = nn::prefixed("fc1", &self.fc1);
///         all.extend(nn::prefixed("fc2", &self.fc2));
///         all
///     }
/// }
/// let model = Mlp { fc1: nn::Linear::new(784, 128, true, 1), fc2: nn::Linear::new(128, 10, true, 2) };
/// assert_eq!(model.parameters()[2].0, "fc2.weight");
/// ```
pub trait Module {
    /// The layer applied to `x`: lazy, and tracked for [`Tensor::backward`] through the parameters.
    fn forward(&self, x: &Tensor) -> Tensor;

    /// Every parameter with its name, in a fixed order (the order of PyTorch's `state_dict`): clones of the
    /// layer's own `Var`s, so an optimizer built from them updates the layer.
    fn parameters(&self) -> Vec<(String, Var)>;

    /// Switches training behaviour on or off (dropout is the identity when off); modules without any ignore it.
    /// Containers pass it to every layer they hold.
    fn train(&self, on: bool) {
        let _ = on;
    }

    /// The parameters alone, in [`Module::parameters`]' order: what an optimizer takes.
    fn vars(&self) -> Vec<Var> {
        self.parameters().into_iter().map(|(_, v)| v).collect()
    }
}

/// A boxed module is a module, so generic code taking `impl Module` takes a `Box<dyn Module>` too.
impl Module for Box<dyn Module> {
    fn forward(&self, x: &Tensor) -> Tensor {
        (**self).forward(x)
    }

    fn parameters(&self) -> Vec<(String, Var)> {
        (**self).parameters()
    }

    fn train(&self, on: bool) {
        (**self).train(on)
    }
}

/// A function of a tensor is a module without parameters: activations and any closure go into a
/// [`Sequential`](super::Sequential) as they are.
impl<F: Fn(&Tensor) -> Tensor> Module for F {
    fn forward(&self, x: &Tensor) -> Tensor {
        self(x)
    }

    fn parameters(&self) -> Vec<(String, Var)> {
        Vec::new()
    }
}

/// `module`'s parameters with their names prefixed by `prefix` and a dot (`prefixed("fc1", &linear)` gives
/// `fc1.weight`, `fc1.bias`): how a model made of fields names its parameters as PyTorch does.
pub fn prefixed(prefix: &str, module: &dyn Module) -> Vec<(String, Var)> {
    module.parameters().into_iter().map(|(name, v)| (format!("{prefix}.{name}"), v)).collect()
}
