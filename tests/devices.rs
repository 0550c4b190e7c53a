//! Opening and dropping devices: a dropped device's wgpu device is reused, never destroyed, and devices opened and
//! dropped on many threads at once all compute correctly.

mod common;

use common::{check, devices, gpu_devices};
use lazor::Tensor;
use std::sync::Mutex;

/// The tests here count on which wgpu device a new `Device` gets, so they do not overlap.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn a_dropped_devices_wgpu_device_serves_the_next_device_from_a_clean_start() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for dev in gpu_devices() {
        let x = Tensor::from_vec_on(vec![1.0, 2.0, 3.0], [3], &dev);
        check(&(&x * 2.0).exp(), 1e-6, 0.0, "first owner");
        let kept = dev.wgpu().expect("a wgpu device").device().clone();
        let adapter = dev.adapter_info();
        // Dropped with a realize held back (depth 0 holds everything): the next owner must not see it.
        dev.wgpu().expect("a wgpu device").set_queue_depth(0);
        let held = &x + 1.0;
        held.realize().unwrap();
        drop((x, held));
        drop(dev);

        let next = gpu_devices().pop().expect("a wgpu device opens again");
        assert_eq!(next.adapter_info(), adapter);
        assert!(
            next.wgpu().expect("a wgpu device").device() == &kept,
            "the kept device is reused, not a new one created"
        );
        // Nothing of the last owner carries over: no buffers, no pipelines, no counts.
        let s = next.stats();
        assert_eq!((s.realizes, s.live_buffer_bytes, s.pipelines_compiled, s.pool_bytes), (0, 0, 0, 0));
        let y = Tensor::from_vec_on(vec![4.0, -5.0], [2], &next);
        check(&(&y * 2.0).exp(), 1e-6, 0.0, "second owner");
        assert_eq!(next.stats().pipelines_compiled, 1, "its own pipeline cache starts empty");
    }
}

/// Each thread opens a device per round, realizes on it and drops it. NVIDIA's driver deadlocked here when lazor
/// destroyed devices (see src/backend/wgpu/keep.rs); the values check that reused devices compute right.
#[test]
fn devices_opened_and_dropped_on_many_threads() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    std::thread::scope(|s| {
        for t in 0..6 {
            s.spawn(move || {
                for round in 0..8 {
                    for dev in devices() {
                        let n = 1000 + 97 * t + round;
                        let v: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
                        let x = Tensor::from_vec_on(v, [n], &dev);
                        check(&(&x * 3.0 + 1.0), 1e-6, 0.0, "map");
                        check(&(&x * &x).sum_all(), 1e-5, 0.0, "sum of squares");
                    }
                }
            });
        }
    });
}

/// Every `Device` method answers on the CPU backend: what it is, what it runs on; what only wgpu has is not there
/// to be called (`Device::wgpu` is `None`), so nothing silently does nothing.
#[test]
fn a_cpu_device_answers_every_question() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dev = lazor::Device::cpu();
    assert_eq!(dev.backend(), "Cpu");
    let name = dev.adapter_name();
    assert!(!name.is_empty(), "the processor has a name");
    let info = dev.adapter_info();
    assert_eq!(info.device_type, wgpu::DeviceType::Cpu);
    assert_eq!(info.name, name);
    assert_eq!(info.backend, wgpu::Backend::Noop);
    assert!(dev.name().contains("CPU"), "{}", dev.name());
    assert!(format!("{dev:?}").contains("CPU"));
    assert!(dev.wgpu().is_none(), "the CPU backend has no wgpu side");
    dev.flush();
    dev.synchronize().unwrap();
    assert!(dev.max_tensor_bytes() > 0);
    for dev in gpu_devices() {
        assert_ne!(dev.backend(), "Cpu");
        let gpu = dev.wgpu().expect("a wgpu device has a wgpu side");
        gpu.set_queue_depth(3);
        assert_eq!(gpu.queue_depth(), 3);
        let _ = (gpu.device(), gpu.queue(), gpu.subgroups(), gpu.native_f16(), gpu.tensor_cores());
        assert_eq!(dev.adapter_info().name, dev.adapter_name());
    }
}
