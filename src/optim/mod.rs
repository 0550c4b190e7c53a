//! Optimizers, as `torch.optim`: [`Sgd`] and [`AdamW`], each step one realize.
//!
//! A step builds every parameter's update as lazy tensor code over its gradient, its value and its optimizer
//! states, then realizes all the new values and states together (with the loss, through `step_with`), so the
//! forward pass, the backward pass and the update are one realize and one submit. Each parameter's update is
//! elementwise over the parameter's shape, so the scheduler fuses it, new value and new states, into one kernel,
//! or into the epilogue of the kernel that computes the gradient, and the new states are stored into the old
//! states' buffers (nothing else holds those). The learning rate and the step's number are graph constants, which
//! kernels read as parameters: a schedule that changes them every step compiles nothing and reuses its plan. A
//! [`GradScaler`] steps an optimizer the same way, with its inf/NaN check and the skip on the device.
//!
//! ```no_run
//! use lazor::nn::{self, Module};
//! use lazor::optim::{AdamW, AdamWConfig};
//! use lazor::Tensor;
//! let model = nn::Linear::new(4, 1, true, 0);
//! let mut opt = AdamW::new(&model.vars(), AdamWConfig { lr: 1e-2, ..Default::default() });
//! let (x, y) = (Tensor::rand([32, 4], 1), Tensor::rand([32, 1], 2));
//! for step in 0..100 {
//!     let loss = model.forward(&x).mse_loss(&y);
//!     let grads = loss.backward();
//!     opt.set_lr(1e-2 * (1.0 - step as f32 / 100.0)); // a schedule: nothing new compiled or planned
//!     opt.step_with(&grads, &[&loss]); // forward, backward and update: one realize
//!     if step % 10 == 0 {
//!         println!("{}", loss.to_scalar());
//!     }
//! }
//! ```

mod adamw;
mod scaler;
mod sgd;

pub use adamw::{AdamW, AdamWConfig};
pub use scaler::{GradScaler, GradScalerConfig};
pub use sgd::{Sgd, SgdConfig};

use crate::autograd::{same_kind, Grads, Var};
use crate::dtype::DType;
use crate::error::ok;
use crate::error::{Error, Result};
use crate::tensor::seam::Released;
use crate::tensor::Tensor;

/// An optimizer's update rule: its settings, and the lazy update of one parameter. [`Sgd`] and [`AdamW`] are
/// [`Optimizer`]s of [`SgdConfig`] and [`AdamWConfig`]; a rule of one's own makes an optimizer that steps the same
/// way (one realize, fused updates, graph constants).
pub trait UpdateRule: Copy {
    /// The optimizer's name in errors (`"AdamW"`).
    const NAME: &'static str;

    /// Fails when a setting is out of range, naming it.
    ///
    /// # Errors
    /// [`Error::Config`].
    fn check(&self) -> Result<()>;

    /// How many tensors of state the rule keeps per parameter (f32 zeros of the parameter's shape to start).
    fn states(&self) -> usize;

    /// The learning rate.
    fn lr(&self) -> f32;

    /// Sets the learning rate.
    fn set_lr(&mut self, lr: f32);

    /// The new value of a parameter (`p`, widened to f32) and of its states, given its gradient `g` (f32) and
    /// the step's number `t` for this parameter (1 at its first step; an f32 tensor of shape `[]`), as lazy f32
    /// tensors. `t` is a graph constant, or, once a [`GradScaler`] has stepped the optimizer, a count kept on the
    /// device (a step it skips does not advance it): compute with it as a tensor. Whatever else changes from step
    /// to step (the learning rate) must enter as [`Tensor::scalar_on`] constants, so that steps share one plan
    /// and compile nothing.
    fn update(&self, t: &Tensor, p: Tensor, g: Tensor, states: &[Tensor]) -> (Tensor, Vec<Tensor>);
}

/// An optimizer of some parameters under the update rule `R`: [`Sgd`] and [`AdamW`].
///
/// A step builds every parameter's update lazily and realizes all the new values and states at once, with the
/// loss when given through [`Optimizer::step_with`]: forward, backward and update are one realize and one
/// submit. Parameters without a gradient are left alone, as PyTorch skips a parameter whose `.grad` is `None`.
pub struct Optimizer<R: UpdateRule> {
    params: Vec<Var>,
    config: R,
    /// Each parameter's states, in the rule's order.
    states: Vec<Vec<Tensor>>,
    /// Steps each parameter has taken.
    steps: Steps,
}

/// Where an optimizer's step counts live.
enum Steps {
    /// On the host, one per parameter: while every step has been unconditional.
    Host(Vec<u64>),
    /// On the device, an `I32` vector of one count per parameter: from the first step a [`GradScaler`] guarded,
    /// since such a step advances the counts only where it finds no inf or NaN, which the host does not learn.
    Device(Tensor),
}

