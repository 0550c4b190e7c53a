//! `Dropout`: zeroes elements at random while training, the identity otherwise, as `torch.nn.Dropout`.

use super::init;
use super::module::Module;
use crate::autograd::Var;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Dropout layers made so far: each takes its own stream of masks.
static LAYERS: AtomicU64 = AtomicU64::new(0);

/// Dropout, as `torch.nn.Dropout(p)`: while training (the default, as in PyTorch), each element is zeroed with
/// probability `p` and the rest scaled by `1 / (1 - p)`; after `train(false)` the identity. Each forward pass
/// draws a new mask with [`Tensor::dropout`]: the seed is a constant of the graph, so a new mask compiles and plans
/// nothing, and the mask is never stored. No parameters.
///
/// # Examples
/// ```no_run
/// use lazor::nn::{Dropout, Module};
/// use lazor::Tensor;
/// let drop = Dropout::new(0.5);
/// let x = Tensor::ones([1000]);
/// assert!(drop.forward(&x).to_vec().iter().all(|&v| v == 0.0 || v == 2.0));
/// drop.train(false);
/// assert_eq!(drop.forward(&x).to_vec(), vec![1.0; 1000]);
/// ```
#[derive(Debug)]
pub struct Dropout {
    p: f32,
    training: AtomicBool,
    seed: u64,
    calls: AtomicU64,
}

impl Dropout {
    /// A dropout layer zeroing with probability `p`, in training mode. Its masks come from a stream of its own
    /// (layers made in the same order draw the same masks run after run); [`Dropout::with_seed`] picks it.
    ///
    /// # Panics
    /// At the caller when `p` is not in `[0, 1)`; [`Dropout::try_new`] returns the error instead.
    #[track_caller]
    pub fn new(p: f32) -> Dropout {
        crate::error::ok(Dropout::try_new(p))
    }

    /// [`Dropout::new`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::Config`] when `p` is not in `[0, 1)` (NaN included).
    pub fn try_new(p: f32) -> Result<Dropout> {
        Dropout::try_with_seed(p, init::stream(0x0d20_90a7, LAYERS.fetch_add(1, Ordering::Relaxed)))
    }

    /// [`Dropout::new`] whose masks are drawn from `seed`: the `k`-th forward pass uses a seed mixed from `seed`
    /// and `k`.
    ///
    /// # Panics
    /// At the caller when `p` is not in `[0, 1)`; [`Dropout::try_with_seed`] returns the error instead.
    #[track_caller]
    pub fn with_seed(p: f32, seed: u64) -> Dropout {
        crate::error::ok(Dropout::try_with_seed(p, seed))
    }

    /// [`Dropout::with_seed`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::Config`] when `p` is not in `[0, 1)` (NaN included).
    pub fn try_with_seed(p: f32, seed: u64) -> Result<Dropout> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::Config {
                op: "Dropout::new",
                message: format!("the probability p = {p} is not in [0, 1)"),
            });
        }
        Ok(Dropout { p, training: AtomicBool::new(true), seed, calls: AtomicU64::new(0) })
    }

    /// Turns dropout on (training) or off (evaluation: the identity).
    pub fn train(&self, on: bool) {
        self.training.store(on, Ordering::Relaxed);
    }

    /// Whether the layer drops elements.
    pub fn is_training(&self) -> bool {
        self.training.load(Ordering::Relaxed)
    }

    /// The probability of zeroing an element.
    pub fn p(&self) -> f32 {
        self.p
    }
}

impl Module for Dropout {
    /// `x` with a fresh mask applied while training; `x` itself otherwise, or when `p` is 0.
    fn forward(&self, x: &Tensor) -> Tensor {
        if !self.is_training() || self.p == 0.0 {
            return x.clone();
        }
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        x.dropout(self.p, init::stream(self.seed, call))
    }

    fn parameters(&self) -> Vec<(String, Var)> {
        Vec::new()
    }

    fn train(&self, on: bool) {
        Dropout::train(self, on)
    }
}
