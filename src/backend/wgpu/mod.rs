//! The wgpu backend: device setup, buffers, pipelines, running jobs (batched into submits) and reading results back.

mod batch;
mod bind_groups;
pub(crate) mod codegen;
mod disk_cache;
mod execute;
pub(crate) mod gpu;
mod handle;
mod keep;
mod params;
mod pipelines;
mod pool;
mod readback;
mod spirv;
mod timing;

/// For unit tests: what `open` opens, or `None` where no wgpu adapter opens and `LAZOR_TEST_BACKENDS` asks for
/// none (a machine without a GPU driver runs the CPU tests). Where it asks for one (CI does), failing to open one
/// panics: a GPU test never skips silently there.
#[cfg(test)]
pub(crate) fn open_for_test<T>(open: impl FnOnce() -> crate::error::Result<T>) -> Option<T> {
    let required = std::env::var("LAZOR_TEST_BACKENDS").is_ok_and(|v| v.split(',').any(|b| b.trim() != "cpu"));
    match open() {
        Ok(t) => Some(t),
        Err(e) if !required => {
            eprintln!("no wgpu adapter: {e}");
            None
        }
        Err(e) => panic!("LAZOR_TEST_BACKENDS asks for a wgpu adapter: {e}"),
    }
}

use super::{Backend, Done, Job, ReadId};
use crate::buffer::BufferKey;
use crate::error::{lock, Result};
use crate::profile::Stats;
use gpu::Gpu;
pub use handle::WgpuDevice;
pub(crate) use handle::WgpuOnly;
use slotmap::SlotMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The most storage buffers lazor binds in one kernel, whatever the adapter allows (NVIDIA allows thousands):
/// past this, a longer bind group costs more per dispatch than a split saves.
pub const MAX_BINDINGS: usize = 64;

/// A wgpu device and what lazor keeps for it: the part shared with the thread that submits held-back realizes,
/// and that thread.
pub(crate) struct WgpuBackend {
    shared: Arc<Shared>,
    /// The submit thread, joined on drop so everything the device holds is let go before the drop returns. None
    /// in the browser, which has no threads to spare: there every realize is submitted when it is made.
    #[cfg(not(target_arch = "wasm32"))]
    submitter: Option<std::thread::JoinHandle<()>>,
}

/// What the realizing threads and the submit thread share.
pub(crate) struct Shared {
    state: Mutex<WgpuState>,
    /// Whether kernels use subgroup operations: the device has them and `LAZOR_NO_SUBGROUPS` is unset.
    subgroups: AtomicBool,
    /// Whether f16 buffers are bound natively: the device has `SHADER_F16` and `LAZOR_NO_F16` is unset.
    f16: AtomicBool,
    /// Whether f16 matmuls run on cooperative matrices: the device has them and `LAZOR_NO_COOP` is unset.
    coop: AtomicBool,
    /// Whether bf16 matmuls run on cooperative matrices too, through the SPIR-V path: the device was opened with
    /// them (`Gpu::bf16_coop`) and the path is open.
    bf16_coop: AtomicBool,
    /// Whether kernels use 64-bit integers: the device has `SHADER_INT64`.
    int64: AtomicBool,
    /// Whether triangular products may run on cooperative matrices (`LAZOR_COOP_TRIANGLES`).
    coop_triangles: bool,
    /// Halves per element of the tensor-core kernel's slabs (`LAZOR_COOP_SLAB`).
    coop_slab: u32,
    /// Submits the submit thread keeps in flight (`LAZOR_QUEUE_DEPTH`, `Device::wgpu()?.set_queue_depth`).
    depth: AtomicUsize,
    /// Set when the backend is dropped: the submit thread ends.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    closed: AtomicBool,
    /// Last, so it is dropped after the buffers and pipelines in `state`: its device is kept for reuse.
    pub gpu: Gpu,
}

impl std::ops::Deref for WgpuBackend {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// The backend's mutable parts, behind one lock.
pub(super) struct WgpuState {
    pool: pool::Pool,
    bind_groups: bind_groups::BindGroups,
    pipelines: pipelines::Pipelines,
    params: params::Params,
    reads: SlotMap<ReadId, readback::PendingRead>,
    /// Realizes recorded and not yet submitted.
    batch: Option<batch::Open>,
    in_flight: batch::InFlight,
    /// Dispatches recorded so far: the pool stamps each buffer with the last one that used it.
    recorded: u64,
    /// Whether a kernel fell back from the SPIR-V path to WGSL (said once under `LAZOR_DEBUG`).
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    spirv_refused: bool,
}

impl WgpuBackend {
    /// Opens the best adapter allowed by the environment (`hardware_only`: no software rasterizers).
    ///
    /// # Errors
    /// As [`Gpu::open`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open(hardware_only: bool) -> Result<WgpuBackend> {
        WgpuBackend::on(Gpu::open(hardware_only)?)
    }

    /// [`WgpuBackend::open`] as a future, for the browser.
    ///
    /// # Errors
    /// As [`Gpu::open`].
    #[cfg(target_arch = "wasm32")]
    pub async fn open_async(hardware_only: bool) -> Result<WgpuBackend> {
        WgpuBackend::on(Gpu::open_async(hardware_only).await?)
    }

