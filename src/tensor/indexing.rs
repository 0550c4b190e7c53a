//! Indexing by tensors: gathers along an axis (`gather`, `index_select`, `one_hot`) and their deterministic
//! scatters (`scatter_add`, `index_add`).
//!
//! A gather is one graph op, computed where it is read: its index is any lazy expression and its source a buffer.
//! A scatter is a fold per output element over the index (`sum_i where(index_i == row, src_i, 0)`), so every run
//! adds the same values in the same order, with no float atomics; it costs a pass over the index per output row.

use crate::autograd::{record, Rule};
use crate::dtype::DType;
use crate::error::ok;
use crate::error::{Error, Result};
use crate::graph::NodeOp;
use crate::shape::Shape;
use crate::tensor::dim::Dim;
use crate::tensor::Tensor;

/// An `I32` or `U32` index, else [`Error::DType`].
fn index_type(op: &'static str, index: &Tensor) -> Result<()> {
    match index.dtype {
        DType::I32 | DType::U32 => Ok(()),
        other => Err(Error::DType { op, message: format!("indices are i32 or u32, not {other}") }),
    }
}

/// Where `index` is host data not yet uploaded (directly or through a view), its first value outside `[0, size)`,
/// as an error.
pub(crate) fn check_host(op: &'static str, index: &Tensor, size: usize) -> Result<()> {
    let values = crate::tensor::segments::host_values(index).unwrap_or_default();
    match values.into_iter().find(|x| !(0..size as i64).contains(x)) {
        Some(index) => Err(Error::IndexOutOfRange { op, index, size }),
        None => Ok(()),
    }
}

fn mismatch(op: &'static str, message: &str, lhs: &Shape, rhs: &Shape) -> Error {
    Error::ShapeMismatch { op, message: message.to_string(), lhs: lhs.clone(), rhs: rhs.clone() }
}

/// `dims` with axis `axis` set to `n`.
fn with_axis(dims: &[usize], axis: usize, n: usize) -> Vec<usize> {
    let mut d = dims.to_vec();
    d[axis] = n;
    d
}

impl Tensor {
    /// Values picked along `dim` by `index`, as `torch.gather`: `out[i][j] = self[index[i][j]][j]` for `dim` 0 of
    /// a matrix. `index` (`I32` or `U32`) has as many axes as `self` and no larger an extent on any axis but `dim`;
    /// the result has its shape. An index outside the axis reads 0 when it is computed on the device.
    ///
    /// # Panics
    /// If `dim` is out of range, the index is not an integer tensor, the shapes do not fit, the tensors live on
    /// different devices, or the index is host data with a value outside the axis; [`Tensor::try_gather`] returns
    /// the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], [2, 2]);
    /// let i = Tensor::from_vec(vec![1i32, 0], [2, 1]);
    /// assert_eq!(x.gather(1, &i).to_vec(), vec![2.0, 3.0]);
    /// ```
    #[track_caller]
    pub fn gather(&self, dim: impl Dim, index: &Tensor) -> Tensor {
        ok(self.try_gather(dim, index))
    }

    /// [`Tensor::gather`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`], [`Error::DType`], [`Error::ShapeMismatch`], [`Error::DeviceMismatch`] or
    /// [`Error::IndexOutOfRange`].
    pub fn try_gather(&self, dim: impl Dim, index: &Tensor) -> Result<Tensor> {
        let op = "gather";
        let axis = self.axis(op, "dim", dim, 0)?;
        self.device.check_same(&index.device, op)?;
        index_type(op, index)?;
        let (dims, idims) = (self.shape.dims(), index.shape.dims());
        if idims.len() != dims.len() || (0..dims.len()).any(|d| d != axis && idims[d] > dims[d]) {
            let message = "the index needs the tensor's number of axes and no larger an extent on any axis but dim";
            return Err(mismatch(op, message, &self.shape, &index.shape));
        }
        check_host(op, index, dims[axis])?;
        Ok(self.gathered(axis, index, None))
    }

