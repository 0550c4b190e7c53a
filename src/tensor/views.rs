//! The view API: reshape, permute, narrow, expand, squeeze, unsqueeze, cat, stack and friends. Each makes a view
//! node (index math, no data moves) that kernels read through one composed stride vector.

use crate::autograd::{record, Rule};
use crate::error::ok;
use crate::error::{Error, Result};
use crate::graph::NodeOp;
use crate::shape::Shape;
use crate::tensor::dim::Dim;
use crate::tensor::Tensor;
use crate::view::View;
use smallvec::SmallVec;

/// Concatenations of more parts than this (or than the device binds, less the output and parameters) are built as
/// a concatenation of stored concatenations, so one kernel never binds more buffers than the adapter allows.
const MAX_CAT_PARTS: usize = 16;

fn bad(op: &'static str, shape: &Shape, message: String) -> Error {
    Error::BadArgument { op, message, shape: shape.clone() }
}

impl Tensor {
    /// `dim` resolved against this tensor's axes (`extra` more allowed, for `unsqueeze` and `stack`).
    pub(crate) fn axis(&self, op: &'static str, what: &str, dim: impl Dim, extra: usize) -> Result<usize> {
        let n = self.ndim() + extra;
        dim.resolve(n).ok_or_else(|| bad(op, &self.shape, format!("{what} {dim} is out of range for {n} axes")))
    }

    /// A view of this tensor: `view` maps the result's coordinates into this tensor's row-major order. Views of a
    /// view compose into one when strides allow, so the new node reads the original source directly.
    pub(crate) fn view(&self, view: View) -> Tensor {
        if view.shape == self.shape && view.is_contiguous() {
            return self.clone();
        }
        let shape = view.shape.clone();
        let op = {
            let state = self.device.state();
            match &state.graph.node(self.id).op {
                NodeOp::View(inner, src) => match view.compose(inner) {
                    Some(v) => NodeOp::View(v, *src),
                    None => NodeOp::View(view, self.id),
                },
                _ => NodeOp::View(view, self.id),
            }
        };
        Tensor::from_op(&self.device, op, shape, self.dtype)
    }

    pub(crate) fn own_view(&self) -> View {
        View::contiguous(&self.shape)
    }

    /// The same elements in row-major order under a new shape with as many elements. Free when the strides allow
    /// it (a contiguous source, or splitting and merging axes adjacent in memory); otherwise the source is made
    /// contiguous once, by one kernel, and then viewed.
    ///
    /// # Panics
    /// If the element counts differ; [`Tensor::try_reshape`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// let x = lazor::Tensor::zeros([2, 6]);
    /// assert_eq!(x.reshape([3, 4]).shape(), &[3, 4]);
    /// ```
    #[track_caller]
    pub fn reshape(&self, shape: impl Into<Shape>) -> Tensor {
        ok(self.try_reshape(shape))
    }

    /// [`Tensor::reshape`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if the element counts differ.
    pub fn try_reshape(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        if shape.numel() != self.numel() {
            return Err(bad(
                "reshape",
                &self.shape,
                format!("shape {shape} has {} elements, not {}", shape.numel(), self.numel()),
            ));
        }
        Ok(self.reshaped(View::contiguous(&shape)))
    }

    /// A view that keeps the row-major order (reshape, flatten, squeeze, unsqueeze): its gradient is reshaped back.
    fn reshaped(&self, view: View) -> Tensor {
        record(self.view(view), &[self], |_| Rule::Reshape { from: self.shape.clone() })
    }

    /// The tensor as one axis.
    pub fn flatten(&self) -> Tensor {
        self.reshaped(View::contiguous(&Shape::from([self.numel()])))
    }

    /// The axes reordered: axis `d` of the result is axis `dims[d]` of this tensor.
    ///
    /// # Panics
    /// If `dims` is not a permutation of the axes; [`Tensor::try_permute`] returns the error instead.
    #[track_caller]
    pub fn permute<D: Dim>(&self, dims: impl AsRef<[D]>) -> Tensor {
        ok(self.try_permute(dims))
    }

