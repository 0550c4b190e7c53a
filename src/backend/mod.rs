//! The backend boundary: what the realize orchestrator asks of a device. A backend runs a job of kernels over a
//! table of buffers and owns those buffers; it never reads the graph.

pub(crate) mod copy;
pub(crate) mod cpu;
pub(crate) mod free;
pub(crate) mod par;
pub(crate) mod signal;
pub(crate) mod wgpu;

use crate::buffer::BufferKey;
use crate::error::Result;
use crate::kernel::Kernel;
use crate::profile::Stats;

slotmap::new_key_type! {
    /// A read-back a backend has started and not yet handed over.
    pub(crate) struct ReadId;
}

/// Where one buffer of a job comes from.
pub(crate) enum Data<'a> {
    /// A buffer the backend already holds.
    Existing(BufferKey),
    /// Host words to upload before the first kernel.
    Upload(&'a [u32]),
    /// A new buffer, written by a kernel of the job.
    Fresh,
    /// Written by a kernel of the job into the buffer of job buffer `.0` (an existing buffer the kernel reads and
    /// that dies with it, see `Kernel::aliases`); the backend then owns that buffer as this one's, and the graph
    /// forgets it as the input's. A backend may write a new buffer instead and release the input's.
    Alias(usize),
}

/// One buffer of a job.
pub(crate) struct JobBuffer<'a> {
    /// Bytes of the value.
    pub bytes: u64,
    pub data: Data<'a>,
}

/// Everything one realize asks of a backend, to run as one unit (recorded into one batch on a GPU).
pub(crate) struct Job<'a> {
    /// The buffer table; kernels name buffers by index into it.
    pub buffers: Vec<JobBuffer<'a>>,
    /// Kernels in order.
    pub kernels: &'a [Kernel],
    /// [`crate::schedule::Plan::family`]: jobs of one family have kernels of the same structure.
    pub family: Option<u64>,
    /// For each kernel, the buffers whose last reader it is: free once it has run.
    pub frees: &'a [Vec<usize>],
    /// Buffers that outlive the job (uploads and outputs): their keys come back in [`Done::kept`].
    pub keep: &'a [usize],
    /// Buffers to read back once the kernels have run.
    pub reads: &'a [usize],
    /// Time each kernel (`Device::profile`): GPU timestamps where the adapter has them, host time on the CPU.
    pub profile: bool,
}

/// What a job left behind.
pub(crate) struct Done {
    /// The keys of `Job::keep`, in its order.
    pub kept: Vec<BufferKey>,
    /// The read-backs of `Job::reads`, in its order.
    pub reads: Vec<ReadId>,
    /// Each kernel's time when the job was profiled (`None` for a kernel the backend could not time); empty
    /// otherwise.
    pub times: Vec<Option<std::time::Duration>>,
    /// The kernels that ran from SPIR-V lazor wrote (the Vulkan backend's SPIR-V path), by index into the job's
    /// kernels, when the job was profiled; empty otherwise.
    pub spirv: Vec<usize>,
    /// The product kernels that ran on tensor cores (cooperative matrices), likewise.
    pub cores: Vec<usize>,
}

