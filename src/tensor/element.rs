//! `Element`: the Rust types a tensor can be built from and read back as, one per [`DType`].

use crate::dtype::DType;
use half::{bf16, f16};

mod sealed {
    pub trait Sealed {}
}

/// A Rust type holding one element of a [`DType`]: `f32`, `half::f16`, `half::bf16`, `i32`, `u32` and `bool`.
/// Sealed: lazor's kernels know these types only.
///
/// # Examples
/// ```no_run
/// use lazor::{DType, Tensor};
/// let t = Tensor::from_vec(vec![1i32, 2, 3], [3]);
/// assert_eq!(t.dtype(), DType::I32);
/// assert_eq!((t * 2i32).to_vec_as::<i32>(), vec![2, 4, 6]);
/// ```
pub trait Element: Copy + Send + Sync + std::fmt::Debug + 'static + sealed::Sealed {
    /// The dtype of tensors of this element.
    const DTYPE: DType;

    /// The value as a 32-bit lane (see [`DType`]'s module docs).
    #[doc(hidden)]
    fn to_lane(self) -> u32;

    /// The value of a lane of this type.
    #[doc(hidden)]
    fn from_lane(lane: u32) -> Self;

    /// `values` as the words a buffer of this type holds.
    #[doc(hidden)]
    fn into_words(values: Vec<Self>) -> Vec<u32> {
        let lanes: Vec<u32> = values.into_iter().map(Self::to_lane).collect();
        Self::DTYPE.encode(&lanes)
    }

    /// The first `n` elements of a buffer's words.
    #[doc(hidden)]
    fn from_words(words: Vec<u32>, n: usize) -> Vec<Self> {
        (0..n).map(|i| Self::from_lane(Self::DTYPE.load(&words, i))).collect()
    }
}

/// The 32-bit types are stored as they are: moving a `Vec` in or out is a cast, not a copy.
macro_rules! word_element {
    ($($t:ty => $d:ident;)*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            fn to_lane(self) -> u32 {
                bytemuck::cast(self)
            }
            fn from_lane(lane: u32) -> Self {
                bytemuck::cast(lane)
            }
            fn into_words(values: Vec<Self>) -> Vec<u32> {
                bytemuck::allocation::cast_vec(values)
            }
            fn from_words(mut words: Vec<u32>, n: usize) -> Vec<Self> {
                words.truncate(n);
                bytemuck::allocation::cast_vec(words)
            }
        }
    )*};
}

word_element! {
    f32 => F32;
    i32 => I32;
    u32 => U32;
}

impl sealed::Sealed for f16 {}
impl Element for f16 {
    const DTYPE: DType = DType::F16;
    fn to_lane(self) -> u32 {
        self.to_f32().to_bits()
    }
    fn from_lane(lane: u32) -> Self {
        f16::from_f32(f32::from_bits(lane))
    }
}

impl sealed::Sealed for bf16 {}
impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_lane(self) -> u32 {
        self.to_f32().to_bits()
    }
    fn from_lane(lane: u32) -> Self {
        bf16::from_f32(f32::from_bits(lane))
    }
}

impl sealed::Sealed for bool {}
impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn to_lane(self) -> u32 {
        self as u32
    }
    fn from_lane(lane: u32) -> Self {
        lane != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Element + PartialEq>(values: Vec<T>) {
        let n = values.len();
        let words = T::into_words(values.clone());
        assert_eq!(words.len() as u64 * 4, T::DTYPE.bytes(n));
        assert_eq!(T::from_words(words, n), values);
    }

    #[test]
    fn every_element_round_trips_through_words() {
        round_trip(vec![1.5f32, -0.0, f32::INFINITY]);
        round_trip(vec![i32::MIN, -1, 0, 7, i32::MAX]);
        round_trip(vec![0u32, u32::MAX, 9]);
        round_trip(vec![f16::from_f32(1.5), f16::MAX, f16::from_f32(-2.0)]);
        round_trip(vec![bf16::from_f32(3.0), bf16::MIN, bf16::from_f32(0.5), bf16::ONE, bf16::ZERO]);
        round_trip(vec![true, false, true, true, false]);
    }
}