    /// [`Tensor::permute`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `dims` is not a permutation of the axes.
    pub fn try_permute<D: Dim>(&self, dims: impl AsRef<[D]>) -> Result<Tensor> {
        let dims = dims.as_ref();
        let shown = dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
        let not_perm =
            || bad("permute", &self.shape, format!("dims [{shown}] are not a permutation of {} axes", self.ndim()));
        if dims.len() != self.ndim() {
            return Err(not_perm());
        }
        let mut resolved: SmallVec<[usize; 4]> = SmallVec::new();
        for &d in dims {
            let d = d.resolve(self.ndim()).ok_or_else(not_perm)?;
            if resolved.contains(&d) {
                return Err(not_perm());
            }
            resolved.push(d);
        }
        Ok(self.permuted(resolved))
    }

    /// Axes `d0` and `d1` swapped.
    ///
    /// # Panics
    /// If either is out of range; [`Tensor::try_transpose`] returns the error instead.
    #[track_caller]
    pub fn transpose(&self, d0: impl Dim, d1: impl Dim) -> Tensor {
        ok(self.try_transpose(d0, d1))
    }

    /// [`Tensor::transpose`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if either axis is out of range.
    pub fn try_transpose(&self, d0: impl Dim, d1: impl Dim) -> Result<Tensor> {
        let a = self.axis("transpose", "dim", d0, 0)?;
        let b = self.axis("transpose", "dim", d1, 0)?;
        let mut dims: SmallVec<[usize; 4]> = (0..self.ndim()).collect();
        dims.swap(a, b);
        Ok(self.permuted(dims))
    }

    /// Axis `d` of the result is axis `dims[d]` of this tensor.
    fn permuted(&self, dims: SmallVec<[usize; 4]>) -> Tensor {
        record(self.view(self.own_view().permute(&dims)), &[self], |_| Rule::Permute { dims })
    }

    /// The last two axes swapped (a matrix transpose, batched over leading axes).
    ///
    /// # Panics
    /// If the tensor has fewer than 2 axes; [`Tensor::try_t`] returns the error instead.
    #[track_caller]
    pub fn t(&self) -> Tensor {
        ok(self.try_t())
    }

    /// [`Tensor::t`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if the tensor has fewer than 2 axes.
    pub fn try_t(&self) -> Result<Tensor> {
        if self.ndim() < 2 {
            return Err(bad("t", &self.shape, format!("needs at least 2 axes, not {}", self.ndim())));
        }
        self.try_transpose(-2, -1)
    }

    /// Axis `dim` limited to `start..start + len`.
    ///
    /// # Panics
    /// If `dim` is out of range or `start + len` exceeds the axis; [`Tensor::try_narrow`] returns the error
    /// instead.
    #[track_caller]
    pub fn narrow(&self, dim: impl Dim, start: usize, len: usize) -> Tensor {
        ok(self.try_narrow(dim, start, len))
    }

    /// [`Tensor::narrow`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `dim` is out of range or `start + len` exceeds the axis.
    pub fn try_narrow(&self, dim: impl Dim, start: usize, len: usize) -> Result<Tensor> {
        let d = self.axis("narrow", "dim", dim, 0)?;
        let extent = self.shape.dims()[d];
        if start.checked_add(len).is_none_or(|end| end > extent) {
            return Err(bad(
                "narrow",
                &self.shape,
                format!("start {start} + len {len} exceeds axis {dim} of extent {extent}"),
            ));
        }
        let out = self.view(self.own_view().narrow(d, start, len));
        Ok(record(out, &[self], |_| Rule::Narrow { axis: d, start, extent }))
    }

    /// Axis `dim`, which must have extent 1, removed.
    ///
    /// # Panics
    /// If `dim` is out of range or its extent is not 1; [`Tensor::try_squeeze`] returns the error instead.
    #[track_caller]
    pub fn squeeze(&self, dim: impl Dim) -> Tensor {
        ok(self.try_squeeze(dim))
    }

