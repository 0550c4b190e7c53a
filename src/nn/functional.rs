//! Stateless neural-network functions, as `torch.nn.functional`: each is a composition of tensor ops.

use crate::error::{Error, Result};
use crate::op::Tri;
use crate::shape::Shape;
use crate::tensor::{autocast, Tensor};

pub use super::rms_norm::rms_norm;
pub use super::rotary::{rotary_embedding, try_rotary_embedding};

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
    // Under autocast the bias joins the product's type too (cast before the transpose, so the weight's gradient
    // is still computed in its own layout).
    if let Some([x, w]) = autocast::half_operands([x, weight]) {
        let b = bias.map(|b| autocast::cast_half(b, w.dtype()));
        return autocast::suspended(|| linear(&x, &w, b.as_ref()));
    }
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
    if let Some(wide) = x.autocast_f32() {
        let (w, b) = (weight.map(f32_operand), bias.map(f32_operand));
        return layer_norm(&wide, w.as_ref(), b.as_ref(), eps);
    }
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

/// Attention, as `torch.nn.functional.scaled_dot_product_attention` without a mask or dropout:
/// `softmax(q k^T / sqrt(E)) v` over queries `q` `[..., L, E]`, keys `k` `[..., S, E]` and values `v`
/// `[..., S, Ev]`, giving `[..., L, Ev]`; the batch axes broadcast. With `is_causal`, query `i` attends to keys
/// `j <= i` alone (PyTorch's `tril` mask, aligned at the top left).
///
/// Causal attention's products skip the blocks above the diagonal that the mask zeroes (a quarter of their
/// work at 256 positions), in the forward and the backward pass alike. The values are those of
/// `(q.matmul(&k.transpose(-2, -1)) / sqrt(E)).masked_fill(&future, -inf).softmax(-1).matmul(&v)`, except where a
/// value past query `i` is NaN or infinite: whether that reaches row `i` depends on the block it falls in on a GPU
/// (as with PyTorch's fused kernels), and it does on the CPU backend, as in the composition, which multiplies it by
/// a weight of 0.
///
/// # Panics
/// If an input is not a float tensor of at least 2 axes, `q` and `k` differ in `E`, `k` and `v` in `S`, the batch
/// axes do not broadcast, or the inputs live on different devices; [`try_scaled_dot_product_attention`] returns the
/// error instead.
///
/// # Examples
/// ```no_run
/// use lazor::{nn::functional::scaled_dot_product_attention, Tensor};
/// let q = Tensor::ones([2, 3, 4]);
/// let v = Tensor::from_vec((0..24).map(|x| x as f32).collect(), [2, 3, 4]);
/// let y = scaled_dot_product_attention(&q, &q, &v, true);
/// assert_eq!(y.narrow(1, 0, 1).to_vec(), vec![0.0, 1.0, 2.0, 3.0, 12.0, 13.0, 14.0, 15.0]);
/// ```
#[track_caller]
pub fn scaled_dot_product_attention(q: &Tensor, k: &Tensor, v: &Tensor, is_causal: bool) -> Tensor {
    crate::error::ok(try_scaled_dot_product_attention(q, k, v, is_causal))
}

