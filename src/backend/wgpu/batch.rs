//! Submit batching: while the GPU has work queued, realizes are recorded into one open compute pass and submitted
//! together; a thread submits what is held back as soon as the queue has room.

// Each queue submit leaves the GPU idle for a while and costs the host time (encoding the pass, vkQueueSubmit), each a
// sizable part of what a 4096 x 4096 layer norm takes to run, so a loop of realizes that each submitted was bound by
// the host, and the GPU idled between submits (figures: docs/notes/source-measurements.md,
// `src/backend/wgpu/batch.rs`). So a realize made while a submit is in flight records into the open pass and returns.
// The batch is submitted behind the running submit once it holds twice as many
// realizes (by the realize that makes it so), or by the device's submit thread when the queue runs dry. A read, `synchronize`, `flush` or a full
// batch submits at once, and so does a realize onto an idle GPU, which keeps a single realize as quick as before.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Realizes one batch holds at most: past this a batch is submitted whatever the queue holds, which bounds the
/// commands recorded on the host and the latency of the first realize in it.
pub const MAX_REALIZES: u32 = 64;

/// Submits the submit thread keeps in flight, unless `LAZOR_QUEUE_DEPTH` says otherwise: one running and one queued
/// behind it once the held batch is twice the running one, so batches double while the host stays ahead and the GPU
/// starts the next the moment one ends. In `benches/queue_depth.rs`, depth 2 moved as many bytes a second as depth 1
/// or more, for row and column sums, softmax and layer norm; queuing a batch merely as large as the running one did
/// worse for layer norm, which then submitted about once per realize (figures: docs/notes/source-measurements.md,
/// `src/backend/wgpu/batch.rs`).
pub const DEFAULT_DEPTH: usize = 2;

/// A command encoder with one compute pass open in it, holding the realizes recorded since the last submit.
pub struct Open {
    /// `None` once the pass has ended (read-back copies go on the encoder after it).
    pass: Option<wgpu::ComputePass<'static>>,
    encoder: wgpu::CommandEncoder,
    /// Realizes recorded into this batch.
    pub realizes: u32,
    /// The number its first dispatch has (or will have) among the device's dispatches: those before it were
    /// submitted.
    pub first: u64,
}

impl Open {
    /// An empty batch whose first dispatch will be number `first`.
    pub fn new(device: &wgpu::Device, first: u64) -> Open {
        let encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("lazor") });
        Open { pass: None, encoder, realizes: 0, first }
    }

    /// The open compute pass, begun on first use. A batch whose pass has ended gets no more kernels: the caller
    /// submits it right after its read-back copies.
    pub fn pass(&mut self) -> &mut wgpu::ComputePass<'static> {
        let encoder = &mut self.encoder;
        self.pass.get_or_insert_with(|| {
            encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default()).forget_lifetime()
        })
    }

    /// A new compute pass whose start and end write the timestamps `writes` names (the pass before it ends): one
    /// kernel's GPU time, for profiles.
    pub fn timed_pass(&mut self, writes: wgpu::ComputePassTimestampWrites<'_>) -> &mut wgpu::ComputePass<'static> {
        self.pass = None;
        let desc = wgpu::ComputePassDescriptor { label: Some("lazor timed"), timestamp_writes: Some(writes) };
        self.pass.insert(self.encoder.begin_compute_pass(&desc).forget_lifetime())
    }

    /// The encoder, for copies after the kernels: ends the pass.
    pub fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        &mut self.encoder
    }

    /// Ends the pass and the encoder.
    pub fn finish(mut self) -> wgpu::CommandBuffer {
        self.pass = None;
        self.encoder.finish()
    }
}

/// Whether a held batch of `held` realizes goes to the GPU now, with `in_flight` submits unfinished, the last of
/// them carrying `last` realizes: always onto an idle queue; onto a busy one only below `depth` and only when the
/// batch carries at least twice as many realizes as the submit it would queue behind, since each submit boundary
/// costs the GPU the same idle time however much the submit holds: batches double (1, 2, 4, 8, 16) while the host
/// keeps ahead. Depth 0 holds everything back.
pub fn submit_now(in_flight: usize, depth: usize, held: u32, last: u32) -> bool {
    depth > 0 && (in_flight == 0 || (in_flight < depth && held >= 2 * last))
}

