//! Reading values back to the host: `to_vec` and its typed and fallible forms, `read_into` the caller's memory,
//! `read_with` a borrowed view of the device's own read-back memory, and `to_vecs` of several tensors at once.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::NodeId;
use crate::tensor::element::Element;
use crate::tensor::Tensor;
use std::future::Future;

impl Tensor {
    /// Realizes and reads the values of an f32 tensor back, row-major.
    ///
    /// # Panics
    /// On a device failure, with the error's message ([`Tensor::try_to_vec`] returns it instead), or if the tensor
    /// is not f32 (read it with [`Tensor::to_vec_as`]).
    #[track_caller]
    pub fn to_vec(&self) -> Vec<f32> {
        crate::error::ok(self.try_to_vec())
    }

    /// Realizes and reads the values back.
    ///
    /// # Errors
    /// As [`Tensor::realize`], [`Error::ReadBack`] if mapping fails, and [`Error::DType`] if the tensor is not
    /// f32. In the browser (wasm32) on a WebGPU device, [`Error::WouldBlock`]: await [`Tensor::to_vec_async`].
    pub fn try_to_vec(&self) -> Result<Vec<f32>> {
        self.try_to_vec_as::<f32>()
    }

    /// Realizes and reads the values back as `T`, exactly; `T` must be the tensor's element type.
    ///
    /// # Panics
    /// If `T` is not the tensor's element type, or on a device failure.
    ///
    /// # Examples
    /// ```no_run
    /// let mask = lazor::Tensor::from_vec(vec![1.0, -2.0, 3.0], [3]).gt(0.0);
    /// assert_eq!(mask.to_vec_as::<bool>(), vec![true, false, true]);
    /// ```
    #[track_caller]
    pub fn to_vec_as<T: Element>(&self) -> Vec<T> {
        crate::error::ok(self.try_to_vec_as())
    }

    /// [`Tensor::to_vec_as`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::DType`] if `T` is not the tensor's element type; as [`Tensor::try_to_vec`] otherwise.
    pub fn try_to_vec_as<T: Element>(&self) -> Result<Vec<T>> {
        self.device.check_blocking("to_vec()", "to_vec_async()")?;
        self.check_read::<T>("to_vec")?;
        let words = self.device.read(&[self.id])?.pop().expect("one output");
        Ok(T::from_words(words, self.numel()))
    }

    /// Fails unless elements of this tensor read as `T`.
    pub(crate) fn check_read<T: Element>(&self, op: &'static str) -> Result<()> {
        if T::DTYPE == self.dtype {
            return Ok(());
        }
        let call = match self.dtype {
            DType::F32 => "to_vec() or to_vec_as::<f32>()".to_string(),
            DType::F16 => "to_vec_as::<half::f16>()".to_string(),
            DType::BF16 => "to_vec_as::<half::bf16>()".to_string(),
            d => format!("to_vec_as::<{d}>()"),
        };
        Err(Error::DType {
            op,
            message: format!("the tensor is {} but {} was asked for; read it with {call}", self.dtype, T::DTYPE),
        })
    }

