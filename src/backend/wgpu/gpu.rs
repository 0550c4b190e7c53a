//! Opening the GPU: adapter choice (`LAZOR_BACKEND`, `LAZOR_ADAPTER`), device creation with the adapter's own
//! limits, and turning wgpu's error callbacks into values lazor can return.

use crate::env;
use crate::error::lock;
use crate::error::{Error, Result};
use std::sync::{Arc, Mutex};

/// An open wgpu device and what lazor needs to know about it.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    /// Whether the device was created with subgroup operations (`wgpu::Features::SUBGROUP`).
    pub subgroups: bool,
    /// Whether the device was created with native f16 (`wgpu::Features::SHADER_F16`).
    pub f16: bool,
    /// Whether f16 matmuls can run on the tensor cores: the device was created with
    /// `wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX`, which has a 16 x 16 x 16 f16 shape accumulating in f32.
    pub coop: bool,
    /// Whether kernels can be timed on the GPU (`wgpu::Features::TIMESTAMP_QUERY`).
    pub timestamps: bool,
    /// The SPIR-V version kernels may be handed to the driver in (wgpu's passthrough shaders on a Vulkan device),
    /// where the SPIR-V path is open: `None` elsewhere or under `LAZOR_SPIRV=0`.
    pub spirv: Option<(u8, u8)>,
    /// Whether the device was opened with bf16 cooperative matrices (`VK_KHR_shader_bfloat16`), which the SPIR-V
    /// path runs bf16 products on.
    pub bf16_coop: bool,
    /// Whether the device was created with 64-bit integers (`wgpu::Features::SHADER_INT64`).
    pub int64: bool,
    /// Which kernels take the SPIR-V path where it is open (`LAZOR_SPIRV`, read once when the device opens).
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub spirv_mode: super::spirv::Mode,
    /// Whether kernels whose every index is in range by construction (matmul) still get wgpu's bounds checks
    /// (`LAZOR_SHADER_CHECKS`).
    pub checked: bool,
    /// Bytes of the adapter's largest device-local memory heap, where the backend says (Vulkan).
    pub memory: Option<u64>,
    /// The matmul blockings for this adapter ([`Gpu::matmul_tiles`]), worked out once: every realize reads them, and
    /// asking the host for its thread count (a CPU adapter's threshold) reads cgroup files, a large part of a small
    /// realize's host time on lavapipe (figures: docs/notes/source-measurements.md, `src/backend/wgpu/gpu.rs`).
    tiles: crate::kernel::MatmulTiles,
    /// Set by wgpu's device-lost callback; every later realize fails with it.
    pub lost: super::keep::Lost,
    /// Errors no error scope caught (there should be none): kept so the next realize returns them.
    pub uncaptured: Arc<Mutex<Vec<String>>>,
    /// Set when a batch of held-back realizes failed at submit: those realizes were already marked done, so every
    /// later call fails rather than let their results be read.
    poisoned: Mutex<Option<String>>,
}

/// Preference among device types: discrete before integrated before virtual before software.
fn rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

/// The wgpu backends `LAZOR_BACKEND` allows (all of them when it is unset or names the CPU backend).
fn backends() -> Result<wgpu::Backends> {
    let Some(value) = env::var("LAZOR_BACKEND") else {
        return Ok(wgpu::Backends::all());
    };
    let b = match value.to_ascii_lowercase().as_str() {
        "cpu" => wgpu::Backends::all(),
        "vulkan" | "vk" => wgpu::Backends::VULKAN,
        "metal" => wgpu::Backends::METAL,
        "dx12" => wgpu::Backends::DX12,
        "gl" | "gles" | "opengl" => wgpu::Backends::GL,
        _ => {
            return Err(Error::Env {
                var: "LAZOR_BACKEND",
                value,
                message: "expected one of cpu, vulkan, metal, dx12, gl".into(),
            })
        }
    };
    Ok(b)
}

/// The size of the adapter's largest device-local heap: Vulkan reports its heaps, wgpu's own API does not.
#[cfg(any(windows, target_os = "linux", target_os = "android", target_os = "freebsd"))]
fn device_memory(adapter: &wgpu::Adapter) -> Option<u64> {
    /// `VK_MEMORY_HEAP_DEVICE_LOCAL_BIT`.
    const DEVICE_LOCAL: u32 = 1;
    // SAFETY: only reads the physical device's memory properties; nothing is created or destroyed.
    let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
    let instance = hal.shared_instance().raw_instance();
    // SAFETY: the physical device belongs to this instance, which outlives the call.
    let props = unsafe { instance.get_physical_device_memory_properties(hal.raw_physical_device()) };
    let heaps = props.memory_heaps.get(..props.memory_heap_count as usize)?;
    heaps.iter().filter(|h| h.flags.as_raw() & DEVICE_LOCAL != 0).map(|h| h.size).max()
}

