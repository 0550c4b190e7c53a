//! `Grads`: what `backward` returns, each `Var`'s gradient as a lazy tensor.

use super::var::Var;
use crate::error::Result;
use crate::tensor::Tensor;
use std::ops::Index;

/// The gradients of one backward pass: for each [`Var`] the loss depends on, a lazy, untracked tensor of the
/// `Var`'s shape and dtype. Nothing has run yet: [`Grads::realize`] (or `lazor::realize` with the loss) computes
/// them all in one realize, sharing the forward values they read.
///
/// # Examples
/// ```no_run
/// use lazor::{Tensor, Var};
/// let w = Var::new(Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3]));
/// let loss = (w.tensor() * 2.0).sum_all();
/// let grads = loss.backward();
/// grads.realize()?;
/// assert_eq!(grads[&w].to_vec(), vec![2.0, 2.0, 2.0]);
/// # Ok::<(), lazor::Error>(())
/// ```
pub struct Grads {
    pub(crate) entries: Vec<(Var, Tensor)>,
}

impl Grads {
    /// `var`'s gradient, or `None` when the loss does not depend on `var`.
    pub fn get(&self, var: &Var) -> Option<Tensor> {
        self.entries.iter().find(|(v, _)| v.same(var)).map(|(_, g)| g.clone())
    }

    /// How many `Var`s have a gradient.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no `Var` has a gradient (never after a successful `backward`, which needs one).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The `Var`s that have a gradient, in the order the backward pass reached them.
    pub fn vars(&self) -> Vec<Var> {
        self.entries.iter().map(|(v, _)| v.clone()).collect()
    }

    /// Adds `other`'s gradients to these, lazily: a `Var` in both gets the sum, a `Var` only in `other` its
    /// gradient. Summing the gradients of micro-batches this way and stepping once is a step on the whole batch
    /// (with losses that are sums; scale means by the micro-batch's share). Nothing runs: the sums fuse into
    /// whatever realizes them.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::{Tensor, Var};
    /// let w = Var::new(Tensor::from_vec(vec![1.0f32, 2.0], [2]));
    /// let mut grads = (w.tensor() * 2.0).sum_all().backward();
    /// grads.accumulate(&(w.tensor() * 3.0).sum_all().backward());
    /// assert_eq!(grads[&w].to_vec(), vec![5.0, 5.0]);
    /// ```
    pub fn accumulate(&mut self, other: &Grads) {
        crate::no_grad(|| {
            for (var, g) in &other.entries {
                match self.entries.iter_mut().find(|(v, _)| v.same(var)) {
                    Some((_, mine)) => *mine = &*mine + g,
                    None => self.entries.push((var.clone(), g.clone())),
                }
            }
        })
    }

    /// Each `Var` with its gradient, in the order the backward pass reached them.
    pub fn iter(&self) -> impl Iterator<Item = (&Var, &Tensor)> {
        self.entries.iter().map(|(v, g)| (v, g))
    }

    /// Computes every gradient in one realize per device (at most one submit).
    ///
    /// # Errors
    /// As [`Tensor::realize`].
    pub fn realize(&self) -> Result<()> {
        let all: Vec<&Tensor> = self.entries.iter().map(|(_, g)| g).collect();
        crate::tensor::realize(&all)
    }
}

impl Index<&Var> for Grads {
    type Output = Tensor;

    /// `var`'s gradient.
    ///
    /// # Panics
    /// At the caller, naming the `Var`'s shape, when the loss does not depend on `var`; [`Grads::get`] returns
    /// `None` instead.
    #[track_caller]
    fn index(&self, var: &Var) -> &Tensor {
        match self.entries.iter().find(|(v, _)| v.same(var)) {
            Some((_, g)) => g,
            None => panic!(
                "lazor: grads[&var]: no gradient for the Var of shape {} ({}): the loss does not depend on it",
                var.shape, var.dtype
            ),
        }
    }
}

impl std::fmt::Debug for Grads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.entries.iter().map(|(_, g)| g)).finish()
    }
}
