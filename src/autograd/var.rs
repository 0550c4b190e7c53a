//! `Var`: a trainable leaf, the start of every tracked computation, whose value `set` replaces in place.

use super::tape::{Node, Rule, Tape};
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;
use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

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

/// What every clone of a `Var` shares: the tracked handles on its nodes, one per type it has held
/// ([`Var::set_dtype`]), each a leaf of the `Var` on the tape, and which of them holds the value.
pub(crate) struct VarInner {
    /// By the type's place in `DType::ALL`.
    values: [OnceLock<Tensor>; DType::ALL.len()],
    current: AtomicUsize,
}

impl Var {
    /// A `Var` holding `t`'s value in a device buffer, realized now: the node of `t` itself when `t` is the only
    /// handle on host data or a buffer, else a copy in a node of the `Var`'s own.
    ///
    /// # Panics
    /// If computing or uploading `t` fails on the device (out of memory, a lost device).
    #[track_caller]
    pub fn new(t: Tensor) -> Var {
        let mut t = crate::error::ok(own_node(t));
        let current = place(t.dtype);
        let inner = Arc::new_cyclic(|me| {
            t.tape = Some(leaf(me.clone()));
            let values: [OnceLock<Tensor>; DType::ALL.len()] = Default::default();
            let _ = values[current].set(t);
            VarInner { values, current: AtomicUsize::new(current) }
        });
        Var { inner }
    }

    /// The handle on the node holding the value.
    fn value(&self) -> &Tensor {
        self.inner.values[self.inner.current.load(Ordering::Acquire)].get().expect("the current type has a node")
    }

    /// The current value, tracked: ops on it record onto the tape.
    pub fn tensor(&self) -> Tensor {
        self.value().clone()
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
        let own = self.value();
        super::same_kind("set", ("the new value", &value), ("the Var's shape and dtype", own))?;
        own.device.check_same(&value.device, "set")?;
        move_in(own, value)
    }

    /// Casts the value to `dtype` in place (computed now): every clone of the `Var` and every handle
    /// [`Var::tensor`] gives from now on has the new type, and its gradients will. The old value's buffer goes back
    /// to the pool once the lazy results built from it are gone; a handle of the old type taken before reads NaN
    /// afterwards, so that a stale handle shows itself. What [`Module::to_dtype`](crate::nn::Module::to_dtype) does
    /// to each float parameter, for inference in bf16 say.
    ///
    /// # Panics
    /// On a device failure; [`Var::try_set_dtype`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::{DType, Tensor, Var};
    /// let w = Var::new(Tensor::from_vec(vec![1.5f32, -2.0], [2]));
    /// w.set_dtype(DType::BF16);
    /// assert_eq!(w.dtype(), DType::BF16);
    /// assert_eq!(w.to_dtype(DType::F32).to_vec(), vec![1.5, -2.0]);
    /// ```
    #[track_caller]
    pub fn set_dtype(&self, dtype: DType) {
        crate::error::ok(self.try_set_dtype(dtype))
    }

    /// [`Var::set_dtype`], returning an error instead of panicking.
    ///
    /// # Errors
    /// Device failures as [`Tensor::realize`].
    pub fn try_set_dtype(&self, dtype: DType) -> Result<()> {
        self.try_retype(self.value().detach().to_dtype(dtype))
    }

    /// Replaces the value with `value`, of the `Var`'s shape in any type, the `Var` taking that type: `set` where
    /// the type is the same.
    pub(crate) fn try_retype(&self, value: Tensor) -> Result<()> {
        let own = self.value();
        if value.dtype == own.dtype {
            return self.try_set(value);
        }
        if value.shape != own.shape {
            return Err(crate::error::Error::ShapeMismatch {
                op: "set_dtype",
                message: "the new value must have the Var's shape".into(),
                lhs: own.shape.clone(),
                rhs: value.shape.clone(),
            });
        }
        own.device.check_same(&value.device, "set_dtype")?;
        let to = place(value.dtype);
        match self.inner.values[to].get() {
            // A type the Var held before: its node takes the value.
            Some(slot) => move_in(slot, value)?,
            None => {
                let mut t = own_node(value)?;
                t.tape = Some(leaf(Arc::downgrade(&self.inner)));
                if let Err(t) = self.inner.values[to].set(t) {
                    // Another thread made the node first.
                    move_in(self.inner.values[to].get().expect("set"), t)?;
                }
            }
        }
        self.inner.current.store(to, Ordering::Release);
        forget(own);
        Ok(())
    }

    /// Whether `self` and `other` are the same parameter (clones of one `Var`).
    ///
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
        self.value()
    }
}

impl std::fmt::Debug for Var {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Var").field("shape", &self.value().shape).field("dtype", &self.value().dtype).finish()
    }
}

/// `t` untracked in a node a `Var` can own, realized: `t`'s own node when `t` is the only handle on host data or
/// a buffer, else a copy.
fn own_node(t: Tensor) -> Result<Tensor> {
    // Untracked, without a second handle: the node is taken over only when this is the one handle on it.
    let mut t = t;
    t.tape = None;
    if !t.is_sole_storage() {
        t = t.copied();
    }
    // In a buffer from the start: a lazy value would be recomputed by every realize, and a step's plan is keyed on
    // whether its leaves hold buffers, so host data left for the first step to upload would make the second step's
    // plan differ from the first's.
    if !t.is_realized() {
        t.realize()?;
    }
    Ok(t)
}

/// Moves `value` (of `own`'s shape and type) into `own`'s node: its buffer when `value` is the one handle on it,
/// else a copy. Nodes that read the old value keep it.
fn move_in(own: &Tensor, value: Tensor) -> Result<()> {
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

/// Lets the buffer of a type's node the `Var` no longer holds go: nodes that read the old value keep it, and the
/// node itself reads NaN from now on (lazily, no buffer), so that a handle kept across `set_dtype` shows it is
/// stale rather than a plausible value.
fn forget(old: &Tensor) {
    let nan = old.dtype.cast_lane(DType::F32, f32::NAN.to_bits());
    old.assign_from(&Tensor::full_lane(old.shape.clone(), nan, old.dtype, &old.device));
}

/// A tape leaf of the `Var` `me`.
fn leaf(me: Weak<VarInner>) -> Tape {
    Arc::new(Node { rule: Rule::Leaf(me), inputs: Default::default() })
}

/// `dtype`'s place in `DType::ALL`, where a `Var` keeps its node of that type.
fn place(dtype: DType) -> usize {
    DType::ALL.iter().position(|&d| d == dtype).expect("every dtype is in DType::ALL")
}
