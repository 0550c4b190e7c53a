//! `GradScaler`: dynamic loss scaling for half-precision training, as `torch.amp.GradScaler`, with the inf/NaN check
//! and the conditional update on the device, inside the step's one realize.

use super::{Optimizer, UpdateRule};
use crate::autograd::Grads;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{ok, Error, Result};
use crate::tensor::autocast::suspended;
use crate::tensor::Tensor;

/// [`GradScaler`]'s settings, as `torch.amp.GradScaler`'s arguments; `Default` is PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradScalerConfig {
    /// The scale the loss is multiplied by at first; `65536.0` (2^16) by default.
    pub init_scale: f32,
    /// What the scale is multiplied by after `growth_interval` steps in a row without an inf or NaN; `2.0`.
    pub growth_factor: f32,
    /// What the scale is multiplied by after a step with an inf or NaN gradient; `0.5`.
    pub backoff_factor: f32,
    /// How many clean steps in a row grow the scale; `2000`.
    pub growth_interval: u32,
}

impl Default for GradScalerConfig {
    fn default() -> GradScalerConfig {
        GradScalerConfig { init_scale: 65536.0, growth_factor: 2.0, backoff_factor: 0.5, growth_interval: 2000 }
    }
}

impl GradScalerConfig {
    /// Fails when a setting is out of range, naming it.
    fn check(&self) -> Result<()> {
        let op = "GradScaler::new";
        let bad = |message: String| Err(Error::Config { op, message });
        if !(self.init_scale > 0.0 && self.init_scale.is_finite()) {
            return bad(format!("init_scale = {} must be finite and above 0", self.init_scale));
        }
        if !(self.growth_factor > 1.0 && self.growth_factor.is_finite()) {
            return bad(format!("growth_factor = {} must be finite and above 1", self.growth_factor));
        }
        if !(self.backoff_factor > 0.0 && self.backoff_factor < 1.0) {
            return bad(format!("backoff_factor = {} must be in (0, 1)", self.backoff_factor));
        }
        if self.growth_interval == 0 || self.growth_interval > i32::MAX as u32 {
            return bad(format!("growth_interval = {} must be in [1, 2^31)", self.growth_interval));
        }
        Ok(())
    }
}

/// Dynamic loss scaling, as `torch.amp.GradScaler`: what keeps f16 gradients from underflowing. The loss is
/// multiplied by the scale before `backward` ([`GradScaler::scale`]); a step ([`GradScaler::step_with`]) divides
/// the gradients by it again in f32, checks them for inf and NaN, applies the optimizer's update only if it found
/// none, and then adjusts the scale: times `backoff_factor` after a step with an inf or NaN (the step skipped), times
/// `growth_factor` after `growth_interval` clean steps in a row.
///
/// All of it happens on the device, inside the step's one realize: the scale and the count of clean steps are
/// device scalars, the check is a fold of each gradient, and the skip is a select in each parameter's fused update
/// (`where(found_inf, old, new)` for the value, every state and the step count), so a scaled step reads nothing
/// back, branches nowhere on the host, and is one realize and one submit like [`Optimizer::step_with`]. A skipped
/// step leaves every parameter, state and step count bit for bit as it was. [`GradScaler::scale_value`] reads the
/// scale back when a progress line wants it.
///
/// With [`nn::clip_grad_norm`](crate::nn::clip_grad_norm), clip the unscaled gradients, as PyTorch does:
/// [`GradScaler::unscale`] first, then clip what it returns, then step with that (the step does not unscale again,
/// and checks for inf and NaN as `unscale` found them).
///
/// # Examples
/// ```no_run
/// use lazor::nn::{self, Module};
/// use lazor::optim::{AdamW, AdamWConfig, GradScaler, GradScalerConfig};
/// use lazor::{DType, Tensor};
/// let model = nn::Linear::new(4, 1, true, 0);
/// let mut opt = AdamW::new(&model.vars(), AdamWConfig::default());
/// let mut scaler = GradScaler::new(GradScalerConfig::default());
/// let (x, y) = (Tensor::rand([32, 4], 1), Tensor::rand([32, 1], 2));
/// for step in 0..100 {
///     let loss = lazor::autocast(DType::F16, || model.forward(&x).mse_loss(&y));
///     let mut grads = scaler.unscale(&scaler.scale(&loss).backward()); // unscaled, to clip
///     nn::clip_grad_norm(&mut grads, 1.0);
///     scaler.step_with(&mut opt, &grads, &[&loss]); // one realize: forward, backward, check, update
///     if step % 10 == 0 {
///         println!("loss {} scale {}", loss.to_scalar(), scaler.scale_value());
///     }
/// }
/// ```
pub struct GradScaler {
    config: GradScalerConfig,
    device: Device,
    /// The scale, an f32 scalar on the device.
    scale: Tensor,
    /// Clean steps since the scale last changed, an i32 scalar on the device.
    growth: Tensor,
    /// Whether the last step found an inf or NaN, a bool scalar (false before the first).
    found: Tensor,
    /// What [`GradScaler::unscale`] found, until the step it prepared.
    unscaled: Option<Tensor>,
}

