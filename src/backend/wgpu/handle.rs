//! The wgpu side of a `Device`: what only a wgpu device has (its wgpu device and queue, how many submits it keeps
//! in flight, the kernel features it may use, its pipeline cache on disk), reached through `Device::wgpu()`, which
//! is `None` on the CPU backend. Nothing here is a silent no-op on another backend: it cannot be reached there.

use crate::backend::Backends;

/// What only the wgpu backend has: the device and queue, a queue depth, subgroups, native f16, tensor cores, a
/// pipeline cache on disk. Users reach it through [`WgpuDevice`], which only a wgpu device hands out.
pub(crate) trait WgpuOnly: Send + Sync {
    /// The open wgpu device and what lazor knows about it.
    fn gpu(&self) -> &super::gpu::Gpu;
    /// Sets how many submits are kept in flight; realizes made while one is in flight are batched.
    fn set_queue_depth(&self, depth: usize);
    /// How many submits are kept in flight.
    fn queue_depth(&self) -> usize;
    /// Turns subgroup operations in generated kernels on (where the device has them) or off.
    fn set_subgroups(&self, on: bool);
    /// Whether generated kernels use subgroup operations.
    fn subgroups(&self) -> bool;
    /// Binds f16 buffers natively (where the device has them) or packed two to a word.
    fn set_native_f16(&self, on: bool);
    /// Whether f16 buffers are bound natively.
    fn native_f16(&self) -> bool;
    /// Turns the tensor-core (cooperative matrix) f16 matmul on (where the device has it) or off.
    fn set_tensor_cores(&self, on: bool);
    /// Whether f16 matmuls run on tensor cores.
    fn tensor_cores(&self) -> bool;
    /// The file of the driver's pipeline cache, where there is one.
    fn pipeline_cache_file(&self) -> Option<std::path::PathBuf>;
    /// Turns 64-bit integers in generated kernels on (where the device has them) or off.
    fn set_int64(&self, on: bool);
    /// What generated code may use on this device now.
    fn target(&self) -> super::codegen::Target;
}

/// The wgpu side of a [`Device`](crate::Device), from [`Device::wgpu`](crate::Device::wgpu): what only a wgpu device
/// has. It borrows the device.
///
/// # Examples
/// ```no_run
/// let dev = lazor::Device::default();
/// if let Some(gpu) = dev.wgpu() {
///     gpu.set_queue_depth(4);
///     println!("tensor cores: {}", gpu.tensor_cores());
/// }
/// ```
#[derive(Clone, Copy)]
pub struct WgpuDevice<'a> {
    backends: &'a Backends,
    wgpu: &'a dyn WgpuOnly,
}

impl<'a> WgpuDevice<'a> {
    /// The wgpu side of `backends`, if it has one.
    pub(crate) fn of(backends: &'a Backends) -> Option<WgpuDevice<'a>> {
        Some(WgpuDevice { backends, wgpu: backends.wgpu()? })
    }

    /// The underlying wgpu device, for interop (custom kernels, measuring the device's own copy rate) next to
    /// lazor's work. lazor's tensors and buffers stay private. Do not keep a clone past the `Device`'s drop: the
    /// wgpu device then serves the next `Device` opened on the adapter.
    pub fn device(&self) -> &'a wgpu::Device {
        &self.wgpu.gpu().device
    }

