//! The realize orchestrator: the one caller of the scheduler and the backend. Its [`Engine`] owns a device's
//! backend, graph, counters and plans; it plans, hands the backend a job, marks results realized, counts `Stats`
//! and prints the `LAZOR_DEBUG` lines. `Device` is a handle on an engine.

use crate::backend::{Backends, Data, Job, JobBuffer, ReadId};
use crate::buffer::BufferKey;
use crate::env::Instant;
use crate::error::{Error, Result};
use crate::graph::{Graph, NodeId, NodeOp};
use crate::profile::Stats;
use crate::schedule::{Options, Plan, PlanCache, Source};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll};

/// A device's graph and counters, behind one lock: realizes on one device run one at a time.
#[derive(Default)]
pub(crate) struct EngineState {
    pub graph: Graph,
    pub stats: Stats,
    pub plans: PlanCache,
    /// While `Device::profile` runs: every kernel run, in order.
    pub profile: Option<Vec<crate::profile::Run>>,
}

/// The engine of one device: its backend, its graph, counters and plans behind one lock (realizes on one device
/// run one at a time), and the knobs the scheduler reads.
pub(crate) struct Engine {
    pub backend: Backends,
    state: Mutex<EngineState>,
    fuse: AtomicBool,
    group: AtomicBool,
    /// `LAZOR_MAX_FUSED_OPS`, read once.
    pub max_ops: usize,
    /// `LAZOR_DEBUG`, read once.
    pub debug: u32,
}

impl Engine {
    /// An engine on `backend`, with the knobs `LAZOR_NOFUSE`, `LAZOR_GROUP`, `LAZOR_MAX_FUSED_OPS` and
    /// `LAZOR_DEBUG` read now.
    pub(crate) fn new(backend: Backends) -> Engine {
        Engine {
            backend,
            state: Mutex::new(EngineState::default()),
            fuse: AtomicBool::new(!crate::env::nofuse()),
            group: AtomicBool::new(crate::env::group()),
            max_ops: crate::env::max_fused_ops(),
            debug: crate::env::debug_level(),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, EngineState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn fusion(&self) -> bool {
        self.fuse.load(Ordering::Relaxed)
    }

    pub(crate) fn set_fusion(&self, on: bool) {
        self.fuse.store(on, Ordering::Relaxed);
    }

    pub(crate) fn grouping(&self) -> bool {
        self.group.load(Ordering::Relaxed)
    }

    pub(crate) fn set_grouping(&self, on: bool) {
        self.group.store(on, Ordering::Relaxed);
    }

    pub(crate) fn name(&self) -> String {
        self.backend.name()
    }
}

impl Drop for Engine {
    /// A device dropped while `LAZOR_PROFILE=1` collected its kernels prints their table.
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(runs) = state.profile.take() {
            crate::profile::print_on_drop(runs, self.backend.name());
        }
    }
}

/// Returns an error when some value of the plan needs more bytes than one binding can cover.
fn check_sizes(graph: &Graph, plan: &Plan, limit: u64) -> Result<()> {
    for slot in plan.slots.iter().filter(|s| !matches!(s.source, Source::Existing(_))) {
        // Padded to a whole vec4, as kernels bind it.
        let bytes = slot.bytes.next_multiple_of(16);
        if bytes > limit {
            return Err(Error::TooLarge { shape: graph.node(slot.node).shape.clone(), bytes, limit });
        }
    }
    Ok(())
}

/// Writes one realize's graph to `dir` (`LAZOR_VIZ`); a failure to write is reported once, never an error.
fn write_viz(dir: &std::path::Path, realize: u64, text: &str) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let path = dir.join(format!("realize-{realize:06}.dot"));
    let written = std::fs::create_dir_all(dir).and_then(|_| std::fs::write(&path, text));
    if let Err(e) = written {
        if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            eprintln!("lazor: LAZOR_VIZ: cannot write {}: {e}", path.display());
        }
    }
}

impl Engine {
    /// The scheduler's options for this device as it is set now.
    pub(crate) fn schedule_options(&self) -> Options {
        let backend = &*self.backend;
        Options {
            fuse: self.fusion(),
            group: self.grouping(),
            max_bindings: backend.max_bindings(),
            max_ops: self.max_ops,
            matmul_tile: crate::env::matmul_tile().map(|[bm, bn, bk, tm, tn]| crate::kernel::MatmulTile {
                bm,
                bn,
                bk,
                tm,
                tn,
            }),
            matmul_tiles: backend.matmul_tiles(),
            row_team_min: backend.row_team_min(),
            workgroup_bytes: backend.workgroup_bytes(),
            half_operands: backend.half_operands(),
        }
    }

    /// Gives buffers of freed nodes back to the backend.
    pub(crate) fn free(&self, stats: &mut Stats, freed: Vec<BufferKey>) {
        for key in freed {
            self.backend.release(key, stats);
        }
    }

