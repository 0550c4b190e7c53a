//! Reverse-mode autograd: `Var`, the tape, `backward` and `Grads`; the backward pass is ordinary lazy ops.
//!
//! The tape lives at the API level, on the `Tensor` handles: realizing a node forgets its op and views compose at
//! construction, so the graph cannot say how a value was computed, but the op that built a handle can. Each
//! differentiable op calls [`tape::record`] where it builds its node; the rules ([`rules`]) turn an output's
//! gradient into its inputs' with ordinary lazy ops. `backward` runs nothing: the scheduler fuses the gradients
//! like any other expression, and realizing the loss with them computes shared forward values once.

mod grads;
mod pending;
pub(crate) mod rules;
mod tape;
mod var;

pub use grads::Grads;
pub(crate) use tape::{record, Rule, Tape};
pub use var::Var;

use crate::error::{Error, Result};
use crate::hash::FastMap;
use crate::tensor::Tensor;
use pending::PendingGrad;

/// Runs `f` with gradient tracking off on this thread and returns its value: nothing built inside is tracked
/// (an optimizer's update, an evaluation pass).
///
/// # Examples
/// ```no_run
/// use lazor::{Tensor, Var};
/// let w = Var::new(Tensor::ones([3]));
/// let y = lazor::no_grad(|| w.tensor() * 2.0);
/// assert!(!y.tracks_grad());
/// ```
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    tape::paused(f)
}

impl Tensor {
    /// Whether the tensor depends on a [`Var`] (outside [`no_grad`]), so [`Tensor::backward`] can differentiate
    /// it.
    pub fn tracks_grad(&self) -> bool {
        self.tape.is_some()
    }

    /// The same value, untracked: gradients do not flow through it. Costs nothing (the same graph node).
    pub fn detach(&self) -> Tensor {
        let mut t = self.clone();
        t.tape = None;
        t
    }

    /// An untracked handle for the tape to keep. A `Var`'s own value is kept through a view node of its own: a
    /// later `Var::set` moves every node that reads the old value onto a node holding it, so a backward pass over
    /// ops recorded before the `set` still reads the values they saw.
    pub(crate) fn saved(&self) -> Tensor {
        match &self.tape {
            Some(node) if matches!(node.rule, Rule::Leaf(_)) => self.pinned_view(),
            _ => self.detach(),
        }
    }

    /// The gradients of this one-element tensor (any shape of one element) with respect to every [`Var`] it
    /// depends on, as lazy tensors: nothing runs until they are realized.
    ///
    /// # Panics
    /// At the caller, naming the op and the shape, when the tensor has more than one element or depends on no
    /// `Var`; [`Tensor::try_backward`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::{Tensor, Var};
    /// let x = Var::new(Tensor::from_vec(vec![1.0f32, 2.0], [2]));
    /// let loss = x.tensor().square().sum_all();
    /// let grads = loss.backward();
    /// lazor::realize(&[&loss, &grads[&x]])?; // one realize, one submit
    /// assert_eq!(grads[&x].to_vec(), vec![2.0, 4.0]);
    /// # Ok::<(), lazor::Error>(())
    /// ```
    #[track_caller]
    pub fn backward(&self) -> Grads {
        crate::error::ok(self.try_backward())
    }

    /// [`Tensor::backward`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] when the tensor has more than one element or depends on no `Var`.
    pub fn try_backward(&self) -> Result<Grads> {
        if self.numel() != 1 {
            return Err(Error::BadArgument {
                op: "backward",
                message: format!(
                    "the loss has {} elements, not one (backward_with takes a gradient of any shape)",
                    self.numel()
                ),
                shape: self.shape.clone(),
            });
        }
        let one =
            Tensor::full_lane(self.shape.clone(), self.dtype.cast_lane(crate::DType::I32, 1), self.dtype, &self.device);
        self.backward_from(one, "backward")
    }

