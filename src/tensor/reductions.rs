//! The reduction API: sum, mean, max, min, prod along an axis or over everything; var, softmax, log_softmax and
//! logsumexp built from them. Each is one reduce node (keeping the axis with extent 1) plus views and elementwise
//! ops, which fuse into the reduce kernel or into its consumers.

use crate::autograd::{record, Rule};
use crate::error::{Error, Result};
use crate::graph::NodeOp;
use crate::op::ReduceOp;
use crate::shape::Shape;
use crate::tensor::dim::Dim;
use crate::tensor::Tensor;

use crate::dtype::DType;
use crate::error::ok;

impl Tensor {
    /// The type float math on this tensor computes in, and the type its result takes: f16 and bf16 compute in
    /// f32 and round the result back (as PyTorch's kernels do); integers and bools compute in and give f32.
    pub(crate) fn float_math(&self) -> (Tensor, DType) {
        let out = if self.dtype.is_float() { self.dtype } else { DType::F32 };
        (self.cast_to(DType::F32), out)
    }

    /// The axis `dim` names, and its extent.
    fn reduce_axis(&self, op: &'static str, dim: impl Dim) -> Result<(usize, usize)> {
        let d = dim.resolve(self.ndim()).ok_or_else(|| Error::BadArgument {
            op,
            message: format!("dim {dim} is out of range for {} axes", self.ndim()),
            shape: self.shape.clone(),
        })?;
        Ok((d, self.shape.dims()[d]))
    }

    /// `op` folded along `dim`, the axis kept with extent 1 (`keep`) or dropped.
    pub(crate) fn try_fold(&self, op: ReduceOp, dim: impl Dim, keep: bool) -> Result<Tensor> {
        if let Some(x) = self.autocast_f32().filter(|_| op == ReduceOp::Sum) {
            return x.try_fold(op, dim, keep);
        }
        let (d, n) = self.reduce_axis(op.name(), dim)?;
        if n == 0 && matches!(op, ReduceOp::Max | ReduceOp::Min) {
            return Err(Error::BadArgument {
                op: op.name(),
                message: format!("axis {d} is empty, and an empty axis has no {}imum", op.name()),
                shape: self.shape.clone(),
            });
        }
        // Sums and products of bools count in i32.
        let x = match (op, self.dtype) {
            (ReduceOp::Sum | ReduceOp::Prod, DType::Bool) => self.cast_to(DType::I32),
            _ => self.clone(),
        };
        let mut dims = x.shape.dims().to_vec();
        dims[d] = 1;
        let r = Tensor::from_op(&x.device, NodeOp::Reduce(op, x.id, d), Shape::from(dims), x.dtype);
        let r = record(r, &[&x], |y| Rule::Reduce { op, axis: d, x: x.saved(), y });
        Ok(if keep { r } else { r.squeeze(d) })
    }

    /// The index (i32) of the first maximum (`op` Max) or minimum along `dim`; NaN counts as the extreme, so the
    /// first NaN wins. Two folds: the extreme, then the least index that holds it.
    fn try_arg(&self, op: ReduceOp, name: &'static str, dim: impl Dim, keep: bool) -> Result<Tensor> {
        let (d, n) = self.reduce_axis(name, dim)?;
        if n == 0 {
            return Err(Error::BadArgument {
                op: name,
                message: format!("axis {d} is empty, and an empty axis has no {}imum", op.name()),
                shape: self.shape.clone(),
            });
        }
        // Indices are untracked: build them from the untracked value.
        let x = self.detach();
        let extreme = x.try_fold(op, d, true)?;
        let mut hit = x.eq(&extreme);
        if x.dtype.is_float() {
            hit = hit | x.ne(&x);
        }
        let mut along = vec![1; self.ndim()];
        along[d] = n;
        let index = Tensor::arange_on(n, &self.device).reshape(along);
        hit.where_cond(&index, n as i32).try_fold(ReduceOp::Min, d, keep)
    }

    /// The mean along `dim`: the sum times `1 / n` (NaN over an empty axis).
    fn try_mean_of(&self, dim: impl Dim, keep: bool) -> Result<Tensor> {
        if let Some(x) = self.autocast_f32() {
            return x.try_mean_of(dim, keep);
        }
        let (d, n) = self.reduce_axis("mean", dim)?;
        let (x, out) = self.float_math();
        let m = (x.try_fold(ReduceOp::Sum, d, true)? * (1.0 / n as f32)).cast_to(out);
        Ok(if keep { m } else { m.squeeze(d) })
    }