    /// The gather node (zeros where nothing can be read), recorded for autograd; `line` is the 1-D index an
    /// `index_select` spread into `index`, which its gradient can use.
    pub(crate) fn gathered(&self, axis: usize, index: &Tensor, line: Option<&Tensor>) -> Tensor {
        let out = if self.shape.dims()[axis] == 0 || index.numel() == 0 {
            Tensor::full_lane(index.shape.clone(), 0, self.dtype, &self.device)
        } else {
            Tensor::from_op(&self.device, NodeOp::Gather(self.id, index.id, axis), index.shape.clone(), self.dtype)
        };
        let line = line.cloned();
        record(out, &[self], |_| Rule::Gather { axis, index: index.clone(), line, from: self.shape.clone() })
    }

    /// The slices along `dim` at the positions of the 1-D `index` (`I32` or `U32`), in its order, as
    /// `torch.index_select`: axis `dim` of the result has the index's length. An index outside the axis reads
    /// zeros when it is computed on the device.
    ///
    /// # Panics
    /// If `dim` is out of range, the index is not a 1-D integer tensor, the tensors live on different devices, or
    /// the index is host data with a value outside the axis; [`Tensor::try_index_select`] returns the error.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::Tensor;
    /// let table = Tensor::from_vec(vec![0.0, 1.0, 10.0, 11.0, 20.0, 21.0], [3, 2]);
    /// let rows = table.index_select(0, &Tensor::from_vec(vec![2i32, 0], [2]));
    /// assert_eq!(rows.to_vec(), vec![20.0, 21.0, 0.0, 1.0]);
    /// ```
    #[track_caller]
    pub fn index_select(&self, dim: impl Dim, index: &Tensor) -> Tensor {
        ok(self.try_index_select(dim, index))
    }

    /// [`Tensor::index_select`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`], [`Error::DType`], [`Error::DeviceMismatch`] or [`Error::IndexOutOfRange`].
    pub fn try_index_select(&self, dim: impl Dim, index: &Tensor) -> Result<Tensor> {
        let op = "index_select";
        let axis = self.axis(op, "dim", dim, 0)?;
        self.device.check_same(&index.device, op)?;
        index_type(op, index)?;
        if index.ndim() > 1 {
            let message = format!("the index must be 1-D, not of shape {}", index.shape);
            return Err(Error::BadArgument { op, message, shape: self.shape.clone() });
        }
        check_host(op, index, self.shape.dims()[axis])?;
        Ok(self.gathered(axis, &self.spread(axis, index, &self.shape), Some(index)))
    }

    /// The 1-D `index` laid along `axis` of `like` (with the index's length there) and repeated over its other
    /// axes: the gather index of an `index_select` or the scatter index of an `index_add`.
    fn spread(&self, axis: usize, index: &Tensor, like: &Shape) -> Tensor {
        let m = index.numel();
        let mut one = vec![1; like.ndim()];
        one[axis] = m;
        index.reshape(one).expand(with_axis(like.dims(), axis, m))
    }

    /// A copy of this tensor with `src` added at the places `index` names along `dim`, as `torch.scatter_add`:
    /// `out[index[i][j]][j] += src[i][j]` for `dim` 0 of a matrix. `index` (`I32` or `U32`) has as many axes as
    /// `self` and `src`, no larger an extent than `src` on any axis, and no larger than `self` on any axis but
    /// `dim`. Deterministic: every run adds the same values in the same order. An index outside the axis is
    /// dropped when it is computed on the device.
    ///
    /// # Panics
    /// If `dim` is out of range, the types or shapes do not fit, the tensors live on different devices, or the
    /// index is host data with a value outside the axis; [`Tensor::try_scatter_add`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::Tensor;
    /// let i = Tensor::from_vec(vec![0i32, 2, 0], [3]);
    /// let y = Tensor::zeros([3]).scatter_add(0, &i, &Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]));
    /// assert_eq!(y.to_vec(), vec![4.0, 0.0, 2.0]);
    /// ```
    #[track_caller]
    pub fn scatter_add(&self, dim: impl Dim, index: &Tensor, src: &Tensor) -> Tensor {
        ok(self.try_scatter_add(dim, index, src))
    }