/// [`scaled_dot_product_attention`], returning an error instead of panicking.
///
/// # Errors
/// [`Error::BadArgument`] for an input with fewer than 2 axes, [`Error::ShapeMismatch`] naming both shapes where
/// `q` and `k` differ in `E`, `k` and `v` in `S`, or batch axes do not broadcast, [`Error::DType`] for an input
/// that is not float, [`Error::DeviceMismatch`] across devices.
pub fn try_scaled_dot_product_attention(q: &Tensor, k: &Tensor, v: &Tensor, is_causal: bool) -> Result<Tensor> {
    // Under autocast the whole attention runs in the half type, its softmax included (computed in f32 and rounded
    // once, as a flash attention keeps its probabilities).
    if let Some([q, k, v]) = autocast::half_operands([q, k, v]) {
        return autocast::suspended(|| try_scaled_dot_product_attention(&q, &k, &v, is_causal));
    }
    let op = "scaled_dot_product_attention";
    q.device().check_same(k.device(), op)?;
    q.device().check_same(v.device(), op)?;
    for t in [q, k, v] {
        if t.ndim() < 2 {
            return Err(Error::BadArgument {
                op,
                message: "queries, keys and values need at least 2 axes ([..., positions, features])".into(),
                shape: t.shape.clone(),
            });
        }
        if !t.dtype().is_float() {
            return Err(Error::DType { op, message: format!("inputs must be float tensors, not {}", t.dtype()) });
        }
    }
    let last = |t: &Tensor, back: usize| t.shape()[t.ndim() - back];
    let mismatch = |what: &str, a: &Tensor, b: &Tensor| Error::ShapeMismatch {
        op,
        message: what.into(),
        lhs: a.shape.clone(),
        rhs: b.shape.clone(),
    };
    if last(q, 1) != last(k, 1) {
        return Err(mismatch("queries and keys differ in their last axis (features)", q, k));
    }
    if last(k, 2) != last(v, 2) {
        return Err(mismatch("keys and values differ in their second last axis (positions)", k, v));
    }
    let batch = |t: &Tensor| Shape::from(&t.shape()[..t.ndim() - 2]);
    for (a, b) in [(q, k), (q, v), (k, v)] {
        if batch(a).broadcast(&batch(b)).is_none() {
            return Err(mismatch("batch axes cannot be broadcast together", a, b));
        }
    }
    let scale = 1.0 / (last(q, 1) as f32).sqrt();
    let keys = k.transpose(-2, -1);
    if !is_causal {
        return Ok((q.matmul(&keys) * scale).softmax(-1).matmul(v));
    }
    // The scores come out of their product masked (-inf past the diagonal), so the softmax reads them as they are: with
    // the mask computed from coordinates in the softmax's kernel instead (`masked_fill`), that kernel ran markedly
    // slower over nanoGPT's scores (figures: docs/notes/source-measurements.md, `src/nn/functional.rs`).
    let scores = q.matmul_tri(&keys, Tri::Causal) * scale;
    Ok(scores.softmax(-1).matmul_tri(v, Tri::ALower))
}

/// A half operand of an f32-list op under autocast widened to f32, any other as it is.
fn f32_operand(t: &Tensor) -> Tensor {
    t.autocast_f32().unwrap_or_else(|| t.clone())
}

/// `silu(gate) * up`, the gating of SwiGLU (Shazeer, "GLU Variants Improve Transformer"), elementwise: one kernel
/// with the products' epilogue it fuses into.
///
/// # Panics
/// If the shapes do not broadcast or the types have no common type.
///
/// # Examples
/// ```no_run
/// use lazor::{nn::functional::swiglu, Tensor};
/// let y = swiglu(&Tensor::zeros([2]), &Tensor::ones([2]));
/// assert_eq!(y.to_vec(), vec![0.0, 0.0]);
/// ```
#[track_caller]
pub fn swiglu(gate: &Tensor, up: &Tensor) -> Tensor {
    gate.silu() * up
}

/// Each of the `kv_heads` heads of `x` (`[batch, kv_heads, t, d]`) repeated `n_rep` times in place:
/// `[batch, kv_heads * n_rep, t, d]`, head `j n_rep + r` being head `j`, as Hugging Face's `repeat_kv` for
/// grouped-query attention. (A view that no stride vector expresses: it is copied where read. [`KvCache::attend`]
/// groups the queries instead.)
///
/// # Panics
/// If `x` is not 4-D or `n_rep` is 0.
///
/// # Examples
/// ```no_run
/// use lazor::{nn::functional::repeat_kv, Tensor};
/// let x = Tensor::from_vec(vec![1.0, 2.0], [1, 2, 1, 1]);
/// assert_eq!(repeat_kv(&x, 2).to_vec(), vec![1.0, 1.0, 2.0, 2.0]);
/// ```
#[track_caller]
pub fn repeat_kv(x: &Tensor, n_rep: usize) -> Tensor {
    assert!(x.ndim() == 4 && n_rep > 0, "lazor: repeat_kv: x must be [batch, kv_heads, t, d] and n_rep > 0");
    let [b, kv, t, d] = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
    x.unsqueeze(2).expand([b, kv, n_rep, t, d]).reshape([b, kv * n_rep, t, d])
}