#[cfg(not(any(windows, target_os = "linux", target_os = "android", target_os = "freebsd")))]
fn device_memory(_adapter: &wgpu::Adapter) -> Option<u64> {
    None
}

/// Whether the tensor-core matmul kernel can run here: the adapter offers cooperative matrices with a subgroup-scope
/// 16 x 16 x 16 shape of f16 operands and an f32 accumulator, native f16 and subgroups, its subgroups are always
/// 32 wide (the kernel lays 8 subgroups over a workgroup of 256), and it has 48 KiB of workgroup memory.
fn tensor_cores(adapter: &wgpu::Adapter, info: &wgpu::AdapterInfo) -> bool {
    use wgpu::{CooperativeScalarType as S, Features as F};
    let needed = F::EXPERIMENTAL_COOPERATIVE_MATRIX | F::SHADER_F16 | F::SUBGROUP;
    if !adapter.features().contains(needed) {
        return false;
    }
    if (info.subgroup_min_size, info.subgroup_max_size) != (32, 32)
        || adapter.limits().max_compute_workgroup_storage_size < crate::backend::wgpu::codegen::COOP_WORKGROUP_BYTES
    {
        return false;
    }
    adapter
        .cooperative_matrix_properties()
        .iter()
        .any(|p| (p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type) == (16, 16, 16, S::F16, S::F32))
}

/// What the SPIR-V path may use on `adapter`: its SPIR-V version, and whether bf16 products can run on its
/// tensor cores; `None` where the path is closed (not Vulkan, or `LAZOR_SPIRV=0`).
fn spirv_caps(adapter: &wgpu::Adapter, mode: super::spirv::Mode) -> Option<((u8, u8), bool)> {
    #[cfg(any(windows, target_os = "linux", target_os = "android", target_os = "freebsd"))]
    {
        if mode == super::spirv::Mode::Off || !adapter.features().contains(wgpu::Features::PASSTHROUGH_SHADERS) {
            return None;
        }
        super::spirv::vulkan::caps(adapter).map(|c| (c.lang, c.bf16_coop))
    }
    #[cfg(not(any(windows, target_os = "linux", target_os = "android", target_os = "freebsd")))]
    {
        let _ = (adapter, mode);
        None
    }
}

/// Set when the driver refused a device with bf16 cooperative matrices: later devices of the process open without.
static BF16_REFUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Creates a device on `adapter` with its own limits and the features lazor uses where it offers them; with `bf16`,
/// also bf16 cooperative matrices, where the driver accepts them (the flag returned says whether it did).
async fn request(
    adapter: &wgpu::Adapter,
    info: &wgpu::AdapterInfo,
    limits: &wgpu::Limits,
    bf16: bool,
) -> Result<(wgpu::Device, wgpu::Queue, bool)> {
    // Subgroup operations where offered: reductions combine within a subgroup without workgroup memory. A
    // pipeline cache where offered: compiled kernels are kept on disk between processes.
    // Timestamp queries where offered: `Device::profile` times each kernel on the GPU, waiting for the times, which
    // a browser page cannot do.
    // Passthrough shaders where offered: the SPIR-V path (`spirv/`). 64-bit integers where offered: the random
    // generator's high-word multiply in one instruction.
    let mut wanted = wgpu::Features::SUBGROUP
        | wgpu::Features::SHADER_F16
        | wgpu::Features::PIPELINE_CACHE
        | wgpu::Features::PASSTHROUGH_SHADERS
        | wgpu::Features::SHADER_INT64;
    if cfg!(not(target_arch = "wasm32")) {
        wanted |= wgpu::Features::TIMESTAMP_QUERY;
    }
    let mut features = adapter.features() & wanted;
    let coop = tensor_cores(adapter, info);
    if coop {
        features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
    }
    let desc = wgpu::DeviceDescriptor {
        label: Some("lazor"),
        required_limits: limits.clone(),
        required_features: features,
        // SAFETY: the experimental feature is requested only where the adapter offers it, and used by one kernel
        // (kernels/matmul_coop.wgsl) whose every load and store is in range by construction.
        experimental_features: if coop {
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        },
        ..Default::default()
    };
    #[cfg(any(windows, target_os = "linux", target_os = "android", target_os = "freebsd"))]
    if bf16 && coop && !BF16_REFUSED.load(std::sync::atomic::Ordering::Relaxed) {
        // SAFETY: `bf16` comes from `spirv_caps`, which found the extension, both features and the shape.
        match unsafe { super::spirv::vulkan::open_bf16(adapter, &desc) } {
            Ok((device, queue)) => return Ok((device, queue, true)),
            Err(e) => {
                BF16_REFUSED.store(true, std::sync::atomic::Ordering::Relaxed);
                if env::debug_level() >= 1 {
                    eprintln!(
                        "lazor: {} refused a device with bf16 cooperative matrices ({e}); opening without",
                        info.name
                    );
                }
            }
        }
    }
    let _ = bf16;
    let (device, queue) = adapter
        .request_device(&desc)
        .await
        .map_err(|e| Error::DeviceCreation { adapter: info.name.clone(), message: e.to_string() })?;
    Ok((device, queue, false))
}