impl GradScaler {
    /// A scaler on the default device with the settings `config`.
    ///
    /// # Panics
    /// At the caller when a setting is out of range (a scale not finite and above 0, a growth factor not above 1,
    /// a backoff factor outside `(0, 1)`, a growth interval of 0), or on a device failure;
    /// [`GradScaler::try_new`] returns the error instead.
    #[track_caller]
    pub fn new(config: GradScalerConfig) -> GradScaler {
        ok(GradScaler::try_new(config))
    }

    /// [`GradScaler::new`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::Config`] for a setting out of range; device failures as [`Tensor::realize`].
    pub fn try_new(config: GradScalerConfig) -> Result<GradScaler> {
        GradScaler::try_new_on(config, &Device::default())
    }

    /// [`GradScaler::new`] on `device`, where the parameters it steps live.
    ///
    /// # Panics
    /// As [`GradScaler::new`]; [`GradScaler::try_new_on`] returns the error instead.
    #[track_caller]
    pub fn new_on(config: GradScalerConfig, device: &Device) -> GradScaler {
        ok(GradScaler::try_new_on(config, device))
    }

    /// [`GradScaler::new_on`], returning an error instead of panicking.
    ///
    /// # Errors
    /// As [`GradScaler::try_new`].
    pub fn try_new_on(config: GradScalerConfig, device: &Device) -> Result<GradScaler> {
        config.check()?;
        // In buffers from the start, so the first step's plan is every later step's.
        let scale = Tensor::full_on([], config.init_scale, device).contiguous();
        let growth = Tensor::full_on([], 0i32, device).contiguous();
        let found = Tensor::full_on([], false, device).contiguous();
        crate::tensor::realize(&[&scale, &growth, &found])?;
        Ok(GradScaler { config, device: device.clone(), scale, growth, found, unscaled: None })
    }

    /// The settings.
    pub fn config(&self) -> GradScalerConfig {
        self.config
    }

    /// `loss` times the scale, lazily (f32, or the loss's type where wider): call `backward` on it. Under
    /// autocast the loss is f32 already, so its scaled value cannot overflow a half type.
    ///
    /// # Panics
    /// At the caller when `loss` is not a float tensor or lives on another device than the scaler;
    /// [`GradScaler::try_scale`] returns the error instead.
    #[track_caller]
    pub fn scale(&self, loss: &Tensor) -> Tensor {
        ok(self.try_scale(loss))
    }

    /// [`GradScaler::scale`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::DType`] for a loss that is not float, [`Error::DeviceMismatch`] for one on another device.
    pub fn try_scale(&self, loss: &Tensor) -> Result<Tensor> {
        if !loss.dtype().is_float() {
            return Err(Error::DType {
                op: "GradScaler::scale",
                message: format!("the loss must be a float tensor, not {}", loss.dtype()),
            });
        }
        loss.device().check_same(&self.device, "GradScaler::scale")?;
        suspended(|| loss.try_mul(&self.scale))
    }

