//! `KvCache`: keys and values of past positions in preallocated buffers, written in place token after token, and
//! attention over them.

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{ok, Error, Result};
use crate::tensor::write::Position;
use crate::tensor::Tensor;

/// Keys and values of a decoder layer's past positions, each `[batch, kv_heads, max_len, head_dim]`, allocated once
/// and written in place ([`Tensor::write_at`]) as positions come: decoding one token writes one position of each
/// and copies nothing.
///
/// Attention ([`KvCache::attend`]) runs over all `max_len` positions with those past the query's masked, rather
/// than over the filled prefix alone: a prefix growing token by token would change the products' shapes, and with
/// them the plan, every token, while at a fixed shape the position is one constant of the plan (or a device
/// scalar) and every decoded token reuses one plan and its compiled kernels. The masked positions cost their
/// share of the two products and the softmax; `max_len` is the caller's to choose (prompt plus new tokens).
///
/// # Examples
/// ```no_run
/// use lazor::nn::KvCache;
/// use lazor::{DType, Device, Tensor};
/// let dev = Device::default();
/// let cache = KvCache::new_on(1, 2, 16, 8, DType::F32, &dev);
/// // A prompt of 3 positions, then one token at position 3.
/// let (k, v, q) = (Tensor::randn([1, 2, 3, 8], 1), Tensor::randn([1, 2, 3, 8], 2), Tensor::randn([1, 2, 3, 8], 3));
/// cache.write(0usize, &k, &v);
/// let y = cache.attend(&q, 0usize);
/// assert_eq!(y.shape(), &[1, 2, 3, 8]);
/// let (k, v, q) = (Tensor::randn([1, 2, 1, 8], 4), Tensor::randn([1, 2, 1, 8], 5), Tensor::randn([1, 2, 1, 8], 6));
/// cache.write(3usize, &k, &v);
/// let y = cache.attend(&q, 3usize); // attends to positions 0..=3
/// ```
pub struct KvCache {
    /// `[batch, kv_heads, max_len, head_dim]`.
    pub keys: Tensor,
    /// `[batch, kv_heads, max_len, head_dim]`.
    pub values: Tensor,
}

impl KvCache {
    /// A cache of zeros of `dtype` on `device`, realized.
    ///
    /// # Panics
    /// On a device failure (out of memory).
    #[track_caller]
    pub fn new_on(
        batch: usize,
        kv_heads: usize,
        max_len: usize,
        head_dim: usize,
        dtype: DType,
        device: &Device,
    ) -> KvCache {
        let shape = [batch, kv_heads, max_len, head_dim];
        let keys = Tensor::full_lane(shape, 0, dtype, device);
        let values = Tensor::full_lane(shape, 0, dtype, device);
        ok(crate::tensor::realize(&[&keys, &values]));
        KvCache { keys, values }
    }

    /// The positions the cache holds.
    pub fn max_len(&self) -> usize {
        self.keys.shape()[2]
    }

