//! Kernel parameter blocks on the GPU, cached by content.

// A realize whose kernels' parameters equal an earlier realize's binds the buffer that already holds them and
// uploads nothing, so its submit carries no staging copy (and no copy-to-kernel barrier) ahead of its kernels. A
// loop that repeats a computation at fixed shapes hits every time.

use crate::hash::FastMap;
use crate::stats::Stats;

/// Blocks kept; past this the least recently used is dropped.
const MAX_BLOCKS: usize = 64;

/// Cached parameter buffers, written once and never again.
#[derive(Default)]
pub struct Params {
    blocks: FastMap<Vec<u32>, (wgpu::Buffer, u64)>,
    clock: u64,
}

impl Params {
    /// A buffer holding `words`, and a cached buffer dropped to make room, if any (bind groups holding it may go).
    /// A new block is written with `queue.write_buffer`, which lands before the next submit's kernels; with
    /// `reuse` it goes into the least recently used block's buffer when that is large enough (the queue orders the
    /// write after the kernels already submitted that read it, so the caller passes `false` while kernels that may
    /// read it are recorded and not yet submitted).
    pub fn get(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        words: &[u32],
        reuse: bool,
        stats: &mut Stats,
    ) -> (wgpu::Buffer, Option<wgpu::Buffer>) {
        self.clock += 1;
        if let Some((buffer, used)) = self.blocks.get_mut(words) {
            *used = self.clock;
            return (buffer.clone(), None);
        }
        let size = (words.len() as u64 * 4).next_multiple_of(16);
        let mut spare = None;
        if self.blocks.len() >= MAX_BLOCKS {
            let oldest = self.blocks.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone());
            spare = oldest.and_then(|k| self.blocks.remove(&k)).map(|(buffer, _)| buffer);
        }
        stats.param_uploads += 1;
        let (buffer, dropped) = match spare {
            Some(b) if reuse && b.size() >= size => (b, None),
            dropped => {
                stats.buffers_allocated += 1;
                let buffer = device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("lazor params"),
                    size,
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                // Dropped, not destroyed: submitted kernels may still read it; wgpu frees it after them.
                (buffer, dropped)
            }
        };
        queue.write_buffer(&buffer, 0, bytemuck::cast_slice(words));
        self.blocks.insert(words.to_vec(), (buffer.clone(), self.clock));
        (buffer, dropped)
    }

    /// Forgets the block holding `words`: the realize that wrote it failed, so the buffer may not hold them.
    pub fn forget(&mut self, words: &[u32]) {
        self.blocks.remove(words);
    }
}