    /// The gradients of this tensor, of any shape, given `grad` (the gradient of some loss with respect to it, of
    /// its shape and dtype): a vector-Jacobian product.
    ///
    /// # Panics
    /// At the caller, naming the op and the shapes, when `grad`'s shape or dtype differs from this tensor's or the
    /// tensor depends on no `Var`; [`Tensor::try_backward_with`] returns the error instead.
    #[track_caller]
    pub fn backward_with(&self, grad: &Tensor) -> Grads {
        crate::error::ok(self.try_backward_with(grad))
    }

    /// [`Tensor::backward_with`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when `grad`'s shape or dtype differs from this tensor's, [`Error::DeviceMismatch`]
    /// across devices, [`Error::BadArgument`] when the tensor depends on no `Var`.
    pub fn try_backward_with(&self, grad: &Tensor) -> Result<Grads> {
        same_kind("backward_with", ("the gradient", grad), ("the shape and dtype of the tensor", self))?;
        self.device.check_same(&grad.device, "backward_with")?;
        self.backward_from(grad.detach(), "backward_with")
    }

    /// Walks the tape from this tensor, outputs before inputs, summing each node's gradient from its readers and
    /// handing it to its rule. Builds lazy ops only.
    fn backward_from(&self, seed: Tensor, op: &'static str) -> Result<Grads> {
        let Some(root) = &self.tape else {
            return Err(Error::BadArgument {
                op,
                message: "the tensor depends on no Var, so it has no gradients (wrap the inputs in lazor::Var)".into(),
                shape: self.shape.clone(),
            });
        };
        // With autocast off: each gradient keeps the type of the value it belongs to.
        Ok(crate::tensor::autocast::suspended(|| no_grad(|| Tensor::gradients(root, seed))))
    }

    /// The walk of [`Tensor::backward_from`], from the tape node `root` seeded with `seed`.
    fn gradients(root: &tape::Tape, seed: Tensor) -> Grads {
        let order = tape::order(root);
        let mut pending: FastMap<usize, PendingGrad> = FastMap::default();
        pending.insert(tape::key(root), PendingGrad::Whole(seed));
        let mut entries = Vec::new();
        for node in order.iter().rev() {
            let Some(g) = pending.remove(&tape::key(node)) else { continue };
            let g = g.finish();
            if let Rule::Leaf(var) = &node.rule {
                if let Some(inner) = var.upgrade() {
                    entries.push((Var::from_inner(inner), g));
                }
                continue;
            }
            let parts: smallvec::SmallVec<[Option<PendingGrad>; 3]> = match node.rule {
                // Kept as a piece, not padded yet: see `pending.rs`.
                Rule::Narrow { axis, start, extent } => {
                    smallvec::smallvec![Some(PendingGrad::piece(axis, start, extent, g))]
                }
                _ => {
                    let needs: Vec<bool> = node.inputs.iter().map(Option::is_some).collect();
                    rules::backward(&node.rule, &g, &needs).into_iter().map(|p| p.map(PendingGrad::Whole)).collect()
                }
            };
            for (input, part) in node.inputs.iter().zip(parts) {
                let (Some(input), Some(part)) = (input, part) else { continue };
                match pending.remove(&tape::key(input)) {
                    Some(sum) => pending.insert(tape::key(input), sum.add(part)),
                    None => pending.insert(tape::key(input), part),
                };
            }
        }
        Grads { entries }
    }
}

/// Fails unless `value` has the shape and dtype of `like`, naming both: "{what} (f32 [3]) must have {wanted}
/// (f32 [2])".
pub(crate) fn same_kind(op: &'static str, value: (&str, &Tensor), like: (&str, &Tensor)) -> Result<()> {
    let ((what, v), (wanted, l)) = (value, like);
    if v.shape == l.shape && v.dtype == l.dtype {
        return Ok(());
    }
    Err(Error::ShapeMismatch {
        op,
        message: format!("{what} ({} {}) must have {wanted} ({} {})", v.dtype, v.shape, l.dtype, l.shape),
        lhs: l.shape.clone(),
        rhs: v.shape.clone(),
    })
}