/// The last dispatch whose buffers dispatch `next` may take from the pool without making it wait: one submitted
/// in an earlier batch (the open batch holds dispatches from `first` on), or, when `next` waits anyway (it reads
/// what a dispatch of this batch wrote), any before it.
///
/// wgpu orders two dispatches of one batch that write one buffer, or where one writes what the other reads, with a
/// pipeline barrier, which waits for everything recorded before it: the GPU drains, and the next kernel cannot
/// start while the last one's final workgroups run. Handing a loop's next realize the buffer its last result (just
/// dropped) was written to put such a barrier between every two kernels: held realizes of a [4096, 4096] layer norm, a
/// softmax or a row sum each took noticeably longer that way than with distinct output buffers (figures:
/// docs/notes/source-measurements.md, `src/backend/wgpu/batch.rs`). So within a batch, independent kernels get buffers
/// no dispatch of the batch used, while the pool has room for new ones (see `Pool::alloc`); a kernel that waits anyway
/// reuses freely.
pub fn settled(first: u64, next: u64, waits: bool) -> u64 {
    if waits {
        next - 1
    } else {
        first - 1
    }
}

/// Submits made and finished, counted by wgpu's completion callbacks (which run whenever wgpu polls: on every
/// submit and every wait).
#[derive(Default)]
pub struct InFlight {
    /// Submits not yet seen finished: their number and the realizes they carry.
    sent: VecDeque<(u64, u32)>,
    /// Submits made.
    made: u64,
    /// Submits finished, set by the callbacks.
    done: Arc<AtomicU64>,
}

impl InFlight {
    /// Submits `commands`, which carry `realizes` realizes, and counts them.
    pub fn submit(&mut self, queue: &wgpu::Queue, commands: wgpu::CommandBuffer, realizes: u32) {
        queue.submit([commands]);
        self.made += 1;
        let number = self.made;
        let done = self.done.clone();
        queue.on_submitted_work_done(move || {
            done.fetch_max(number, Ordering::AcqRel);
        });
        self.sent.push_back((number, realizes));
    }

    /// Submits made so far.
    pub fn made(&self) -> u64 {
        self.made
    }

    /// Submits not known to be finished.
    pub fn count(&mut self) -> usize {
        let done = self.done.load(Ordering::Acquire);
        while self.sent.front().is_some_and(|&(n, _)| n <= done) {
            self.sent.pop_front();
        }
        (self.made - done) as usize
    }

    /// Whether a held batch of `held` realizes goes to the GPU now (see [`submit_now`]).
    pub fn room(&mut self, depth: usize, held: u32) -> bool {
        let n = self.count();
        submit_now(n, depth, held, self.sent.back().map_or(0, |s| s.1))
    }
}

#[cfg(test)]
mod tests {
    use super::submit_now;

    #[test]
    fn buffers_settle_when_submitted_or_when_the_kernel_waits_anyway() {
        use super::settled;
        // A batch opened at dispatch 101: everything up to 100 was submitted.
        assert_eq!(settled(101, 101, false), 100);
        assert_eq!(settled(101, 140, false), 100, "an independent kernel takes nothing this batch used");
        assert_eq!(settled(101, 140, true), 139, "a kernel behind a barrier anyway takes anything");
        assert_eq!(settled(1, 1, false), 0, "the first dispatch of a device");
    }

    #[test]
    fn an_idle_queue_takes_any_batch_and_a_busy_one_only_a_batch_twice_the_last_submit() {
        assert!(submit_now(0, 2, 1, 0));
        assert!(submit_now(0, 2, 1, 40), "idle: the size of the last submit does not matter");
        assert!(submit_now(1, 2, 6, 3));
        assert!(!submit_now(1, 2, 5, 3), "busy: too small to be worth a submit boundary yet");
        assert!(!submit_now(2, 2, 64, 1), "full");
        assert!(!submit_now(0, 0, 5, 0), "depth 0 holds everything");
        assert!(submit_now(3, 4, 16, 8));
        assert!(!submit_now(1, 1, 64, 1), "depth 1 waits for the queue to empty");
    }
}