/// The adapters of `backends`; GL last, from its own instance: starting it makes EGL print to stderr, and it is the
/// weakest for compute. In the browser, the one adapter the page's WebGPU offers, if any.
async fn adapters(backends: wgpu::Backends) -> Vec<wgpu::Adapter> {
    let enumerate = |b: wgpu::Backends| super::keep::instance(b).enumerate_adapters(b);
    let primary = backends & !wgpu::Backends::GL;
    let mut adapters = if primary.is_empty() { Vec::new() } else { enumerate(primary).await };
    if adapters.is_empty() && backends.contains(wgpu::Backends::GL) {
        adapters = enumerate(wgpu::Backends::GL).await;
    }
    adapters
}

/// What to do when no adapter was found.
const NO_ADAPTER_HINT: &str = if cfg!(target_arch = "wasm32") {
    "this browser offers no WebGPU adapter (Chrome and Edge 113 or later have WebGPU; elsewhere it may need turning \
     on), or use Device::cpu()"
} else {
    "on Linux without a GPU install Mesa's software Vulkan driver (mesa-vulkan-drivers), or use Device::cpu()"
};

/// Waits for `future`: wgpu's futures on native targets are ready at once or need the device polled, which pollster
/// leaves to wgpu. In the browser nothing may wait; a future that is not ready at once there is a bug in lazor.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    #[cfg(not(target_arch = "wasm32"))]
    return pollster::block_on(future);
    #[cfg(target_arch = "wasm32")]
    {
        let mut future = std::pin::pin!(future);
        match future.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
            std::task::Poll::Ready(out) => out,
            std::task::Poll::Pending => panic!("lazor: internal error: a blocking wait in the browser"),
        }
    }
}

