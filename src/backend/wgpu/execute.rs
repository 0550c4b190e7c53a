//! Running a job on wgpu: uploads, parameters (cached by content), one compute pass of kernels, read-back copies,
//! one submit.

use super::gpu::Scopes;
use super::{readback, WgpuBackend};
use crate::backend::{Data, Done, Job};
use crate::codegen;
use crate::error::Result;
use crate::graph::BufferKey;
use crate::stats::Stats;
use smallvec::SmallVec;

/// Bytes a binding of a `bytes`-byte value covers: whole 16-byte vectors (buffers are allocated in 256-byte steps).
fn bound(bytes: u64) -> u64 {
    bytes.next_multiple_of(16).max(16)
}

impl WgpuBackend {
    pub(super) fn execute(&self, job: Job<'_>, stats: &mut Stats, debug: u32) -> Result<Done> {
        let gpu = &self.gpu;
        let mut guard = self.state();
        let st = &mut *guard;
        let t0 = std::time::Instant::now();
        let scopes = Scopes::push(&gpu.device);
        let compiled_before = stats.pipelines_compiled;
        st.bind_groups.sync(st.pool.dropped);

        // Buffers of the job: existing ones by key, uploads written now (staged into the same submit), fresh ones
        // taken from the pool when their kernel runs.
        let mut keys: Vec<Option<BufferKey>> = Vec::with_capacity(job.buffers.len());
        for b in &job.buffers {
            keys.push(match b.data {
                Data::Existing(key) => Some(key),
                Data::Upload(values) => {
                    let bytes: &[u8] = bytemuck::cast_slice(values);
                    let key = st.pool.alloc(&gpu.device, bytes.len() as u64, stats);
                    gpu.queue.write_buffer(st.pool.get(key), 0, bytes);
                    stats.bytes_uploaded += bytes.len() as u64;
                    Some(key)
                }
                Data::Fresh => None,
            });
        }

        // All kernels' parameters in one buffer, each at an aligned offset.
        let align = gpu.limits.min_storage_buffer_offset_alignment as u64;
        let mut params: Vec<u32> = Vec::new();
        let mut param_at = Vec::with_capacity(job.kernels.len());
        for k in job.kernels {
            while (params.len() as u64 * 4) % align != 0 {
                params.push(0);
            }
            param_at.push((params.len() as u64 * 4, k.params.len() as u64 * 4));
            params.extend_from_slice(&k.params);
        }
        let param_buf = (!params.is_empty()).then(|| {
            let (buffer, dropped) = st.params.get(&gpu.device, &gpu.queue, &params, stats);
            if let Some(dropped) = dropped {
                st.bind_groups.forget(&dropped);
            }
            buffer
        });

        let t_upload = t0.elapsed();
        let mut encoder = gpu.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("lazor") });
        let max_groups = gpu.limits.max_compute_workgroups_per_dimension;
        let mut failed = None;
        let target = self.target();
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            for (n, kernel) in job.kernels.iter().enumerate() {
                let key = codegen::Key::of(kernel, &target);
                let compiled = match st.pipelines.lookup(&key, stats) {
                    Some(p) => p,
                    None => {
                        let wgsl = codegen::generate(kernel, &target);
                        let name = format!("k{}x{}", kernel.fused_ops, kernel.outputs.len());
                        // A matmul's indices are in range by construction: every load and store is guarded by the
                        // sizes and every view was checked when it was made, so wgpu's own checks are redundant.
                        let trusted = matches!(kernel.kind, crate::kernel::Kind::Matmul(_)) && !gpu.checked;
                        match st.pipelines.get(&gpu.device, &wgsl, &name, trusted, debug, stats) {
                            Ok(p) => {
                                st.pipelines.remember(key, p.clone());
                                p
                            }
                            Err(e) => {
                                failed = Some(e);
                                break;
                            }
                        }
                    }
                };
                for &(slot, _) in &kernel.outputs {
                    let key = st.pool.alloc(&gpu.device, job.buffers[slot].bytes, stats);
                    keys[slot] = Some(key);
                }
                let (offset, size) = param_at[n];
                let mut ranges: SmallVec<[(wgpu::Buffer, u64, u64); 8]> = SmallVec::new();
                ranges.push((param_buf.clone().expect("params"), offset, size));
                let slots = kernel.outputs.iter().map(|o| o.0).chain(kernel.inputs.iter().map(|i| i.0));
                for slot in slots {
                    let key = keys[slot].expect("a kernel's inputs are written before it runs");
                    ranges.push((st.pool.get(key).clone(), 0, bound(job.buffers[slot].bytes)));
                }
                let bind_group = st.bind_groups.get(&gpu.device, &compiled.pipeline, &compiled.layout, ranges);
                pass.set_pipeline(&compiled.pipeline);
                pass.set_bind_group(0, &bind_group, &[]);
                let (x, y) = codegen::dispatch_size(kernel.threads(), max_groups);
                pass.dispatch_workgroups(x, y, 1);
                stats.dispatches += 1;
                // The queue runs in order: whoever takes this buffer next writes it after this kernel read it.
                for &slot in &job.frees[n] {
                    if let Some(key) = keys[slot].take() {
                        st.pool.release(key, stats);
                    }
                }
            }
        }

        let mut staged = Vec::with_capacity(job.reads.len());
        if failed.is_none() {
            for &slot in job.reads {
                let bytes = job.buffers[slot].bytes;
                let src = keys[slot].expect("a read buffer exists");
                let buffer = st.pool.staging(&gpu.device, bytes, stats);
                encoder.copy_buffer_to_buffer(st.pool.get(src), 0, &buffer, 0, bytes);
                stats.bytes_downloaded += bytes;
                staged.push(buffer);
            }
        }
        let uploads = job.buffers.iter().any(|b| matches!(b.data, Data::Upload(_)));
        let has_work = !job.kernels.is_empty() || uploads || !staged.is_empty();
        if has_work && failed.is_none() {
            let t_encode = t0.elapsed();
            gpu.queue.submit([encoder.finish()]);
            if debug >= 3 {
                eprintln!(
                    "lazor: wgpu phases: scopes+uploads+params {:.1} us, encode {:.1} us, submit {:.1} us",
                    t_upload.as_secs_f64() * 1e6,
                    (t_encode - t_upload).as_secs_f64() * 1e6,
                    (t0.elapsed() - t_encode).as_secs_f64() * 1e6
                );
            }
            stats.submits += 1;
        }
        // New pipelines go to disk now, while the GPU runs them: a program may never drop its device.
        if stats.pipelines_compiled > compiled_before {
            st.pipelines.save();
        }
        let t_pop = t0.elapsed();
        let outcome = match failed {
            Some(e) => Err(e),
            None => scopes.pop(),
        };
        if debug >= 3 {
            eprintln!(
                "lazor: wgpu phases: error scopes popped in {:.1} us",
                (t0.elapsed() - t_pop).as_secs_f64() * 1e6
            );
        }
        if outcome.is_err() {
            st.params.forget(&params);
        }
        let kept: Vec<BufferKey> = match outcome {
            Ok(()) => job.keep.iter().map(|&s| keys[s].take().expect("kept buffers exist")).collect(),
            Err(_) => Vec::new(),
        };
        // What this job created and nobody keeps goes back: everything on failure (the values may be garbage).
        for (b, key) in job.buffers.iter().zip(keys) {
            if let (Some(key), false) = (key, matches!(b.data, Data::Existing(_))) {
                st.pool.release(key, stats);
            }
        }
        outcome?;
        let reads = staged
            .into_iter()
            .zip(job.reads)
            .map(|(buffer, &slot)| st.reads.insert(readback::Pending::start(buffer, job.buffers[slot].bytes)))
            .collect();
        Ok(Done { kept, reads })
    }
}
