//! Masks and their kin: `tril`, `triu`, `masked_fill`, `pad` and `cumsum`, each built from lazy ops that fuse into
//! their consumers (index comparisons and `where_cond`, concatenations with constants, folds) rather than kernels
//! of their own. `flip` and `unfold`, which are views, live with the other views.

use crate::autograd::{record, Rule};
use crate::dtype::DType;
use crate::error::ok;
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::tensor::dim::Dim;
use crate::tensor::Tensor;

/// Axes of at most this many elements are prefix-summed by one triangular fold.
const SCAN_DIRECT: usize = 128;

/// Longer axes are cut into blocks of this many elements (see [`Tensor::cumsum`]).
const SCAN_BLOCK: usize = 64;

fn bad(op: &'static str, shape: &Shape, message: String) -> Error {
    Error::BadArgument { op, message, shape: shape.clone() }
}

impl Tensor {
    /// `value` (an f32, converted with Rust's `as` rules) as a tensor of shape `[]` of this tensor's type.
    fn filler(&self, value: f32) -> Tensor {
        Tensor::full_lane([], self.dtype.cast_lane(DType::F32, value.to_bits()), self.dtype, &self.device)
    }

    /// The lower triangle of the last two axes (batched over the others), as `torch.tril`: element `[.., i, j]` is
    /// kept where `j - i <= k` and is 0 elsewhere. `k = 0` keeps the diagonal, `k < 0` starts below it, `k > 0`
    /// above. Built from index comparisons and [`Tensor::where_cond`], so it fuses into its consumer: `x.tril(0) *
    /// 2.0` is one kernel and no mask is stored.
    ///
    /// # Panics
    /// If the tensor has fewer than 2 axes; [`Tensor::try_tril`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// let x = lazor::Tensor::ones([2, 3]);
    /// assert_eq!(x.tril(0).to_vec(), vec![1.0, 0.0, 0.0, 1.0, 1.0, 0.0]);
    /// ```
    #[track_caller]
    pub fn tril(&self, k: isize) -> Tensor {
        ok(self.try_tril(k))
    }

    /// [`Tensor::tril`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if the tensor has fewer than 2 axes.
    pub fn try_tril(&self, k: isize) -> Result<Tensor> {
        self.triangle("tril", k, true)
    }

    /// The upper triangle of the last two axes, as `torch.triu`: element `[.., i, j]` is kept where `j - i >= k`
    /// and is 0 elsewhere. Fuses into its consumer as [`Tensor::tril`] does.
    ///
    /// # Panics
    /// If the tensor has fewer than 2 axes; [`Tensor::try_triu`] returns the error instead.
    #[track_caller]
    pub fn triu(&self, k: isize) -> Tensor {
        ok(self.try_triu(k))
    }

    /// [`Tensor::triu`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if the tensor has fewer than 2 axes.
    pub fn try_triu(&self, k: isize) -> Result<Tensor> {
        self.triangle("triu", k, false)
    }

    /// Whether element `[i, j]` of the last two axes lies on the kept side of diagonal `k` (`j - i <= k` for the
    /// lower triangle), as a bool `[m, n]` of index comparisons (nothing stored).
    fn triangle(&self, op: &'static str, k: isize, lower: bool) -> Result<Tensor> {
        let r = self.ndim();
        if r < 2 {
            return Err(bad(op, &self.shape, format!("needs at least 2 axes, not {r}")));
        }
        let (m, n) = (self.shape.dims()[r - 2], self.shape.dims()[r - 1]);
        // Diagonals past the corners keep everything or nothing; clamped, `k` fits an i32.
        let k = k.clamp(-(m as isize) - 1, n as isize + 1) as i32;
        let rows = Tensor::arange_on(m, &self.device).reshape([m, 1]);
        let cols = Tensor::arange_on(n, &self.device).reshape([1, n]);
        let diagonal = cols - &rows;
        let keep = if lower { diagonal.le(k) } else { diagonal.ge(k) };
        keep.try_where_cond(self, self.filler(0.0))
    }

