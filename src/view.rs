//! Strided views: how coordinates of one shape land in the row-major index space of another, and how views compose.
//!
//! A [`View`] says: the element at coordinates `c` of `shape` lives at `offset + sum(c[d] * strides[d])` of an
//! underlying linear space (a buffer, or the row-major order of another node). Every movement op (reshape, permute,
//! narrow, expand, squeeze, unsqueeze) and every broadcast is one; chains of them compose into one, so a kernel
//! reads any chain of views with one stride vector and one offset.

use crate::shape::Shape;
use smallvec::SmallVec;

/// Signed strides, one per axis.
pub type Strides = SmallVec<[isize; 4]>;

/// A strided view of a linear index space. Strides are signed so that views may run backwards; offsets are signed
/// so that a part of a concatenation can be addressed relative to its own start.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct View {
    /// The coordinates' extents.
    pub shape: Shape,
    /// Elements to step in the underlying space per step along each axis.
    pub strides: Strides,
    /// Where coordinate zero lands.
    pub offset: isize,
}

/// Row-major strides of `shape`, signed.
pub fn contiguous_strides(shape: &Shape) -> Strides {
    shape.contiguous_strides().iter().map(|&s| s as isize).collect()
}

impl View {
    /// The row-major view of a tensor of `shape`: coordinates map to their own row-major index.
    pub fn contiguous(shape: &Shape) -> View {
        View { shape: shape.clone(), strides: contiguous_strides(shape), offset: 0 }
    }

    /// A contiguous tensor of shape `from` read as the larger shape `to` by NumPy's broadcasting (stride 0 on the
    /// axes it is repeated along).
    ///
    /// # Panics
    /// If `from` does not broadcast to `to` (callers check the shapes first).
    pub fn broadcast(from: &Shape, to: &Shape) -> View {
        let strides = from.broadcast_strides(to).iter().map(|&s| s as isize).collect();
        View { shape: to.clone(), strides, offset: 0 }
    }

    /// Whether the view reads the underlying space in row-major order from its start: a plain reinterpretation of
    /// the shape. Strides of axes of extent 1 do not matter.
    pub fn is_contiguous(&self) -> bool {
        if self.shape.numel() == 0 {
            return true;
        }
        if self.offset != 0 {
            return false;
        }
        // Row-major strides, from the last axis, compared as they are made: this runs for every view built.
        let mut row_major = 1;
        for (&d, &s) in self.shape.dims().iter().zip(&self.strides).rev() {
            if d != 1 && s != row_major {
                return false;
            }
            row_major *= d as isize;
        }
        true
    }

    /// The view after applying `self` to the row-major space of `inner.shape`, then `inner`: one view from
    /// `self.shape` straight into `inner`'s underlying space. `None` when no single stride vector does it, as when
    /// merging two axes of which one is broadcast; the caller then stores the intermediate.
    pub fn compose(&self, inner: &View) -> Option<View> {
        if self.is_contiguous() && self.shape.numel() == inner.shape.numel() && self.shape == inner.shape {
            return Some(inner.clone());
        }
        if inner.is_contiguous() {
            let mut v = self.clone();
            v.offset += inner.offset;
            return Some(v);
        }
        if self.shape.numel() == 0 {
            return Some(View {
                shape: self.shape.clone(),
                strides: Strides::from_elem(0, self.shape.ndim()),
                offset: 0,
            });
        }
        // Merge the inner view's axes where its strides allow (its row-major order is unchanged by merging), so that
        // an outer axis may run across several inner axes at once.
        let mut dims: SmallVec<[usize; 4]> = SmallVec::new();
        let mut strides = Strides::new();
        for (&d, &s) in inner.shape.dims().iter().zip(&inner.strides) {
            if d == 1 {
                continue;
            }
            match (dims.last_mut(), strides.last_mut()) {
                (Some(ld), Some(ls)) if *ls == s * d as isize => {
                    *ld *= d;
                    *ls = s;
                }
                _ => {
                    dims.push(d);
                    strides.push(s);
                }
            }
        }
        let merged = Shape::from(dims.to_vec());
        let coords = self.coords_in(&merged)?;
        let mut out =
            View { shape: self.shape.clone(), strides: Strides::from_elem(0, self.shape.ndim()), offset: inner.offset };
        for (j, &o) in coords.origin.iter().enumerate() {
            out.offset += o * strides[j];
        }
        for (d, m) in coords.axes.iter().enumerate() {
            if let Some((j, mult)) = *m {
                out.strides[d] = mult * strides[j];
            }
        }
        Some(out)
    }