    /// [`Tensor::squeeze`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `dim` is out of range or its extent is not 1.
    pub fn try_squeeze(&self, dim: impl Dim) -> Result<Tensor> {
        let d = self.axis("squeeze", "dim", dim, 0)?;
        if self.shape.dims()[d] != 1 {
            return Err(bad("squeeze", &self.shape, format!("axis {dim} has extent {}, not 1", self.shape.dims()[d])));
        }
        Ok(self.reshaped(self.own_view().squeeze(d)))
    }

    /// A new axis of extent 1 at `dim` (`0..=ndim`; `-1` appends).
    ///
    /// # Panics
    /// If `dim` is out of range; [`Tensor::try_unsqueeze`] returns the error instead.
    #[track_caller]
    pub fn unsqueeze(&self, dim: impl Dim) -> Tensor {
        ok(self.try_unsqueeze(dim))
    }

    /// [`Tensor::unsqueeze`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `dim` is out of range.
    pub fn try_unsqueeze(&self, dim: impl Dim) -> Result<Tensor> {
        let d = self.axis("unsqueeze", "dim", dim, 1)?;
        Ok(self.reshaped(self.own_view().unsqueeze(d)))
    }

    /// The tensor broadcast to `shape` by NumPy's rules (new leading axes, size-1 axes stretched): no memory.
    ///
    /// # Panics
    /// If the tensor does not broadcast to `shape`; [`Tensor::try_expand`] returns the error instead.
    #[track_caller]
    pub fn expand(&self, shape: impl Into<Shape>) -> Tensor {
        ok(self.try_expand(shape))
    }

    /// [`Tensor::expand`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if the tensor does not broadcast to `shape`.
    pub fn try_expand(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        if self.shape.ndim() > shape.ndim() || self.shape.broadcast(&shape).as_ref() != Some(&shape) {
            return Err(bad("expand", &self.shape, format!("cannot broadcast to shape {shape}")));
        }
        let out = self.view(self.own_view().expand(&shape));
        Ok(record(out, &[self], |_| Rule::Expand { from: self.shape.clone() }))
    }

    /// Whether the tensor reads its source in row-major order (it is not a strided view).
    pub fn is_contiguous(&self) -> bool {
        match &self.device.state().graph.node(self.id).op {
            NodeOp::View(v, _) => v.is_contiguous(),
            _ => true,
        }
    }

    /// Whether the tensor is a matrix read down its columns ([`crate::graph::Graph::transposed`]).
    pub(crate) fn is_transposed(&self) -> bool {
        self.device.state().graph.transposed(self.id)
    }

    /// Whether neighbouring elements along `axis` are neighbours in memory ([`crate::graph::Graph::contiguous_along`]).
    pub(crate) fn contiguous_along(&self, axis: usize) -> bool {
        self.device.state().graph.contiguous_along(self.id, axis)
    }

    /// A tensor with its own row-major buffer once realized: `self` when it already is contiguous, otherwise a
    /// copy. Read by another kernel of the same realize, the copy is computed inside that kernel (no extra pass).
    pub fn contiguous(&self) -> Tensor {
        if self.is_contiguous() {
            return self.clone();
        }
        self.stored_copy()
    }

    /// The tensors joined along axis `dim`; all have the same shape except along `dim`. Nothing is copied first:
    /// the kernel that reads the result picks the right input per element.
    ///
    /// # Panics
    /// If `tensors` is empty, the shapes disagree, `dim` is out of range or the tensors live on different devices;
    /// [`Tensor::try_cat`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::Tensor;
    /// let (a, b) = (Tensor::ones([2, 3]), Tensor::zeros([1, 3]));
    /// assert_eq!(Tensor::cat(&[&a, &b], 0).shape(), &[3, 3]);
    /// ```
    #[track_caller]
    pub fn cat(tensors: &[&Tensor], dim: impl Dim) -> Tensor {
        ok(Tensor::try_cat(tensors, dim))
    }

