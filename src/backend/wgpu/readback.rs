//! Reading results back: map the staging copies a job made, wait, lend the mapped words, return the staging buffer
//! to the pool.

use super::WgpuBackend;
use crate::backend::signal::Signal;
use crate::backend::ReadId;
use crate::error::{Error, Result};
use std::task::Waker;

/// How long a read waits, after the GPU is idle, for a map callback another thread's poll collected.
#[cfg(not(target_arch = "wasm32"))]
const CALLBACK_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// One map request's outcome, set by wgpu's callback: in the browser the callback runs from the page's event loop,
/// and a future awaiting the read sleeps until it does.
type Slot = Signal<Result<(), String>>;

/// A staging buffer being mapped for reading.
pub(super) struct PendingRead {
    buffer: wgpu::Buffer,
    bytes: u64,
    mapped: Slot,
}

impl PendingRead {
    /// Starts mapping `buffer` (whose copy was submitted already).
    pub fn start(buffer: wgpu::Buffer, bytes: u64) -> PendingRead {
        let mapped = Slot::default();
        let done = mapped.clone();
        buffer.map_async(wgpu::MapMode::Read, 0..bytes, move |r| done.set(r.map_err(|e| e.to_string())));
        PendingRead { buffer, bytes, mapped }
    }

    /// Whether the map callback has run.
    pub fn ready(&self) -> bool {
        self.mapped.is_set()
    }

    /// Wakes `waker` when the map callback has run (at once if it has).
    pub fn wake_when_ready(&self, waker: &Waker) {
        self.mapped.wake_when_set(waker);
    }
}

impl WgpuBackend {
    /// Waits for a read-back if needed, lends the mapped words to `f` and returns the staging buffer to the pool.
    /// The backend's lock is not held while `f` runs.
    pub(super) fn finish_read(&self, id: ReadId, f: &mut dyn FnMut(&[u32])) -> Result<()> {
        let pending = self.state().reads.remove(id).ok_or_else(|| Error::ReadBack("unknown read".into()))?;
        #[cfg(target_arch = "wasm32")]
        if !pending.ready() {
            // The map callback runs from the page's event loop, which a wait here would block.
            return Err(Error::WouldBlock { op: "a blocking read", twin: "to_vec_async()" });
        }
        #[cfg(not(target_arch = "wasm32"))]
        if !pending.ready() {
            self.gpu.wait()?;
            // Another thread's poll (the submit thread's, or a user thread's) may have collected this map's
            // callback: wgpu runs collected callbacks only after that poll lets go of its locks, so the wait above
            // can return first. The callback follows within microseconds.
            let deadline = std::time::Instant::now() + CALLBACK_GRACE;
            while !pending.ready() && std::time::Instant::now() < deadline {
                self.gpu.poll()?;
                std::thread::yield_now();
            }
        }
        let status = pending.mapped.take().unwrap_or_else(|| Err("map callback never ran".into()));
        status.map_err(Error::ReadBack)?;
        {
            let view = pending.buffer.get_mapped_range(0..pending.bytes).map_err(|e| Error::ReadBack(e.to_string()))?;
            // Mappings are aligned far beyond 4 bytes; the copy is for a backend that ever hands out less.
            match bytemuck::try_cast_slice::<u8, u32>(&view) {
                Ok(words) => f(words),
                Err(_) => f(&bytemuck::pod_collect_to_vec::<u8, u32>(&view)),
            }
        }
        pending.buffer.unmap();
        self.state().pool.release_staging(pending.buffer);
        Ok(())
    }
}