    /// `value` where `mask` is true, this tensor elsewhere, as `torch.Tensor.masked_fill`: `mask` is bool and
    /// broadcasts to this tensor's shape, which the result keeps; `value` is converted to this tensor's type. No
    /// gradient flows to the filled elements.
    ///
    /// # Panics
    /// If the mask is not bool, does not broadcast to this tensor's shape, or lives on another device;
    /// [`Tensor::try_masked_fill`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], [2, 2]);
    /// let mask = Tensor::from_vec(vec![false, true], [2]);
    /// assert_eq!(x.masked_fill(&mask, -1.0).to_vec(), vec![1.0, -1.0, 3.0, -1.0]);
    /// ```
    #[track_caller]
    pub fn masked_fill(&self, mask: &Tensor, value: f32) -> Tensor {
        ok(self.try_masked_fill(mask, value))
    }

    /// [`Tensor::masked_fill`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::DType`] if the mask is not bool, [`Error::ShapeMismatch`] if it does not broadcast to this
    /// tensor's shape, [`Error::DeviceMismatch`] across devices.
    pub fn try_masked_fill(&self, mask: &Tensor, value: f32) -> Result<Tensor> {
        let op = "masked_fill";
        self.device.check_same(&mask.device, op)?;
        if mask.dtype != DType::Bool {
            return Err(Error::DType {
                op,
                message: format!("the mask (of shape {}) is {}, not bool", mask.shape, mask.dtype),
            });
        }
        if mask.ndim() > self.ndim() || mask.shape.broadcast(&self.shape).as_ref() != Some(&self.shape) {
            return Err(Error::ShapeMismatch {
                op,
                message: "the mask does not broadcast to the tensor's shape".into(),
                lhs: self.shape.clone(),
                rhs: mask.shape.clone(),
            });
        }
        mask.try_where_cond(self.filler(value), self)
    }

    /// The tensor padded with `value` (converted to its type), as `torch.nn.functional.pad` in constant mode:
    /// `pads[0]` is `(before, after)` for the last axis, `pads[1]` for the one before it, and so on; axes past the
    /// list are not padded. Built as concatenations with constants, so nothing is stored: a kernel reading the
    /// result picks the tensor or `value` per element. The gradient is a narrow of the output's.
    ///
    /// # Panics
    /// If `pads` has more pairs than the tensor has axes; [`Tensor::try_pad`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// let x = lazor::Tensor::from_vec(vec![1.0, 2.0], [1, 2]);
    /// assert_eq!(x.pad(&[(1, 0), (0, 1)], 0.0).to_vec(), vec![0.0, 1.0, 2.0, 0.0, 0.0, 0.0]);
    /// ```
    #[track_caller]
    pub fn pad(&self, pads: &[(usize, usize)], value: f32) -> Tensor {
        ok(self.try_pad(pads, value))
    }

    /// [`Tensor::pad`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `pads` has more pairs than the tensor has axes.
    pub fn try_pad(&self, pads: &[(usize, usize)], value: f32) -> Result<Tensor> {
        let r = self.ndim();
        if pads.len() > r {
            return Err(bad("pad", &self.shape, format!("{} (before, after) pairs for {r} axes", pads.len())));
        }
        let lane = self.dtype.cast_lane(DType::F32, value.to_bits());
        let mut out = self.clone();
        for (i, &(before, after)) in pads.iter().enumerate() {
            let axis = r - 1 - i;
            if before.checked_add(after).and_then(|p| p.checked_add(out.shape.dims()[axis])).is_none() {
                return Err(bad("pad", &self.shape, format!("padding ({before}, {after}) overflows axis {axis}")));
            }
            let fill = |n: usize| {
                let mut dims = out.shape.dims().to_vec();
                dims[axis] = n;
                Tensor::full_lane(dims, lane, self.dtype, &self.device)
            };
            let (lo, hi) = (fill(before), fill(after));
            let mut parts = Vec::with_capacity(3);
            if before > 0 {
                parts.push(&lo);
            }
            parts.push(&out);
            if after > 0 {
                parts.push(&hi);
            }
            let joined = Tensor::try_cat(&parts, axis)?;
            out = joined;
        }
        Ok(out)
    }