    /// The positions `start, start + 1, ..., start + len - 1` as an `I32` tensor `[len]`, computed where it is read
    /// from `start` (a constant, or a device scalar): what rotary angles and position embeddings are looked up
    /// at, the same plan at every position.
    pub fn positions<'a>(start: impl Into<Position<'a>>, len: usize, device: &Device) -> Tensor {
        let steps = Tensor::arange_on(len, device);
        match start.into() {
            Position::At(at) => steps + at as i32,
            Position::On(t) => steps + t.detach().reshape([]).to_dtype(DType::I32),
        }
    }

    /// Writes keys `k` and values `v` (`[batch, kv_heads, t, head_dim]`, the cache's dtype) at positions
    /// `start..start + t`, in place.
    ///
    /// # Panics
    /// As [`Tensor::write_at`]; [`KvCache::try_write`] returns the error instead.
    #[track_caller]
    pub fn write<'a>(&self, start: impl Into<Position<'a>>, k: &Tensor, v: &Tensor) {
        ok(self.try_write(start, k, v))
    }

    /// [`KvCache::write`], returning an error instead of panicking.
    ///
    /// # Errors
    /// As [`Tensor::try_write_at`].
    pub fn try_write<'a>(&self, start: impl Into<Position<'a>>, k: &Tensor, v: &Tensor) -> Result<()> {
        let start = start.into();
        self.keys.try_write_at(2, start, k)?;
        self.values.try_write_at(2, start, v)
    }

    /// Attention of queries `q` (`[batch, heads, t, head_dim]`, at positions `start..start + t`) over the cache:
    /// query `i` attends to positions `0..=start + i` (causal within the new positions, all of the past), scaled by
    /// `1 / sqrt(head_dim)`. A prompt at host position 0 without grouping runs as causal attention over its own
    /// positions ([`crate::nn::functional::scaled_dot_product_attention`]), skipping what the mask would drop. `heads` is a multiple of the cache's `kv_heads` (grouped-query attention, as Hugging
    /// Face's `repeat_kv`: query heads `j g .. (j + 1) g` read kv head `j`), served by grouping the queries rather
    /// than repeating the cache. Write the new positions first. A position on the device is not checked: the
    /// write clamps it into the cache, the mask does not, so keep it within `max_len - t`.
    ///
    /// # Panics
    /// If `q`'s shape does not fit the cache, or a host `start + t` exceeds it; [`KvCache::try_attend`] returns
    /// the error instead.
    #[track_caller]
    pub fn attend<'a>(&self, q: &Tensor, start: impl Into<Position<'a>>) -> Tensor {
        ok(self.try_attend(q, start))
    }

    /// [`KvCache::attend`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when `q` is not `[batch, heads, t, head_dim]` with `heads` a multiple of the
    /// cache's `kv_heads`, [`Error::BadArgument`] when a host `start + t` exceeds `max_len`, [`Error::DType`] for
    /// another dtype, [`Error::DeviceMismatch`] across devices.
    pub fn try_attend<'a>(&self, q: &Tensor, start: impl Into<Position<'a>>) -> Result<Tensor> {
        let op = "KvCache::attend";
        self.keys.device().check_same(q.device(), op)?;
        let (c, len) = (self.keys.shape(), self.max_len());
        let fits = q.ndim() == 4 && q.shape()[0] == c[0] && q.shape()[3] == c[3] && q.shape()[1] % c[1] == 0;
        if !fits || q.shape()[1] == 0 {
            return Err(Error::ShapeMismatch {
                op,
                message: "queries must be [batch, heads, t, head_dim], heads a multiple of the cache's kv heads".into(),
                lhs: self.keys.shape.clone(),
                rhs: q.shape.clone(),
            });
        }
        if q.dtype() != self.keys.dtype() {
            return Err(Error::DType {
                op,
                message: format!("queries are {}, the cache {}", q.dtype(), self.keys.dtype()),
            });
        }
        let (b, heads, t, d) = (c[0], q.shape()[1], q.shape()[2], c[3]);
        let (kv, start) = (c[1], start.into());
        if let Position::At(at) = start {
            if at + t > len {
                let message = format!("positions {at}..{} exceed the cache's {len}", at + t);
                return Err(Error::BadArgument { op, message, shape: q.shape.clone() });
            }
        }
        let group = heads / kv;
        if let (Position::At(0), 1) = (start, group) {
            // A prompt from position 0 attends to its own positions alone, causally: the triangular products skip
            // the blocks past the diagonal and the positions past the prompt, which the masked form computes and
            // drops (the same values: the positions past the prompt weigh 0 there).
            let (k, v) = (self.keys.narrow(2, 0, t), self.values.narrow(2, 0, t));
            return crate::nn::functional::try_scaled_dot_product_attention(q, &k, &v, true);
        }
        let dev = q.device();
        // Each kv head's query heads as rows of one product: [b, kv, group * t, d].
        let rows = q.reshape([b, kv, group * t, d]);
        let scores = rows.matmul(&self.keys.transpose(-2, -1)) * (1.0 / (d as f32).sqrt());
        let past = KvCache::positions(start, t, dev).unsqueeze(-1);
        let blocked = Tensor::arange_on(len, dev).gt(&past);
        let scores = scores.reshape([b, kv, group, t, len]).masked_fill(&blocked, f32::NEG_INFINITY);
        let weights = scores.softmax(-1).reshape([b, kv, group * t, len]);
        Ok(weights.matmul(&self.values).reshape([b, heads, t, d]))
    }
}