    /// The backend on an open device.
    fn on(gpu: Gpu) -> Result<WgpuBackend> {
        let subgroups = AtomicBool::new(gpu.subgroups && !crate::env::no_subgroups());
        let f16 = AtomicBool::new(gpu.f16 && !crate::env::no_f16());
        let coop = AtomicBool::new(gpu.coop && !crate::env::no_coop());
        let bf16_coop = AtomicBool::new(gpu.bf16_coop && gpu.spirv.is_some());
        let int64 = AtomicBool::new(gpu.int64);
        let depth = AtomicUsize::new(crate::env::queue_depth().unwrap_or(batch::DEFAULT_DEPTH));
        let pool = pool::Pool::new(crate::backend::free::budget(gpu.memory));
        let mut pipelines = pipelines::Pipelines::default();
        pipelines.disk = disk_cache::DiskCache::open(&gpu.device, &gpu.info, crate::env::cache_dir());
        let state = WgpuState {
            pool,
            bind_groups: Default::default(),
            pipelines,
            params: Default::default(),
            reads: SlotMap::with_key(),
            batch: None,
            in_flight: Default::default(),
            recorded: 0,
            spirv_refused: false,
        };
        let closed = AtomicBool::new(false);
        let shared = Arc::new(Shared {
            gpu,
            state: Mutex::new(state),
            subgroups,
            f16,
            coop,
            bf16_coop,
            int64,
            coop_triangles: crate::env::coop_triangles(),
            coop_slab: crate::env::coop_slab(),
            depth,
            closed,
        });
        WgpuBackend::with_submitter(shared)
    }

    /// The backend, its submit thread started.
    #[cfg(not(target_arch = "wasm32"))]
    fn with_submitter(shared: Arc<Shared>) -> Result<WgpuBackend> {
        let for_thread = shared.clone();
        let submitter = std::thread::Builder::new()
            .name("lazor-submit".into())
            .spawn(move || submit_thread(&for_thread))
            .map_err(|e| crate::error::Error::DeviceCreation {
                adapter: shared.gpu.info.name.clone(),
                message: format!("starting the submit thread: {e}"),
            })?;
        Ok(WgpuBackend { shared, submitter: Some(submitter) })
    }

    /// The backend; in the browser without a submit thread.
    #[cfg(target_arch = "wasm32")]
    fn with_submitter(shared: Arc<Shared>) -> Result<WgpuBackend> {
        Ok(WgpuBackend { shared })
    }

    /// What codegen may use on this device now.
    pub fn target(&self) -> crate::backend::wgpu::codegen::Target {
        crate::backend::wgpu::codegen::Target {
            subgroups: self.subgroups.load(Ordering::Relaxed),
            f16: self.f16.load(Ordering::Relaxed),
            coop: self.coop.load(Ordering::Relaxed),
            bf16_coop: self.bf16_coop.load(Ordering::Relaxed) && self.coop.load(Ordering::Relaxed),
            int64: self.int64.load(Ordering::Relaxed),
            coop_triangles: self.coop_triangles,
            coop_slab: self.coop_slab,
        }
    }

