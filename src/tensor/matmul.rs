//! The matrix product API: `matmul` with PyTorch's `torch.matmul` rules (vectors, matrices, broadcast batches).
//! Operands are read through their views; the product is one graph node over equal batch axes.

use crate::autograd::{record, Rule};
use crate::error::{Error, Result};
use crate::graph::Op;
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
        let product =
            if let Some(parts) = (batch.numel() == 1).then(|| split_k(&self.device, (m, k, n), &a, &b)).flatten() {
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
    let p = Tensor::from_op(&a.device, Op::Matmul(a.id, b.id, tri), out, a.dtype);
    record(p, &[a, b], |_| Rule::Matmul { a: a.saved(), b: b.saved(), tri })
}

/// How many slices of k a single `m x n x k` product on `device` is cut into, if any: where its output makes too few
/// workgroups to fill the GPU and k is long, enough slices (a power of two dividing k) for the slices' workgroups
/// to fill it.
/// - Tiled products (k at least 4096): slices at least 256 deep, sized for the large tile. On the H200 a weight
///   gradient `[384, 16384] x [16384, 384]` ran as 36 workgroups at 2.8 TFLOP/s; slices sized for the small tile
///   ran nanoGPT's weight gradients at 18-24 TFLOP/s, sized for the large one at 22-26 (a training step 61-68 ms
///   against 55). The count is the one [`tiled_slices`] prices lowest.
/// - Thin products (at most [`crate::schedule::THIN`] rows or columns; a 10-class layer's weight gradient, a
///   vector times a matrix) on the thin kernel's layout ([`crate::kernel::Thin`], chosen by the same rule as the
///   scheduler's): slices at least 64 deep where a thread walks k, 256 where a team does.
///
/// The CPU backend's `gemm` splits work itself.
fn split_k(device: &crate::device::Device, (m, k, n): (usize, usize, usize), a: &Tensor, b: &Tensor) -> Option<usize> {
    let thin = m.min(n) <= crate::schedule::THIN;
    if device.is_cpu() {
        return None;
    }
    let tiles = device.inner.backend.matmul_tiles();
    let (groups, depth) = if thin {
        // The scheduler's choice (a fold where there is none, which cuts k itself).
        let layout = crate::kernel::Thin::choose(m, n, |is_a, last| {
            let t = if is_a { a } else { b };
            t.contiguous_along(t.ndim() - 2 + usize::from(last))
        })?;
        (layout.groups(m, n, 1), if layout.team { 256 } else { 64 })
    } else {
        (tiles.large.groups(m, n), TILED_DEPTH)
    };
    slices(thin, groups, depth, k, m * n, tiles.min_large_groups)
}

/// [`split_k`]'s count for a product of `outputs` outputs over `k` making `groups` workgroups (thin, or large tiles),
/// cut into slices at least `depth` deep, on a device that runs `busy` workgroups at once.
fn slices(thin: bool, groups: usize, depth: usize, k: usize, outputs: usize, busy: usize) -> Option<usize> {
    // A k of at least 8 slices: for tiled products 8 of 512 (4096), though a slice may then be as shallow as
    // `TILED_DEPTH`.
    if k < 8 * if thin { depth } else { 512 } {
        return None;
    }
    let parts = if groups >= busy {
        1
    } else if thin {
        // The fewest slices that fill the device.
        let counts = slice_counts(k, depth);
        counts.clone().find(|&p| groups * p >= busy).or_else(|| counts.last()).unwrap_or(1)
    } else {
        tiled_slices(groups, k, outputs, busy)
    };
    // Slices too few for the scheduler's thin kernel (it wants half `min_large_groups`) would become a batched fold
    // plus a sum, slower than the one fold they replace.
    let thin_enough = !thin || groups * parts * 2 >= busy;
    (parts > 1 && thin_enough).then_some(parts)
}

/// The shallowest slice of k a tiled product is cut into ([`split_k`]).
const TILED_DEPTH: usize = 256;

/// What a slice's partial output costs to sum, against one step of k of a round of large tiles: the sum reads
/// each partial once (about 1.2 us per million on the H200), a round's step of k takes about 0.235 us.
const SUM_PER_ELEMENT: f64 = 5.0e-6;