    /// The running sum along `dim` (negative counting from the end), as `torch.cumsum`: element `i` is the sum of
    /// elements `0..=i`. Bools count in i32; f16 and bf16 accumulate in f32. The gradient is the running sum of the
    /// gradient from the other end.
    ///
    /// Computed by folds, with no kernel kind of its own: an axis of up to 128 elements is one fold over a
    /// triangular mask (each output sums the elements up to it); a longer one is cut into blocks of 64, summed
    /// within each block by such a fold, with the running sum of the block totals (the same method, one level
    /// down) added in the fold's epilogue. So `n` elements cost about `64 n` additions and 3 kernels per 64x of
    /// length.
    ///
    /// # Panics
    /// If `dim` is out of range; [`Tensor::try_cumsum`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// let x = lazor::Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], [2, 2]);
    /// assert_eq!(x.cumsum(-1).to_vec(), vec![1.0, 3.0, 3.0, 7.0]);
    /// ```
    #[track_caller]
    pub fn cumsum(&self, dim: impl Dim) -> Tensor {
        ok(self.try_cumsum(dim))
    }

    /// [`Tensor::cumsum`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `dim` is out of range.
    pub fn try_cumsum(&self, dim: impl Dim) -> Result<Tensor> {
        if let Some(x) = self.autocast_f32() {
            return x.try_cumsum(dim);
        }
        let d = self.axis("cumsum", "dim", dim, 0)?;
        let x = if self.dtype == DType::Bool { self.cast_to(DType::I32) } else { self.clone() };
        // Along the last axis, through a permutation (a view) there and back; the rule below is the gradient, so
        // the ops inside record nothing.
        let last = x.ndim() - 1;
        let mut order: Vec<usize> = (0..x.ndim()).collect();
        order.swap(d, last);
        let y = scan(&x.detach().permute(&order), false).permute(&order);
        Ok(record(y, &[&x], |_| Rule::Cumsum { axis: d }))
    }
}

/// The running sum of `x` along its last axis, inclusive or `exclusive` (element `i` sums `0..i`).
fn scan(x: &Tensor, exclusive: bool) -> Tensor {
    let r = x.ndim();
    let n = x.shape.dims()[r - 1];
    if n <= SCAN_DIRECT {
        return triangular(x, exclusive);
    }
    // x as [.., blocks, SCAN_BLOCK], the last block filled up with zeros. The full blocks are a view and the last
    // one a concatenation along its own axis, joined along the blocks' axis: read from the prologue of a fold,
    // nothing is stored.
    let b = SCAN_BLOCK;
    let (full, rest) = (n / b, n % b);
    let lead = &x.shape.dims()[..r - 1];
    let shape = |tail: &[usize]| -> Vec<usize> { lead.iter().chain(tail).copied().collect() };
    let mut parts = Vec::with_capacity(2);
    if full > 0 {
        parts.push(x.narrow(-1, 0, full * b).reshape(shape(&[full, b])));
    }
    if rest > 0 {
        parts.push(x.narrow(-1, full * b, rest).pad(&[(0, b - rest)], 0.0).unsqueeze(-2));
    }
    let blocks = Tensor::cat(&parts.iter().collect::<Vec<_>>(), -2);
    let count = full + (rest > 0) as usize;
    // Each block's running sum, plus the sum of every block before it (computed first, so that the block sums'
    // fold can add it in its epilogue).
    let before = scan(&blocks.sum(-1), true).unsqueeze(-1);
    let y = before + triangular(&blocks, exclusive);
    y.reshape(shape(&[count * b])).narrow(-1, 0, n)
}

/// The running sum of `x` along its last axis (of `n` elements) as one fold of `n x n` terms: output `i` sums the
/// elements `t <= i` (`t < i` when `exclusive`), the mask made of index comparisons inside the fold.
fn triangular(x: &Tensor, exclusive: bool) -> Tensor {
    let n = x.shape.dims()[x.ndim() - 1];
    let i = Tensor::arange_on(n, &x.device).reshape([n, 1]);
    let t = Tensor::arange_on(n, &x.device).reshape([1, n]);
    let mask = if exclusive { t.lt(&i) } else { t.le(&i) };
    mask.where_cond(x.unsqueeze(-2), x.filler(0.0)).sum(-1)
}
