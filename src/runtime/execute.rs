//! Running a plan: uploads, parameters, one compute pass of fused kernels, read-back copies, one submit.

use super::gpu::Scopes;
use super::State;
use crate::codegen;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::{BufferKey, NodeId, Op};
use crate::schedule::{self, Options, Plan};
use std::collections::HashMap;
use std::num::NonZeroU64;
use std::time::Instant;

/// The most storage buffers lazor binds in one kernel, whatever the adapter allows (NVIDIA allows thousands):
/// past this, a longer bind group costs more per dispatch than a split saves.
pub const MAX_BINDINGS: usize = 64;

/// A buffer being read back: the staging copy and the byte count of the value in it.
pub(crate) struct Staged {
    pub buffer: wgpu::Buffer,
    pub bytes: u64,
}

/// Returns an error when some value of the plan needs more bytes than one binding can cover.
fn check_sizes(state: &State, plan: &Plan, limit: u64) -> Result<()> {
    let written = plan.kernels.iter().flat_map(|k| k.outputs.iter().map(|o| o.0));
    for id in plan.uploads.iter().copied().chain(written) {
        let node = state.graph.node(id);
        // Padded to a whole vec4, as kernels bind it.
        let bytes = (node.shape.numel() * node.dtype.size()).next_multiple_of(16) as u64;
        if bytes > limit {
            return Err(Error::TooLarge { shape: node.shape.clone(), bytes, limit });
        }
    }
    Ok(())
}

fn binding(buffer: &wgpu::Buffer, offset: u64, bytes: u64) -> wgpu::BindingResource<'_> {
    wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer, offset, size: NonZeroU64::new(bytes) })
}

