//! Losses, as means over the batch like PyTorch's defaults: cross-entropy, negative log-likelihood, mean squared
//! error and binary cross-entropy on logits.

use crate::autograd::{no_grad, record, Rule};
use crate::dtype::DType;
use crate::error::ok;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

impl Tensor {
    /// Class scores `[N, C, d..]` with the class axis moved last and every other axis merged: `[rows, C]`, and
    /// the targets `[N, d..]` as `I32` `[rows]`, after checking they fit.
    fn by_rows(&self, op: &'static str, targets: &Tensor) -> Result<(Tensor, Tensor)> {
        self.device.check_same(&targets.device, op)?;
        if !self.dtype.is_float() {
            return Err(Error::DType { op, message: format!("scores are floats, not {}", self.dtype) });
        }
        if !matches!(targets.dtype, DType::I32 | DType::U32) {
            return Err(Error::DType { op, message: format!("targets are i32 or u32 classes, not {}", targets.dtype) });
        }
        let dims = self.shape.dims();
        let mut want = dims.to_vec();
        if dims.len() >= 2 {
            want.remove(1);
        }
        if dims.len() < 2 || targets.shape.dims() != want.as_slice() {
            return Err(Error::ShapeMismatch {
                op,
                message: "scores are [N, C, d..] and targets [N, d..]".into(),
                lhs: self.shape.clone(),
                rhs: targets.shape.clone(),
            });
        }
        let classes = dims[1];
        crate::tensor::indexing::check_host(op, targets, classes)?;
        let scores = match dims.len() {
            2 => self.clone(),
            n => {
                let order: Vec<usize> = [0].into_iter().chain(2..n).chain([1]).collect();
                self.permute(order).reshape([targets.numel(), classes])
            }
        };
        Ok((scores, targets.to_dtype(DType::I32).reshape([targets.numel()])))
    }

    /// The mean cross-entropy of class logits `[N, C]` (or `[N, C, d..]`) against `I32`/`U32` class targets
    /// `[N]` (or `[N, d..]`), as `torch.nn.functional.cross_entropy`: `logsumexp(x) - x[target]` per row, computed
    /// stably, averaged. Its gradient is `(softmax - onehot) / rows`, one kernel. A target outside `[0, C)`
    /// computed on the device picks 0.
    ///
    /// # Panics
    /// If the logits are not floats, the targets not integers, the shapes do not fit, the tensors live on
    /// different devices, or the targets are host data with a class outside `[0, C)`;
    /// [`Tensor::try_cross_entropy`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::Tensor;
    /// let logits = Tensor::from_vec(vec![0.0, 0.0, 5.0, 0.0], [2, 2]);
    /// let loss = logits.cross_entropy(&Tensor::from_vec(vec![1i32, 0], [2]));
    /// assert!((loss.to_scalar() - 0.3500).abs() < 1e-3);
    /// ```
    #[track_caller]
    pub fn cross_entropy(&self, targets: &Tensor) -> Tensor {
        ok(self.try_cross_entropy(targets))
    }

    /// [`Tensor::cross_entropy`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::DType`], [`Error::ShapeMismatch`], [`Error::DeviceMismatch`] or [`Error::IndexOutOfRange`].
    pub fn try_cross_entropy(&self, targets: &Tensor) -> Result<Tensor> {
        if let Some(x) = self.autocast_f32() {
            return x.try_cross_entropy(targets);
        }
        let (scores, targets) = self.by_rows("cross_entropy", targets)?;
        let x = scores.detach();
        let (loss, lse) = no_grad(|| {
            let lse = x.logsumexp(1).unsqueeze(1);
            let picked = x.gathered(1, &targets.unsqueeze(1), None);
            ((&lse - &picked).mean_all(), lse)
        });
        Ok(record(loss, &[&scores], |_| Rule::CrossEntropy { logits: x, targets, lse }))
    }