    /// Splits this view of the row-major space of `target` into per-axis coordinates of `target`: each axis of the
    /// view moves along one axis of `target` with a multiplier, from an origin. `None` when some step carries from
    /// one axis of `target` into the next (then no per-axis form exists). The outermost axis may run out of range,
    /// which only matters where the view is never read (a part of a concatenation addressed from its own start).
    pub fn coords_in(&self, target: &Shape) -> Option<Coords> {
        let n = target.ndim();
        let dims = target.dims();
        let cs = contiguous_strides(target);
        let mut origin: Strides = Strides::from_elem(0, n);
        let mut rest = self.offset;
        for j in (1..n).rev() {
            let d = dims[j] as isize;
            origin[j] = rest.rem_euclid(d);
            rest = rest.div_euclid(d);
        }
        if n > 0 {
            origin[0] = rest;
        } else if rest != 0 {
            return None;
        }
        let mut axes: SmallVec<[Option<(usize, isize)>; 4]> = SmallVec::new();
        // The least and greatest coordinate each target axis reaches: a negative multiplier (a flip) runs down from
        // the origin, several axes on one target axis (an unfold's windows) add up.
        let (mut low, mut reach): (Strides, Strides) = (origin.clone(), origin.clone());
        for (&extent, &s) in self.shape.dims().iter().zip(&self.strides) {
            if extent <= 1 || s == 0 {
                axes.push(None);
                continue;
            }
            let j = (0..n).find(|&j| cs[j] <= s.abs())?;
            if s % cs[j] != 0 {
                return None;
            }
            let mult = s / cs[j];
            let span = mult * (extent as isize - 1);
            if span < 0 {
                low[j] += span;
            } else {
                reach[j] += span;
            }
            axes.push(Some((j, mult)));
        }
        if (1..n).any(|j| low[j] < 0 || reach[j] >= dims[j] as isize) {
            return None;
        }
        Some(Coords { axes, origin })
    }

    /// The view with its axes reordered: axis `d` of the result is axis `dims[d]` of this one.
    pub fn permute(&self, dims: &[usize]) -> View {
        View {
            shape: dims.iter().map(|&d| self.shape.dims()[d]).collect::<Vec<_>>().into(),
            strides: dims.iter().map(|&d| self.strides[d]).collect(),
            offset: self.offset,
        }
    }

    /// Axis `dim` limited to `start..start + len`.
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> View {
        let mut v = self.clone();
        let mut dims = v.shape.dims().to_vec();
        dims[dim] = len;
        v.shape = dims.into();
        if len > 0 {
            v.offset += start as isize * self.strides[dim];
        }
        v
    }

    /// The view broadcast to `to` (which it must broadcast to): new leading axes and stretched size-1 axes get
    /// stride 0.
    pub fn expand(&self, to: &Shape) -> View {
        let lead = to.ndim() - self.shape.ndim();
        let mut strides = Strides::from_elem(0, to.ndim());
        for (i, (&d, &s)) in self.shape.dims().iter().zip(&self.strides).enumerate() {
            strides[lead + i] = if d == to.dims()[lead + i] { s } else { 0 };
        }
        View { shape: to.clone(), strides, offset: self.offset }
    }

