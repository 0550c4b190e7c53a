//! Running a job on wgpu: uploads, parameters (cached by content), kernels recorded into the batch's compute pass,
//! read-back copies, and a submit unless the batch is held back.

use super::gpu::Scopes;
use super::{batch, pool, readback, timing, WgpuBackend};
use crate::backend::wgpu::codegen;
use crate::backend::{Data, Done, Job, JobBuffer};
use crate::buffer::BufferKey;
use crate::error::Result;
use crate::profile::Stats;
use smallvec::SmallVec;

/// Bytes a binding of a `bytes`-byte value covers: whole 16-byte vectors (buffers are allocated in 256-byte steps).
fn bound(bytes: u64) -> u64 {
    bytes.next_multiple_of(16).max(16)
}

/// Gives back to the pool the buffers of `keys` the job created (not those it was handed).
fn release_created(pool: &mut pool::Pool, buffers: &[JobBuffer], keys: Vec<Option<BufferKey>>, stats: &mut Stats) {
    for (b, key) in buffers.iter().zip(keys) {
        // A buffer stored into in place is the input's, which the job was handed.
        if let (Some(key), false) = (key, matches!(b.data, Data::Existing(_) | Data::Alias(_))) {
            pool.release(key, stats);
        }
    }
}

impl WgpuBackend {
    /// The pipeline of a dispatch's `members`, whose WGSL for `target` is `wgsl`: through the SPIR-V path where
    /// they ask for it and the device has one ([`codegen::edits`]), else (or where that fails) from WGSL.
    #[allow(clippy::too_many_arguments)]
    fn compile(
        &self,
        st: &mut super::WgpuState,
        members: &[crate::kernel::Kernel],
        target: &codegen::Target,
        wgsl: String,
        name: &str,
        trusted: bool,
        debug: u32,
        stats: &mut Stats,
    ) -> Result<std::sync::Arc<super::pipelines::Compiled>> {
        let gpu = &self.gpu;
        #[cfg(not(target_arch = "wasm32"))]
        if let (Some(edits), Some(lang)) = (codegen::edits(members, target, gpu.spirv_mode), gpu.spirv) {
            match st.pipelines.get_spirv(&gpu.device, &wgsl, name, edits, lang, trusted, debug, stats) {
                Ok(p) => return Ok(p),
                Err(e) => {
                    if debug >= 1 && !std::mem::replace(&mut st.spirv_refused, true) {
                        eprintln!("lazor: the SPIR-V path refused a kernel, which runs from WGSL instead: {e}");
                    }
                    if edits.bf16 {
                        // Its source stands for bf16 on the SPIR-V path only: as WGSL it is the tiled product.
                        let tiled = codegen::Target { bf16_coop: false, ..*target };
                        let wgsl = codegen::dispatch_source(members, &tiled);
                        return st.pipelines.get(&gpu.device, &wgsl, name, trusted, debug, stats);
                    }
                }
            }
        }
        #[cfg(target_arch = "wasm32")]
        let _ = (members, target);
        st.pipelines.get(&gpu.device, &wgsl, name, trusted, debug, stats)
    }

    /// Each dispatch's pipeline (the kernels of `runs`): those of the job's plan family where one ran before, else
    /// each looked up by its structure, or generated and compiled, and kept for the family.
    #[allow(clippy::too_many_arguments)]
    fn pipelines(
        &self,
        st: &mut super::WgpuState,
        kernels: &[crate::kernel::Kernel],
        family: Option<u64>,
        runs: &[std::ops::Range<usize>],
        target: &codegen::Target,
        debug: u32,
        stats: &mut Stats,
    ) -> Result<super::pipelines::Dispatches> {
        if let Some(known) = family.and_then(|f| st.pipelines.family(f, target, runs.len(), stats)) {
            return Ok(known);
        }
        let gpu = &self.gpu;
        let mut compiled = Vec::with_capacity(runs.len());
        for run in runs {
            let members = &kernels[run.clone()];
            let key: Vec<codegen::Key> = members.iter().map(|k| codegen::Key::of(k, target)).collect();
            let p = match st.pipelines.lookup(&key, stats) {
                Some(p) => p,
                None => {
                    // Compiling can take long; what is held back runs meanwhile.
                    self.flush(st);
                    let wgsl = codegen::dispatch_source(members, target);
                    let name = members.iter().map(|k| k.name()).collect::<Vec<_>>().join(" | ");
                    // A matmul's indices are in range by construction: every load and store is guarded by the
                    // sizes and every view was checked when it was made, so wgpu's own checks are redundant.
                    // Products run alone (`schedule/dispatch.rs`), so a shader of several kernels keeps its checks.
                    let trusted =
                        members.iter().all(|k| matches!(k.kind, crate::kernel::Kind::Matmul(_))) && !gpu.checked;
                    let p = self.compile(st, members, target, wgsl, &name, trusted, debug, stats)?;
                    st.pipelines.remember(key, p.clone());
                    p
                }
            };
            compiled.push(p);
        }
        let compiled: super::pipelines::Dispatches = compiled.into();
        if let Some(f) = family {
            st.pipelines.remember_family(f, *target, compiled.clone());
        }
        Ok(compiled)
    }

