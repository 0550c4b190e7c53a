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
        let kept = dev.wgpu_device().clone();
        let adapter = dev.adapter_info();
        // Dropped with a realize held back (depth 0 holds everything): the next owner must not see it.
        dev.set_queue_depth(0);
        let held = &x + 1.0;
        held.realize().unwrap();
        drop((x, held));
        drop(dev);

        let next = gpu_devices().pop().expect("a wgpu device opens again");
        assert_eq!(next.adapter_info(), adapter);
        assert!(next.wgpu_device() == &kept, "the kept device is reused, not a new one created");
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