    /// A new axis of extent 1 at `dim`.
    pub fn unsqueeze(&self, dim: usize) -> View {
        let mut dims = self.shape.dims().to_vec();
        dims.insert(dim, 1);
        let mut strides = self.strides.clone();
        strides.insert(dim, 0);
        View { shape: dims.into(), strides, offset: self.offset }
    }

    /// Axis `dim` (of extent 1) removed.
    pub fn squeeze(&self, dim: usize) -> View {
        let mut dims = self.shape.dims().to_vec();
        dims.remove(dim);
        let mut strides = self.strides.clone();
        strides.remove(dim);
        View { shape: dims.into(), strides, offset: self.offset }
    }

    /// The same elements in row-major order under a new shape with as many elements, when strides allow it
    /// (`None` otherwise, and the caller makes the source contiguous first).
    pub fn reshape(&self, to: &Shape) -> Option<View> {
        View::contiguous(to).compose(self)
    }
}

/// A view split into per-axis coordinates of a target shape: see [`View::coords_in`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coords {
    /// For each axis of the view: the target axis it moves along and by how much per step (`None`: it does not
    /// move, its extent is 1 or its stride 0).
    pub axes: SmallVec<[Option<(usize, isize)>; 4]>,
    /// The target coordinates of the view's first element.
    pub origin: Strides,
}