impl Device {
    /// Realizes `outputs` in one submit and, in the same submit, copies each of `read` (a subset of `outputs`)
    /// into a staging buffer. Returns the staging buffers in the order of `read`; `None` for an empty tensor.
    pub(crate) fn run(&self, outputs: &[NodeId], read: &[NodeId]) -> Result<Vec<Option<Staged>>> {
        let gpu = &self.inner.gpu;
        gpu.check_health()?;
        let start = Instant::now();
        let debug = self.inner.debug;
        let opts = Options {
            fuse: self.fusion(),
            max_bindings: (gpu.limits.max_storage_buffers_per_shader_stage as usize).min(MAX_BINDINGS),
            max_ops: self.inner.max_ops,
        };
        let mut guard = self.state();
        let state = &mut *guard;
        let plan = schedule::plan(&state.graph, outputs, &opts);
        check_sizes(state, &plan, gpu.max_binding_bytes())?;
        let before = state.stats;
        state.stats.realizes += 1;

        let scopes = Scopes::push(&gpu.device);
        for &id in &plan.empty {
            let mut freed = Vec::new();
            state.graph.set_realized(id, None, &mut freed);
            state.release_all(freed);
        }
        for &id in &plan.uploads {
            let node = state.graph.node_mut(id);
            let Op::Data(data) = std::mem::replace(&mut node.op, Op::Buffer) else { unreachable!("uploads are data") };
            let bytes: &[u8] = bytemuck::cast_slice(&data);
            let key = state.pool.alloc(&gpu.device, bytes.len() as u64, &mut state.stats);
            gpu.queue.write_buffer(state.pool.get(key), 0, bytes);
            state.stats.bytes_uploaded += bytes.len() as u64;
            state.graph.node_mut(id).buffer = Some(key);
        }

        // All kernels' parameters in one buffer, each at an aligned offset.
        let align = gpu.limits.min_storage_buffer_offset_alignment as u64;
        let mut params: Vec<u32> = Vec::new();
        let mut param_at = Vec::with_capacity(plan.kernels.len());
        for k in &plan.kernels {
            while (params.len() as u64 * 4) % align != 0 {
                params.push(0);
            }
            let p = k.params();
            param_at.push((params.len() as u64 * 4, p.len() as u64 * 4));
            params.extend(p);
        }
        let param_buf = (!params.is_empty()).then(|| {
            let key = state.pool.alloc(&gpu.device, params.len() as u64 * 4, &mut state.stats);
            gpu.queue.write_buffer(state.pool.get(key), 0, bytemuck::cast_slice(&params));
            key
        });

        let mut encoder = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("lazor") });
        // Buffers written by this realize's kernels.
        let mut written: HashMap<NodeId, BufferKey> = HashMap::new();
        let max_groups = gpu.limits.max_compute_workgroups_per_dimension;
        let mut compile_error = None;
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            for (n, kernel) in plan.kernels.iter().enumerate() {
                let wgsl = codegen::generate(kernel);
                let name = format!("k{}x{}", kernel.fused_ops, kernel.outputs.len());
                let compiled = match state.pipelines.get(&gpu.device, &wgsl, &name, debug, &mut state.stats) {
                    Ok(p) => p,
                    Err(e) => {
                        compile_error = Some(e);
                        break;
                    }
                };
                let numel = kernel.shape.numel() as u64;
                for &(id, _) in &kernel.outputs {
                    let key = state.pool.alloc(&gpu.device, kernel.binding_bytes(numel as usize), &mut state.stats);
                    written.insert(id, key);
                }
                let key_of = |id: NodeId| -> BufferKey {
                    written.get(&id).copied().or(state.graph.node(id).buffer).expect("inputs are stored")
                };
                let (offset, size) = param_at[n];
                let mut entries = vec![wgpu::BindGroupEntry {
                    binding: 0,
                    resource: binding(state.pool.get(param_buf.expect("params")), offset, size),
                }];
                let stored = kernel.outputs.iter().map(|o| o.0).chain(kernel.inputs.iter().copied());
                for (b, id) in stored.enumerate() {
                    let bytes = kernel.binding_bytes(state.graph.node(id).shape.numel());
                    entries.push(wgpu::BindGroupEntry {
                        binding: 1 + b as u32,
                        resource: binding(state.pool.get(key_of(id)), 0, bytes),
                    });
                }
                let bind_group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &compiled.layout,
                    entries: &entries,
                });
                pass.set_pipeline(&compiled.pipeline);
                pass.set_bind_group(0, &bind_group, &[]);
                let (x, y) = codegen::dispatch_size(kernel.threads(), max_groups);
                pass.dispatch_workgroups(x, y, 1);
                state.stats.dispatches += 1;
                for id in &plan.frees[n] {
                    if let Some(key) = written.remove(id) {
                        state.pool.release(key, &mut state.stats);
                    }
                }
            }
        }

        let mut staged = Vec::with_capacity(read.len());
        for &id in read {
            let node = state.graph.node(id);
            let bytes = (node.shape.numel() * node.dtype.size()) as u64;
            let Some(src) = written.get(&id).copied().or(node.buffer) else {
                staged.push(None);
                continue;
            };
            let buffer = state.pool.staging(&gpu.device, bytes, &mut state.stats);
            encoder.copy_buffer_to_buffer(state.pool.get(src), 0, &buffer, 0, bytes);
            state.stats.bytes_downloaded += bytes;
            staged.push(Some(Staged { buffer, bytes }));
        }
        let has_work = !plan.kernels.is_empty() || !plan.uploads.is_empty() || staged.iter().any(Option::is_some);
        if has_work && compile_error.is_none() {
            gpu.queue.submit([encoder.finish()]);
            state.stats.submits += 1;
        }
        if let Some(key) = param_buf {
            state.pool.release(key, &mut state.stats);
        }
        let outcome = match compile_error {
            Some(e) => Err(e),
            None => scopes.pop(),
        };
        if let Err(e) = outcome {
            // Nothing is marked realized: the values may be garbage.
            for (_, key) in written.drain() {
                state.pool.release(key, &mut state.stats);
            }
            return Err(e);
        }

        // Requested outputs keep their buffers and become leaves; anything else written was an intermediate.
        for &id in &plan.outputs {
            if let Some(key) = written.remove(&id) {
                let mut freed = Vec::new();
                state.graph.set_realized(id, Some(key), &mut freed);
                state.release_all(freed);
            }
        }
        for (_, key) in written.drain() {
            state.pool.release(key, &mut state.stats);
        }
        if debug >= 1 {
            let s = state.stats;
            eprintln!(
                "lazor: realize #{}: {} nodes, {} kernels, {} dispatches, {} B up, {} B down, {} compiled, {:.3} ms",
                s.realizes,
                plan.nodes,
                plan.kernels.len(),
                s.dispatches - before.dispatches,
                s.bytes_uploaded - before.bytes_uploaded,
                s.bytes_downloaded - before.bytes_downloaded,
                s.pipelines_compiled - before.pipelines_compiled,
                start.elapsed().as_secs_f64() * 1e3
            );
        }
        Ok(staged)
    }
}