    /// [`Tensor::scatter_add`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`], [`Error::DType`], [`Error::ShapeMismatch`], [`Error::DeviceMismatch`] or
    /// [`Error::IndexOutOfRange`].
    pub fn try_scatter_add(&self, dim: impl Dim, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        let op = "scatter_add";
        let axis = self.axis(op, "dim", dim, 0)?;
        self.check_scatter(op, index, src)?;
        let (dims, idims, sdims) = (self.shape.dims(), index.shape.dims(), src.shape.dims());
        let fits = idims.len() == dims.len()
            && sdims.len() == dims.len()
            && (0..dims.len()).all(|d| idims[d] <= sdims[d] && (d == axis || idims[d] <= dims[d]));
        if !fits {
            let message = "the index needs the tensor's number of axes, no larger an extent than the source's, and \
                           no larger than the tensor's on any axis but dim";
            return Err(mismatch(op, message, &self.shape, &index.shape));
        }
        check_host(op, index, dims[axis])?;
        Ok(self.scattered(axis, index, None, src))
    }

    /// A copy of this tensor with the slices of `src` along `dim` added at the positions of the 1-D `index`
    /// (`I32` or `U32`), as `torch.index_add`: `src` has this tensor's shape with the index's length on `dim`.
    /// Deterministic, and an index outside the axis is dropped when it is computed on the device, as
    /// [`Tensor::scatter_add`].
    ///
    /// # Panics
    /// If `dim` is out of range, the types or shapes do not fit, the tensors live on different devices, or the
    /// index is host data with a value outside the axis; [`Tensor::try_index_add`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::Tensor;
    /// let rows = Tensor::from_vec(vec![1.0, 1.0, 2.0, 2.0], [2, 2]);
    /// let y = Tensor::zeros([3, 2]).index_add(0, &Tensor::from_vec(vec![2i32, 2], [2]), &rows);
    /// assert_eq!(y.to_vec(), vec![0.0, 0.0, 0.0, 0.0, 3.0, 3.0]);
    /// ```
    #[track_caller]
    pub fn index_add(&self, dim: impl Dim, index: &Tensor, src: &Tensor) -> Tensor {
        ok(self.try_index_add(dim, index, src))
    }

    /// [`Tensor::index_add`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`], [`Error::DType`], [`Error::ShapeMismatch`], [`Error::DeviceMismatch`] or
    /// [`Error::IndexOutOfRange`].
    pub fn try_index_add(&self, dim: impl Dim, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        let op = "index_add";
        let axis = self.axis(op, "dim", dim, 0)?;
        self.check_scatter(op, index, src)?;
        if index.ndim() > 1 {
            let message = format!("the index must be 1-D, not of shape {}", index.shape);
            return Err(Error::BadArgument { op, message, shape: self.shape.clone() });
        }
        let want = with_axis(self.shape.dims(), axis, index.numel());
        if src.shape.dims() != want.as_slice() {
            let message = "the source needs the tensor's shape with the index's length on dim";
            return Err(mismatch(op, message, &self.shape, &src.shape));
        }
        check_host(op, index, self.shape.dims()[axis])?;
        Ok(self.scattered(axis, &self.spread(axis, index, &src.shape), Some(index), src))
    }

    /// The checks `scatter_add` and `index_add` share: devices and types.
    fn check_scatter(&self, op: &'static str, index: &Tensor, src: &Tensor) -> Result<()> {
        self.device.check_same(&index.device, op)?;
        self.device.check_same(&src.device, op)?;
        index_type(op, index)?;
        if src.dtype != self.dtype {
            let message = format!("the source is {} and the tensor {}; cast one with to_dtype", src.dtype, self.dtype);
            return Err(Error::DType { op, message });
        }
        Ok(())
    }