/// Slices of k for a tiled product of `groups` large tiles over `k`, with `outputs` outputs, on a device that runs
/// `busy` workgroups at once: 1 where the tiles alone fill the device. Otherwise the power of two dividing `k` into
/// slices at least [`TILED_DEPTH`] deep whose price is lowest (ties to fewer slices): its rounds of `busy`
/// workgroups, each as long as a slice, plus what summing its partials costs ([`SUM_PER_ELEMENT`]). A last round
/// that is not full costs part of a full one: its workgroups run faster with fewer beside them, and in a long
/// product they start staggered, so the part left empty is charged once over all the rounds. Fitted to nanoGPT's
/// weight gradients on the H200 (`docs/notes/benchmarks-log.md`, 2026-11-29, fourth session), where it priced
/// each product within 4% of its time: `[384, 384]` cut 32 ways (288 workgroups, 1.1 rounds) ran at 26.1
/// TFLOP/s, 64 ways at 30.7; `[1152, 384]` 16 ways at 31.7, 64 ways at 35.4; `[1536, 384]` 32 and 64 ways at 37.1
/// and 37.0, where the smaller sum decides.
fn tiled_slices(groups: usize, k: usize, outputs: usize, busy: usize) -> usize {
    if groups >= busy {
        return 1;
    }
    let price = |p: usize| {
        let rounds = (groups * p) as f64 / busy as f64;
        let whole = rounds.ceil();
        (rounds + (whole - rounds) / whole) * (k / p) as f64 + SUM_PER_ELEMENT * (p * outputs) as f64
    };
    let counts = slice_counts(k, TILED_DEPTH);
    counts.min_by(|&p, &q| price(p).total_cmp(&price(q)).then(p.cmp(&q))).unwrap_or(1)
}

/// The slice counts k can be cut into: powers of two from 2 that divide `k` into slices at least `depth` deep.
fn slice_counts(k: usize, depth: usize) -> impl Iterator<Item = usize> + Clone {
    std::iter::successors(Some(2), |p| Some(p * 2)).take_while(move |&p| k % p == 0 && k / p >= depth)
}

#[cfg(test)]
mod tests {
    use super::{slices, tiled_slices};

    #[test]
    fn thin_products_are_cut_from_shorter_k_than_tiled_ones() {
        // A thin kernel walking k a thread at a time (slices 64 deep) is cut from k = 512, a team's (256 deep)
        // from 2048; tiled products only from 4096, though their slices may be 256 deep.
        assert_eq!(slices(true, 16, 64, 1024, 1024 * 10, 256), Some(16));
        assert_eq!(slices(true, 16, 64, 256, 1024 * 10, 256), None);
        assert_eq!(slices(true, 16, 256, 2048, 512 * 10, 256), Some(8));
        assert_eq!(slices(false, 9, 256, 2048, 384 * 384, 256), None);
        assert_eq!(slices(false, 9, 256, 4096, 384 * 384, 256), Some(16));
        // Enough workgroups already: no cut.
        assert_eq!(slices(false, 512, 256, 1 << 16, 4096 * 4096, 256), None);
    }

    #[test]
    fn weight_gradients_are_cut_where_rounds_and_sums_cost_least() {
        // nanoGPT's MLP weight gradients `[1536, 384]`: 36 large tiles over k = 16384 on a device running 256 at
        // once. 32 slices (4.5 rounds of 512) and 64 (9 rounds of 256) take as long; 32 sum half as much.
        assert_eq!(tiled_slices(36, 16384, 1536 * 384, 256), 32);
        // Its attention weights' `[1152, 384]`: 27 tiles, where 16 slices are 1.7 rounds of 1024 and 64 are 6.75
        // rounds of 256 (32 price within 0.01% of 64).
        assert_eq!(tiled_slices(27, 16384, 1152 * 384, 256), 64);
        // Its projection's `[384, 384]`: 9 tiles, 32 slices are 1.1 rounds, 64 are 2.25.
        assert_eq!(tiled_slices(9, 16384, 384 * 384, 256), 64);
        // The MLP's [1024 x 1024] gradient: 64 tiles, 4 slices fill one round exactly.
        assert_eq!(tiled_slices(64, 4096, 1024 * 1024, 256), 4);
        // Slices stay at least 256 deep, even where that leaves the device short of workgroups.
        assert_eq!(tiled_slices(9, 4096, 384 * 384, 256), 16);
        // Enough tiles already, or k too short to cut: no slices.
        assert_eq!(tiled_slices(256, 1 << 20, 1 << 20, 256), 1);
        assert_eq!(tiled_slices(10, 400, 1000, 256), 1);
        // k cut only by powers of two that divide it.
        assert_eq!(tiled_slices(36, 2 * 4097, 1536 * 384, 256), 2);
    }
}