    pub(super) fn execute(&self, job: Job<'_>, stats: &mut Stats, debug: u32) -> Result<Done> {
        let gpu = &self.gpu;
        let mut guard = self.state();
        let st = &mut *guard;
        let t0 = crate::env::Instant::now();
        let scopes = Scopes::push(&gpu.device);
        let compiled_before = stats.pipelines_compiled;
        st.bind_groups.sync(st.pool.dropped);

        // Every pipeline first: a kernel that fails to compile fails the realize before anything is recorded into
        // the batch, which may hold other realizes. Kernels joined into one dispatch share one pipeline.
        let target = self.target();
        let runs = crate::kernel::dispatches(job.kernels);
        let compiled = match self.pipelines(st, job.kernels, job.family, &runs, &target, debug, stats) {
            Ok(compiled) => compiled,
            Err(e) => {
                drop(scopes.pop());
                return Err(e);
            }
        };
        let t_pipelines = t0.elapsed();
        let max_groups = gpu.limits.max_compute_workgroups_per_dimension;
        // All kernels' parameters in one buffer, each at an aligned offset and bound whole 16-byte rows, as the
        // array of rows the shader declares (`codegen::param_vecs`).
        let align = gpu.limits.min_uniform_buffer_offset_alignment.max(gpu.limits.min_storage_buffer_offset_alignment);
        // A dispatch of several kernels also has a block of its own: where each member's workgroups start.
        let mut params: Vec<u32> = Vec::new();
        let mut block = |words: &[u32]| {
            while (params.len() as u64 * 4) % align as u64 != 0 {
                params.push(0);
            }
            let (start, rows) = (params.len(), codegen::param_vecs(words.len()));
            params.extend_from_slice(words);
            params.resize(start + rows * 4, 0);
            (start as u64 * 4, rows as u64 * 16)
        };
        let param_at: Vec<(u64, u64)> = job.kernels.iter().map(|k| block(&k.params)).collect();
        let grid = |k: &crate::kernel::Kernel| codegen::dispatch_size(k.threads(), max_groups);
        // Per dispatch: its threads, and a group's parameter block.
        let mut shapes: Vec<(usize, Option<(u64, u64)>)> = Vec::with_capacity(runs.len());
        for run in &runs {
            shapes.push(match &job.kernels[run.clone()] {
                [one] => (one.threads(), None),
                many => {
                    let grids: Vec<(u32, u32)> = many.iter().map(grid).collect();
                    let groups: u32 = grids.iter().map(|&(x, y)| x * y).sum();
                    (
                        groups as usize * codegen::WORKGROUP_SIZE as usize,
                        Some(block(&codegen::dispatch::params(&grids))),
                    )
                }
            });
        }
        // `queue.write_buffer` lands before the next submit's commands, so it would overtake held-back realizes
        // that read the buffer it overwrites. Uploads may go into a pooled buffer such a realize released: those
        // realizes go first. A new parameter block goes into a buffer no held-back realize binds (`Params::get`).
        let uploads = job.buffers.iter().any(|b| matches!(b.data, Data::Upload(_)));
        if uploads {
            self.flush(st);
        }
        // Dispatches are numbered from 1; the open batch (or the one this job opens) holds those from `first` on.
        let first = st.batch.as_ref().map_or(st.recorded + 1, |b| b.first);

        // Buffers of the job: existing ones by key, uploads written now (they land with the next submit), fresh
        // ones taken from the pool when their kernel runs.
        let mut keys: Vec<Option<BufferKey>> = Vec::with_capacity(job.buffers.len());
        for b in &job.buffers {
            keys.push(match b.data {
                Data::Existing(key) => Some(key),
                Data::Upload(values) => {
                    let bytes: &[u8] = bytemuck::cast_slice(values);
                    // Nothing is held (uploads flushed the batch): every buffer's users were submitted.
                    let key = st.pool.alloc(&gpu.device, bytes.len() as u64, st.recorded, stats);
                    gpu.queue.write_buffer(st.pool.get(key), 0, bytes);
                    stats.bytes_uploaded += bytes.len() as u64;
                    Some(key)
                }
                Data::Fresh | Data::Alias(_) => None,
            });
        }
        let param_buf = (!params.is_empty()).then(|| {
            let last = st.recorded + job.kernels.len() as u64;
            let (buffer, dropped) = st.params.get(&gpu.device, &gpu.queue, &params, first - 1, last, stats);
            if let Some(dropped) = dropped {
                st.bind_groups.forget(&dropped);
            }
            buffer
        });

        let t_params = t0.elapsed();
        let created_before = stats.bind_groups_created;
        // Buffers and bind groups of every kernel, in the order the kernels run (a buffer released after kernel n
        // may hold an output of kernel n + 1), and the read-backs' staging buffers: all that can fail, before
        // anything is recorded into the batch. A bad command would poison the batch's pass and with it the
        // held-back realizes of other calls.
        let mut dispatches = Vec::with_capacity(runs.len());
        for (r, run) in runs.iter().enumerate() {
            let mut ranges: SmallVec<[(u32, wgpu::Buffer, u64, u64); 8]> = SmallVec::new();
            let param_buf = param_buf.clone().expect("params");
            let (threads, group_block) = shapes[r];
            if let Some((offset, size)) = group_block {
                ranges.push((0, param_buf.clone(), offset, size));
            }
            let mut base = u32::from(run.len() > 1);
            for n in run.clone() {
                let kernel = &job.kernels[n];
                let number = st.recorded + 1 + n as u64;
                let waits =
                    kernel.inputs.iter().any(|&(slot, _)| keys[slot].is_some_and(|k| st.pool.written(k) >= first));
                let settled = batch::settled(first, number, waits);
                for &(slot, _) in &kernel.outputs {
                    let key = match (&job.buffers[slot].data, keys[slot]) {
                        (Data::Alias(input), _) => keys[*input].expect("an input stored into exists"),
                        // Other kernels store other parts of it through views: the first of them allocated it.
                        (_, Some(key)) if kernel.store_view.is_some() => key,
                        _ => st.pool.alloc(&gpu.device, job.buffers[slot].bytes, settled, stats),
                    };
                    keys[slot] = Some(key);
                }
                // Bindings: parameters, outputs, inputs; an input stored into is bound once, as its output. A
                // member of a dispatch of several binds after the group's block and the members before it.
                let (offset, size) = param_at[n];
                ranges.push((base, param_buf.clone(), offset, size));
                let outs = kernel.outputs.iter().map(|o| (o.0, true));
                let ins = kernel.inputs.iter().enumerate().filter(|(i, _)| !kernel.aliases.iter().any(|a| a.0 == *i));
                let ins = ins.map(|(i, input)| (kernel.outputs.len() + i, input.0, false));
                for (binding, slot, writes) in outs.enumerate().map(|(o, (slot, w))| (o, slot, w)).chain(ins) {
                    let key = keys[slot].expect("a kernel's inputs are written before it runs");
                    st.pool.touch(key, number, writes);
                    let buffer = st.pool.get(key).clone();
                    ranges.push((base + 1 + binding as u32, buffer, 0, bound(job.buffers[slot].bytes)));
                }
                base += kernel.binding_span() as u32;
                // The queue runs in order: whoever takes this buffer next writes it after this kernel read it.
                // (The schedule frees a dispatch's buffers after its last kernel.)
                for &slot in &job.frees[n] {
                    if let Some(key) = keys[slot].take() {
                        st.pool.release(key, stats);
                    }
                }
            }
            let bind_group = st.bind_groups.get(&gpu.device, &compiled[r].pipeline, &compiled[r].layout, ranges, stats);
            dispatches.push((bind_group, codegen::dispatch_size(threads, max_groups)));
        }
        let staged: Vec<wgpu::Buffer> =
            job.reads.iter().map(|&slot| st.pool.staging(&gpu.device, job.buffers[slot].bytes, stats)).collect();
        let t_upload = t0.elapsed();
        if let Err(e) = scopes.pop() {
            st.params.forget(&params);
            // What this job created goes back: the values may be garbage.
            release_created(&mut st.pool, &job.buffers, keys, stats);
            return Err(e);
        }

        // Recording: valid objects only, so nothing here fails short of a lost device.
        let scopes = Scopes::push(&gpu.device);
        let has_work = !job.kernels.is_empty() || uploads || !job.reads.is_empty();
        let mut batch = st.batch.take().unwrap_or_else(|| batch::Open::new(&gpu.device, first));
        let timing = (job.profile && gpu.timestamps && !job.kernels.is_empty())
            .then(|| timing::Timing::new(&gpu.device, runs.len()));
        if !job.kernels.is_empty() {
            for (n, (bind_group, (x, y))) in dispatches.iter().enumerate() {
                // Profiled, each kernel runs in a pass of its own that writes a timestamp as it starts and ends.
                let pass = match &timing {
                    Some(t) => batch.timed_pass(t.writes(n)),
                    None => batch.pass(),
                };
                pass.set_pipeline(&compiled[n].pipeline);
                pass.set_bind_group(0, bind_group, &[]);
                pass.dispatch_workgroups(*x, *y, 1);
                stats.dispatches += 1;
            }
            st.recorded += job.kernels.len() as u64;
            stats.kernels += job.kernels.len() as u64;
        }
        if let Some(t) = &timing {
            t.resolve(batch.encoder());
        }
        for (&slot, buffer) in job.reads.iter().zip(&staged) {
            let bytes = job.buffers[slot].bytes;
            let src = keys[slot].expect("a read buffer exists");
            batch.encoder().copy_buffer_to_buffer(st.pool.get(src), 0, buffer, 0, bytes);
            stats.bytes_downloaded += bytes;
        }
        let t_encode = t0.elapsed();
        if has_work {
            batch.realizes += 1;
        }
        // Submit now when something waits for this realize (a read), when the GPU has nothing in flight, when the
        // batch is full, or when it is large enough to queue behind the running submit (`batch::submit_now`);
        // else hold it back for the submit thread, which submits it when the queue runs dry.
        // A batch holding nothing (this realize had no GPU work and none was held) is dropped.
        // Completions are counted when someone polls: for a realize that starts a batch, a poll that does not
        // block brings the count up to date (none of lazor's callbacks takes the state lock held here). A realize
        // joining a held batch skips it: the GPU was busy a moment ago, and the submit thread watches it.
        if batch.realizes <= 1 && st.in_flight.count() > 0 {
            let _ = gpu.device.poll(wgpu::PollType::Poll);
        }
        let depth = self.depth.load(std::sync::atomic::Ordering::Relaxed);
        let mut submitted = Ok(());
        let held = if batch.realizes == 0 {
            false
        } else if !staged.is_empty()
            // In the browser nothing would submit a held batch later (no submit thread): every realize goes now,
            // and the page's WebGPU queues it behind the running work itself.
            || cfg!(target_arch = "wasm32")
            || job.profile
            || batch.realizes >= batch::MAX_REALIZES
            || st.in_flight.room(depth, batch.realizes)
        {
            submitted = self.submit(st, batch);
            false
        } else {
            st.batch = Some(batch);
            self.wake();
            true
        };
        // New pipelines go to disk now, while the GPU runs them.
        if stats.pipelines_compiled > compiled_before {
            st.pipelines.save();
        }
        if debug >= 3 {
            eprintln!(
                "lazor: wgpu phases: pipelines {:.1} us, uploads+params {:.1} us, buffers+bind groups {:.1} us ({} of {} groups created), record {:.1} us, {} {:.1} us",
                t_pipelines.as_secs_f64() * 1e6,
                (t_params - t_pipelines).as_secs_f64() * 1e6,
                (t_upload - t_params).as_secs_f64() * 1e6,
                stats.bind_groups_created - created_before,
                runs.len(),
                (t_encode - t_upload).as_secs_f64() * 1e6,
                if held { "held back" } else { "submit" },
                (t0.elapsed() - t_encode).as_secs_f64() * 1e6
            );
        }
        // An error here is a lost device or a bug in lazor: wgpu reports bad commands at `finish`, inside `submit`
        // (which poisons the device), and anything else here. The held-back realizes recorded with this one are
        // submitted now, so the error shows at this call rather than at a later one.
        let outcome = scopes.pop().and(submitted);
        if outcome.is_err() {
            self.flush(st);
        }
        let kept: Vec<BufferKey> = match outcome {
            Ok(()) => job.keep.iter().map(|&s| keys[s].take().expect("kept buffers exist")).collect(),
            Err(_) => Vec::new(),
        };
        // What this job created and nobody keeps goes back: everything on failure (the values may be garbage).
        release_created(&mut st.pool, &job.buffers, keys, stats);
        outcome?;
        // Profiled: the kernels' own times, waiting for them (a profile times kernels, not the pipeline).
        // A dispatch's time goes to its first kernel (profiles name the dispatch after all of them).
        let times = match &timing {
            Some(t) => {
                let mut times = vec![None; job.kernels.len()];
                for (run, time) in runs.iter().zip(t.read(gpu)?) {
                    times[run.start] = time;
                }
                times
            }
            None if job.profile => vec![None; job.kernels.len()],
            None => Vec::new(),
        };
        let reads = staged
            .into_iter()
            .zip(job.reads)
            .map(|(buffer, &slot)| st.reads.insert(readback::PendingRead::start(buffer, job.buffers[slot].bytes)))
            .collect();
        // Profiled: which kernels came from SPIR-V, and which products ran on tensor cores (bf16 reaches them only
        // through SPIR-V: a product the path refused ran tiled).
        let marked = |mark: &dyn Fn(usize, bool) -> bool| -> Vec<usize> {
            if !job.profile {
                return Vec::new();
            }
            let each = runs.iter().zip(compiled.iter()).flat_map(|(run, c)| run.clone().map(move |n| (n, c.spirv)));
            each.filter(|&(n, spirv)| mark(n, spirv)).map(|(n, _)| n).collect()
        };
        let spirv = marked(&|_, spirv| spirv);
        let cores = marked(&|n, spirv| {
            let k = &job.kernels[n];
            let crate::kernel::Kind::Matmul(mm) = &k.kind else { return false };
            codegen::uses_coop(k, mm, &target) && (k.types[mm.a] != crate::dtype::DType::BF16 || spirv)
        });
        Ok(Done { kept, reads, times, spirv, cores })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::graph::build::{bin, data, scalar};
    use crate::graph::Graph;
    use crate::kernel::Instr;
    use crate::op::BinaryOp;
    use crate::schedule::{plan, Options};

    #[test]
    fn a_parameter_block_past_16_kib_is_bound_as_storage_and_read_whole() {
        let Some(backend) = crate::backend::wgpu::open_for_test(|| WgpuBackend::open(false)) else { return };
        // `x * 2.5`, its scalar moved to the last word of a block of 4100: past the 4096 a uniform block holds,
        // which only a kernel fused past the default op bound reaches through the API.
        let mut g = Graph::default();
        let x = data(&mut g, &[300]);
        let c = scalar(&mut g, 2.5);
        let y = bin(&mut g, BinaryOp::Mul, x, c);
        let p = plan(&g, &[y], &Options::TEST);
        let mut k = p.kernels[0].clone();
        let at = k.body.iter().position(|i| matches!(i, Instr::Scalar(_))).expect("the scalar");
        k.params.resize(4100, 0);
        k.params[4099] = 2.5f32.to_bits();
        k.body[at] = Instr::Scalar(4099);
        assert!(codegen::generate(&k, &backend.target()).contains("var<storage, read> p: array<vec4<u32>, 1025>;"));
        let values: Vec<f32> = (0..300).map(|i| i as f32 - 150.0).collect();
        let words: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
        let (input, output) = (k.inputs[0].0, k.outputs[0].0);
        let slots = input.max(output) + 1;
        let buffers = (0..slots)
            .map(|s| JobBuffer { bytes: 1200, data: if s == input { Data::Upload(&words) } else { Data::Fresh } })
            .collect();
        let kernels = [k];
        let job = Job {
            buffers,
            kernels: &kernels,
            family: None,
            frees: &[vec![]],
            keep: &[],
            reads: &[output],
            profile: false,
        };
        let mut stats = Stats::default();
        let done = backend.run(job, &mut stats, 0).expect("runs");
        let got = backend.take_read(done.reads[0]).expect("reads back");
        let want: Vec<u32> = values.iter().map(|v| (v * 2.5).to_bits()).collect();
        assert_eq!(&got[..300], &want[..]);
    }
}
