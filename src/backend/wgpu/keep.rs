//! Process-wide wgpu instances and devices: each is made once, a dropped `Device`'s wgpu device is kept and handed
//! to the next `Device` opened on the same adapter, and neither is ever destroyed.

// NVIDIA's Vulkan driver (checked with wgpu 30) can deadlock when one thread destroys a device or an instance while
// other threads work on other devices: stack dumps of hung test processes showed vkDestroyDevice waiting for one of the
// driver's own threads, which waited for a lock that vkCreateDevice, vkAllocateMemory and vkQueueSubmit on other
// threads waited for too. Test binaries, which open a device per test on many threads, hung in a fair share of runs
// (figures: docs/notes/source-measurements.md, `src/backend/wgpu/keep.rs`). Never destroying either avoids it, and
// reusing a device also saves the time that creating one costs. A dropped Device's buffers and pipelines are dropped
// with it, so the next owner starts from an empty device.

use crate::error::lock;
use std::sync::{Arc, Mutex};

/// Held while a `Device` is opened (adapters enumerated, a device taken or created): one at a time per process.
///
/// Test binaries open devices on many threads at once, and now and then one of them crashed just after starting: a core
/// dump showed a thread that had called a null function pointer while another was in
/// `vkEnumerateDeviceExtensionProperties`, under wgpu's adapter enumeration. Serial runs never crashed (figures:
/// docs/notes/source-measurements.md, `src/backend/wgpu/keep.rs`). Opening a device is rare and slow anyway, so
/// serializing it costs programs nothing.
#[cfg(not(target_arch = "wasm32"))]
pub fn opening() -> std::sync::MutexGuard<'static, ()> {
    static OPENING: Mutex<()> = Mutex::new(());
    lock(&OPENING)
}

/// The instance for a set of wgpu backends, made on first use.
pub fn instance(backends: wgpu::Backends) -> wgpu::Instance {
    static INSTANCES: Mutex<Vec<(wgpu::Backends, wgpu::Instance)>> = Mutex::new(Vec::new());
    let mut all = lock(&INSTANCES);
    if let Some((_, i)) = all.iter().find(|(b, _)| *b == backends) {
        return i.clone();
    }
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    let i = wgpu::Instance::new(desc);
    all.push((backends, i.clone()));
    i
}

/// Devices no `Device` uses now, with the adapter each was opened on. The features and limits lazor asks for
/// follow from the adapter alone, so any kept device of an adapter serves any new `Device` on it.
static IDLE: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

/// The flag a device's lost callback sets: installed once, when the device is created, and handed from owner to
/// owner with it, so a device lost while nobody used it is never handed out.
pub type Lost = Arc<Mutex<Option<String>>>;

/// A kept device: the adapter it was opened on, the device, its queue and its lost flag.
type Kept = (wgpu::AdapterInfo, wgpu::Device, wgpu::Queue, Lost);

/// A kept device of this adapter that was not lost, if one is idle: the one given back last. Lost ones stay in
/// the list: dropping them would destroy them.
pub fn take(adapter: &wgpu::AdapterInfo) -> Option<(wgpu::Device, wgpu::Queue, Lost)> {
    let mut idle = lock(&IDLE);
    let at = idle.iter().rposition(|(info, _, _, lost)| info == adapter && lock(lost).is_none())?;
    let (_, device, queue, lost) = idle.remove(at);
    Some((device, queue, lost))
}

/// Keeps a device its `Device` no longer uses, for the next one opened on `adapter`.
pub fn give_back(adapter: wgpu::AdapterInfo, device: wgpu::Device, queue: wgpu::Queue, lost: Lost) {
    lock(&IDLE).push((adapter, device, queue, lost));
}
