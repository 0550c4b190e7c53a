//! Device buffers: the live ones, keyed for the graph, and a best-fit pool of free ones to reuse.

use crate::graph::BufferKey;
use crate::stats::Stats;
use slotmap::SlotMap;
use std::collections::BTreeMap;

/// Free buffers beyond this many bytes are destroyed rather than kept for reuse.
const MAX_FREE_BYTES: u64 = 1 << 30;

/// Storage and staging buffers of one device.
#[derive(Default)]
pub struct Pool {
    live: SlotMap<BufferKey, wgpu::Buffer>,
    /// Free storage buffers by size.
    free: BTreeMap<u64, Vec<wgpu::Buffer>>,
    free_bytes: u64,
    /// Free read-back buffers by size.
    staging: BTreeMap<u64, Vec<wgpu::Buffer>>,
}

/// Buffer sizes are rounded to 256 bytes, so near sizes share buffers and every buffer holds whole vec4s.
fn round(bytes: u64) -> u64 {
    bytes.max(4).next_multiple_of(256)
}

/// The smallest free buffer of at least `size` bytes and at most twice that.
fn take_fit(free: &mut BTreeMap<u64, Vec<wgpu::Buffer>>, size: u64) -> Option<wgpu::Buffer> {
    let (&found, _) = free.range(size..=size.saturating_mul(2)).next()?;
    let list = free.get_mut(&found)?;
    let buf = list.pop();
    if list.is_empty() {
        free.remove(&found);
    }
    buf
}

impl Pool {
    /// A storage buffer of at least `bytes` bytes, reused when one fits.
    pub fn alloc(&mut self, device: &wgpu::Device, bytes: u64, stats: &mut Stats) -> BufferKey {
        let size = round(bytes);
        let buffer = match take_fit(&mut self.free, size) {
            Some(b) => {
                self.free_bytes -= b.size();
                b
            }
            None => {
                stats.buffers_allocated += 1;
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("lazor"),
                    size,
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            }
        };
        stats.live_buffer_bytes += buffer.size();
        stats.peak_buffer_bytes = stats.peak_buffer_bytes.max(stats.live_buffer_bytes);
        self.live.insert(buffer)
    }

    /// The buffer behind `key`.
    pub fn get(&self, key: BufferKey) -> &wgpu::Buffer {
        &self.live[key]
    }

    /// Returns a buffer to the pool. Safe while GPU work that uses it is in flight: the queue runs in order, so
    /// whoever gets it next writes it after that work.
    pub fn release(&mut self, key: BufferKey, stats: &mut Stats) {
        let Some(buffer) = self.live.remove(key) else { return };
        stats.live_buffer_bytes -= buffer.size();
        if self.free_bytes + buffer.size() <= MAX_FREE_BYTES {
            self.free_bytes += buffer.size();
            self.free.entry(buffer.size()).or_default().push(buffer);
        }
    }

    /// A mappable buffer to copy `bytes` bytes into for reading back.
    pub fn staging(&mut self, device: &wgpu::Device, bytes: u64, stats: &mut Stats) -> wgpu::Buffer {
        let size = round(bytes);
        take_fit(&mut self.staging, size).unwrap_or_else(|| {
            stats.buffers_allocated += 1;
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("lazor read back"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })
    }

    /// Returns an unmapped staging buffer for reuse (small ones only: big reads are rare and memory is not).
    pub fn release_staging(&mut self, buffer: wgpu::Buffer) {
        if buffer.size() <= 64 << 20 {
            self.staging.entry(buffer.size()).or_default().push(buffer);
        }
    }
}
