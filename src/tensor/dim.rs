//! Axis arguments: a `usize`, or a negative integer counting from the end as in NumPy and PyTorch.

/// An axis argument: `usize` counts from the front; a negative `i32`, `i64` or `isize` counts from the end
/// (`-1` is the last axis).
///
/// # Examples
/// ```no_run
/// let x = lazor::Tensor::zeros([2, 3, 4]);
/// assert_eq!(x.transpose(-2, -1).shape(), &[2, 4, 3]);
/// assert_eq!(x.narrow(2usize, 1, 2).shape(), &[2, 3, 2]);
/// ```
pub trait Dim: Copy + std::fmt::Display {
    /// The axis among `ndim` axes, or `None` when out of range.
    fn resolve(self, ndim: usize) -> Option<usize>;
}

impl Dim for usize {
    fn resolve(self, ndim: usize) -> Option<usize> {
        (self < ndim).then_some(self)
    }
}

macro_rules! signed_dim {
    ($($t:ty),*) => {$(
        impl Dim for $t {
            fn resolve(self, ndim: usize) -> Option<usize> {
                let n = ndim as i64;
                let d = self as i64;
                let d = if d < 0 { d + n } else { d };
                (0..n).contains(&d).then_some(d as usize)
            }
        }
    )*};
}

signed_dim!(i32, i64, isize);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_dims_count_from_the_end() {
        assert_eq!((-1).resolve(3), Some(2));
        assert_eq!((-3).resolve(3), Some(0));
        assert_eq!((-4).resolve(3), None);
        assert_eq!(3usize.resolve(3), None);
        assert_eq!(2i64.resolve(3), Some(2));
        assert_eq!(0.resolve(0), None);
    }
}
