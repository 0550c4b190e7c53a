//! The CPU backend: buffers are `Vec<f32>`s of words in host memory (other element types in their bits), kernels
//! of the same IR run on rayon's threads.

mod batch;
mod cat;
mod eval;
mod folds;
mod map;
mod math;
mod matmul;
mod regs;
mod runs;
mod scatter;
mod simd;

use super::free::{self, FreeList};
use super::{Backend, Data, Done, Job, ReadId};
use crate::buffer::BufferKey;
use crate::error::{Error, Result};
use crate::kernel::Kind;
use crate::profile::Stats;
use slotmap::SlotMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Storage buffers a CPU kernel may bind: there is no hardware limit, but kernels binding many buffers gain nothing.
const MAX_BINDINGS: usize = 64;

/// Buffers, free buffers, and read-backs of one CPU device. A buffer never changes once a kernel has written it,
/// so a read-back shares it (zero-copy) instead of copying it.
struct CpuState {
    buffers: SlotMap<BufferKey, Arc<Vec<f32>>>,
    /// Free buffers: a fresh allocation costs page faults and zeroing, a reused one neither.
    free: FreeList<Vec<f32>>,
    reads: SlotMap<ReadId, Arc<Vec<f32>>>,
}

/// A device on the host's cores.
pub(crate) struct CpuBackend {
    state: Mutex<CpuState>,
}

/// A zeroed buffer of `len` elements, or `Error::OutOfMemory` (never an abort). Zeroed by the allocator, so a large
/// one is fresh pages from the system rather than a pass of stores.
fn alloc_zeroed(len: usize) -> Result<Vec<f32>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let oom = || Error::OutOfMemory(format!("{} bytes of host memory", len * 4));
    let layout = std::alloc::Layout::array::<f32>(len).map_err(|_| oom())?;
    // SAFETY: the layout is non-empty; a null pointer is handled; the memory is zeroed, a valid bit pattern for
    // f32, and is handed to a Vec with the layout's length and capacity, which frees it with the same layout.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout) as *mut f32;
        if ptr.is_null() {
            return Err(oom());
        }
        Ok(Vec::from_raw_parts(ptr, len, len))
    }
}

/// The processor's name as the system reports it (`model name` in `/proc/cpuinfo` on Linux), or the architecture
/// where it does not.
pub(crate) fn processor_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_string())
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| format!("{} processor", std::env::consts::ARCH))
}

impl CpuBackend {
    pub fn new() -> CpuBackend {
        let budget = free::budget(free::host_memory());
        let state = CpuState { buffers: SlotMap::with_key(), free: FreeList::new(budget), reads: SlotMap::with_key() };
        CpuBackend { state: Mutex::new(state) }
    }

    fn state(&self) -> MutexGuard<'_, CpuState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl CpuState {
    /// A buffer of `len` elements: a free one of that length, or a new one (counted).
    fn alloc(&mut self, len: usize, stats: &mut Stats) -> Result<Vec<f32>> {
        let bytes = len as u64 * 4;
        if let Some(v) = self.free.take(bytes, bytes) {
            return Ok(v);
        }
        stats.buffers_allocated += 1;
        alloc_zeroed(len)
    }

    fn insert(&mut self, v: Vec<f32>, stats: &mut Stats) -> BufferKey {
        stats.live_buffer_bytes += v.len() as u64 * 4;
        stats.peak_buffer_bytes = stats.peak_buffer_bytes.max(stats.live_buffer_bytes);
        self.buffers.insert(Arc::new(v))
    }

    fn remove(&mut self, key: BufferKey, stats: &mut Stats) {
        if let Some(v) = self.buffers.remove(key) {
            stats.live_buffer_bytes -= v.len() as u64 * 4;
            // A buffer a read-back still shares is dropped when the read is done instead.
            if let Ok(v) = Arc::try_unwrap(v) {
                drop(self.free.put(v.len() as u64 * 4, v));
            }
        }
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        format!("CPU ({} threads)", crate::backend::par::threads())
    }

    fn max_bindings(&self) -> usize {
        MAX_BINDINGS
    }

    fn matmul_tiles(&self) -> crate::kernel::MatmulTiles {
        // Products run through `gemm`, which blocks for the host's caches itself: the IR's tile is not read.
        crate::kernel::MatmulTiles::TUNED
    }

    fn max_buffer_bytes(&self) -> u64 {
        // Kernel parameters hold element indices and strides as 32-bit integers, as on the GPU.
        i32::MAX as u64 * 4
    }

    fn check_health(&self) -> Result<()> {
        Ok(())
    }