    /// `grads` divided by the scale (computed in f32, each gradient kept in its own type), lazily, for what must
    /// see the true gradients before the step: [`nn::clip_grad_norm`](crate::nn::clip_grad_norm). Call it once
    /// per step, before [`GradScaler::step_with`], and step with what it returned (clipped): the step then does
    /// not divide again, and skips or not by the inf and NaN found here (PyTorch's `unscale_` then `step`).
    ///
    /// # Panics
    /// At the caller when `unscale` was already called since the last step, or a gradient lives on another device;
    /// [`GradScaler::try_unscale`] returns the error instead.
    #[track_caller]
    pub fn unscale(&mut self, grads: &Grads) -> Grads {
        ok(self.try_unscale(grads))
    }

    /// [`GradScaler::unscale`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::Config`] when `unscale` was already called since the last step, [`Error::DeviceMismatch`] for a
    /// gradient on another device than the scaler.
    pub fn try_unscale(&mut self, grads: &Grads) -> Result<Grads> {
        if self.unscaled.is_some() {
            return Err(Error::Config {
                op: "GradScaler::unscale",
                message: "unscale was already called since the last step; call it once per step".into(),
            });
        }
        for (_, g) in grads.iter() {
            g.device().check_same(&self.device, "GradScaler::unscale")?;
        }
        let (entries, found) = suspended(|| {
            crate::no_grad(|| {
                let wide: Vec<Tensor> = grads.iter().map(|(_, g)| self.divided(g)).collect();
                let found = non_finite(&wide, &self.device);
                let entries = grads.iter().zip(wide).map(|((v, g), w)| (v.clone(), w.to_dtype(g.dtype()))).collect();
                (entries, found)
            })
        });
        self.unscaled = Some(found);
        Ok(Grads { entries })
    }

    /// [`GradScaler::step_with`] without other tensors to realize.
    ///
    /// # Panics
    /// As [`GradScaler::step_with`]; [`GradScaler::try_step`] returns the error instead.
    #[track_caller]
    pub fn step<R: UpdateRule>(&mut self, opt: &mut Optimizer<R>, grads: &Grads) {
        ok(self.try_step_with(opt, grads, &[]))
    }

    /// One step of `opt` on the scaled gradients `grads` (from `scale(&loss).backward()`, or from
    /// [`GradScaler::unscale`]), realizing `also` (the loss, metrics) in the same realize: the gradients divided
    /// by the scale in f32, checked for inf and NaN, the update applied where none was found (parameters, states
    /// and step counts unchanged otherwise), the scale grown or backed off; all on the device, in one realize and
    /// one submit. Gradients of parameters `opt` does not hold are ignored.
    ///
    /// # Panics
    /// At the caller when a gradient's shape differs from its parameter's or it is not a float tensor, a
    /// parameter lives on another device than the scaler, or the device fails; [`GradScaler::try_step_with`]
    /// returns the error instead.
    #[track_caller]
    pub fn step_with<R: UpdateRule>(&mut self, opt: &mut Optimizer<R>, grads: &Grads, also: &[&Tensor]) {
        ok(self.try_step_with(opt, grads, also))
    }

    /// [`GradScaler::step`], returning an error instead of panicking.
    ///
    /// # Errors
    /// As [`GradScaler::try_step_with`].
    pub fn try_step<R: UpdateRule>(&mut self, opt: &mut Optimizer<R>, grads: &Grads) -> Result<()> {
        self.try_step_with(opt, grads, &[])
    }

