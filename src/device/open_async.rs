//! The awaitable twins of `Device`'s calls that wait for the GPU: opening a device and waiting for its work. They
//! run on every target; in the browser (wasm32) they are the only way, since the page's one thread cannot block.

#[cfg(target_arch = "wasm32")]
use crate::backend::Backends;
use crate::device::{Device, DEFAULT};
use crate::error::{Error, Result};

impl Device {
    /// [`Device::new`] as a future: what a browser page awaits to open its WebGPU adapter. Natively it opens the
    /// device as `new` does (wgpu's native calls finish at once), so one program runs on both.
    ///
    /// # Errors
    /// As [`Device::new`]; in the browser [`Error::NoAdapter`] where the page has no WebGPU (`navigator.gpu` is
    /// missing, or offers no adapter).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn run() -> lazor::Result<()> {
    /// let dev = lazor::Device::new_async().await?;
    /// let y = (lazor::Tensor::ones_on([4], &dev) * 3.0).sum_all();
    /// assert_eq!(y.to_scalar_async().await?, 12.0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn new_async() -> Result<Device> {
        #[cfg(not(target_arch = "wasm32"))]
        return Device::new();
        #[cfg(target_arch = "wasm32")]
        {
            let gpu = crate::backend::wgpu::WgpuBackend::open_async(false).await?;
            Ok(Device::with_backend(Backends::wgpu_backend(gpu)))
        }
    }

    /// [`Device::default`] as a future. In the browser: the page's WebGPU adapter (any, software ones included:
    /// the browser chose it), else the CPU backend, as [`Device::default`] falls back where there is no GPU. Once
    /// it has resolved, [`Device::default`] (and every tensor made without a device) uses the same device there.
    ///
    /// # Panics
    /// Natively, as [`Device::default`]. In the browser it never panics.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn run() -> lazor::Result<()> {
    /// let dev = lazor::Device::default_async().await;
    /// let x = lazor::Tensor::from_vec(vec![1.0, 2.0], [2]); // on `dev`
    /// assert_eq!(x.device(), &dev);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn default_async() -> Device {
        if let Some(d) = DEFAULT.get() {
            return d.clone();
        }
        #[cfg(not(target_arch = "wasm32"))]
        return Device::default();
        #[cfg(target_arch = "wasm32")]
        {
            let dev = match crate::backend::wgpu::WgpuBackend::open_async(false).await {
                Ok(gpu) => Device::with_backend(Backends::wgpu_backend(gpu)),
                Err(_) => Device::cpu(),
            };
            // A second page task may have opened one meanwhile: the first stays.
            DEFAULT.get_or_init(|| dev).clone()
        }
    }

    /// [`Device::synchronize`] as a future: resolves once every realize made so far has run on the device, and
    /// reports a failure of any of them. It does not block the thread; in the browser it is the way to wait.
    ///
    /// # Errors
    /// [`Error::DeviceLost`] if the device was lost; in the browser, errors WebGPU reported since the last call
    /// ([`Error::Validation`], a kernel that did not compile, out of memory).
    ///
    /// # Examples
    /// ```
    /// # fn main() -> lazor::Result<()> { pollster::block_on(async {
    /// let dev = lazor::Device::cpu();
    /// (lazor::Tensor::ones_on([8], &dev) * 2.0).realize()?;
    /// dev.synchronize_async().await?;
    /// # Ok(()) }) }
    /// ```
    pub async fn synchronize_async(&self) -> Result<()> {
        self.inner.idle_async().await
    }

    /// Fails with [`Error::WouldBlock`] naming `twin` where `op` would wait for the GPU on the browser's one
    /// thread: a WebGPU device in wasm32. Never elsewhere.
    pub(crate) fn check_blocking(&self, op: &'static str, twin: &'static str) -> Result<()> {
        if cfg!(target_arch = "wasm32") && !self.is_cpu() {
            return Err(Error::WouldBlock { op, twin });
        }
        Ok(())
    }
}
