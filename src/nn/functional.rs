//! Stateless neural-network functions, as `torch.nn.functional`: each is a composition of tensor ops.

use crate::tensor::Tensor;

/// The rows of `weight` (`[n, dim]`) at the `I32`/`U32` indices `idx` (any shape): `[idx.., dim]`, as
/// `torch.nn.functional.embedding`. Its gradient reaches `weight` as a deterministic `index_add` of the rows'
/// gradients. An index outside `[0, n)` computed on the device reads a row of zeros.
///
/// # Panics
/// If `weight` is not 2-D, `idx` is not an integer tensor, they live on different devices, or `idx` is host data
/// with a value outside `[0, n)`.
///
/// # Examples
/// ```no_run
/// use lazor::{nn::functional::embedding, Tensor};
/// let table = Tensor::from_vec(vec![0.0, 1.0, 10.0, 11.0], [2, 2]);
/// let e = embedding(&Tensor::from_vec(vec![1i32, 1, 0], [3]), &table);
/// assert_eq!(e.shape(), &[3, 2]);
/// assert_eq!(e.to_vec(), vec![10.0, 11.0, 10.0, 11.0, 0.0, 1.0]);
/// ```
#[track_caller]
pub fn embedding(idx: &Tensor, weight: &Tensor) -> Tensor {
    assert!(weight.ndim() == 2, "lazor: embedding: the weight must be 2-D, not of shape {:?}", weight.shape());
    let mut shape = idx.shape().to_vec();
    shape.push(weight.shape()[1]);
    weight.index_select(0, &idx.reshape([idx.numel()])).reshape(shape)
}

/// `max(x, 0)`, as `torch.nn.functional.relu`.
pub fn relu(x: &Tensor) -> Tensor {
    x.relu()
}

/// GELU by its tanh approximation, `x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`: PyTorch's
/// `gelu(x, approximate="tanh")` (its default is the exact `erf` form, within about 1e-3 of this).
pub fn gelu(x: &Tensor) -> Tensor {
    x.gelu()
}

/// `x * sigmoid(x)`, as `torch.nn.functional.silu`.
pub fn silu(x: &Tensor) -> Tensor {
    x.silu()
}

/// `1 / (1 + e^-x)`, as `torch.sigmoid`.
pub fn sigmoid(x: &Tensor) -> Tensor {
    x.sigmoid()
}

/// The hyperbolic tangent, as `torch.tanh`.
pub fn tanh(x: &Tensor) -> Tensor {
    x.tanh()
}

/// `x W^T + b` over the last axis of `x`, as `torch.nn.functional.linear`: `weight` is `[out, in]`, read
/// transposed through a view (no copy), `bias` `[out]`. The bias and whatever follows fuse into the product's
/// kernel.
///
/// # Panics
/// If the last axis of `x` is not `in` long or `bias` is not `[out]`.
///
/// # Examples
/// ```no_run
/// use lazor::{nn::functional::linear, Tensor};
/// let w = Tensor::from_vec(vec![1.0, 0.0, 0.0, 2.0], [2, 2]);
/// let y = linear(&Tensor::from_vec(vec![3.0, 4.0], [1, 2]), &w, Some(&Tensor::ones([2])));
/// assert_eq!(y.to_vec(), vec![4.0, 9.0]);
/// ```
#[track_caller]
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Tensor {
    let y = x.matmul(&weight.t());
    match bias {
        Some(b) => y + b,
        None => y,
    }
}

/// Layer normalisation over the last axis, as `torch.nn.functional.layer_norm` with `normalized_shape` the last
/// axis: `(x - mean) / sqrt(var + eps)` (the variance dividing by the axis length), times `weight` and plus `bias`
/// where given (`[dim]` each). One rows kernel: the mean and the variance's mean are folds of one row.
///
/// # Panics
/// If `x` has no axes, or `weight` or `bias` do not broadcast against the last axis.
///
/// # Examples
/// ```no_run
/// use lazor::{nn::functional::layer_norm, Tensor};
/// let y = layer_norm(&Tensor::from_vec(vec![1.0, 3.0], [1, 2]), None, None, 0.0);
/// assert_eq!(y.to_vec(), vec![-1.0, 1.0]);
/// ```
#[track_caller]
pub fn layer_norm(x: &Tensor, weight: Option<&Tensor>, bias: Option<&Tensor>, eps: f32) -> Tensor {
    assert!(x.ndim() > 0, "lazor: layer_norm: the input must have an axis to normalise, not be a scalar");
    let centred = x - x.mean_keepdim(-1);
    let mut y = centred / (x.var_keepdim(-1) + eps).sqrt();
    if let Some(w) = weight {
        y *= w;
    }
    if let Some(b) = bias {
        y += b;
    }
    y
}