    /// The mean negative log-likelihood of log-probabilities `[N, C]` (or `[N, C, d..]`) at `I32`/`U32` class
    /// targets `[N]` (or `[N, d..]`), as `torch.nn.functional.nll_loss`: `-mean(x[target])`.
    ///
    /// # Panics
    /// As [`Tensor::cross_entropy`]; [`Tensor::try_nll_loss`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::Tensor;
    /// let logp = Tensor::from_vec(vec![-0.1, -2.0, -3.0, -0.2], [2, 2]);
    /// let loss = logp.nll_loss(&Tensor::from_vec(vec![0i32, 1], [2]));
    /// assert!((loss.to_scalar() - 0.15).abs() < 1e-6);
    /// ```
    #[track_caller]
    pub fn nll_loss(&self, targets: &Tensor) -> Tensor {
        ok(self.try_nll_loss(targets))
    }

    /// [`Tensor::nll_loss`], returning an error instead of panicking.
    ///
    /// # Errors
    /// As [`Tensor::try_cross_entropy`].
    pub fn try_nll_loss(&self, targets: &Tensor) -> Result<Tensor> {
        if let Some(x) = self.autocast_f32() {
            return x.try_nll_loss(targets);
        }
        let (scores, targets) = self.by_rows("nll_loss", targets)?;
        Ok(-scores.gathered(1, &targets.unsqueeze(1), None).mean_all())
    }

    /// The mean squared error `mean((self - target)^2)`, as `torch.nn.functional.mse_loss`; the shapes broadcast.
    ///
    /// # Panics
    /// If the shapes cannot broadcast or the tensors live on different devices; [`Tensor::try_mse_loss`] returns
    /// the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::Tensor;
    /// let loss = Tensor::from_vec(vec![1.0, 3.0], [2]).mse_loss(&Tensor::from_vec(vec![0.0, 1.0], [2]));
    /// assert_eq!(loss.to_scalar(), 2.5);
    /// ```
    #[track_caller]
    pub fn mse_loss(&self, target: &Tensor) -> Tensor {
        ok(self.try_mse_loss(target))
    }

    /// [`Tensor::mse_loss`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::Broadcast`] or [`Error::DeviceMismatch`].
    pub fn try_mse_loss(&self, target: &Tensor) -> Result<Tensor> {
        if let Some((x, t)) = self.autocast_f32_pair(target) {
            return x.try_mse_loss(&t);
        }
        Ok(self.try_sub(target)?.square().mean_all())
    }

    /// The mean binary cross-entropy of logits against targets in `[0, 1]`, as
    /// `torch.nn.functional.binary_cross_entropy_with_logits`: `max(x, 0) - x t + log1p(e^-|x|)`, which never
    /// overflows; the shapes broadcast.
    ///
    /// # Panics
    /// If the shapes cannot broadcast or the tensors live on different devices;
    /// [`Tensor::try_binary_cross_entropy_with_logits`] returns the error instead.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::Tensor;
    /// let loss = Tensor::from_vec(vec![0.0], [1]).binary_cross_entropy_with_logits(&Tensor::ones([1]));
    /// assert!((loss.to_scalar() - std::f32::consts::LN_2).abs() < 1e-6);
    /// ```
    #[track_caller]
    pub fn binary_cross_entropy_with_logits(&self, target: &Tensor) -> Tensor {
        ok(self.try_binary_cross_entropy_with_logits(target))
    }

    /// [`Tensor::binary_cross_entropy_with_logits`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::Broadcast`] or [`Error::DeviceMismatch`].
    pub fn try_binary_cross_entropy_with_logits(&self, target: &Tensor) -> Result<Tensor> {
        if let Some((x, t)) = self.autocast_f32_pair(target) {
            return x.try_binary_cross_entropy_with_logits(&t);
        }
        let (x, t) = (self.detach(), target.detach());
        let loss = no_grad(|| -> Result<Tensor> {
            let xt = x.try_mul(&t)?;
            let softplus = (-x.abs()).exp().log1p();
            Ok((x.relu() - &xt + &softplus).mean_all())
        })?;
        // A closed form: the composed rule would give `-t` rather than `0.5 - t` at `x = 0`, where `relu` and
        // `abs` take their one-sided derivatives.
        Ok(record(loss, &[self, target], |_| Rule::BceWithLogits { x, t }))
    }
}