    /// The file the driver's pipeline cache is kept in, where there is one.
    pub fn pipeline_cache_file(&self) -> Option<std::path::PathBuf> {
        self.state().pipelines.disk.as_ref().map(|d| d.path().to_path_buf())
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, WgpuState> {
        lock(&self.state)
    }

    /// Submits the held-back realizes, if any.
    fn flush(&self, st: &mut WgpuState) {
        if let Some(open) = st.batch.take() {
            // A failure poisons the device (see `submit`), so the next call reports it.
            let _ = self.submit(st, open);
        }
    }

    /// Ends and submits a batch under error scopes of its own. wgpu reports a bad command at `finish`, after the
    /// realizes recorded in the batch were reported done, so a failure poisons the device: every later call fails.
    fn submit(&self, st: &mut WgpuState, open: batch::Open) -> Result<()> {
        let realizes = open.realizes;
        let scopes = gpu::Scopes::push(&self.gpu.device);
        st.in_flight.submit(&self.gpu.queue, open.finish(), realizes);
        scopes.pop().inspect_err(|e| self.gpu.poison(e))
    }

    /// Submits the held batch if the queue has room for it, by what wgpu last reported ([`batch::submit_now`]);
    /// whether it did (with nothing held, there is nothing to submit and this says so).
    fn flush_if_room(&self, st: &mut WgpuState) -> bool {
        let held = st.batch.as_ref().map_or(0, |b| b.realizes);
        let room = held > 0 && st.in_flight.room(self.depth.load(Ordering::Relaxed), held);
        if room {
            self.flush(st);
        }
        room
    }
}

impl WgpuBackend {
    /// Wakes the submit thread: something was held back, or the depth changed.
    fn wake(&self) {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(t) = &self.submitter {
            t.thread().unpark();
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Drop for WgpuBackend {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
        if let Some(t) = self.submitter.take() {
            t.thread().unpark();
            // It leaves at its next check of `closed` (a poll, a short sleep); a panic there (wgpu panics on some
            // device losses) is not this drop's to report.
            let _ = t.join();
        }
    }
}

/// How long the submit thread sleeps between polls while a submit it waits for runs.
#[cfg(not(target_arch = "wasm32"))]
const POLL_PAUSE: std::time::Duration = std::time::Duration::from_micros(20);

/// The submit thread: woken when a realize is held back, it polls until the oldest submit in flight finishes and
/// submits the held-back realizes once the queue has room, so they never wait for the program's next call. (A
/// batch that grows large enough to queue behind the running submit is submitted by the realize that makes it so.)
/// It holds `sh` until it ends: the backend's drop sets `closed` and joins it before letting go of its own.
#[cfg(not(target_arch = "wasm32"))]
fn submit_thread(sh: &Shared) {
    loop {
        std::thread::park();
        loop {
            if sh.closed.load(Ordering::Acquire) {
                return;
            }
            {
                let mut st = sh.state();
                if st.batch.is_none() {
                    break;
                }
                // A failure poisons the device, so the next call reports it.
                if sh.flush_if_room(&mut st) {
                    break;
                }
                // Nothing in flight and no room: depth 0, held back until a read, synchronize or flush.
                if st.in_flight.count() == 0 {
                    break;
                }
            }
            if sh.gpu.is_lost() {
                // The device is lost: every later call reports it, and nothing held back can run.
                return;
            }
            // Polled, not waited for. With a blocking wait for the oldest submit, `bench clock` counted some batches of
            // chain3 realizes far above the median, more with a depth of 1 than of 2 and none with 0 (no submit thread
            // waiting; figures: docs/notes/source-measurements.md, `src/backend/wgpu/mod.rs`). The thread now polls,
            // which returns at once, and sleeps for a moment between polls, which bounds how late it sees the queue run
            // dry. (No timed wait either: in wgpu-core 30 a wait that times out while another thread polls can fail an
            // internal assertion, gfx-rs/wgpu#9958.)
            if sh.gpu.device.poll(wgpu::PollType::Poll).is_err() {
                // wgpu 30's `Poll` reports no error of its own (device losses surface through `is_lost` above); if a
                // later wgpu does, submit what is held now, still in order, rather than spin.
                let mut st = sh.state();
                sh.flush(&mut st);
                break;
            }
            std::thread::sleep(POLL_PAUSE);
        }
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

    fn matmul_tiles(&self) -> crate::kernel::MatmulTiles {
        self.gpu.matmul_tiles()
    }

    fn row_team_min(&self) -> usize {
        self.gpu.row_team_min()
    }

    fn workgroup_bytes(&self) -> u32 {
        self.gpu.limits.max_compute_workgroup_storage_size
    }

    fn half_operands(&self) -> bool {
        let target = self.target();
        target.coop && target.f16
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
        self.flush_all();
        self.gpu.wait()
    }

    fn poll(&self) -> Result<()> {
        self.flush_if_room(&mut self.state());
        self.gpu.poll()
    }

    fn flush_all(&self) {
        let mut st = self.state();
        self.flush(&mut st);
    }

    fn submits(&self) -> Option<u64> {
        Some(self.state().in_flight.made())
    }

    fn read_ready(&self, id: ReadId) -> bool {
        self.state().reads.get(id).is_none_or(|p| p.ready())
    }

    fn wake_when_read(&self, id: ReadId, waker: &std::task::Waker) {
        match self.state().reads.get(id) {
            // In the browser the map callback wakes the task; natively the future polls the device again.
            Some(p) if cfg!(target_arch = "wasm32") => p.wake_when_ready(waker),
            _ => waker.wake_by_ref(),
        }
    }

    fn when_idle(&self) -> Option<crate::backend::signal::Signal<()>> {
        self.flush_all();
        let idle = crate::backend::signal::Signal::default();
        let set = idle.clone();
        self.gpu.queue.on_submitted_work_done(move || set.set(()));
        Some(idle)
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
        // Free buffers a held or running batch still uses are only let go once it has run.
        self.flush_all();
        // Errors are left for the next call to report.
        self.gpu.wait_idle();
        let mut st = self.state();
        let bytes = st.pool.trim();
        // Cached bind groups hold buffers: let go of them now, not at the next realize.
        let dropped = st.pool.dropped;
        st.bind_groups.sync(dropped);
        bytes
    }
}

impl WgpuOnly for WgpuBackend {
    fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    fn pipeline_cache_file(&self) -> Option<std::path::PathBuf> {
        WgpuBackend::pipeline_cache_file(self)
    }

    fn set_queue_depth(&self, depth: usize) {
        self.depth.store(depth, Ordering::Relaxed);
        // A deeper queue may have room for what is held back now.
        self.wake();
    }

    fn queue_depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
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

    fn set_int64(&self, on: bool) {
        self.int64.store(on && self.gpu.int64, Ordering::Relaxed);
    }

    fn target(&self) -> codegen::Target {
        WgpuBackend::target(self)
    }
}
