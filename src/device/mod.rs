//! `Device`: a handle to one backend with its own graph and counters.

mod open_async;

use crate::backend::cpu::CpuBackend;
#[cfg(not(target_arch = "wasm32"))]
use crate::backend::wgpu::WgpuBackend;
use crate::backend::wgpu::WgpuDevice;
use crate::backend::Backends;
use crate::error::{Error, Result};
use crate::graph::{Graph, NodeId};
use crate::profile::{Profile, Stats};
use crate::realize::{Engine, EngineState};
use std::fmt;
use std::sync::{Arc, MutexGuard, OnceLock};

/// A device (today a wgpu adapter) and everything lazor keeps for it: its graph, buffers, pipelines and counters.
/// Cheap to clone (a handle); `Send` and `Sync`.
///
/// # Examples
/// ```no_run
/// let dev = lazor::Device::new()?;
/// let t = lazor::Tensor::ones_on([4], &dev) * 2.0;
/// assert_eq!(t.to_vec(), vec![2.0; 4]);
/// assert_eq!(dev.stats().submits, 1);
/// # Ok::<(), lazor::Error>(())
/// ```
#[derive(Clone)]
pub struct Device {
    /// The engine that plans and runs this device's work (`realize.rs`).
    pub(crate) inner: Arc<Engine>,
}

/// The process-wide device ([`Device::default`], [`Device::default_async`]).
pub(crate) static DEFAULT: OnceLock<Device> = OnceLock::new();

impl Device {
    /// Opens an independent wgpu device on the best adapter: a discrete GPU before an integrated one before a
    /// software one. No other live `Device` shares it; the wgpu device of a dropped `Device` is reused rather than
    /// created again (destroying devices can deadlock NVIDIA's Vulkan driver). `LAZOR_BACKEND` (vulkan, metal,
    /// dx12, gl) and `LAZOR_ADAPTER` (part of the adapter's name) narrow the choice; `LAZOR_NOFUSE=1` starts it with
    /// fusion off.
    ///
    /// # Errors
    /// [`Error::NoAdapter`] when no adapter matches, [`Error::DeviceCreation`] when the adapter refuses,
    /// [`Error::Env`] for a bad `LAZOR_BACKEND`; in the browser (wasm32), always [`Error::WouldBlock`]: await
    /// [`Device::new_async`] there.
    pub fn new() -> Result<Device> {
        #[cfg(target_arch = "wasm32")]
        return Err(Error::WouldBlock { op: "Device::new()", twin: "Device::new_async()" });
        #[cfg(not(target_arch = "wasm32"))]
        Ok(Device::with_backend(Backends::wgpu_backend(WgpuBackend::open(false)?)))
    }

    /// Opens an independent device on the host's cores: the same graphs, fused the same way, run by the CPU
    /// backend on a rayon pool. Never fails.
    ///
    /// # Examples
    /// ```
    /// let cpu = lazor::Device::cpu();
    /// let t = (lazor::Tensor::ones_on([3], &cpu) * 2.0).exp();
    /// assert_eq!(t.to_vec(), vec![2f32.exp(); 3]);
    /// assert_eq!(cpu.stats().dispatches, 1);
    /// ```
    pub fn cpu() -> Device {
        Device::with_backend(Backends::cpu(CpuBackend::new()))
    }

    /// Whether this device runs on the CPU backend.
    pub fn is_cpu(&self) -> bool {
        self.inner.backend.is_cpu()
    }

    /// Slices of k for a single `m x k x n` product on this device ([`crate::schedule::split_k`]); `None` on the
    /// CPU backend, whose `gemm` splits work itself.
    pub(crate) fn split_k(&self, mkn: (usize, usize, usize), contiguous: impl Fn(bool, bool) -> bool) -> Option<usize> {
        if self.is_cpu() {
            return None;
        }
        crate::schedule::split_k::split_k(&self.inner.backend.matmul_tiles(), mkn, contiguous)
    }

    pub(crate) fn with_backend(backend: Backends) -> Device {
        let dev = Device { inner: Arc::new(Engine::new(backend)) };
        if crate::env::profile() {
            dev.profile_until_exit();
        }
        dev
    }