impl<R: UpdateRule> Optimizer<R> {
    /// An optimizer of `params` (clones of the `Var`s: it updates the caller's parameters) with the settings
    /// `config`; its states start at zero.
    ///
    /// # Panics
    /// At the caller when a setting is out of range (see each rule's settings), or on a device failure
    /// allocating the states; [`Optimizer::try_new`] returns the error instead.
    #[track_caller]
    pub fn new(params: &[Var], config: R) -> Optimizer<R> {
        ok(Optimizer::try_new(params, config))
    }

    /// [`Optimizer::new`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::Config`] for a setting out of range; device failures as [`Tensor::realize`].
    pub fn try_new(params: &[Var], config: R) -> Result<Optimizer<R>> {
        config.check()?;
        // Zeros of each parameter's shape, realized in one realize per device.
        let states: Vec<Vec<Tensor>> = params
            .iter()
            .map(|p| (0..config.states()).map(|_| Tensor::zeros_on(p.shape(), p.device()).contiguous()).collect())
            .collect();
        crate::tensor::realize(&states.iter().flatten().collect::<Vec<_>>())?;
        Ok(Optimizer { params: params.to_vec(), config, states, steps: Steps::Host(vec![0; params.len()]) })
    }

    /// Updates every parameter that has a gradient in `grads`, realizing the new values and states in one
    /// realize.
    ///
    /// # Panics
    /// On a device failure, or when a gradient's shape or dtype differs from its parameter's;
    /// [`Optimizer::try_step`] returns the error instead.
    #[track_caller]
    pub fn step(&mut self, grads: &Grads) {
        ok(self.try_step_with(grads, &[]))
    }

    /// [`Optimizer::step`], also realizing `also` (the loss, metrics) in the same realize: forward, backward and
    /// update in one realize and one submit.
    ///
    /// # Panics
    /// As [`Optimizer::step`]; [`Optimizer::try_step_with`] returns the error instead.
    #[track_caller]
    pub fn step_with(&mut self, grads: &Grads, also: &[&Tensor]) {
        ok(self.try_step_with(grads, also))
    }

    /// [`Optimizer::step`], returning an error instead of panicking.
    ///
    /// # Errors
    /// As [`Optimizer::try_step_with`].
    pub fn try_step(&mut self, grads: &Grads) -> Result<()> {
        self.try_step_with(grads, &[])
    }

    /// [`Optimizer::step_with`], returning an error instead of panicking. On an error no parameter has changed,
    /// unless the device failed while the new values were being moved in.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when a gradient's shape or dtype differs from its parameter's; device failures
    /// as [`Tensor::realize`].
    pub fn try_step_with(&mut self, grads: &Grads, also: &[&Tensor]) -> Result<()> {
        let mut found = Vec::new();
        for (i, p) in self.params.iter().enumerate() {
            if let Some(g) = grads.get(p) {
                same_kind(R::NAME, ("the gradient", &g), ("its parameter's shape and dtype", p))?;
                found.push((i, g.detach()));
            }
        }
        self.try_step_guarded(found, None, also)
    }

    /// The step over `found` (each parameter's place and gradient, of its shape, in any float type), realizing
    /// `also` with it. With `skip` (a `Bool` scalar), every new value, state and step count is selected on the
    /// device: the old one where `skip` holds, so a skipped step changes nothing, bit for bit.
    pub(crate) fn try_step_guarded(
        &mut self,
        found: Vec<(usize, Tensor)>,
        skip: Option<&Tensor>,
        also: &[&Tensor],
    ) -> Result<()> {
        // A guarded step moves the counts to the device for good.
        let counts = match (&self.steps, skip) {
            (Steps::Device(c), _) => Some(c.clone()),
            (Steps::Host(v), Some(skip)) => {
                Some(Tensor::from_vec_on(v.iter().map(|&n| n as i32).collect(), [v.len()], skip.device()))
            }
            (Steps::Host(_), None) => None,
        };
        let stepped: Vec<usize> = found.iter().map(|f| f.0).collect();
        let (next, new_counts) = crate::tensor::autocast::suspended(|| {
            crate::no_grad(|| {
                let next: Vec<(usize, Tensor, Vec<Tensor>)> =
                    found.into_iter().map(|(i, g)| self.update_one(i, &g, counts.as_ref(), skip)).collect();
                let new_counts = counts.as_ref().map(|c| advanced(c, &stepped, skip));
                (next, new_counts)
            })
        });
        // The old states die with this step: without a handle on them, each update stores its new states into
        // their buffers (`Kernel::aliases`). Their nodes live on in the update until the realize; should it fail,
        // they get their handles back.
        let old: Vec<(usize, Vec<Tensor>)> =
            next.iter().map(|n| (n.0, std::mem::take(&mut self.states[n.0]))).collect();
        let held: Vec<(usize, Vec<Released>)> =
            old.into_iter().map(|(i, states)| (i, states.into_iter().map(Tensor::release).collect())).collect();
        let mut all: Vec<&Tensor> = also.to_vec();
        all.extend(&new_counts);
        for (_, value, states) in &next {
            all.push(value);
            all.extend(states);
        }
        if let Err(e) = crate::tensor::realize(&all) {
            for (i, states) in held {
                self.states[i] = states.into_iter().map(Released::handle).collect();
            }
            return Err(e);
        }
        for (i, value, states) in next {
            // The realized value's buffer becomes the parameter's: no copy.
            self.params[i].try_set(value)?;
            self.states[i] = states;
        }
        match (&mut self.steps, new_counts) {
            (steps, Some(c)) => *steps = Steps::Device(c),
            (Steps::Host(v), None) => stepped.iter().for_each(|&i| v[i] += 1),
            (Steps::Device(_), None) => unreachable!("device counts advance on the device"),
        }
        Ok(())
    }

