//! Convolution and pooling over `[N, C, H, W]` (pooling also `[C, H, W]`), built from views, a matrix product and
//! folds: `pad` and two `unfold`s give every window without copying, `conv2d` multiplies the windows by the weight
//! (the bias in the product's epilogue), and the pools fold over the window's two axes. Gradients come from the
//! rules of those ops, plus one for the windowed maximum (ties share, as `max` does).

use crate::autograd::{record, Rule};
use crate::error::ok;
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::tensor::{autocast, Tensor};

fn bad(op: &'static str, shape: &Shape, message: String) -> Error {
    Error::BadArgument { op, message, shape: shape.clone() }
}

impl Tensor {
    /// The 2-D convolution (cross-correlation, as `torch.nn.functional.conv2d`) of this `[N, C, H, W]` input with
    /// `weight` `[O, C, kh, kw]`, plus `bias` `[O]` when given; `stride` and `padding` (zeros) are `(along H,
    /// along W)`. The result is `[N, O, OH, OW]` with `OH = (H + 2 ph - kh) / sh + 1`, and likewise `OW`.
    ///
    /// Lowered to a matrix product: the input padded (a concatenation with zeros) and cut into windows by two
    /// `unfold`s (views), laid out as `[N, C kh kw, OH OW]` (one copy, the im2col matrix), multiplied by the weight
    /// as `[O, C kh kw]`, the bias added in the product's epilogue. Gradients follow from those ops' rules.
    ///
    /// # Panics
    /// If the input is not 4-D, the weight is not 4-D with the input's channels, the bias is not `[O]`, a stride
    /// is 0, the kernel is larger than the padded input, the types are not float, or the tensors live on
    /// different devices; [`Tensor::try_conv2d`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::Tensor;
    /// let x = Tensor::ones([1, 2, 5, 5]);
    /// let w = Tensor::ones([3, 2, 3, 3]);
    /// let y = x.conv2d(&w, None, (1, 1), (1, 1));
    /// assert_eq!(y.shape(), &[1, 3, 5, 5]);
    /// assert_eq!(y.to_vec()[6], 18.0); // an inner pixel: 2 channels x 9 taps
    /// ```
    #[track_caller]
    pub fn conv2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        stride: (usize, usize),
        padding: (usize, usize),
    ) -> Tensor {
        ok(self.try_conv2d(weight, bias, stride, padding))
    }

    /// [`Tensor::conv2d`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] for an input that is not 4-D or a stride of 0; [`Error::ShapeMismatch`] naming the
    /// input's and the weight's (or bias's) shapes when they do not fit together or the kernel exceeds the padded
    /// input; [`Error::DType`] for non-float operands; [`Error::DeviceMismatch`] across devices.
    pub fn try_conv2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        stride: (usize, usize),
        padding: (usize, usize),
    ) -> Result<Tensor> {
        if let Some([x, w]) = autocast::half_operands([self, weight]) {
            let b = bias.map(|b| autocast::cast_half(b, w.dtype));
            return autocast::suspended(|| x.try_conv2d(&w, b.as_ref(), stride, padding));
        }
        let op = "conv2d";
        self.device.check_same(&weight.device, op)?;
        if let Some(b) = bias {
            self.device.check_same(&b.device, op)?;
        }
        if self.ndim() != 4 {
            return Err(bad(op, &self.shape, format!("the input must be [N, C, H, W], not {} axes", self.ndim())));
        }
        let mismatch = |message: String, other: &Tensor| Error::ShapeMismatch {
            op,
            message,
            lhs: self.shape.clone(),
            rhs: other.shape.clone(),
        };
        if weight.ndim() != 4 {
            return Err(mismatch("the weight must be [O, C, kh, kw]".into(), weight));
        }
        let [n, c, h, w] = self.shape.dims().try_into().expect("4 axes");
        let [o, wc, kh, kw] = weight.shape.dims().try_into().expect("4 axes");
        if wc != c {
            return Err(mismatch(format!("the input has {c} channels, the weight {wc}"), weight));
        }
        if let Some(b) = bias.filter(|b| b.shape.dims() != [o]) {
            return Err(mismatch(format!("the bias must be [{o}], one per output channel"), b));
        }
        let ((sh, sw), (ph, pw)) = (stride, padding);
        if sh == 0 || sw == 0 {
            return Err(bad(op, &self.shape, format!("stride ({sh}, {sw}) must be at least 1 along both axes")));
        }
        let (hp, wp) = (h + 2 * ph, w + 2 * pw);
        if kh > hp || kw > wp {
            return Err(mismatch(
                format!("the {kh} x {kw} kernel exceeds the padded input's {hp} x {wp} (padding ({ph}, {pw}))"),
                weight,
            ));
        }
        let (oh, ow) = ((hp - kh) / sh + 1, (wp - kw) / sw + 1);
        let k = c * kh * kw;
        // [N, C, OH, OW, kh, kw] as [N, C kh kw, OH OW]: a view until the product reads it, which stores it once.
        let cols = self
            .try_pad(&[(pw, pw), (ph, ph)], 0.0)?
            .try_unfold(2, kh, sh)?
            .try_unfold(3, kw, sw)?
            .permute([0, 1, 4, 5, 2, 3])
            .reshape([n, k, oh * ow]);
        let mut y = weight.reshape([o, k]).try_matmul(&cols)?;
        if let Some(b) = bias {
            y = y.try_add(&b.reshape([o, 1]))?;
        }
        Ok(y.reshape([n, o, oh, ow]))
    }

    /// 2-D max pooling over the last two axes of a `[N, C, H, W]` or `[C, H, W]` tensor, as
    /// `torch.nn.functional.max_pool2d` without padding: the maximum of each `kernel` window (`(kh, kw)`) every
    /// `stride`, NaN where a window holds one. The windows are views (`unfold`); the maximum is two folds. The
    /// gradient goes to the maxima of each window, split evenly among ties, as [`Tensor::max`] splits it.
    ///
    /// # Panics
    /// If the tensor is not 3-D or 4-D, a kernel side or stride is 0, or the kernel exceeds the input;
    /// [`Tensor::try_max_pool2d`] returns the error instead.
    #[track_caller]
    pub fn max_pool2d(&self, kernel: (usize, usize), stride: (usize, usize)) -> Tensor {
        ok(self.try_max_pool2d(kernel, stride))
    }

    /// [`Tensor::max_pool2d`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if the tensor is not 3-D or 4-D, a kernel side or stride is 0, or the kernel exceeds
    /// the input.
    pub fn try_max_pool2d(&self, kernel: (usize, usize), stride: (usize, usize)) -> Result<Tensor> {
        let windows = self.pool_windows("max_pool2d", kernel, stride)?;
        // The maximum over the window's two axes, folded from the untracked windows; the rule below splits the
        // gradient among every tied element of a window (two nested `max` rules would halve it row by row).
        let y = windows.detach().try_max(-1)?.try_max(-1)?;
        Ok(record(y, &[&windows], |y| Rule::WindowMax { axes: 2, x: windows.saved(), y }))
    }

    /// 2-D average pooling over the last two axes of a `[N, C, H, W]` or `[C, H, W]` tensor, as
    /// `torch.nn.functional.avg_pool2d` without padding: the mean of each `kernel` window every `stride`
    /// (integers average in f32). The windows are views; the sum is two folds, the division fused after them.
    ///
    /// # Panics
    /// As [`Tensor::max_pool2d`]; [`Tensor::try_avg_pool2d`] returns the error instead.
    #[track_caller]
    pub fn avg_pool2d(&self, kernel: (usize, usize), stride: (usize, usize)) -> Tensor {
        ok(self.try_avg_pool2d(kernel, stride))
    }

    /// [`Tensor::avg_pool2d`], returning an error instead of panicking.
    ///
    /// # Errors
    /// As [`Tensor::try_max_pool2d`].
    pub fn try_avg_pool2d(&self, kernel: (usize, usize), stride: (usize, usize)) -> Result<Tensor> {
        let windows = self.pool_windows("avg_pool2d", kernel, stride)?;
        let (x, out) = windows.float_math();
        let sum = x.try_sum(-1)?.try_sum(-1)?;
        Ok((sum * (1.0 / (kernel.0 * kernel.1) as f32)).cast_to(out))
    }

    /// The pooling windows of the last two axes, `[.., OH, OW, kh, kw]`, after checking the arguments.
    fn pool_windows(&self, op: &'static str, kernel: (usize, usize), stride: (usize, usize)) -> Result<Tensor> {
        let r = self.ndim();
        if r != 3 && r != 4 {
            return Err(bad(op, &self.shape, format!("the input must be [N, C, H, W] or [C, H, W], not {r} axes")));
        }
        let ((kh, kw), (sh, sw)) = (kernel, stride);
        if kh == 0 || kw == 0 || sh == 0 || sw == 0 {
            return Err(bad(
                op,
                &self.shape,
                format!("kernel ({kh}, {kw}) and stride ({sh}, {sw}) must be at least 1"),
            ));
        }
        let (h, w) = (self.shape.dims()[r - 2], self.shape.dims()[r - 1]);
        if kh > h || kw > w {
            return Err(bad(op, &self.shape, format!("the {kh} x {kw} kernel exceeds the {h} x {w} input")));
        }
        self.try_unfold(r - 2, kh, sh)?.try_unfold(r - 1, kw, sw)
    }
}
