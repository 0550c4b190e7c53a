//! `Conv2d`: a 2-D convolution over `[N, C, H, W]`, as `torch.nn.Conv2d`.

use super::init;
use super::module::Module;
use crate::autograd::Var;
use crate::device::Device;
use crate::tensor::Tensor;

/// A 2-D convolution layer, as `torch.nn.Conv2d` (groups 1, dilation 1, zero padding): `weight` is
/// `[c_out, c_in, kh, kw]`, `bias` `[c_out]`; the forward pass is [`Tensor::conv2d`].
///
/// Initialised as PyTorch's default: weight and bias uniform on `[-1/sqrt(fan_in), 1/sqrt(fan_in))` with
/// `fan_in = c_in * kh * kw`, drawn from `seed` with [`Tensor::rand`], so a seed gives the same weights on every
/// backend. Parameters: `weight`, `bias`.
///
/// # Examples
/// ```no_run
/// use lazor::nn::{Conv2d, Module};
/// use lazor::Tensor;
/// let conv = Conv2d::new(3, 8, (3, 3), (1, 1), (1, 1), 7);
/// let y = conv.forward(&Tensor::ones([2, 3, 16, 16]));
/// assert_eq!(y.shape(), &[2, 8, 16, 16]);
/// ```
pub struct Conv2d {
    /// The kernels, `[c_out, c_in, kh, kw]`.
    pub weight: Var,
    /// The bias, `[c_out]`.
    pub bias: Var,
    /// Steps between windows, `(rows, columns)`.
    pub stride: (usize, usize),
    /// Zeros added on each side, `(rows, columns)`.
    pub padding: (usize, usize),
}

impl Conv2d {
    /// A layer from `c_in` to `c_out` channels with `kernel` `(kh, kw)`, `stride` and `padding` (each
    /// `(rows, columns)`) on the default device, initialised from `seed`.
    pub fn new(
        c_in: usize,
        c_out: usize,
        kernel: (usize, usize),
        stride: (usize, usize),
        padding: (usize, usize),
        seed: u64,
    ) -> Conv2d {
        Conv2d::new_on(c_in, c_out, kernel, stride, padding, seed, &Device::default())
    }

    /// [`Conv2d::new`] on `device`.
    pub fn new_on(
        c_in: usize,
        c_out: usize,
        kernel: (usize, usize),
        stride: (usize, usize),
        padding: (usize, usize),
        seed: u64,
        device: &Device,
    ) -> Conv2d {
        let fan_in = c_in * kernel.0 * kernel.1;
        let bound = if fan_in == 0 { 0.0 } else { 1.0 / (fan_in as f32).sqrt() };
        Conv2d {
            weight: init::uniform(&[c_out, c_in, kernel.0, kernel.1], bound, init::stream(seed, 0), device),
            bias: init::uniform(&[c_out], bound, init::stream(seed, 1), device),
            stride,
            padding,
        }
    }
}

impl Module for Conv2d {
    /// The convolution of `x` (`[N, c_in, H, W]`) with the bias added, `[N, c_out, OH, OW]`.
    ///
    /// # Panics
    /// As [`Tensor::conv2d`]: `x` is not 4-D with `c_in` channels, or the kernel does not fit the padded input.
    fn forward(&self, x: &Tensor) -> Tensor {
        x.conv2d(&self.weight, Some(&self.bias), self.stride, self.padding)
    }

    fn parameters(&self) -> Vec<(String, Var)> {
        vec![("weight".to_string(), self.weight.clone()), ("bias".to_string(), self.bias.clone())]
    }
}