    /// The process-wide device, opened on first use: a hardware GPU (discrete before integrated) when there is one,
    /// otherwise the CPU backend. `LAZOR_BACKEND=cpu` picks the CPU; `LAZOR_BACKEND=vulkan` (or metal, dx12, gl)
    /// picks a wgpu adapter of that backend, software rasterizers included.
    ///
    /// # Panics
    /// If no device can be opened (the message says why); use [`Device::new`] to handle that as an error. In the
    /// browser (wasm32), unless [`Device::default_async`] has resolved before: opening WebGPU cannot block there.
    #[allow(clippy::should_implement_trait)]
    #[track_caller]
    pub fn default() -> Device {
        if let Some(d) = DEFAULT.get() {
            return d.clone();
        }
        #[cfg(target_arch = "wasm32")]
        panic!("{}", Error::WouldBlock { op: "Device::default()", twin: "Device::default_async()" });
        #[cfg(not(target_arch = "wasm32"))]
        {
            // One thread opens it; the others wait rather than open devices of their own to throw away.
            static OPENING: std::sync::Mutex<()> = std::sync::Mutex::new(());
            let _opening = OPENING.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(d) = DEFAULT.get() {
                return d.clone();
            }
            let dev = match Device::open_default() {
                Ok(d) => d,
                Err(e) => panic!("{e}"),
            };
            DEFAULT.get_or_init(|| dev).clone()
        }
    }