impl Gpu {
    /// Opens the best adapter allowed by the environment; with `hardware_only`, software rasterizers (lavapipe,
    /// llvmpipe, WARP) do not count.
    ///
    /// # Errors
    /// [`Error::NoAdapter`] when none matches, [`Error::DeviceCreation`] when the adapter refuses a device,
    /// [`Error::Env`] for a bad `LAZOR_BACKEND`.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(hardware_only: bool) -> Result<Gpu> {
        // One open at a time per process: see `keep::opening`.
        let _opening = super::keep::opening();
        block_on(Gpu::open_async(hardware_only))
    }

    /// [`Gpu::open`] as a future: what a browser page awaits (natively the lock `open` holds is the caller's).
    ///
    /// # Errors
    /// As [`Gpu::open`].
    pub async fn open_async(hardware_only: bool) -> Result<Gpu> {
        let backends = backends()?;
        let mut adapters = adapters(backends).await;
        let wanted = env::var("LAZOR_ADAPTER");
        let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
        if let Some(w) = &wanted {
            let w = w.to_lowercase();
            adapters.retain(|a| a.get_info().name.to_lowercase().contains(&w));
        }
        if hardware_only {
            adapters.retain(|a| rank(a.get_info().device_type) <= rank(wgpu::DeviceType::VirtualGpu));
        }
        adapters.sort_by_key(|a| rank(a.get_info().device_type));
        let Some(adapter) = adapters.into_iter().next() else {
            return Err(Error::NoAdapter(format!(
                "backends {backends:?}, LAZOR_ADAPTER={}, {}adapters seen: {names:?}; {NO_ADAPTER_HINT}",
                wanted.as_deref().unwrap_or("(unset)"),
                if hardware_only { "hardware only, " } else { "" }
            )));
        };
        let mut info = adapter.get_info();
        if info.name.is_empty() {
            // Browsers may keep the adapter's description to themselves (Chrome does by default).
            info.name = "WebGPU adapter".into();
        }
        let memory = device_memory(&adapter);
        // The adapter's own limits: wgpu's defaults cap storage bindings at 128 MiB, far below real GPUs.
        let limits = adapter.limits();
        // A device a dropped Device left behind, where there is one: see keep.rs for why devices are kept. Its
        // device-lost flag goes with it, since the callback that sets it was installed once, at creation.
        let spirv_mode = crate::env::spirv_mode();
        let spirv = spirv_caps(&adapter, spirv_mode);
        let bf16_wanted = spirv.is_some_and(|(_, bf16)| bf16);
        let (device, queue, lost, bf16_coop) = match super::keep::take(&info) {
            // A kept device was opened by `request` in this process, under the same environment.
            Some((device, queue, lost)) => {
                let bf16 = bf16_wanted && !BF16_REFUSED.load(std::sync::atomic::Ordering::Relaxed);
                let bf16 = bf16 && device.features().contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX);
                (device, queue, lost, bf16)
            }
            None => {
                let (device, queue, bf16) = request(&adapter, &info, &limits, bf16_wanted).await?;
                let lost = Arc::new(Mutex::new(None));
                let lost_cb = lost.clone();
                device.set_device_lost_callback(move |reason, message| {
                    *lock(&lost_cb) = Some(format!("{reason:?}: {message}"));
                });
                (device, queue, lost, bf16)
            }
        };
        let spirv =
            spirv.map(|(lang, _)| lang).filter(|_| device.features().contains(wgpu::Features::PASSTHROUGH_SHADERS));
        // Replaces the error handler of the device's last owner, if any.
        let uncaptured = Arc::new(Mutex::new(Vec::new()));
        let unc = uncaptured.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            lock(&unc).push(e.to_string());
        }));
        let subgroups = device.features().contains(wgpu::Features::SUBGROUP);
        let f16 = device.features().contains(wgpu::Features::SHADER_F16);
        let coop = device.features().contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX);
        let timestamps = device.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        let int64 = device.features().contains(wgpu::Features::SHADER_INT64);
        let checked = crate::env::shader_checks();
        let poisoned = Mutex::new(None);
        let tiles = tiles_for(&info, &limits);
        Ok(Gpu {
            device,
            queue,
            info,
            limits,
            subgroups,
            f16,
            coop,
            timestamps,
            spirv,
            bf16_coop,
            int64,
            spirv_mode,
            checked,
            memory,
            tiles,
            lost,
            uncaptured,
            poisoned,
        })
    }

    /// Whether the device was lost (leaves errors for [`Gpu::check_health`] to report).
    pub fn is_lost(&self) -> bool {
        lock(&self.lost).is_some()
    }

    /// Marks the device unusable: a submit of realizes already reported done failed with `error`.
    pub fn poison(&self, error: &Error) {
        let mut p = lock(&self.poisoned);
        p.get_or_insert_with(|| {
            format!(
                "a batch of held-back realizes failed when submitted, so results of this device may be wrong: {error}"
            )
        });
    }

    /// Fails if the device was lost, a batch failed at submit, or wgpu reported an error outside any scope.
    pub fn check_health(&self) -> Result<()> {
        if let Some(msg) = lock(&self.lost).clone() {
            return Err(Error::DeviceLost(msg));
        }
        if let Some(msg) = lock(&self.poisoned).clone() {
            return Err(Error::Validation(msg));
        }
        let mut unc = lock(&self.uncaptured);
        if !unc.is_empty() {
            return Err(Error::Validation(std::mem::take(&mut *unc).join("; ")));
        }
        Ok(())
    }

    /// Blocks until the queue is idle.
    ///
    /// # Errors
    /// [`Error::DeviceLost`] when the device is gone, or what [`Gpu::check_health`] finds.
    pub fn wait(&self) -> Result<()> {
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| Error::DeviceLost(e.to_string()))?;
        self.check_health()
    }

    /// Blocks until the queue is idle, leaving errors for [`Gpu::check_health`]; whether the wait succeeded.
    pub fn wait_idle(&self) -> bool {
        self.device.poll(wgpu::PollType::wait_indefinitely()).is_ok()
    }

    /// Lets wgpu make progress (run callbacks) without blocking.
    ///
    /// # Errors
    /// [`Error::DeviceLost`] when the device is gone, or what [`Gpu::check_health`] finds.
    pub fn poll(&self) -> Result<()> {
        self.device.poll(wgpu::PollType::Poll).map_err(|e| Error::DeviceLost(e.to_string()))?;
        self.check_health()
    }

    /// The largest buffer one binding can cover.
    pub fn max_binding_bytes(&self) -> u64 {
        self.limits.max_storage_buffer_binding_size.min(self.limits.max_buffer_size)
    }

    /// The fewest threads per row of a reduction: 32 where no subgroup is wider (a short row is then one
    /// subgroup's, folded without workgroup memory), else 64.
    pub fn row_team_min(&self) -> usize {
        if self.info.subgroup_max_size <= 32 {
            32
        } else {
            64
        }
    }

    /// The matmul blockings for this adapter ([`tiles_for`]).
    pub fn matmul_tiles(&self) -> crate::kernel::MatmulTiles {
        self.tiles
    }
}

