//! Kernel parameter blocks on the GPU, cached by content.

// A realize whose kernels' parameters equal an earlier realize's binds the buffer that already holds them and
// uploads nothing, so its submit carries no staging copy (and no copy-to-kernel barrier) ahead of its kernels. A
// loop that repeats a computation at fixed shapes hits every time.

use crate::hash::FastMap;
use crate::profile::Stats;

/// Blocks kept; past this the least recently used is dropped.
const MAX_BLOCKS: usize = 64;

/// A cached block: its buffer, when it was last asked for, and the last dispatch that binds it.
struct Block {
    buffer: wgpu::Buffer,
    used: u64,
    last_dispatch: u64,
}

/// Cached parameter buffers, each holding one block of words while it is cached.
#[derive(Default)]
pub struct Params {
    blocks: FastMap<Vec<u32>, Block>,
    clock: u64,
}

impl Params {
    /// A buffer holding `words` for the dispatches up to `last_dispatch`, and a cached buffer dropped to make room,
    /// if any (bind groups holding it may go). A new block is written with `queue.write_buffer`, which lands
    /// before the next submit's kernels; it goes into the least recently used block's buffer when that is large
    /// enough and no dispatch after `settled` (the last one submitted) binds it: the queue orders the write after
    /// the submitted kernels that read the old words, while a kernel recorded and not yet submitted would see the
    /// new ones. So a loop whose constants change every step (an optimizer's bias corrections) reuses the same
    /// buffers even while its realizes are batched.
    pub fn get(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        words: &[u32],
        settled: u64,
        last_dispatch: u64,
        stats: &mut Stats,
    ) -> (wgpu::Buffer, Option<wgpu::Buffer>) {
        self.clock += 1;
        if let Some(block) = self.blocks.get_mut(words) {
            block.used = self.clock;
            block.last_dispatch = block.last_dispatch.max(last_dispatch);
            return (block.buffer.clone(), None);
        }
        let size = (words.len() as u64 * 4).next_multiple_of(16);
        // A block of the same length no unsubmitted dispatch binds takes the new words in place: a loop whose
        // constants change every step (a decode position) then binds the same buffer every step, so its bind groups
        // are found in their cache rather than created again for every kernel of every step.
        // Otherwise, with the cache full, the least recently used block makes room.
        let full = self.blocks.len() >= MAX_BLOCKS;
        let lru = |same: bool| {
            let fits = |k: &Vec<u32>, b: &Block| !same || (k.len() == words.len() && b.last_dispatch <= settled);
            self.blocks.iter().filter(|(k, b)| fits(k, b)).min_by_key(|(_, b)| b.used).map(|(k, _)| k.clone())
        };
        let victim = lru(true).or_else(|| full.then(|| lru(false)).flatten());
        let spare = victim.and_then(|k| self.blocks.remove(&k));
        stats.param_uploads += 1;
        let (buffer, dropped) = match spare {
            Some(b) if b.last_dispatch <= settled && b.buffer.size() >= size => (b.buffer, None),
            dropped => {
                stats.buffers_allocated += 1;
                let buffer = device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("lazor params"),
                    size,
                    // Uniform for most kernels, storage for one with a long block (`codegen::param_vecs`).
                    usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                // Dropped, not destroyed: submitted kernels may still read it; wgpu frees it after them.
                (buffer, dropped.map(|b| b.buffer))
            }
        };
        queue.write_buffer(&buffer, 0, bytemuck::cast_slice(words));
        let block = Block { buffer: buffer.clone(), used: self.clock, last_dispatch };
        self.blocks.insert(words.to_vec(), block);
        (buffer, dropped)
    }

    /// Forgets the block holding `words`: the realize that wrote it failed, so the buffer may not hold them.
    pub fn forget(&mut self, words: &[u32]) {
        self.blocks.remove(words);
    }
}
