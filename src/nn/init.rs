//! Parameter initialisation as PyTorch's defaults, drawn from the counter-based generator.

use crate::autograd::Var;
use crate::device::Device;
use crate::tensor::Tensor;

/// The seed of one tensor of a layer: the user's `seed` mixed with `stream` (SplitMix64's finaliser), so a
/// layer's weight and bias drawn from one seed are independent streams, and so are layers given seeds 1 and 2.
pub(crate) fn stream(seed: u64, stream: u64) -> u64 {
    let mut z = seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A parameter uniform on `[-bound, bound)`: PyTorch's `kaiming_uniform_(a = sqrt(5))` for a weight, whose bound
/// is `1 / sqrt(fan_in)`, and the default bias of `Linear`. `2u - 1` is exact, so the values are one rounding of
/// `(2u - 1) * bound`, the same bits on every backend.
pub(crate) fn uniform(shape: &[usize], bound: f32, seed: u64, device: &Device) -> Var {
    Var::new((Tensor::rand_on(shape, seed, device) * 2.0 - 1.0) * bound)
}

/// A parameter drawn from N(0, 1): PyTorch's default for `Embedding`.
pub(crate) fn normal(shape: &[usize], seed: u64, device: &Device) -> Var {
    Var::new(Tensor::randn_on(shape, seed, device))
}

/// A parameter holding `value` everywhere: `LayerNorm`'s ones and zeros.
pub(crate) fn constant(shape: &[usize], value: f32, device: &Device) -> Var {
    Var::new(Tensor::full_on(shape, value, device))
}