    /// The lazy update of parameter `i` by its gradient `g`: its new value (in its own type) and states. `counts`
    /// holds the step counts where they live on the device; with `skip`, the old values where it holds.
    fn update_one(
        &self,
        i: usize,
        g: &Tensor,
        counts: Option<&Tensor>,
        skip: Option<&Tensor>,
    ) -> (usize, Tensor, Vec<Tensor>) {
        let p = &self.params[i];
        let t = match (counts, &self.steps) {
            (Some(c), _) => (c.narrow(0, i, 1).reshape([]) + 1i32).to_dtype(DType::F32),
            (None, Steps::Host(v)) => Tensor::scalar_on((v[i] + 1) as f32, p.device()),
            (None, Steps::Device(_)) => unreachable!("device counts are passed in"),
        };
        let old = p.detach();
        let (value, mut states) = self.config.update(&t, widened(&old), widened(g), &self.states[i]);
        let mut value = value.to_dtype(p.dtype());
        if let Some(skip) = skip {
            value = skip.where_cond(&old, &value);
            states = states.iter().zip(&self.states[i]).map(|(new, old)| skip.where_cond(old, new)).collect();
        }
        (i, value, states)
    }

    /// Sets the learning rate for the next steps. Nothing is compiled or planned anew: the rate is a constant of
    /// the step's graph.
    pub fn set_lr(&mut self, lr: f32) {
        self.config.set_lr(lr);
    }

    /// The learning rate.
    pub fn lr(&self) -> f32 {
        self.config.lr()
    }

    /// The settings.
    pub fn config(&self) -> R {
        self.config
    }

    /// The parameters it updates.
    pub fn params(&self) -> &[Var] {
        &self.params
    }

    /// Steps taken by each parameter, in the order of [`Optimizer::params`] (a step a [`GradScaler`] skipped
    /// does not count). Once a scaler has stepped the optimizer the counts live on the device, and this reads
    /// them back.
    ///
    /// # Panics
    /// On a device failure reading the counts back.
    #[track_caller]
    pub fn steps(&self) -> Vec<u64> {
        match &self.steps {
            Steps::Host(v) => v.clone(),
            Steps::Device(c) => c.to_vec_as::<i32>().into_iter().map(|n| n as u64).collect(),
        }
    }

    /// The states of parameter `i` (by place in [`Optimizer::params`]), in the rule's order: `[momentum]` for
    /// [`Sgd`] with momentum, `[m, v]` for [`AdamW`].
    ///
    /// # Panics
    /// If `i` is not the place of a parameter.
    #[track_caller]
    pub fn states(&self, i: usize) -> &[Tensor] {
        &self.states[i]
    }
}

/// The step counts `counts` advanced by one at the places `stepped`, none where `skip` holds.
fn advanced(counts: &Tensor, stepped: &[usize], skip: Option<&Tensor>) -> Tensor {
    let n = counts.numel();
    let inc = if stepped.len() == n {
        Tensor::full_on([], 1i32, counts.device())
    } else {
        let mut mask = vec![0i32; n];
        stepped.iter().for_each(|&i| mask[i] = 1);
        Tensor::from_vec_on(mask, [n], counts.device())
    };
    match skip {
        Some(skip) => counts + skip.where_cond(0i32, &inc),
        None => counts + inc,
    }
}

/// `value` as a scalar f32 constant on `like`'s device: a graph constant, which kernels read from their
/// parameters, so a new value (a learning rate, a bias correction) compiles nothing and reuses the plan.
pub(crate) fn constant(like: &Tensor, value: f64) -> Tensor {
    Tensor::scalar_on(value as f32, like.device())
}

/// `value` computed in f32 (half-precision parameters and gradients are widened; their states are kept in f32).
fn widened(value: &Tensor) -> Tensor {
    value.to_dtype(DType::F32)
}

/// Fails unless `value` is at least 0 (NaN fails too).
pub(crate) fn non_negative(op: &'static str, what: &str, value: f32) -> Result<()> {
    if value >= 0.0 {
        return Ok(());
    }
    Err(Error::Config { op, message: format!("{what} = {value} must be at least 0") })
}
