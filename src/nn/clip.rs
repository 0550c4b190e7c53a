//! `clip_grad_norm`: scaling gradients down to a maximum total norm, lazily, as `torch.nn.utils.clip_grad_norm_`.

use crate::autograd::Grads;
use crate::dtype::DType;
use crate::tensor::Tensor;

/// Scales every gradient in `grads` by `min(1, max_norm / (norm + 1e-6))`, where `norm` is the 2-norm of all of
/// them together, as `torch.nn.utils.clip_grad_norm_`, and returns that total norm (f32, shape `[]`). Lazy like
/// the gradients: nothing runs until they are realized (by an optimizer's step, say), and then the norm's folds
/// and the scaled gradients join that realize. Half-precision gradients are summed in f32 and keep their type.
///
/// # Panics
/// At the caller when `max_norm` is negative or NaN, or the gradients live on different devices.
///
/// # Examples
/// ```no_run
/// use lazor::{Tensor, Var};
/// let w = Var::new(Tensor::from_vec(vec![3.0f32, 4.0], [2]));
/// let mut grads = (w.tensor() * &Tensor::from_vec(vec![3.0f32, 4.0], [2])).sum_all().backward();
/// let norm = lazor::nn::clip_grad_norm(&mut grads, 1.0);
/// assert_eq!(norm.to_scalar(), 5.0);
/// let g = grads[&w].to_vec();
/// assert!((g[0] - 0.6).abs() < 1e-6 && (g[1] - 0.8).abs() < 1e-6);
/// ```
#[track_caller]
pub fn clip_grad_norm(grads: &mut Grads, max_norm: f32) -> Tensor {
    assert!(max_norm >= 0.0, "lazor: clip_grad_norm: max_norm = {max_norm} must be at least 0");
    let Some(first) = grads.entries.first() else {
        return Tensor::scalar(0.0f32);
    };
    let device = first.1.device().clone();
    let norm = crate::no_grad(|| {
        let squares: Vec<Tensor> =
            grads.entries.iter().map(|(_, g)| g.to_dtype(DType::F32).square().sum_all()).collect();
        let total = squares.iter().skip(1).fold(squares[0].clone(), |acc, s| acc + s);
        total.sqrt()
    });
    let coef = crate::no_grad(|| {
        (Tensor::scalar_on(max_norm, &device) / (&norm + 1e-6)).minimum(&Tensor::scalar_on(1.0f32, &device))
    });
    for (_, g) in grads.entries.iter_mut() {
        let scaled = crate::no_grad(|| (g.to_dtype(DType::F32) * &coef).to_dtype(g.dtype()));
        *g = scaled;
    }
    norm
}