    /// The underlying wgpu queue: what lazor submits to, in order with anything submitted here. Getting it submits
    /// the realizes lazor holds back (see [`Device::flush`](crate::Device::flush)), so work submitted through it
    /// runs after every realize made before this call; call `flush` again before submitting work that must follow
    /// later realizes.
    pub fn queue(&self) -> &'a wgpu::Queue {
        self.backends.flush_all();
        &self.wgpu.gpu().queue
    }

    /// Sets how many submits the device's submit thread keeps in flight (the default is 2, or
    /// `LAZOR_QUEUE_DEPTH`); a realize onto an idle GPU is submitted at once at any depth but 0. With more than one,
    /// a held batch is queued behind a running submit once it holds twice as many realizes. 0 holds every realize
    /// back until a read, `synchronize`, `flush`, or a batch of 64 realizes: the fewest submits, for programs that
    /// realize many small results and then read them.
    pub fn set_queue_depth(&self, depth: usize) {
        self.wgpu.set_queue_depth(depth);
    }

    /// How many submits the submit thread keeps in flight.
    pub fn queue_depth(&self) -> usize {
        self.wgpu.queue_depth()
    }

    /// Lets generated kernels use subgroup operations where the device has them (the default, unless
    /// `LAZOR_NO_SUBGROUPS=1`), or keeps them on the workgroup-memory path. Both give the same answers to within
    /// rounding; tests run both.
    pub fn set_subgroups(&self, on: bool) {
        self.wgpu.set_subgroups(on);
    }

    /// Whether generated kernels use subgroup operations.
    pub fn subgroups(&self) -> bool {
        self.wgpu.subgroups()
    }

    /// Binds f16 buffers natively (`wgpu::Features::SHADER_F16`, where the adapter has it) or, with `false`, packed
    /// two to a 32-bit word as on adapters without it (also `LAZOR_NO_F16=1`). Both give the same bits.
    pub fn set_native_f16(&self, on: bool) {
        self.wgpu.set_native_f16(on);
    }

    /// Whether f16 buffers are bound natively.
    pub fn native_f16(&self) -> bool {
        self.wgpu.native_f16()
    }

    /// Runs f16 x f16 matmuls on the tensor cores, through `wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX`, where
    /// the adapter offers a 16 x 16 x 16 f16 shape accumulating in f32 (the default, unless `LAZOR_NO_COOP=1`), or,
    /// with `false`, on the tiled kernel every adapter runs. Both accumulate in f32 and round once; they differ only
    /// in the order of the sums.
    pub fn set_tensor_cores(&self, on: bool) {
        self.wgpu.set_tensor_cores(on);
    }

    /// Whether f16 matmuls run on the tensor cores (false where the adapter has none).
    pub fn tensor_cores(&self) -> bool {
        self.wgpu.tensor_cores()
    }

    /// Whether bf16 matmuls run on the tensor cores too: the device was opened with bf16 cooperative matrices
    /// (Vulkan's `VK_KHR_shader_bfloat16`), the SPIR-V path is open (`LAZOR_SPIRV` is not `0`) and
    /// [`tensor_cores`](Self::tensor_cores) is on.
    pub fn bf16_tensor_cores(&self) -> bool {
        self.wgpu.target().bf16_coop
    }

    /// Whether kernels can be handed to the driver as SPIR-V lazor writes (a Vulkan device, `LAZOR_SPIRV` not
    /// `0`): bf16 products on tensor cores and exactly rounded random numbers go that way.
    pub fn spirv(&self) -> bool {
        self.wgpu.gpu().spirv.is_some()
    }

    /// Lets generated kernels use 64-bit integers (where the device has `SHADER_INT64`) or not: the random
    /// generator's high-word multiply is one instruction with them and four 16-bit products without, the same bits
    /// either way.
    pub fn set_int64(&self, on: bool) {
        self.wgpu.set_int64(on);
    }

    /// Whether generated kernels use 64-bit integers.
    pub fn int64(&self) -> bool {
        self.wgpu.target().int64
    }

    /// The file where this device keeps compiled pipelines between processes (`LAZOR_CACHE_DIR`), or `None` where
    /// it keeps none: an adapter without `wgpu::Features::PIPELINE_CACHE` (only Vulkan has it), or
    /// `LAZOR_CACHE_DIR` set empty.
    pub fn pipeline_cache_file(&self) -> Option<std::path::PathBuf> {
        self.wgpu.pipeline_cache_file()
    }
}