    /// Realizes `outputs` as one job and, in it, starts reading back each of `read` (a subset of `outputs`).
    /// Returns the read-backs in the order of `read`; `None` for an empty tensor.
    pub(crate) fn run(&self, outputs: &[NodeId], read: &[NodeId]) -> Result<Vec<Option<ReadId>>> {
        self.run_job(outputs, read).map_err(|e| e.on_device(&self.name()))
    }

    /// [`Engine::run`], its runtime errors not yet naming the device.
    fn run_job(&self, outputs: &[NodeId], read: &[NodeId]) -> Result<Vec<Option<ReadId>>> {
        let backend = &*self.backend;
        backend.check_health()?;
        let start = Instant::now();
        let debug = self.debug;
        let opts = self.schedule_options();
        let mut guard = self.state();
        let EngineState { graph, stats, plans, profile } = &mut *guard;
        if let Some(dir) = crate::env::viz_dir() {
            write_viz(dir, stats.realizes, &crate::schedule::dot::graph_dot(graph, outputs, &opts));
        }
        let (plan, reused) = plans.plan(graph, outputs, &opts);
        stats.plans_reused += u64::from(reused);
        check_sizes(graph, &plan, backend.max_buffer_bytes())?;
        let before = *stats;
        stats.realizes += 1;

        let buffers = || {
            plan.slots
                .iter()
                .map(|s| JobBuffer {
                    bytes: s.bytes,
                    data: match s.source {
                        Source::Existing(key) => Data::Existing(key),
                        Source::Upload => match &graph.node(s.node).op {
                            NodeOp::Data(values) => Data::Upload(values),
                            _ => unreachable!("uploads are data"),
                        },
                        Source::Kernel | Source::Scratch => Data::Fresh,
                        Source::Alias(donor) => Data::Alias(donor),
                    },
                })
                .collect()
        };
        // Uploads and requested outputs keep their buffers; other kernel outputs were intermediates.
        let keep: Vec<usize> = (0..plan.slots.len())
            .filter(|&s| match plan.slots[s].source {
                Source::Upload => true,
                Source::Kernel | Source::Alias(_) => plan.outputs.contains(&plan.slots[s].node),
                Source::Existing(_) | Source::Scratch => false,
            })
            .collect();
        let reads: Vec<Option<usize>> = read.iter().map(|&id| plan.slot_of(id)).collect();
        let read_slots: Vec<usize> = reads.iter().flatten().copied().collect();
        let profiling = profile.is_some();
        let job = |buffers| Job {
            buffers,
            kernels: &plan.kernels,
            family: plan.family,
            frees: &plan.frees,
            keep: &keep,
            reads: &read_slots,
            profile: profiling,
        };
        let planned = start.elapsed();
        let done = match backend.run(job(buffers()), stats, debug) {
            // Free buffers kept for reuse may be what is missing: give them back and try once more.
            Err(Error::OutOfMemory(_)) if backend.trim() > 0 => backend.run(job(buffers()), stats, debug)?,
            outcome => outcome?,
        };
        if let Some(runs) = profile.as_mut() {
            for (n, kernel) in plan.kernels.iter().enumerate() {
                let slots = kernel.inputs.iter().map(|i| i.0).chain(kernel.outputs.iter().map(|o| o.0));
                let bytes = slots.map(|s| plan.slots[s].bytes).sum();
                let mut run = crate::profile::Run::of(kernel, bytes, done.times.get(n).copied().flatten());
                if done.spirv.contains(&n) {
                    // Profiles say which path compiled a kernel: the SPIR-V path's are marked.
                    run.name.push_str(" [spirv]");
                }
                if done.cores.contains(&n) {
                    run.name.push_str(" [tensor cores]");
                }
                // Kernels of one dispatch are one run, timed together.
                match runs.last_mut() {
                    Some(last) if kernel.joins => last.join(run),
                    _ => runs.push(run),
                }
            }
        }

        // A buffer an output was stored into is the output's now: the input it held dies without freeing it.
        for slot in &plan.slots {
            if let Source::Alias(donor) = slot.source {
                graph.take_buffer(plan.slots[donor].node);
            }
        }
        // Uploads first: realizing an output may free data that only it needed, buffer included.
        let mut kept: Vec<(usize, BufferKey)> = keep.iter().copied().zip(done.kept).collect();
        kept.sort_by_key(|&(slot, _)| plan.slots[slot].source != Source::Upload);
        for (slot, key) in kept {
            let mut freed = Vec::new();
            // A realized node becomes a leaf holding its buffer and lets go of its inputs.
            graph.set_realized(plan.slots[slot].node, Some(key), &mut freed);
            self.free(stats, freed);
        }
        // Empty outputs last: realizing one may free nodes the job still named.
        for &id in &plan.empty {
            if graph.contains(id) {
                let mut freed = Vec::new();
                graph.set_realized(id, None, &mut freed);
                self.free(stats, freed);
            }
        }
        let ran = start.elapsed();
        if debug >= 1 {
            let s = *stats;
            eprintln!(
                "lazor: realize #{}: {} nodes, {} kernels, {} dispatches, {} B up, {} B down, {} compiled, {:.3} ms (plan{} {:.3}, backend {:.3})",
                s.realizes,
                plan.nodes,
                plan.kernels.len(),
                s.dispatches - before.dispatches,
                s.bytes_uploaded - before.bytes_uploaded,
                s.bytes_downloaded - before.bytes_downloaded,
                s.pipelines_compiled - before.pipelines_compiled,
                start.elapsed().as_secs_f64() * 1e3,
                if reused { " reused" } else { "" },
                planned.as_secs_f64() * 1e3,
                (ran - planned).as_secs_f64() * 1e3
            );
        }
        let mut tickets = done.reads.into_iter();
        Ok(reads.iter().map(|r| r.and_then(|_| tickets.next())).collect())
    }

