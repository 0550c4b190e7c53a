//! The wgpu backend: device setup, buffers, pipelines, running a job in one submit and reading results back.

mod bind_groups;
mod disk_cache;
mod execute;
pub(crate) mod gpu;
mod keep;
mod params;
mod pipelines;
mod pool;
mod readback;

use super::{Backend, Done, Job, ReadId};
use crate::error::Result;
use crate::graph::BufferKey;
use crate::stats::Stats;
use gpu::Gpu;
use slotmap::SlotMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The most storage buffers lazor binds in one kernel, whatever the adapter allows (NVIDIA allows thousands):
/// past this, a longer bind group costs more per dispatch than a split saves.
pub const MAX_BINDINGS: usize = 64;

/// A wgpu device and what lazor keeps for it.
pub(crate) struct WgpuBackend {
    state: Mutex<State>,
    /// Whether kernels use subgroup operations: the device has them and `LAZOR_NO_SUBGROUPS` is unset.
    subgroups: AtomicBool,
    /// Whether f16 buffers are bound natively: the device has `SHADER_F16` and `LAZOR_NO_F16` is unset.
    f16: AtomicBool,
    /// Whether f16 matmuls run on cooperative matrices: the device has them and `LAZOR_NO_COOP` is unset.
    coop: AtomicBool,
    /// Last, so it is dropped after the buffers and pipelines in `state`: its device is kept for reuse.
    pub gpu: Gpu,
}

/// The backend's mutable parts, behind one lock.
struct State {
    pool: pool::Pool,
    bind_groups: bind_groups::BindGroups,
    pipelines: pipelines::Pipelines,
    params: params::Params,
    reads: SlotMap<ReadId, readback::Pending>,
}

impl WgpuBackend {
    /// Opens the best adapter allowed by the environment (`hardware_only`: no software rasterizers).
    ///
    /// # Errors
    /// As [`Gpu::open`].
    pub fn open(hardware_only: bool) -> Result<WgpuBackend> {
        let gpu = Gpu::open(hardware_only)?;
        let subgroups = AtomicBool::new(gpu.subgroups && !crate::env::no_subgroups());
        let f16 = AtomicBool::new(gpu.f16 && !crate::env::no_f16());
        let coop = AtomicBool::new(gpu.coop && !crate::env::no_coop());
        let pool = pool::Pool::new(crate::backend::free::budget(gpu.memory));
        let mut pipelines = pipelines::Pipelines::default();
        pipelines.disk = disk_cache::DiskCache::open(&gpu.device, &gpu.info, crate::env::cache_dir());
        let state = State {
            pool,
            bind_groups: Default::default(),
            pipelines,
            params: Default::default(),
            reads: SlotMap::with_key(),
        };
        Ok(WgpuBackend { gpu, state: Mutex::new(state), subgroups, f16, coop })
    }

    /// What codegen may use on this device now.
    pub fn target(&self) -> crate::codegen::Target {
        crate::codegen::Target {
            subgroups: self.subgroups.load(Ordering::Relaxed),
            f16: self.f16.load(Ordering::Relaxed),
            coop: self.coop.load(Ordering::Relaxed),
        }
    }

    /// The file the driver's pipeline cache is kept in, where there is one.
    pub fn pipeline_cache_file(&self) -> Option<std::path::PathBuf> {
        self.state().pipelines.disk.as_ref().map(|d| d.path().to_path_buf())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Backend for WgpuBackend {
    fn name(&self) -> String {
        format!("{} ({:?})", self.gpu.info.name, self.gpu.info.backend)
    }

    fn max_bindings(&self) -> usize {
        (self.gpu.limits.max_storage_buffers_per_shader_stage as usize).min(MAX_BINDINGS)
    }

    fn max_buffer_bytes(&self) -> u64 {
        self.gpu.max_binding_bytes()
    }

    fn check_health(&self) -> Result<()> {
        self.gpu.check_health()
    }

    fn run(&self, job: Job<'_>, stats: &mut Stats, debug: u32) -> Result<Done> {
        self.execute(job, stats, debug)
    }

    fn release(&self, key: BufferKey, stats: &mut Stats) {
        self.state().pool.release(key, stats);
    }

    fn synchronize(&self) -> Result<()> {
        self.gpu.wait()
    }

    fn poll(&self) -> Result<()> {
        self.gpu.poll()
    }

    fn read_ready(&self, id: ReadId) -> bool {
        self.state().reads.get(id).is_none_or(|p| p.ready())
    }

    fn read_with(&self, id: ReadId, f: &mut dyn FnMut(&[u32])) -> Result<()> {
        self.finish_read(id, f)
    }

    fn discard_read(&self, id: ReadId) {
        // Dropping the staging buffer cancels its mapping.
        self.state().reads.remove(id);
    }

    fn pool_bytes(&self) -> u64 {
        self.state().pool.free_bytes()
    }

    fn pool_budget(&self) -> u64 {
        self.state().pool.budget()
    }

    fn set_pool_budget(&self, bytes: u64) {
        let mut st = self.state();
        st.pool.set_budget(bytes);
        let dropped = st.pool.dropped;
        st.bind_groups.sync(dropped);
    }

    fn trim(&self) -> u64 {
        let mut st = self.state();
        let bytes = st.pool.trim();
        // Cached bind groups hold buffers: let go of them now, not at the next realize.
        let dropped = st.pool.dropped;
        st.bind_groups.sync(dropped);
        bytes
    }

    fn set_subgroups(&self, on: bool) {
        self.subgroups.store(on && self.gpu.subgroups, Ordering::Relaxed);
    }

    fn subgroups(&self) -> bool {
        self.subgroups.load(Ordering::Relaxed)
    }

    fn set_native_f16(&self, on: bool) {
        self.f16.store(on && self.gpu.f16, Ordering::Relaxed);
    }

    fn native_f16(&self) -> bool {
        self.f16.load(Ordering::Relaxed)
    }

    fn set_tensor_cores(&self, on: bool) {
        self.coop.store(on && self.gpu.coop, Ordering::Relaxed);
    }

    fn tensor_cores(&self) -> bool {
        self.coop.load(Ordering::Relaxed)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
