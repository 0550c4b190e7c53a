//! GPU time per kernel from timestamp queries, for `Device::profile`.

use super::gpu::Gpu;
use crate::error::{Error, Result};
use std::time::Duration;

/// Two timestamps per kernel (its pass's start and end), resolved into a buffer and read back once submitted.
pub struct Timing {
    set: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    readable: wgpu::Buffer,
    kernels: usize,
}

impl Timing {
    pub fn new(device: &wgpu::Device, kernels: usize) -> Timing {
        let count = 2 * kernels as u32;
        let set = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("lazor profile"),
            ty: wgpu::QueryType::Timestamp,
            count,
        });
        let bytes = u64::from(count) * 8;
        let buffer = |usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("lazor profile"),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        let resolved = buffer(wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC);
        let readable = buffer(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        Timing { set, resolved, readable, kernels }
    }

    /// Where kernel `n`'s pass writes its start and end.
    pub fn writes(&self, n: usize) -> wgpu::ComputePassTimestampWrites<'_> {
        wgpu::ComputePassTimestampWrites {
            query_set: &self.set,
            beginning_of_pass_write_index: Some(2 * n as u32),
            end_of_pass_write_index: Some(2 * n as u32 + 1),
        }
    }

    /// Records the resolve and the copy to mappable memory, after the kernels.
    pub fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        let count = 2 * self.kernels as u32;
        encoder.resolve_query_set(&self.set, 0..count, &self.resolved, 0);
        encoder.copy_buffer_to_buffer(&self.resolved, 0, &self.readable, 0, u64::from(count) * 8);
    }

    /// Each kernel's time, once the submit holding them is done (waits for it).
    pub fn read(&self, gpu: &Gpu) -> Result<Vec<Option<Duration>>> {
        let slice = self.readable.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        gpu.wait()?;
        rx.recv().map_err(|e| Error::ReadBack(e.to_string()))?.map_err(|e| Error::ReadBack(e.to_string()))?;
        let period = f64::from(gpu.queue.get_timestamp_period());
        let ticks: Vec<u64> = {
            let view = slice.get_mapped_range().map_err(|e| Error::ReadBack(e.to_string()))?;
            bytemuck::pod_collect_to_vec(&view)
        };
        self.readable.unmap();
        Ok(ticks
            .chunks(2)
            // A driver may report an end before its start (timestamps of different units): no time, not a wrap.
            .map(|t| t[1].checked_sub(t[0]).map(|d| Duration::from_nanos((d as f64 * period) as u64)))
            .collect())
    }
}