    /// Hands over finished read-backs, in order; the first failure wins, and the rest are still collected.
    fn collect(&self, tickets: Vec<Option<ReadId>>) -> Result<Vec<Vec<u32>>> {
        let mut out = Vec::with_capacity(tickets.len());
        let mut first_err = None;
        for t in tickets {
            match t.map_or(Ok(Vec::new()), |id| self.backend.take_read(id)) {
                Ok(v) => out.push(v),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(out), |e: Error| Err(e.on_device(&self.name())))
    }

    /// Realizes `ids` in one job and reads back the words of their buffers, blocking.
    pub(crate) fn read(&self, ids: &[NodeId]) -> Result<Vec<Vec<u32>>> {
        let tickets = self.run(ids, ids)?;
        self.collect(tickets)
    }

    /// Realizes `id` and lends its words to `f` (no words for an empty tensor), blocking.
    pub(crate) fn read_with(&self, id: NodeId, f: &mut dyn FnMut(&[u32])) -> Result<()> {
        match self.run(&[id], &[id])?.pop().flatten() {
            Some(ticket) => self.backend.read_with(ticket, f),
            None => {
                f(&[]);
                Ok(())
            }
        }
    }

    /// Realizes `ids` in one job and reads them back without blocking the caller's thread on the device.
    pub(crate) async fn read_async(&self, ids: &[NodeId]) -> Result<Vec<Vec<u32>>> {
        let mut pending = UncollectedReads { engine: self, tickets: self.run(ids, ids)? };
        ReadsDone { engine: self, tickets: &pending.tickets }.await?;
        // In the browser errors arrive through the event loop, before the read they spoil.
        self.backend.check_health().map_err(|e| e.on_device(&self.name()))?;
        self.collect(std::mem::take(&mut pending.tickets))
    }

    /// Resolves once everything submitted to the device so far has run, without blocking the caller's thread.
    pub(crate) async fn idle_async(&self) -> Result<()> {
        if let Some(idle) = self.backend.when_idle() {
            Idle { engine: self, idle }.await?;
        }
        self.backend.check_health().map_err(|e| e.on_device(&self.name()))
    }
}

/// Resolves once the backend's work-done signal is set; polls like [`ReadsDone`].
struct Idle<'a> {
    engine: &'a Engine,
    idle: crate::backend::signal::Signal<()>,
}

impl Future for Idle<'_> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Err(e) = self.engine.backend.poll() {
            return Poll::Ready(Err(e.on_device(&self.engine.name())));
        }
        if self.idle.is_set() {
            return Poll::Ready(Ok(()));
        }
        // Natively the callback runs when someone polls, so ask to be polled again; in the browser it runs from
        // the event loop, which a task that keeps waking itself would starve.
        if cfg!(target_arch = "wasm32") {
            self.idle.wake_when_set(cx.waker());
        } else {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

/// Read-backs not yet collected: discarded if the future fails or is dropped, so no staging buffer stays behind.
struct UncollectedReads<'a> {
    engine: &'a Engine,
    tickets: Vec<Option<ReadId>>,
}

impl Drop for UncollectedReads<'_> {
    fn drop(&mut self) {
        for id in self.tickets.drain(..).flatten() {
            self.engine.backend.discard_read(id);
        }
    }
}

/// Resolves once every read-back has arrived. Each poll lets the backend make progress without blocking; until
/// then the future asks to be polled again, which yields to the executor between checks, or, in the browser, to
/// be woken by the read's callback ([`crate::backend::Backend::wake_when_read`]).
struct ReadsDone<'a> {
    engine: &'a Engine,
    tickets: &'a [Option<ReadId>],
}

impl Future for ReadsDone<'_> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let backend = &*self.engine.backend;
        if let Err(e) = backend.poll() {
            return Poll::Ready(Err(e));
        }
        match self.tickets.iter().flatten().find(|&&t| !backend.read_ready(t)) {
            None => Poll::Ready(Ok(())),
            Some(&t) => {
                backend.wake_when_read(t, cx.waker());
                Poll::Pending
            }
        }
    }
}
