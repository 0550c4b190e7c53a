//! The backend boundary: what the realize orchestrator asks of a device. A backend runs a job of kernels over a
//! table of buffers and owns those buffers; it never reads the graph.

pub(crate) mod copy;
pub(crate) mod cpu;
pub(crate) mod free;
pub(crate) mod wgpu;

use crate::error::Result;
use crate::graph::BufferKey;
use crate::kernel::Kernel;
use crate::stats::Stats;

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
}

/// A device that runs kernel IR.
pub(crate) trait Backend: Send + Sync {
    /// A human-readable name of the device, e.g. "NVIDIA H200 (Vulkan)".
    fn name(&self) -> String;
    /// Storage buffers one kernel may bind, parameters included.
    fn max_bindings(&self) -> usize;
    /// The largest buffer one kernel may bind, in bytes.
    fn max_buffer_bytes(&self) -> u64;
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
    /// Starts any work the backend holds back (realizes batched while the GPU was busy).
    fn flush_all(&self) {}
    /// Sets how many submits the backend keeps in flight; realizes made while one is in flight are batched.
    fn set_queue_depth(&self, _depth: usize) {}
    /// How many submits the backend keeps in flight.
    fn queue_depth(&self) -> usize {
        0
    }
    /// Submits made, where the backend counts them itself (the wgpu backend submits held-back realizes from a
    /// thread of its own, outside any realize).
    fn submits(&self) -> Option<u64> {
        None
    }
    /// Whether a read-back has arrived.
    fn read_ready(&self, id: ReadId) -> bool;
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
    /// Turns subgroup operations in generated kernels on (where the device has them) or off.
    fn set_subgroups(&self, _on: bool) {}
    /// Whether generated kernels use subgroup operations.
    fn subgroups(&self) -> bool {
        false
    }
    /// Turns native f16 buffers on (where the device has them) or off (f16 packed two to a word).
    fn set_native_f16(&self, _on: bool) {}
    /// Whether f16 buffers are bound natively.
    fn native_f16(&self) -> bool {
        false
    }
    /// Turns the tensor-core (cooperative matrix) f16 matmul on (where the device has it) or off.
    fn set_tensor_cores(&self, _on: bool) {}
    /// Whether f16 matmuls run on tensor cores.
    fn tensor_cores(&self) -> bool {
        false
    }
    /// For downcasting to a concrete backend (interop accessors).
    fn as_any(&self) -> &dyn std::any::Any;
}