    /// The population variance along `dim` (dividing by `n`).
    fn try_var_of(&self, dim: impl Dim, keep: bool) -> Result<Tensor> {
        if let Some(x) = self.autocast_f32() {
            return x.try_var_of(dim, keep);
        }
        let (d, _) = self.reduce_axis("var", dim)?;
        let (x, out) = self.float_math();
        let centered = &x - &x.try_mean_of(d, true)?;
        Ok(centered.square().try_mean_of(d, keep)?.cast_to(out))
    }

    /// The tensor as one axis, folded with `op` into shape `[]`.
    fn try_fold_all(&self, op: ReduceOp) -> Result<Tensor> {
        // Checked here, not by the fold of the flattened view, so the error names the caller's shape.
        if self.numel() == 0 && matches!(op, ReduceOp::Max | ReduceOp::Min) {
            return Err(Error::BadArgument {
                op: if op == ReduceOp::Max { "max_all" } else { "min_all" },
                message: format!("the tensor is empty, and an empty tensor has no {}imum", op.name()),
                shape: self.shape.clone(),
            });
        }
        Ok(self.flatten().try_fold(op, 0, true)?.reshape(Shape::default()))
    }
}

/// Generates each reduction's four forms: axis dropped or kept, panicking or fallible.
macro_rules! reductions {
    ($($(#[$doc:meta])* $op:ident {
        $name:ident => drop,
        $keep:ident => keep,
        $try_name:ident => try_drop,
        $try_keep:ident => try_keep,
    })*) => {$(
        impl Tensor {
            $(#[$doc])*
            ///
            /// # Panics
            /// If `dim` is out of range, or for `max`/`min` if the axis is empty.
            #[track_caller]
            pub fn $name(&self, dim: impl Dim) -> Tensor {
                ok(self.try_fold(ReduceOp::$op, dim, false))
            }

            /// As the method without `_keepdim`, keeping the axis with extent 1, ready to broadcast back.
            ///
            /// # Panics
            /// If `dim` is out of range, or for `max`/`min` if the axis is empty.
            #[track_caller]
            pub fn $keep(&self, dim: impl Dim) -> Tensor {
                ok(self.try_fold(ReduceOp::$op, dim, true))
            }

            /// The fallible twin of the method without `try_`.
            ///
            /// # Errors
            /// [`Error::BadArgument`] if `dim` is out of range, or for `max`/`min` if the axis is empty.
            pub fn $try_name(&self, dim: impl Dim) -> Result<Tensor> {
                self.try_fold(ReduceOp::$op, dim, false)
            }

            /// The fallible twin of the `_keepdim` method.
            ///
            /// # Errors
            /// [`Error::BadArgument`] if `dim` is out of range, or for `max`/`min` if the axis is empty.
            pub fn $try_keep(&self, dim: impl Dim) -> Result<Tensor> {
                self.try_fold(ReduceOp::$op, dim, true)
            }
        }
    )*};
}

reductions! {
    /// The sum along `dim` (0 over an empty axis; NaN if any element is NaN), axis dropped. Accumulates in `f32`
    /// in a fixed tree order: deterministic on one adapter.
    ///
    /// # Examples
    /// ```no_run
    /// let x = lazor::Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], [2, 2]);
    /// assert_eq!(x.sum(-1).to_vec(), vec![3.0, 7.0]);
    /// ```
    Sum {
        sum => drop,
        sum_keepdim => keep,
        try_sum => try_drop,
        try_sum_keepdim => try_keep,
    }
    /// The product along `dim` (1 over an empty axis), axis dropped.
    Prod {
        prod => drop,
        prod_keepdim => keep,
        try_prod => try_drop,
        try_prod_keepdim => try_keep,
    }
    /// The maximum along `dim`, NaN if any element is NaN, axis dropped.
    Max {
        max => drop,
        max_keepdim => keep,
        try_max => try_drop,
        try_max_keepdim => try_keep,
    }
    /// The minimum along `dim`, NaN if any element is NaN, axis dropped.
    Min {
        min => drop,
        min_keepdim => keep,
        try_min => try_drop,
        try_min_keepdim => try_keep,
    }
}

impl Tensor {
    /// The mean along `dim` (NaN over an empty axis), axis dropped: one reduction, the division fused after it.
    ///
    /// # Panics
    /// If `dim` is out of range; [`Tensor::try_mean`] returns the error instead.
    #[track_caller]
    pub fn mean(&self, dim: impl Dim) -> Tensor {
        ok(self.try_mean_of(dim, false))
    }

    /// [`Tensor::mean`] keeping the axis with extent 1.
    ///
    /// # Panics
    /// If `dim` is out of range.
    #[track_caller]
    pub fn mean_keepdim(&self, dim: impl Dim) -> Tensor {
        ok(self.try_mean_of(dim, true))
    }

    /// [`Tensor::mean`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `dim` is out of range.
    pub fn try_mean(&self, dim: impl Dim) -> Result<Tensor> {
        self.try_mean_of(dim, false)
    }

    /// [`Tensor::mean_keepdim`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `dim` is out of range.
    pub fn try_mean_keepdim(&self, dim: impl Dim) -> Result<Tensor> {
        self.try_mean_of(dim, true)
    }

    /// The variance along `dim`, dividing by `n` (NumPy's default, `ddof = 0`; NaN over an empty axis), axis
    /// dropped.
    ///
    /// # Panics
    /// If `dim` is out of range; [`Tensor::try_var`] returns the error instead.
    #[track_caller]
    pub fn var(&self, dim: impl Dim) -> Tensor {
        ok(self.try_var_of(dim, false))
    }

    /// [`Tensor::var`] (dividing by `n`) keeping the axis with extent 1.
    ///
    /// # Panics
    /// If `dim` is out of range.
    #[track_caller]
    pub fn var_keepdim(&self, dim: impl Dim) -> Tensor {
        ok(self.try_var_of(dim, true))
    }

    /// [`Tensor::var`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `dim` is out of range.
    pub fn try_var(&self, dim: impl Dim) -> Result<Tensor> {
        self.try_var_of(dim, false)
    }

    /// [`Tensor::var_keepdim`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `dim` is out of range.
    pub fn try_var_keepdim(&self, dim: impl Dim) -> Result<Tensor> {
        self.try_var_of(dim, true)
    }

    /// The sum of every element, shape `[]` (read it with [`Tensor::to_scalar`]).
    pub fn sum_all(&self) -> Tensor {
        ok(self.try_fold_all(ReduceOp::Sum))
    }

    /// The mean of every element, shape `[]` (NaN for an empty tensor).
    pub fn mean_all(&self) -> Tensor {
        if let Some(x) = self.autocast_f32() {
            return x.mean_all();
        }
        let (x, out) = self.float_math();
        (x.sum_all() * (1.0 / self.numel() as f32)).cast_to(out)
    }

    /// The maximum of every element, shape `[]`, NaN if any is NaN.
    ///
    /// # Panics
    /// If the tensor is empty; [`Tensor::try_max_all`] returns the error instead.
    #[track_caller]
    pub fn max_all(&self) -> Tensor {
        ok(self.try_fold_all(ReduceOp::Max))
    }

    /// The minimum of every element, shape `[]`, NaN if any is NaN.
    ///
    /// # Panics
    /// If the tensor is empty; [`Tensor::try_min_all`] returns the error instead.
    #[track_caller]
    pub fn min_all(&self) -> Tensor {
        ok(self.try_fold_all(ReduceOp::Min))
    }

    /// [`Tensor::max_all`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if the tensor is empty.
    pub fn try_max_all(&self) -> Result<Tensor> {
        self.try_fold_all(ReduceOp::Max)
    }

    /// [`Tensor::min_all`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if the tensor is empty.
    pub fn try_min_all(&self) -> Result<Tensor> {
        self.try_fold_all(ReduceOp::Min)
    }

    /// `exp(x) / sum(exp(x))` along `dim`, computed stably as `exp(x - max)` over its sum: two reductions and
    /// one elementwise kernel. A row of `-inf` gives NaN, as in PyTorch.
    ///
    /// # Panics
    /// If `dim` is out of range; [`Tensor::try_softmax`] returns the error instead.
    #[track_caller]
    pub fn softmax(&self, dim: impl Dim) -> Tensor {
        ok(self.try_softmax(dim))
    }

    /// [`Tensor::softmax`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `dim` is out of range.
    pub fn try_softmax(&self, dim: impl Dim) -> Result<Tensor> {
        if let Some(x) = self.autocast_f32() {
            return x.try_softmax(dim);
        }
        let (d, n) = self.reduce_axis("softmax", dim)?;
        // Built untracked and recorded as one op, whose gradient is the closed form (one rows kernel).
        let (x, out) = self.detach().float_math();
        let record = |y: Tensor| record(y, &[self], |y| Rule::Softmax { axis: d, y });
        if n == 0 {
            return Ok(record(x.cast_to(out)));
        }
        let e = (&x - &x.try_fold(ReduceOp::Max, d, true)?).exp();
        Ok(record((&e / &e.try_fold(ReduceOp::Sum, d, true)?).cast_to(out)))
    }

    /// `x - logsumexp(x)` along `dim`, computed stably (a row of `-inf` gives NaN, as in PyTorch).
    ///
    /// # Panics
    /// If `dim` is out of range; [`Tensor::try_log_softmax`] returns the error instead.
    #[track_caller]
    pub fn log_softmax(&self, dim: impl Dim) -> Tensor {
        ok(self.try_log_softmax(dim))
    }

    /// [`Tensor::log_softmax`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `dim` is out of range.
    pub fn try_log_softmax(&self, dim: impl Dim) -> Result<Tensor> {
        if let Some(x) = self.autocast_f32() {
            return x.try_log_softmax(dim);
        }
        let (d, n) = self.reduce_axis("log_softmax", dim)?;
        // Built untracked and recorded as one op, whose gradient is the closed form (one rows kernel).
        let (x, out) = self.detach().float_math();
        let record = |y: Tensor| record(y, &[self], |y| Rule::LogSoftmax { axis: d, y });
        if n == 0 {
            return Ok(record(x.cast_to(out)));
        }
        let shifted = &x - &x.try_fold(ReduceOp::Max, d, true)?;
        Ok(record((&shifted - &shifted.exp().try_fold(ReduceOp::Sum, d, true)?.ln()).cast_to(out)))
    }

    /// `ln(sum(exp(x)))` along `dim`, axis dropped, computed stably around the maximum (an all `-inf` row gives
    /// `-inf` and an empty axis `-inf`, as in PyTorch).
    ///
    /// # Panics
    /// If `dim` is out of range; [`Tensor::try_logsumexp`] returns the error instead.
    #[track_caller]
    pub fn logsumexp(&self, dim: impl Dim) -> Tensor {
        ok(self.try_logsumexp(dim))
    }

    /// [`Tensor::logsumexp`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `dim` is out of range.
    pub fn try_logsumexp(&self, dim: impl Dim) -> Result<Tensor> {
        if let Some(x) = self.autocast_f32() {
            return x.try_logsumexp(dim);
        }
        let (d, n) = self.reduce_axis("logsumexp", dim)?;
        let (x, out) = self.detach().float_math();
        let record = |y: Tensor| record(y, &[self], |y| Rule::LogSumExp { axis: d, x: self.saved(), y });
        if n == 0 {
            return Ok(record(x.try_fold(ReduceOp::Sum, d, false)?.ln().cast_to(out)));
        }
        // An infinite maximum would make `x - max` NaN; a finite stand-in keeps -inf rows at -inf.
        let m = x.try_fold(ReduceOp::Max, d, true)?.clamp(f32::MIN, f32::MAX);
        let s = (&x - &m).exp().try_fold(ReduceOp::Sum, d, true)?.ln() + &m;
        Ok(record(s.squeeze(d).cast_to(out)))
    }

    /// The index (i32) of the maximum along `dim`, the axis dropped: the first on ties, and the first NaN wins
    /// (as in PyTorch).
    ///
    /// # Panics
    /// If `dim` is out of range or the axis is empty; [`Tensor::try_argmax`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// let x = lazor::Tensor::from_vec(vec![1.0, 3.0, 3.0, 0.0], [2, 2]);
    /// assert_eq!(x.argmax(-1).to_vec_as::<i32>(), vec![1, 0]);
    /// ```
    #[track_caller]
    pub fn argmax(&self, dim: impl Dim) -> Tensor {
        ok(self.try_arg(ReduceOp::Max, "argmax", dim, false))
    }

    /// [`Tensor::argmax`] keeping the axis with extent 1.
    ///
    /// # Panics
    /// As [`Tensor::argmax`].
    #[track_caller]
    pub fn argmax_keepdim(&self, dim: impl Dim) -> Tensor {
        ok(self.try_arg(ReduceOp::Max, "argmax", dim, true))
    }

    /// The index (i32) of the minimum along `dim`, the axis dropped: the first on ties, and the first NaN wins.
    ///
    /// # Panics
    /// If `dim` is out of range or the axis is empty; [`Tensor::try_argmin`] returns the error instead.
    #[track_caller]
    pub fn argmin(&self, dim: impl Dim) -> Tensor {
        ok(self.try_arg(ReduceOp::Min, "argmin", dim, false))
    }

    /// [`Tensor::argmin`] keeping the axis with extent 1.
    ///
    /// # Panics
    /// As [`Tensor::argmin`].
    #[track_caller]
    pub fn argmin_keepdim(&self, dim: impl Dim) -> Tensor {
        ok(self.try_arg(ReduceOp::Min, "argmin", dim, true))
    }

    /// [`Tensor::argmax`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `dim` is out of range or the axis is empty.
    pub fn try_argmax(&self, dim: impl Dim) -> Result<Tensor> {
        self.try_arg(ReduceOp::Max, "argmax", dim, false)
    }

    /// [`Tensor::argmin`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `dim` is out of range or the axis is empty.
    pub fn try_argmin(&self, dim: impl Dim) -> Result<Tensor> {
        self.try_arg(ReduceOp::Min, "argmin", dim, false)
    }
}