/// The matmul blockings for an adapter: the tuned shapes that fit its workgroup memory, and enough large workgroups to
/// keep it busy. wgpu does not report compute units, so the threshold follows the kind of adapter: the tuned table's
/// (about two per compute unit of the 132 it was tuned on) for a discrete GPU, a quarter of that for an integrated one,
/// and two per host thread for a CPU adapter (lavapipe), which runs a workgroup per thread.
fn tiles_for(info: &wgpu::AdapterInfo, limits: &wgpu::Limits) -> crate::kernel::MatmulTiles {
    let tuned = crate::kernel::MatmulTiles::TUNED;
    let busy = match info.device_type {
        wgpu::DeviceType::DiscreteGpu | wgpu::DeviceType::Other => tuned.min_large_groups,
        wgpu::DeviceType::IntegratedGpu | wgpu::DeviceType::VirtualGpu => tuned.min_large_groups / 4,
        wgpu::DeviceType::Cpu => 2 * std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    crate::kernel::MatmulTiles::fitted(limits.max_compute_workgroup_storage_size, busy)
}

impl Drop for Gpu {
    /// Keeps the device for the next `Device` opened on this adapter (see keep.rs) once its work has finished, so
    /// the next owner finds nothing of this one's in flight; unless it was lost.
    fn drop(&mut self) {
        if !self.is_lost() && self.wait_idle() {
            super::keep::give_back(self.info.clone(), self.device.clone(), self.queue.clone(), self.lost.clone());
        }
    }
}

/// Error scopes around a block of wgpu calls: out of memory, validation and internal errors become [`Error`].
///
/// In the browser a scope's outcome arrives later, through the page's event loop, and the realize cannot wait for
/// it: there no scope is pushed, and errors reach the device's uncaptured-error handler, which the next call
/// (a realize, or the await of a read) reports ([`Gpu::check_health`]).
pub struct Scopes {
    guards: [Option<wgpu::ErrorScopeGuard>; 3],
}

impl Scopes {
    #[cfg(target_arch = "wasm32")]
    pub fn push(_device: &wgpu::Device) -> Scopes {
        Scopes { guards: [None, None, None] }
    }

    #[cfg(not(target_arch = "wasm32"))]
    pub fn push(device: &wgpu::Device) -> Scopes {
        Scopes {
            guards: [
                Some(device.push_error_scope(wgpu::ErrorFilter::OutOfMemory)),
                Some(device.push_error_scope(wgpu::ErrorFilter::Validation)),
                Some(device.push_error_scope(wgpu::ErrorFilter::Internal)),
            ],
        }
    }

    /// Pops the scopes (innermost first) and returns the first error, classified.
    pub fn pop(mut self) -> Result<()> {
        let mut first = None;
        for guard in self.guards.iter_mut().rev().filter_map(Option::take) {
            let err = block_on(guard.pop());
            if first.is_none() {
                first = err;
            }
        }
        match first {
            None => Ok(()),
            Some(wgpu::Error::OutOfMemory { .. }) => Err(Error::OutOfMemory("a buffer allocation failed".into())),
            Some(e) => Err(Error::Validation(e.to_string())),
        }
    }
}