    /// `self + scatter(src)`, built untracked and recorded as one op. `line` is the 1-D index an `index_add`
    /// spread into `index`: when it is host data, the sums are planned from its values (`segments.rs`).
    pub(crate) fn scattered(&self, axis: usize, index: &Tensor, line: Option<&Tensor>, src: &Tensor) -> Tensor {
        let (base, values) = (self.detach(), src.detach());
        let out = crate::autograd::no_grad(|| match line.and_then(crate::tensor::segments::host_values) {
            Some(line) => crate::tensor::segments::index_add(&base, axis, &line, &values),
            None => &base + &scatter_sum(axis, index, &values, &self.shape),
        });
        record(out, &[self, src], |_| Rule::ScatterAdd { axis, index: index.clone(), src: src.shape.clone() })
    }

    /// Each index as a row of `n` values, 1.0 at the index and 0.0 elsewhere (`F32`, shape `[.., n]`), as
    /// `torch.nn.functional.one_hot`. An index outside `[0, n)` gives a row of zeros when it is computed on the
    /// device.
    ///
    /// # Panics
    /// If this is not an `I32` or `U32` tensor, or it is host data with a value outside `[0, n)`;
    /// [`Tensor::try_one_hot`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// let y = lazor::Tensor::from_vec(vec![2i32, 0], [2]).one_hot(3);
    /// assert_eq!(y.to_vec(), vec![0.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
    /// ```
    #[track_caller]
    pub fn one_hot(&self, n: usize) -> Tensor {
        ok(self.try_one_hot(n))
    }

    /// [`Tensor::one_hot`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::DType`] or [`Error::IndexOutOfRange`].
    pub fn try_one_hot(&self, n: usize) -> Result<Tensor> {
        let op = "one_hot";
        index_type(op, self)?;
        check_host(op, self, n)?;
        let classes = Tensor::arange_on(n, &self.device);
        Ok(self.to_dtype(DType::I32).unsqueeze(-1).eq(&classes).to_dtype(DType::F32))
    }
}

/// `sum_i where(index[.., i, ..] == row, src[.., i, ..], 0)` along `axis`, over `out`'s shape: the scatter as a
/// fold per output. The index's extents bound the other axes; the rest of `out` is zero.
fn scatter_sum(axis: usize, index: &Tensor, src: &Tensor, out: &Shape) -> Tensor {
    let (nd, idims) = (out.ndim(), index.shape.dims().to_vec());
    let n = out.dims()[axis];
    let m = idims[axis];
    // The domain: the output's rows along `axis`, the index's extents elsewhere, and the index's axis last.
    let mut domain = with_axis(&idims, axis, n);
    domain.push(m);
    let order: Vec<usize> = (0..nd).filter(|&d| d != axis).chain([axis]).collect();
    let along_last = |t: &Tensor| t.permute(order.clone()).unsqueeze(axis).expand(domain.clone());
    let mut src = src.clone();
    for (d, &len) in idims.iter().enumerate() {
        if src.shape.dims()[d] > len {
            src = src.narrow(d, 0, len);
        }
    }
    let mut rows = vec![1; nd + 1];
    rows[axis] = n;
    let rows = Tensor::arange_on(n, &index.device).reshape(rows);
    let hit = along_last(&index.to_dtype(DType::I32)).eq(&rows);
    let zero = Tensor::full_lane(Shape::default(), 0, src.dtype, &src.device);
    let mut sum = hit.where_cond(along_last(&src), &zero).sum(nd);
    // Past the index's extents nothing lands: zeros, as a concatenation.
    for (d, &len) in idims.iter().enumerate() {
        if d != axis && len < out.dims()[d] {
            sum = crate::autograd::rules::pad(&sum, d, 0, out.dims()[d]);
        }
    }
    sum
}