/// The elements of `values` (row-major) that `view` selects, row-major.
pub fn gather<T: Copy>(values: &[T], view: &View) -> Vec<T> {
    let dims = view.shape.dims();
    (0..view.shape.numel())
        .map(|mut i| {
            let mut at = view.offset;
            for d in (0..dims.len()).rev() {
                at += (i % dims[d]) as isize * view.strides[d];
                i /= dims[d];
            }
            values[at as usize]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(shape: &[usize], strides: &[isize], offset: isize) -> View {
        View { shape: Shape::from(shape), strides: strides.iter().copied().collect(), offset }
    }

    /// Every element of `outer` composed with `inner`, computed the slow way (row-major index, unravel, inner).
    fn brute(outer: &View, inner: &View) -> Vec<isize> {
        let n = outer.shape.numel();
        let dims = outer.shape.dims();
        let idims = inner.shape.dims();
        (0..n)
            .map(|mut i| {
                let mut lin = outer.offset;
                for d in (0..dims.len()).rev() {
                    lin += (i % dims[d]) as isize * outer.strides[d];
                    i /= dims[d];
                }
                let mut at = inner.offset;
                for j in (0..idims.len()).rev() {
                    at += (lin % idims[j] as isize) * inner.strides[j];
                    lin /= idims[j] as isize;
                }
                at
            })
            .collect()
    }

    fn direct(view: &View) -> Vec<isize> {
        brute(view, &View::contiguous(&Shape::from([1usize << 20])))
    }

    #[test]
    fn composing_matches_the_slow_way() {
        let a = View::contiguous(&Shape::from([4, 6]));
        let t = a.permute(&[1, 0]);
        let cases = [
            (View::contiguous(&Shape::from([24])), t.clone(), false),
            (View::contiguous(&Shape::from([6, 2, 2])), t.clone(), true),
            (View::contiguous(&Shape::from([2, 3, 4])), t.clone(), true),
            (View::contiguous(&Shape::from([2, 12])), a.clone(), true),
            (View::contiguous(&Shape::from([3, 1, 8])), a.narrow(1, 0, 6), true),
            (v(&[2, 3], &[6, 1], 7), View::broadcast(&Shape::from([6]), &Shape::from([4, 6])), true),
            (v(&[6], &[1], 0), View::broadcast(&Shape::from([3]), &Shape::from([2, 3])), false),
            (v(&[3, 2], &[1, 3], 0), View::broadcast(&Shape::from([3]), &Shape::from([2, 3])), true),
        ];
        for (k, (outer, inner, ok)) in cases.iter().enumerate() {
            let got = outer.compose(inner);
            assert_eq!(got.is_some(), *ok, "case {k}: {outer:?} over {inner:?}");
            if let Some(c) = got {
                assert_eq!(direct(&c), brute(outer, inner), "case {k}");
            }
        }
    }

    #[test]
    fn negative_and_overlapping_strides_compose() {
        let a = View::contiguous(&Shape::from([4, 6]));
        let t = a.permute(&[1, 0]);
        // A flip of each axis of [6, 4] (the transpose's shape), of both, and of a narrowed transpose.
        let flip0 = v(&[6, 4], &[-4, 1], 20);
        let flip1 = v(&[6, 4], &[4, -1], 3);
        let both = v(&[6, 4], &[-4, -1], 23);
        let flip_narrow = v(&[2, 4], &[-4, 1], 12);
        // Windows of 3 every 2 along the last axis of [4, 6] (an unfold), and of the transpose's last axis.
        let unfold = v(&[4, 2, 3], &[6, 2, 1], 0);
        let unfold_t = v(&[6, 1, 3], &[4, 2, 1], 1);
        for (k, (outer, inner)) in [
            (flip0, t.clone()),
            (flip1, t.clone()),
            (both.clone(), t.clone()),
            (flip_narrow, t.clone()),
            (unfold, a.clone()),
            (unfold_t, t.clone()),
            (v(&[3, 2, 4], &[8, 4, 1], 0), both.compose(&t).unwrap()),
            (v(&[4, 6], &[-6, -1], 23), a.narrow(0, 0, 4)),
        ]
        .iter()
        .enumerate()
        {
            let c = outer.compose(inner).unwrap_or_else(|| panic!("case {k}: {outer:?} over {inner:?}"));
            assert_eq!(direct(&c), brute(outer, inner), "case {k}");
        }
        // Flipping twice is the identity.
        let twice = both.compose(&v(&[6, 4], &[-4, -1], 23)).unwrap();
        assert_eq!(twice, View::contiguous(&Shape::from([6, 4])));
        // A flip that would run past the start of an inner axis does not split.
        assert!(v(&[3], &[-1], 1).coords_in(&Shape::from([2, 2])).is_none());
    }

    #[test]
    fn reshape_is_free_only_when_strides_allow() {
        let t = View::contiguous(&Shape::from([4, 6])).permute(&[1, 0]);
        assert!(t.reshape(&Shape::from([24])).is_none(), "merging transposed axes needs a copy");
        let split = t.reshape(&Shape::from([3, 2, 4])).expect("splitting an axis is free");
        assert_eq!(split.strides.as_slice(), &[2, 1, 6]);
        let n = View::contiguous(&Shape::from([4, 6])).narrow(0, 1, 2);
        assert_eq!(n.reshape(&Shape::from([12])).unwrap(), v(&[12], &[1], 6));
    }

    #[test]
    fn coordinates_may_start_before_the_target() {
        // Part 2 of a concatenation along axis 0, addressed from its own start: valid where the outer axis >= 2.
        let c = v(&[5, 3], &[3, 1], -6).coords_in(&Shape::from([3, 3])).unwrap();
        assert_eq!(c.origin.as_slice(), &[-2, 0]);
        assert_eq!(c.axes.as_slice(), &[Some((0, 1)), Some((1, 1))]);
    }

    #[test]
    fn movement_ops() {
        let a = View::contiguous(&Shape::from([2, 3]));
        assert_eq!(a.unsqueeze(1), v(&[2, 1, 3], &[3, 0, 1], 0));
        assert_eq!(a.unsqueeze(1).squeeze(1), a);
        assert_eq!(a.expand(&Shape::from([4, 2, 3])), v(&[4, 2, 3], &[0, 3, 1], 0));
        assert_eq!(a.narrow(1, 1, 2), v(&[2, 2], &[3, 1], 1));
        assert!(a.is_contiguous() && !a.permute(&[1, 0]).is_contiguous());
        assert!(v(&[1, 3], &[99, 1], 0).is_contiguous());
    }
}
