//! The matrix product API: `matmul` with PyTorch's `torch.matmul` rules (vectors, matrices, broadcast batches).
//! Operands are read through their views; the product is one graph node over equal batch axes.

use crate::autograd::{record, Rule};
use crate::error::{Error, Result};
use crate::graph::NodeOp;
use crate::op::Tri;
use crate::shape::Shape;
use crate::tensor::{autocast, Tensor};

impl Tensor {
    /// The matrix product, with `torch.matmul`'s rules: `[m, k] x [k, n]` gives `[m, n]`; `[..., m, k] x [..., k, n]`
    /// gives `[..., m, n]` with the batch axes broadcast by NumPy's rules; a 1-D operand is a vector (`[k] x [k, n]`
    /// gives `[n]`, `[m, k] x [k]` gives `[m]`, `[k] x [k]` gives `[]`). Views (`b.t()`, `x.narrow(..)`, a permuted
    /// batch) are read through their strides, with no copy. Accumulates in `f32`.
    ///
    /// Elementwise ops on the product (a bias, an activation, a residual) run inside the matmul kernel, and cheap
    /// ones on an operand (a scale, a unary op) run on its loads.
    ///
    /// # Panics
    /// If the inner sizes differ, the batch axes cannot broadcast, an operand is a scalar or the operands live on
    /// different devices; [`Tensor::try_matmul`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::Tensor;
    /// let x = Tensor::ones([2, 3]);
    /// let w = Tensor::ones([4, 3]);
    /// let y = (x.matmul(&w.t()) + 1.0).relu(); // one kernel
    /// assert_eq!(y.to_vec(), vec![4.0; 8]);
    /// ```
    #[track_caller]
    pub fn matmul(&self, rhs: &Tensor) -> Tensor {
        crate::error::ok(self.try_matmul(rhs))
    }

