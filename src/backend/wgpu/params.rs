//! Parameter blocks by content: a realize whose kernels' parameters equal an earlier realize's binds the buffer
//! that already holds them and uploads nothing, so its submit carries no staging copy (and no copy-to-kernel
//! barrier) ahead of its kernels. A loop that repeats a computation at fixed shapes hits every time.

use crate::stats::Stats;
use std::collections::HashMap;

/// Blocks kept; past this the least recently used is dropped.
const MAX_BLOCKS: usize = 64;

/// Cached parameter buffers, written once and never again.
#[derive(Default)]
pub struct Params {
    blocks: HashMap<Vec<u32>, (wgpu::Buffer, u64)>,
    clock: u64,
}

impl Params {
    /// A buffer holding `words`, and whether a cached one was dropped to make room (bind groups holding it must
    /// go). A new block is written with `queue.write_buffer`, which lands before the next submit's kernels.
    pub fn get(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        words: &[u32],
        stats: &mut Stats,
    ) -> (wgpu::Buffer, bool) {
        self.clock += 1;
        if let Some((buffer, used)) = self.blocks.get_mut(words) {
            *used = self.clock;
            return (buffer.clone(), false);
        }
        let mut evicted = false;
        if self.blocks.len() >= MAX_BLOCKS {
            let oldest = self.blocks.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone());
            // Dropped, not destroyed: submitted kernels may still read it; wgpu frees it after them.
            evicted = oldest.and_then(|k| self.blocks.remove(&k)).is_some();
        }
        stats.buffers_allocated += 1;
        stats.param_uploads += 1;
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("lazor params"),
            size: (words.len() as u64 * 4).next_multiple_of(16),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        queue.write_buffer(&buffer, 0, bytemuck::cast_slice(words));
        self.blocks.insert(words.to_vec(), (buffer.clone(), self.clock));
        (buffer, evicted)
    }
}
