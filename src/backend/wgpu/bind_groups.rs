//! Bind groups by the pipeline and the buffer ranges they bind: a realize that repeats an earlier one (the same
//! kernels over buffers the pool hands back) reuses its bind groups instead of creating them again.

use crate::hash::FastMap;
use smallvec::SmallVec;

/// One binding: its number, a buffer (by identity), offset and size.
type Range = (u32, wgpu::Buffer, u64, u64);

#[derive(PartialEq, Eq, Hash)]
struct Key {
    pipeline: wgpu::ComputePipeline,
    ranges: SmallVec<[Range; 8]>,
}

/// Cached bind groups. A cached group keeps its buffers alive, so the cache is emptied whenever the pool lets a
/// buffer go, and when it grows past a bound.
#[derive(Default)]
pub struct BindGroups {
    groups: FastMap<Key, wgpu::BindGroup>,
    /// The pool's `dropped` count when the cache was last emptied.
    seen: u64,
}

/// Beyond this many groups the cache starts over: a program with ever-changing buffers gains nothing from it.
const MAX_GROUPS: usize = 4096;

impl BindGroups {
    /// Empties the cache if the pool has let buffers go since it was last emptied (`dropped` is its count).
    pub fn sync(&mut self, dropped: u64) {
        if dropped != self.seen || self.groups.len() > MAX_GROUPS {
            self.groups.clear();
            self.seen = dropped;
        }
    }

    /// Drops the groups that bind `buffer` (let go outside the pool), so the cache does not keep it alive.
    pub fn forget(&mut self, buffer: &wgpu::Buffer) {
        self.groups.retain(|key, _| key.ranges.iter().all(|(_, b, _, _)| b != buffer));
    }

    /// The bind group of `pipeline` over `ranges`, each naming its binding, created on first use.
    pub fn get(
        &mut self,
        device: &wgpu::Device,
        pipeline: &wgpu::ComputePipeline,
        layout: &wgpu::BindGroupLayout,
        ranges: SmallVec<[Range; 8]>,
        stats: &mut crate::profile::Stats,
    ) -> wgpu::BindGroup {
        let key = Key { pipeline: pipeline.clone(), ranges };
        if let Some(g) = self.groups.get(&key) {
            return g.clone();
        }
        let entries: SmallVec<[wgpu::BindGroupEntry<'_>; 8]> = key
            .ranges
            .iter()
            .map(|(binding, buffer, offset, size)| wgpu::BindGroupEntry {
                binding: *binding,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer,
                    offset: *offset,
                    size: std::num::NonZeroU64::new(*size),
                }),
            })
            .collect();
        stats.bind_groups_created += 1;
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout, entries: &entries });
        drop(entries);
        self.groups.insert(key, group.clone());
        group
    }
}
