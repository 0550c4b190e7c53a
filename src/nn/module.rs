//! The `Module` trait: a layer's forward pass, its named parameters, and saving and loading them by name.

use crate::autograd::Var;
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;
use std::path::Path;

/// A layer or a model: a forward pass over its parameters, which it owns as [`Var`]s.
///
/// [`Module::parameters`] names them as PyTorch's `state_dict` keys (`weight`, `bias`, nested with dots:
/// `0.weight`, `encoder.2.bias`), so a checkpoint written by [`Module::save`] loads into the PyTorch model of the same
/// structure and back. Any function `Fn(&Tensor) -> Tensor` is a module without parameters, so activations go
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
/// model.save("mlp.safetensors")?;
/// model.load("mlp.safetensors")?;
/// # Ok::<(), lazor::Error>(())
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

    /// Casts every float parameter to `dtype` in place, as PyTorch's `module.to(dtype)`: the whole model in bf16
    /// for inference, say. Integer and bool parameters keep their type. The casts run in one realize; each
    /// parameter's old buffer goes back to the pool (see [`Var::set_dtype`]). An optimizer built before keeps its
    /// f32 states and steps the parameters in their new type.
    ///
    /// # Panics
    /// At the caller when `dtype` is not a float type, or on a device failure; [`Module::try_to_dtype`] returns
    /// the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::nn::{Linear, Module};
    /// use lazor::{DType, Tensor};
    /// let fc = Linear::new(3, 2, true, 7);
    /// fc.to_dtype(DType::BF16);
    /// assert_eq!(fc.weight.dtype(), DType::BF16);
    /// assert_eq!(fc.forward(&Tensor::ones([1, 3]).to_dtype(DType::BF16)).dtype(), DType::BF16);
    /// ```
    #[track_caller]
    fn to_dtype(&self, dtype: DType) {
        crate::error::ok(self.try_to_dtype(dtype))
    }

    /// [`Module::to_dtype`], returning an error instead of panicking. On an error no parameter has changed, unless
    /// the device failed while the new values were being moved in.
    ///
    /// # Errors
    /// [`Error::DType`](crate::Error::DType) when `dtype` is not a float type; device failures as
    /// [`Tensor::realize`].
    fn try_to_dtype(&self, dtype: DType) -> Result<()> {
        if !dtype.is_float() {
            return Err(crate::Error::DType {
                op: "Module::to_dtype",
                message: format!("parameters are cast to float types, not {dtype}"),
            });
        }
        let vars: Vec<Var> = self.vars().into_iter().filter(|v| v.dtype().is_float() && v.dtype() != dtype).collect();
        let casts: Vec<Tensor> = vars.iter().map(|v| v.detach().to_dtype(dtype)).collect();
        crate::tensor::realize(&casts.iter().collect::<Vec<_>>())?;
        for (v, cast) in vars.iter().zip(casts) {
            v.try_retype(cast)?;
        }
        Ok(())
    }

    /// Writes every parameter to a safetensors file at `path` under its name, in one read-back.
    ///
    /// # Errors
    /// [`Error::Io`](crate::Error::Io) when the file cannot be written,
    /// [`Error::BadArgument`](crate::Error::BadArgument) when two parameters have one name; device failures as
    /// [`Tensor::try_to_vec`].
    fn save(&self, path: impl AsRef<Path>) -> Result<()>
    where
        Self: Sized,
    {
        let params = self.parameters();
        let tensors: Vec<(&str, &Tensor)> = params.iter().map(|(n, v)| (n.as_str(), &**v)).collect();
        crate::safetensors::save(path, &tensors)
    }

    /// Replaces every parameter's value with the tensor of its name in the safetensors file at `path`, in one
    /// upload. All of it is checked before any parameter changes: on an error the module is as it was.
    ///
    /// # Errors
    /// [`Error::Io`](crate::Error::Io) when the file cannot be read, [`Error::Corrupt`](crate::Error::Corrupt)
    /// when it is not a valid safetensors file, [`Error::MissingTensor`](crate::Error::MissingTensor) for a
    /// parameter the file lacks, [`Error::UnexpectedTensor`](crate::Error::UnexpectedTensor) for a tensor no
    /// parameter is named after (as PyTorch's strict `load_state_dict`), and
    /// [`Error::TensorMismatch`](crate::Error::TensorMismatch) for a tensor of another shape or dtype than its
    /// parameter.
    fn load(&self, path: impl AsRef<Path>) -> Result<()>
    where
        Self: Sized,
    {
        crate::safetensors::load_into(path.as_ref(), &self.parameters())
    }
}

/// A boxed module is a module: a `Box<dyn Module>` can be saved and loaded, and passed where `impl Module` is
/// taken.
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
