//! `Sgd`: stochastic gradient descent with momentum, Nesterov momentum and weight decay, as `torch.optim.SGD`.

use super::{constant, non_negative, Optimizer, UpdateRule};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// [`Sgd`]'s settings, as `torch.optim.SGD`'s arguments (with `dampening` 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdConfig {
    /// The learning rate. PyTorch has no default; lazor's is `1e-3`.
    pub lr: f32,
    /// The momentum factor; 0 (the default) for plain gradient descent, with no state kept.
    pub momentum: f32,
    /// Nesterov momentum (needs a momentum above 0); off by default.
    pub nesterov: bool,
    /// L2 penalty added to the gradient (`g + weight_decay * p`); 0 by default.
    pub weight_decay: f32,
}

impl Default for SgdConfig {
    fn default() -> SgdConfig {
        SgdConfig { lr: 1e-3, momentum: 0.0, nesterov: false, weight_decay: 0.0 }
    }
}

/// Stochastic gradient descent, as `torch.optim.SGD` with `dampening = 0`: an [`Optimizer`] whose rule is, per
/// parameter `p` with gradient `g`,
///
/// ```text
/// d = g + weight_decay * p                       (when weight_decay != 0)
/// b = momentum * b + d                           (when momentum != 0; b starts at 0, so b = d at the first step)
/// d = d + momentum * b  if nesterov, else  d = b
/// p = p - lr * d
/// ```
///
/// A step is one realize, and each parameter's new value and momentum come out of one kernel (see
/// [`optim`](crate::optim)). The momentum buffer is f32 whatever the parameter's type. `Sgd::new` panics at the
/// caller for a negative learning rate, momentum or weight decay, or Nesterov without momentum
/// ([`Error::Config`] from `Sgd::try_new`).
///
/// # Examples
/// ```no_run
/// use lazor::optim::{Sgd, SgdConfig};
/// use lazor::{Tensor, Var};
/// let w = Var::new(Tensor::from_vec(vec![1.0f32, -2.0], [2]));
/// let mut opt = Sgd::new(&[w.clone()], SgdConfig { lr: 0.1, ..Default::default() });
/// opt.step(&w.tensor().square().sum_all().backward());
/// assert_eq!(w.to_vec(), vec![0.8, -1.6]);
/// ```
pub type Sgd = Optimizer<SgdConfig>;

impl UpdateRule for SgdConfig {
    const NAME: &'static str = "Sgd";

    fn check(&self) -> Result<()> {
        let op = "Sgd::new";
        non_negative(op, "lr", self.lr)?;
        non_negative(op, "momentum", self.momentum)?;
        non_negative(op, "weight_decay", self.weight_decay)?;
        if self.nesterov && self.momentum == 0.0 {
            return Err(Error::Config { op, message: "Nesterov momentum needs a momentum above 0".into() });
        }
        Ok(())
    }

    fn states(&self) -> usize {
        usize::from(self.momentum != 0.0)
    }

    fn lr(&self) -> f32 {
        self.lr
    }

    fn set_lr(&mut self, lr: f32) {
        self.lr = lr;
    }

    fn update(&self, _t: &Tensor, p: Tensor, g: Tensor, states: &[Tensor]) -> (Tensor, Vec<Tensor>) {
        let mut d = g;
        if self.weight_decay != 0.0 {
            d += &p * constant(&p, self.weight_decay.into());
        }
        let mut states = states.to_vec();
        if let Some(b) = states.first_mut() {
            let momentum = constant(&p, self.momentum.into());
            *b = &*b * &momentum + &d;
            d = if self.nesterov { d + &*b * momentum } else { b.clone() };
        }
        let value = &p + d * constant(&p, -f64::from(self.lr));
        (value, states)
    }
}