    fn run(&self, job: Job<'_>, stats: &mut Stats, _debug: u32) -> Result<Done> {
        let mut st = self.state();
        let mut keys: Vec<Option<BufferKey>> = Vec::with_capacity(job.buffers.len());
        let mut created: Vec<BufferKey> = Vec::new();
        let mut times = Vec::new();
        let outcome = (|| -> Result<()> {
            for b in &job.buffers {
                keys.push(match b.data {
                    Data::Existing(key) => Some(key),
                    // The values stay in host memory: nothing moves between devices, so nothing is counted.
                    Data::Upload(values) => {
                        let mut v = st.alloc(values.len(), stats)?;
                        v.copy_from_slice(bytemuck::cast_slice(values));
                        let key = st.insert(v, stats);
                        created.push(key);
                        Some(key)
                    }
                    // The CPU backend stores into a new buffer and lets the input's go after the job.
                    Data::Fresh | Data::Alias(_) => None,
                });
            }
            for (n, kernel) in job.kernels.iter().enumerate() {
                let started = job.profile.then(crate::env::Instant::now);
                // A slice stored into a larger buffer, which keeps its other elements: no output of its own.
                if kernel.scatter.is_some() {
                    scatter::run(&mut st, kernel, &job, &mut keys, &mut created, stats)?;
                }
                let mut outs: Vec<Vec<f32>> = Vec::with_capacity(kernel.outputs.len());
                for &(slot, _) in kernel.outputs.iter().filter(|_| kernel.scatter.is_none()) {
                    // An output stored through a view is computed in the kernel's own layout, then placed.
                    let len = match kernel.store_view {
                        Some(_) => kernel.shape.numel(),
                        None => (job.buffers[slot].bytes / 4) as usize,
                    };
                    outs.push(st.alloc(len, stats)?);
                }
                {
                    let inputs: Vec<&[f32]> = kernel
                        .inputs
                        .iter()
                        .map(|&(slot, _)| st.buffers[keys[slot].expect("inputs are written first")].as_slice())
                        .collect();
                    let mut views: Vec<&mut [f32]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
                    match kernel.kind {
                        _ if kernel.scatter.is_some() => {}
                        Kind::Elementwise => map::elementwise(kernel, &inputs, &mut views),
                        Kind::Reduce(_) => folds::reduce(kernel, &inputs, &mut views),
                        Kind::Rows { .. } => folds::rows(kernel, &inputs, &mut views),
                        Kind::Matmul(_) => matmul::matmul(kernel, &inputs, &mut views),
                    }
                }
                for (&(slot, _), v) in kernel.outputs.iter().zip(outs) {
                    if let Some(at) = kernel.store_view {
                        // Other kernels store other parts of the same buffer: the first of them allocates it.
                        let key = match keys[slot] {
                            Some(key) => key,
                            None => {
                                let whole = st.alloc((job.buffers[slot].bytes / 4) as usize, stats)?;
                                let key = st.insert(whole, stats);
                                created.push(key);
                                key
                            }
                        };
                        keys[slot] = Some(key);
                        matmul::place(kernel, at, &v, Arc::make_mut(&mut st.buffers[key]).as_mut_slice());
                        drop(st.free.put(v.len() as u64 * 4, v));
                        continue;
                    }
                    let key = st.insert(v, stats);
                    keys[slot] = Some(key);
                    created.push(key);
                }
                if let Some(started) = started {
                    times.push(Some(started.elapsed()));
                }
                // Kernels joined into one dispatch on a GPU count as one here too: counts agree across backends.
                if !kernel.joins {
                    stats.dispatches += 1;
                }
                stats.kernels += 1;
                for &slot in &job.frees[n] {
                    if let Some(key) = keys[slot].take() {
                        st.remove(key, stats);
                    }
                }
            }
            Ok(())
        })();
        if let Err(e) = outcome {
            for key in created {
                st.remove(key, stats);
            }
            return Err(e);
        }
        if !job.kernels.is_empty() || !created.is_empty() || !job.reads.is_empty() {
            stats.submits += 1;
        }
        let reads = job
            .reads
            .iter()
            .map(|&slot| {
                let v = st.buffers[keys[slot].expect("a read buffer exists")].clone();
                st.reads.insert(v)
            })
            .collect();
        let kept: Vec<BufferKey> = job.keep.iter().map(|&s| keys[s].take().expect("kept buffers exist")).collect();
        // Inputs an output was stored into: the graph forgets their buffers, which go now.
        for b in &job.buffers {
            if let Data::Alias(input) = b.data {
                if let Some(key) = keys[input].take() {
                    st.remove(key, stats);
                }
            }
        }
        for (b, key) in job.buffers.iter().zip(keys) {
            if let (Some(key), false) = (key, matches!(b.data, Data::Existing(_))) {
                st.remove(key, stats);
            }
        }
        Ok(Done { kept, reads, times, spirv: Vec::new(), cores: Vec::new() })
    }

    fn release(&self, key: BufferKey, stats: &mut Stats) {
        self.state().remove(key, stats);
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn poll(&self) -> Result<()> {
        Ok(())
    }

    fn read_ready(&self, _id: ReadId) -> bool {
        true
    }

    fn read_with(&self, id: ReadId, f: &mut dyn FnMut(&[u32])) -> Result<()> {
        let values = self.state().reads.remove(id).ok_or_else(|| Error::ReadBack("unknown read".into()))?;
        f(bytemuck::cast_slice(&values));
        Ok(())
    }

    fn discard_read(&self, id: ReadId) {
        self.state().reads.remove(id);
    }

    fn pool_bytes(&self) -> u64 {
        self.state().free.bytes()
    }

    fn pool_budget(&self) -> u64 {
        self.state().free.budget()
    }

    fn set_pool_budget(&self, bytes: u64) {
        drop(self.state().free.set_budget(bytes));
    }

    fn trim(&self) -> u64 {
        let mut st = self.state();
        let bytes = st.free.bytes();
        drop(st.free.drain());
        bytes
    }

    fn flush_all(&self) {
        // Nothing is held back: every realize ran when it was made.
    }

    fn submits(&self) -> Option<u64> {
        None
    }
}