    /// [`Tensor::cat`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `tensors` is empty, the shapes disagree or `dim` is out of range;
    /// [`Error::DeviceMismatch`] across devices.
    pub fn try_cat(tensors: &[&Tensor], dim: impl Dim) -> Result<Tensor> {
        let Some(first) = tensors.first() else {
            return Err(bad("cat", &Shape::default(), "needs at least one tensor".into()));
        };
        let d = first.axis("cat", "dim", dim, 0)?;
        let mut dims = first.shape.dims().to_vec();
        dims[d] = 0;
        for t in tensors {
            first.device.check_same(&t.device, "cat")?;
            let same =
                t.ndim() == first.ndim() && (0..t.ndim()).all(|i| i == d || t.shape.dims()[i] == first.shape.dims()[i]);
            if !same {
                let shapes: Vec<String> = tensors.iter().map(|t| t.shape.to_string()).collect();
                return Err(bad("cat", &t.shape, format!("shapes {} differ outside axis {dim}", shapes.join(", "))));
            }
            dims[d] += t.shape.dims()[d];
        }
        // Parts of different types join in their common type.
        let mut dt = first.dtype;
        for t in tensors {
            dt = dt.promote(t.dtype).ok_or_else(|| crate::error::Error::DType {
                op: "cat",
                message: format!("parts of types {dt} and {} have no common type; cast one with to_dtype", t.dtype),
            })?;
        }
        if tensors.iter().any(|t| t.dtype != dt) {
            let cast: Vec<Tensor> = tensors.iter().map(|t| t.cast_to(dt)).collect();
            return Tensor::try_cat(&cast.iter().collect::<Vec<_>>(), d);
        }
        if tensors.len() == 1 {
            return Ok((*first).clone());
        }
        let max_parts = MAX_CAT_PARTS.min(first.device.max_bindings().saturating_sub(2)).max(2);
        if tensors.len() > max_parts {
            let chunks: Vec<Tensor> = tensors
                .chunks(max_parts)
                .map(|c| Tensor::try_cat(c, d).map(|t| t.stored_copy()))
                .collect::<Result<_>>()?;
            return Tensor::try_cat(&chunks.iter().collect::<Vec<_>>(), d);
        }
        let parts = tensors.iter().map(|t| t.id).collect();
        let out = Tensor::from_op(&first.device, NodeOp::Cat(parts, d), dims.into(), dt);
        Ok(record(out, tensors, |_| Rule::Cat { axis: d, sizes: tensors.iter().map(|t| t.shape.dims()[d]).collect() }))
    }

    /// A node that is always materialized, whatever it is.
    fn stored_copy(&self) -> Tensor {
        let out = Tensor::from_op(&self.device, NodeOp::Contiguous(self.id), self.shape.clone(), self.dtype);
        record(out, &[self], |_| Rule::Identity)
    }

    /// The elements in reverse order along each axis of `dims` (negative counting from the end), as
    /// `torch.flip`: a view with negative strides, so nothing is copied and a kernel reading it reads the source
    /// backwards.
    ///
    /// # Panics
    /// If an axis is out of range or named twice; [`Tensor::try_flip`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// let x = lazor::Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
    /// assert_eq!(x.flip([-1]).to_vec(), vec![3.0, 2.0, 1.0, 6.0, 5.0, 4.0]);
    /// ```
    #[track_caller]
    pub fn flip<D: Dim>(&self, dims: impl AsRef<[D]>) -> Tensor {
        ok(self.try_flip(dims))
    }