    /// The default device's choice: `LAZOR_BACKEND=cpu` the CPU; another `LAZOR_BACKEND` that wgpu backend, any
    /// adapter; unset, a hardware GPU when there is one and otherwise the CPU, not a software rasterizer.
    #[cfg(not(target_arch = "wasm32"))]
    fn open_default() -> Result<Device> {
        match crate::env::var("LAZOR_BACKEND").map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            Some("cpu") => Ok(Device::cpu()),
            Some(_) => Device::new(),
            None => match WgpuBackend::open(true) {
                Ok(gpu) => Ok(Device::with_backend(Backends::wgpu_backend(gpu))),
                Err(Error::NoAdapter(_)) => Ok(Device::cpu()),
                Err(e) => {
                    eprintln!("lazor: {e}; using the CPU backend");
                    Ok(Device::cpu())
                }
            },
        }
    }

    /// What this device has done so far.
    pub fn stats(&self) -> Stats {
        let mut stats = self.state().stats;
        stats.pool_bytes = self.inner.backend.pool_bytes();
        if let Some(submits) = self.inner.backend.submits() {
            stats.submits = submits;
        }
        stats
    }

    /// Gives back every free buffer the device keeps for reuse (storage and read-back staging), so the memory
    /// returns to the driver or the system; live tensors are untouched. Returns the bytes given back. Later
    /// realizes allocate again what they need.
    ///
    /// # Examples
    /// ```
    /// let dev = lazor::Device::cpu();
    /// drop((lazor::Tensor::ones_on([1024], &dev) * 2.0).to_vec());
    /// assert!(dev.stats().pool_bytes > 0);
    /// dev.trim();
    /// assert_eq!(dev.stats().pool_bytes, 0);
    /// ```
    pub fn trim(&self) -> u64 {
        self.inner.backend.trim()
    }

    /// The most bytes of free buffers the device keeps for reuse: a quarter of the device's memory (the host's
    /// for the CPU backend), at least 256 MiB, 1 GiB where the size is unknown, or `LAZOR_POOL_MB`.
    pub fn pool_budget(&self) -> u64 {
        self.inner.backend.pool_budget()
    }

    /// Changes the pool's budget. Buffers freed longest ago are given back first when it is exceeded.
    pub fn set_pool_budget(&self, bytes: u64) {
        self.inner.backend.set_pool_budget(bytes);
    }

    /// The adapter's name, e.g. "NVIDIA H200" or "llvmpipe (LLVM 15.0.6, 256 bits)"; on the CPU backend, the
    /// processor's name (e.g. "AMD EPYC 9654 96-Core Processor"), or the architecture where the system does not say.
    pub fn adapter_name(&self) -> String {
        match self.inner.backend.wgpu() {
            Some(w) => w.gpu().info.name.clone(),
            None => crate::backend::cpu::processor_name(),
        }
    }

    /// The adapter's backend ("Vulkan", "Metal", ...); `"Cpu"` on the CPU backend.
    pub fn backend(&self) -> String {
        match self.inner.backend.wgpu() {
            Some(w) => format!("{:?}", w.gpu().info.backend),
            None => "Cpu".to_string(),
        }
    }

    /// The adapter's description: name, vendor, device type, backend, driver. On the CPU backend: the processor's
    /// name, `device_type` [`wgpu::DeviceType::Cpu`], `backend` [`wgpu::Backend::Noop`] (no graphics API is
    /// involved), `driver` "lazor" and, in `driver_info`, the number of threads kernels run on.
    pub fn adapter_info(&self) -> wgpu::AdapterInfo {
        match self.inner.backend.wgpu() {
            Some(w) => w.gpu().info.clone(),
            None => {
                let mut info = wgpu::AdapterInfo::new(wgpu::DeviceType::Cpu, wgpu::Backend::Noop);
                info.name = crate::backend::cpu::processor_name();
                info.driver = "lazor".to_string();
                info.driver_info = self.inner.backend.name();
                info
            }
        }
    }

    /// The wgpu side of this device: its wgpu device and queue, the submit queue's depth, the kernel features it
    /// may use (subgroups, native f16, tensor cores), its pipeline cache on disk. `None` on the CPU backend, which
    /// has none of them.
    ///
    /// # Examples
    /// ```no_run
    /// let dev = lazor::Device::default();
    /// let tensor_cores = dev.wgpu().is_some_and(|gpu| gpu.tensor_cores());
    /// ```
    pub fn wgpu(&self) -> Option<WgpuDevice<'_>> {
        WgpuDevice::of(&self.inner.backend)
    }

    /// A human-readable name of the device and its backend, e.g. "NVIDIA H200 (Vulkan)".
    pub fn name(&self) -> String {
        self.inner.backend.name()
    }

    /// Submits the realizes this device holds back. While the GPU has work in flight, a wgpu device records later
    /// realizes into one open batch instead of submitting each: every submit costs the GPU idle time and the host
    /// time. A thread of the device's own submits the batch once the queue has room (see
    /// [`WgpuDevice::set_queue_depth`]), with everything made meanwhile. Reads and
    /// [`synchronize`](Device::synchronize) flush by themselves; call this before submitting work of your own
    /// through [`WgpuDevice::queue`] that must follow lazor's. Nothing to do on the CPU backend, which
    /// runs each realize when it is made.
    pub fn flush(&self) {
        self.inner.backend.flush_all();
    }

    /// Turns fusion on (the default) or off (one kernel per op, as with `LAZOR_NOFUSE=1`) for later realizes.
    pub fn set_fusion(&self, on: bool) {
        self.inner.set_fusion(on);
    }

    /// Runs kernels that neither read nor write what another writes in one dispatch, two at a time, each on its own
    /// range of workgroups (`LAZOR_GROUP=1`), or each in a dispatch of its own (the default). Matrix products always
    /// run alone. Fewer dispatches cost fewer launches: many small independent folds or maps ran faster grouped, while
    /// nanoGPT's training step ran slightly slower in fewer dispatches (docs/BENCHMARKS.md, "Grouped dispatches"),
    /// hence off by default. Tests run both.
    pub fn set_grouping(&self, on: bool) {
        self.inner.set_grouping(on);
    }

    /// Whether independent kernels share dispatches ([`Device::set_grouping`]).
    pub fn grouping(&self) -> bool {
        self.inner.grouping()
    }

    /// Whether later realizes fuse.
    pub fn fusion(&self) -> bool {
        self.inner.fusion()
    }

    /// Live graph nodes: tensors and the unrealized expressions they need.
    pub fn live_nodes(&self) -> usize {
        self.state().graph.len()
    }

    /// Waits until all work submitted to this device has finished.
    ///
    /// # Errors
    /// [`Error::DeviceLost`] if the device was lost; in the browser (wasm32) on a WebGPU device,
    /// [`Error::WouldBlock`]: await [`Device::synchronize_async`] there.
    pub fn synchronize(&self) -> Result<()> {
        self.check_blocking("synchronize()", "synchronize_async()")?;
        self.inner.backend.synchronize().map_err(|e| e.on_device(&self.name()))
    }

    /// Storage buffers one kernel may bind on this device, parameters included.
    pub(crate) fn max_bindings(&self) -> usize {
        self.inner.backend.max_bindings()
    }

    /// The largest tensor, in bytes, one kernel can bind on this device.
    pub fn max_tensor_bytes(&self) -> u64 {
        self.inner.backend.max_buffer_bytes()
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, EngineState> {
        self.inner.state()
    }

    /// Realizes `outputs` as one job and, in it, starts reading back each of `read` (see [`Engine::run`]).
    pub(crate) fn run(&self, outputs: &[NodeId], read: &[NodeId]) -> Result<Vec<Option<crate::backend::ReadId>>> {
        self.inner.run(outputs, read)
    }

    /// Realizes `ids` in one job and reads back the words of their buffers, blocking.
    pub(crate) fn read(&self, ids: &[NodeId]) -> Result<Vec<Vec<u32>>> {
        self.inner.read(ids)
    }

    /// Realizes `id` and lends its words to `f` (no words for an empty tensor), blocking.
    pub(crate) fn read_with(&self, id: NodeId, f: &mut dyn FnMut(&[u32])) -> Result<()> {
        self.inner.read_with(id, f)
    }

    /// Realizes node `id` and copies its words into `out` (as long as the node), on all cores when large.
    pub(crate) fn read_into(&self, id: NodeId, out: &mut [u32]) -> Result<()> {
        self.inner.read_with(id, &mut |words| crate::backend::copy::copy(out, &words[..out.len()]))
    }

    /// Realizes `ids` in one job and reads them back without blocking the caller's thread on the device.
    pub(crate) async fn read_async(&self, ids: &[NodeId]) -> Result<Vec<Vec<u32>>> {
        self.inner.read_async(ids).await
    }

    /// The scheduler's options for this device as it is set now.
    pub(crate) fn schedule_options(&self) -> crate::schedule::Options {
        self.inner.schedule_options()
    }

    /// Gives buffers of freed nodes back to the backend.
    pub(crate) fn free(&self, stats: &mut Stats, freed: Vec<crate::buffer::BufferKey>) {
        self.inner.free(stats, freed)
    }

    pub(crate) fn same(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Adds a node to the graph.
    pub(crate) fn add_node(&self, f: impl FnOnce(&mut Graph) -> NodeId) -> NodeId {
        f(&mut self.state().graph)
    }

    pub(crate) fn check_same(&self, other: &Device, op: &'static str) -> Result<()> {
        if self.same(other) {
            Ok(())
        } else {
            Err(Error::DeviceMismatch { op })
        }
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        self.same(other)
    }
}

impl Eq for Device {}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device").field("name", &self.inner.backend.name()).finish()
    }
}

