//! Reading results back: map the staging copies a realize made, wait (blocking or as a future), copy out.

use super::execute::Staged;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::graph::NodeId;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// One map request's outcome, filled in by wgpu's callback.
type Slot = Arc<Mutex<Option<Result<(), String>>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts mapping every staging buffer.
fn map_all(staged: &[Option<Staged>]) -> Vec<Slot> {
    staged
        .iter()
        .flatten()
        .map(|s| {
            let slot: Slot = Arc::new(Mutex::new(None));
            let done = slot.clone();
            s.buffer.map_async(wgpu::MapMode::Read, 0..s.bytes, move |r| {
                *lock(&done) = Some(r.map_err(|e| e.to_string()));
            });
            slot
        })
        .collect()
}

impl Device {
    /// Copies the mapped staging buffers out and returns them to the pool.
    fn collect(&self, staged: Vec<Option<Staged>>, slots: &[Slot]) -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(staged.len());
        let mut slots = slots.iter();
        let mut first_err = None;
        for s in staged {
            let Some(s) = s else {
                out.push(Vec::new());
                continue;
            };
            let slot = slots.next().expect("one slot per staged buffer");
            let status = lock(slot).take().unwrap_or_else(|| Err("map callback never ran".into()));
            let values = status.and_then(|()| {
                let view = s.buffer.get_mapped_range(0..s.bytes).map_err(|e| e.to_string())?;
                Ok(bytemuck::pod_collect_to_vec::<u8, f32>(&view))
            });
            match values {
                Ok(v) => {
                    s.buffer.unmap();
                    self.state().pool.release_staging(s.buffer);
                    out.push(v);
                }
                Err(e) => {
                    first_err.get_or_insert(Error::ReadBack(e));
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Realizes `ids` in one submit and reads them back, blocking.
    pub(crate) fn read(&self, ids: &[NodeId]) -> Result<Vec<Vec<f32>>> {
        let staged = self.run(ids, ids)?;
        let slots = map_all(&staged);
        if !slots.is_empty() {
            self.inner.gpu.wait()?;
        }
        self.collect(staged, &slots)
    }

    /// Realizes `ids` in one submit and reads them back without blocking the caller's thread on the GPU.
    pub(crate) async fn read_async(&self, ids: &[NodeId]) -> Result<Vec<Vec<f32>>> {
        let staged = self.run(ids, ids)?;
        let slots = map_all(&staged);
        MapsDone { device: self, slots: &slots }.await?;
        self.collect(staged, &slots)
    }
}

/// Resolves once every map callback has run. Each poll lets wgpu make progress without blocking; until then the
/// future asks to be polled again, which yields to the executor between checks.
struct MapsDone<'a> {
    device: &'a Device,
    slots: &'a [Slot],
}

impl Future for MapsDone<'_> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let gpu = &self.device.inner.gpu;
        if let Err(e) = gpu.device.poll(wgpu::PollType::Poll) {
            return Poll::Ready(Err(Error::DeviceLost(e.to_string())));
        }
        if let Err(e) = gpu.check_health() {
            return Poll::Ready(Err(e));
        }
        if self.slots.iter().all(|s| lock(s).is_some()) {
            Poll::Ready(Ok(()))
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}
