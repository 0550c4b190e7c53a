//! Rotary position embeddings, as Llama's: the angles of each position (`Rotary`) and their rotation of queries
//! and keys (`rotary_embedding`), in Hugging Face's `rotate_half` layout.

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{ok, Error, Result};
use crate::tensor::Tensor;

/// `x * cos + rotate_half(x) * sin` over the last axis of `x` (`[..., t, d]`, `d` even), as Hugging Face's
/// `apply_rotary_pos_emb`: `rotate_half(x)` is `cat(-x[..., d/2:], x[..., :d/2])`, so feature `i` turns with
/// feature `i + d/2` (the halves layout of Llama's checkpoints, not interleaved pairs). `cos` and `sin` broadcast
/// against `x` (`[t, d]` from [`Rotary::cos_sin`], or `[b, 1, t, d]`) and are rounded to `x`'s type first, as
/// Hugging Face casts them. Views, a concatenation and elementwise ops: one kernel with whatever reads it.
///
/// # Panics
/// If `x` has no axes or an odd last axis, is not a float tensor, or `cos` / `sin` do not broadcast against it;
/// [`try_rotary_embedding`] returns the error instead.
///
/// # Examples
/// ```no_run
/// use lazor::{nn::functional::rotary_embedding, Tensor};
/// // A quarter turn: (1, 0) becomes (0, 1).
/// let x = Tensor::from_vec(vec![1.0, 0.0], [1, 2]);
/// let (cos, sin) = (Tensor::zeros([1, 2]), Tensor::ones([1, 2]));
/// assert_eq!(rotary_embedding(&x, &cos, &sin).to_vec(), vec![0.0, 1.0]);
/// ```
#[track_caller]
pub fn rotary_embedding(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    ok(try_rotary_embedding(x, cos, sin))
}

/// [`rotary_embedding`], returning an error instead of panicking.
///
/// # Errors
/// [`Error::BadArgument`] for a scalar or an odd last axis, [`Error::DType`] for an input that is not float,
/// [`Error::Broadcast`] where `cos` or `sin` does not broadcast against `x`, [`Error::DeviceMismatch`] across
/// devices.
pub fn try_rotary_embedding(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let op = "rotary_embedding";
    let d = x.shape().last().copied().unwrap_or(0);
    if x.ndim() == 0 || d % 2 == 1 {
        let message = "the input's last axis (features) must have an even length".into();
        return Err(Error::BadArgument { op, message, shape: x.shape.clone() });
    }
    if !x.dtype().is_float() {
        return Err(Error::DType { op, message: format!("the input must be a float tensor, not {}", x.dtype()) });
    }
    let half = d / 2;
    let rotated = Tensor::try_cat(&[&-x.narrow(-1, half, half), &x.narrow(-1, 0, half)], -1)?;
    let (cos, sin) = (cos.to_dtype(x.dtype()), sin.to_dtype(x.dtype()));
    x.try_mul(&cos)?.try_add(&rotated.try_mul(&sin)?)
}

/// The angles of rotary position embeddings, as Hugging Face's `LlamaRotaryEmbedding` (default rope type): the
/// inverse frequencies `1 / theta^(2i / d)` for `i < d/2`, computed on the host in f32 as Hugging Face does, kept
/// on the device, and the cosines and sines of positions times them.
///
/// # Examples
/// ```no_run
/// use lazor::nn::{functional::rotary_embedding, Rotary};
/// use lazor::Tensor;
/// let rope = Rotary::new(4, 10000.0);
/// let positions = Tensor::arange(3) + 5; // positions 5, 6, 7
/// let (cos, sin) = rope.cos_sin(&positions);
/// assert_eq!(cos.shape(), &[3, 4]);
/// let q = rotary_embedding(&Tensor::ones([2, 3, 4]), &cos, &sin);
/// ```
pub struct Rotary {
    /// `1 / theta^(2i / d)`, `[d / 2]` f32.
    pub inv_freq: Tensor,
}

impl Rotary {
    /// Angles for heads of `head_dim` features (even) at base `theta` (Llama's `rope_theta`), on the default
    /// device.
    ///
    /// # Panics
    /// If `head_dim` is odd or the upload fails.
    #[track_caller]
    pub fn new(head_dim: usize, theta: f32) -> Rotary {
        Rotary::new_on(head_dim, theta, &Device::default())
    }

    /// [`Rotary::new`] on `device`.
    ///
    /// # Panics
    /// As [`Rotary::new`].
    #[track_caller]
    pub fn new_on(head_dim: usize, theta: f32, device: &Device) -> Rotary {
        assert!(head_dim % 2 == 0, "lazor: Rotary: the head dimension must be even, not {head_dim}");
        let inv: Vec<f32> = (0..head_dim / 2).map(|i| 1.0 / theta.powf((2 * i) as f32 / head_dim as f32)).collect();
        let inv_freq = Tensor::from_vec_on(inv, [head_dim / 2], device);
        // Realized now: a step that uploaded it would flush the device's held-back work.
        ok(inv_freq.realize());
        Rotary { inv_freq }
    }

    /// `(cos, sin)` of `positions` (an integer tensor of any shape `[...]`) times the frequencies, each
    /// `[..., head_dim]` f32, the frequencies repeated over both halves (`cat(freqs, freqs)`). Positions computed
    /// on the device from a constant (`Tensor::arange(t) + start`) keep a decoding loop's plan the same at every
    /// position.
    pub fn cos_sin(&self, positions: &Tensor) -> (Tensor, Tensor) {
        let freqs = positions.to_dtype(DType::F32).unsqueeze(-1) * &self.inv_freq;
        let angles = Tensor::cat(&[&freqs, &freqs], -1);
        (angles.cos(), angles.sin())
    }
}