    /// [`Tensor::flip`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if an axis is out of range or named twice.
    pub fn try_flip<D: Dim>(&self, dims: impl AsRef<[D]>) -> Result<Tensor> {
        let mut axes: SmallVec<[usize; 4]> = SmallVec::new();
        for &d in dims.as_ref() {
            let a = self.axis("flip", "dim", d, 0)?;
            if axes.contains(&a) {
                return Err(bad("flip", &self.shape, format!("dim {d} names axis {a} twice")));
            }
            axes.push(a);
        }
        axes.sort_unstable();
        let mut view = self.own_view();
        for &a in &axes {
            let extent = self.shape.dims()[a];
            if extent > 0 {
                view.offset += (extent as isize - 1) * view.strides[a];
                view.strides[a] = -view.strides[a];
            }
        }
        Ok(record(self.view(view), &[self], |_| Rule::Flip { axes }))
    }

    /// The windows of `size` elements every `step` along axis `dim`, as `torch.Tensor.unfold`: axis `dim` becomes
    /// the window's position (`(extent - size) / step + 1` of them) and a new last axis of extent `size` runs
    /// through each window. A view: windows that overlap (`step < size`) read the same memory, nothing is copied.
    ///
    /// # Panics
    /// If `dim` is out of range, `step` is 0 or `size` exceeds the axis; [`Tensor::try_unfold`] returns the error
    /// instead.
    ///
    /// # Examples
    /// ```no_run
    /// let x = lazor::Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0], [5]);
    /// let w = x.unfold(0, 3, 2);
    /// assert_eq!(w.shape(), &[2, 3]);
    /// assert_eq!(w.to_vec(), vec![1.0, 2.0, 3.0, 3.0, 4.0, 5.0]);
    /// ```
    #[track_caller]
    pub fn unfold(&self, dim: impl Dim, size: usize, step: usize) -> Tensor {
        ok(self.try_unfold(dim, size, step))
    }

    /// [`Tensor::unfold`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `dim` is out of range, `step` is 0 or `size` exceeds the axis.
    pub fn try_unfold(&self, dim: impl Dim, size: usize, step: usize) -> Result<Tensor> {
        let d = self.axis("unfold", "dim", dim, 0)?;
        let extent = self.shape.dims()[d];
        if step == 0 {
            return Err(bad("unfold", &self.shape, "step must be at least 1, not 0".into()));
        }
        if size > extent {
            return Err(bad("unfold", &self.shape, format!("size {size} exceeds axis {dim} of extent {extent}")));
        }
        let own = self.own_view();
        let mut dims = self.shape.dims().to_vec();
        dims[d] = (extent - size) / step + 1;
        dims.push(size);
        let mut strides = own.strides.clone();
        strides[d] = own.strides[d] * step as isize;
        strides.push(own.strides[d]);
        let view = View { shape: Shape::from(dims), strides, offset: 0 };
        Ok(record(self.view(view), &[self], |_| Rule::Unfold { axis: d, size, step, extent }))
    }

    /// The tensors, all of one shape, stacked along a new axis `dim` (`0..=ndim`).
    ///
    /// # Panics
    /// If `tensors` is empty, the shapes differ, `dim` is out of range or the tensors live on different devices;
    /// [`Tensor::try_stack`] returns the error instead.
    #[track_caller]
    pub fn stack(tensors: &[&Tensor], dim: impl Dim) -> Tensor {
        ok(Tensor::try_stack(tensors, dim))
    }

    /// [`Tensor::stack`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] if `tensors` is empty, the shapes differ or `dim` is out of range;
    /// [`Error::DeviceMismatch`] across devices.
    pub fn try_stack(tensors: &[&Tensor], dim: impl Dim) -> Result<Tensor> {
        let Some(first) = tensors.first() else {
            return Err(bad("stack", &Shape::default(), "needs at least one tensor".into()));
        };
        let d = first.axis("stack", "dim", dim, 1)?;
        if let Some(t) = tensors.iter().find(|t| t.shape != first.shape) {
            return Err(bad("stack", &t.shape, format!("all shapes must equal the first, {}", first.shape)));
        }
        let parts: Vec<Tensor> = tensors.iter().map(|t| t.reshaped(t.own_view().unsqueeze(d))).collect();
        Tensor::try_cat(&parts.iter().collect::<Vec<_>>(), d)
    }
}