    /// [`Tensor::try_to_vec`] as a future: the realize is submitted on first poll and the future resolves when the
    /// values are back, without blocking the thread on the GPU. In the browser (wasm32), how a WebGPU tensor is
    /// read.
    ///
    /// # Errors
    /// As [`Tensor::try_to_vec`] (never [`Error::WouldBlock`]).
    ///
    /// # Examples
    /// ```
    /// # fn main() -> lazor::Result<()> { pollster::block_on(async {
    /// let dev = lazor::Device::cpu();
    /// let t = lazor::Tensor::ones_on([2], &dev) + 1.0;
    /// assert_eq!(t.to_vec_async().await?, vec![2.0, 2.0]);
    /// # Ok(()) }) }
    /// ```
    pub fn to_vec_async(&self) -> impl Future<Output = Result<Vec<f32>>> + Send + 'static {
        let t = self.clone();
        async move {
            t.check_read::<f32>("to_vec_async")?;
            let words = t.device.read_async(&[t.id]).await?.pop().expect("one output");
            Ok(f32::from_words(words, t.numel()))
        }
    }

    /// The single element of a one-element f32 tensor.
    ///
    /// # Panics
    /// If the tensor does not have exactly one element or is not f32, or on a device failure; in the browser
    /// (wasm32) on a WebGPU device, always: await [`Tensor::to_scalar_async`] there.
    #[track_caller]
    pub fn to_scalar(&self) -> f32 {
        self.to_scalar_as::<f32>()
    }

    /// The single element of a one-element tensor, as `T` (its element type).
    ///
    /// # Panics
    /// If the tensor does not have exactly one element, if `T` is not its element type, or on a device failure.
    #[track_caller]
    pub fn to_scalar_as<T: Element>(&self) -> T {
        crate::error::ok(self.device.check_blocking("to_scalar()", "to_scalar_async()"));
        assert!(
            self.numel() == 1,
            "lazor: to_scalar: tensor of shape {} has {} elements, not 1",
            self.shape,
            self.numel()
        );
        self.to_vec_as::<T>()[0]
    }

    /// Realizes and copies the values of an f32 tensor into `out`, row-major: no allocation, and on the GPU the
    /// copy out of read-back memory runs on all cores.
    ///
    /// # Panics
    /// If `out.len()` is not the tensor's number of elements (the message names both), if the tensor is not f32,
    /// or on a device failure; [`Tensor::try_read_into`] returns these instead.
    ///
    /// # Examples
    /// ```
    /// let dev = lazor::Device::cpu();
    /// let mut out = vec![0.0; 3];
    /// (lazor::Tensor::ones_on([3], &dev) * 2.0).read_into(&mut out);
    /// assert_eq!(out, [2.0; 3]);
    /// ```
    #[track_caller]
    pub fn read_into(&self, out: &mut [f32]) {
        if let Err(e) = self.try_read_into(out) {
            panic!("{e}");
        }
    }

    /// [`Tensor::read_into`], returning an error instead of panicking.
    ///
    /// # Errors
    /// [`Error::BadArgument`] when `out.len()` is not the number of elements, [`Error::DType`] if the tensor is
    /// not f32; as [`Tensor::try_to_vec`] otherwise.
    pub fn try_read_into(&self, out: &mut [f32]) -> Result<()> {
        if out.len() != self.numel() {
            return Err(Error::BadArgument {
                op: "read_into",
                message: format!("the tensor has {} elements but the slice has {}", self.numel(), out.len()),
                shape: self.shape.clone(),
            });
        }
        self.device.check_blocking("read_into()", "to_vec_async()")?;
        self.check_read::<f32>("read_into")?;
        let out: &mut [u32] = bytemuck::cast_slice_mut(out);
        self.device.read_into(self.id, out)
    }

    /// Realizes an f32 tensor and lends its values to `f`, row-major, without copying them into host memory of
    /// their own: on a GPU `f` reads the mapped read-back buffer, on the CPU backend the tensor's buffer. Returns
    /// what `f` returns.
    ///
    /// # Panics
    /// If the tensor is not f32, or on a device failure; [`Tensor::try_read_with`] returns these instead.
    ///
    /// # Examples
    /// ```
    /// let dev = lazor::Device::cpu();
    /// let t = lazor::Tensor::from_vec_on(vec![1.0, 2.0, 3.0], [3], &dev).exp();
    /// let total: f32 = t.read_with(|values| values.iter().sum());
    /// assert!((total - (1f32.exp() + 2f32.exp() + 3f32.exp())).abs() < 1e-4);
    /// ```
    #[track_caller]
    pub fn read_with<R>(&self, f: impl FnOnce(&[f32]) -> R) -> R {
        crate::error::ok(self.try_read_with(f))
    }

    /// [`Tensor::read_with`], returning an error instead of panicking (`f` does not run then).
    ///
    /// # Errors
    /// [`Error::DType`] if the tensor is not f32; as [`Tensor::try_to_vec`] otherwise.
    pub fn try_read_with<R>(&self, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
        self.device.check_blocking("read_with()", "to_vec_async()")?;
        self.check_read::<f32>("read_with")?;
        let n = self.numel();
        let mut f = Some(f);
        let mut result = None;
        self.device.read_with(self.id, &mut |words| {
            if let Some(f) = f.take() {
                result = Some(f(bytemuck::cast_slice(&words[..n])));
            }
        })?;
        Ok(result.expect("the read-back lends its values once"))
    }
}

/// Reads several f32 tensors of one device back in one submit.
///
/// # Errors
/// As [`Tensor::try_to_vec`]; [`Error::DeviceMismatch`] if they live on different devices.
pub fn to_vecs(tensors: &[&Tensor]) -> Result<Vec<Vec<f32>>> {
    let Some(first) = tensors.first() else { return Ok(Vec::new()) };
    for t in tensors {
        t.device.check_blocking("to_vecs()", "lazor::to_vecs_async()")?;
        first.device.check_same(&t.device, "to_vecs")?;
        t.check_read::<f32>("to_vecs")?;
    }
    let ids: Vec<NodeId> = tensors.iter().map(|t| t.id).collect();
    let words = first.device.read(&ids)?;
    Ok(words.into_iter().zip(tensors).map(|(w, t)| f32::from_words(w, t.numel())).collect())
}

/// The stored words of every tensor, read back in one realize per device, in order.
pub(crate) fn read_words<'a>(tensors: impl Iterator<Item = &'a Tensor>) -> Result<Vec<Vec<u32>>> {
    let tensors: Vec<&Tensor> = tensors.collect();
    let mut words: Vec<Vec<u32>> = vec![Vec::new(); tensors.len()];
    let mut done = vec![false; tensors.len()];
    for i in 0..tensors.len() {
        if done[i] {
            continue;
        }
        let device = &tensors[i].device;
        let mine: Vec<usize> = (i..tensors.len()).filter(|&j| !done[j] && tensors[j].device.same(device)).collect();
        let ids: Vec<NodeId> = mine.iter().map(|&j| tensors[j].id).collect();
        for (j, w) in mine.iter().zip(device.read(&ids)?) {
            words[*j] = w;
            done[*j] = true;
        }
    }
    Ok(words)
}
