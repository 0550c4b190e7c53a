//! Device buffers: the live ones, keyed for the graph, and pools of free storage and read-back staging buffers to
//! reuse before allocating (the policy is `backend/free.rs`).

use crate::backend::free::FreeList;
use crate::buffer::BufferKey;
use crate::profile::Stats;
use slotmap::SlotMap;

/// Storage and staging buffers of one device.
pub struct Pool {
    /// Live buffers, each with the last dispatch that used it and the last that wrote it (see [`Pool::touch`]).
    live: SlotMap<BufferKey, Live>,
    free: FreeList<wgpu::Buffer>,
    /// Read-back buffers: host memory the driver pins, so they get their own, smaller budget.
    staging: FreeList<wgpu::Buffer>,
    /// Counts storage buffers the pool has let go of: cached bind groups that may name one are stale after it
    /// changes (they would keep its memory alive).
    pub dropped: u64,
}

/// A live buffer and the dispatches (numbered by the backend, from 1; 0 for none) that last used and wrote it.
struct Live {
    buffer: wgpu::Buffer,
    used: u64,
    written: u64,
}

/// Buffer sizes are rounded to 256 bytes, so near sizes share buffers and every buffer holds whole vec4s.
fn round(bytes: u64) -> u64 {
    bytes.max(4).next_multiple_of(256)
}

/// Free buffers a request may take: up to twice its size, so a small request never pins a huge buffer.
fn fit(size: u64) -> u64 {
    size.saturating_mul(2)
}

/// The staging budget for a storage budget: a quarter, but at least 256 MiB (one 2^26-element read) and at most
/// 4 GiB, and never above the storage budget itself.
fn staging_budget(budget: u64) -> u64 {
    (budget / 4).clamp(256 << 20, 4 << 30).min(budget)
}

impl Pool {
    /// A pool keeping at most `budget` bytes of free storage buffers.
    pub fn new(budget: u64) -> Pool {
        Pool {
            live: SlotMap::with_key(),
            free: FreeList::new(budget),
            staging: FreeList::new(staging_budget(budget)),
            dropped: 0,
        }
    }

    /// Changes the free storage budget (and the staging budget with it), dropping what no longer fits.
    pub fn set_budget(&mut self, budget: u64) {
        self.dropped += self.free.set_budget(budget).len() as u64;
        drop(self.staging.set_budget(staging_budget(budget)));
    }

    /// The free storage budget in bytes.
    pub fn budget(&self) -> u64 {
        self.free.budget()
    }

    /// Bytes of free buffers held for reuse, storage and staging.
    pub fn free_bytes(&self) -> u64 {
        self.free.bytes() + self.staging.bytes()
    }

    /// A storage buffer of at least `bytes` bytes, reused when one fits: preferably one last used by dispatch
    /// `settled` or earlier; else a new one while there is room for it, else any.
    ///
    /// Room: the free buffers stay within the budget, and live and free buffers together within twice it (half
    /// the device's memory by default), so a program whose tensors fill the device reuses rather than runs out.
    pub fn alloc(&mut self, device: &wgpu::Device, bytes: u64, settled: u64, stats: &mut Stats) -> BufferKey {
        let size = round(bytes);
        let free = &mut self.free;
        let live = stats.live_buffer_bytes;
        let reused = free.take_settled(size, fit(size), settled).or_else(|| {
            let room = free.bytes() + size <= free.budget() && live + free.bytes() + size <= 2 * free.budget();
            if room {
                None
            } else {
                free.take(size, fit(size))
            }
        });
        let buffer = reused.unwrap_or_else(|| {
            stats.buffers_allocated += 1;
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("lazor"),
                size,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        });
        stats.live_buffer_bytes += buffer.size();
        stats.peak_buffer_bytes = stats.peak_buffer_bytes.max(stats.live_buffer_bytes);
        self.live.insert(Live { buffer, used: 0, written: 0 })
    }

    /// The buffer behind `key`.
    pub fn get(&self, key: BufferKey) -> &wgpu::Buffer {
        &self.live[key].buffer
    }

    /// Notes that dispatch `dispatch` reads (or, with `writes`, writes) the buffer behind `key`.
    pub fn touch(&mut self, key: BufferKey, dispatch: u64, writes: bool) {
        if let Some(live) = self.live.get_mut(key) {
            live.used = live.used.max(dispatch);
            if writes {
                live.written = live.written.max(dispatch);
            }
        }
    }

    /// The last dispatch that wrote the buffer behind `key` (0 for none: an upload, or nothing yet).
    pub fn written(&self, key: BufferKey) -> u64 {
        self.live.get(key).map_or(0, |l| l.written)
    }

    /// Returns a buffer to the pool. Safe while GPU work that uses it is in flight: the queue runs in order, so
    /// whoever gets it next writes it after that work, and a buffer evicted now is freed by wgpu once that work
    /// is done.
    pub fn release(&mut self, key: BufferKey, stats: &mut Stats) {
        let Some(Live { buffer, used, .. }) = self.live.remove(key) else { return };
        stats.live_buffer_bytes -= buffer.size();
        // Dropped, not destroyed: `destroy` would free memory that submitted kernels may still read.
        self.dropped += self.free.put_stamped(buffer.size(), buffer, used).len() as u64;
    }

    /// A mappable buffer to copy `bytes` bytes into for reading back.
    pub fn staging(&mut self, device: &wgpu::Device, bytes: u64, stats: &mut Stats) -> wgpu::Buffer {
        let size = round(bytes);
        self.staging.take(size, fit(size)).unwrap_or_else(|| {
            stats.buffers_allocated += 1;
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("lazor read back"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })
    }

    /// Returns an unmapped staging buffer for reuse.
    pub fn release_staging(&mut self, buffer: wgpu::Buffer) {
        drop(self.staging.put(buffer.size(), buffer));
    }

    /// Drops every free buffer (storage and staging); returns the bytes given back.
    pub fn trim(&mut self) -> u64 {
        let bytes = self.free_bytes();
        self.dropped += self.free.drain().len() as u64;
        drop(self.staging.drain());
        bytes
    }
}
