//! `AdamW`: Adam with decoupled weight decay and bias correction, as `torch.optim.AdamW`.

use super::{constant, non_negative, Optimizer, UpdateRule};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// [`AdamW`]'s settings, as `torch.optim.AdamW`'s arguments; `Default` is PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWConfig {
    /// The learning rate; `1e-3` by default.
    pub lr: f32,
    /// The decay rates of the moving averages of the gradient and its square; `(0.9, 0.999)` by default.
    pub betas: (f32, f32),
    /// Added to the denominator for stability; `1e-8` by default.
    pub eps: f32,
    /// The decoupled weight decay (`p -= lr * weight_decay * p` before each step); `1e-2` by default.
    pub weight_decay: f32,
}

impl Default for AdamWConfig {
    fn default() -> AdamWConfig {
        AdamWConfig { lr: 1e-3, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 1e-2 }
    }
}

/// Adam with decoupled weight decay, as `torch.optim.AdamW` (without `amsgrad`): an [`Optimizer`] whose rule is,
/// per parameter `p` with gradient `g` at its `t`-th step (counted per parameter from 1, as PyTorch's
/// `state["step"]`),
///
/// ```text
/// p = p * (1 - lr * weight_decay)
/// m = m + (1 - beta1) * (g - m)                  (torch.lerp; m and v start at 0)
/// v = beta2 * v + (1 - beta2) * g * g
/// p = p - lr / (1 - beta1^t) * (m / (sqrt(v) / sqrt(1 - beta2^t) + eps))
/// ```
///
/// A step is one realize, and each parameter's new value and both moments come out of one kernel (see
/// [`optim`](crate::optim)); the learning rate and the step number are graph constants (the number a count on the
/// device under a [`GradScaler`](super::GradScaler)), so a step of a new `t` or a new learning rate compiles and
/// plans nothing. The moments are f32 whatever the parameter's type.
/// `AdamW::new` panics at the caller for a negative learning rate, `eps` or weight decay, or a beta outside
/// `[0, 1)` ([`Error::Config`] from `AdamW::try_new`).
///
/// # Examples
/// ```no_run
/// use lazor::optim::{AdamW, AdamWConfig};
/// use lazor::{Tensor, Var};
/// let w = Var::new(Tensor::from_vec(vec![1.0f32, -2.0], [2]));
/// let mut opt = AdamW::new(&[w.clone()], AdamWConfig { lr: 0.1, weight_decay: 0.0, ..Default::default() });
/// opt.step(&w.tensor().square().sum_all().backward());
/// let v = w.to_vec(); // Adam's first step moves each weight by about lr against its gradient's sign
/// assert!((v[0] - 0.9).abs() < 1e-5 && (v[1] + 1.9).abs() < 1e-5);
/// ```
pub type AdamW = Optimizer<AdamWConfig>;

impl UpdateRule for AdamWConfig {
    const NAME: &'static str = "AdamW";

    fn check(&self) -> Result<()> {
        let op = "AdamW::new";
        non_negative(op, "lr", self.lr)?;
        non_negative(op, "eps", self.eps)?;
        non_negative(op, "weight_decay", self.weight_decay)?;
        for (what, beta) in [("betas.0", self.betas.0), ("betas.1", self.betas.1)] {
            if !(0.0..1.0).contains(&beta) {
                return Err(Error::Config { op, message: format!("{what} = {beta} is not in [0, 1)") });
            }
        }
        Ok(())
    }

    fn states(&self) -> usize {
        2
    }

    fn lr(&self) -> f32 {
        self.lr
    }

    fn set_lr(&mut self, lr: f32) {
        self.lr = lr;
    }

    fn update(&self, t: &Tensor, p: Tensor, g: Tensor, states: &[Tensor]) -> (Tensor, Vec<Tensor>) {
        let (b1, b2, lr) = (f64::from(self.betas.0), f64::from(self.betas.1), f64::from(self.lr));
        // `1 - beta^t` as `-expm1(t ln beta)`: t is a tensor (a constant, or a count on the device), and this
        // keeps f32's precision where beta^t is near 1.
        let correction = |beta: f64| {
            if beta == 0.0 {
                constant(&p, 1.0)
            } else {
                -(t * constant(&p, beta.ln())).expm1()
            }
        };
        let (bc1, bc2) = (correction(b1), correction(b2));
        let mut p = p;
        if self.weight_decay != 0.0 {
            p *= constant(&p, 1.0 - lr * f64::from(self.weight_decay));
        }
        let (m, v) = (&states[0], &states[1]);
        let m = m + (&g - m) * constant(&p, 1.0 - b1);
        let v = v * constant(&p, b2) + &g * constant(&p, 1.0 - b2) * &g;
        let step_size = constant(&p, lr) / bc1;
        let denom = v.sqrt() / bc2.sqrt() + constant(&p, self.eps.into());
        let value = &p - &m / denom * step_size;
        (value, vec![m, v])
    }
}
