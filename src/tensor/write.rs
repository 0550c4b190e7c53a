//! Writing a slice of a tensor in place (`write_at`): a KV cache's new keys and values stored at their position,
//! with no copy of the rest.

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{ok, Error, Result};
use crate::shape::Shape;
use crate::tensor::dim::Dim;
use crate::tensor::Tensor;

/// Where [`Tensor::write_at`] writes: a position known on the host, or a scalar tensor on the device.
///
/// A host position becomes a graph constant, which the plan cache fills in as a parameter: decoding token after
/// token at positions 0, 1, 2, ... reuses one plan and compiles nothing new. A tensor (an `I32` or `U32` scalar,
/// of shape `[]` or `[1]`) is read by the kernel, so a position computed on the device never comes back to the
/// host.
#[derive(Clone, Copy, Debug)]
pub enum Position<'a> {
    /// A position known on the host.
    At(usize),
    /// A scalar on the device, clamped so that the slice stays inside the axis.
    On(&'a Tensor),
}

impl From<usize> for Position<'_> {
    fn from(at: usize) -> Self {
        Position::At(at)
    }
}

impl<'a> From<&'a Tensor> for Position<'a> {
    fn from(t: &'a Tensor) -> Self {
        Position::On(t)
    }
}

fn bad(shape: &Shape, message: String) -> Error {
    Error::BadArgument { op: "write_at", message, shape: shape.clone() }
}

impl Tensor {
    /// Writes `value` into this tensor's slice `[start, start + len)` along `dim`, where `len` is `value`'s extent
    /// there (`value` has this tensor's shape on every other axis and its dtype): as PyTorch's
    /// `cache.narrow(dim, start, len).copy_(value)`, lazily. Every handle on this tensor (it and its clones) sees
    /// the new value; lazy results computed from it before the write keep the old one.
    ///
    /// Realized with whatever reads it. Where this tensor is a buffer that nothing else reads, the kernel runs over
    /// the slice alone and stores it into that buffer: no copy of the rest, no new buffer. (Otherwise the buffer is
    /// copied with the slice in it; realizing between two writes to one tensor keeps both in place.) `start` is a
    /// host position ([`Position::At`], a `usize`), which the plan cache reads as a parameter, so that writing at
    /// another position reuses the plan; or a scalar tensor on the device ([`Position::On`]), clamped to
    /// `[0, extent - len]`. The write is not recorded for autograd: gradients do not flow through it.
    ///
    /// # Panics
    /// If `dim` is out of range, `value`'s shape or dtype does not fit, a host `start + len` exceeds the axis, a
    /// device position is not an integer scalar, this tensor is tracked by autograd, or the tensors live on
    /// different devices; [`Tensor::try_write_at`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::Tensor;
    /// let cache = Tensor::zeros([1, 4, 2]);
    /// cache.realize()?;
    /// cache.write_at(1, 2, &Tensor::ones([1, 1, 2]));
    /// assert_eq!(cache.to_vec(), vec![0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
    /// # Ok::<(), lazor::Error>(())
    /// ```
    #[track_caller]
    pub fn write_at<'a>(&self, dim: impl Dim, start: impl Into<Position<'a>>, value: &Tensor) {
        ok(self.try_write_at(dim, start, value))
    }

    /// [`Tensor::write_at`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] for a `dim` out of range, a host `start + len` past the axis, a tracked tensor or a
    /// position that is not an integer scalar; [`Error::ShapeMismatch`] when `value` differs from this tensor's
    /// shape on an axis other than `dim`, is longer along it, or has another number of axes; [`Error::DType`] for
    /// another dtype; [`Error::DeviceMismatch`] across devices.
    pub fn try_write_at<'a>(&self, dim: impl Dim, start: impl Into<Position<'a>>, value: &Tensor) -> Result<()> {
        let op = "write_at";
        let d = self.axis(op, "dim", dim, 0)?;
        self.device.check_same(&value.device, op)?;
        if self.tape.is_some() {
            return Err(bad(&self.shape, "a tensor tracked by autograd cannot be written in place".into()));
        }
        if value.dtype != self.dtype {
            return Err(Error::DType {
                op,
                message: format!("the value is {}, the tensor {}", value.dtype, self.dtype),
            });
        }
        let (dims, part) = (self.shape.dims(), value.shape.dims());
        let fits =
            part.len() == dims.len() && (0..dims.len()).all(|a| part[a] == dims[a] || (a == d && part[a] < dims[a]));
        if !fits {
            return Err(Error::ShapeMismatch {
                op,
                message: format!(
                    "the value must have the tensor's shape except along axis {dim}, where it may be shorter"
                ),
                lhs: self.shape.clone(),
                rhs: value.shape.clone(),
            });
        }
        let (len, extent) = (part[d], dims[d]);
        let start = match start.into() {
            Position::At(at) => {
                if at.checked_add(len).is_none_or(|end| end > extent) {
                    let message = format!("start {at} + length {len} exceeds axis {dim} of extent {extent}");
                    return Err(bad(&self.shape, message));
                }
                Tensor::scalar_on(at as i32, &self.device)
            }
            Position::On(t) => device_start(t, &self.device)?,
        };
        // Writing a tensor over itself (whole, so at 0) changes nothing; so does writing nothing.
        if value.id == self.id || value.numel() == 0 {
            return Ok(());
        }
        self.device.state().graph.write(self.id, value.id, start.id, d);
        Ok(())
    }
}

/// A device position as the `I32` scalar of shape `[]` a write reads.
fn device_start(t: &Tensor, device: &Device) -> Result<Tensor> {
    device.check_same(&t.device, "write_at")?;
    if t.numel() != 1 || t.ndim() > 1 || !matches!(t.dtype, DType::I32 | DType::U32) {
        let message = format!("a position on the device must be an I32 or U32 scalar, not {} {}", t.dtype, t.shape);
        return Err(bad(&t.shape, message));
    }
    let at = t.detach().reshape([]);
    Ok(if at.dtype == DType::I32 { at } else { at.to_dtype(DType::I32) })
}
