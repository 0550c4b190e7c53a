//! The awaitable twins of the reads: `to_vec_as_async`, `to_scalar_async`, `to_vecs_async`, `to_string_async`,
//! `to_device_async`, and `realize_async`. Each realizes at once (one submit) and resolves when the values are back
//! or the work has run, without blocking the thread: in the browser (wasm32) they are the only way to read a WebGPU
//! tensor, since the page's one thread cannot wait for the GPU.

use crate::device::Device;
use crate::error::Result;
use crate::graph::{NodeId, NodeOp};
use crate::tensor::element::Element;
use crate::tensor::Tensor;
use std::future::Future;

impl Tensor {
    /// [`Tensor::to_vec_as`] as a future: the realize is submitted on first poll and the future resolves with the
    /// values as `T` (the tensor's element type) once they are back.
    ///
    /// # Errors
    /// [`crate::Error::DType`] if `T` is not the tensor's element type; device failures as [`Tensor::try_to_vec`].
    ///
    /// # Examples
    /// ```
    /// # fn main() -> lazor::Result<()> { pollster::block_on(async {
    /// let dev = lazor::Device::cpu();
    /// let x = lazor::Tensor::from_vec_on(vec![3.0, -1.0, 2.0], [3], &dev);
    /// assert_eq!(x.argmax(0).to_vec_as_async::<i32>().await?, vec![0]);
    /// # Ok(()) }) }
    /// ```
    pub fn to_vec_as_async<T: Element>(&self) -> impl Future<Output = Result<Vec<T>>> + Send + 'static {
        let t = self.clone();
        async move {
            t.check_read::<T>("to_vec_as_async")?;
            let words = t.device.read_async(&[t.id]).await?.pop().expect("one output");
            Ok(T::from_words(words, t.numel()))
        }
    }

    /// [`Tensor::to_scalar`] as a future: the single element of a one-element f32 tensor, such as a loss. The one
    /// await a training loop needs: the steps before it stay lazy.
    ///
    /// # Panics
    /// At the call, if the tensor does not have exactly one element.
    ///
    /// # Errors
    /// [`crate::Error::DType`] if the tensor is not f32; device failures as [`Tensor::try_to_vec`].
    ///
    /// # Examples
    /// ```
    /// # fn main() -> lazor::Result<()> { pollster::block_on(async {
    /// let dev = lazor::Device::cpu();
    /// let loss = (lazor::Tensor::from_vec_on(vec![1.0, 3.0], [2], &dev) - 1.0).square().mean_all();
    /// assert_eq!(loss.to_scalar_async().await?, 2.0);
    /// # Ok(()) }) }
    /// ```
    #[track_caller]
    pub fn to_scalar_async(&self) -> impl Future<Output = Result<f32>> + Send + 'static {
        self.to_scalar_as_async::<f32>()
    }

    /// [`Tensor::to_scalar_as`] as a future: the single element as `T`, the tensor's element type.
    ///
    /// # Panics
    /// At the call, if the tensor does not have exactly one element.
    ///
    /// # Errors
    /// As [`Tensor::to_vec_as_async`].
    #[track_caller]
    pub fn to_scalar_as_async<T: Element>(&self) -> impl Future<Output = Result<T>> + Send + 'static {
        assert!(
            self.numel() == 1,
            "lazor: to_scalar_async: tensor of shape {} has {} elements, not 1",
            self.shape,
            self.numel()
        );
        let values = self.to_vec_as_async::<T>();
        async move { Ok(values.await?[0]) }
    }

    /// [`Tensor::to_device`] as a future: the values read back from this device without blocking, then uploaded to
    /// `device`. The same tensor when it already lives there.
    ///
    /// # Errors
    /// As [`Tensor::try_to_vec`].
    pub fn to_device_async(&self, device: &Device) -> impl Future<Output = Result<Tensor>> + Send + 'static {
        let (t, device) = (self.clone(), device.clone());
        async move {
            if t.device.same(&device) {
                return Ok(t);
            }
            let words = t.device.read_async(&[t.id]).await?.pop().expect("one output");
            Ok(Tensor::from_op(&device, NodeOp::Data(words), t.shape.clone(), t.dtype))
        }
    }

    /// [`Tensor::realize`] as a future that resolves once the device has computed the tensor (and everything
    /// submitted before it), reporting any failure of that work. Reads nothing back.
    ///
    /// # Errors
    /// As [`Tensor::realize`], and [`Device::synchronize_async`]'s.
    pub fn realize_async(&self) -> impl Future<Output = Result<()>> + Send + 'static {
        let t = self.clone();
        async move {
            t.realize()?;
            t.device.synchronize_async().await
        }
    }
}

/// [`crate::to_vecs`] as a future: several f32 tensors of one device read back in one submit.
///
/// # Errors
/// As [`crate::to_vecs`].
///
/// # Examples
/// ```
/// # fn main() -> lazor::Result<()> { pollster::block_on(async {
/// let dev = lazor::Device::cpu();
/// let x = lazor::Tensor::from_vec_on(vec![1.0, 2.0], [2], &dev);
/// let (a, b) = (x.exp(), &x * 2.0);
/// let [ea, eb]: [Vec<f32>; 2] = lazor::to_vecs_async(&[&a, &b]).await?.try_into().unwrap();
/// assert_eq!(eb, vec![2.0, 4.0]);
/// assert_eq!(ea.len(), 2);
/// # Ok(()) }) }
/// ```
pub fn to_vecs_async(tensors: &[&Tensor]) -> impl Future<Output = Result<Vec<Vec<f32>>>> + Send + 'static {
    let tensors: Vec<Tensor> = tensors.iter().map(|&t| t.clone()).collect();
    async move {
        let Some(first) = tensors.first() else { return Ok(Vec::new()) };
        for t in &tensors {
            first.device.check_same(&t.device, "to_vecs_async")?;
            t.check_read::<f32>("to_vecs_async")?;
        }
        let ids: Vec<NodeId> = tensors.iter().map(|t| t.id).collect();
        let words = first.device.read_async(&ids).await?;
        Ok(words.into_iter().zip(&tensors).map(|(w, t)| f32::from_words(w, t.numel())).collect())
    }
}

/// [`crate::realize`] as a future: one realize (one submit) per device, resolving once every device has run its
/// part, failures reported. In the browser, a loop of training steps that awaits this now and then keeps the
/// GPU's queue from growing without bound while the page stays responsive.
///
/// # Errors
/// As [`crate::realize`], and [`Device::synchronize_async`]'s.
///
/// # Examples
/// ```
/// # fn main() -> lazor::Result<()> { pollster::block_on(async {
/// let dev = lazor::Device::cpu();
/// let x = lazor::Tensor::ones_on([3], &dev);
/// let (a, b) = (x.exp(), &x + 1.0);
/// lazor::realize_async(&[&a, &b]).await?;
/// assert!(a.is_realized() && b.is_realized());
/// # Ok(()) }) }
/// ```
pub fn realize_async(tensors: &[&Tensor]) -> impl Future<Output = Result<()>> + Send + 'static {
    let tensors: Vec<Tensor> = tensors.iter().map(|&t| t.clone()).collect();
    async move {
        let refs: Vec<&Tensor> = tensors.iter().collect();
        crate::tensor::realize(&refs)?;
        // Every device has its work now; wait for each in turn.
        let mut devices: Vec<&Device> = Vec::new();
        for t in &tensors {
            if !devices.iter().any(|d| d.same(&t.device)) {
                devices.push(&t.device);
            }
        }
        for d in devices {
            d.synchronize_async().await?;
        }
        Ok(())
    }
}