impl Device {
    /// Runs `f` and returns the kernels its realizes on this device ran: names, dispatches, GPU time from
    /// timestamp queries where the adapter has them (host time on the CPU backend), bytes and rates, slowest
    /// first. While profiling, every realize is submitted and waited for on its own, so the times are the kernels'
    /// own; realizes outside profiling pay nothing. Profiles nest: an outer one (or `LAZOR_PROFILE=1`'s) also
    /// counts what an inner one saw.
    ///
    /// # Examples
    /// ```no_run
    /// let dev = lazor::Device::default();
    /// let x = lazor::Tensor::ones_on([1024, 1024], &dev);
    /// let profile = dev.profile(|| (x.exp() + 1.0).sum_all().realize().unwrap());
    /// println!("{profile}");
    /// assert_eq!(profile.dispatches(), 1);
    /// ```
    pub fn profile<R>(&self, f: impl FnOnce() -> R) -> Profile {
        let outer = self.state().profile.replace(Vec::new());
        // What was held back before is not this code's.
        self.inner.backend.flush_all();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let runs = {
            let mut state = self.state();
            let runs = state.profile.take().unwrap_or_default();
            state.profile = outer.map(|mut o| {
                o.extend(runs.iter().cloned());
                o
            });
            runs
        };
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
        Profile::from_runs(runs, self.name())
    }

    /// `LAZOR_PROFILE=1`: this device profiles everything from its creation, and the table is printed when the
    /// process exits.
    pub(crate) fn profile_until_exit(&self) {
        self.state().profile = Some(Vec::new());
        let mut devices = at_exit::DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        devices.push(std::sync::Arc::downgrade(&self.inner));
        at_exit::register();
    }
}

/// Printing `LAZOR_PROFILE`'s tables when the process exits, for every device still alive.
mod at_exit {
    #[cfg(not(target_arch = "wasm32"))]
    use crate::device::Device;
    use crate::realize::Engine;
    use std::sync::{Mutex, Weak};

    pub static DEVICES: Mutex<Vec<Weak<Engine>>> = Mutex::new(Vec::new());

    #[cfg(not(target_arch = "wasm32"))]
    use std::sync::Once;

    #[cfg(not(target_arch = "wasm32"))]
    extern "C" {
        fn atexit(f: extern "C" fn()) -> std::ffi::c_int;
    }

    #[cfg(not(target_arch = "wasm32"))]
    extern "C" fn print() {
        let devices = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        for inner in devices.iter().filter_map(Weak::upgrade) {
            let dev = Device { inner };
            let runs = dev.state().profile.take().unwrap_or_default();
            eprint!("{}", crate::profile::Profile::from_runs(runs, dev.name()));
        }
    }

    /// Nothing in the browser: a page does not exit, and has no C library.
    #[cfg(target_arch = "wasm32")]
    pub fn register() {}

    #[cfg(not(target_arch = "wasm32"))]
    pub fn register() {
        static ONCE: Once = Once::new();
        // SAFETY: `atexit` is the C library's; `print` takes no arguments and does not unwind (it only formats).
        ONCE.call_once(|| unsafe {
            atexit(print);
        });
    }
}