    /// [`GradScaler::step_with`], returning an error instead of panicking. On an error nothing has changed: the
    /// parameters, the optimizer's states, the scale (unless the device failed while new values were moved in).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when a gradient's shape differs from its parameter's, [`Error::DType`] for one
    /// that is not float, [`Error::DeviceMismatch`] for a parameter or gradient on another device than the
    /// scaler; device failures as [`Tensor::realize`].
    pub fn try_step_with<R: UpdateRule>(
        &mut self,
        opt: &mut Optimizer<R>,
        grads: &Grads,
        also: &[&Tensor],
    ) -> Result<()> {
        let op = "GradScaler::step";
        let mut found = Vec::new();
        for (i, p) in opt.params().iter().enumerate() {
            p.device().check_same(&self.device, op)?;
            let Some(g) = grads.get(p) else { continue };
            g.device().check_same(&self.device, op)?;
            if g.shape() != p.shape() {
                return Err(Error::ShapeMismatch {
                    op,
                    message: "a gradient must have its parameter's shape".into(),
                    lhs: p.shape.clone(),
                    rhs: g.shape.clone(),
                });
            }
            if !g.dtype().is_float() {
                return Err(Error::DType { op, message: format!("gradients are float tensors, not {}", g.dtype()) });
            }
            found.push((i, g.detach()));
        }
        let prepared = self.unscaled.take();
        let (found, inf) = suspended(|| {
            crate::no_grad(|| match &prepared {
                // Divided by `unscale` already (and perhaps clipped since).
                Some(inf) => (found, inf.clone()),
                None => {
                    let wide: Vec<(usize, Tensor)> = found.into_iter().map(|(i, g)| (i, self.divided(&g))).collect();
                    let inf = non_finite(&wide.iter().map(|w| w.1.clone()).collect::<Vec<_>>(), &self.device);
                    (wide, inf)
                }
            })
        });
        let (scale, growth) = suspended(|| crate::no_grad(|| self.next_scale(&inf)));
        let mut all = also.to_vec();
        all.extend([&scale, &growth, &inf]);
        if let Err(e) = opt.try_step_guarded(found, Some(&inf), &all) {
            self.unscaled = prepared;
            return Err(e);
        }
        (self.scale, self.growth, self.found) = (scale, growth, inf);
        Ok(())
    }

    /// The current scale, read back from the device (the scale of the next step's [`GradScaler::scale`]).
    ///
    /// # Panics
    /// On a device failure; [`GradScaler::try_scale_value`] returns the error instead.
    #[track_caller]
    pub fn scale_value(&self) -> f32 {
        ok(self.try_scale_value())
    }

    /// [`GradScaler::scale_value`], returning an error instead of panicking.
    ///
    /// # Errors
    /// Device failures, as [`Tensor::try_to_vec`].
    pub fn try_scale_value(&self) -> Result<f32> {
        Ok(self.scale.try_to_vec()?[0])
    }

    /// Whether the last step found an inf or NaN gradient and was skipped: a lazy `Bool` tensor of shape `[]`
    /// (`false` before the first step), on the device until read.
    pub fn found_inf(&self) -> Tensor {
        self.found.clone()
    }

    /// `g` in f32 divided by the scale (times its reciprocal, exact for the powers of two scales usually are).
    fn divided(&self, g: &Tensor) -> Tensor {
        g.to_dtype(DType::F32) * self.scale.recip()
    }

    /// The scale and the count of clean steps after a step that found an inf or NaN where `inf` holds, as
    /// `torch.amp`'s update: back off and restart the count on one; otherwise count the step, and at
    /// `growth_interval` grow the scale (where the product stays finite) and restart the count.
    fn next_scale(&self, inf: &Tensor) -> (Tensor, Tensor) {
        let c = self.config;
        let clean = &self.growth + 1i32;
        let due = clean.ge(c.growth_interval as i32);
        let grown = &self.scale * c.growth_factor;
        let grow = &due & grown.lt(f32::INFINITY);
        let scale = inf.where_cond(&self.scale * c.backoff_factor, grow.where_cond(&grown, &self.scale));
        let growth = (inf | &due).where_cond(0i32, &clean);
        (scale, growth)
    }
}

impl std::fmt::Debug for GradScaler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GradScaler").field("config", &self.config).finish_non_exhaustive()
    }
}

/// Whether any of the f32 tensors `values` holds an inf or NaN: a `Bool` scalar, lazily. Each tensor's largest
/// magnitude is one fold (NaN-propagating), and the largest of those is compared with infinity, which NaN fails.
fn non_finite(values: &[Tensor], device: &Device) -> Tensor {
    let peaks: Vec<Tensor> = values.iter().filter(|v| v.numel() > 0).map(|v| v.abs().max_all()).collect();
    let Some((first, rest)) = peaks.split_first() else {
        return Tensor::full_on([], false, device);
    };
    let peak = rest.iter().fold(first.clone(), |m, p| m.maximum(p));
    !peak.lt(f32::INFINITY)
}