    /// [`Tensor::matmul`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] naming both shapes if the inner sizes differ or the batch axes cannot broadcast,
    /// [`Error::BadArgument`] for a scalar operand, [`Error::DeviceMismatch`] across devices.
    pub fn try_matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        if let Some([a, b]) = autocast::half_operands([self, rhs]) {
            return autocast::suspended(|| a.try_matmul(&b));
        }
        self.device.check_same(&rhs.device, "matmul")?;
        let mismatch = |message: String| Error::ShapeMismatch {
            op: "matmul",
            message,
            lhs: self.shape.clone(),
            rhs: rhs.shape.clone(),
        };
        for t in [self, rhs] {
            if t.ndim() == 0 {
                return Err(Error::BadArgument {
                    op: "matmul",
                    message: "operands need at least one axis".into(),
                    shape: t.shape.clone(),
                });
            }
        }
        // Float operands of one type: products and sums in f32, rounded once to that type.
        let dt = self.dtype.promote(rhs.dtype).filter(|d| d.is_float()).ok_or_else(|| Error::DType {
            op: "matmul",
            message: format!(
                "operands are {} and {}; matmul takes float tensors (cast with to_dtype)",
                self.dtype, rhs.dtype
            ),
        })?;
        let (x, y) = (self.cast_to(dt), rhs.cast_to(dt));
        // Vectors become matrices of one row (left) or one column (right), dropped from the result again.
        let a = if x.ndim() == 1 { x.unsqueeze(0) } else { x.clone() };
        let b = if y.ndim() == 1 { y.unsqueeze(1) } else { y.clone() };
        let (da, db) = (a.shape.dims(), b.shape.dims());
        let (m, k) = (da[da.len() - 2], da[da.len() - 1]);
        let (kb, n) = (db[db.len() - 2], db[db.len() - 1]);
        if k != kb {
            return Err(mismatch(format!("inner sizes differ ({k} and {kb})")));
        }
        let batch_a = Shape::from(&da[..da.len() - 2]);
        let batch_b = Shape::from(&db[..db.len() - 2]);
        let batch = batch_a
            .broadcast(&batch_b)
            .ok_or_else(|| mismatch(format!("batch axes {batch_a} and {batch_b} cannot be broadcast together")))?;
        let with = |tail: [usize; 2]| -> Shape {
            let mut d = batch.dims().to_vec();
            d.extend(tail);
            Shape::from(d)
        };
        // A stack of matrices times one matrix is one taller product when the stack is contiguous: better tiles.
        let product = if let Some(parts) = (batch.numel() == 1)
            .then(|| {
                self.device.split_k((m, k, n), |is_a, last| {
                    let t = if is_a { &a } else { &b };
                    t.contiguous_along(t.ndim() - 2 + usize::from(last))
                })
            })
            .flatten()
        {
            // Few output tiles over a long k (a weight's gradient, `x^T g`): k is cut into `parts` slices whose
            // products run side by side as a batch, then summed. Both cuts are views.
            let a3 = a.reshape([m, k]).reshape([m, parts, k / parts]).permute([1, 0, 2]);
            let b3 = b.reshape([k, n]).reshape([parts, k / parts, n]);
            a3.matmul(&b3).sum(0).reshape(with([m, n]))
        } else if batch_b.numel() == 1 && batch.ndim() > 0 && a.is_contiguous() && batch_a == batch {
            let flat = a.reshape([batch.numel() * m, k]);
            let b2 = b.reshape([k, n]);
            product_node(&flat, &b2, Shape::from([batch.numel() * m, n]), Tri::Full).reshape(with([m, n]))
        } else {
            product_node(&a.expand(with([m, k])), &b.expand(with([k, n])), with([m, n]), Tri::Full)
        };
        let mut out = product;
        if rhs.ndim() == 1 {
            out = out.squeeze(-1);
        }
        if self.ndim() == 1 {
            out = out.squeeze(if rhs.ndim() == 1 { -1 } else { -2 });
        }
        Ok(out)
    }

    /// The batched product of `self` (`[..., m, k]`) and `rhs` (`[..., k, n]`) keeping triangle `tri` of each batch
    /// matrix ([`Tri`]): what causal attention's products are built from, skipping the blocks its mask zeroes. The
    /// batch axes broadcast; both operands are float matrices of one type (the caller's to ensure). Public for the
    /// tests, which check every mode against the reference interpreter.
    ///
    /// # Panics
    /// If an operand has fewer than 2 axes, the inner sizes differ, the batch axes cannot broadcast or an operand is
    /// not float.
    #[doc(hidden)]
    #[track_caller]
    pub fn matmul_tri(&self, rhs: &Tensor, tri: Tri) -> Tensor {
        if tri == Tri::Full {
            return self.matmul(rhs);
        }
        crate::error::ok(self.device.check_same(&rhs.device, "matmul_tri"));
        let (da, db) = (self.shape.dims(), rhs.shape.dims());
        let (ra, rb) = (da.len(), db.len());
        assert!(
            ra >= 2 && rb >= 2 && da[ra - 1] == db[rb - 2],
            "lazor: matmul_tri: shapes {} and {}",
            self.shape,
            rhs.shape
        );
        let batch = Shape::from(&da[..ra - 2]).broadcast(&Shape::from(&db[..rb - 2])).unwrap_or_else(|| {
            panic!("lazor: matmul_tri: batch axes of {} and {} cannot broadcast", self.shape, rhs.shape)
        });
        let with = |tail: [usize; 2]| -> Shape {
            let mut d = batch.dims().to_vec();
            d.extend(tail);
            Shape::from(d)
        };
        let dt = self.dtype.promote(rhs.dtype).filter(|d| d.is_float()).expect("lazor: matmul_tri: float operands");
        let (m, k, n) = (da[ra - 2], da[ra - 1], db[rb - 1]);
        product_node(&self.cast_to(dt).expand(with([m, k])), &rhs.cast_to(dt).expand(with([k, n])), with([m, n]), tri)
    }
}

/// The product node of `a` and `b` (float, one type, equal batch axes) of shape `out`, keeping `tri`, with its
/// derivative rule: what every path of `matmul` and `matmul_tri` ends in.
fn product_node(a: &Tensor, b: &Tensor, out: Shape, tri: Tri) -> Tensor {
    let p = Tensor::from_op(&a.device, NodeOp::Matmul(a.id, b.id, tri), out, a.dtype);
    record(p, &[a, b], |_| Rule::Matmul { a: a.saved(), b: b.saved(), tri })
}
