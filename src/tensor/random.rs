//! Random tensors: `rand`, `randn` and `dropout`, drawn from the counter-based generator in `philox.rs` (element
//! `i` is a pure function of `(seed, i)`, computed inside whatever kernel reads it).

use crate::autograd::{record, Rule};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::ok;
use crate::error::{Error, Result};
use crate::graph::NodeOp;
use crate::shape::Shape;
use crate::tensor::Tensor;

use crate::philox::{key, Distribution};

impl Tensor {
    /// Uniform random numbers on `[0, 1)` (f32, in steps of `2^-24`) on the default device. Element `i` (row-major)
    /// is a pure function of `(seed, i)`: the same on every backend and run, and computed inside whatever kernel
    /// reads it, so `x + Tensor::rand(x.shape(), 7)` is one kernel and stores no random values. Another seed gives
    /// an independent stream. Costs no memory until realized on its own.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::Tensor;
    /// let u = Tensor::rand([2, 3], 7).to_vec();
    /// assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
    /// assert_eq!(u, Tensor::rand([2, 3], 7).to_vec());
    /// ```
    pub fn rand(shape: impl Into<Shape>, seed: u64) -> Tensor {
        Tensor::rand_on(shape, seed, &Device::default())
    }

    /// [`Tensor::rand`] on `device`.
    pub fn rand_on(shape: impl Into<Shape>, seed: u64, device: &Device) -> Tensor {
        random(Distribution::Uniform, shape.into(), seed, device)
    }

    /// Standard normal random numbers (f32) on the default device, by the Box-Muller transform of Philox4x32-10 words:
    /// as [`Tensor::rand`], a pure function of `(seed, element index)` computed where it is read. Backends agree to
    /// within 4 ulp, the difference coming from GPU compilers that fuse multiply-adds (the CPU backend and lavapipe
    /// agree exactly).
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::Tensor;
    /// let x = Tensor::ones([4, 4]);
    /// let noisy = &x + Tensor::randn(x.shape(), 7) * 0.1; // one kernel
    /// assert_eq!(noisy.shape(), &[4, 4]);
    /// ```
    pub fn randn(shape: impl Into<Shape>, seed: u64) -> Tensor {
        Tensor::randn_on(shape, seed, &Device::default())
    }

    /// [`Tensor::randn`] on `device`.
    pub fn randn_on(shape: impl Into<Shape>, seed: u64, device: &Device) -> Tensor {
        random(Distribution::Normal, shape.into(), seed, device)
    }

    /// Dropout: each element zeroed with probability `p`, the rest scaled by `1 / (1 - p)`, the mask drawn as
    /// `Tensor::rand(self.shape(), seed) >= p`. The mask is never stored: the forward kernel computes it, and the
    /// gradient (the output gradient times `mask / (1 - p)`) computes it again from `(seed, index)`.
    ///
    /// # Panics
    /// At the caller, naming the op, when `p` is not in `[0, 1)`; [`Tensor::try_dropout`] returns the error.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::Tensor;
    /// let y = Tensor::ones([1000]).dropout(0.5, 3).to_vec();
    /// assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
    /// ```
    #[track_caller]
    pub fn dropout(&self, p: f32, seed: u64) -> Tensor {
        ok(self.try_dropout(p, seed))
    }

    /// [`Tensor::dropout`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] when `p` is not in `[0, 1)` (NaN included).
    pub fn try_dropout(&self, p: f32, seed: u64) -> Result<Tensor> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::BadArgument {
                op: "dropout",
                message: format!("the probability p = {p} is not in [0, 1)"),
                shape: self.shape.clone(),
            });
        }
        let out = crate::no_grad(|| dropout_values(&self.detach(), p, seed));
        Ok(record(out, &[self], |_| Rule::Dropout { p, seed }))
    }
}

/// `x` with dropout's mask and scale applied: the forward value and, applied to the output gradient, the backward.
pub(crate) fn dropout_values(x: &Tensor, p: f32, seed: u64) -> Tensor {
    let keep = Tensor::rand_on(x.shape.clone(), seed, &x.device).ge(p);
    keep.where_cond(&(x * (1.0 / (1.0 - p))), 0.0)
}

/// A random node: the seed's words are constants of the graph, so kernels read them as parameters and a new seed
/// reuses the compiled plan.
fn random(d: Distribution, shape: Shape, seed: u64, device: &Device) -> Tensor {
    let [lo, hi] = key(seed);
    let lo = Tensor::full_lane([], lo, DType::U32, device);
    let hi = Tensor::full_lane([], hi, DType::U32, device);
    Tensor::from_op(device, NodeOp::Random(d, lo.id, hi.id), shape, DType::F32)
}
