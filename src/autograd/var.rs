//! `Var`: a trainable leaf, the start of every tracked computation, whose value `set` replaces in place.

use super::tape::{Node, Rule};
use crate::error::Result;
use crate::tensor::Tensor;
use std::ops::Deref;
use std::sync::Arc;

/// A trainable leaf: a tensor whose gradients [`Tensor::backward`] computes. Cloning a `Var` clones the handle
/// (the same parameter). It derefs to its current value, tracked, so `x.matmul(&w)` and `w.shape()` work.
///
/// The value lives in one graph node that the `Var` owns: [`Var::set`] replaces what that node holds, so every
/// clone of the `Var`, and every handle from [`Var::tensor`], sees the new value. What was computed from the old
/// value before `set` keeps it: a lazy gradient or update not yet realized, and a backward pass over ops recorded
/// before the `set`.
///
/// # Examples
/// ```no_run
/// use lazor::{Tensor, Var};
/// let w = Var::new(Tensor::from_vec(vec![1.0f32, -2.0], [2]));
/// let loss = w.tensor().square().sum_all();
/// let g = loss.backward()[&w].clone();
/// w.set(&*w - &(g * 0.1)); // one step of gradient descent
/// assert_eq!(w.to_vec(), vec![0.8, -1.6]);
/// ```
#[derive(Clone)]
pub struct Var {
    inner: Arc<VarInner>,
}

/// What every clone of a `Var` shares: the tracked handle on its node, whose tape node is the `Var`'s leaf.
pub(crate) struct VarInner {
    value: Tensor,
}

impl Var {
    /// A `Var` holding `t`'s value in a device buffer, realized now: the node of `t` itself when `t` is the only
    /// handle on host data or a buffer, else a copy in a node of the `Var`'s own.
    ///
    /// # Panics
    /// If computing or uploading `t` fails on the device (out of memory, a lost device).
    #[track_caller]
    pub fn new(t: Tensor) -> Var {
        // Untracked, without a second handle: the node is taken over only when this is the one handle on it.
        let mut t = t;
        t.tape = None;
        if !t.is_sole_storage() {
            t = t.copied();
        }
        // In a buffer from the start: a lazy value would be recomputed by every realize, and a step's plan is keyed
        // on whether its leaves hold buffers, so host data left for the first step to upload would make the second
        // step's plan differ from the first's.
        crate::error::ok(t.realize());
        let inner = Arc::new_cyclic(|me| {
            t.tape = Some(Arc::new(Node { rule: Rule::Leaf(me.clone()), inputs: Default::default() }));
            VarInner { value: t }
        });
        Var { inner }
    }

    /// The current value, tracked: ops on it record onto the tape.
    pub fn tensor(&self) -> Tensor {
        self.inner.value.clone()
    }

    /// Replaces the value with `value` (computed now if lazy). When `value` is the only handle on its node, its
    /// buffer becomes the `Var`'s, with no copy; the old value's buffer goes back to the pool when nothing else
    /// reads it, so a training loop reuses the same buffers step after step.
    ///
    /// # Panics
    /// At the caller, naming both, when `value`'s shape or dtype differs from the `Var`'s; on a device failure.
    /// [`Var::try_set`] returns the error instead.
    #[track_caller]
    pub fn set(&self, value: Tensor) {
        crate::error::ok(self.try_set(value))
    }

    /// [`Var::set`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when `value`'s shape or dtype differs from the `Var`'s, [`Error::DeviceMismatch`]
    /// when it lives on another device, and device failures as [`Tensor::realize`].
    pub fn try_set(&self, value: Tensor) -> Result<()> {
        let own = &self.inner.value;
        super::same_kind("set", ("the new value", &value), ("the Var's shape and dtype", own))?;
        own.device.check_same(&value.device, "set")?;
        // The one handle on the new value, so that its buffer moves into the Var rather than being copied.
        let mut value = value;
        value.tape = None;
        if value.id == own.id {
            return Ok(());
        }
        // An optimizer realizes every new value in one realize first; `set` then only moves them in.
        if !value.is_realized() {
            value.realize()?;
        }
        let copied = own.assign_from(&value);
        drop(value);
        if copied {
            own.realize()?;
        }
        Ok(())
    }

    /// Whether `self` and `other` are the same parameter (clones of one `Var`), not whether their values are equal.
    /// `Var` has no `==`: through `Deref` every `Tensor` method works on a `Var`, `eq` and `ne` included
    /// (elementwise comparisons, as on tensors).
    ///
    /// # Examples
    /// ```no_run
    /// let w = lazor::Var::new(lazor::Tensor::zeros([2]));
    /// assert!(w.same(&w.clone()));
    /// let mask = w.eq(0.5); // elementwise, a Bool tensor
    /// ```
    pub fn same(&self, other: &Var) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The `Var` of a leaf, while any handle on it lives.
    pub(crate) fn from_inner(inner: Arc<VarInner>) -> Var {
        Var { inner }
    }
}

impl Deref for Var {
    type Target = Tensor;

    fn deref(&self) -> &Tensor {
        &self.inner.value
    }
}

impl std::fmt::Debug for Var {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Var").field("shape", &self.inner.value.shape).field("dtype", &self.inner.value.dtype).finish()
    }
}