/// What every backend does: run kernel IR over its buffers, read them back, keep a pool. What only the wgpu
/// backend has (a queue depth, subgroups, native f16, tensor cores, a pipeline cache) is reached through
/// [`Backends::wgpu`], so no method here does nothing on some backend.
pub(crate) trait Backend: Send + Sync {
    /// A human-readable name of the device, e.g. "NVIDIA H200 (Vulkan)".
    fn name(&self) -> String;
    /// Storage buffers one kernel may bind, parameters included.
    fn max_bindings(&self) -> usize;
    /// The largest buffer one kernel may bind, in bytes.
    fn max_buffer_bytes(&self) -> u64;
    /// The blockings tiled matmul kernels choose from on this device.
    fn matmul_tiles(&self) -> crate::kernel::MatmulTiles;
    /// The fewest threads that fold one row of a reduction: no fewer than the widest subgroup, so that a short
    /// row is one subgroup's where subgroups are 32 wide (the scheduler's `Options::row_team_min`).
    fn row_team_min(&self) -> usize {
        64
    }
    /// Bytes of workgroup memory one dispatch may declare (the scheduler's `Options::workgroup_bytes`); a
    /// backend that runs kernels one by one has no such limit.
    fn workgroup_bytes(&self) -> u32 {
        u32::MAX
    }
    /// Whether half products run on tensor cores, fetching their operands 16 bytes at a time (the scheduler's
    /// `Options::half_operands`).
    fn half_operands(&self) -> bool {
        false
    }
    /// Fails if the device was lost or reported an error since the last call.
    fn check_health(&self) -> Result<()>;
    /// Runs `job`. On error nothing it created survives, and the caller's values are unchanged.
    fn run(&self, job: Job<'_>, stats: &mut Stats, debug: u32) -> Result<Done>;
    /// Gives a buffer back (its tensor was freed).
    fn release(&self, key: BufferKey, stats: &mut Stats);
    /// Waits until everything submitted has finished.
    fn synchronize(&self) -> Result<()>;
    /// Lets the device make progress without blocking.
    fn poll(&self) -> Result<()>;
    /// Starts any work the backend holds back (realizes batched while the GPU was busy; the CPU backend holds
    /// none).
    fn flush_all(&self);
    /// Submits made, where the backend counts them itself (the wgpu backend submits held-back realizes from a
    /// thread of its own, outside any realize); `None` where every submit is a realize's, counted in `Stats`.
    fn submits(&self) -> Option<u64>;
    /// Whether a read-back has arrived.
    fn read_ready(&self, id: ReadId) -> bool;
    /// Has `waker` woken when the read-back may have arrived. By default at once: the awaiting future then polls
    /// the backend again, which is what runs a native GPU's callbacks. A browser's WebGPU runs them from the page's
    /// event loop, which a task that keeps waking itself would starve: there the read's own callback wakes it.
    fn wake_when_read(&self, _id: ReadId, waker: &std::task::Waker) {
        waker.wake_by_ref();
    }
    /// A signal set once everything submitted so far has run, or `None` where nothing is left running (the CPU
    /// backend runs each job when it is made). Flushes what is held back first.
    fn when_idle(&self) -> Option<signal::Signal<()>> {
        None
    }
    /// Lends the words of a read-back (the buffer's bytes, whole words) to `f`, waiting for them if needed; the
    /// read is finished afterwards.
    fn read_with(&self, id: ReadId, f: &mut dyn FnMut(&[u32])) -> Result<()>;
    /// The words of a read-back, copied out (in parallel when large).
    fn take_read(&self, id: ReadId) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        self.read_with(id, &mut |words| out = copy::to_vec(words))?;
        Ok(out)
    }
    /// Forgets a read-back nobody will take (its future was dropped or failed).
    fn discard_read(&self, id: ReadId);
    /// Bytes of free buffers kept for reuse.
    fn pool_bytes(&self) -> u64;
    /// The most bytes of free buffers kept for reuse.
    fn pool_budget(&self) -> u64;
    /// Changes the budget, dropping the least recently freed buffers that no longer fit.
    fn set_pool_budget(&self, bytes: u64);
    /// Drops every free buffer; returns the bytes given back.
    fn trim(&self) -> u64;
}

/// The backend of a device: what every backend does (by `Deref` to [`Backend`]) and, on wgpu, what only it has.
/// Both are trait objects: a device holds no concrete backend type, so `Send`/`Sync` of a `Device` (and of
/// everything holding one) is settled by the traits' bounds rather than by walking wgpu's types.
pub(crate) struct Backends {
    common: std::sync::Arc<dyn Backend>,
    wgpu: Option<std::sync::Arc<dyn wgpu::WgpuOnly>>,
}

impl Backends {
    /// The CPU backend.
    pub fn cpu(backend: cpu::CpuBackend) -> Backends {
        Backends { common: std::sync::Arc::new(backend), wgpu: None }
    }

    /// A wgpu backend.
    pub fn wgpu_backend(backend: wgpu::WgpuBackend) -> Backends {
        let shared = std::sync::Arc::new(backend);
        Backends { common: shared.clone(), wgpu: Some(shared) }
    }

    /// What only the wgpu backend has; `None` on the CPU backend.
    pub fn wgpu(&self) -> Option<&dyn wgpu::WgpuOnly> {
        self.wgpu.as_deref()
    }

    /// Whether this is the CPU backend.
    pub fn is_cpu(&self) -> bool {
        self.wgpu.is_none()
    }
}

impl std::ops::Deref for Backends {
    type Target = dyn Backend;

    fn deref(&self) -> &(dyn Backend + 'static) {
        &*self.common
    }
}
