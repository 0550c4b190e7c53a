//! Reading results back: map the staging copies a job made, wait, lend the mapped words, return the staging buffer
//! to the pool.

use super::WgpuBackend;
use crate::backend::ReadId;
use crate::error::lock;
use crate::error::{Error, Result};
use std::sync::{Arc, Mutex};

/// How long a read waits, after the GPU is idle, for a map callback another thread's poll collected.
const CALLBACK_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// One map request's outcome, filled in by wgpu's callback.
type Slot = Arc<Mutex<Option<Result<(), String>>>>;

/// A staging buffer being mapped for reading.
pub(super) struct PendingRead {
    buffer: wgpu::Buffer,
    bytes: u64,
    mapped: Slot,
}

impl PendingRead {
    /// Starts mapping `buffer` (whose copy was submitted already).
    pub fn start(buffer: wgpu::Buffer, bytes: u64) -> PendingRead {
        let mapped: Slot = Arc::new(Mutex::new(None));
        let done = mapped.clone();
        buffer.map_async(wgpu::MapMode::Read, 0..bytes, move |r| {
            *lock(&done) = Some(r.map_err(|e| e.to_string()));
        });
        PendingRead { buffer, bytes, mapped }
    }

    /// Whether the map callback has run.
    pub fn ready(&self) -> bool {
        lock(&self.mapped).is_some()
    }
}

impl WgpuBackend {
    /// Waits for a read-back if needed, lends the mapped words to `f` and returns the staging buffer to the pool.
    /// The backend's lock is not held while `f` runs.
    pub(super) fn finish_read(&self, id: ReadId, f: &mut dyn FnMut(&[u32])) -> Result<()> {
        let pending = self.state().reads.remove(id).ok_or_else(|| Error::ReadBack("unknown read".into()))?;
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
        let status = lock(&pending.mapped).take().unwrap_or_else(|| Err("map callback never ran".into()));
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
