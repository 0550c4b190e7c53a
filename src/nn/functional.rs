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
