//! Shapes, the broadcasting rule and the stride arithmetic that every view and kernel index is built from.

use smallvec::SmallVec;
use std::fmt;

/// The extent of each axis of a tensor, outermost first. `[]` is a scalar.
///
/// Built from an array, a slice or a `Vec` of `usize`, so every constructor takes `impl Into<Shape>`.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(SmallVec<[usize; 4]>);

impl Shape {
    /// The axes' extents.
    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    /// Number of axes.
    pub fn ndim(&self) -> usize {
        self.0.len()
    }

    /// Number of elements: the product of the extents (1 for a scalar, 0 if any axis is 0).
    pub fn numel(&self) -> usize {
        self.0.iter().product()
    }

    /// Row-major strides, in elements, of a contiguous tensor of this shape.
    pub fn contiguous_strides(&self) -> SmallVec<[usize; 4]> {
        let mut strides: SmallVec<[usize; 4]> = SmallVec::from_elem(0, self.0.len());
        let mut acc = 1;
        for (s, &d) in strides.iter_mut().zip(&self.0).rev() {
            *s = acc;
            acc *= d;
        }
        strides
    }

    /// The shape two operands broadcast to under NumPy's rule (align on the right; each pair of extents must be
    /// equal or contain a 1), or `None` when they cannot.
    pub fn broadcast(&self, other: &Shape) -> Option<Shape> {
        // Most operands of an elementwise op already agree, or one is a scalar constant.
        if self == other || other.ndim() == 0 {
            return Some(self.clone());
        }
        if self.ndim() == 0 {
            return Some(other.clone());
        }
        let n = self.ndim().max(other.ndim());
        let mut out: SmallVec<[usize; 4]> = SmallVec::with_capacity(n);
        for i in 0..n {
            let a = self.dim_from_right(n - 1 - i);
            let b = other.dim_from_right(n - 1 - i);
            out.push(match (a, b) {
                (a, b) if a == b => a,
                (1, b) => b,
                (a, 1) => a,
                _ => return None,
            });
        }
        Some(Shape(out))
    }

    /// The strides, in elements and one per axis of `target`, with which a contiguous tensor of this shape is read
    /// when broadcast to `target`: broadcast axes get stride 0.
    ///
    /// # Panics
    /// If this shape does not broadcast to `target` (callers check with [`Shape::broadcast`] first).
    pub fn broadcast_strides(&self, target: &Shape) -> SmallVec<[usize; 4]> {
        assert!(self.ndim() <= target.ndim(), "broadcast_strides: {self:?} -> {target:?}");
        let own = self.contiguous_strides();
        let lead = target.ndim() - self.ndim();
        let mut out: SmallVec<[usize; 4]> = SmallVec::from_elem(0, target.ndim());
        for (i, (&d, &s)) in self.0.iter().zip(&own).enumerate() {
            let t = target.0[lead + i];
            assert!(d == t || d == 1, "broadcast_strides: {self:?} -> {target:?}");
            out[lead + i] = if d == t && d != 1 { s } else { 0 };
        }
        out
    }

    /// Extent of the axis `i` places from the right, 1 past the left end (the implicit leading axes of broadcasting).
    fn dim_from_right(&self, i: usize) -> usize {
        if i < self.ndim() {
            self.0[self.ndim() - 1 - i]
        } else {
            1
        }
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0.as_slice())
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(dims: [usize; N]) -> Self {
        Shape(SmallVec::from_slice(&dims))
    }
}

impl From<&[usize]> for Shape {
    fn from(dims: &[usize]) -> Self {
        Shape(SmallVec::from_slice(dims))
    }
}

impl<const N: usize> From<&[usize; N]> for Shape {
    fn from(dims: &[usize; N]) -> Self {
        Shape(SmallVec::from_slice(dims))
    }
}

impl From<Vec<usize>> for Shape {
    fn from(dims: Vec<usize>) -> Self {
        Shape(SmallVec::from_vec(dims))
    }
}

impl From<&Vec<usize>> for Shape {
    fn from(dims: &Vec<usize>) -> Self {
        Shape(SmallVec::from_slice(dims))
    }
}

impl From<&Shape> for Shape {
    fn from(s: &Shape) -> Self {
        s.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_follows_numpy() {
        let s = |d: &[usize]| Shape::from(d);
        assert_eq!(s(&[2, 3]).broadcast(&s(&[3])), Some(s(&[2, 3])));
        assert_eq!(s(&[4, 1, 5]).broadcast(&s(&[3, 1])), Some(s(&[4, 3, 5])));
        assert_eq!(s(&[]).broadcast(&s(&[7])), Some(s(&[7])));
        assert_eq!(s(&[0, 3]).broadcast(&s(&[1, 3])), Some(s(&[0, 3])));
        assert_eq!(s(&[0]).broadcast(&s(&[1])), Some(s(&[0])));
        assert_eq!(s(&[2, 3]).broadcast(&s(&[2])), None);
        assert_eq!(s(&[0]).broadcast(&s(&[2])), None);
    }

    #[test]
    fn strides() {
        let s = Shape::from([2, 3, 4]);
        assert_eq!(s.contiguous_strides().as_slice(), &[12, 4, 1]);
        assert_eq!(Shape::from([3, 1]).broadcast_strides(&Shape::from([2, 3, 4])).as_slice(), &[0, 1, 0]);
        assert_eq!(Shape::from([4]).broadcast_strides(&s).as_slice(), &[0, 0, 1]);
        assert_eq!(Shape::from([]).numel(), 1);
        assert_eq!(Shape::from([3, 0]).numel(), 0);
    }
}
